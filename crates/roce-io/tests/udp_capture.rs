//! What the `UdpBackend` puts on the wire, captured with an AF_PACKET
//! socket on `lo` inside a namespace of the test's own: every RoCE packet
//! must carry a valid ICRC as sent, i.e. the IPv4 identification the kernel
//! wrote is the one the ICRC was computed for — 0 for plain sends, and
//! 0, 1, 2, ... for the segments of a GSO send once the kernel segments it
//! (forced here with `gso_max_segs 1` on the namespace's `lo`, as a NIC
//! without UDP segmentation offload would).
//!
//! Needs root (namespaces, AF_PACKET); skips with a message otherwise.

mod common;

use std::net::IpAddr;
use std::os::fd::{AsRawFd, OwnedFd};
use std::time::{Duration, Instant};

use common::*;
use nix::sys::socket::{self, sockopt, AddressFamily, LinkAddr, SockFlag, SockProtocol, SockType};
use nix::sys::time::TimeVal;
use roce_io::{PacketBatch, UdpBackend, UdpConfig};
use roce_wire::{Ecn, RocePacket, ROCE_V2_PORT};

/// One captured RoCE packet: IPv4 ID, ICRC valid, UDP source port, length.
#[derive(Debug)]
struct Seen {
    ident: u16,
    icrc_ok: bool,
    sport: u16,
    len: usize,
}

fn capture_socket() -> OwnedFd {
    let s = socket::socket(
        AddressFamily::Packet,
        SockType::Datagram,
        SockFlag::empty(),
        SockProtocol::EthAll,
    )
    .expect("AF_PACKET socket");
    socket::setsockopt(&s, sockopt::RcvBufForce, &(16 << 20)).unwrap();
    socket::setsockopt(&s, sockopt::ReceiveTimeout, &TimeVal::new(0, 200_000)).unwrap();
    s
}

/// Reads outgoing UDP/4791 IPv4 packets until `want` or 2 s.
fn capture(s: &OwnedFd, want: usize) -> Vec<Seen> {
    let mut out = Vec::new();
    let mut buf = vec![0u8; 70_000];
    let end = Instant::now() + Duration::from_secs(2);
    while out.len() < want && Instant::now() < end {
        let Ok((n, addr)) = socket::recvfrom::<LinkAddr>(s.as_raw_fd(), &mut buf) else {
            continue;
        };
        if addr.map(|a| a.pkttype()) != Some(libc::PACKET_OUTGOING) {
            continue;
        }
        let d = &mut buf[..n];
        if d.len() < 28 || d[0] >> 4 != 4 || d[9] != 17 {
            continue;
        }
        if u16::from_be_bytes([d[22], d[23]]) != ROCE_V2_PORT {
            continue;
        }
        // Outgoing on lo the UDP checksum is still the partial one the
        // offload would finish; the ICRC masks it, so clear it to parse.
        d[26..28].fill(0);
        let d = &buf[..n];
        let p = RocePacket::parse_ip(d).unwrap_or_else(|e| panic!("captured packet: {e}"));
        out.push(Seen {
            ident: u16::from_be_bytes([d[4], d[5]]),
            icrc_ok: p.check_icrc().is_ok(),
            sport: p.udp.src_port,
            len: n,
        });
    }
    out
}

fn specs(n: u32, len: usize) -> Vec<Spec> {
    (0..n)
        .map(|i| Spec {
            src: "127.0.0.1".parse().unwrap(),
            dst: "127.0.0.2".parse().unwrap(),
            sport: 0xc000 + (i / 20) as u16,
            dscp: 26,
            ecn: Ecn::Ect0,
            psn: i,
            len,
        })
        .collect()
}

/// Sends `specs` from 127.0.0.1:4791 to 127.0.0.2:4791 in a fresh
/// namespace (so 4791 is free), with `gso_max_segs 1` on lo when
/// `segment`; returns the capture and the receiver's ICRC counters.
fn run(ns: &Netns, gso: bool, specs: Vec<Spec>) -> (Vec<Seen>, (u64, u64, u64), bool) {
    ns.run(move || {
        let a_ip: IpAddr = "127.0.0.1".parse().unwrap();
        let b_ip: IpAddr = "127.0.0.2".parse().unwrap();
        let mut a = UdpBackend::bind(UdpConfig::new(a_ip).gso(gso)).expect("bind 4791");
        let mut b = UdpBackend::bind(UdpConfig::new(b_ip).gro(false)).expect("bind 4791");
        let cap = capture_socket();
        let mut tx = PacketBatch::new(specs.len(), SLOT);
        for s in &specs {
            tx.push_with(|slot| emit(s, slot));
        }
        send_all(&mut a, &mut tx);
        let seen = capture(&cap, specs.len());
        let got = recv_n(&mut b, specs.len());
        assert_eq!(got.len(), specs.len());
        // As the engine checks them (IPv4 ID 0 or a GSO segment's
        // assumed): (verified, -, failed).
        let ok = got.iter().filter(|g| g.icrc_ok()).count() as u64;
        (seen, (ok, 0, got.len() as u64 - ok), a.offloads().gso)
    })
}

#[test]
fn ipv4_id_on_the_wire_matches_the_icrc() {
    let ns = match Netns::new("cap") {
        Ok(ns) => ns,
        Err(why) => {
            println!("skipped: {why}");
            return;
        }
    };
    // Plain sendmmsg: every packet ID 0, ICRC valid as sent.
    let (seen, rx, _) = run(&ns, false, specs(60, 1000));
    assert_eq!(seen.len(), 60, "captured every packet");
    assert!(seen.iter().all(|s| s.ident == 0 && s.icrc_ok), "{seen:?}");
    assert_eq!(rx, (60, 0, 0));
    println!("without GSO: 60 packets, IPv4 ID 0 on all, ICRC valid");

    // GSO, kernel-segmented: IDs 0, 1, 2, ... per GSO send, ICRC valid.
    if !ns.exec(&["ip", "link", "set", "lo", "gso_max_segs", "1"]) {
        println!("skipped GSO half: this iproute2 cannot set gso_max_segs");
        return;
    }
    let (seen, rx, gso) = run(&ns, true, specs(60, 1000));
    if !gso {
        println!("skipped GSO half: the kernel does not offer UDP_SEGMENT");
        return;
    }
    assert_eq!(seen.len(), 60, "captured every segment");
    assert!(seen.iter().all(|s| s.len == 20 + 8 + 12 + 1000 + 4));
    let ids: Vec<u16> = seen.iter().map(|s| s.ident).collect();
    assert!(seen.iter().all(|s| s.icrc_ok), "IDs {ids:?}");
    assert!(
        ids.iter().any(|&i| i > 0),
        "segments were numbered: {ids:?}"
    );
    for w in seen.windows(2) {
        if w[0].sport == w[1].sport && w[1].ident != 0 {
            assert_eq!(w[1].ident, w[0].ident + 1, "IDs {ids:?}");
        }
    }
    assert_eq!(rx.0 + rx.1, 60);
    assert_eq!(rx.2, 0);
    println!("with GSO (segmented by the kernel): IDs {ids:?}, ICRC valid on all");
}
