//! Every error path the issue lists: remote access violations, misaligned
//! atomics, RNR with and without retries, retry exhaustion on a dead peer,
//! wrong-state posts, wrong modify masks, CQ overflow, flushing, PSN wrap,
//! and a receive buffer that is too small.

mod common;

use common::*;
use roce_core::*;

fn write_wr(w: &World, id: u64, len: u32, va: u64, rkey: Rkey) -> SendWr {
    SendWr::rdma(id, SendOp::Write, [w.hosts[0].sge(0, len)], va, rkey)
}

/// Posts `wr` on A, runs to quiescence, returns A's and B's completions.
fn run(w: &mut World, qa: Qpn, wr: impl FnOnce(&World) -> SendWr) -> (Vec<Wc>, Vec<Wc>) {
    let wr = wr(w);
    w.hosts[0].dev.post_send(qa, wr).unwrap();
    w.settle(1_000_000);
    (w.hosts[0].poll(), w.hosts[1].poll())
}

#[test]
fn bad_rkey_out_of_bounds_and_missing_rights_are_remote_access_errors() {
    // Bad rkey.
    let mut w = World::new(1 << 16);
    let (qa, qb) = w.connect(QpType::Rc, 1024);
    let va = w.hosts[1].base;
    let bad = Rkey::new(w.hosts[1].mr.rkey.value() ^ 0x55);
    let (ca, _) = run(&mut w, qa, |w| write_wr(w, 1, 64, va, bad));
    assert_eq!((ca[0].wr_id, ca[0].status), (1, WcStatus::RemAccessErr));
    assert_eq!(w.hosts[0].dev.qp(qa).unwrap().state(), QpState::Err);
    assert_eq!(
        w.hosts[1].dev.qp(qb).unwrap().state(),
        QpState::Err,
        "the responder enters ERR too"
    );
    assert_eq!(w.hosts[1].dev.qp_counters(qb).unwrap().error_naks_sent, 1);

    // One byte past the end of the region.
    let mut w = World::new(1 << 16);
    let (qa, _) = w.connect(QpType::Rc, 1024);
    let end = w.hosts[1].base + (1 << 16) - 63;
    let rkey = w.hosts[1].mr.rkey;
    let (ca, _) = run(&mut w, qa, |w| write_wr(w, 2, 64, end, rkey));
    assert_eq!(ca[0].status, WcStatus::RemAccessErr);
    // An address below the region, and a READ whose length wraps around.
    let mut w = World::new(1 << 16);
    let (qa, _) = w.connect(QpType::Rc, 1024);
    let rkey = w.hosts[1].mr.rkey;
    let below = w.hosts[1].base - 8;
    let (ca, _) = run(&mut w, qa, |w| {
        SendWr::rdma(3, SendOp::Read, [w.hosts[0].sge(0, 16)], below, rkey)
    });
    assert_eq!(ca[0].status, WcStatus::RemAccessErr);

    // The QP grants no remote write.
    let mut w = World::new(1 << 16);
    let (qa, _) = w.connect_with(QpType::Rc, 1024, |i, a| {
        if i == 1 {
            a.qp_access_flags = Access::LOCAL_WRITE | Access::REMOTE_READ;
        }
    });
    let (va, rkey) = (w.hosts[1].base, w.hosts[1].mr.rkey);
    let (ca, _) = run(&mut w, qa, |w| write_wr(w, 4, 8, va, rkey));
    assert_eq!(ca[0].status, WcStatus::RemAccessErr);

    // The region grants no remote atomic.
    let mut w = World::new(1 << 16);
    let (qa, _) = w.connect(QpType::Rc, 1024);
    let pd = w.hosts[1].pd;
    let ro = w.hosts[1]
        .dev
        .reg_mr(
            pd,
            0x5000_0000,
            Box::new(vec![0u8; 64]),
            Access::REMOTE_READ,
        )
        .unwrap();
    let wr = SendWr::rdma(
        5,
        SendOp::FetchAdd { add: 1 },
        [w.hosts[0].sge(0, 8)],
        0x5000_0000,
        ro.rkey,
    );
    let (ca, _) = run(&mut w, qa, |_| wr);
    assert_eq!(ca[0].status, WcStatus::RemAccessErr);
    let mut word = [0u8; 8];
    w.hosts[1]
        .dev
        .mr_read(ro, pd, 0x5000_0000, &mut word)
        .unwrap();
    assert_eq!(word, [0; 8], "memory untouched");
}

