//! The typed Rust API over the in-memory fabric: each operation of
//! `SendOp` reaches the remote address it carries (a conversion that lost
//! or swapped the address, key or operands would land elsewhere), and each
//! kind of call refuses a concrete bad input with its own error type.

mod common;

use common::*;
use roce_verbs::*;

/// A WRITE at an offset lands exactly there and nowhere else.
#[test]
fn a_write_lands_at_the_remote_address_it_carries() {
    let (a, b) = pair(QpType::Rc);
    let src = a.pd.reg_mr(pattern(64, 7), Access::NONE).unwrap();
    let dst = b.pd.reg_mr(vec![0u8; 512], ALL).unwrap();
    let at = dst.remote().at(200);
    a.qp.post_send(SendWr::write(1, [src.sge_all()], at))
        .unwrap();
    let c = one(&a.cq);
    assert!(c.is_success(), "{:?}", c.status());
    let got = dst.to_vec().unwrap();
    assert_eq!(&got[200..264], &pattern(64, 7)[..]);
    assert!(got[..200].iter().chain(&got[264..]).all(|&x| x == 0));
}

/// WRITE with immediate: the data at its address, the immediate in the
/// responder's completion; READ: the bytes of its address come back.
#[test]
fn write_with_imm_and_read_use_their_remote_and_operands() {
    let (a, b) = pair(QpType::Rc);
    let src = a.pd.reg_mr(pattern(32, 1), ALL).unwrap();
    let dst = b.pd.reg_mr(pattern(256, 9), ALL).unwrap();
    let r = dst.remote();
    b.qp.post_recv(RecvWr::new(5, [])).unwrap();
    let wr = SendWr::write_with_imm(1, [src.sge_all()], r.at(64), 0x1234_5678);
    a.qp.post_send(wr).unwrap();
    assert!(one(&a.cq).is_success());
    let c = one(&b.cq);
    assert_eq!((c.wr_id(), c.imm_data()), (5, 0x1234_5678));
    assert_eq!(&dst.to_vec().unwrap()[64..96], &pattern(32, 1)[..]);

    // READ 16 bytes at offset 128 into the local region's start.
    a.qp.post_send(SendWr::read(2, [src.sge(0, 16)], r.at(128)))
        .unwrap();
    assert!(one(&a.cq).is_success());
    let mut back = [0u8; 16];
    src.read(0, &mut back).unwrap();
    assert_eq!(&back[..], &pattern(256, 9)[128..144]);
}

/// The atomics act on the 8 bytes at their address with their operands.
#[test]
fn atomics_act_at_their_address_with_their_operands() {
    let (a, b) = pair(QpType::Rc);
    let mut init = vec![0u8; 32];
    init[16..24].copy_from_slice(&100u64.to_ne_bytes());
    let target = b.pd.reg_mr(init, ALL).unwrap();
    let result = a.pd.reg_mr(vec![0u8; 16], ALL).unwrap();
    let at = target.remote().at(16);

    a.qp.post_send(SendWr::fetch_add(1, [result.sge(0, 8)], at, 5))
        .unwrap();
    assert!(one(&a.cq).is_success());
    // Compare with the value after the add: the swap happens.
    let cas = SendWr::compare_swap(2, [result.sge(8, 8)], at, 105, 7);
    a.qp.post_send(cas).unwrap();
    assert!(one(&a.cq).is_success());

    let r = result.to_vec().unwrap();
    let word = |b: &[u8], i: usize| u64::from_ne_bytes(b[i..i + 8].try_into().unwrap());
    assert_eq!((word(&r, 0), word(&r, 8)), (100, 105));
    let t = target.to_vec().unwrap();
    assert_eq!((word(&t, 8), word(&t, 16), word(&t, 24)), (0, 7, 0));
}

