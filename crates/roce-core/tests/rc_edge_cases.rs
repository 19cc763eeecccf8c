//! RC edge cases found in review: responses owed before an error NAK, RNR
//! retries of WRITE with immediate, RNR waits that must not spend
//! transport retries, the SQ Drained event, and the limits of what a post
//! or a modify accepts.

mod common;

use common::*;
use roce_core::*;

/// A WRITE whose R_Key is wrong (remote access error).
fn bad_write(w: &World, wr_id: u64) -> SendWr {
    let (va, rkey) = (w.hosts[1].base, w.hosts[1].mr.rkey);
    let bad = Rkey::new(rkey.value() ^ 0x55);
    SendWr::rdma(wr_id, SendOp::Write, [w.hosts[0].sge(128, 64)], va, bad)
}

/// A READ and then a bad WRITE reach the responder together: the READ was
/// executed first, so its response goes out before the WRITE's NAK and the
/// READ completes; the NAK fails only the WRITE.
fn read_then_bad_write(retry_cnt: u8) {
    let mut w = World::new(1 << 16);
    w.hosts[1].write(0, b"owed before the NAK");
    let (qa, qb) = w.connect_with(QpType::Rc, 1024, |_, a| a.retry_cnt = retry_cnt);
    let (va, rkey) = (w.hosts[1].base, w.hosts[1].mr.rkey);
    let rd = SendWr::rdma(1, SendOp::Read, [w.hosts[0].sge(0, 64)], va, rkey);
    w.hosts[0].dev.post_send(qa, rd).unwrap();
    let wr = bad_write(&w, 2);
    w.hosts[0].dev.post_send(qa, wr).unwrap();
    assert!(
        w.run_until(100_000, |w| w.hosts[0].dev.qp(qa).unwrap().state()
            == QpState::Err)
    );
    w.settle(100_000);
    assert_eq!(
        statuses(&w.hosts[0].poll()),
        vec![(1, WcStatus::Success), (2, WcStatus::RemAccessErr)]
    );
    assert_eq!(&w.hosts[0].read(0, 19), b"owed before the NAK");
    assert_eq!(w.hosts[1].dev.qp(qb).unwrap().state(), QpState::Err);
    assert_eq!(w.hosts[0].dev.qp_counters(qa).unwrap().timeouts, 0);
}

#[test]
fn read_response_precedes_a_later_requests_nak() {
    read_then_bad_write(3);
}

#[test]
fn read_response_precedes_a_later_requests_nak_with_retry_7() {
    // Before the fix the READ was re-requested forever from a responder in
    // the error state.
    read_then_bad_write(7);
}

#[test]
fn atomic_ack_precedes_a_later_requests_nak() {
    let mut w = World::new(1 << 16);
    w.hosts[1].write(0, &40u64.to_le_bytes());
    let (qa, _qb) = w.connect_with(QpType::Rc, 1024, |_, a| a.retry_cnt = 3);
    let (va, rkey) = (w.hosts[1].base, w.hosts[1].mr.rkey);
    let fa = SendWr::rdma(
        1,
        SendOp::FetchAdd { add: 2 },
        [w.hosts[0].sge(0, 8)],
        va,
        rkey,
    );
    w.hosts[0].dev.post_send(qa, fa).unwrap();
    let wr = bad_write(&w, 2);
    w.hosts[0].dev.post_send(qa, wr).unwrap();
    w.settle(100_000);
    assert_eq!(
        statuses(&w.hosts[0].poll()),
        vec![(1, WcStatus::Success), (2, WcStatus::RemAccessErr)]
    );
    // Executed once, and its original value delivered.
    assert_eq!(w.hosts[1].read(0, 8), 42u64.to_le_bytes());
    assert_eq!(w.hosts[0].read(0, 8), 40u64.to_le_bytes());
}

/// A READ accepted, then its region deregistered before the responses are
/// built: a remote access NAK, and the responder QP goes to the error
/// state like on any other class C error.
#[test]
fn read_failing_its_transmit_recheck_ends_the_responder() {
    let mut w = World::new(1 << 16);
    let (qa, qb) = w.connect(QpType::Rc, 1024);
    let pd = w.hosts[1].pd;
    let k = w.hosts[1]
        .dev
        .reg_mr(
            pd,
            0x6000_0000,
            Box::new(vec![0u8; 4096]),
            Access::REMOTE_READ | Access::LOCAL_WRITE,
        )
        .unwrap();
    let rd = SendWr::rdma(
        1,
        SendOp::Read,
        [w.hosts[0].sge(0, 64)],
        0x6000_0000,
        k.rkey,
    );
    w.hosts[0].dev.post_send(qa, rd).unwrap();
    assert!(
        w.run_until(1000, |w| w.hosts[1].dev.qp_counters(qb).unwrap().rx_packets
            >= 1)
    );
    w.hosts[1].dev.dereg_mr(k).unwrap();
    w.settle(100_000);
    assert_eq!(
        statuses(&w.hosts[0].poll()),
        vec![(1, WcStatus::RemAccessErr)]
    );
    assert_eq!(w.hosts[1].dev.qp(qb).unwrap().state(), QpState::Err);
    assert_eq!(w.hosts[1].dev.qp_counters(qb).unwrap().error_naks_sent, 1);
}

