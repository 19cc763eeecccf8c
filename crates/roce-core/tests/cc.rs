//! Congestion control on the wire: ECN codepoints, the notification point
//! (CNP on CE, rate-limited per QP), the reaction point's cut, and the
//! requester's pacing in virtual time.

mod common;

use std::cell::RefCell;
use std::rc::Rc;

use common::*;
use roce_core::*;
use roce_testkit::frames::{ipv4_mut, rewrite};
use roce_wire::{Ecn, IpRepr, Opcode, RocePacket, Transport};

const LINE: u64 = 10_000_000_000;

/// Datagrams the wire saw, with the sending host.
type Seen = Rc<RefCell<Vec<(usize, Vec<u8>)>>>;

fn ecn_of(d: &[u8]) -> Ecn {
    RocePacket::parse_ip(d).unwrap().ip.ecn()
}

fn dscp_of(d: &[u8]) -> u8 {
    RocePacket::parse_ip(d).unwrap().ip.dscp()
}

/// A world whose host 0 runs `cc` at 10 Gb/s with ECT(0) data.
fn world(cc: CcConfig) -> (World, Qpn, Qpn) {
    let mut w = World::with_mtu(1 << 20, 1024);
    for h in w.hosts.iter_mut() {
        h.dev.set_ecn(Ecn::Ect0);
        h.dev.set_cc(cc);
        h.dev.set_link_bps(LINE);
    }
    let (a, b) = w.connect(QpType::Rc, 1024);
    (w, a, b)
}

fn write(w: &mut World, qp: Qpn, len: u32) {
    let peer_rkey = w.hosts[1].mr.rkey;
    let base = w.hosts[1].base;
    let sge = w.hosts[0].sge(0, len);
    let wr = SendWr::rdma(1, SendOp::Write, [sge], base, peer_rkey);
    w.hosts[0].dev.post_send(qp, wr).unwrap();
}