#[test]
fn misaligned_atomic_is_an_invalid_request() {
    let mut w = World::new(1 << 16);
    let (qa, _) = w.connect(QpType::Rc, 1024);
    let (va, rkey) = (w.hosts[1].base + 4, w.hosts[1].mr.rkey);
    let wr = SendWr::rdma(
        1,
        SendOp::CompareSwap {
            compare: 0,
            swap: 1,
        },
        [w.hosts[0].sge(0, 8)],
        va,
        rkey,
    );
    let (ca, _) = run(&mut w, qa, |_| wr);
    assert_eq!((ca[0].wr_id, ca[0].status), (1, WcStatus::RemInvReqErr));
}

#[test]
fn flush_after_error_completes_every_outstanding_wr() {
    let mut w = World::new(1 << 16);
    let (qa, qb) = w.connect(QpType::Rc, 1024);
    w.hosts[1]
        .dev
        .post_recv(
            qb,
            RecvWr {
                wr_id: 70,
                sgl: vec![w.hosts[1].sge(0, 64)].into(),
            },
        )
        .unwrap();
    w.hosts[1]
        .dev
        .post_recv(
            qb,
            RecvWr {
                wr_id: 71,
                sgl: vec![w.hosts[1].sge(0, 64)].into(),
            },
        )
        .unwrap();
    let bad = Rkey::new(1);
    let va = w.hosts[1].base;
    w.hosts[0]
        .dev
        .post_send(qa, write_wr(&w, 1, 8, va, bad))
        .unwrap();
    let mut unsignaled = SendWr::send(2, [w.hosts[0].sge(0, 8)]);
    unsignaled.flags = SendFlags::default();
    w.hosts[0].dev.post_send(qa, unsignaled).unwrap();
    w.hosts[0]
        .dev
        .post_send(qa, SendWr::send(3, [w.hosts[0].sge(0, 8)]))
        .unwrap();
    w.settle(1_000_000);
    let ca = w.hosts[0].poll();
    let ids: Vec<(u64, WcStatus)> = ca.iter().map(|c| (c.wr_id, c.status)).collect();
    assert_eq!(
        ids,
        vec![
            (1, WcStatus::RemAccessErr),
            (2, WcStatus::WrFlushErr),
            (3, WcStatus::WrFlushErr)
        ]
    );
    // The responder flushed its receives.
    let cb = w.hosts[1].poll();
    let ids: Vec<(u64, WcStatus)> = cb.iter().map(|c| (c.wr_id, c.status)).collect();
    assert_eq!(
        ids,
        vec![(70, WcStatus::WrFlushErr), (71, WcStatus::WrFlushErr)]
    );
    // Posting in ERR flushes at once.
    w.hosts[0].dev.post_send(qa, SendWr::send(4, [])).unwrap();
    assert_eq!(w.hosts[0].poll()[0].status, WcStatus::WrFlushErr);
    // An async event says so.
    assert_eq!(w.hosts[0].dev.poll_event(), Some(AsyncEvent::QpFatal(qa)));
}

/// A requester that fails (its WRITE is NAKed) takes its QP to the error
/// state, and that QP's receive queue is flushed after its send queue.
#[test]
fn a_failing_requester_flushes_its_receive_queue_too() {
    let mut w = World::new(1 << 16);
    let (qa, _) = w.connect(QpType::Rc, 1024);
    recv(&mut w, 0, qa, 50, 0, 64);
    let va = w.hosts[1].base;
    let bad = Rkey::new(w.hosts[1].mr.rkey.value() ^ 0x55);
    let (ca, _) = run(&mut w, qa, |w| write_wr(w, 1, 8, va, bad));
    assert_eq!(
        statuses(&ca),
        vec![(1, WcStatus::RemAccessErr), (50, WcStatus::WrFlushErr)]
    );
}

