//! The requester-side error cases of datenlord's roce-sim conformance suite
//! (src/case/transport_layer_err/requester_side_err), ported: the peer's
//! packets are rewritten on the wire the way that suite's hooks rewrite
//! them, and the same outcomes are asserted.

mod common;

use common::*;
use roce_core::*;
use roce_testkit::frames::rewrite;
use roce_wire::{MessageKind, RocePacket};

fn kind(d: &[u8]) -> MessageKind {
    RocePacket::parse_ip(d).unwrap().bth.opcode.kind()
}

/// rxe_ghost_ack: the responder's READ response carries a PSN the requester
/// never sent. It must be ignored; with retry_cnt 0 the READ then fails
/// when the ACK timeout expires, and the QP is in ERR.
#[test]
fn ghost_ack() {
    let mut w = World::new(1 << 16);
    let (qa, qb) = w.connect_with(QpType::Rc, 1024, |i, a| {
        if i == 0 {
            a.retry_cnt = 0;
        }
    });
    w.filter = Box::new(|from, d| {
        if from == 1 && kind(d) == MessageKind::ReadResponse {
            Verdict::Replace(rewrite(d, |r| r.bth.psn = r.bth.psn.add(1)))
        } else {
            Verdict::Deliver
        }
    });
    w.hosts[1].write(0, &[0xff]);
    w.post_rdma(qa, SendOp::Read, 100, 1, 0);
    w.settle(100_000);
    let ca = w.hosts[0].poll();
    assert_eq!((ca[0].wr_id, ca[0].status), (1, WcStatus::RetryExcErr));
    assert_eq!(w.hosts[0].dev.qp(qa).unwrap().state(), QpState::Err);
    assert_eq!(
        w.hosts[0].read(100, 1),
        [0],
        "no data from a ghost response"
    );
    let a = w.hosts[0].dev.qp_counters(qa).unwrap();
    assert_eq!(
        (a.drop_ghost_response, a.retransmitted, a.timeouts),
        (1, 0, 1)
    );
    assert_eq!(
        w.hosts[1].dev.qp_counters(qb).unwrap().acks_sent,
        0,
        "a READ is acknowledged by its response only"
    );
    assert_eq!(w.hosts[1].dev.qp(qb).unwrap().state(), QpState::Rts);
}

/// rxe_implied_nak_sequence_error_retry_limit_exceeded: a READ response
/// arrives with a PSN beyond the expected one (a response was lost): an
/// implied NAK. With retry_cnt 0 the READ fails at once; the responder saw
/// exactly one request and stays in RTS; local memory is untouched.
#[test]
fn implied_nak_sequence_error_retry_limit_exceeded() {
    let mut w = World::new(1 << 16);
    let (qa, qb) = w.connect_with(QpType::Rc, 1024, |i, a| {
        if i == 0 {
            a.retry_cnt = 0;
        }
    });
    // A 3-packet READ whose first response is rewritten one PSN ahead.
    let mut first = true;
    w.filter = Box::new(move |from, d| {
        if from == 1 && kind(d) == MessageKind::ReadResponse && first {
            first = false;
            Verdict::Replace(rewrite(d, |r| r.bth.psn = r.bth.psn.add(1)))
        } else {
            Verdict::Deliver
        }
    });
    w.hosts[1].write(0, &[0xff; 3000]);
    w.post_rdma(qa, SendOp::Read, 8192, 3000, 0);
    w.settle(100_000);
    let ca = w.hosts[0].poll();
    assert_eq!((ca[0].wr_id, ca[0].status), (1, WcStatus::RetryExcErr));
    assert_eq!(w.hosts[0].dev.qp(qa).unwrap().state(), QpState::Err);
    assert_eq!(w.hosts[0].read(8192, 1), [0]);
    let b = w.hosts[1].dev.qp_counters(qb).unwrap();
    assert_eq!(b.rx_packets, 1, "one READ request reached the responder");
    assert_eq!(w.hosts[1].dev.qp(qb).unwrap().state(), QpState::Rts);
}

/// The same with retries left: the implied NAK re-requests the READ from
/// the first missing response and the data arrives intact.
#[test]
fn implied_nak_sequence_error_retry_limit_not_exceeded() {
    let mut w = World::new(1 << 16);
    let (qa, qb) = w.connect_with(QpType::Rc, 1024, |i, a| {
        if i == 0 {
            a.retry_cnt = 1;
        }
    });
    let mut n = 0;
    w.filter = Box::new(move |from, d| {
        if from == 1 && kind(d) == MessageKind::ReadResponse {
            n += 1;
            if n == 2 {
                // Lose the second response of the first attempt.
                return Verdict::Drop;
            }
        }
        Verdict::Deliver
    });
    let data: Vec<u8> = (0..3000u32).map(|i| i as u8).collect();
    w.hosts[1].write(0, &data);
    w.post_rdma(qa, SendOp::Read, 8192, 3000, 0);
    w.settle(100_000);
    let ca = w.hosts[0].poll();
    assert_eq!(
        (ca[0].wr_id, ca[0].status, ca[0].byte_len),
        (1, WcStatus::Success, 3000)
    );
    assert_eq!(w.hosts[0].read(8192, 3000), data);
    let b = w.hosts[1].dev.qp_counters(qb).unwrap();
    assert_eq!(b.read_replays, 1, "the responder served the rest again");
}

