//! ACK deferral as the engine's own timed policy (`DeviceConfig::ack_delay`,
//! roce-core `qp/responder/ack.rs`): an ACK held back leaves by its
//! deadline whoever drives the engine, follows the QP's answer when one is
//! posted, goes at once after enough PSNs, and is not lost when the
//! application moves the QP to the error state, resets or destroys it.

mod common;

use std::cell::RefCell;
use std::rc::Rc;

use common::*;
use roce_core::*;
use roce_wire::Operation;

const DELAY: u64 = 40_000;

fn deferring() -> World {
    deferring_with(false)
}

/// Deferral for DELAY or 8 PSNs, the held ACK before or after the answer.
fn deferring_with(ack_first: bool) -> World {
    World::with_config(1 << 20, |c| {
        c.ack_delay = AckDelay {
            max_delay: DELAY,
            max_psns: 8,
            ack_first,
        }
    })
}

/// Records (sending host, operation, time) of every datagram on the wire.
type Log = Rc<RefCell<Vec<(usize, Operation)>>>;

fn record(w: &mut World) -> Log {
    let log: Log = Rc::default();
    let l = log.clone();
    w.filter = Box::new(move |from, d| {
        l.borrow_mut().push((from, op_of(d)));
        Verdict::Deliver
    });
    log
}

fn send(w: &mut World, h: usize, qp: Qpn, wr_id: u64, len: u32) {
    let sge = w.hosts[h].sge(0, len);
    let mut wr = SendWr::send(wr_id, [sge]);
    wr.flags = SendFlags::SIGNALED;
    w.hosts[h].dev.post_send(qp, wr).unwrap();
}

/// Runs the world until host 0 has `n` completions (bounded); returns them.
fn completions(w: &mut World, n: usize) -> Vec<Wc> {
    let mut got = Vec::new();
    assert!(
        w.run_until(100_000, |w| {
            got.extend(w.hosts[0].poll());
            got.len() >= n
        }),
        "host 0 got {} of {n} completions",
        got.len()
    );
    got
}

fn acks_from(log: &Log, h: usize) -> usize {
    log.borrow()
        .iter()
        .filter(|(f, op)| *f == h && *op == Operation::Acknowledge)
        .count()
}

/// Nobody answers: the ACK leaves at its deadline, not before, and the
/// requester completes one deadline after the round trip.
#[test]
fn an_unanswered_ack_leaves_at_its_deadline() {
    let mut w = deferring();
    let log = record(&mut w);
    let (qa, qb) = w.connect(QpType::Rc, 1024);
    recv(&mut w, 1, qb, 7, 0, 64);
    send(&mut w, 0, qa, 1, 16);
    let got = completions(&mut w, 1);
    assert_eq!(statuses(&got), vec![(1, WcStatus::Success)]);
    // Sent at 0, arrived at latency, ACK held DELAY, back after latency.
    assert_eq!(w.now, 2 * w.latency + DELAY, "completion time");
    assert_eq!(acks_from(&log, 1), 1);
    assert_eq!(w.hosts[1].poll().len(), 1);
    // Holding did not pay: the next ACK leaves at once.
    recv(&mut w, 1, qb, 8, 0, 64);
    send(&mut w, 0, qa, 2, 16);
    let start = w.now;
    let got = completions(&mut w, 1);
    assert_eq!(statuses(&got), vec![(2, WcStatus::Success)]);
    assert_eq!(w.now - start, 2 * w.latency, "held again");
}

/// Deferral off: the ACK leaves with the next transmit.
#[test]
fn off_acks_at_once() {
    let mut w = World::new(1 << 20);
    let (qa, qb) = w.connect(QpType::Rc, 1024);
    recv(&mut w, 1, qb, 7, 0, 64);
    send(&mut w, 0, qa, 1, 16);
    let got = completions(&mut w, 1);
    assert_eq!(statuses(&got), vec![(1, WcStatus::Success)]);
    assert_eq!(w.now, 2 * w.latency);
}

