//! The receive boundary (docs/architecture.md, "The receive boundary"):
//! a datagram given as its UDP payload with what the receiver knows of its
//! header (`Device::handle_udp`), its ICRC computed from those facts and
//! checked under the engine's one policy (`DeviceConfig::icrc_check`),
//! counted in the device's counters only; and a whole datagram
//! (`Device::handle_datagram`) going the same way.
//!
//! Every datagram here is an RC SEND to a QP the device does not have, so
//! one the ICRC policy lets through counts `rx_unknown_qp`, and one it
//! drops does not.

use std::net::{IpAddr, SocketAddr};

use roce_core::*;
use roce_wire::{
    BthRepr, Ecn, ExtHeaders, FrameRepr, IpRepr, Ipv4Repr, Ipv6Repr, Opcode, UdpChecksum, UdpRepr,
    ROCE_V2_PORT,
};

const A4: &str = "10.0.0.1";
const B4: &str = "10.0.0.2";

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn v4(ident: u16, dscp: u8, ecn: Ecn, ttl: u8) -> IpRepr {
    IpRepr::V4(Ipv4Repr {
        src: A4.parse().unwrap(),
        dst: B4.parse().unwrap(),
        dscp,
        ecn,
        ident,
        dont_frag: true,
        ttl,
        payload_len: 0,
    })
}

fn v6(dscp: u8, ecn: Ecn, flow_label: u32, hop_limit: u8) -> IpRepr {
    IpRepr::V6(Ipv6Repr {
        src: "fd00::1".parse().unwrap(),
        dst: "fd00::2".parse().unwrap(),
        dscp,
        ecn,
        flow_label,
        hop_limit,
        payload_len: 0,
    })
}

/// A whole datagram as a sender's engine writes it: an RC SEND_ONLY to
/// QP 0x123 with `len` bytes, from UDP port 0xc001.
fn datagram(ip: IpRepr, len: usize) -> Vec<u8> {
    let data: Vec<u8> = (0..len).map(|i| (i * 7) as u8).collect();
    let repr = FrameRepr {
        eth: None,
        ip,
        udp: UdpRepr {
            src_port: 0xc001,
            dst_port: ROCE_V2_PORT,
            checksum: UdpChecksum::Zero,
        },
        bth: BthRepr::new(Opcode::RC_SEND_ONLY, Qpn::new(0x123), Psn::new(5)),
        ext: ExtHeaders::default(),
        payload: &data,
    };
    let mut d = vec![0u8; repr.len()];
    let n = repr.emit(&mut d).unwrap();
    d.truncate(n);
    d
}

/// `d` as a UDP socket's receiver has it: the header facts a socket shows
/// (addresses, port, TOS; the IPv4 ID only when `known`) and the payload.
fn received(d: &[u8], known: bool) -> (RxHeader, &[u8]) {
    let t = Transmit::of_datagram(d).unwrap();
    let id = known.then_some(t.ipv4_id);
    let h = RxHeader::new(t.src, t.destination.ip(), t.tos()).with_ipv4_id(id);
    (h, &d[t.header_len()..])
}

fn device(addr: &str, check: IcrcCheck) -> Device {
    let mut cfg = DeviceConfig::new(ip(addr));
    cfg.icrc_check = check;
    Device::new(cfg)
}

/// (taken, dropped for the ICRC, taken unverified, verified assuming an
/// IPv4 ID): the device's counters, the only record of the ICRC.
fn tally(dev: &Device) -> (u64, u64, u64, u64) {
    let c = dev.counters();
    (
        c.rx_unknown_qp,
        c.rx_bad_icrc,
        c.rx_icrc_unverified,
        c.rx_icrc_assumed_ipv4_id,
    )
}