/// UD sends in a list, each to its destination.
#[test]
fn ud_list_sends_each_wr_to_its_destination() {
    let (a, b) = pair(QpType::Ud);
    let qkey = ConnectOptions::default().qkey;
    let rx = b.pd.reg_mr(vec![0u8; 2 * 64], Access::LOCAL_WRITE).unwrap();
    for i in 0..2 {
        b.qp.post_recv(RecvWr::new(i, [rx.sge(i * 64, 64)]))
            .unwrap();
    }
    let tx = a.pd.reg_mr(pattern(48, 2), Access::NONE).unwrap();
    let ah = a.pd.create_ah(AhAttr::new(b.ctx.addrs()[0])).unwrap();
    let dest = ah.ud_dest(b.qp.qpn(), qkey);
    let wrs = [
        (SendWr::send(1, [tx.sge(0, 8)]), dest),
        (SendWr::send_with_imm(2, [tx.sge(8, 8)], 42), dest),
    ];
    a.qp.post_send_ud_list(wrs).unwrap();
    let done = a.cq.poll_until(2, WAIT).unwrap();
    assert!(done.iter().all(|c| c.is_success()));
    let got = b.cq.poll_until(2, WAIT).unwrap();
    assert_eq!(got.len(), 2);
    assert_eq!(got[1].imm_data(), 42);
    assert!(got[1].wc_flags().contains(WcFlags::WITH_IMM));
    // 40 bytes of GRH, then the payload.
    let data = rx.to_vec().unwrap();
    assert_eq!(&data[40..48], &pattern(48, 2)[0..8]);
    assert_eq!(&data[64 + 40..64 + 48], &pattern(48, 2)[8..16]);
}

/// Posts refuse with `PostError`: a receive naming no region, a send
/// before the QP is ready, an SRQ receive of another PD's region, a UD
/// send through another PD's address handle.
#[test]
fn posts_refuse_with_post_errors() {
    let (a, _b) = pair(QpType::Rc);
    let bogus = Sge {
        addr: 0,
        length: 8,
        lkey: Lkey::new(0x4242),
    };
    assert_eq!(
        a.qp.post_recv(RecvWr::new(1, [bogus])),
        Err(PostError::UnknownLkey(Lkey::new(0x4242)))
    );

    let fresh =
        a.pd.create_qp(&QpInitAttr::new(QpType::Rc, &a.cq, &a.cq))
            .unwrap();
    let mr = a.pd.reg_mr(vec![0u8; 8], Access::LOCAL_WRITE).unwrap();
    assert_eq!(
        fresh.post_send(SendWr::send(1, [mr.sge_all()])),
        Err(PostError::BadState(QpState::Reset))
    );

    let srq = a.pd.create_srq(4).unwrap();
    let other = a
        .ctx
        .alloc_pd()
        .reg_mr(vec![0u8; 8], Access::LOCAL_WRITE)
        .unwrap();
    assert_eq!(
        srq.post_recv(RecvWr::new(1, [other.sge_all()])),
        Err(PostError::WrongPd)
    );

    // A queue of one entry refuses the second receive.
    let small = a.pd.create_srq(1).unwrap();
    small.post_recv(RecvWr::new(1, [mr.sge_all()])).unwrap();
    assert_eq!(
        small.post_recv(RecvWr::new(2, [mr.sge_all()])),
        Err(PostError::QueueFull)
    );

    // The owned-buffer and list forms carry the same type.
    let owned = fresh
        .post_send_owned(SendWr::send(3, []), vec![1, 2, 3])
        .unwrap_err();
    assert_eq!(
        (owned.buffer, owned.error),
        (vec![1, 2, 3], PostError::BadState(QpState::Reset))
    );
    let list = a.qp.post_send_list([SendWr::send(4, [bogus])]).unwrap_err();
    assert_eq!(
        (list.posted, list.error),
        (0, PostError::UnknownLkey(Lkey::new(0x4242)))
    );
}

/// Creation refuses with `CreateError`, modify with `ModifyQpError`,
/// registration with `RegMrError`.
#[test]
fn creation_modify_and_registration_refuse_with_their_own_errors() {
    let (a, b) = pair(QpType::Rc);
    assert!(matches!(
        a.pd.create_srq(0),
        Err(CreateError::InvalidArgument(_))
    ));
    let foreign_srq = a.ctx.alloc_pd().create_srq(4).unwrap();
    let attr = QpInitAttr::new(QpType::Rc, &a.cq, &a.cq).srq(&foreign_srq);
    assert_eq!(a.pd.create_qp(&attr).unwrap_err(), CreateError::WrongPd);
    let channel = b.ctx.create_comp_channel();
    assert_eq!(
        a.ctx.create_cq(4, Some(&channel)).unwrap_err(),
        CreateError::WrongContext
    );

    let e = a.qp.ready_ud(Psn::new(1), &ConnectOptions::default());
    assert!(matches!(e, Err(ModifyQpError::InvalidArgument(_))), "{e:?}");

    // SAFETY: refused before anything is registered.
    let e = unsafe { a.pd.reg_mr_raw(std::ptr::null_mut(), 8, Access::NONE) }.unwrap_err();
    assert!(matches!(e, RegMrError::InvalidArgument(_)), "{e:?}");
}

