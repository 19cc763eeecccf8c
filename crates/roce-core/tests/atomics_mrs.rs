//! Atomics, memory regions and inline data against the IBTA rules and
//! rxe's behaviour: atomic byte order, replay and access rights, region
//! bounds, access flags and deregistration, zero-length operations, the
//! limits a post checks.

mod common;

use std::sync::{Arc, Mutex};

use common::*;
use roce_core::*;
use roce_wire::Operation;

/// Atomics: the AtomicETH carries swap and compare big-endian; memory
/// holds native words; CAS swaps only when equal; FETCH_ADD wraps.
#[test]
fn atomic_wire_and_memory_byte_order() {
    let mut w = World::new(1 << 16);
    let (qa, _qb) = w.connect(QpType::Rc, 1024);
    let wire = Arc::new(Mutex::new(Vec::new()));
    let w2 = wire.clone();
    w.filter = Box::new(move |from, d| {
        if from == 0 && op_of(d) == Operation::CompareSwap {
            w2.lock().unwrap().push(d.to_vec());
        }
        Verdict::Deliver
    });
    w.hosts[1].write(64, &0x1122_3344_5566_7788u64.to_ne_bytes());
    let cas = |compare, swap| SendOp::CompareSwap { compare, swap };
    w.post_rdma(
        qa,
        cas(0x1122_3344_5566_7788, 0x0102_0304_0506_0708),
        0,
        8,
        64,
    );
    w.settle(10_000);
    assert_eq!(statuses(&w.hosts[0].poll()), vec![(1, WcStatus::Success)]);
    assert_eq!(
        w.hosts[0].read(0, 8),
        0x1122_3344_5566_7788u64.to_ne_bytes()
    );
    assert_eq!(
        w.hosts[1].read(64, 8),
        0x0102_0304_0506_0708u64.to_ne_bytes()
    );
    let d = wire.lock().unwrap()[0].clone();
    // IPv4 20 + UDP 8 + BTH 12, then VA 8, R_Key 4, swap 8, compare 8.
    assert_eq!(&d[40..48], &(w.hosts[1].base + 64).to_be_bytes());
    assert_eq!(&d[52..60], &0x0102_0304_0506_0708u64.to_be_bytes());
    assert_eq!(&d[60..68], &0x1122_3344_5566_7788u64.to_be_bytes());
    // A failing compare leaves memory alone and returns the original.
    w.post_rdma(qa, cas(5, 6), 8, 8, 64);
    w.settle(10_000);
    assert_eq!(statuses(&w.hosts[0].poll()), vec![(1, WcStatus::Success)]);
    assert_eq!(
        w.hosts[0].read(8, 8),
        0x0102_0304_0506_0708u64.to_ne_bytes()
    );
    assert_eq!(
        w.hosts[1].read(64, 8),
        0x0102_0304_0506_0708u64.to_ne_bytes()
    );
    // FETCH_ADD wraps.
    w.hosts[1].write(72, &u64::MAX.to_ne_bytes());
    w.post_rdma(qa, SendOp::FetchAdd { add: 2 }, 16, 8, 72);
    w.settle(10_000);
    assert_eq!(w.hosts[0].poll()[0].byte_len, 8);
    assert_eq!(w.hosts[0].read(16, 8), u64::MAX.to_ne_bytes());
    assert_eq!(w.hosts[1].read(72, 8), 1u64.to_ne_bytes());
}

/// The first ATOMIC_ACK is lost: the retried FETCH_ADD is a duplicate, is
/// answered from the record and is not executed again.
#[test]
fn atomic_replay_executes_once() {
    let mut w = World::new(1 << 16);
    let (qa, qb) = w.connect(QpType::Rc, 1024);
    let dropped = Arc::new(Mutex::new(false));
    let d2 = dropped.clone();
    w.filter = Box::new(move |from, d| {
        let mut dd = d2.lock().unwrap();
        if from == 1 && op_of(d) == Operation::AtomicAcknowledge && !*dd {
            *dd = true;
            return Verdict::Drop;
        }
        Verdict::Deliver
    });
    w.hosts[1].write(64, &40u64.to_ne_bytes());
    w.post_rdma(qa, SendOp::FetchAdd { add: 2 }, 0, 8, 64);
    w.settle(100_000);
    assert_eq!(statuses(&w.hosts[0].poll()), vec![(1, WcStatus::Success)]);
    assert_eq!(w.hosts[0].read(0, 8), 40u64.to_ne_bytes());
    assert_eq!(w.hosts[1].read(64, 8), 42u64.to_ne_bytes());
    assert_eq!(w.hosts[1].dev.qp_counters(qb).unwrap().atomic_replays, 1);
}

