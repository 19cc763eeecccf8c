//! A datagram damaged after the engine computed its ICRC stays detectable
//! through every path of the UDP backend: GSO's short last segment, the
//! source-port rewrite, IPv6, a fault injector on either side; and what
//! else a review of the backend found (an unspecified bind address,
//! hostile datagrams). The backend hands every datagram on; "detectable"
//! is the engine's check (`Got::icrc_ok`: over the header the socket
//! showed, an IPv4 ID 0 or a GSO segment's assumed). Loopback only, UDP
//! ports 25000..25999.
mod common;

use std::net::IpAddr;
use std::sync::atomic::{AtomicU16, Ordering};

use common::*;
use roce_io::{
    Backend, FaultConfig, FaultInjector, PacketBatch, SourcePorts, UdpBackend, UdpConfig,
};
use roce_wire::Ecn;

static NEXT: AtomicU16 = AtomicU16::new(0);

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn pair25(
    a: IpAddr,
    b: IpAddr,
    tweak: impl Fn(UdpConfig) -> UdpConfig,
) -> (UdpBackend, UdpBackend) {
    loop {
        let k = NEXT.fetch_add(1, Ordering::Relaxed);
        assert!(k < 900, "no free port");
        let port = 25_000 + k;
        let ca = tweak(UdpConfig::new(a).port(port).remote_port(port));
        let cb = tweak(UdpConfig::new(b).port(port).remote_port(port));
        if let (Ok(x), Ok(y)) = (UdpBackend::bind(ca), UdpBackend::bind(cb)) {
            return (x, y);
        }
    }
}

fn spec(src: IpAddr, dst: IpAddr, psn: u32, len: usize) -> Spec {
    Spec {
        src,
        dst,
        sport: 0xc400,
        dscp: 26,
        ecn: Ecn::Ect0,
        psn,
        len,
    }
}

/// Flips one payload bit of datagram `i` (after BTH), so its ICRC is wrong.
fn corrupt(tx: &mut PacketBatch, i: usize) {
    let d = tx.get_mut(i);
    let hl = if d[0] >> 4 == 4 { 20 } else { 40 };
    d[hl + 8 + 12 + 3] ^= 0x10;
}

/// Sends `lens` (one QP, one destination), corrupting datagram `bad`;
/// returns what the receiver handed on: (psn, icrc ok, payload intact).
fn run(
    a: &mut UdpBackend,
    b: &mut UdpBackend,
    src: IpAddr,
    dst: IpAddr,
    lens: &[usize],
    bad: usize,
) -> Vec<(u32, bool, bool)> {
    let mut tx = PacketBatch::new(lens.len(), SLOT);
    for (i, &l) in lens.iter().enumerate() {
        assert!(tx.push_with(|slot| emit(&spec(src, dst, i as u32, l), slot)));
    }
    corrupt(&mut tx, bad);
    send_all(a, &mut tx);
    let got = recv_n(b, lens.len());
    got.iter()
        .map(|g| {
            let p = g.packet().unwrap();
            let psn = p.bth.psn.value();
            (
                psn,
                g.icrc_ok(),
                p.payload == &payload(psn, lens[psn as usize])[..],
            )
        })
        .collect()
}

#[test]
fn corrupted_payload_stays_detectable_as_a_gso_tail() {
    let (s, d) = (ip("127.0.0.61"), ip("127.0.0.62"));
    // Control: no GSO, the corruption is caught.
    let (mut a, mut b) = pair25(s, d, |c| c.gso(false));
    let got = run(&mut a, &mut b, s, d, &[1024, 1024, 100], 2);
    println!("no GSO: {got:?}");
    assert_eq!(got.iter().filter(|(_, ok, _)| !ok).count(), 1);
    drop((a, b));
    // GSO: the short last segment's ICRC is recomputed over the corrupted bytes.
    let (mut a, mut b) = pair25(s, d, |c| c);
    assert!(a.offloads().gso, "needs GSO");
    let got = run(&mut a, &mut b, s, d, &[1024, 1024, 100], 2);
    println!(
        "GSO:    {got:?} recomputed={} rewritten={} gso_sends={}",
        a.stats().tx_icrc_recomputed,
        a.stats().tx_sport_rewritten,
        a.stats().tx_gso_sends
    );
    let passed_corrupt = got.iter().filter(|(_, ok, intact)| *ok && !intact).count();
    assert_eq!(
        passed_corrupt, 0,
        "a corrupted datagram was delivered with a valid ICRC"
    );
}

