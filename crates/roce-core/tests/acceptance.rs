//! Which packets a connected QP takes (issue 18, IBTA Vol 1 §9.6): a real
//! packet of the connection, replayed with one header changed — from a
//! third address, to another address, with another P_Key, as a CNP from
//! a stranger or to a QP not sending — is dropped and changes nothing; a
//! CE mark counts only on a packet that was taken.

mod common;

use common::*;
use roce_core::*;
use roce_testkit::frames::{ipv4_mut, rewrite};
use roce_wire::{BthRepr, Ecn, Opcode, Pkey, RocePacket};

/// A connected RC pair; host 0 has written 64 bytes of 0xAB to host 1,
/// and `first` is that WRITE as it left host 0.
fn pair() -> (World, Qpn, Qpn, Vec<u8>) {
    let mut w = World::with_mtu(1 << 16, 1024);
    for h in w.hosts.iter_mut() {
        h.dev.set_cc(CcConfig::dcqcn());
        h.dev.set_ecn(Ecn::Ect0);
    }
    let (a, b) = w.connect(QpType::Rc, 1024);
    w.hosts[0].write(0, &[0xab; 64]);
    let first = std::rc::Rc::new(std::cell::RefCell::new(Vec::new()));
    let f = first.clone();
    w.filter = Box::new(move |from, d| {
        if from == 0 && f.borrow().is_empty() {
            *f.borrow_mut() = d.to_vec();
        }
        Verdict::Deliver
    });
    w.post_rdma(a, SendOp::Write, 0, 64, 0);
    w.settle(10_000);
    w.filter = Box::new(|_, _| Verdict::Deliver);
    assert_eq!(w.hosts[1].read(0, 64), vec![0xab; 64]);
    let first = first.borrow().clone();
    (w, a, b, first)
}