/// The other way round: the responder fails (a WRITE with a bad R_Key
/// arrives), and its QP's send queue is flushed as well as its receive
/// queue. Here B's SEND waits on RNR NAKs (A posted no receive, and
/// `rnr_retry` 7 retries for ever) when A's bad WRITE reaches B: the SEND
/// completes with WR_FLUSH_ERR, after B's receive.
#[test]
fn a_failing_responder_flushes_its_send_queue_too() {
    let mut w = World::new(1 << 16);
    let (qa, qb) = w.connect(QpType::Rc, 1024);
    recv(&mut w, 1, qb, 70, 0, 64);
    w.hosts[1]
        .dev
        .post_send(qb, SendWr::send(9, [w.hosts[1].sge(0, 8)]))
        .unwrap();
    let waiting = w.run_until(10_000, |w| {
        w.hosts[1].dev.qp_counters(qb).unwrap().rnr_naks_received >= 2
    });
    assert!(waiting, "B's SEND never met an RNR NAK");
    assert!(
        w.hosts[1].poll().is_empty(),
        "the SEND is still outstanding"
    );
    let va = w.hosts[1].base;
    let bad = Rkey::new(w.hosts[1].mr.rkey.value() ^ 0x55);
    let (ca, cb) = run(&mut w, qa, |w| write_wr(w, 1, 8, va, bad));
    assert_eq!(
        statuses(&ca),
        vec![(1, WcStatus::RemAccessErr)],
        "A's WRITE is NAKed"
    );
    assert_eq!(w.hosts[1].dev.qp(qb).unwrap().state(), QpState::Err);
    assert_eq!(
        statuses(&cb),
        vec![(70, WcStatus::WrFlushErr), (9, WcStatus::WrFlushErr)],
        "B's receive and its SEND are both flushed"
    );
}

#[test]
fn rnr_with_no_retries_fails_and_with_retries_succeeds() {
    // rnr_retry 0: the first RNR NAK ends the WR.
    let mut w = World::new(1 << 16);
    let (qa, qb) = w.connect_with(QpType::Rc, 1024, |_, a| a.rnr_retry = 0);
    let (ca, _) = run(&mut w, qa, |w| SendWr::send(1, [w.hosts[0].sge(0, 100)]));
    assert_eq!((ca[0].wr_id, ca[0].status), (1, WcStatus::RnrRetryExcErr));
    assert_eq!(w.hosts[1].dev.qp_counters(qb).unwrap().rnr_naks_sent, 1);
    assert_eq!(w.hosts[0].dev.qp_counters(qa).unwrap().rnr_naks_received, 1);

    // rnr_retry 3 with timer code 1 (10 µs): the receive is posted after
    // two RNR NAKs, and the SEND then completes.
    let mut w = World::new(1 << 16);
    let (qa, qb) = w.connect_with(QpType::Rc, 1024, |_, a| {
        a.rnr_retry = 3;
        a.min_rnr_timer = 1;
    });
    w.hosts[0].write(0, b"hello rnr");
    w.hosts[0]
        .dev
        .post_send(qa, SendWr::send(2, [w.hosts[0].sge(0, 9)]))
        .unwrap();
    let done = w.run_until(100_000, |w| {
        w.hosts[1].dev.qp_counters(qb).unwrap().rnr_naks_sent >= 2
    });
    assert!(done);
    let sge = w.hosts[1].sge(512, 64);
    w.hosts[1]
        .dev
        .post_recv(
            qb,
            RecvWr {
                wr_id: 20,
                sgl: vec![sge].into(),
            },
        )
        .unwrap();
    w.settle(100_000);
    assert_eq!(w.hosts[0].poll()[0].status, WcStatus::Success);
    let cb = w.hosts[1].poll();
    assert_eq!((cb[0].wr_id, cb[0].byte_len), (20, 9));
    assert_eq!(w.hosts[1].read(512, 9), b"hello rnr");

    // rnr_retry 7 waits forever: 50 RNR NAKs later it still has not failed.
    let mut w = World::new(1 << 16);
    let (qa, qb) = w.connect_with(QpType::Rc, 1024, |_, a| a.rnr_retry = 7);
    w.hosts[0]
        .dev
        .post_send(qa, SendWr::send(3, [w.hosts[0].sge(0, 9)]))
        .unwrap();
    assert!(w.run_until(1_000_000, |w| w.hosts[1]
        .dev
        .qp_counters(qb)
        .unwrap()
        .rnr_naks_sent
        >= 50));
    assert!(w.hosts[0].poll().is_empty());
    assert_eq!(w.hosts[0].dev.qp(qa).unwrap().state(), QpState::Rts);
}

