//! The latency floor of plain UDP between two processes, wherever they run
//! (two network namespaces, two hosts): a busy-polling ping-pong of 64-byte
//! datagrams over connected sockets, nothing else. `roce perf write-lat`
//! between the same two endpoints is compared with its half round trip.
//!
//! ```text
//! ip netns exec B cargo run --release -p roce-io --example udp_pingpong -- echo 10.0.0.2:9000 10.0.0.1:9000
//! ip netns exec A cargo run --release -p roce-io --example udp_pingpong -- ping 10.0.0.1:9000 10.0.0.2:9000 [ITERS]
//! ```
//!
//! `echo LOCAL PEER` answers until it has answered ITERS datagrams or sees
//! nothing for 5 s; `ping LOCAL PEER [ITERS]` (default 100000) prints the
//! half round trip's typical value, minimum and 99th percentile in µs.

use std::net::UdpSocket;
use std::time::{Duration, Instant};

fn main() {
    if let Err(e) = run() {
        eprintln!("udp_pingpong: {e}");
        std::process::exit(2);
    }
}

fn run() -> Result<(), String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (role, local, peer) = match args.as_slice() {
        [r, l, p, ..] if r == "echo" || r == "ping" => (r.as_str(), l, p),
        _ => return Err("usage: udp_pingpong echo|ping LOCAL:PORT PEER:PORT [ITERS]".into()),
    };
    let iters: usize = match args.get(3) {
        Some(n) => n.parse().map_err(|_| format!("'{n}' is not a count"))?,
        None => 100_000,
    };
    let s = UdpSocket::bind(local).map_err(|e| format!("bind {local}: {e}"))?;
    s.connect(peer)
        .map_err(|e| format!("connect {peer}: {e}"))?;
    s.set_nonblocking(true).map_err(|e| e.to_string())?;
    let mut buf = [0u8; 2048];
    if role == "echo" {
        let mut done = 0;
        let mut last = Instant::now();
        while done < iters && last.elapsed() < Duration::from_secs(5) {
            if let Ok(n) = s.recv(&mut buf) {
                let _ = s.send(&buf[..n]);
                done += 1;
                last = Instant::now();
            }
        }
        return Ok(());
    }
    let msg = [7u8; 64];
    let mut half = Vec::with_capacity(iters);
    for i in 0..iters {
        let t = Instant::now();
        // The echo side may still be starting: the first datagram is sent
        // again until it comes back.
        s.send(&msg).map_err(|e| format!("send: {e}"))?;
        let mut resend = Instant::now();
        loop {
            if s.recv(&mut buf).is_ok() {
                break;
            }
            if i == 0 && resend.elapsed() > Duration::from_millis(100) {
                let _ = s.send(&msg);
                resend = Instant::now();
            }
            if t.elapsed() > Duration::from_secs(5) {
                return Err(format!("no answer from {peer} after {i} round trips"));
            }
        }
        if i > 0 {
            half.push(t.elapsed().as_secs_f64() * 1e6 / 2.0);
        }
    }
    half.sort_by(|a, b| a.total_cmp(b));
    let at = |q: f64| half.get(((half.len() as f64 - 1.0) * q) as usize).copied();
    match (at(0.5), half.first(), at(0.99)) {
        (Some(typ), Some(min), Some(p99)) => {
            println!("UDP ping-pong, 64 B, busy-poll  half round trip: typical {typ:.2} us, min {min:.2} us, 99% {p99:.2} us");
            Ok(())
        }
        _ => Err("no samples (ITERS must be at least 2)".into()),
    }
}
