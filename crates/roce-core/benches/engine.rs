//! Engine benchmarks on the in-memory fabric (one core drives both sides):
//! 8-byte RC SENDs per second, 64 KiB RDMA WRITEs (path MTU 4096) in GB/s
//! next to a plain memcpy of the same bytes, and the engine's cost per
//! packet, and each step of one RDMA WRITE's round apart (`engine_step`:
//! building the WRITE, receiving it, building its ACK, receiving that).
//! Run: `cargo bench -p roce-core --bench engine`.
//!
//! Instruction counts per step, steadier than a clock on a shared host:
//! `ROCE_BENCH_STEPS=100000 valgrind --tool=callgrind <bench binary>` runs
//! the steps that many times and no criterion (`ROCE_BENCH_STEPS_LEN`:
//! the WRITE's length, 8 by default; `ROCE_BENCH_STEPS_INTACT=1`: received
//! as a same-host ring hands an engine's untouched datagram over); `callgrind_annotate
//! --inclusive=yes` then gives each `step_*` function's instructions,
//! which divided by the count are one step's.

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{criterion_group, Criterion, Throughput};
use roce_core::*;
use roce_io::{Backend, Fabric, FabricPort, PacketBatch};
use roce_testkit::rc::{self, Link};

const MEM: usize = 8 << 20;

struct Side {
    dev: Device,
    port: FabricPort,
    cq: CqId,
    mr: MrKeys,
    qp: Qpn,
    base: u64,
    tx: PacketBatch,
}

fn side(fabric: &Fabric, i: u8, mtu: u32) -> Side {
    let addr = format!("10.0.0.{}", i + 1).parse().unwrap();
    let port = fabric.endpoint(addr).unwrap();
    let mut cfg = DeviceConfig::new(addr);
    cfg.active_mtu = mtu;
    let mut dev = Device::new(cfg);
    let pd = dev.alloc_pd();
    let cq = dev.create_cq(1 << 16);
    let base = 0x1000_0000 * (i as u64 + 1);
    let access = Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ;
    let mr = dev
        .reg_mr(pd, base, Box::new(vec![0u8; MEM]), access)
        .unwrap();
    let cap = QpCaps {
        max_send_wr: 8192,
        max_recv_wr: 8192,
        ..QpCaps::default()
    };
    let init = QpInitAttr {
        qp_type: QpType::Rc,
        pd,
        send_cq: cq,
        recv_cq: cq,
        srq: None,
        cap,
        sq_sig_all: false,
    };
    let qp = dev.create_qp(init).unwrap();
    Side {
        dev,
        port,
        cq,
        mr,
        qp,
        base,
        tx: PacketBatch::new(64, 4400),
    }
}

/// RESET → RTS towards the other side, with no local ACK timeout (a
/// lossless pump needs no timer).
fn connect(s: &mut Side, peer: std::net::IpAddr, peer_qpn: Qpn, mtu: u32) {
    let link = Link {
        qp_type: QpType::Rc,
        pmtu: mtu,
        peer,
        peer_qpn,
        sq_psn: Psn::new(0),
        rq_psn: Psn::new(0),
    };
    rc::bring_up(&mut s.dev, s.qp, &link, |a| a.timeout = 0);
}

fn pair(mtu: u32) -> [Side; 2] {
    let fabric = Fabric::new();
    let mut s = [side(&fabric, 0, mtu), side(&fabric, 1, mtu)];
    let (a0, a1) = (s[0].dev.addrs()[0], s[1].dev.addrs()[0]);
    let (q0, q1) = (s[0].qp, s[1].qp);
    connect(&mut s[0], a1, q1, mtu);
    connect(&mut s[1], a0, q0, mtu);
    s
}