/// Atomics on a region without REMOTE_ATOMIC, and into a local buffer
/// without LOCAL_WRITE.
#[test]
fn atomic_access_rights() {
    let mut w = World::new(1 << 16);
    let (qa, _qb) = w.connect(QpType::Rc, 1024);
    let pd1 = w.hosts[1].pd;
    let no_atomic = w.hosts[1]
        .dev
        .reg_mr(
            pd1,
            0x5000_0000,
            Box::new(vec![0u8; 64]),
            Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ,
        )
        .unwrap();
    let wr = SendWr::rdma(
        1,
        SendOp::FetchAdd { add: 1 },
        [w.hosts[0].sge(0, 8)],
        0x5000_0000,
        no_atomic.rkey,
    );
    w.hosts[0].dev.post_send(qa, wr).unwrap();
    w.settle(100_000);
    assert_eq!(
        statuses(&w.hosts[0].poll()),
        vec![(1, WcStatus::RemAccessErr)]
    );
}

/// Inline payload for a READ or atomic (no INLINE flag): there is nowhere
/// to put the result, yet the post is accepted and the remote atomic runs.
#[test]
fn atomic_with_inline_payload_is_refused_at_post() {
    let mut w = World::new(1 << 16);
    let (qa, _qb) = w.connect(QpType::Rc, 1024);
    w.hosts[1].write(64, &7u64.to_ne_bytes());
    let mut wr = SendWr::rdma(
        1,
        SendOp::FetchAdd { add: 1 },
        [],
        w.hosts[1].base + 64,
        w.hosts[1].mr.rkey,
    );
    wr.payload = Payload::Inline(vec![0; 8]);
    let r = w.hosts[0].dev.post_send(qa, wr);
    assert!(matches!(r, Err(PostError::InvalidWr(_))), "{r:?}");
    w.settle(100_000);
    assert!(w.hosts[0].poll().is_empty());
    // Not executed remotely.
    assert_eq!(w.hosts[1].read(64, 8), 7u64.to_ne_bytes());
}

/// Registration refuses remote write or atomic rights without LOCAL_WRITE.
#[test]
fn mr_access_flag_combinations() {
    let mut w = World::new(64);
    let h = &mut w.hosts[0];
    let pd = h.pd;
    for (acc, ok) in [
        (Access::REMOTE_WRITE, false),
        (Access::REMOTE_ATOMIC, false),
        (Access::REMOTE_READ, true),
        (Access::NONE, true),
        (Access::LOCAL_WRITE | Access::REMOTE_WRITE, true),
        (Access::REMOTE_READ | Access::REMOTE_WRITE, false),
    ] {
        let r = h.dev.reg_mr(pd, 0x9000, Box::new(vec![0u8; 16]), acc);
        assert_eq!(r.is_ok(), ok, "{acc:?}");
    }
}

/// Bounds at the exact end of a region, for WRITE and READ.
#[test]
fn mr_bounds_at_the_exact_end() {
    let len = 1 << 12;
    for (op, off, ok) in [
        (SendOp::Write, len - 8, true),
        (SendOp::Write, len - 7, false),
        (SendOp::Read, len - 8, true),
        (SendOp::Read, len - 7, false),
        (SendOp::Write, len, true), // 0 bytes at the end: done below
    ] {
        let mut w = World::new(len as usize);
        let (qa, _qb) = w.connect(QpType::Rc, 1024);
        let n = if off == len { 0 } else { 8 };
        w.post_rdma(qa, op, 0, n, off);
        w.settle(100_000);
        let c = w.hosts[0].poll();
        let want = if ok {
            WcStatus::Success
        } else {
            WcStatus::RemAccessErr
        };
        assert_eq!(statuses(&c), vec![(1, want)], "{op:?} at {off}");
    }
}