/// WRITE_ONLY with immediate and no receive posted: RNR NAK; once a
/// receive is posted the retry is accepted (it used to be refused as an
/// invalid request, the message it had begun still "in progress").
#[test]
fn write_with_imm_is_accepted_when_retried_after_rnr() {
    let mut w = World::new(1 << 16);
    let (qa, qb) = w.connect_with(QpType::Rc, 1024, |_, a| {
        a.rnr_retry = 7;
        a.min_rnr_timer = 1;
    });
    w.hosts[0].write(0, &[0xab; 64]);
    let (va, rkey) = (w.hosts[1].base, w.hosts[1].mr.rkey);
    let wr = SendWr::rdma(
        1,
        SendOp::WriteWithImm(7),
        [w.hosts[0].sge(0, 64)],
        va,
        rkey,
    );
    w.hosts[0].dev.post_send(qa, wr).unwrap();
    assert!(w.run_until(100_000, |w| w.hosts[1]
        .dev
        .qp_counters(qb)
        .unwrap()
        .rnr_naks_sent
        >= 1));
    recv(&mut w, 1, qb, 20, 4096, 256);
    w.settle(1_000_000);
    assert_eq!(statuses(&w.hosts[0].poll()), vec![(1, WcStatus::Success)]);
    let b = w.hosts[1].poll();
    assert_eq!(statuses(&b), vec![(20, WcStatus::Success)]);
    assert_eq!(b[0].opcode, WcOpcode::RecvRdmaWithImm);
    assert_eq!(b[0].imm_data, 7);
    assert_eq!(w.hosts[1].read(0, 64), vec![0xab; 64]);
    assert_eq!(w.hosts[1].dev.qp(qb).unwrap().state(), QpState::Rts);
}

/// Two pipelined SENDs and no receive, rnr_retry 7 (forever) and
/// retry_cnt 0: the responder RNR-NAKs the first and sequence-NAKs the
/// second (as rxe does); that NAK is part of the RNR wait, not a transport
/// error, so no retry is spent and both SENDs complete once receives come.
#[test]
fn rnr_wait_spends_no_transport_retry() {
    let mut w = World::new(1 << 16);
    let (qa, qb) = w.connect_with(QpType::Rc, 1024, |_, a| {
        a.rnr_retry = 7;
        a.retry_cnt = 0;
        a.min_rnr_timer = 1;
    });
    for id in 1..=2 {
        let sge = w.hosts[0].sge(0, 16);
        w.hosts[0]
            .dev
            .post_send(qa, SendWr::send(id, [sge]))
            .unwrap();
    }
    assert!(w.run_until(10_000, |w| w.hosts[1]
        .dev
        .qp_counters(qb)
        .unwrap()
        .rnr_naks_sent
        >= 3));
    let c = w.hosts[0].dev.qp_counters(qa).unwrap();
    assert!(c.seq_naks_received >= 1, "{c:?}");
    assert_eq!(w.hosts[0].dev.qp(qa).unwrap().state(), QpState::Rts);
    recv(&mut w, 1, qb, 20, 4096, 256);
    recv(&mut w, 1, qb, 21, 4096, 256);
    w.settle(1_000_000);
    assert_eq!(
        statuses(&w.hosts[0].poll()),
        vec![(1, WcStatus::Success), (2, WcStatus::Success)]
    );
}