/// Moves every pending packet both ways once; returns datagrams moved.
fn pump(s: &mut [Side; 2], rx: &mut PacketBatch) -> u64 {
    let mut moved = 0;
    for x in s.iter_mut() {
        loop {
            let dev = &mut x.dev;
            if !x
                .tx
                .push_transmit_with(|slot| dev.poll_transmit(0, slot).datagram())
            {
                break;
            }
            if x.tx.is_full() {
                let n = x.port.send(0, &x.tx).unwrap();
                x.tx.drain_front(n);
                moved += n as u64;
            }
        }
        if !x.tx.is_empty() {
            let n = x.port.send(0, &x.tx).unwrap();
            x.tx.drain_front(n);
            moved += n as u64;
        }
    }
    for x in s.iter_mut() {
        loop {
            let n = x.port.recv(0, rx).unwrap();
            if n == 0 {
                break;
            }
            for k in 0..n {
                x.dev.handle_datagram(0, rx.get(k), RxMeta::default());
            }
        }
    }
    moved
}

/// How datagrams go from one device to the other.
#[derive(Clone, Copy, PartialEq)]
enum Via {
    /// Through the in-memory fabric.
    Fabric,
    /// Straight, whole (`handle_datagram`).
    Direct,
    /// Straight, as a UDP socket's receiver hands them over: the UDP
    /// payload and its header facts (`handle_udp`).
    DirectUdp,
}

/// Hands datagrams straight from one device to the other (no fabric
/// queue copies): the engine's own cost. `udp`: as their UDP payloads
/// with their header facts (the IPv4 ID known, as a same-host ring's
/// record gives it).
fn pump_direct(s: &mut [Side; 2], buf: &mut [u8], udp: bool) -> u64 {
    let mut moved = 0;
    for i in 0..2 {
        let (a, b) = s.split_at_mut(1);
        let (from, to) = if i == 0 {
            (&mut a[0], &mut b[0])
        } else {
            (&mut b[0], &mut a[0])
        };
        while let Some(t) = from.dev.poll_transmit(0, buf).datagram() {
            if udp {
                let h =
                    RxHeader::new(t.src, t.destination.ip(), t.tos()).with_ipv4_id(Some(t.ipv4_id));
                let payload = &buf[t.header_len()..t.size];
                to.dev.handle_udp(0, h, payload, RxMeta::default());
            } else {
                to.dev.handle_datagram(0, &buf[..t.size], RxMeta::default());
            }
            moved += 1;
        }
    }
    moved
}

/// Runs `msgs` operations keeping `depth` in flight; returns datagrams moved.
fn run(s: &mut [Side; 2], msgs: u64, depth: u64, len: u32, write: bool) -> u64 {
    run_with(s, msgs, depth, len, write, Via::Fabric)
}

fn run_with(s: &mut [Side; 2], msgs: u64, depth: u64, len: u32, write: bool, via: Via) -> u64 {
    let mut buf = vec![0u8; 4400];
    let mut rx = PacketBatch::new(64, 4400);
    let mut wc = [Wc::new(0, WcStatus::Success, WcOpcode::Send, Qpn::new(0)); 256];
    let (mut posted, mut done, mut moved) = (0u64, 0u64, 0u64);
    let rkey = s[1].mr.rkey;
    let dst = s[1].base + (4 << 20);
    while done < msgs {
        while posted < msgs && posted - done < depth {
            let sge = Sge {
                addr: s[0].base,
                length: len,
                lkey: s[0].mr.lkey,
            };
            // Signal every 16th WR (and the last), as benchmarks do.
            let signaled = posted % 16 == 15 || posted + 1 == msgs;
            let mut wr = if write {
                SendWr::rdma(posted, SendOp::Write, [sge], dst, rkey)
            } else {
                let rsge = Sge {
                    addr: s[1].base + 8 * (posted % 4096),
                    length: len,
                    lkey: s[1].mr.lkey,
                };
                s[1].dev
                    .post_recv(
                        s[1].qp,
                        RecvWr {
                            wr_id: posted,
                            sgl: vec![rsge].into(),
                        },
                    )
                    .unwrap();
                SendWr::send(posted, [sge])
            };
            if !signaled {
                wr.flags = SendFlags::default();
            }
            s[0].dev.post_send(s[0].qp, wr).unwrap();
            posted += 1;
        }
        moved += match via {
            Via::Fabric => pump(s, &mut rx),
            Via::Direct => pump_direct(s, &mut buf, false),
            Via::DirectUdp => pump_direct(s, &mut buf, true),
        };
        let n = s[0].dev.poll_cq(s[0].cq, &mut wc).unwrap();
        for c in &wc[..n] {
            assert_eq!(c.status, WcStatus::Success);
            done = c.wr_id + 1;
        }
        // Receive completions on B are drained too (a real app would).
        while s[1].dev.poll_cq(s[1].cq, &mut wc).unwrap() > 0 {}
    }
    moved
}