#[test]
fn a_good_icrc_is_taken_and_a_bad_one_counted_and_dropped() {
    for (ip, addr) in [
        (v4(0, 26, Ecn::Ect0, 64), B4),
        (v6(26, Ecn::Ect0, 0, 64), "fd00::2"),
    ] {
        let mut dev = device(addr, IcrcCheck::Require);
        let d = datagram(ip, 100);
        let (h, payload) = received(&d, true);
        dev.handle_udp(0, h, payload, RxMeta::default());
        assert_eq!(tally(&dev), (1, 0, 0, 0), "{ip:?}: taken");
        // A bit of the payload flipped after the ICRC was computed.
        let mut bad = payload.to_vec();
        bad[20] ^= 0x08;
        dev.handle_udp(0, h, &bad, RxMeta::default());
        assert_eq!(tally(&dev), (1, 1, 0, 0), "{ip:?}: dropped");
        // A covered header field the receiver reports otherwise (another
        // source port) fails it too.
        let mut moved = h;
        moved.src.set_port(0xc002);
        dev.handle_udp(0, moved, payload, RxMeta::default());
        assert_eq!(tally(&dev), (1, 2, 0, 0), "{ip:?}: header covered");
        // The BTH byte the ICRC masks (FECN, BECN) may change.
        let mut becn = payload.to_vec();
        becn[4] ^= 0x40;
        dev.handle_udp(0, h, &becn, RxMeta::default());
        assert_eq!(tally(&dev), (2, 2, 0, 0), "{ip:?}: BTH byte 4 masked");
        assert_eq!(dev.counters().rx_datagrams, 4);
    }
}

/// The fields the ICRC masks (TOS / traffic class, TTL / hop limit, flow
/// label) are not among the header facts: a datagram sent with any of
/// them is taken from facts that say nothing of them (or another TOS),
/// as the same datagram is whole.
#[test]
fn masked_header_fields_do_not_matter() {
    let mut ips = Vec::new();
    for (dscp, ecn, ttl) in [(0, Ecn::NotEct, 1), (46, Ecn::Ce, 255), (63, Ecn::Ect1, 64)] {
        ips.push((v4(0, dscp, ecn, ttl), B4));
    }
    for (dscp, ecn, flow, hops) in [(0, Ecn::NotEct, 0, 1), (46, Ecn::Ce, 0xfffff, 255)] {
        ips.push((v6(dscp, ecn, flow, hops), "fd00::2"));
    }
    for (ip, addr) in ips {
        let mut dev = device(addr, IcrcCheck::Require);
        let d = datagram(ip, 33);
        let (h, payload) = received(&d, true);
        dev.handle_udp(0, h, payload, RxMeta::default());
        let other_tos = RxHeader { tos: 0xff, ..h };
        dev.handle_udp(0, other_tos, payload, RxMeta::default());
        dev.handle_datagram(0, &d, RxMeta::default());
        assert_eq!(tally(&dev), (3, 0, 0, 0), "{ip:?}");
    }
}

/// An IPv4 datagram from a UDP socket (no identification): the engine
/// tries 0 and the segment numbers of a UDP GSO send, under its policy.
#[test]
fn an_unknown_ipv4_id_is_assumed_as_the_policy_says() {
    // (policy, IPv4 ID on the wire) -> tally after one datagram.
    let cases = [
        (IcrcCheck::Require, 0, (1, 0, 0, 1)),
        (IcrcCheck::Require, 1, (1, 0, 0, 1)),
        (IcrcCheck::Require, 127, (1, 0, 0, 1)),
        // An ID no GSO sender writes (Linux rxe's): not verifiable.
        (IcrcCheck::Require, 0x4321, (0, 1, 0, 0)),
        (IcrcCheck::Count, 0x4321, (1, 0, 1, 0)),
        (IcrcCheck::Count, 3, (1, 0, 0, 1)),
        (IcrcCheck::Off, 3, (1, 0, 1, 0)),
    ];
    for (check, id, want) in cases {
        let mut dev = device(B4, check);
        let d = datagram(v4(id, 26, Ecn::Ect0, 64), 1000);
        let (h, payload) = received(&d, false);
        assert!(!h.exact());
        dev.handle_udp(0, h, payload, RxMeta::default());
        assert_eq!(tally(&dev), want, "{check:?} ID {id}");
    }
    // Damage is caught under Require and Count alike; Off takes it.
    for (check, want) in [
        (IcrcCheck::Require, (0, 1, 0, 0)),
        (IcrcCheck::Count, (1, 0, 1, 0)),
        (IcrcCheck::Off, (1, 0, 1, 0)),
    ] {
        let mut dev = device(B4, check);
        let d = datagram(v4(0, 26, Ecn::Ect0, 64), 64);
        let (h, payload) = received(&d, false);
        let mut bad = payload.to_vec();
        bad[30] ^= 1;
        dev.handle_udp(0, h, &bad, RxMeta::default());
        assert_eq!(tally(&dev), want, "damaged, {check:?}");
    }
    // A known ID is checked as it is, whatever the policy.
    let mut dev = device(B4, IcrcCheck::Off);
    let d = datagram(v4(0x4321, 26, Ecn::Ect0, 64), 64);
    let (h, payload) = received(&d, true);
    dev.handle_udp(0, h, payload, RxMeta::default());
    let wrong = h.with_ipv4_id(Some(0));
    dev.handle_udp(0, wrong, payload, RxMeta::default());
    assert_eq!(tally(&dev), (1, 1, 0, 0));
}

