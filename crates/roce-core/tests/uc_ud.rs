//! UC and UD against the IBTA rules and rxe's behaviour: loss inside UC
//! messages (no partial completion, the receive reused), WRITE with
//! immediate, receives too small, Q_Keys, the GRH of UD receives (IPv4 and
//! IPv6), the P_Key check.

mod common;

use std::sync::{Arc, Mutex};

use common::*;
use roce_core::*;
use roce_testkit::frames::rewrite;
use roce_testkit::rc::{self, Link};
use roce_wire::{Operation, RocePacket};

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
        .post_send(qa, SendWr::send(1, [w.hosts[0].sge(0, 768)]))
        .unwrap();
    w.settle(10_000);
    assert_eq!(statuses(&w.hosts[0].poll()), vec![(1, WcStatus::Success)]);
    assert!(
        w.hosts[1].poll().is_empty(),
        "no completion for a broken message"
    );
    w.hosts[0]
        .dev
        .post_send(qa, SendWr::send(2, [w.hosts[0].sge(2048, 600)]))
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
        .post_send(qa, SendWr::send(1, [w.hosts[0].sge(0, 512)]))
        .unwrap();
    w.hosts[0]
        .dev
        .post_send(qa, SendWr::send(2, [w.hosts[0].sge(4096, 512)]))
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
        .post_send(qa, SendWr::send(1, [w.hosts[0].sge(0, 1000)]))
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
        .post_send(qa, SendWr::send(1, [w.hosts[0].sge(0, 200)]))
        .unwrap();
    w.settle(10_000);
    assert!(w.hosts[1].poll().is_empty());
    assert!(events(&mut w, 1).is_empty());
    assert_eq!(w.hosts[1].dev.qp(qb).unwrap().state(), QpState::Rts);
    w.hosts[0].write(0, &[0x3c; 80]);
    w.hosts[0]
        .dev
        .post_send(qa, SendWr::send(2, [w.hosts[0].sge(0, 80)]))
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
        let mut wr = SendWr::send(i as u64, [w.hosts[0].sge(0, 16)]);
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
        let mut wr = SendWr::send(i, [w.hosts[0].sge(0, 16)]);
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

/// One UD SEND of `hello6` from `from` to `to`: the receive's
/// completion, the first 46 bytes of its buffer, and the datagram sent.
fn ud_grh_exchange(from: &str, to: &str) -> (Wc, Vec<u8>, Vec<u8>) {
    let mut a = Host::new(from, 1 << 16, 0x1000_0000);
    let mut b = Host::new(to, 1 << 16, 0x2000_0000);
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
    let link = |peer, peer_qpn| Link {
        qp_type: QpType::Ud,
        pmtu: 1024,
        peer,
        peer_qpn,
        sq_psn: Psn::new(1),
        rq_psn: Psn::new(1),
    };
    rc::bring_up(&mut a.dev, qa, &link(ba, qb), |_| {});
    rc::bring_up(&mut b.dev, qb, &link(aa, qa), |_| {});
    let sge = b.sge(0, 100);
    b.dev
        .post_recv(
            qb,
            RecvWr {
                wr_id: 5,
                sgl: vec![sge].into(),
            },
        )
        .unwrap();
    a.write(0, b"hello6");
    let mut wr = SendWr::send(1, [a.sge(0, 6)]);
    wr.ud = Some(UdDest::new(ba, qb, Qkey::new(0x1111_1111)));
    a.dev.post_send(qa, wr).unwrap();
    let mut buf = vec![0u8; 4400];
    let n = a.dev.poll_transmit(0, &mut buf).datagram().unwrap().size;
    b.dev.handle_datagram(10, &buf[..n], RxMeta::default());
    let c = b.poll();
    assert_eq!(
        (c[0].status, c[0].byte_len, c[0].src_qp),
        (WcStatus::Success, 46, qa)
    );
    assert!(c[0].wc_flags.contains(WcFlags::GRH));
    buf.truncate(n);
    (c[0], b.read(0, 46), buf)
}

/// UD over IPv6: the 40-byte GRH area holds the IPv6 header, and the
/// completion says IPv6.
#[test]
fn ud_ipv6_grh() {
    let (wc, grh, sent) = ud_grh_exchange("fd00::1", "fd00::2");
    assert_eq!(wc.network_hdr, Some(NetworkHdr::Ipv6));
    assert_eq!(grh[0] >> 4, 6);
    assert_eq!(&grh[..40], &sent[..40]);
    assert_eq!(&grh[40..], b"hello6");
}

/// UD over IPv4: 20 zero bytes, then the 20-byte IPv4 header (IBTA
/// A17.4.5.1; the kernel's `union rdma_network_hdr` puts `roce4grh` at
/// byte 20), and the completion says IPv4.
#[test]
fn ud_ipv4_grh() {
    let (wc, grh, sent) = ud_grh_exchange("10.0.0.1", "10.0.0.2");
    assert_eq!(wc.network_hdr, Some(NetworkHdr::Ipv4));
    assert_eq!(&grh[..20], &[0u8; 20]);
    assert_eq!(grh[20], 0x45);
    assert_eq!(&grh[20..40], &sent[..20]);
    assert_eq!(&grh[32..36], &[10, 0, 0, 1]);
    assert_eq!(&grh[36..40], &[10, 0, 0, 2]);
    assert_eq!(&grh[40..], b"hello6");
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
    let mut wr = SendWr::send(1, [w.hosts[0].sge(0, 16)]);
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
            let mut wr = SendWr::send(i, [w.hosts[0].sge(4096 * i, len as u32)]);
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
