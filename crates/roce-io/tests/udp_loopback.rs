//! `UdpBackend` between two loopback addresses: real RoCE datagrams built
//! with `roce_wire` go out through sendmmsg (and GSO), come back through
//! recvmmsg (and GRO), and are rebuilt into datagrams that parse with the
//! right addresses, ports, DSCP / ECN, payload and ICRC.

mod common;

use std::collections::HashMap;
use std::io::ErrorKind;
use std::net::IpAddr;

use common::*;
use roce_io::{Backend, PacketBatch, SourcePorts, UdpBackend, UdpConfig};
use roce_wire::{Ecn, ROCE_V2_PORT};

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

/// Sends `specs` from `a` to `b` and checks every datagram that arrives.
fn exchange(a: &mut UdpBackend, b: &mut UdpBackend, specs: &[Spec]) {
    let mut tx = PacketBatch::new(specs.len(), SLOT);
    for s in specs {
        assert!(tx.push_with(|slot| emit(s, slot)));
    }
    send_all(a, &mut tx);
    let got = recv_n(b, specs.len());
    assert_eq!(got.len(), specs.len(), "all datagrams arrive");
    let by_psn: HashMap<u32, &Spec> = specs.iter().map(|s| (s.psn, s)).collect();
    for g in &got {
        let p = g.packet().expect("the payload parses with its header");
        let s = by_psn[&p.bth.psn.value()];
        assert_eq!((p.ip.src(), p.ip.dst()), (s.src, s.dst));
        assert_eq!((p.udp.src_port, p.udp.dst_port), (s.sport, ROCE_V2_PORT));
        assert_eq!((p.ip.dscp(), p.ip.ecn()), (s.dscp, s.ecn), "psn {}", s.psn);
        assert_eq!(p.payload, &payload(s.psn, s.len)[..]);
        assert!(g.icrc_ok(), "ICRC of psn {}", s.psn);
        // A socket shows every covered field but the IPv4 ID.
        assert_eq!(g.exact(), s.src.is_ipv6());
    }
}

#[test]
fn ipv4_batches_with_ecn_dscp_and_per_qp_ports() {
    let (a_ip, b_ip) = (ip("127.0.0.11"), ip("127.0.0.12"));
    let (mut a, mut b) = pair(a_ip, b_ip, |c| c.gso(false));
    let ecns = [Ecn::NotEct, Ecn::Ect0, Ecn::Ect1, Ecn::Ce];
    let specs: Vec<Spec> = (0..200u32)
        .map(|i| Spec {
            src: a_ip,
            dst: b_ip,
            sport: 0xc000 + (i / 40) as u16,
            dscp: if i % 3 == 0 { 48 } else { 26 },
            ecn: ecns[i as usize % 4],
            psn: i,
            len: [0, 1, 17, 256, 1024, 4096][i as usize % 6],
        })
        .collect();
    exchange(&mut a, &mut b, &specs);
    let (sa, sb) = (a.stats(), b.stats());
    assert_eq!(sa.tx_datagrams, 200);
    assert_eq!(sa.tx_sport_rewritten, 0, "every QP port got its socket");
    assert_eq!(sa.sport_sockets_opened, 5);
    assert_eq!(
        sa.tx_icrc_recomputed, 0,
        "the kernel writes what roce-core assumed"
    );
    assert!(sa.tx_syscalls < 200, "batched: {} syscalls", sa.tx_syscalls);
    assert_eq!(sb.rx_datagrams, 200);
    // And back, through the other backend's own QP sockets.
    let back: Vec<Spec> = specs
        .iter()
        .take(70)
        .map(|s| Spec {
            src: b_ip,
            dst: a_ip,
            ..*s
        })
        .collect();
    exchange(&mut b, &mut a, &back);
}

#[test]
fn ipv6_on_loopback() {
    let l = ip("::1");
    // One address: two ports, each backend sending to the other's
    // (free when asked; asked again if one was taken before its bind).
    let (mut a, mut b) = (0..50)
        .find_map(|_| {
            let [pa, pb] = roce_testkit::free_ports();
            let a = UdpBackend::bind(UdpConfig::new(l).port(pa).remote_port(pb)).ok()?;
            let b = UdpBackend::bind(UdpConfig::new(l).port(pb).remote_port(pa)).ok()?;
            Some((a, b))
        })
        .expect("two free ports on [::1]");
    let specs: Vec<Spec> = (0..100u32)
        .map(|i| Spec {
            src: l,
            dst: l,
            sport: 0xc100 + (i % 3) as u16,
            dscp: 26,
            ecn: if i % 2 == 0 { Ecn::Ect0 } else { Ecn::Ce },
            psn: i,
            len: 1000 + i as usize,
        })
        .collect();
    exchange(&mut a, &mut b, &specs);
}

