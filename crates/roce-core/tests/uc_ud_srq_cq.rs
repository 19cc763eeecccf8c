//! UC, UD, SRQ, CQ, atomics, memory regions and inline data against the
//! IBTA rules and rxe's behaviour: loss in UC messages, Q_Keys and the GRH
//! of UD, SRQ sharing, limits and flushes, CQ overflow and notification,
//! atomic byte order and replay, region bounds and access, post limits.

mod common;

use std::sync::{Arc, Mutex};

use common::*;
use roce_core::*;
use roce_wire::{Operation, RocePacket};

fn statuses(v: &[Wc]) -> Vec<(u64, WcStatus)> {
    v.iter().map(|c| (c.wr_id, c.status)).collect()
}

fn recv(w: &mut World, h: usize, qp: Qpn, wr_id: u64, off: u64, len: u32) {
    let sge = w.hosts[h].sge(off, len);
    w.hosts[h]
        .dev
        .post_recv(
            qp,
            RecvWr {
                wr_id,
                sgl: vec![sge],
            },
        )
        .unwrap();
}

fn op_of(d: &[u8]) -> Operation {
    RocePacket::parse_ip(d).unwrap().bth.opcode.operation()
}

fn events(w: &mut World, h: usize) -> Vec<AsyncEvent> {
    let mut v = Vec::new();
    while let Some(e) = w.hosts[h].dev.poll_event() {
        v.push(e);
    }
    v
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

/// UC: a SEND of 3 packets loses its MIDDLE; the receive WR must not
/// complete, and the next message reuses it.
#[test]
fn uc_mid_message_loss_reuses_the_receive() {
    let mut w = World::with_mtu(1 << 16, 256);
    let (qa, qb) = w.connect(QpType::Uc, 256);
    recv(&mut w, 1, qb, 100, 0, 1024);
    recv(&mut w, 1, qb, 101, 1024, 1024);
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
    let d1 = pattern(768, 1);
    let d2 = pattern(600, 2);
    w.hosts[0].write(0, &d1);
    w.hosts[0].write(2048, &d2);
    w.hosts[0]
        .dev
        .post_send(qa, SendWr::send(1, vec![w.hosts[0].sge(0, 768)]))
        .unwrap();
    w.settle(10_000);
    assert_eq!(statuses(&w.hosts[0].poll()), vec![(1, WcStatus::Success)]);
    assert!(
        w.hosts[1].poll().is_empty(),
        "no completion for a broken message"
    );
    w.hosts[0]
        .dev
        .post_send(qa, SendWr::send(2, vec![w.hosts[0].sge(2048, 600)]))
        .unwrap();
    w.settle(10_000);
    assert_eq!(statuses(&w.hosts[0].poll()), vec![(2, WcStatus::Success)]);
    let cb = w.hosts[1].poll();
    assert_eq!(statuses(&cb), vec![(100, WcStatus::Success)]);
    assert_eq!(cb[0].byte_len, 600);
    assert_eq!(w.hosts[1].read(0, 600), d2);
    assert_eq!(w.hosts[1].dev.qp(qb).unwrap().state(), QpState::Rts);
}

/// UC: the LAST of a message is lost; the next message's FIRST (a PSN
/// gap) resynchronises.
#[test]
fn uc_lost_last_resyncs_on_next_first() {
    let mut w = World::with_mtu(1 << 16, 256);
    let (qa, qb) = w.connect(QpType::Uc, 256);
    recv(&mut w, 1, qb, 100, 0, 1024);
    let dropped = Arc::new(Mutex::new(false));
    let d2 = dropped.clone();
    w.filter = Box::new(move |from, d| {
        let mut dd = d2.lock().unwrap();
        if from == 0 && op_of(d) == Operation::SendLast && !*dd {
            *dd = true;
            return Verdict::Drop;
        }
        Verdict::Deliver
    });
    let data = pattern(512, 3);
    w.hosts[0].write(0, &pattern(512, 9));
    w.hosts[0].write(4096, &data);
    w.hosts[0]
        .dev
        .post_send(qa, SendWr::send(1, vec![w.hosts[0].sge(0, 512)]))
        .unwrap();
    w.hosts[0]
        .dev
        .post_send(qa, SendWr::send(2, vec![w.hosts[0].sge(4096, 512)]))
        .unwrap();
    w.settle(10_000);
    let cb = w.hosts[1].poll();
    assert_eq!(statuses(&cb), vec![(100, WcStatus::Success)]);
    assert_eq!(cb[0].byte_len, 512);
    assert_eq!(w.hosts[1].read(0, 512), data);
}

/// UC WRITE with immediate: memory written, a receive consumed with
/// RECV_RDMA_WITH_IMM and the DMA length; without a receive the message is
/// dropped and the QP stays usable.
#[test]
fn uc_write_with_imm() {
    let mut w = World::with_mtu(1 << 16, 256);
    let (qa, qb) = w.connect(QpType::Uc, 256);
    let data = pattern(700, 5);
    w.hosts[0].write(0, &data);
    // No receive: dropped silently.
    w.post_rdma(qa, SendOp::WriteWithImm(0xabcd), 0, 700, 8192);
    w.settle(10_000);
    assert_eq!(statuses(&w.hosts[0].poll()), vec![(1, WcStatus::Success)]);
    assert!(w.hosts[1].poll().is_empty());
    assert_eq!(w.hosts[1].dev.qp(qb).unwrap().state(), QpState::Rts);
    recv(&mut w, 1, qb, 100, 0, 16);
    w.post_rdma(qa, SendOp::WriteWithImm(0x1234), 0, 700, 4096);
    w.settle(10_000);
    assert_eq!(statuses(&w.hosts[0].poll()), vec![(1, WcStatus::Success)]);
    let cb = w.hosts[1].poll();
    assert_eq!(statuses(&cb), vec![(100, WcStatus::Success)]);
    assert_eq!(cb[0].opcode, WcOpcode::RecvRdmaWithImm);
    assert_eq!((cb[0].byte_len, cb[0].imm_data), (700, 0x1234));
    assert!(cb[0].wc_flags.contains(WcFlags::WITH_IMM));
    assert_eq!(w.hosts[1].read(4096, 700), data);
}

/// UC: the requester completes at send, even when everything is lost.
#[test]
fn uc_requester_completes_at_send() {
    let mut w = World::with_mtu(1 << 16, 256);
    let (qa, _qb) = w.connect(QpType::Uc, 256);
    w.filter = Box::new(|_, _| Verdict::Drop);
    w.hosts[0]
        .dev
        .post_send(qa, SendWr::send(1, vec![w.hosts[0].sge(0, 1000)]))
        .unwrap();
    w.settle(10_000);
    assert_eq!(statuses(&w.hosts[0].poll()), vec![(1, WcStatus::Success)]);
}

/// UC: a SEND longer than the receive buffer is dropped (rxe: class D,
/// `drop_msg`), the QP stays usable and the receive serves the next
/// message.
#[test]
fn uc_receive_too_small_keeps_the_qp() {
    let mut w = World::with_mtu(1 << 16, 256);
    let (qa, qb) = w.connect(QpType::Uc, 256);
    recv(&mut w, 1, qb, 100, 0, 100);
    w.hosts[0]
        .dev
        .post_send(qa, SendWr::send(1, vec![w.hosts[0].sge(0, 200)]))
        .unwrap();
    w.settle(10_000);
    assert!(w.hosts[1].poll().is_empty());
    assert!(events(&mut w, 1).is_empty());
    assert_eq!(w.hosts[1].dev.qp(qb).unwrap().state(), QpState::Rts);
    w.hosts[0].write(0, &[0x3c; 80]);
    w.hosts[0]
        .dev
        .post_send(qa, SendWr::send(2, vec![w.hosts[0].sge(0, 80)]))
        .unwrap();
    w.settle(10_000);
    let cb = w.hosts[1].poll();
    assert_eq!(statuses(&cb), vec![(100, WcStatus::Success)]);
    assert_eq!(cb[0].byte_len, 80);
    assert_eq!(w.hosts[1].read(0, 80), vec![0x3c; 80]);
}

/// UD Q_Key: a WR Q_Key with the high bit set uses the QP's own; a
/// mismatched one is dropped.
#[test]
fn ud_qkey_rules() {
    let mut w = World::new(1 << 16);
    // The harness gives both UD QPs the Q_Key 0x1111_1111.
    let (qa, qb) = w.connect(QpType::Ud, 1024);
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s2 = seen.clone();
    w.filter = Box::new(move |_, d| {
        let p = RocePacket::parse_ip(d).unwrap();
        s2.lock().unwrap().push(p.ext.deth.unwrap().qkey.value());
        Verdict::Deliver
    });
    for (i, qkey) in [0x8000_0000u32, 0x1234, 0x1111_1111, 0xffff_ffff]
        .into_iter()
        .enumerate()
    {
        recv(&mut w, 1, qb, 100 + i as u64, 0, 1000);
        let mut wr = SendWr::send(i as u64, vec![w.hosts[0].sge(0, 16)]);
        wr.ud = Some(UdDest::new(w.hosts[1].addr(), qb, Qkey::new(qkey)));
        w.hosts[0].dev.post_send(qa, wr).unwrap();
        w.settle(10_000);
    }
    assert_eq!(
        *seen.lock().unwrap(),
        vec![0x1111_1111, 0x1234, 0x1111_1111, 0x1111_1111]
    );
    let cb = w.hosts[1].poll();
    assert_eq!(
        statuses(&cb),
        vec![
            (100, WcStatus::Success),
            (101, WcStatus::Success),
            (102, WcStatus::Success)
        ]
    );
    assert_eq!(w.hosts[1].dev.qp_counters(qb).unwrap().drop_qkey, 1);
}

/// UD receive buffers too small: for the GRH alone, and for the payload.
#[test]
fn ud_receive_too_small() {
    let mut w = World::new(1 << 16);
    let (qa, qb) = w.connect(QpType::Ud, 1024);
    recv(&mut w, 1, qb, 100, 0, 30);
    recv(&mut w, 1, qb, 101, 1024, 50);
    recv(&mut w, 1, qb, 102, 2048, 56);
    for i in 0..3 {
        let mut wr = SendWr::send(i, vec![w.hosts[0].sge(0, 16)]);
        wr.ud = Some(UdDest::new(w.hosts[1].addr(), qb, Qkey::new(0x1111_1111)));
        w.hosts[0].dev.post_send(qa, wr).unwrap();
    }
    w.settle(10_000);
    let cb = w.hosts[1].poll();
    assert_eq!(
        statuses(&cb),
        vec![
            (100, WcStatus::LocLenErr),
            (101, WcStatus::LocLenErr),
            (102, WcStatus::Success)
        ]
    );
    assert_eq!(cb[2].byte_len, 56);
    assert_eq!(cb[2].qp_num, qb);
    assert_eq!(cb[2].src_qp, qa);
    assert_eq!(w.hosts[1].dev.qp(qb).unwrap().state(), QpState::Rts);
}

/// Creates a QP on each host (init attributes adjusted by `tweak(host,
/// init)`) and brings both up.
fn pair(
    w: &mut World,
    ty: QpType,
    pmtu: u32,
    tweak: impl Fn(usize, &mut QpInitAttr),
) -> (Qpn, Qpn) {
    let mut q = [Qpn::new(0); 2];
    for (i, h) in w.hosts.iter_mut().enumerate() {
        let mut init = QpInitAttr {
            qp_type: ty,
            pd: h.pd,
            send_cq: h.cq,
            recv_cq: h.cq,
            srq: None,
            cap: QpCaps::default(),
            sq_sig_all: false,
        };
        tweak(i, &mut init);
        q[i] = h.dev.create_qp(init).unwrap();
    }
    let addrs = [w.hosts[0].addr(), w.hosts[1].addr()];
    for i in 0..2 {
        bring_up(
            &mut w.hosts[i].dev,
            q[i],
            ty,
            pmtu,
            addrs[1 - i],
            q[1 - i],
            Psn::new(0x100 * (i as u32 + 1)),
            Psn::new(0x100 * (2 - i as u32)),
        );
    }
    (q[0], q[1])
}

fn srq_recv(w: &mut World, srq: SrqId, wr_id: u64, off: u64, len: u32) {
    let sge = w.hosts[1].sge(off, len);
    w.hosts[1]
        .dev
        .post_srq_recv(
            srq,
            RecvWr {
                wr_id,
                sgl: vec![sge],
            },
        )
        .unwrap();
}

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
        .post_send(qa2, SendWr::send(1, vec![w.hosts[0].sge(0, 10)]))
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
            .post_send(qa, SendWr::send(id, vec![w.hosts[0].sge(0, 10)]))
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
            sgl: vec![],
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
            sgl: vec![sge; 100_000],
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
        .post_send(qa, SendWr::send(1, vec![w.hosts[0].sge(0, 768)]))
        .unwrap();
    w.settle(10_000);
    w.hosts[0]
        .dev
        .post_send(qa, SendWr::send(2, vec![w.hosts[0].sge(0, 300)]))
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
            .post_send(qa, SendWr::send(i, vec![w.hosts[0].sge(0, 10)]))
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
        let mut wr = SendWr::send(id, vec![w.hosts[0].sge(0, 10)]);
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
                vec![w.hosts[0].sge(0, 8)],
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
        vec![w.hosts[0].sge(0, 8)],
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
        vec![w.hosts[0].sge(0, 8)],
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
        vec![],
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
            let wr = SendWr::rdma(i as u64, op, vec![], 0x42, bogus);
            w.hosts[0].dev.post_send(qa, wr).unwrap();
        }
        recv(&mut w, 1, qb, 200, 0, 64);
        w.hosts[0]
            .dev
            .post_send(qa, SendWr::send(10, vec![]))
            .unwrap();
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
        .post_send(qa, SendWr::send(1, vec![sge]))
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
    let wr = SendWr::rdma(
        1,
        SendOp::Read,
        vec![sge],
        w.hosts[1].base,
        w.hosts[1].mr.rkey,
    );
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
    let mut wr = SendWr::send(1, vec![w.hosts[0].sge(0, 64)]);
    wr.flags = wr.flags | SendFlags::INLINE;
    w.hosts[0].dev.post_send(qa, wr.clone()).unwrap();
    w.hosts[0].write(0, &[9u8; 64]);
    w.settle(10_000);
    assert_eq!(w.hosts[1].read(0, 64), vec![7u8; 64]);
    let mut big = SendWr::send(2, vec![w.hosts[0].sge(0, 65)]);
    big.flags = big.flags | SendFlags::INLINE;
    assert_eq!(
        w.hosts[0].dev.post_send(qa, big),
        Err(PostError::InlineTooLong)
    );
    let s = w.hosts[0].sge(0, 1);
    assert!(w.hosts[0]
        .dev
        .post_send(qa, SendWr::send(3, vec![s; 2]))
        .is_ok());
    assert_eq!(
        w.hosts[0].dev.post_send(qa, SendWr::send(4, vec![s; 3])),
        Err(PostError::TooManySge)
    );
    let r = w.hosts[1].sge(0, 1);
    assert!(w.hosts[1]
        .dev
        .post_recv(
            qb,
            RecvWr {
                wr_id: 5,
                sgl: vec![r; 2]
            }
        )
        .is_ok());
    assert_eq!(
        w.hosts[1].dev.post_recv(
            qb,
            RecvWr {
                wr_id: 6,
                sgl: vec![r; 3]
            }
        ),
        Err(PostError::TooManySge)
    );
    // An inline payload given directly, longer than max_inline_data.
    let mut direct = SendWr::send(7, vec![]);
    direct.payload = Payload::Inline(vec![1; 1000]);
    assert_eq!(
        w.hosts[0].dev.post_send(qa, direct),
        Err(PostError::InlineTooLong)
    );
}