#[test]
fn dead_peer_exhausts_retries_after_the_expected_time() {
    // timeout 10 = 4.096 µs × 2^10 = 4.194304 ms; retry_cnt 3: the first
    // send plus 3 retries, each waiting one timeout, then RETRY_EXC_ERR.
    let mut w = World::new(1 << 16);
    let (qa, _) = w.connect_with(QpType::Rc, 1024, |_, a| {
        a.timeout = 10;
        a.retry_cnt = 3;
    });
    w.filter = Box::new(|_, _| Verdict::Drop);
    let start = w.now;
    w.hosts[0]
        .dev
        .post_send(qa, SendWr::send(1, [w.hosts[0].sge(0, 3000)]))
        .unwrap();
    w.settle(1_000_000);
    let ca = w.hosts[0].poll();
    assert_eq!((ca[0].wr_id, ca[0].status), (1, WcStatus::RetryExcErr));
    let c = w.hosts[0].dev.qp_counters(qa).unwrap();
    assert_eq!(c.timeouts, 4);
    // 3 packets (3000 bytes at MTU 1024) sent again 3 times.
    assert_eq!(c.retransmitted, 9);
    let elapsed = w.now - start;
    assert_eq!(elapsed, 4 * 4_194_304, "failed after exactly four timeouts");
}

#[test]
fn posting_in_the_wrong_state_and_wrong_masks_are_refused() {
    let mut w = World::new(1 << 16);
    let h = &mut w.hosts[0];
    let init = QpInitAttr {
        qp_type: QpType::Rc,
        pd: h.pd,
        send_cq: h.cq,
        recv_cq: h.cq,
        srq: None,
        cap: QpCaps::default(),
        sq_sig_all: false,
    };
    let qpn = h.dev.create_qp(init).unwrap();
    let sge = h.sge(0, 8);
    assert_eq!(
        h.dev.post_send(qpn, SendWr::send(1, [sge])),
        Err(PostError::BadState(QpState::Reset))
    );
    assert_eq!(
        h.dev.post_recv(
            qpn,
            RecvWr {
                wr_id: 1,
                sgl: vec![sge].into()
            }
        ),
        Err(PostError::BadState(QpState::Reset))
    );
    // RESET -> INIT without ACCESS_FLAGS.
    let a = QpAttr {
        qp_state: QpState::Init,
        ..QpAttr::default()
    };
    let err = h
        .dev
        .modify_qp(
            qpn,
            &a,
            QpAttrMask::STATE | QpAttrMask::PKEY_INDEX | QpAttrMask::PORT,
        )
        .unwrap_err();
    assert!(
        matches!(
            err,
            VerbsError::Modify(ModifyError::MissingAttribute {
                attr: "ACCESS_FLAGS",
                ..
            })
        ),
        "{err:?}"
    );
    // RESET -> INIT with a UD-only attribute.
    let m = QpAttrMask::STATE
        | QpAttrMask::PKEY_INDEX
        | QpAttrMask::PORT
        | QpAttrMask::ACCESS_FLAGS
        | QpAttrMask::QKEY;
    let err = h.dev.modify_qp(qpn, &a, m).unwrap_err();
    assert!(
        matches!(
            err,
            VerbsError::Modify(ModifyError::UnexpectedAttribute { attr: "QKEY", .. })
        ),
        "{err:?}"
    );
    // RESET -> RTS is no transition.
    let rts = QpAttr {
        qp_state: QpState::Rts,
        ..QpAttr::default()
    };
    assert!(matches!(
        h.dev.modify_qp(qpn, &rts, QpAttrMask::STATE),
        Err(VerbsError::Modify(ModifyError::IllegalTransition { .. }))
    ));
    // A correct INIT: post_recv is accepted, post_send is not.
    h.dev
        .modify_qp(
            qpn,
            &a,
            QpAttrMask::STATE
                | QpAttrMask::PKEY_INDEX
                | QpAttrMask::PORT
                | QpAttrMask::ACCESS_FLAGS,
        )
        .unwrap();
    assert_eq!(
        h.dev.post_recv(
            qpn,
            RecvWr {
                wr_id: 2,
                sgl: vec![sge].into()
            }
        ),
        Ok(())
    );
    assert_eq!(
        h.dev.post_send(qpn, SendWr::send(3, [sge])),
        Err(PostError::BadState(QpState::Init))
    );
    // A bad value is refused: path MTU 1000.
    let rtr = QpAttr {
        qp_state: QpState::Rtr,
        path_mtu: 1000,
        ..QpAttr::default()
    };
    let m = QpAttrMask::STATE
        | QpAttrMask::AV
        | QpAttrMask::PATH_MTU
        | QpAttrMask::DEST_QPN
        | QpAttrMask::RQ_PSN
        | QpAttrMask::MAX_DEST_RD_ATOMIC
        | QpAttrMask::MIN_RNR_TIMER;
    assert!(matches!(
        h.dev.modify_qp(qpn, &rtr, m),
        Err(VerbsError::Modify(ModifyError::InvalidValue("path_mtu")))
    ));
    assert_eq!(
        h.dev.qp(qpn).unwrap().state(),
        QpState::Init,
        "a refused modify changes nothing"
    );
}