/// rxe_rnr_nak_retry_limit_exceeded: a SEND to a responder with no receive
/// posted, rnr_retry 0: RNR_RETRY_EXC_ERR and ERR.
#[test]
fn rnr_nak_retry_limit_exceeded() {
    let mut w = World::new(1 << 16);
    let (qa, qb) = w.connect_with(QpType::Rc, 1024, |i, a| {
        if i == 0 {
            a.rnr_retry = 0;
        }
    });
    w.hosts[0].write(0, &[0xff]);
    w.hosts[0]
        .dev
        .post_send(qa, SendWr::send(1, [w.hosts[0].sge(0, 1)]))
        .unwrap();
    w.settle(100_000);
    let ca = w.hosts[0].poll();
    assert_eq!((ca[0].wr_id, ca[0].status), (1, WcStatus::RnrRetryExcErr));
    assert_eq!(w.hosts[0].dev.qp(qa).unwrap().state(), QpState::Err);
    assert_eq!(
        w.hosts[1].dev.qp(qb).unwrap().state(),
        QpState::Rts,
        "RNR is not an error at the responder"
    );
}

/// rxe_rkey_violation: the READ request's R_Key is rewritten to 0 on the
/// wire: REM_ACCESS_ERR, local memory untouched, QP in ERR.
#[test]
fn rkey_violation() {
    let mut w = World::new(1 << 16);
    let (qa, _qb) = w.connect(QpType::Rc, 1024);
    w.filter = Box::new(|from, d| {
        if from == 0 && kind(d) == MessageKind::ReadRequest {
            Verdict::Replace(rewrite(d, |r| {
                if let Some(reth) = r.ext.reth.as_mut() {
                    reth.rkey = Rkey::new(0);
                }
            }))
        } else {
            Verdict::Deliver
        }
    });
    w.hosts[1].write(0, &[0xff]);
    w.post_rdma(qa, SendOp::Read, 100, 1, 0);
    w.settle(100_000);
    let ca = w.hosts[0].poll();
    assert_eq!((ca[0].wr_id, ca[0].status), (1, WcStatus::RemAccessErr));
    assert_eq!(w.hosts[0].read(100, 1), [0]);
    assert_eq!(w.hosts[0].dev.qp(qa).unwrap().state(), QpState::Err);
}

/// rxe_write_partial_retry / sim_write_partial_retry: a multi-packet WRITE
/// whose second packet is lost continues, after the NAK, from that packet
/// (as a MIDDLE, without a new RETH) and the data is complete.
#[test]
fn write_partial_retry() {
    let mut w = World::new(1 << 16);
    let (qa, qb) = w.connect(QpType::Rc, 1024);
    let mut n = 0;
    w.filter = Box::new(move |from, _| {
        if from == 0 {
            n += 1;
            if n == 2 {
                return Verdict::Drop;
            }
        }
        Verdict::Deliver
    });
    let data: Vec<u8> = (0..4096u32).map(|i| (i / 3) as u8).collect();
    w.hosts[0].write(0, &data);
    w.post_rdma(qa, SendOp::Write, 0, 4096, 1024);
    w.settle(100_000);
    assert_eq!(w.hosts[0].poll()[0].status, WcStatus::Success);
    assert_eq!(w.hosts[1].read(1024, 4096), data);
    let a = w.hosts[0].dev.qp_counters(qa).unwrap();
    let b = w.hosts[1].dev.qp_counters(qb).unwrap();
    assert_eq!(b.seq_naks_sent, 1);
    assert_eq!(a.seq_naks_received, 1);
    assert_eq!(a.retransmitted, 3, "packets 2..4 sent again, not packet 1");
}

