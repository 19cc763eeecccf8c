//! What the UDP backend's same-host path (docs/shm.md) costs per datagram
//! on the CPU, without the hand-offs between threads that a latency test
//! also measures: two backends of one thread on two loopback addresses,
//! linked by their rings, ping-pong one small RC datagram (a 2-byte RDMA
//! WRITE's size) `send` → `recv` → `send` → `recv`, and the time of a
//! round trip is reported (the median of several runs, in nanoseconds).
//! Two backend calls of each kind per round trip, nothing else: no
//! engine, no progress thread.
//!
//! A second line does the same with both backends sharing one address
//! (`UdpConfig::share`, as the drop-in runs by default): routes are found
//! by destination QPN through the host table (docs/host.md).
//!
//! Each pair is also timed doing nothing: an empty receive, as a
//! progress thread's spin makes it between two datagrams (on average
//! half of one is added to each datagram's delivery).
//!
//! `cargo bench -p roce-io --bench shm_path [-- ROUND_TRIPS]`

#[path = "../tests/common/mod.rs"]
mod common;

use std::net::IpAddr;
use std::time::Instant;

use common::{emit, pair, Spec, SLOT};
use roce_io::{Backend, Nanos, PacketBatch, UdpBackend, UdpConfig};
use roce_wire::{Ecn, Owner};

fn spec(src: IpAddr, dst: IpAddr, psn: u32) -> Spec {
    Spec {
        src,
        dst,
        sport: 0xC000,
        dscp: 0,
        ecn: Ecn::NotEct,
        psn,
        len: 2,
    }
}

/// Sends one datagram `a` → `b` and receives it there, spinning;
/// `false` when it did not arrive within a million empty receives. The
/// clock is read as a progress engine reads it: at the send, and every
/// 1024 empty receives (a receiver whose clock stood still would never
/// look at its listener, docs/shm.md "Sleeping and waking").
fn hop(
    a: &mut UdpBackend,
    b: &mut UdpBackend,
    tx: &mut PacketBatch,
    rx: &mut PacketBatch,
    s: &Spec,
    clock: &dyn Fn() -> Nanos,
) -> bool {
    tx.clear();
    tx.push_with(|slot| emit(s, slot));
    let mut now = clock();
    if a.send(now, tx).ok() != Some(1) {
        return false;
    }
    for k in 1..=1_000_000u32 {
        if b.recv(now, rx).unwrap_or(0) > 0 {
            return true;
        }
        if k % 1024 == 0 {
            now = clock();
        }
    }
    false
}

/// Round trips `a` ↔ `b`: the median time of one over `runs` runs of
/// `n`, in nanoseconds; `None` if a datagram was lost. The datagrams
/// `a` sends name QPN 0x100, those of `b` QPN 0x101 (PSNs 7k and 7k + 1
/// as [`emit`] makes them).
fn ping_pong(a: &mut UdpBackend, b: &mut UdpBackend, n: u32, runs: usize) -> Option<f64> {
    let (sa, sb) = (a.local_addr().ip(), b.local_addr().ip());
    let mut tx = PacketBatch::new(1, SLOT);
    let mut rx = PacketBatch::new(64, 9216);
    let t0 = Instant::now();
    let now = || t0.elapsed().as_nanos() as Nanos;
    // Until both directions are on rings (the first datagrams go by UDP
    // and start the handshakes).
    let mut psn = 0;
    while a.stats().shm_links_out == 0 || b.stats().shm_links_out == 0 {
        if psn > 5000 {
            return None;
        }
        hop(a, b, &mut tx, &mut rx, &spec(sa, sb, psn), &now);
        hop(b, a, &mut tx, &mut rx, &spec(sb, sa, psn + 1), &now);
        psn += 7;
        std::thread::sleep(std::time::Duration::from_micros(100));
    }
    let mut per = Vec::new();
    for _ in 0..runs {
        let t = Instant::now();
        for _ in 0..n {
            psn += 7;
            if !hop(a, b, &mut tx, &mut rx, &spec(sa, sb, psn), &now)
                || !hop(b, a, &mut tx, &mut rx, &spec(sb, sa, psn + 1), &now)
            {
                return None;
            }
        }
        per.push(t.elapsed().as_nanos() as f64 / f64::from(n));
    }
    per.sort_by(f64::total_cmp);
    Some(per[per.len() / 2])
}

/// An empty receive of a linked backend, as a progress thread's spin
/// makes it between two datagrams: nanoseconds per call (the median of
/// seven runs of `n`). Half of it, on average, is added to every
/// datagram's delivery.
fn empty_recv(b: &mut UdpBackend, n: u32) -> f64 {
    let mut rx = PacketBatch::new(64, 9216);
    let t0 = Instant::now();
    let mut per = Vec::new();
    for _ in 0..7 {
        let t = Instant::now();
        for _ in 0..n {
            let now = t0.elapsed().as_nanos() as Nanos;
            let _ = b.recv(now, &mut rx);
        }
        per.push(t.elapsed().as_nanos() as f64 / f64::from(n));
    }
    per.sort_by(f64::total_cmp);
    per[per.len() / 2]
}

fn main() {
    let n: u32 = std::env::args()
        .skip(1)
        .find(|a| !a.starts_with('-'))
        .and_then(|a| a.parse().ok())
        .unwrap_or(200_000);
    let report = |what: &str, r: Option<f64>| match r {
        Some(ns) => println!("{what}: {ns:.0} ns per round trip of 2 datagrams ({n}, median of 7)"),
        None => println!("{what}: a datagram was lost"),
    };
    let (mut a, mut b) = pair(
        "127.0.0.61".parse().unwrap(),
        "127.0.0.62".parse().unwrap(),
        |c: UdpConfig| c.shm(true),
    );
    report(
        "two addresses, ring by address",
        ping_pong(&mut a, &mut b, n, 7),
    );
    println!(
        "an empty receive of a linked backend: {:.0} ns per call ({n}, median of 7)",
        empty_recv(&mut b, n)
    );
    drop((a, b));
    let dir = tempfile::tempdir().expect("a directory for the host table");
    let lo: IpAddr = "127.0.0.63".parse().unwrap();
    let (mut a, mut b) = pair(lo, lo, |c: UdpConfig| c.share(true).share_dir(dir.path()));
    let claimed = a.claim(lo, Owner::Qp(0x101)).ok() == Some(true)
        && b.claim(lo, Owner::Qp(0x100)).ok() == Some(true);
    if claimed {
        report(
            "one shared address, ring by QPN",
            ping_pong(&mut a, &mut b, n, 7),
        );
        println!(
            "an empty receive of a linked backend sharing its address: {:.0} ns per call",
            empty_recv(&mut b, n)
        );
    } else {
        println!("one shared address: the QPNs could not be claimed");
    }
}