#[test]
fn send_queue_limits_and_unsupported_operations() {
    let mut w = World::new(1 << 16);
    let (qa, _) = w.connect(QpType::Uc, 1024);
    let sge = w.hosts[0].sge(0, 8);
    let rkey = w.hosts[1].mr.rkey;
    let r = w.hosts[0]
        .dev
        .post_send(qa, SendWr::rdma(1, SendOp::Read, [sge], 0, rkey));
    assert_eq!(r, Err(PostError::UnsupportedOp), "UC has no READ");
    let many = vec![sge; 17];
    assert_eq!(
        w.hosts[0].dev.post_send(qa, SendWr::send(2, many)),
        Err(PostError::TooManySge)
    );
    let mut inline = SendWr::send(3, [w.hosts[0].sge(0, 300)]);
    inline.flags = SendFlags::SIGNALED | SendFlags::INLINE;
    assert_eq!(
        w.hosts[0].dev.post_send(qa, inline),
        Err(PostError::InlineTooLong)
    );
    for i in 0..1024 {
        w.hosts[0]
            .dev
            .post_send(qa, SendWr::send(i, [sge]))
            .unwrap();
    }
    assert_eq!(
        w.hosts[0].dev.post_send(qa, SendWr::send(9999, [sge])),
        Err(PostError::QueueFull)
    );
}

#[test]
fn cq_overflow_is_an_error_not_a_silent_loss() {
    let mut w = World::new(1 << 16);
    let h = &mut w.hosts[0];
    let small = h.dev.create_cq(2);
    let init = QpInitAttr {
        qp_type: QpType::Rc,
        pd: h.pd,
        send_cq: small,
        recv_cq: small,
        srq: None,
        cap: QpCaps::default(),
        sq_sig_all: true,
    };
    let qpn = h.dev.create_qp(init).unwrap();
    let b_qpn = w.hosts[1]
        .dev
        .create_qp(QpInitAttr {
            send_cq: w.hosts[1].cq,
            recv_cq: w.hosts[1].cq,
            pd: w.hosts[1].pd,
            ..init
        })
        .unwrap();
    w.link(QpType::Rc, 1024, [qpn, b_qpn], [1, 2], |_, _| {});
    let (va, rkey) = (w.hosts[1].base, w.hosts[1].mr.rkey);
    for i in 0..3 {
        let wr = SendWr::rdma(i, SendOp::Write, [w.hosts[0].sge(0, 8)], va, rkey);
        w.hosts[0].dev.post_send(qpn, wr).unwrap();
    }
    w.settle(100_000);
    let mut out = [Wc::new(0, WcStatus::Success, WcOpcode::Send, Qpn::new(0)); 4];
    assert_eq!(w.hosts[0].dev.poll_cq(small, &mut out), Err(CqOverflow));
    assert!(w.hosts[0].dev.cq(small).unwrap().is_overflowed());
    let mut events = Vec::new();
    while let Some(e) = w.hosts[0].dev.poll_event() {
        events.push(e);
    }
    assert!(events.contains(&AsyncEvent::CqError(small)), "{events:?}");
}