/// UD over IPv6: the 40-byte GRH area holds the IPv6 header.
#[test]
fn ud_ipv6_grh() {
    let mut a = Host::new("fd00::1", 1 << 16, 0x1000_0000);
    let mut b = Host::new("fd00::2", 1 << 16, 0x2000_0000);
    let mk = |h: &mut Host| {
        h.dev
            .create_qp(QpInitAttr {
                qp_type: QpType::Ud,
                pd: h.pd,
                send_cq: h.cq,
                recv_cq: h.cq,
                srq: None,
                cap: QpCaps::default(),
                sq_sig_all: false,
            })
            .unwrap()
    };
    let (qa, qb) = (mk(&mut a), mk(&mut b));
    let (aa, ba) = (a.addr(), b.addr());
    bring_up(
        &mut a.dev,
        qa,
        QpType::Ud,
        1024,
        ba,
        qb,
        Psn::new(1),
        Psn::new(1),
    );
    bring_up(
        &mut b.dev,
        qb,
        QpType::Ud,
        1024,
        aa,
        qa,
        Psn::new(1),
        Psn::new(1),
    );
    let sge = b.sge(0, 100);
    b.dev
        .post_recv(
            qb,
            RecvWr {
                wr_id: 5,
                sgl: vec![sge],
            },
        )
        .unwrap();
    a.write(0, b"hello6");
    let mut wr = SendWr::send(1, vec![a.sge(0, 6)]);
    wr.ud = Some(UdDest::new(ba, qb, Qkey::new(0x1111_1111)));
    a.dev.post_send(qa, wr).unwrap();
    let mut buf = vec![0u8; 4400];
    let n = a.dev.poll_transmit(0, &mut buf).unwrap();
    b.dev.handle_datagram(10, &buf[..n], RxInfo::default());
    let c = b.poll();
    assert_eq!(
        (c[0].status, c[0].byte_len, c[0].src_qp),
        (WcStatus::Success, 46, qa)
    );
    let grh = b.read(0, 46);
    assert_eq!(grh[0] >> 4, 6);
    assert_eq!(&grh[..40], &buf[..40]);
    assert_eq!(&grh[40..], b"hello6");
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
        .post_send(qa, SendWr::send(1, vec![w.hosts[0].sge(0, 768)]))
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

/// A request whose BTH P_Key does not match the port's only partition
/// (0xFFFF) is dropped (as rxe's check_keys: pkey_match).
#[test]
fn bad_pkey_is_dropped() {
    let mut w = World::new(1 << 16);
    let (qa, qb) = w.connect(QpType::Ud, 1024);
    recv(&mut w, 1, qb, 100, 0, 1000);
    w.filter = Box::new(|from, d| {
        if from == 0 {
            Verdict::Replace(rewrite(d, |r| r.bth.pkey = roce_wire::Pkey(0x1234)))
        } else {
            Verdict::Deliver
        }
    });
    let mut wr = SendWr::send(1, vec![w.hosts[0].sge(0, 16)]);
    wr.ud = Some(UdDest::new(w.hosts[1].addr(), qb, Qkey::new(0x1111_1111)));
    w.hosts[0].dev.post_send(qa, wr).unwrap();
    w.settle(10_000);
    let cb = w.hosts[1].poll();
    assert!(cb.is_empty(), "P_Key 0x1234 accepted: {:?}", statuses(&cb));
}

/// UC under random loss: every receive that completes holds exactly one
/// whole message, in order; none completes with partial data.
#[test]
fn uc_random_loss_never_completes_partial_messages() {
    for seed in 1..40u64 {
        let mut w = World::with_mtu(1 << 20, 256);
        let (qa, qb) = w.connect(QpType::Uc, 256);
        let mut rng = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        let mut next = move || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        let loss_seed = next();
        let state = Arc::new(Mutex::new(loss_seed));
        let s2 = state.clone();
        w.filter = Box::new(move |_, _| {
            let mut r = s2.lock().unwrap();
            *r ^= *r << 13;
            *r ^= *r >> 7;
            *r ^= *r << 17;
            if *r % 10 == 0 {
                Verdict::Drop
            } else {
                Verdict::Deliver
            }
        });
        let mut msgs = Vec::new();
        for i in 0..40u64 {
            recv(&mut w, 1, qb, 1000 + i, 4096 * i, 4096);
        }
        for i in 0..40u64 {
            let len = (next() % 2000) as usize;
            let data = pattern(len, i as u8);
            w.hosts[0].write(4096 * i, &data);
            msgs.push(data);
            let mut wr = SendWr::send(i, vec![w.hosts[0].sge(4096 * i, len as u32)]);
            if next() % 3 == 0 {
                wr.op = SendOp::SendWithImm(i as u32);
            }
            w.hosts[0].dev.post_send(qa, wr).unwrap();
        }
        w.settle(1_000_000);
        let cb = w.hosts[1].poll();
        let mut last = None;
        for (k, c) in cb.iter().enumerate() {
            assert_eq!(c.status, WcStatus::Success, "seed {seed}");
            // The k-th completion uses the k-th receive.
            assert_eq!(c.wr_id, 1000 + k as u64, "seed {seed}");
            let got = w.hosts[1].read(4096 * k as u64, c.byte_len as usize);
            let idx = msgs
                .iter()
                .position(|m| *m == got)
                .unwrap_or_else(|| panic!("seed {seed}: completion {k} holds no whole message"));
            assert!(last.is_none_or(|l| idx > l), "seed {seed}: out of order");
            if c.wc_flags.contains(WcFlags::WITH_IMM) {
                assert_eq!(c.imm_data as usize, idx, "seed {seed}");
            }
            last = Some(idx);
        }
        assert_eq!(w.hosts[1].dev.qp(qb).unwrap().state(), QpState::Rts);
    }
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
        .post_send(qa, SendWr::send(2, vec![w.hosts[0].sge(100, 10)]))
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
        .post_send(qa, SendWr::send(1, vec![w.hosts[0].sge(0, 10)]))
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
            .post_send(qa, SendWr::send(1, vec![w.hosts[0].sge(0, 768)]))
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
