//! Every operation through the verbs API over an in-memory fabric, with
//! the data checked.

mod common;

use common::*;
use roce_verbs::*;

#[test]
fn send_and_send_with_imm() {
    let (a, b) = pair(QpType::Rc);
    let src = a.pd.reg_mr(pattern(10_000, 1), Access::NONE).unwrap();
    let dst =
        b.pd.reg_mr(vec![0u8; 2 * 10_000], Access::LOCAL_WRITE)
            .unwrap();
    b.qp.post_recv(RecvWr {
        wr_id: 10,
        sgl: vec![dst.sge(0, 10_000)].into(),
    })
    .unwrap();
    b.qp.post_recv(RecvWr {
        wr_id: 11,
        sgl: vec![dst.sge(10_000, 10_000)].into(),
    })
    .unwrap();

    a.qp.post_send(SendWr::send(1, [src.sge_all()])).unwrap();
    let imm = SendWr::send_with_imm(2, [src.sge(0, 100)], 0xdead_beef);
    a.qp.post_send(imm).unwrap();

    for want in [1, 2] {
        let c = one(&a.cq);
        assert!(c.is_success(), "{c:?}");
        assert_eq!((c.wr_id(), c.opcode()), (want, WcOpcode::Send));
    }
    let r = one(&b.cq);
    assert_eq!(
        (r.wr_id(), r.opcode(), r.byte_len()),
        (10, WcOpcode::Recv, 10_000)
    );
    let r = one(&b.cq);
    assert_eq!(
        (r.wr_id(), r.byte_len(), r.imm_data()),
        (11, 100, 0xdead_beef)
    );
    assert!(r.wc_flags().contains(WcFlags::WITH_IMM));
    let got = dst.to_vec().unwrap();
    assert_eq!(&got[..10_000], &pattern(10_000, 1)[..]);
    assert_eq!(&got[10_000..10_100], &pattern(100, 1)[..]);
}

#[test]
fn write_write_with_imm_and_read() {
    let (a, b) = pair(QpType::Rc);
    let len = 300_000;
    let local = a.pd.reg_mr(pattern(len, 7), Access::LOCAL_WRITE).unwrap();
    let remote = b.pd.reg_mr(vec![0u8; len], ALL).unwrap();
    let r = remote.remote();

    a.qp.post_send(SendWr::write(1, [local.sge_all()], r.at(0)))
        .unwrap();
    assert!(one(&a.cq).is_success());
    assert_eq!(remote.to_vec().unwrap(), pattern(len, 7));

    // WRITE with immediate consumes a receive at the responder.
    b.qp.post_recv(RecvWr {
        wr_id: 50,
        sgl: vec![].into(),
    })
    .unwrap();
    let wr = SendWr::write_with_imm(2, [local.sge(0, 64)], r.at(1000), 42);
    a.qp.post_send(wr).unwrap();
    let c = one(&a.cq);
    assert_eq!(
        (c.wr_id(), c.opcode(), c.status()),
        (2, WcOpcode::RdmaWrite, WcStatus::Success)
    );
    let rc = one(&b.cq);
    assert_eq!(
        (rc.wr_id(), rc.opcode(), rc.imm_data()),
        (50, WcOpcode::RecvRdmaWithImm, 42)
    );

    // READ it all back into a cleared local region.
    remote.write(0, &pattern(len, 9)).unwrap();
    local.write(0, &vec![0u8; len]).unwrap();
    a.qp.post_send(SendWr::read(3, [local.sge_all()], r.at(0)))
        .unwrap();
    let c = one(&a.cq);
    assert_eq!(
        (c.wr_id(), c.opcode(), c.byte_len()),
        (3, WcOpcode::RdmaRead, len as u32)
    );
    assert_eq!(local.to_vec().unwrap(), pattern(len, 9));
}

#[test]
fn atomics() {
    let (a, b) = pair(QpType::Rc);
    let result = a.pd.reg_mr(vec![0u8; 16], Access::LOCAL_WRITE).unwrap();
    let target = b.pd.reg_mr(vec![0u8; 8], ALL).unwrap();
    target.write(0, &100u64.to_ne_bytes()).unwrap();
    let r = target.remote();

    let cas = SendOp::CompareSwap {
        remote: r.at(0),
        compare: 100,
        swap: 7,
    };
    a.qp.post_send(SendWr::new(1, cas, [result.sge(0, 8)]))
        .unwrap();
    let c = one(&a.cq);
    assert_eq!(
        (c.opcode(), c.status()),
        (WcOpcode::CompSwap, WcStatus::Success)
    );
    let faa = SendOp::FetchAdd {
        remote: r.at(0),
        add: 5,
    };
    a.qp.post_send(SendWr::new(2, faa, [result.sge(8, 8)]))
        .unwrap();
    let c = one(&a.cq);
    assert_eq!(
        (c.opcode(), c.status()),
        (WcOpcode::FetchAdd, WcStatus::Success)
    );

    let mut v = [0u8; 16];
    result.read(0, &mut v).unwrap();
    assert_eq!(
        u64::from_ne_bytes(v[..8].try_into().unwrap()),
        100,
        "CAS returns the old value"
    );
    assert_eq!(
        u64::from_ne_bytes(v[8..].try_into().unwrap()),
        7,
        "FAA returns the old value"
    );
    let mut t = [0u8; 8];
    target.read(0, &mut t).unwrap();
    assert_eq!(u64::from_ne_bytes(t), 12);
}