/// A long RNR wait (timer code 0 = 655.36 ms) and a short ACK timeout
/// (code 8, about 1 ms) with 3 retries: the ACK timer is held during the
/// wait, so the QP is still waiting after 100 ms with no timeout counted,
/// and the SENDs complete once receives are posted.
#[test]
fn ack_timer_is_held_during_an_rnr_wait() {
    let mut w = World::new(1 << 16);
    let (qa, qb) = w.connect_with(QpType::Rc, 1024, |_, a| {
        a.rnr_retry = 7;
        a.retry_cnt = 3;
        a.timeout = 8;
        a.min_rnr_timer = 0;
    });
    for id in 1..=2 {
        let sge = w.hosts[0].sge(0, 16);
        w.hosts[0]
            .dev
            .post_send(qa, SendWr::send(id, [sge]))
            .unwrap();
    }
    let start = w.now;
    let _ = w.run_until(100_000, |w| w.now > start + 100_000_000);
    assert!(w.now > start + 100_000_000, "the world stopped early");
    assert!(w.hosts[0].poll().is_empty());
    let c = w.hosts[0].dev.qp_counters(qa).unwrap();
    assert_eq!(c.timeouts, 0, "{c:?}");
    assert_eq!(c.rnr_naks_received, 1, "{c:?}");
    assert_eq!(w.hosts[0].dev.qp(qa).unwrap().state(), QpState::Rts);
    recv(&mut w, 1, qb, 20, 4096, 256);
    recv(&mut w, 1, qb, 21, 4096, 256);
    w.settle(1_000_000);
    assert_eq!(
        statuses(&w.hosts[0].poll()),
        vec![(1, WcStatus::Success), (2, WcStatus::Success)]
    );
}

fn to_sqd(w: &mut World, qp: Qpn, notify: bool) -> Result<(), VerbsError> {
    let mut a = *w.hosts[0].dev.qp(qp).unwrap().attr();
    a.qp_state = QpState::Sqd;
    let mut mask = QpAttrMask::STATE;
    if notify {
        mask |= QpAttrMask::EN_SQD_ASYNC_NOTIFY;
    }
    w.hosts[0].dev.modify_qp(qp, &a, mask)
}

/// RTS -> SQD with EN_SQD_ASYNC_NOTIFY while a WRITE is in flight: SQD ->
/// SQD is refused until the WRITE is acknowledged, then the SQ Drained
/// event comes and SQD -> SQD is accepted.
#[test]
fn sq_drained_event_after_the_drain() {
    let mut w = World::new(1 << 16);
    let (qa, _qb) = w.connect(QpType::Rc, 1024);
    w.post_rdma(qa, SendOp::Write, 0, 32 * 1024, 0);
    // One step sends the WRITE's packets; none is acknowledged yet.
    assert!(w.step());
    to_sqd(&mut w, qa, true).unwrap();
    assert!(events(&mut w, 0).is_empty());
    let e = to_sqd(&mut w, qa, false).unwrap_err();
    assert!(e.to_string().contains("draining"), "{e}");
    w.settle(100_000);
    assert_eq!(events(&mut w, 0), vec![AsyncEvent::SqDrained(qa)]);
    assert_eq!(statuses(&w.hosts[0].poll()), vec![(1, WcStatus::Success)]);
    to_sqd(&mut w, qa, false).unwrap();
    // Nothing in flight: the drain is immediate, announced only if asked.
    let mut a = *w.hosts[0].dev.qp(qa).unwrap().attr();
    a.qp_state = QpState::Rts;
    w.hosts[0].dev.modify_qp(qa, &a, QpAttrMask::STATE).unwrap();
    to_sqd(&mut w, qa, false).unwrap();
    assert!(events(&mut w, 0).is_empty());
    w.hosts[0].dev.modify_qp(qa, &a, QpAttrMask::STATE).unwrap();
    to_sqd(&mut w, qa, true).unwrap();
    assert_eq!(events(&mut w, 0), vec![AsyncEvent::SqDrained(qa)]);
}

/// A CUR_STATE that is not the QP's state is refused (IBTA Vol 1
/// §11.2.4.2, as `ibv_modify_qp`).
#[test]
fn cur_state_must_match() {
    let mut w = World::new(1 << 16);
    let (qa, _qb) = w.connect(QpType::Rc, 1024);
    let mut a = *w.hosts[0].dev.qp(qa).unwrap().attr();
    a.qp_state = QpState::Rts;
    a.cur_qp_state = QpState::Sqd;
    let e = w.hosts[0]
        .dev
        .modify_qp(qa, &a, QpAttrMask::STATE | QpAttrMask::CUR_STATE)
        .unwrap_err();
    assert!(e.to_string().contains("CUR_STATE says SQD"), "{e}");
    a.cur_qp_state = QpState::Rts;
    w.hosts[0]
        .dev
        .modify_qp(qa, &a, QpAttrMask::STATE | QpAttrMask::CUR_STATE)
        .unwrap();
}