#[test]
fn data_is_ect0_acks_are_not_ect_and_ce_gets_one_cnp() {
    let (mut w, a, b) = world(CcConfig::dcqcn());
    let seen: Seen = Rc::default();
    let s = seen.clone();
    let mut marked = false;
    w.filter = Box::new(move |from, d| {
        s.borrow_mut().push((from, d.to_vec()));
        // CE-mark the first data packet.
        if from == 0 && !marked {
            marked = true;
            return Verdict::Replace(rewrite(d, |r| match &mut r.ip {
                IpRepr::V4(ip) => ip.ecn = Ecn::Ce,
                IpRepr::V6(ip) => ip.ecn = Ecn::Ce,
            }));
        }
        Verdict::Deliver
    });
    write(&mut w, a, 8 * 1024);
    assert!(w.run_until(100_000, |w| w.hosts[0]
        .dev
        .qp_cc_counters(a)
        .unwrap()
        .cnp_received
        == 1));
    // α = 1 on the first CNP: Rc = line/2, Rt = line.
    let tx = w.hosts[0].dev.qp_cc_counters(a).unwrap();
    assert_eq!(tx.rate_bps, LINE / 2);
    assert_eq!(tx.target_rate_bps, LINE);
    // Settling runs the rate timers until the QP is back at line rate.
    w.settle(100_000);
    assert_eq!(
        w.hosts[0].dev.qp_cc_counters(a).unwrap().rate_bps,
        LINE,
        "recovered"
    );
    let seen = seen.borrow();
    let mut cnps = 0;
    for (from, d) in seen.iter() {
        let p = RocePacket::parse_ip(d).unwrap();
        match (from, p.bth.opcode.transport()) {
            (0, Transport::Rc) => {
                assert_eq!(ecn_of(d), Ecn::Ect0, "data");
                assert_eq!(dscp_of(d), 0, "data keep the AV's traffic class");
            }
            (1, Transport::Rc) => assert_eq!(ecn_of(d), Ecn::NotEct, "ACK"),
            (1, Transport::Cnp) => {
                cnps += 1;
                assert_eq!(p.bth.opcode, Opcode::CNP);
                assert!(p.bth.becn);
                assert_eq!(p.bth.dest_qp, a);
                assert_eq!(p.bth.psn.value(), 0);
                assert_eq!(ecn_of(d), Ecn::NotEct);
                assert_eq!(dscp_of(d), 48);
                // IPv4 20 + UDP 8 + BTH 12 + reserved 16 + ICRC 4.
                assert_eq!(d.len(), 60);
                assert!(p.check_icrc().is_ok());
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(cnps, 1);
    let rx = w.hosts[1].dev.qp_cc_counters(b).unwrap();
    assert_eq!((rx.ce_received, rx.cnp_sent), (1, 1));
    let tx = w.hosts[0].dev.qp_cc_counters(a).unwrap();
    assert_eq!(tx.cnp_received, 1);
    assert_eq!(w.hosts[0].dev.counters().rx_cnp, 1);
    assert_eq!(w.hosts[0].poll().len(), 1, "the WRITE completed");
}

#[test]
fn cnps_are_rate_limited_per_qp() {
    // Every data packet CE-marked. A first one-packet WRITE brings a CNP
    // and the limiter; then 256 packets paced at ≤ 5 Gb/s take > 400 µs,
    // with at most one CNP per 50 µs (plus the first at once).
    // A 2 Gb/s floor keeps the run short: with every packet marked, α
    // stays near 1 and each CNP halves the rate.
    let mut cc = CcConfig::dcqcn();
    cc.algorithm = CcAlgorithm::Dcqcn(DcqcnParams {
        r_min: 2_000_000_000,
        ..DcqcnParams::default()
    });
    let (mut w, a, b) = world(cc);
    w.filter = Box::new(|from, d| {
        if from == 0 && RocePacket::parse_ip(d).unwrap().bth.opcode.transport() == Transport::Rc {
            return Verdict::Replace(rewrite(d, |r| ipv4_mut(r).ecn = Ecn::Ce));
        }
        Verdict::Deliver
    });
    write(&mut w, a, 1024);
    assert!(w.run_until(100_000, |w| w.hosts[0].poll().len() == 1));
    let t0 = w.now;
    write(&mut w, a, 256 * 1024);
    assert!(w.run_until(1_000_000, |w| w.hosts[0].poll().len() == 1));
    let elapsed = w.now - t0;
    let rx = w.hosts[1].dev.qp_cc_counters(b).unwrap();
    let q = w.hosts[0].dev.qp_counters(a).unwrap();
    assert_eq!(q.retransmitted, 0);
    assert_eq!(rx.ce_received, 257);
    assert!(elapsed > 400_000, "{elapsed}");
    let bound = elapsed / 50_000 + 2;
    assert!(
        rx.cnp_sent >= 2 && rx.cnp_sent <= bound,
        "{} CNPs in {elapsed} ns",
        rx.cnp_sent
    );
    let tx = w.hosts[0].dev.qp_cc_counters(a).unwrap();
    assert_eq!(tx.cnp_received, rx.cnp_sent);
    assert_eq!(tx.rate_bps, 2_000_000_000, "at the floor");
}

#[test]
fn paced_packets_leave_at_the_set_rate() {
    // Paper DCQCN with its timers out of the way: one CNP sets the rate
    // to line/2 = 5 Gb/s and it stays there.
    let mut cc = CcConfig::dcqcn();
    cc.algorithm = CcAlgorithm::Dcqcn(DcqcnParams {
        t_inc: 1_000_000_000,
        b: u64::MAX / 2,
        ..DcqcnParams::default()
    });
    let (mut w, a, _b) = world(cc);
    write(&mut w, a, 200 * 1024);
    let dev = &mut w.hosts[0].dev;
    let mut buf = vec![0u8; 4400];
    // The first packet goes out; turn it into a CNP from the peer.
    let n = dev.poll_transmit(0, &mut buf).datagram().unwrap().size;
    let cnp = rewrite(&buf[..n], |r| {
        let ip = ipv4_mut(r);
        std::mem::swap(&mut ip.src, &mut ip.dst);
        r.bth = roce_wire::BthRepr::new(Opcode::CNP, a, roce_wire::Psn::new(0));
        r.bth.becn = true;
        r.ext = Default::default();
        r.payload = &[];
    });
    dev.handle_datagram(0, &cnp, RxMeta::default());
    assert_eq!(dev.qp_cc_counters(a).unwrap().rate_bps, LINE / 2);
    let mut now = 0;
    let mut sent = Vec::new();
    // 120 packets: within the requester's 128-PSN window (nothing is
    // acknowledged here).
    while sent.len() < 120 {
        if let Some(n) = dev.poll_transmit(now, &mut buf).datagram().map(|t| t.size) {
            sent.push((now, n));
            continue;
        }
        now = dev.poll_timeout().expect("the pacer's timer is armed");
        dev.handle_timeout(now);
    }
    for w2 in sent.windows(2) {
        let (t0, n0) = w2[0];
        let gap = (w2[1].0 - t0) as f64;
        let want = n0 as f64 * 8.0 / (LINE / 2) as f64 * 1e9;
        assert!(
            (gap - want).abs() <= want * 0.01,
            "gap {gap} ns, want {want} ns"
        );
    }
    let span = (sent[119].0 - sent[0].0) as f64;
    let bytes: usize = sent[..119].iter().map(|s| s.1).sum();
    let rate = bytes as f64 * 8.0 / span * 1e9;
    assert!((rate / (LINE / 2) as f64 - 1.0).abs() < 0.001, "{rate}");
    assert!(dev.qp_cc_counters(a).unwrap().paced > 0);
}

#[test]
fn without_cc_the_device_is_compatible() {
    // Defaults: data Not-ECT, no pacing; a CE still gets a CNP (the
    // notification point is on) and the sender counts it, rate unchanged.
    let mut w = World::with_mtu(1 << 20, 1024);
    let (a, _b) = w.connect(QpType::Rc, 1024);
    let seen: Rc<RefCell<Vec<Ecn>>> = Rc::default();
    let s = seen.clone();
    w.filter = Box::new(move |_, d| {
        s.borrow_mut().push(ecn_of(d));
        Verdict::Deliver
    });
    write(&mut w, a, 4 * 1024);
    w.settle(10_000);
    assert!(seen.borrow().iter().all(|&e| e == Ecn::NotEct));
    let c = w.hosts[0].dev.qp_cc_counters(a).unwrap();
    assert_eq!(c.rate_bps, 100_000_000_000);
    assert_eq!(c.paced, 0);
}