/// The same WRITE at the next PSN with other bytes: what a blind attacker
/// who guessed everything would send.
fn forged_write(first: &[u8], edit: impl FnOnce(&mut roce_wire::FrameRepr<'_>)) -> Vec<u8> {
    let psn = RocePacket::parse_ip(first).unwrap().bth.psn.next();
    static EVIL: [u8; 64] = [0x66; 64];
    rewrite(first, |r| {
        r.bth.psn = psn;
        r.payload = &EVIL;
        edit(r);
    })
}

#[test]
fn only_the_peer_to_our_address_in_our_partition_is_heard() {
    let (mut w, _a, b, first) = pair();
    let cases: Vec<(&str, Vec<u8>)> = vec![
        (
            "third address",
            forged_write(&first, |r| ipv4_mut(r).src = [10, 0, 0, 9].into()),
        ),
        (
            "other destination",
            forged_write(&first, |r| ipv4_mut(r).dst = [10, 0, 0, 7].into()),
        ),
        (
            "other P_Key",
            forged_write(&first, |r| r.bth.pkey = Pkey(0x8001)),
        ),
    ];
    for (what, d) in cases {
        let before = w.hosts[1].dev.qp_counters(b).unwrap();
        w.hosts[1].dev.handle_datagram(w.now, &d, RxMeta::default());
        let after = w.hosts[1].dev.qp_counters(b).unwrap();
        assert_eq!(after.drop_invalid, before.drop_invalid + 1, "{what}");
        assert_eq!(after.rx_packets, before.rx_packets, "{what}");
        assert_eq!(w.hosts[1].read(0, 64), vec![0xab; 64], "{what}");
    }
    // The control: the same forgery with the peer's headers is taken
    // (which is why the identifiers must not be guessable).
    let d = forged_write(&first, |_| {});
    w.hosts[1].dev.handle_datagram(w.now, &d, RxMeta::default());
    assert_eq!(w.hosts[1].read(0, 64), vec![0x66; 64]);
}

fn cnp_from(first: &[u8], to: Qpn, src: [u8; 4]) -> Vec<u8> {
    // `first` went 0 → 1; a CNP goes 1 → 0.
    rewrite(first, |r| {
        let ip = ipv4_mut(r);
        std::mem::swap(&mut ip.src, &mut ip.dst);
        ip.src = src.into();
        r.bth = BthRepr::new(Opcode::CNP, to, roce_wire::Psn::new(0));
        r.bth.becn = true;
        r.ext = Default::default();
        r.payload = &[];
    })
}

#[test]
fn cnps_only_from_the_peer_and_only_while_sending() {
    let (mut w, a, _b, first) = pair();
    let rate = |w: &World| w.hosts[0].dev.qp_cc_counters(a).unwrap();
    let line = rate(&w).rate_bps;
    for _ in 0..1000 {
        let d = cnp_from(&first, a, [10, 0, 0, 9]);
        w.hosts[0].dev.handle_datagram(w.now, &d, RxMeta::default());
    }
    assert_eq!(rate(&w).cnp_received, 0);
    assert_eq!(rate(&w).rate_bps, line);
    // From the peer: taken.
    let d = cnp_from(&first, a, [10, 0, 0, 2]);
    w.hosts[0].dev.handle_datagram(w.now, &d, RxMeta::default());
    assert_eq!(rate(&w).cnp_received, 1);
    assert!(rate(&w).rate_bps < line);
    // A QP in RTR sends nothing: a CNP for it is not taken.
    let h = &mut w.hosts[0];
    let q = h
        .dev
        .create_qp(QpInitAttr {
            qp_type: QpType::Rc,
            pd: h.pd,
            send_cq: h.cq,
            recv_cq: h.cq,
            srq: None,
            cap: QpCaps::default(),
            sq_sig_all: false,
        })
        .unwrap();
    let d = cnp_from(&first, q, [10, 0, 0, 2]);
    h.dev.handle_datagram(0, &d, RxMeta::default());
    assert_eq!(h.dev.qp_cc_counters(q).unwrap().cnp_received, 0);
}

#[test]
fn a_ce_mark_counts_only_on_a_packet_taken() {
    let (mut w, _a, b, first) = pair();
    let ce = |d: &[u8], psn: roce_wire::Psn| {
        rewrite(d, |r| {
            r.bth.psn = psn;
            ipv4_mut(r).ecn = Ecn::Ce;
        })
    };
    let p0 = RocePacket::parse_ip(&first).unwrap().bth.psn;
    // Out of the window (a blind guess) and a duplicate: no CE counted.
    for psn in [p0.add(1000), p0] {
        let d = ce(&first, psn);
        w.hosts[1].dev.handle_datagram(w.now, &d, RxMeta::default());
    }
    assert_eq!(w.hosts[1].dev.qp_cc_counters(b).unwrap().ce_received, 0);
    // In sequence: counted.
    let d = ce(&first, p0.next());
    w.hosts[1].dev.handle_datagram(w.now, &d, RxMeta::default());
    assert_eq!(w.hosts[1].dev.qp_cc_counters(b).unwrap().ce_received, 1);
}

#[test]
fn a_pkey_index_past_the_table_is_refused() {
    let mut w = World::new(4096);
    let h = &mut w.hosts[0];
    let q = h
        .dev
        .create_qp(QpInitAttr {
            qp_type: QpType::Rc,
            pd: h.pd,
            send_cq: h.cq,
            recv_cq: h.cq,
            srq: None,
            cap: QpCaps::default(),
            sq_sig_all: false,
        })
        .unwrap();
    let a = QpAttr {
        qp_state: QpState::Init,
        pkey_index: 1,
        ..QpAttr::default()
    };
    let m = QpAttrMask::required(QpType::Rc, QpState::Reset, QpState::Init);
    assert_eq!(
        h.dev.modify_qp(q, &a, m),
        Err(VerbsError::Modify(ModifyError::InvalidValue("pkey_index")))
    );
}