/// Zero-length READ and WRITE need no valid R_Key (IBTA 9.7.4.1.5: the
/// R_Key is not checked when the DMA length is 0); a 0-byte SEND and a
/// 0-byte WRITE with immediate complete a receive with byte_len 0.
#[test]
fn zero_length_operations() {
    for ty in [QpType::Rc, QpType::Uc] {
        let mut w = World::new(1 << 16);
        let (qa, qb) = w.connect(ty, 1024);
        let bogus = Rkey::new(0xdead_be00);
        let mut ops = vec![SendOp::Write, SendOp::WriteWithImm(9)];
        if ty == QpType::Rc {
            ops.push(SendOp::Read);
        }
        for (i, op) in ops.into_iter().enumerate() {
            recv(&mut w, 1, qb, 100 + i as u64, 0, 64);
            let wr = SendWr::rdma(i as u64, op, [], 0x42, bogus);
            w.hosts[0].dev.post_send(qa, wr).unwrap();
        }
        recv(&mut w, 1, qb, 200, 0, 64);
        w.hosts[0].dev.post_send(qa, SendWr::send(10, [])).unwrap();
        w.settle(100_000);
        let ca = w.hosts[0].poll();
        assert!(
            ca.iter().all(|c| c.status == WcStatus::Success),
            "{ty:?} {ca:?}"
        );
        let cb = w.hosts[1].poll();
        assert_eq!(
            cb.iter()
                .map(|c| (c.wr_id, c.status, c.byte_len, c.opcode))
                .collect::<Vec<_>>(),
            vec![
                (100, WcStatus::Success, 0, WcOpcode::RecvRdmaWithImm),
                (101, WcStatus::Success, 0, WcOpcode::Recv)
            ],
            "{ty:?}"
        );
    }
}

/// A region deregistered while a posted SEND still names it: the WR fails
/// with a local protection error (no panic, no stale access).
#[test]
fn mr_dereg_while_in_use() {
    let mut w = World::new(1 << 16);
    let (qa, qb) = w.connect(QpType::Rc, 1024);
    recv(&mut w, 1, qb, 100, 0, 4096);
    let pd = w.hosts[0].pd;
    let mr2 = w.hosts[0]
        .dev
        .reg_mr(
            pd,
            0x7000_0000,
            Box::new(vec![1u8; 4096]),
            Access::LOCAL_WRITE,
        )
        .unwrap();
    let sge = Sge {
        addr: 0x7000_0000,
        length: 4096,
        lkey: mr2.lkey,
    };
    w.hosts[0]
        .dev
        .post_send(qa, SendWr::send(1, [sge]))
        .unwrap();
    w.hosts[0].dev.dereg_mr(mr2).unwrap();
    // Re-register: the stale key must not reach the new region.
    let _mr3 = w.hosts[0]
        .dev
        .reg_mr(
            pd,
            0x7000_0000,
            Box::new(vec![2u8; 4096]),
            Access::LOCAL_WRITE,
        )
        .unwrap();
    w.settle(100_000);
    assert_eq!(
        statuses(&w.hosts[0].poll()),
        vec![(1, WcStatus::LocProtErr)]
    );
}

/// A READ into a local buffer without LOCAL_WRITE fails locally.
#[test]
fn read_into_a_buffer_without_local_write() {
    let mut w = World::new(1 << 16);
    let (qa, _qb) = w.connect(QpType::Rc, 1024);
    let pd = w.hosts[0].pd;
    let ro = w.hosts[0]
        .dev
        .reg_mr(pd, 0x7000_0000, Box::new(vec![0u8; 64]), Access::NONE)
        .unwrap();
    let sge = Sge {
        addr: 0x7000_0000,
        length: 64,
        lkey: ro.lkey,
    };
    let wr = SendWr::rdma(1, SendOp::Read, [sge], w.hosts[1].base, w.hosts[1].mr.rkey);
    w.hosts[0].dev.post_send(qa, wr).unwrap();
    w.settle(100_000);
    assert_eq!(
        statuses(&w.hosts[0].poll()),
        vec![(1, WcStatus::LocProtErr)]
    );
}