#[test]
fn gso_and_gro_when_offered() {
    let (a_ip, b_ip) = (ip("127.0.0.21"), ip("127.0.0.22"));
    let (mut a, mut b) = pair(a_ip, b_ip, |c| c);
    println!("offloads here: {:?}", a.offloads());
    let specs: Vec<Spec> = (0..300u32)
        .map(|i| Spec {
            src: a_ip,
            dst: b_ip,
            sport: 0xc200 + (i / 100) as u16,
            dscp: 26,
            ecn: Ecn::Ect0,
            psn: i,
            // Runs of 4096-byte payloads, with a shorter tail per QP.
            len: if i % 100 == 99 { 100 } else { 4096 },
        })
        .collect();
    exchange(&mut a, &mut b, &specs);
    let (sa, sb) = (a.stats(), b.stats());
    println!("sender {sa:?}\nreceiver {sb:?}");
    if a.offloads().gso {
        assert!(sa.tx_gso_sends > 0);
        assert!(sa.tx_gso_datagrams >= 250);
        assert_eq!(sa.gso_disabled, 0);
        assert!(
            sa.tx_icrc_recomputed > 0,
            "segments after the first carry ID 1, 2, ..."
        );
    } else {
        println!("skipped GSO checks: the kernel does not offer UDP_SEGMENT");
    }
    if b.offloads().gro && a.offloads().gso {
        assert!(
            sb.rx_gro_batches > 0,
            "loopback keeps GSO sends whole for GRO"
        );
    }
}

/// A ping-pong's receive: once the backend has seen that the call after a
/// lone datagram finds nothing, the call that returns a datagram makes no
/// further system call (it would sit between the datagram's arrival and
/// the engine seeing it); a burst makes it ask again at once.
#[test]
fn a_lone_datagram_is_handed_over_without_an_empty_call_after_it() {
    let (a_ip, b_ip) = (ip("127.0.0.31"), ip("127.0.0.32"));
    // Without GSO a burst arrives as separate datagrams (with it, as one
    // coalesced receive).
    let (mut a, mut b) = pair(a_ip, b_ip, |c| c.gso(false));
    let mut rx = PacketBatch::new(64, 9216);
    let spec = |psn: u32| Spec {
        src: a_ip,
        dst: b_ip,
        sport: 0xc300,
        dscp: 26,
        ecn: Ecn::NotEct,
        psn,
        len: 2,
    };
    let send = |a: &mut UdpBackend, psns: std::ops::Range<u32>| {
        let mut tx = PacketBatch::new(psns.len(), SLOT);
        for psn in psns {
            assert!(tx.push_with(|slot| emit(&spec(psn), slot)));
        }
        send_all(a, &mut tx);
    };
    // Receives what has arrived (after an idle look, as a poller does);
    // returns how many datagrams and whether the receive made an empty call.
    let take = |b: &mut UdpBackend, rx: &mut PacketBatch| {
        assert!(b
            .wait_readable(Some(std::time::Duration::from_secs(2)))
            .unwrap());
        let before = b.stats();
        let n = b.recv(0, rx).unwrap();
        let empty = b.stats().rx_empty_polls > before.rx_empty_polls;
        (n, empty)
    };
    // Ping-pong: one request at a time, each after an idle look.
    let mut empties = Vec::new();
    for round in 0..30u32 {
        assert_eq!(b.recv(0, &mut rx).unwrap(), 0, "idle before round {round}");
        send(&mut a, round..round + 1);
        let (n, empty) = take(&mut b, &mut rx);
        assert_eq!(n, 1, "round {round}");
        let p = Got::of(&rx, 0);
        assert_eq!(p.packet().unwrap().bth.psn.value(), round);
        empties.push(empty);
    }
    // The first rounds ask again and learn that it finds nothing.
    assert!(empties[0], "{empties:?}");
    assert!(
        empties[10..].iter().all(|e| !e),
        "no empty call once learnt: {empties:?}"
    );
    // A burst: the lone probe takes one, the next call the rest, and that
    // teaches the backend to ask again at once.
    assert_eq!(b.recv(0, &mut rx).unwrap(), 0);
    send(&mut a, 100..120);
    // Loopback queues them as they are sent; leave time in case the
    // kernel deferred the delivery.
    std::thread::sleep(std::time::Duration::from_millis(20));
    let (n, _) = take(&mut b, &mut rx);
    assert_eq!(n, 1);
    assert_eq!(b.recv(0, &mut rx).unwrap(), 19);
    assert_eq!(b.recv(0, &mut rx).unwrap(), 0);
    send(&mut a, 200..201);
    let (n, empty) = take(&mut b, &mut rx);
    assert_eq!(n, 1);
    assert!(
        empty,
        "after a burst the call after a lone datagram is made again"
    );
    assert!(b.stats().rx_follow_ups_skipped >= 20);
}