#[test]
fn corrupted_payload_stays_detectable_on_the_rewrite_path_v6() {
    let l = ip("::1");
    let a0 = UdpBackend::bind(UdpConfig::new(l).port(25_950)).unwrap();
    drop(a0);
    let mut b = UdpBackend::bind(UdpConfig::new(l).port(25_951).remote_port(25_950)).unwrap();
    let mut a = UdpBackend::bind(
        UdpConfig::new(l)
            .port(25_950)
            .remote_port(25_951)
            .source_ports(SourcePorts::Rewrite),
    )
    .unwrap();
    let mut tx = PacketBatch::new(1, SLOT);
    tx.push_with(|slot| emit(&spec(l, l, 0, 64), slot));
    corrupt(&mut tx, 0);
    send_all(&mut a, &mut tx);
    let got = recv_n(&mut b, 1);
    let g = &got[0];
    let p = g.packet().unwrap();
    println!(
        "exact={} icrc ok={} payload intact={}",
        g.exact(),
        g.icrc_ok(),
        p.payload == &payload(0, 64)[..]
    );
    assert!(g.exact(), "IPv6: every covered field known");
    assert!(
        !g.icrc_ok(),
        "corrupted IPv6 datagram passes the engine's ICRC check"
    );
}

#[test]
fn fault_injector_corruption_stays_detectable() {
    let (s, d) = (ip("127.0.0.63"), ip("127.0.0.64"));
    let (a, mut b) = pair25(s, d, |c| c);
    let mut f = FaultInjector::new(a, FaultConfig::new(7).corrupt(1.0));
    // Messages of 4096+4096+1000 bytes, as a 9 KiB WRITE at MTU 4096 would give.
    let lens: Vec<usize> = (0..30)
        .map(|i| if i % 3 == 2 { 1000 } else { 4096 })
        .collect();
    let mut tx = PacketBatch::new(lens.len(), SLOT);
    for (i, &l) in lens.iter().enumerate() {
        tx.push_with(|slot| emit(&spec(s, d, i as u32, l), slot));
    }
    send_all(&mut f, &mut tx);
    let got = recv_n(&mut b, 30);
    let bad: Vec<(u32, usize)> = got
        .iter()
        .filter(|g| g.icrc_ok())
        .map(|g| {
            let psn = g.packet().unwrap().bth.psn.value();
            (psn, lens[psn as usize])
        })
        .collect();
    println!(
        "corrupted: {}, received {}, with a valid ICRC: {:?}",
        f.stats().corrupted,
        got.len(),
        bad
    );
    assert!(
        bad.is_empty(),
        "every datagram was corrupted, none may pass"
    );
}

/// A device bound to 0.0.0.0 or :: cannot give its datagrams ICRCs the
/// receiver can check (the kernel picks the source): refused.
#[test]
fn an_unspecified_local_address_is_refused() {
    for a in ["0.0.0.0", "::"] {
        let e = UdpBackend::bind(UdpConfig::new(ip(a)).port(25_960)).err();
        let e = e.expect("bind refused");
        assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput, "{a}: {e}");
    }
}