/// The application answers within the delay: the answer leaves first and
/// the ACK right behind it, long before the deadline.
#[test]
fn the_answer_leaves_before_the_ack() {
    let mut w = deferring();
    let log = record(&mut w);
    let (qa, qb) = w.connect(QpType::Rc, 1024);
    recv(&mut w, 1, qb, 7, 0, 64);
    recv(&mut w, 0, qa, 8, 0, 64);
    send(&mut w, 0, qa, 1, 16);
    assert!(w.run_until(10_000, |w| !w.hosts[1].poll().is_empty()));
    let answered_at = w.now;
    send(&mut w, 1, qb, 2, 16);
    let got = completions(&mut w, 2);
    let mut ids: Vec<_> = statuses(&got);
    ids.sort_by_key(|(id, _)| *id);
    assert_eq!(ids, vec![(1, WcStatus::Success), (8, WcStatus::Success)]);
    assert!(w.now < answered_at + DELAY, "waited for the deadline");
    let from_b: Vec<Operation> = log
        .borrow()
        .iter()
        .filter(|(f, _)| *f == 1)
        .map(|(_, op)| *op)
        .collect();
    assert_eq!(from_b[..2], [Operation::SendOnly, Operation::Acknowledge]);
}

/// With `ack_first` (an HCA's order) the held ACK still waits for the
/// answer, but leaves just before it: the requester's send completion
/// comes before the answer's receive.
#[test]
fn ack_first_sends_the_held_ack_before_the_answer() {
    let mut w = deferring_with(true);
    let log = record(&mut w);
    let (qa, qb) = w.connect(QpType::Rc, 1024);
    recv(&mut w, 1, qb, 7, 0, 64);
    recv(&mut w, 0, qa, 8, 0, 64);
    send(&mut w, 0, qa, 1, 16);
    assert!(w.run_until(10_000, |w| !w.hosts[1].poll().is_empty()));
    // Held: nothing from B yet.
    assert_eq!(acks_from(&log, 1), 0);
    let answered_at = w.now;
    send(&mut w, 1, qb, 2, 16);
    let got = completions(&mut w, 2);
    assert!(w.now < answered_at + DELAY, "waited for the deadline");
    // The send completion (wr 1) before the receive (wr 8).
    assert_eq!(
        statuses(&got),
        vec![(1, WcStatus::Success), (8, WcStatus::Success)]
    );
    let from_b: Vec<Operation> = log
        .borrow()
        .iter()
        .filter(|(f, _)| *f == 1)
        .map(|(_, op)| *op)
        .collect();
    assert_eq!(from_b[..2], [Operation::Acknowledge, Operation::SendOnly]);
}

/// With `ack_first`, an answer the peer only sees in memory (an RDMA
/// WRITE) still goes before the held ACK: by the time the requester's
/// send completion shows, the answer's bytes are in its memory (a program
/// that polls until that completion and then reads memory finds them).
#[test]
fn ack_first_keeps_the_ack_behind_a_write_answer() {
    let mut w = deferring_with(true);
    let log = record(&mut w);
    let (qa, qb) = w.connect(QpType::Rc, 1024);
    recv(&mut w, 1, qb, 7, 0, 64);
    send(&mut w, 0, qa, 1, 16);
    assert!(w.run_until(10_000, |w| !w.hosts[1].poll().is_empty()));
    assert_eq!(acks_from(&log, 1), 0, "held");
    // B answers with a WRITE into A's memory at 4096.
    w.hosts[1].write(256, &[0x5a; 16]);
    let answered_at = w.now;
    let (va, rkey) = (w.hosts[0].base + 4096, w.hosts[0].mr.rkey);
    let sge = w.hosts[1].sge(256, 16);
    let wr = SendWr::rdma(2, SendOp::Write, [sge], va, rkey);
    w.hosts[1].dev.post_send(qb, wr).unwrap();
    let mut seen = None;
    assert!(w.run_until(100_000, |w| {
        if w.hosts[0].poll().iter().any(|c| c.wr_id == 1) {
            seen = Some(w.hosts[0].read(4096, 16));
        }
        seen.is_some()
    }));
    assert!(w.now < answered_at + DELAY, "waited for the deadline");
    assert_eq!(
        seen.unwrap(),
        vec![0x5a; 16],
        "completion before the answer's bytes"
    );
    let from_b: Vec<Operation> = log
        .borrow()
        .iter()
        .filter(|(f, _)| *f == 1)
        .map(|(_, op)| *op)
        .collect();
    assert_eq!(from_b[..2], [Operation::WriteOnly, Operation::Acknowledge]);
}