/// A responder that is still sending the responses of an earlier
/// (re-requested) READ is alive: duplicate responses restart the transport
/// timer, so the READ is not requested again while they keep coming; once
/// they stop, the timeout re-requests it as before. (rxe in an emulated VM
/// takes longer than the timeout to serve a 4 MiB READ; re-requesting on
/// every timeout made it serve the same READ over and over.)
#[test]
fn duplicate_read_responses_restart_the_timer() {
    let mut w = World::new(1 << 16);
    // Local ACK timeout 4.096 us x 2^10 = 4.19 ms.
    let (qa, _) = w.connect_with(QpType::Rc, 1024, |i, a| {
        if i == 0 {
            a.timeout = 10;
        }
    });
    let timeout = 4_096 << 10;
    // Deliver the first response of a 3-packet READ, keep the rest back.
    let seen = std::rc::Rc::new(std::cell::RefCell::new(Vec::new()));
    let log = seen.clone();
    w.filter = Box::new(move |from, d| {
        if from == 1 && kind(d) == MessageKind::ReadResponse {
            log.borrow_mut().push(d.to_vec());
            if log.borrow().len() > 1 {
                return Verdict::Drop;
            }
        }
        Verdict::Deliver
    });
    w.post_rdma(qa, SendOp::Read, 8192, 3000, 0);
    // Until all three were sent and the first one arrived.
    w.run_until(10_000, |w| {
        seen.borrow().len() == 3 && w.hosts[0].dev.qp_counters(qa).unwrap().rx_packets == 1
    });
    let first = seen.borrow()[0].clone();
    let t0 = w.now;
    // Drive host 0 alone: the first response again every timeout / 2
    // for five timeouts, then nothing. Count READ requests it sends.
    let mut buf = vec![0u8; 4400];
    let mut requests = Vec::new();
    let host = &mut w.hosts[0];
    let mut now = t0;
    let mut replayed = 0;
    while now < t0 + 8 * timeout {
        now += timeout / 4;
        if now < t0 + 5 * timeout && (now - t0).is_multiple_of(timeout / 2) {
            host.dev.handle_datagram(now, &first, RxMeta::default());
            replayed += 1;
        }
        if host.dev.poll_timeout().is_some_and(|t| t <= now) {
            host.dev.handle_timeout(now);
        }
        while let Some(n) = host
            .dev
            .poll_transmit(now, &mut buf)
            .datagram()
            .map(|t| t.size)
        {
            if kind(&buf[..n]) == MessageKind::ReadRequest {
                requests.push(now - t0);
            }
        }
    }
    assert!(
        !requests.is_empty(),
        "the timeout still re-requests the READ"
    );
    assert!(
        requests[0] > 5 * timeout,
        "re-requested at {} ns while duplicates kept coming",
        requests[0]
    );
    assert!(requests[0] <= 6 * timeout + timeout / 4, "{requests:?}");
    assert_eq!(
        host.dev.qp_counters(qa).unwrap().duplicates,
        replayed,
        "every replayed response counted as a duplicate"
    );
}

/// The requester keeps at most 128 PSNs past the oldest unacknowledged
/// one in flight (rxe's RXE_MAX_UNACKED_PSNS): a 300-packet WRITE sends
/// 129 packets, the last asking for an ACK, then waits; the ACKs reopen
/// the window and the WRITE completes intact, never more than 129
/// packets ahead of the responder's acknowledgements.
#[test]
fn requester_window_limits_unacknowledged_packets() {
    let mut w = World::new(1 << 20);
    let (qa, _) = w.connect(QpType::Rc, 1024);
    let data: Vec<u8> = (0..300 * 1024u32).map(|i| (i * 7) as u8).collect();
    w.hosts[0].write(0, &data);
    w.post_rdma(qa, SendOp::Write, 0, data.len() as u32, 0);
    // Alone, host 0 sends 129 packets and stops.
    let mut buf = vec![0u8; 4400];
    let mut first = Vec::new();
    while let Some(n) = w.hosts[0]
        .dev
        .poll_transmit(0, &mut buf)
        .datagram()
        .map(|t| t.size)
    {
        first.push(buf[..n].to_vec());
    }
    assert_eq!(first.len(), 129);
    let last = RocePacket::parse_ip(&first[128]).unwrap();
    assert!(
        last.bth.ack_req,
        "the packet that fills the window asks for an ACK"
    );
    for d in &first {
        w.hosts[1].dev.handle_datagram(0, d, RxMeta::default());
    }
    // From here through the world: track how far the requester runs ahead.
    let state = std::rc::Rc::new(std::cell::Cell::new((0u32, 0u32, 0i32)));
    let s2 = state.clone();
    w.filter = Box::new(move |from, d| {
        let p = RocePacket::parse_ip(d).unwrap();
        let (mut sent, mut acked, mut ahead) = s2.get();
        let psn = p.bth.psn.value();
        if from == 0 {
            sent = sent.max(psn);
        } else {
            acked = acked.max(psn);
        }
        if acked > 0 {
            ahead = ahead.max(sent as i32 - acked as i32);
        }
        s2.set((sent, acked, ahead));
        Verdict::Deliver
    });
    w.settle(100_000);
    let c = w.hosts[0].poll();
    assert_eq!((c[0].wr_id, c[0].status), (1, WcStatus::Success));
    assert_eq!(w.hosts[1].read(0, data.len()), data);
    assert!(state.get().2 <= 129, "ran {} PSNs ahead", state.get().2);
}