#[test]
fn psn_wraps_around_2_pow_24() {
    let mut w = World::new(1 << 20);
    // Start 5 PSNs before the wrap on both directions; 10-packet messages.
    let (qa, qb) = w.connect_with(QpType::Rc, 256, |i, a| {
        if i == 0 {
            a.sq_psn = Psn::new(0xff_fffb);
        } else {
            a.rq_psn = Psn::new(0xff_fffb);
        }
    });
    let data: Vec<u8> = (0..2560u32).map(|i| (i * 7) as u8).collect();
    w.hosts[0].write(0, &data);
    for i in 0..3u64 {
        let sge = w.hosts[1].sge(4096 * i, 4096);
        w.hosts[1]
            .dev
            .post_recv(
                qb,
                RecvWr {
                    wr_id: 100 + i,
                    sgl: vec![sge].into(),
                },
            )
            .unwrap();
        w.hosts[0]
            .dev
            .post_send(qa, SendWr::send(i, [w.hosts[0].sge(0, 2560)]))
            .unwrap();
    }
    let (va, rkey) = (w.hosts[1].base + 20_000, w.hosts[1].mr.rkey);
    w.hosts[0]
        .dev
        .post_send(
            qa,
            SendWr::rdma(
                9,
                SendOp::Read,
                [w.hosts[0].sge(40_000, 2560)],
                va - 20_000,
                rkey,
            ),
        )
        .unwrap();
    w.settle(100_000);
    let ca = w.hosts[0].poll();
    assert_eq!(
        ca.iter().map(|c| (c.wr_id, c.status)).collect::<Vec<_>>(),
        vec![
            (0, WcStatus::Success),
            (1, WcStatus::Success),
            (2, WcStatus::Success),
            (9, WcStatus::Success)
        ]
    );
    for i in 0..3 {
        assert_eq!(w.hosts[1].read(4096 * i, 2560), data);
    }
    assert_eq!(w.hosts[0].read(40_000, 2560), data);
    // 30 SEND packets + 10 READ PSNs from 0xfffffb: the next PSN is 0x23.
    let q = w.hosts[0].dev.qp(qa).unwrap();
    assert_eq!(q.counters().retransmitted, 0);
}

#[test]
fn receive_buffer_too_small() {
    let mut w = World::new(1 << 16);
    let (qa, qb) = w.connect(QpType::Rc, 1024);
    w.hosts[1]
        .dev
        .post_recv(
            qb,
            RecvWr {
                wr_id: 5,
                sgl: vec![w.hosts[1].sge(0, 100)].into(),
            },
        )
        .unwrap();
    let (ca, cb) = run(&mut w, qa, |w| SendWr::send(1, [w.hosts[0].sge(0, 2000)]));
    assert_eq!((cb[0].wr_id, cb[0].status), (5, WcStatus::LocLenErr));
    assert_eq!((ca[0].wr_id, ca[0].status), (1, WcStatus::RemInvReqErr));
}