/// The ACK an answer released: in a send call of its own after the
/// answer (`poll_transmit` says [`Tx::EndOfBatch`] once between them), but
/// in the answer's own call with `ack_first`, whose peers wait for it;
/// then [`Tx::Idle`]: nothing more is due.
#[test]
fn the_ack_shares_the_answers_send_call_only_with_ack_first() {
    #[derive(Debug, PartialEq)]
    enum Out {
        Op(Operation),
        EndOfBatch,
        Idle,
    }
    for ack_first in [false, true] {
        let mut w = deferring_with(ack_first);
        let (qa, qb) = w.connect(QpType::Rc, 1024);
        recv(&mut w, 1, qb, 7, 0, 64);
        send(&mut w, 0, qa, 1, 16);
        assert!(w.run_until(10_000, |w| !w.hosts[1].poll().is_empty()));
        let (va, rkey) = (w.hosts[0].base + 4096, w.hosts[0].mr.rkey);
        let sge = w.hosts[1].sge(256, 16);
        let wr = SendWr::rdma(2, SendOp::Write, [sge], va, rkey);
        w.hosts[1].dev.post_send(qb, wr).unwrap();
        // B's datagrams, taken by hand.
        let now = w.now;
        let mut buf = vec![0u8; 4200];
        let mut got = Vec::new();
        for _ in 0..4 {
            got.push(match w.hosts[1].dev.poll_transmit(now, &mut buf) {
                Tx::Datagram(t) => Out::Op(op_of(&buf[..t.size])),
                Tx::EndOfBatch => Out::EndOfBatch,
                Tx::Idle => Out::Idle,
            });
        }
        let want = if ack_first {
            vec![
                Out::Op(Operation::WriteOnly),
                Out::Op(Operation::Acknowledge),
                Out::Idle,
                Out::Idle,
            ]
        } else {
            vec![
                Out::Op(Operation::WriteOnly),
                Out::EndOfBatch,
                Out::Op(Operation::Acknowledge),
                Out::Idle,
            ]
        };
        assert_eq!(got, want, "ack_first {ack_first}");
    }
}

/// A stream from a requester with a small window: the ACK covering
/// `max_psns` goes at once, so the requester never waits out the delay.
#[test]
fn a_stream_is_acked_every_max_psns() {
    let mut w = World::with_config(1 << 20, |c| {
        c.ack_delay = AckDelay {
            max_delay: DELAY,
            max_psns: 8,
            ack_first: false,
        };
        c.max_unacked_psns = 8;
    });
    let log = record(&mut w);
    let (qa, _qb) = w.connect(QpType::Rc, 1024);
    // 64 one-packet WRITEs, each asking for an ACK.
    for i in 0..64u64 {
        let (va, rkey) = (w.hosts[1].base + i * 64, w.hosts[1].mr.rkey);
        let sge = w.hosts[0].sge(i * 64, 64);
        let mut wr = SendWr::rdma(i, SendOp::Write, [sge], va, rkey);
        wr.flags = if i == 63 {
            SendFlags::SIGNALED
        } else {
            SendFlags(0)
        };
        w.hosts[0].dev.post_send(qa, wr).unwrap();
    }
    let got = completions(&mut w, 1);
    assert_eq!(statuses(&got), vec![(63, WcStatus::Success)]);
    // A window of 8 PSNs, each window's ACK released by its span.
    // 64 = 7 windows of 9 PSNs (una + 8) and one more: each window's ACK
    // leaves by its span, and only the tail waits out the delay.
    assert_eq!(acks_from(&log, 1), 8);
    assert!(
        w.now < DELAY + 20 * w.latency,
        "a window waited for a deadline"
    );
}

