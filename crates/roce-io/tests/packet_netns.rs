//! `PacketBackend` between two network namespaces joined by a veth pair
//! that the test creates (and deletes, with the namespaces, on drop — also
//! on panic): RoCE frames both ways over IPv4 and IPv6 with neighbour
//! resolution by the kernel, the kernel filter keeping other traffic out,
//! the ICRC verified on receive, the 802.1Q PCP from the DSCP, and a PFC
//! frame delivered through the MAC-control accessor.
//!
//! Needs root; skips with a message otherwise.

mod common;

use std::net::{IpAddr, UdpSocket};
use std::time::{Duration, Instant};

use common::*;
use roce_io::{Backend, PacketBackend, PacketBatch, PacketConfig, PacketStats, RxMeta};
use roce_wire::{Ecn, MacAddr, MacControl, RocePacket};

struct Pair {
    ns1: Netns,
    ns2: Netns,
}

fn setup() -> Result<Pair, String> {
    let ns1 = Netns::new("p1")?;
    let ns2 = Netns::new("p2")?;
    if !run(
        "ip",
        &[
            "link",
            "add",
            "rv1",
            "netns",
            &ns1.name,
            "address",
            "02:00:00:00:01:01",
            "type",
            "veth",
            "peer",
            "name",
            "rv2",
            "netns",
            &ns2.name,
            "address",
            "02:00:00:00:01:02",
        ],
    ) {
        return Err("cannot create a veth pair".into());
    }
    for (ns, dev, v4, v6) in [
        (&ns1, "rv1", "198.18.0.1/24", "fd00:198::1/64"),
        (&ns2, "rv2", "198.18.0.2/24", "fd00:198::2/64"),
    ] {
        let ok = ns.exec(&["ip", "addr", "add", v4, "dev", dev])
            && ns.exec(&["ip", "-6", "addr", "add", v6, "dev", dev, "nodad"])
            && ns.exec(&["ip", "link", "set", dev, "up"]);
        if !ok {
            return Err(format!("cannot configure {dev}"));
        }
    }
    Ok(Pair { ns1, ns2 })
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

/// Sends `specs` from `b` (the current thread must be in `b`'s namespace
/// for neighbour resolution) until all are on the wire.
fn send_resolving(b: &mut PacketBackend, specs: &[Spec], t0: Instant) {
    let mut tx = PacketBatch::new(specs.len(), SLOT);
    for s in specs {
        tx.push_with(|slot| emit(s, slot));
    }
    let before = b.stats().tx_frames;
    for _ in 0..100 {
        let n = b.send(t0.elapsed().as_nanos() as u64, &tx).unwrap();
        assert_eq!(n, tx.len());
        if b.stats().tx_frames - before == specs.len() as u64 {
            return;
        }
        // Unresolved datagrams were dropped: wait for the kernel and
        // resend them all (a duplicate or two is harmless here).
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("neighbour never resolved: {:?}", b.stats());
}

fn recv_frames(b: &mut PacketBackend, want: usize) -> Vec<(Vec<u8>, RxMeta)> {
    recv_within(b, want, Duration::from_secs(2))
}

fn recv_within(b: &mut PacketBackend, want: usize, wait: Duration) -> Vec<(Vec<u8>, RxMeta)> {
    let mut rx = PacketBatch::new(64, SLOT);
    let mut out = Vec::new();
    let end = Instant::now() + wait;
    while out.len() < want && Instant::now() < end {
        let n = b.recv(0, &mut rx).unwrap();
        for i in 0..n {
            out.push((rx.get(i).to_vec(), rx.meta(i)));
        }
        if n == 0 {
            b.wait_readable(Some(Duration::from_millis(50))).unwrap();
        }
    }
    out
}

fn check(got: &[(Vec<u8>, RxMeta)], specs: &[Spec]) {
    let mut psns: Vec<u32> = Vec::new();
    for (d, meta) in got {
        assert!(meta.header_exact);
        let p = RocePacket::parse_ip(d).expect("parses");
        assert!(p.check_icrc().is_ok(), "ICRC as sent");
        let s = specs
            .iter()
            .find(|s| s.psn == p.bth.psn.value())
            .expect("known PSN");
        assert_eq!((p.ip.src(), p.ip.dst()), (s.src, s.dst));
        assert_eq!(p.payload, &payload(s.psn, s.len)[..]);
        psns.push(s.psn);
    }
    psns.sort();
    psns.dedup();
    assert_eq!(psns.len(), specs.len(), "every datagram arrived");
}

#[test]
fn frames_both_ways_filter_pcp_and_pfc() {
    let pair = match setup() {
        Ok(p) => p,
        Err(why) => {
            println!("skipped: {why}");
            return;
        }
    };
    // Through the receive ring (the default) and through recvmmsg.
    for ring in [true, false] {
        // Each run resolves its neighbours afresh.
        for ns in [&pair.ns1.name, &pair.ns2.name] {
            let _ = std::process::Command::new("ip")
                .args(["-n", ns, "neigh", "flush", "all"])
                .status();
        }
        let (sa, sb) = exchange_both_ways(&pair, ring);
        println!("ring {ring}\na: {sa:?}\nb: {sb:?}");
    }
    drop(pair);
}

/// Frames both ways, the filter, PCP and PFC, between the pair's two
/// namespaces; returns both backends' counters.
fn exchange_both_ways(pair: &Pair, ring: bool) -> (PacketStats, PacketStats) {
    let (n1, n2) = (pair.ns1.name.clone(), pair.ns2.name.clone());
    let t = std::thread::spawn(move || {
        let enter = |name: &str| {
            let fd = std::fs::File::open(format!("/run/netns/{name}")).unwrap();
            nix::sched::setns(&fd, nix::sched::CloneFlags::CLONE_NEWNET).unwrap();
        };
        let t0 = Instant::now();
        enter(&n2);
        let mut b = PacketBackend::open(PacketConfig::new("rv2").rx_ring(ring)).expect("open rv2");
        assert_eq!(b.uses_rx_ring().is_some(), ring, "ring requested: {ring}");
        assert_eq!(b.mac(), MacAddr([2, 0, 0, 0, 1, 2]));
        assert!(b.local_addrs().contains(&ip("198.18.0.2")));
        enter(&n1);
        // Priority-tagged frames (VID 0), PCP from the DSCP.
        let mut a = PacketBackend::open(PacketConfig::new("rv1").vlan(Some(0)).rx_ring(ring))
            .expect("open rv1");

        // a → b over IPv4, DSCP 26 → PCP 3, resolving b's MAC by ARP.
        let specs: Vec<Spec> = (0..20u32)
            .map(|i| Spec {
                src: ip("198.18.0.1"),
                dst: ip("198.18.0.2"),
                sport: 0xc000 + i as u16 % 2,
                dscp: 26,
                ecn: Ecn::Ect0,
                psn: i,
                len: [0, 3, 100, 1024][i as usize % 4],
            })
            .collect();
        send_resolving(&mut a, &specs, t0);
        assert!(a.stats().tx_unresolved > 0 && a.stats().neigh_solicits > 0);
        let got = recv_frames(&mut b, specs.len());
        check(&got, &specs);
        assert_eq!(
            b.stats().rx_by_pcp[3] as usize,
            got.len(),
            "{:?}",
            b.stats()
        );

        // Other traffic to b's address never reaches the socket.
        let u = UdpSocket::bind("198.18.0.1:0").unwrap();
        for port in [5000u16, 4790, 4792] {
            u.send_to(&[0u8; 64], ("198.18.0.2", port)).unwrap();
        }
        std::thread::sleep(Duration::from_millis(50));
        assert!(recv_within(&mut b, 1, Duration::from_millis(200)).is_empty());

        // b → a over IPv6, untagged, resolving by neighbour discovery.
        enter(&n2);
        let back: Vec<Spec> = (100..110u32)
            .map(|i| Spec {
                src: ip("fd00:198::2"),
                dst: ip("fd00:198::1"),
                sport: 0xc123,
                dscp: 48,
                ecn: Ecn::NotEct,
                psn: i,
                len: 256,
            })
            .collect();
        send_resolving(&mut b, &back, t0);
        let got = recv_frames(&mut a, back.len());
        check(&got, &back);
        assert_eq!(a.stats().rx_untagged as usize, got.len());
        assert_eq!(a.stats().rx_outgoing, 0, "own frames are not delivered");

        // PFC from a, seen by b through the MAC-control accessor.
        let pfc = MacControl::Pfc {
            enable: 1 << 3,
            quanta: [0, 0, 0, 0xffff, 0, 0, 0, 0],
        };
        a.send_mac_control(&pfc).unwrap();
        let mut seen = Vec::new();
        let end = Instant::now() + Duration::from_secs(2);
        while seen.is_empty() && Instant::now() < end {
            b.wait_readable(Some(Duration::from_millis(50))).unwrap();
            let mut rx = PacketBatch::new(8, SLOT);
            b.recv(0, &mut rx).unwrap();
            seen = b.take_mac_control();
        }
        assert_eq!(seen, vec![(a.mac(), pfc)]);
        // ARP, ND, ICMP and the other UDP never got past the kernel filter.
        assert_eq!(b.stats().rx_dropped, 0, "{:?}", b.stats());
        assert_eq!(a.stats().rx_dropped, 0, "{:?}", a.stats());
        (a.stats(), b.stats())
    });
    t.join().expect("test thread")
}