#[test]
fn ud_through_an_address_handle() {
    let (a, b) = pair(QpType::Ud);
    let qkey = ConnectOptions::default().qkey;
    let rx =
        b.pd.reg_mr(vec![0u8; 40 + 512], Access::LOCAL_WRITE)
            .unwrap();
    b.qp.post_recv(RecvWr {
        wr_id: 9,
        sgl: vec![rx.sge_all()].into(),
    })
    .unwrap();
    let ah = a.pd.create_ah(AhAttr::new(b.ctx.addrs()[0])).unwrap();
    let tx = a.pd.reg_mr(pattern(512, 3), Access::NONE).unwrap();
    a.qp.post_send_ud(SendWr::send(1, [tx.sge_all()]), &ah, b.qp.qpn(), qkey)
        .unwrap();
    assert!(one(&a.cq).is_success());
    let c = one(&b.cq);
    assert_eq!(
        (c.wr_id(), c.byte_len(), c.src_qp()),
        (9, 40 + 512, a.qp.qpn())
    );
    assert!(c.wc_flags().contains(WcFlags::GRH));
    let got = rx.to_vec().unwrap();
    assert_eq!(&got[40..], &pattern(512, 3)[..]);

    // An AH of another PD, and one with a bad GID index, are refused.
    let other = a
        .ctx
        .alloc_pd()
        .create_ah(AhAttr::new(b.ctx.addrs()[0]))
        .unwrap();
    let err =
        a.qp.post_send_ud(SendWr::send(2, []), &other, b.qp.qpn(), qkey);
    assert_eq!(err, Err(PostError::WrongPd));
    let bad = AhAttr {
        sgid_index: 3,
        ..AhAttr::new(b.ctx.addrs()[0])
    };
    assert!(matches!(
        a.pd.create_ah(bad),
        Err(CreateError::InvalidArgument(_))
    ));
}

#[test]
fn srq_feeds_two_qps_and_raises_its_limit() {
    let fabric = roce_io::Fabric::new();
    let a = Context::open_fabric(&fabric, "10.0.0.1".parse().unwrap()).unwrap();
    let b = Context::open_fabric(&fabric, "10.0.0.2".parse().unwrap()).unwrap();
    let (pa, pb) = (a.alloc_pd(), b.alloc_pd());
    let (ca, cb) = (
        a.create_cq(64, None).unwrap(),
        b.create_cq(64, None).unwrap(),
    );
    let srq = pb.create_srq(16).unwrap();
    let rx = pb.reg_mr(vec![0u8; 4 * 256], Access::LOCAL_WRITE).unwrap();
    for i in 0..4u64 {
        srq.post_recv(RecvWr {
            wr_id: 100 + i,
            sgl: vec![rx.sge(i * 256, 256)].into(),
        })
        .unwrap();
    }
    assert_eq!(srq.len(), 4);
    srq.set_limit(3).unwrap();
    let mut pairs = Vec::new();
    for i in 0..2u32 {
        let qa = pa
            .create_qp(&QpInitAttr::new(QpType::Rc, &ca, &ca))
            .unwrap();
        let qb = pb
            .create_qp(&QpInitAttr::new(QpType::Rc, &cb, &cb).srq(&srq))
            .unwrap();
        let (ea, eb) = (qa.endpoint(Psn::new(10 * i)), qb.endpoint(Psn::new(20 * i)));
        qa.connect(ea.psn, &eb, &ConnectOptions::default()).unwrap();
        qb.connect(eb.psn, &ea, &ConnectOptions::default()).unwrap();
        // A QP with an SRQ has no receive queue of its own.
        assert!(qb
            .post_recv(RecvWr {
                wr_id: 0,
                sgl: vec![].into()
            })
            .is_err());
        pairs.push((qa, qb));
    }
    for (i, (qa, _)) in pairs.iter().enumerate() {
        qa.post_send_owned(SendWr::send(i as u64, []), vec![i as u8 + 1; 200])
            .unwrap();
        assert!(one(&ca).is_success());
    }
    let mut got = cb.poll_until(2, WAIT).unwrap();
    got.sort_by_key(|c| c.wr_id());
    assert_eq!(
        got.iter().map(|c| c.wr_id()).collect::<Vec<_>>(),
        vec![100, 101]
    );
    let qpns: Vec<Qpn> = got.iter().map(|c| c.qp_num()).collect();
    assert!(qpns.contains(&pairs[0].1.qpn()) && qpns.contains(&pairs[1].1.qpn()));
    let bytes = rx.to_vec().unwrap();
    let mut firsts = [bytes[0], bytes[256]];
    firsts.sort();
    assert_eq!(firsts, [1, 2]);
    assert_eq!(srq.len(), 2);
    let ev = b.get_async_event(Some(WAIT));
    assert_eq!(ev, Some(AsyncEvent::SrqLimitReached(srq.id())));
}