/// The application sees the SEND and moves its QP to the error state
/// before the ACK's deadline: the ACK still goes, so the requester's SEND
/// succeeds (as it would have with deferral off).
#[test]
fn an_ack_deferred_when_the_qp_errs_still_goes() {
    let mut w = deferring();
    let (qa, qb) = w.connect(QpType::Rc, 1024);
    recv(&mut w, 1, qb, 7, 0, 64);
    send(&mut w, 0, qa, 1, 16);
    assert!(w.run_until(10_000, |w| !w.hosts[1].poll().is_empty()));
    let err = QpAttr {
        qp_state: QpState::Err,
        ..QpAttr::default()
    };
    w.hosts[1]
        .dev
        .modify_qp(qb, &err, QpAttrMask::STATE)
        .unwrap();
    let got = completions(&mut w, 1);
    assert_eq!(statuses(&got), vec![(1, WcStatus::Success)]);
}

/// Destroyed, or reset, with its ACK deferred: the ACK is the QP's last
/// packet.
#[test]
fn an_ack_deferred_when_the_qp_goes_is_its_last_packet() {
    for reset in [false, true] {
        let mut w = deferring();
        let (qa, qb) = w.connect(QpType::Rc, 1024);
        recv(&mut w, 1, qb, 7, 0, 64);
        send(&mut w, 0, qa, 1, 16);
        assert!(w.run_until(10_000, |w| !w.hosts[1].poll().is_empty()));
        if reset {
            let r = QpAttr {
                qp_state: QpState::Reset,
                ..QpAttr::default()
            };
            w.hosts[1].dev.modify_qp(qb, &r, QpAttrMask::STATE).unwrap();
        } else {
            w.hosts[1].dev.destroy_qp(qb).unwrap();
        }
        let got = completions(&mut w, 1);
        assert_eq!(
            statuses(&got),
            vec![(1, WcStatus::Success)],
            "reset {reset}"
        );
        assert!(w.now < DELAY, "reset {reset}: waited for the deadline");
    }
}

/// The deadline is the engine's: `poll_timeout` names it while the ACK is
/// held, and `handle_timeout` at that time makes the ACK leave.
#[test]
fn the_deadline_is_a_timer_of_the_engine() {
    let mut w = deferring();
    let (qa, qb) = w.connect(QpType::Rc, 1024);
    recv(&mut w, 1, qb, 7, 0, 64);
    send(&mut w, 0, qa, 1, 16);
    let mut buf = vec![0u8; 4400];
    let n = w.hosts[0]
        .dev
        .poll_transmit(0, &mut buf)
        .datagram()
        .unwrap()
        .size;
    let b = &mut w.hosts[1].dev;
    b.handle_datagram(1_000, &buf[..n], RxMeta::default());
    assert_eq!(b.poll_transmit(1_000, &mut buf), Tx::Idle, "held");
    assert_eq!(b.poll_timeout(), Some(1_000 + DELAY));
    assert_eq!(
        b.poll_transmit(1_000 + DELAY - 1, &mut buf).datagram(),
        None
    );
    b.handle_timeout(1_000 + DELAY);
    let n = b
        .poll_transmit(1_000 + DELAY, &mut buf)
        .datagram()
        .expect("the ACK")
        .size;
    assert_eq!(op_of(&buf[..n]), Operation::Acknowledge);
    assert_eq!(b.poll_transmit(1_000 + DELAY, &mut buf).datagram(), None);
}