#[test]
fn srq_feeds_two_qps_and_fires_its_limit_once() {
    let mut w = World::new(1 << 16);
    let pd = w.hosts[1].pd;
    let srq = w.hosts[1].dev.create_srq(pd, 16);
    let mut qps = Vec::new();
    for _ in 0..2 {
        let a = &mut w.hosts[0];
        let qa = a
            .dev
            .create_qp(QpInitAttr {
                qp_type: QpType::Rc,
                pd: a.pd,
                send_cq: a.cq,
                recv_cq: a.cq,
                srq: None,
                cap: QpCaps::default(),
                sq_sig_all: false,
            })
            .unwrap();
        let b = &mut w.hosts[1];
        let qb = b
            .dev
            .create_qp(QpInitAttr {
                qp_type: QpType::Rc,
                pd: b.pd,
                send_cq: b.cq,
                recv_cq: b.cq,
                srq: Some(srq),
                cap: QpCaps::default(),
                sq_sig_all: false,
            })
            .unwrap();
        qps.push((qa, qb));
    }
    for &(qa, qb) in &qps {
        w.link(QpType::Rc, 1024, [qa, qb], [7, 9], |_, _| {});
    }
    for i in 0..6u64 {
        let sge = w.hosts[1].sge(512 * i, 512);
        w.hosts[1]
            .dev
            .post_srq_recv(
                srq,
                RecvWr {
                    wr_id: 100 + i,
                    sgl: vec![sge].into(),
                },
            )
            .unwrap();
    }
    // A receive posted on a QP that uses an SRQ is refused.
    assert!(w.hosts[1]
        .dev
        .post_recv(
            qps[0].1,
            RecvWr {
                wr_id: 1,
                sgl: vec![].into()
            }
        )
        .is_err());
    w.hosts[1].dev.srq(srq).unwrap().set_limit(3);
    for i in 0..4u64 {
        let qa = qps[(i % 2) as usize].0;
        w.hosts[0]
            .dev
            .post_send(qa, SendWr::send(i, [w.hosts[0].sge(0, 100)]))
            .unwrap();
    }
    w.settle(100_000);
    let cb = w.hosts[1].poll();
    assert_eq!(cb.len(), 4);
    let mut ids: Vec<u64> = cb.iter().map(|c| c.wr_id).collect();
    ids.sort();
    assert_eq!(ids, vec![100, 101, 102, 103]);
    assert_eq!(w.hosts[1].dev.srq(srq).unwrap().len(), 2);
    let mut events = Vec::new();
    while let Some(e) = w.hosts[1].dev.poll_event() {
        events.push(e);
    }
    assert_eq!(
        events,
        vec![AsyncEvent::SrqLimitReached(srq)],
        "fires once, then disarms"
    );
}

/// A new SEND_FIRST while a SEND is still in progress is an opcode
/// sequence error: NAK invalid request, the QP goes to ERR, and the
/// receive the broken message had taken completes (WR_FLUSH_ERR) instead
/// of vanishing.
#[test]
fn new_message_while_one_is_in_progress_is_an_invalid_request() {
    use roce_wire::{BthRepr, ExtHeaders, Opcode};
    let mut w = World::new(1 << 16);
    let (_qa, qb) = w.connect(QpType::Rc, 256);
    for id in [1, 2] {
        let sge = w.hosts[1].sge(1024 * id, 1024);
        w.hosts[1]
            .dev
            .post_recv(
                qb,
                RecvWr {
                    wr_id: id,
                    sgl: vec![sge].into(),
                },
            )
            .unwrap();
    }
    // B expects PSN 0x100 from A (see World::connect).
    let send = |op: u8, psn: u32, len: usize| {
        roce_testkit::frames::datagram_v4(
            [10, 0, 0, 1].into(),
            [10, 0, 0, 2].into(),
            0xc000,
            BthRepr::new(Opcode::from_u8(op).unwrap(), qb, Psn::new(psn)),
            ExtHeaders::default(),
            &vec![0x42u8; len],
        )
    };
    w.hosts[1]
        .dev
        .handle_datagram(0, &send(0x00, 0x100, 256), RxMeta::default()); // SEND_FIRST
    w.hosts[1]
        .dev
        .handle_datagram(0, &send(0x04, 0x101, 10), RxMeta::default()); // SEND_ONLY
    let mut buf = vec![0u8; 4400];
    let n = w.hosts[1]
        .dev
        .poll_transmit(0, &mut buf)
        .datagram()
        .expect("a NAK")
        .size;
    let nak = roce_wire::RocePacket::parse_ip(&buf[..n]).unwrap();
    assert_eq!(
        nak.ext.aeth.unwrap().syndrome,
        roce_wire::Syndrome::Nak(roce_wire::NakCode::InvalidRequest)
    );
    assert_eq!(nak.bth.psn, Psn::new(0x101));
    assert_eq!(w.hosts[1].dev.qp(qb).unwrap().state(), QpState::Err);
    let c = w.hosts[1].poll();
    let got: Vec<(u64, WcStatus)> = c.iter().map(|c| (c.wr_id, c.status)).collect();
    assert_eq!(
        got,
        vec![(1, WcStatus::WrFlushErr), (2, WcStatus::WrFlushErr)],
        "the in-progress receive is not lost"
    );
}