#[test]
fn unsignaled_sends_complete_silently_and_release_their_regions() {
    let (a, b) = pair(QpType::Rc);
    let dst = b.pd.reg_mr(vec![0u8; 4096], ALL).unwrap();
    let r = dst.remote();
    let src = a.pd.reg_mr(pattern(4096, 5), Access::NONE).unwrap();
    for i in 0..4u64 {
        let mut wr = SendWr::write(i, [src.sge(i * 1024, 1024)], r.at(i * 1024));
        if i < 3 {
            wr.flags = SendFlags::default();
        }
        a.qp.post_send(wr).unwrap();
    }
    let c = one(&a.cq);
    assert_eq!(c.wr_id(), 3, "only the signaled WR completes");
    assert!(a.cq.poll_one().unwrap().is_none());
    assert_eq!(dst.to_vec().unwrap(), pattern(4096, 5));
    // Every WR released the source region.
    assert!(src.into_inner().is_ok());
}

#[test]
fn post_errors_are_values() {
    let (a, b) = pair(QpType::Rc);
    let mr = a.pd.reg_mr(vec![0u8; 64], Access::LOCAL_WRITE).unwrap();
    let bad = Sge {
        addr: mr.addr(),
        length: 64,
        lkey: Lkey::new(0x7777),
    };
    assert_eq!(
        a.qp.post_send(SendWr::send(1, [bad])),
        Err(PostError::UnknownLkey(Lkey::new(0x7777)))
    );
    assert_eq!(
        a.qp.post_send(SendWr::send(1, [mr.sge(32, 64)])),
        Err(PostError::SgeOutOfBounds(mr.lkey()))
    );
    let same_ctx_other_pd = a.ctx.alloc_pd().reg_mr(vec![0u8; 8], Access::NONE).unwrap();
    assert_eq!(
        a.qp.post_send(SendWr::send(1, [same_ctx_other_pd.sge(0, 8)])),
        Err(PostError::WrongPd)
    );
    assert!(matches!(
        a.ctx.create_cq(0, None),
        Err(CreateError::InvalidArgument(_))
    ));
    assert!(matches!(
        a.pd.reg_mr(vec![0u8; 8], Access::REMOTE_WRITE),
        Err(RegMrError::InvalidAccess)
    ));
    // Modify errors are values too: RTS -> INIT is illegal.
    let attr = QpAttr {
        qp_state: QpState::Init,
        ..QpAttr::default()
    };
    assert!(matches!(
        a.qp.modify(&attr, QpAttrMask::STATE),
        Err(ModifyQpError::Transition(
            ModifyError::IllegalTransition { .. }
        ))
    ));
    assert_eq!(a.qp.state(), QpState::Rts);
    assert_eq!(a.qp.query().unwrap().dest_qp_num, b.qp.qpn());
}

/// A list of WRITEs posted at once lands in order; a WR refused in the
/// middle stops the list there, as `bad_wr` does.
#[test]
fn post_send_list_posts_in_order_and_stops_at_a_refused_wr() {
    let (a, b) = pair(QpType::Rc);
    let local = a.pd.reg_mr(pattern(64 * 100, 3), Access::NONE).unwrap();
    let remote = b.pd.reg_mr(vec![0u8; 64 * 100], ALL).unwrap();
    let r = remote.remote();
    let write = |i: u64| SendWr::write(i, [local.sge(64 * i, 64)], r.at(64 * i));
    a.qp.post_send_list((0..100).map(write)).unwrap();
    let done = a.cq.poll_until(100, WAIT).unwrap();
    let ids: Vec<u64> = done.iter().map(|c| c.wr_id()).collect();
    assert_eq!(ids, (0..100).collect::<Vec<_>>());
    assert!(done.iter().all(|c| c.is_success()));
    assert_eq!(remote.to_vec().unwrap(), pattern(64 * 100, 3));

    // WR 2 of 4 names an lkey that does not exist: 0 and 1 are posted.
    let mut bad = write(101);
    bad.payload = roce_core::Payload::Sgl(
        vec![Sge {
            addr: 0,
            length: 8,
            lkey: roce_core::Lkey::new(0xdead),
        }]
        .into(),
    );
    let list = vec![write(0), write(1), bad, write(3)];
    let err = a.qp.post_send_list(list).unwrap_err();
    assert_eq!(err.posted, 2);
    assert!(matches!(err.error, PostError::UnknownLkey(_)), "{err:?}");
    let ids: Vec<u64> =
        a.cq.poll_until(2, WAIT)
            .unwrap()
            .iter()
            .map(|c| c.wr_id())
            .collect();
    assert_eq!(ids, [0, 1]);
    std::thread::sleep(std::time::Duration::from_millis(50));
    assert_eq!(
        a.cq.poll_until(1, std::time::Duration::from_millis(50))
            .unwrap()
            .len(),
        0
    );
}