#[test]
fn receive_side_corruption_is_left_for_the_engine_to_catch() {
    let (s, d) = (ip("127.0.0.73"), ip("127.0.0.74"));
    let (mut a, b) = pair25(s, d, |c| c.gso(false));
    let mut f = FaultInjector::new(b, FaultConfig::new(3).corrupt(1.0).paths(false, true));
    let mut tx = PacketBatch::new(4, SLOT);
    for i in 0..4 {
        tx.push_with(|slot| emit(&spec(s, d, i, 64), slot));
    }
    send_all(&mut a, &mut tx);
    // Until something arrives (loopback delivers as it sends, unless the
    // kernel deferred it), 5 s at most.
    let mut rx = PacketBatch::new(16, 9216);
    let end = std::time::Instant::now() + std::time::Duration::from_secs(5);
    let n = loop {
        let n = f.recv(0, &mut rx).unwrap();
        if n > 0 || std::time::Instant::now() > end {
            break n;
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    };
    for i in 0..n {
        let g = Got::of(&rx, i);
        println!(
            "psn {} icrc ok={}",
            g.packet().unwrap().bth.psn.value(),
            g.icrc_ok()
        );
    }
    println!("the injector corrupted {}", f.recv_stats().corrupted);
    assert!(n > 0);
    // Each was damaged in its UDP payload, which keeps its header: the
    // engine's check fails.
    assert!((0..n).all(|i| rx.header(i).is_some()), "a payload still");
    assert!((0..n).all(|i| !Got::of(&rx, i).icrc_ok()));
}

#[test]
fn hostile_datagrams_do_not_panic_the_receiver() {
    for gro in [true, false] {
        let port = 25_980 + NEXT.fetch_add(1, Ordering::Relaxed) % 10;
        let Ok(mut b) = UdpBackend::bind(
            UdpConfig::new(ip("127.0.0.77"))
                .port(port)
                .gro(gro)
                .max_datagram(2000),
        ) else {
            continue;
        };
        let s = std::net::UdpSocket::bind("127.0.0.78:0").unwrap();
        let mut x: u64 = 99;
        let mut rnd = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let mut rx = PacketBatch::new(8, 300);
        for i in 0..3000 {
            let n = if i % 50 == 0 {
                3000 + (rnd() % 20000) as usize
            } else {
                (rnd() % 120) as usize
            };
            let buf: Vec<u8> = (0..n).map(|_| rnd() as u8).collect();
            let _ = s.send_to(&buf, ("127.0.0.77", port));
            if i % 16 == 0 {
                while b.recv(0, &mut rx).unwrap() > 0 {}
            }
        }
        while b.recv(0, &mut rx).unwrap() > 0 {}
        println!("gro={gro}: {:?}", b.stats());
    }
}

/// A GSO send the kernel refuses for the message's own sake (EINVAL for
/// UDP port 0) keeps GSO on: a one-datagram probe is refused too, so the
/// message is dropped and counted, and GSO still serves the next send.
#[test]
fn a_refused_gso_message_does_not_turn_gso_off() {
    let (s, d) = (ip("127.0.0.65"), ip("127.0.0.66"));
    let (mut a, mut b) = pair25(s, d, |c| c);
    assert!(a.offloads().gso);
    let mut tx = PacketBatch::new(2, SLOT);
    for i in 0..2 {
        tx.push_with(|slot| emit(&spec(s, d, i, 512), slot));
    }
    // Destination port 0 (in the engine's UDP header).
    for i in 0..2 {
        let g = tx.get_mut(i);
        g[22] = 0;
        g[23] = 0;
    }
    assert_eq!(a.send(0, &tx).unwrap(), 2);
    assert!(
        a.offloads().gso,
        "GSO was switched off by one refused message"
    );
    assert_eq!(a.stats().gso_disabled, 0);
    assert_eq!(a.stats().tx_errors, 2);
    // The next message goes out as one GSO send and arrives whole.
    let mut tx = PacketBatch::new(3, SLOT);
    for i in 0..3 {
        tx.push_with(|slot| emit(&spec(s, d, i, 512), slot));
    }
    let gso_before = a.stats().tx_gso_sends;
    send_all(&mut a, &mut tx);
    assert_eq!(a.stats().tx_gso_sends, gso_before + 1);
    assert_eq!(recv_n(&mut b, 3).len(), 3);
}