fn send_rate(c: &mut Criterion) {
    let mut g = c.benchmark_group("rc_send_8B");
    g.throughput(Throughput::Elements(1));
    g.bench_function("messages", |b| {
        b.iter_custom(|iters| {
            let mut s = pair(4096);
            let t = Instant::now();
            run(&mut s, iters, 256, 8, false);
            t.elapsed()
        })
    });
    g.bench_function("messages_direct", |b| {
        b.iter_custom(|iters| {
            let mut s = pair(4096);
            let t = Instant::now();
            run_with(&mut s, iters, 256, 8, false, Via::Direct);
            t.elapsed()
        })
    });
    g.bench_function("messages_direct_udp", |b| {
        b.iter_custom(|iters| {
            let mut s = pair(4096);
            let t = Instant::now();
            run_with(&mut s, iters, 256, 8, false, Via::DirectUdp);
            t.elapsed()
        })
    });
    g.finish();
}

fn write_bw(c: &mut Criterion) {
    const LEN: u32 = 64 * 1024;
    let mut g = c.benchmark_group("rc_write_64KiB_mtu4096");
    g.throughput(Throughput::Bytes(LEN as u64));
    g.bench_function("engine", |b| {
        b.iter_custom(|iters| {
            let mut s = pair(4096);
            let t = Instant::now();
            run(&mut s, iters, 64, LEN, true);
            t.elapsed()
        })
    });
    g.bench_function("engine_direct", |b| {
        b.iter_custom(|iters| {
            let mut s = pair(4096);
            let t = Instant::now();
            run_with(&mut s, iters, 64, LEN, true, Via::Direct);
            t.elapsed()
        })
    });
    // The physical limit: copying the same bytes once, source to destination.
    let src = vec![0x5au8; LEN as usize];
    let mut dst = vec![0u8; LEN as usize];
    g.bench_function("memcpy", |b| {
        b.iter(|| {
            dst.copy_from_slice(black_box(&src));
            black_box(&mut dst);
        })
    });
    g.finish();
}

fn per_packet(c: &mut Criterion) {
    // Engine nanoseconds per datagram (both directions, all work included).
    let mut g = c.benchmark_group("engine_per_packet");
    g.throughput(Throughput::Elements(1));
    g.bench_function("rc_send_8B_datagram", |b| {
        b.iter_custom(|iters| {
            let mut s = pair(4096);
            let mut total = Duration::ZERO;
            let mut packets = 0;
            while packets < iters {
                let t = Instant::now();
                packets += run(&mut s, 4096, 256, 8, false);
                total += t.elapsed();
            }
            total.mul_f64(iters as f64 / packets as f64)
        })
    });
    g.finish();
}

/// One RDMA WRITE of `len` bytes (unsignaled) posted and built into a
/// datagram in `buf`.
#[inline(never)]
fn step_build_write(s: &mut Side, dst: u64, rkey: Rkey, len: u32, buf: &mut [u8]) -> Transmit {
    let sge = Sge {
        addr: s.base,
        length: len,
        lkey: s.mr.lkey,
    };
    let mut wr = SendWr::rdma(0, SendOp::Write, vec![sge], dst, rkey);
    wr.flags = SendFlags::default();
    s.dev.post_send(s.qp, wr).unwrap();
    s.dev.poll_transmit(0, buf).datagram().expect("a WRITE")
}

/// One datagram `t` in `buf` handed to `to` as a same-host ring gives it:
/// its UDP payload and header facts, the IPv4 identification known, and
/// `meta` (marked intact or not).
#[inline(never)]
fn step_receive(to: &mut Side, t: &Transmit, buf: &[u8], meta: RxMeta) {
    let h = RxHeader::new(t.src, t.destination.ip(), t.tos()).with_ipv4_id(Some(t.ipv4_id));
    to.dev.handle_udp(0, h, &buf[t.header_len()..t.size], meta);
}