/// A whole datagram goes through the same policy and counters: checked
/// when exact, taken unverified when the caller cannot vouch for it.
#[test]
fn whole_datagrams_share_the_policy_and_the_counters() {
    let mut dev = device(B4, IcrcCheck::Require);
    let d = datagram(v4(7, 0, Ecn::NotEct, 64), 10);
    dev.handle_datagram(0, &d, RxMeta::default());
    let mut bad = d.clone();
    let n = bad.len();
    bad[n - 6] ^= 0x80;
    dev.handle_datagram(0, &bad, RxMeta::default());
    dev.handle_datagram(0, &bad, RxMeta::inexact());
    assert_eq!(tally(&dev), (2, 1, 1, 0));
    // Malformed either way: counted once, in the same place.
    dev.handle_datagram(0, &d[..30], RxMeta::default());
    let (h, payload) = received(&d, true);
    dev.handle_udp(0, h, &payload[..10], RxMeta::default());
    let c = dev.counters();
    assert_eq!((c.rx_datagrams, c.rx_malformed), (5, 2));
    // Addresses of two families: malformed, not a panic.
    let mixed = RxHeader::new(SocketAddr::new(ip("fd00::1"), 1), ip(B4), 0);
    dev.handle_udp(0, mixed, payload, RxMeta::default());
    assert_eq!(dev.counters().rx_malformed, 3);
}

#[test]
fn a_host_intact_datagram_is_taken_unchecked_only_when_trusted() {
    // A same-host ring's datagram (`RxMeta::host_intact`): its ICRC is
    // its sender's engine's over these bytes, so a trusting device does
    // not compute it; one here is deliberately wrong, to tell the two
    // paths apart.
    let d = datagram(v4(0, 26, Ecn::Ect0, 64), 100);
    let (h, payload) = received(&d, true);
    let mut bad = payload.to_vec();
    let n = bad.len();
    bad[n - 1] ^= 0x01;
    let intact = RxMeta::default().with_host_intact(true);

    let mut dev = device(B4, IcrcCheck::Require);
    dev.handle_udp(0, h, &bad, intact);
    assert_eq!(tally(&dev), (1, 0, 0, 0), "trusted: taken, not checked");
    assert_eq!(dev.counters().rx_icrc_host_trusted, 1);
    // The same bytes without the mark are checked, and dropped.
    dev.handle_udp(0, h, &bad, RxMeta::default());
    assert_eq!(tally(&dev), (1, 1, 0, 0), "unmarked: checked");
    assert_eq!(dev.counters().rx_icrc_host_trusted, 1);

    // A device told not to trust the host checks the marked ones too.
    let mut cfg = DeviceConfig::new(ip(B4));
    cfg.icrc_trust_host = false;
    let mut strict = Device::new(cfg);
    strict.handle_udp(0, h, &bad, intact);
    assert_eq!(tally(&strict), (0, 1, 0, 0), "not trusted: dropped");
    strict.handle_udp(0, h, payload, intact);
    assert_eq!(tally(&strict), (1, 1, 0, 0), "not trusted, good: taken");
    assert_eq!(strict.counters().rx_icrc_host_trusted, 0);

    // A datagram that does not parse is refused before any trust.
    let mut dev = device(B4, IcrcCheck::Require);
    dev.handle_udp(0, h, &bad[..8], intact);
    assert_eq!(dev.counters().rx_malformed, 1);
    assert_eq!(dev.counters().rx_icrc_host_trusted, 0);
}
