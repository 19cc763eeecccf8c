//! SRQs and CQs against the IBTA rules and rxe's behaviour: sharing,
//! limits, flushes and the Last WQE Reached event, the receive a destroyed
//! or reset QP had begun, CQ overflow, solicited-only notification,
//! unsignaled sends.

mod common;

use std::sync::{Arc, Mutex};

use common::*;
use roce_core::*;
use roce_wire::Operation;

/// A QP using an SRQ goes to ERR: the SRQ's receives are not flushed and
/// still feed the other QP.
#[test]
fn srq_receives_survive_a_qp_flush() {
    let mut w = World::new(1 << 16);
    let pd = w.hosts[1].pd;
    let srq = w.hosts[1].dev.create_srq(pd, 8);
    let (_qa1, qb1) = pair(&mut w, QpType::Rc, 1024, |i, a| {
        if i == 1 {
            a.srq = Some(srq)
        }
    });
    let (qa2, _qb2) = pair(&mut w, QpType::Rc, 1024, |i, a| {
        if i == 1 {
            a.srq = Some(srq)
        }
    });
    for i in 0..4 {
        srq_recv(&mut w, srq, 100 + i, 512 * i, 512);
    }
    let a = QpAttr {
        qp_state: QpState::Err,
        ..QpAttr::default()
    };
    w.hosts[1]
        .dev
        .modify_qp(qb1, &a, QpAttrMask::STATE)
        .unwrap();
    w.settle(10_000);
    assert!(w.hosts[1].poll().is_empty());
    assert_eq!(w.hosts[1].dev.srq(srq).unwrap().len(), 4);
    w.hosts[0]
        .dev
        .post_send(qa2, SendWr::send(1, [w.hosts[0].sge(0, 10)]))
        .unwrap();
    w.settle(10_000);
    assert_eq!(statuses(&w.hosts[1].poll()), vec![(100, WcStatus::Success)]);
}

/// The limit event fires once, stays quiet until re-armed, then fires again.
#[test]
fn srq_limit_rearm() {
    let mut w = World::new(1 << 16);
    let pd = w.hosts[1].pd;
    let srq = w.hosts[1].dev.create_srq(pd, 8);
    let (qa, _qb) = pair(&mut w, QpType::Rc, 1024, |i, a| {
        if i == 1 {
            a.srq = Some(srq)
        }
    });
    for i in 0..6 {
        srq_recv(&mut w, srq, 100 + i, 512 * i, 512);
    }
    w.hosts[1].dev.srq(srq).unwrap().set_limit(4);
    let send = |w: &mut World, id| {
        w.hosts[0]
            .dev
            .post_send(qa, SendWr::send(id, [w.hosts[0].sge(0, 10)]))
            .unwrap();
        w.settle(10_000);
    };
    send(&mut w, 1); // 5 left
    assert!(events(&mut w, 1).is_empty());
    send(&mut w, 2); // 4 left: not below 4
    assert!(events(&mut w, 1).is_empty());
    send(&mut w, 3); // 3 left
    assert_eq!(events(&mut w, 1), vec![AsyncEvent::SrqLimitReached(srq)]);
    send(&mut w, 4); // 2 left: disarmed
    assert!(events(&mut w, 1).is_empty());
    w.hosts[1].dev.srq(srq).unwrap().set_limit(2);
    send(&mut w, 5); // 1 left
    assert_eq!(events(&mut w, 1), vec![AsyncEvent::SrqLimitReached(srq)]);
    // max_wr
    for i in 0..7 {
        srq_recv(&mut w, srq, 200 + i, 0, 16);
    }
    let r = w.hosts[1].dev.post_srq_recv(
        srq,
        RecvWr {
            wr_id: 300,
            sgl: vec![].into(),
        },
    );
    assert_eq!(r, Err(PostError::QueueFull));
}

/// An SRQ receive with more SGEs than `max_srq_sge` is refused.
#[test]
fn srq_post_checks_the_sge_limit() {
    let mut w = World::new(1 << 16);
    let pd = w.hosts[1].pd;
    let srq = w.hosts[1].dev.create_srq(pd, 8);
    let sge = w.hosts[1].sge(0, 1);
    let r = w.hosts[1].dev.post_srq_recv(
        srq,
        RecvWr {
            wr_id: 1,
            sgl: vec![sge; 100_000].into(),
        },
    );
    assert_eq!(r, Err(PostError::TooManySge));
}