/// The responder's ACK built into `buf`.
#[inline(never)]
fn step_build_ack(s: &mut Side, buf: &mut [u8]) -> Transmit {
    s.dev.poll_transmit(0, buf).datagram().expect("an ACK")
}

/// Which step of a WRITE's round a measurement times.
#[derive(Clone, Copy, PartialEq)]
enum Step {
    BuildWrite,
    ReceiveWrite,
    BuildAck,
    ReceiveAck,
}

/// Runs `n` rounds of one WRITE of `len` bytes and its ACK (one in
/// flight, so every WRITE is ACKed at once), each datagram received with
/// `meta`; returns the time spent in `step` alone.
fn rounds(s: &mut [Side; 2], n: u64, len: u32, step: Step, meta: RxMeta) -> Duration {
    let mut buf = vec![0u8; 4400];
    let mut ack = vec![0u8; 256];
    let (rkey, dst) = (s[1].mr.rkey, s[1].base + (4 << 20));
    let mut total = Duration::ZERO;
    let (a, b) = s.split_at_mut(1);
    let (a, b) = (&mut a[0], &mut b[0]);
    for _ in 0..n {
        let t0 = Instant::now();
        let w = step_build_write(a, dst, rkey, len, &mut buf);
        let t1 = Instant::now();
        step_receive(b, &w, &buf, meta);
        let t2 = Instant::now();
        let k = step_build_ack(b, &mut ack);
        let t3 = Instant::now();
        step_receive(a, &k, &ack, meta);
        let t4 = Instant::now();
        total += match step {
            Step::BuildWrite => t1 - t0,
            Step::ReceiveWrite => t2 - t1,
            Step::BuildAck => t3 - t2,
            Step::ReceiveAck => t4 - t3,
        };
    }
    total
}

fn steps(c: &mut Criterion) {
    for len in [8u32, 4096] {
        let mut g = c.benchmark_group(format!("engine_step_write_{len}B"));
        g.throughput(Throughput::Elements(1));
        for (name, step) in [
            ("build_write", Step::BuildWrite),
            ("receive_write", Step::ReceiveWrite),
            ("build_ack", Step::BuildAck),
            ("receive_ack", Step::ReceiveAck),
        ] {
            g.bench_function(name, |b| {
                let meta = RxMeta::default();
                b.iter_custom(|iters| rounds(&mut pair(4096), iters, len, step, meta))
            });
        }
        // As a same-host ring hands over an engine's untouched datagram:
        // the receiver takes its ICRC as the sender computed it.
        for (name, step) in [
            ("receive_write_host_intact", Step::ReceiveWrite),
            ("receive_ack_host_intact", Step::ReceiveAck),
        ] {
            g.bench_function(name, |b| {
                let meta = RxMeta::default().with_host_intact(true);
                b.iter_custom(|iters| rounds(&mut pair(4096), iters, len, step, meta))
            });
        }
        g.finish();
    }
}

criterion_group!(benches, send_rate, write_bw, per_packet, steps);

fn main() {
    // Under callgrind: the steps alone, `ROCE_BENCH_STEPS` rounds of a
    // WRITE of `ROCE_BENCH_STEPS_LEN` bytes (8 unless given), received
    // marked intact when `ROCE_BENCH_STEPS_INTACT` is 1 (see the
    // module's documentation).
    let var = |k: &str| std::env::var(k).ok().and_then(|v| v.parse().ok());
    if let Some(n) = var("ROCE_BENCH_STEPS") {
        let len = var("ROCE_BENCH_STEPS_LEN").unwrap_or(8);
        let meta = RxMeta::default().with_host_intact(var("ROCE_BENCH_STEPS_INTACT") == Some(1));
        rounds(&mut pair(4096), n, len as u32, Step::BuildWrite, meta);
        return;
    }
    benches();
    Criterion::default().configure_from_args().final_summary();
}