/// A READ of 2^31 bytes at a 256-byte path MTU would take 2^23 response
/// PSNs, half the PSN space: refused at post time (it used to hang, every
/// response dropped as a ghost).
#[test]
fn read_of_2_pow_23_psns_is_refused() {
    let mut w = World::with_mtu(1 << 16, 256);
    let (qa, _qb) = w.connect(QpType::Rc, 256);
    let (va, rkey) = (w.hosts[1].base, w.hosts[1].mr.rkey);
    let (base, lkey) = (w.hosts[0].base, w.hosts[0].mr.lkey);
    let sge = move |len| Sge {
        addr: base,
        length: len,
        lkey,
    };
    let rd = SendWr::rdma(1, SendOp::Read, [sge(1 << 31)], va, rkey);
    match w.hosts[0].dev.post_send(qa, rd) {
        Err(PostError::InvalidWr(m)) => assert!(m.contains("2^23"), "{m}"),
        other => panic!("expected InvalidWr, got {other:?}"),
    }
    // One PSN fewer is a legal message (it fails on the small region).
    let rd = SendWr::rdma(2, SendOp::Read, [sge((1 << 31) - 256)], va, rkey);
    w.hosts[0].dev.post_send(qa, rd).unwrap();
    w.settle(100_000);
    assert_eq!(
        statuses(&w.hosts[0].poll()),
        vec![(2, WcStatus::RemAccessErr)]
    );
}

/// A responder with max_dest_rd_atomic 0 has no READ/atomic resources and
/// refuses a READ as an invalid request (as rxe does).
#[test]
fn no_responder_resources_refuses_reads() {
    let mut w = World::new(1 << 16);
    let (qa, _qb) = w.connect_with(QpType::Rc, 1024, |i, a| {
        if i == 1 {
            a.max_dest_rd_atomic = 0;
        }
    });
    let (va, rkey) = (w.hosts[1].base, w.hosts[1].mr.rkey);
    let rd = SendWr::rdma(1, SendOp::Read, [w.hosts[0].sge(0, 64)], va, rkey);
    w.hosts[0].dev.post_send(qa, rd).unwrap();
    w.settle(100_000);
    assert_eq!(
        statuses(&w.hosts[0].poll()),
        vec![(1, WcStatus::RemInvReqErr)]
    );
}

/// The UD fields of a WR posted to an RC QP are ignored, as in verbs: the
/// SEND goes to the connected peer, not to the QPN in the WR.
#[test]
fn ud_fields_of_an_rc_send_are_ignored() {
    let mut w = World::new(1 << 16);
    let (qa, qb) = w.connect(QpType::Rc, 1024);
    recv(&mut w, 1, qb, 20, 4096, 256);
    let mut wr = SendWr::send(1, [w.hosts[0].sge(0, 16)]);
    wr.ud = Some(UdDest::new(
        "10.9.9.9".parse().unwrap(),
        Qpn::new(0x999),
        Qkey::new(1),
    ));
    w.hosts[0].dev.post_send(qa, wr).unwrap();
    w.settle(100_000);
    assert_eq!(statuses(&w.hosts[0].poll()), vec![(1, WcStatus::Success)]);
    assert_eq!(statuses(&w.hosts[1].poll()), vec![(20, WcStatus::Success)]);
}

/// A QP moved to the error state by the application sends nothing more,
/// not even a PSN sequence NAK it had queued (only a class C error NAK,
/// and the answers owed before it, still go out).
#[test]
fn an_application_error_transition_sends_no_queued_sequence_nak() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    let mut w = World::new(1 << 16);
    let (qa, qb) = w.connect(QpType::Rc, 1024);
    let from_b = Arc::new(AtomicUsize::new(0));
    let seen = from_b.clone();
    let mut dropped_one = false;
    w.filter = Box::new(move |from, _d| {
        if from == 1 {
            seen.fetch_add(1, Ordering::SeqCst);
        }
        if from == 0 && !dropped_one {
            // The first request is lost: the next is out of sequence.
            dropped_one = true;
            return Verdict::Drop;
        }
        Verdict::Deliver
    });
    for i in 0..2 {
        w.post_rdma(qa, SendOp::Write, 64 * i, 64, 64 * i);
    }
    assert!(w.run_until(1000, |w| w.hosts[1]
        .dev
        .qp_counters(qb)
        .unwrap()
        .drop_out_of_sequence
        >= 1));
    let sent_before = from_b.load(Ordering::SeqCst);
    let a = QpAttr {
        qp_state: QpState::Err,
        ..QpAttr::default()
    };
    w.hosts[1].dev.modify_qp(qb, &a, QpAttrMask::STATE).unwrap();
    for _ in 0..20 {
        w.step();
    }
    assert_eq!(
        from_b.load(Ordering::SeqCst),
        sent_before,
        "B sent after ERR"
    );
}