/// UC with an SRQ: a broken message gives its receive back to the SRQ and
/// the next message uses it.
#[test]
fn uc_srq_mid_message_loss() {
    let mut w = World::with_mtu(1 << 16, 256);
    let pd = w.hosts[1].pd;
    let srq = w.hosts[1].dev.create_srq(pd, 8);
    let (qa, _qb) = pair(&mut w, QpType::Uc, 256, |i, a| {
        if i == 1 {
            a.srq = Some(srq)
        }
    });
    srq_recv(&mut w, srq, 100, 0, 1024);
    srq_recv(&mut w, srq, 101, 1024, 1024);
    let n = Arc::new(Mutex::new(0));
    let n2 = n.clone();
    w.filter = Box::new(move |from, d| {
        if from == 0 && op_of(d) == Operation::SendMiddle {
            let mut n = n2.lock().unwrap();
            *n += 1;
            if *n == 1 {
                return Verdict::Drop;
            }
        }
        Verdict::Deliver
    });
    w.hosts[0]
        .dev
        .post_send(qa, SendWr::send(1, [w.hosts[0].sge(0, 768)]))
        .unwrap();
    w.settle(10_000);
    w.hosts[0]
        .dev
        .post_send(qa, SendWr::send(2, [w.hosts[0].sge(0, 300)]))
        .unwrap();
    w.settle(10_000);
    let cb = w.hosts[1].poll();
    assert_eq!(statuses(&cb), vec![(100, WcStatus::Success)]);
    assert_eq!(cb[0].byte_len, 300);
    assert_eq!(w.hosts[1].dev.srq(srq).unwrap().len(), 1);
}

/// The responder's receive CQ (one entry) overflows on the second of
/// three SENDs: one CQ error event, the responder QP in the error state,
/// the first SEND acknowledged (its completion was delivered) and the
/// other two never (the responder no longer answers; the sender retries
/// forever with retry_cnt 7).
#[test]
fn recv_cq_overflow_puts_the_qp_in_error() {
    let mut w = World::new(1 << 16);
    let small = w.hosts[1].dev.create_cq(1);
    let (qa, qb) = pair(&mut w, QpType::Rc, 1024, |i, a| {
        if i == 1 {
            a.recv_cq = small
        }
        a.sq_sig_all = true;
    });
    for i in 0..3 {
        recv(&mut w, 1, qb, 100 + i, 512 * i, 512);
    }
    for i in 0..3 {
        w.hosts[0]
            .dev
            .post_send(qa, SendWr::send(i, [w.hosts[0].sge(0, 10)]))
            .unwrap();
    }
    let start = w.now;
    let _ = w.run_until(100_000, |w| w.now > start + 1_000_000_000);
    let ca = w.hosts[0].poll();
    let ev = events(&mut w, 1);
    assert_eq!(
        ev.iter()
            .filter(|e| matches!(e, AsyncEvent::CqError(_)))
            .count(),
        1,
        "one CQ error event: {ev:?}"
    );
    assert!(ev.contains(&AsyncEvent::QpFatal(qb)), "{ev:?}");
    assert_eq!(w.hosts[1].dev.qp(qb).unwrap().state(), QpState::Err);
    assert_eq!(statuses(&ca), vec![(0, WcStatus::Success)]);
    assert!(w.hosts[0].dev.qp_counters(qa).unwrap().timeouts > 0);
}

/// Solicited-only notification: an unsolicited SEND does not raise it,
/// a solicited one does, once; re-arming is needed for the next.
#[test]
fn solicited_only_notification() {
    let mut w = World::new(1 << 16);
    let rcq = w.hosts[1].dev.create_cq(64);
    let (qa, qb) = pair(&mut w, QpType::Rc, 1024, |i, a| {
        if i == 1 {
            a.recv_cq = rcq
        }
    });
    for i in 0..4 {
        recv(&mut w, 1, qb, 100 + i, 512 * i, 512);
    }
    w.hosts[1].dev.cq(rcq).unwrap().req_notify(true);
    let send = |w: &mut World, id, sol: bool| {
        let mut wr = SendWr::send(id, [w.hosts[0].sge(0, 10)]);
        if sol {
            wr.flags = wr.flags | SendFlags::SOLICITED;
        }
        w.hosts[0].dev.post_send(qa, wr).unwrap();
        w.settle(10_000);
        w.hosts[1].dev.cq(rcq).unwrap().take_notification()
    };
    assert!(!send(&mut w, 1, false));
    assert!(send(&mut w, 2, true));
    assert!(!send(&mut w, 3, true), "not re-armed");
    w.hosts[1].dev.cq(rcq).unwrap().req_notify(false);
    assert!(send(&mut w, 4, false));
}

/// Unsignaled sends produce no completion; an error on one does; their
/// send-queue slots come back once acknowledged.
#[test]
fn unsignaled_sends() {
    let mut w = World::new(1 << 16);
    let (qa, qb) = pair(&mut w, QpType::Rc, 1024, |i, a| {
        if i == 0 {
            a.cap.max_send_wr = 2
        }
    });
    let (va, rkey) = (w.hosts[1].base, w.hosts[1].mr.rkey);
    for round in 0..3 {
        for i in 0..2 {
            let mut wr = SendWr::rdma(
                round * 10 + i,
                SendOp::Write,
                [w.hosts[0].sge(0, 8)],
                va,
                rkey,
            );
            wr.flags = SendFlags(0);
            w.hosts[0].dev.post_send(qa, wr).unwrap();
        }
        w.settle(10_000);
        assert!(w.hosts[0].poll().is_empty());
    }
    let mut wr = SendWr::rdma(
        99,
        SendOp::Write,
        [w.hosts[0].sge(0, 8)],
        va,
        Rkey::new(rkey.value() ^ 0x40),
    );
    wr.flags = SendFlags(0);
    w.hosts[0].dev.post_send(qa, wr).unwrap();
    w.settle(10_000);
    assert_eq!(
        statuses(&w.hosts[0].poll()),
        vec![(99, WcStatus::RemAccessErr)]
    );
    let _ = qb;
}