/// Every call's error converts into the general `Error` (with the call's
/// error as its source) and into `Box<dyn Error>`, so `?` works in either.
#[test]
fn each_error_type_converts_for_question_mark() {
    fn general(qp: &QueuePair, mr: &MemoryRegion) -> Result<(), Error> {
        qp.post_send(SendWr::send(1, [mr.sge(4, 8)]))?;
        Ok(())
    }
    fn boxed(pd: &ProtectionDomain) -> Result<(), Box<dyn std::error::Error>> {
        pd.create_srq(0)?;
        Ok(())
    }
    let (a, _b) = pair(QpType::Rc);
    let mr = a.pd.reg_mr(vec![0u8; 8], Access::NONE).unwrap();
    let e = general(&a.qp, &mr).unwrap_err();
    assert_eq!(e, Error::Post(PostError::SgeOutOfBounds(mr.lkey())));
    let source = std::error::Error::source(&e).map(|s| s.to_string());
    assert_eq!(
        source,
        Some(PostError::SgeOutOfBounds(mr.lkey()).to_string())
    );
    let e = boxed(&a.pd).unwrap_err();
    assert!(e.downcast_ref::<CreateError>().is_some(), "{e}");
    // Each general error names the call's error as its source.
    let general: [(Error, String); 3] = [
        (
            ModifyQpError::NoSuchQp.into(),
            ModifyQpError::NoSuchQp.to_string(),
        ),
        (
            RegMrError::InvalidAccess.into(),
            RegMrError::InvalidAccess.to_string(),
        ),
        (CqError::Overflow.into(), CqError::Overflow.to_string()),
    ];
    for (e, want) in general {
        let source = std::error::Error::source(&e).map(|s| s.to_string());
        assert_eq!(source.as_deref(), Some(want.as_str()), "{e:?}");
    }
}

/// A CQ that overflowed fails every poll with `CqError::Overflow`; an SRQ
/// limit above its size is `SrqLimitError`; a region copy outside the
/// region is `RegionError`. Each converts into the general `Error`.
#[test]
fn cq_srq_and_region_calls_fail_with_their_own_errors() {
    let (a, b) = pair(QpType::Rc);
    let cq = a.ctx.create_cq(2, None).unwrap();
    let (qa, _qb) = rc_pair_on(&a, &b, &cq);
    let src = a.pd.reg_mr(pattern(16, 3), Access::NONE).unwrap();
    let dst = b.pd.reg_mr(vec![0u8; 16], ALL).unwrap();
    // Three signaled WRITEs into a CQ of two, nobody polling until they
    // are acknowledged (one ACK may cover all three).
    for i in 0..3 {
        qa.post_send(SendWr::write(i, [src.sge_all()], dst.remote().at(0)))
            .unwrap();
    }
    let end = std::time::Instant::now() + WAIT;
    while qa.counters().rx_packets == 0 && std::time::Instant::now() < end {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    std::thread::sleep(std::time::Duration::from_millis(200));
    assert_eq!(cq.poll_one().unwrap_err(), CqError::Overflow);
    let mut v = Vec::new();
    assert_eq!(cq.poll(&mut v, 4), Err(CqError::Overflow));
    let general: Error = cq.poll_until(1, WAIT).unwrap_err().into();
    assert_eq!(general, Error::Cq(CqError::Overflow));

    let srq = a.pd.create_srq(8).unwrap();
    assert_eq!(
        srq.set_limit(9),
        Err(SrqLimitError::AboveMaxWr { max_wr: 8 })
    );
    srq.set_limit(8).unwrap();

    let mut out = [0u8; 8];
    assert_eq!(src.read(12, &mut out), Err(RegionError::OutOfBounds));
    assert_eq!(src.write(u64::MAX, &out), Err(RegionError::OutOfBounds));
    src.read(8, &mut out).unwrap();
    assert_eq!(&out[..], &pattern(16, 3)[8..]);
}
