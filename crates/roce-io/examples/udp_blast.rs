//! Loopback throughput of the `UdpBackend`: 4136-byte RoCE datagrams
//! (RC SEND_ONLY: 20 IPv4 + 8 UDP + 12 BTH + 4092 payload + 4
//! ICRC) from 127.0.0.1 to 127.0.0.2, once with plain sendmmsg/recvmmsg and
//! once with UDP GSO/GRO. One sender and one receiver thread.
//!
//! `cargo run --release -p roce-io --example udp_blast [seconds]`

use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use roce_io::{Backend, PacketBatch, UdpBackend, UdpConfig};
use roce_wire::{
    BthRepr, Ecn, ExtHeaders, FrameRepr, IpRepr, Ipv4Repr, Opcode, Psn, Qpn, UdpChecksum, UdpRepr,
    ROCE_V2_PORT,
};

const PAYLOAD: usize = 4092;
const BATCH: usize = 64;

fn bind_pair(gso: bool) -> std::io::Result<(UdpBackend, UdpBackend)> {
    let a: IpAddr = "127.0.0.1".parse().unwrap();
    let b: IpAddr = "127.0.0.2".parse().unwrap();
    let mut last = None;
    for port in (30_000u16..30_100).step_by(7) {
        let ca = UdpConfig::new(a)
            .port(port)
            .remote_port(port)
            .gso(gso)
            .gro(gso);
        let cb = UdpConfig::new(b)
            .port(port)
            .remote_port(port)
            .gso(gso)
            .gro(gso);
        match (UdpBackend::bind(ca), UdpBackend::bind(cb)) {
            (Ok(x), Ok(y)) => return Ok((x, y)),
            (Err(e), _) | (_, Err(e)) => last = Some(e),
        }
    }
    Err(last.expect("tried"))
}

fn run(gso: bool, secs: f64) -> std::io::Result<()> {
    let (mut tx_b, mut rx_b) = bind_pair(gso)?;
    let data = vec![0x5au8; PAYLOAD];
    let mut tx = PacketBatch::new(BATCH, 4096 + 128);
    let mut dgram_len = 0;
    for psn in 0..BATCH as u32 {
        let repr = FrameRepr {
            eth: None,
            ip: IpRepr::V4(Ipv4Repr {
                src: "127.0.0.1".parse().unwrap(),
                dst: "127.0.0.2".parse().unwrap(),
                dscp: 26,
                ecn: Ecn::Ect0,
                ident: 0,
                dont_frag: true,
                ttl: 64,
                payload_len: 0,
            }),
            udp: UdpRepr {
                src_port: 0xc001,
                dst_port: ROCE_V2_PORT,
                checksum: UdpChecksum::Zero,
            },
            bth: BthRepr::new(Opcode::RC_SEND_ONLY, Qpn::new(0x12), Psn::new(psn)),
            ext: ExtHeaders::default(),
            payload: &data,
        };
        tx.push_with(|slot| {
            dgram_len = repr.emit(slot).unwrap_or(0);
            dgram_len
        });
    }
    let stop = Arc::new(AtomicBool::new(false));
    let stop_rx = stop.clone();
    let receiver = std::thread::spawn(move || {
        let mut rx = PacketBatch::new(256, 4096 + 128);
        let mut n = 0u64;
        while !stop_rx.load(Ordering::Relaxed) {
            let got = rx_b.recv(0, &mut rx).expect("recv");
            n += got as u64;
            if got == 0 {
                let _ = rx_b.wait_readable(Some(Duration::from_millis(5)));
            }
        }
        (n, rx_b.stats())
    });
    let start = Instant::now();
    let mut sent = 0u64;
    while start.elapsed().as_secs_f64() < secs {
        let n = tx_b.send(0, &tx)?;
        sent += n as u64;
        if n < tx.len() {
            std::thread::yield_now();
        }
    }
    let elapsed = start.elapsed().as_secs_f64();
    std::thread::sleep(Duration::from_millis(50));
    stop.store(true, Ordering::Relaxed);
    let (received, rstats) = receiver.join().expect("receiver");
    let s = tx_b.stats();
    let gbit = |n: u64| n as f64 * dgram_len as f64 * 8.0 / elapsed / 1e9;
    println!(
        "{:<22} sent {:>9.0} dgram/s {:>6.2} Gbit/s | received {:>9.0} dgram/s {:>6.2} Gbit/s | \
         {} tx syscalls, {} GSO sends, {} rx syscalls, {} GRO batches",
        if gso { "GSO/GRO" } else { "sendmmsg/recvmmsg" },
        sent as f64 / elapsed,
        gbit(sent),
        received as f64 / elapsed,
        gbit(received),
        s.tx_syscalls,
        s.tx_gso_sends,
        rstats.rx_syscalls,
        rstats.rx_gro_batches,
    );
    Ok(())
}

fn main() -> std::io::Result<()> {
    let secs: f64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(2.0);
    println!(
        "{} datagrams of {} bytes per send call",
        BATCH,
        20 + 8 + 12 + PAYLOAD + 4
    );
    run(false, secs)?;
    run(true, secs)?;
    Ok(())
}