/// A QP on an SRQ goes to ERR with a SEND in progress: the receive it
/// took completes WR_FLUSH_ERR, the SRQ keeps the rest, and (IBTA
/// 11.6.3, IBV_EVENT_QP_LAST_WQE_REACHED) the Last WQE Reached event is
/// raised for the SRQ-attached QP.
#[test]
fn srq_qp_error_mid_message_and_last_wqe_reached() {
    let mut w = World::with_mtu(1 << 16, 256);
    let pd = w.hosts[1].pd;
    let srq = w.hosts[1].dev.create_srq(pd, 8);
    let (qa, qb) = pair(&mut w, QpType::Rc, 256, |i, a| {
        if i == 1 {
            a.srq = Some(srq)
        }
    });
    for i in 0..3 {
        srq_recv(&mut w, srq, 100 + i, 1024 * i, 1024);
    }
    w.filter = Box::new(|from, d| {
        if from == 0 && op_of(d) == Operation::SendLast {
            Verdict::Drop
        } else {
            Verdict::Deliver
        }
    });
    w.hosts[0]
        .dev
        .post_send(qa, SendWr::send(1, [w.hosts[0].sge(0, 768)]))
        .unwrap();
    w.run_until(50, |_| false);
    let a = QpAttr {
        qp_state: QpState::Err,
        ..QpAttr::default()
    };
    w.hosts[1].dev.modify_qp(qb, &a, QpAttrMask::STATE).unwrap();
    assert_eq!(
        statuses(&w.hosts[1].poll()),
        vec![(100, WcStatus::WrFlushErr)]
    );
    assert_eq!(w.hosts[1].dev.srq(srq).unwrap().len(), 2);
    let ev = events(&mut w, 1);
    assert_eq!(ev, vec![AsyncEvent::QpLastWqeReached(qb)]);
}

/// RC on an SRQ: an empty SRQ answers RNR; once a receive is posted the
/// retry lands.
#[test]
fn rc_srq_rnr_then_post() {
    let mut w = World::new(1 << 16);
    let pd = w.hosts[1].pd;
    let srq = w.hosts[1].dev.create_srq(pd, 8);
    let (qa, _qb) = pair(&mut w, QpType::Rc, 1024, |i, a| {
        if i == 1 {
            a.srq = Some(srq)
        }
    });
    w.hosts[0]
        .dev
        .post_send(qa, SendWr::send(1, [w.hosts[0].sge(0, 10)]))
        .unwrap();
    w.run_until(200, |_| false);
    srq_recv(&mut w, srq, 100, 0, 64);
    w.settle(100_000);
    assert_eq!(statuses(&w.hosts[0].poll()), vec![(1, WcStatus::Success)]);
    assert_eq!(statuses(&w.hosts[1].poll()), vec![(100, WcStatus::Success)]);
}

/// A QP on an SRQ destroyed (or reset) with a SEND in progress: the
/// receive it had taken goes back to the SRQ, whole, for the next message.
#[test]
fn srq_receive_in_progress_returns_on_destroy_and_reset() {
    for destroy in [true, false] {
        let mut w = World::with_mtu(1 << 16, 256);
        let pd = w.hosts[1].pd;
        let srq = w.hosts[1].dev.create_srq(pd, 8);
        let (qa, qb) = pair(&mut w, QpType::Rc, 256, |i, a| {
            if i == 1 {
                a.srq = Some(srq)
            }
        });
        srq_recv(&mut w, srq, 100, 0, 1024);
        w.filter = Box::new(|from, d| {
            if from == 0 && op_of(d) == Operation::SendLast {
                Verdict::Drop
            } else {
                Verdict::Deliver
            }
        });
        w.hosts[0]
            .dev
            .post_send(qa, SendWr::send(1, [w.hosts[0].sge(0, 768)]))
            .unwrap();
        w.run_until(50, |_| false);
        assert_eq!(w.hosts[1].dev.srq(srq).unwrap().len(), 0);
        if destroy {
            w.hosts[1].dev.destroy_qp(qb).unwrap();
        } else {
            let a = QpAttr {
                qp_state: QpState::Reset,
                ..QpAttr::default()
            };
            w.hosts[1].dev.modify_qp(qb, &a, QpAttrMask::STATE).unwrap();
        }
        assert_eq!(
            w.hosts[1].dev.srq(srq).unwrap().len(),
            1,
            "destroy {destroy}"
        );
        assert!(w.hosts[1].poll().is_empty());
    }
}