/// Inline: the limit is inclusive, the data is taken at post time; SGE
/// counts at the limit pass and above it fail.
#[test]
fn inline_and_sge_limits() {
    let mut w = World::new(1 << 16);
    let (qa, qb) = pair(&mut w, QpType::Rc, 1024, |_, a| {
        a.cap.max_inline_data = 64;
        a.cap.max_send_sge = 2;
        a.cap.max_recv_sge = 2;
    });
    recv(&mut w, 1, qb, 100, 0, 256);
    w.hosts[0].write(0, &[7u8; 65]);
    let mut wr = SendWr::send(1, [w.hosts[0].sge(0, 64)]);
    wr.flags = wr.flags | SendFlags::INLINE;
    w.hosts[0].dev.post_send(qa, wr.clone()).unwrap();
    w.hosts[0].write(0, &[9u8; 64]);
    w.settle(10_000);
    assert_eq!(w.hosts[1].read(0, 64), vec![7u8; 64]);
    let mut big = SendWr::send(2, [w.hosts[0].sge(0, 65)]);
    big.flags = big.flags | SendFlags::INLINE;
    assert_eq!(
        w.hosts[0].dev.post_send(qa, big),
        Err(PostError::InlineTooLong)
    );
    let s = w.hosts[0].sge(0, 1);
    assert!(w.hosts[0]
        .dev
        .post_send(qa, SendWr::send(3, [s; 2]))
        .is_ok());
    assert_eq!(
        w.hosts[0].dev.post_send(qa, SendWr::send(4, [s; 3])),
        Err(PostError::TooManySge)
    );
    let r = w.hosts[1].sge(0, 1);
    assert!(w.hosts[1]
        .dev
        .post_recv(
            qb,
            RecvWr {
                wr_id: 5,
                sgl: vec![r; 2].into()
            }
        )
        .is_ok());
    assert_eq!(
        w.hosts[1].dev.post_recv(
            qb,
            RecvWr {
                wr_id: 6,
                sgl: vec![r; 3].into()
            }
        ),
        Err(PostError::TooManySge)
    );
    // An inline payload given directly, longer than max_inline_data.
    let mut direct = SendWr::send(7, []);
    direct.payload = Payload::Inline(vec![1; 1000]);
    assert_eq!(
        w.hosts[0].dev.post_send(qa, direct),
        Err(PostError::InlineTooLong)
    );
}

/// FETCH_ADD then SEND; the ATOMIC_ACK is lost, the SEND's ACK arrives
/// (an implied NAK): the atomic is re-requested, replayed, not re-executed.
#[test]
fn atomic_ack_lost_then_later_ack() {
    let mut w = World::new(1 << 16);
    let (qa, qb) = w.connect(QpType::Rc, 1024);
    recv(&mut w, 1, qb, 100, 1024, 64);
    let dropped = Arc::new(Mutex::new(false));
    let d2 = dropped.clone();
    w.filter = Box::new(move |from, d| {
        let mut dd = d2.lock().unwrap();
        if from == 1 && op_of(d) == Operation::AtomicAcknowledge && !*dd {
            *dd = true;
            return Verdict::Drop;
        }
        Verdict::Deliver
    });
    w.hosts[1].write(64, &40u64.to_ne_bytes());
    w.post_rdma(qa, SendOp::FetchAdd { add: 2 }, 0, 8, 64);
    w.hosts[0]
        .dev
        .post_send(qa, SendWr::send(2, [w.hosts[0].sge(100, 10)]))
        .unwrap();
    w.settle(100_000);
    assert_eq!(
        statuses(&w.hosts[0].poll()),
        vec![(1, WcStatus::Success), (2, WcStatus::Success)]
    );
    assert_eq!(w.hosts[0].read(0, 8), 40u64.to_ne_bytes());
    assert_eq!(w.hosts[1].read(64, 8), 42u64.to_ne_bytes());
    assert_eq!(statuses(&w.hosts[1].poll()), vec![(100, WcStatus::Success)]);
}