#[test]
fn rewrite_fallback_keeps_the_icrc_valid() {
    let (a_ip, b_ip) = (ip("127.0.0.31"), ip("127.0.0.32"));
    let (mut a, mut b) = pair(a_ip, b_ip, |c| c.source_ports(SourcePorts::Rewrite));
    let specs: Vec<Spec> = (0..10u32)
        .map(|i| Spec {
            src: a_ip,
            dst: b_ip,
            sport: 0xc300,
            dscp: 26,
            ecn: Ecn::Ect0,
            psn: i,
            len: 64,
        })
        .collect();
    let mut tx = PacketBatch::new(16, SLOT);
    for s in &specs {
        tx.push_with(|slot| emit(s, slot));
    }
    send_all(&mut a, &mut tx);
    let got = recv_n(&mut b, 10);
    assert_eq!(got.len(), 10);
    for g in &got {
        let p = g.packet().unwrap();
        assert_eq!(
            p.udp.src_port,
            a.local_addr().port(),
            "source port rewritten"
        );
        assert!(g.icrc_ok(), "ICRC recomputed for the new port");
    }
    assert_eq!(a.stats().tx_sport_rewritten, 10);
}

#[test]
fn port_in_use_is_addr_in_use_naming_the_address() {
    let a = UdpBackend::bind(UdpConfig::new(ip("127.0.0.41")).port(0)).unwrap();
    let port = a.local_addr().port();
    let e = UdpBackend::bind(UdpConfig::new(ip("127.0.0.41")).port(port)).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::AddrInUse);
    assert!(e.to_string().contains(&format!("127.0.0.41:{port}")), "{e}");
}

#[test]
fn malformed_datagrams_are_counted_not_sent() {
    let (a_ip, b_ip) = (ip("127.0.0.51"), ip("127.0.0.52"));
    let (mut a, _b) = pair(a_ip, b_ip, |c| c);
    let mut tx = PacketBatch::new(4, 64);
    tx.push(&[0x45; 20]);
    tx.push(b"garbage");
    assert_eq!(a.send(0, &tx).unwrap(), 2);
    assert_eq!(a.stats().tx_malformed, 2);
    assert!(!a
        .wait_readable(Some(std::time::Duration::from_millis(1)))
        .unwrap());
}

/// The backend sends as the datagram's `Transmit` says, reading no header:
/// metadata that names another destination than the header wins.
#[test]
fn sends_where_the_transmit_says() {
    let (a_ip, b_ip) = (ip("127.0.0.53"), ip("127.0.0.54"));
    // The header's destination is not the one the datagram reaches, so
    // its ICRC cannot match there (the engine would drop it); the
    // backend reads no payload byte and hands it on.
    let (mut a, mut b) = pair(a_ip, b_ip, |c| c);
    let s = Spec {
        src: a_ip,
        dst: ip("127.0.0.99"), // in the header only
        sport: 0xc042,
        dscp: 26,
        ecn: Ecn::Ect0,
        psn: 7,
        len: 64,
    };
    let mut tx = PacketBatch::new(1, SLOT);
    assert!(tx.push_transmit_with(|slot| {
        let n = emit(&s, slot);
        let mut t = roce_wire::Transmit::of_datagram(&slot[..n])?;
        t.destination.set_ip(b_ip);
        Some(t)
    }));
    send_all(&mut a, &mut tx);
    let got = recv_n(&mut b, 1);
    assert_eq!(got.len(), 1, "delivered to the Transmit's destination");
    let p = got[0].packet().unwrap();
    assert_eq!(
        (p.ip.src(), p.ip.dst(), p.udp.src_port),
        (a_ip, b_ip, 0xc042)
    );
    assert_eq!(p.bth.psn.value(), 7);
}
