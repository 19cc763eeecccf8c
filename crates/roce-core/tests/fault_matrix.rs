//! The seeded fault matrix: RC QPs exchanging mixed SEND / WRITE / READ /
//! FETCH_ADD / COMPARE_SWAP in both directions over roce-io's fabric with
//! its fault injector (loss, duplication, reordering, corruption, delay).
//! Whatever the network does: every WR completes exactly once and
//! successfully, all data is correct, atomics run exactly once (the
//! FETCH_ADD counter ends at exactly the sum of the adds), and the run ends
//! (no deadlock) within a bounded virtual time.
//!
//! The QPs use retry_cnt 7, which (as in Linux rxe) never gives up; one
//! case uses a finite budget of 6 at 5 % loss.
//!
//! A failure names its seed; replay one case with
//! `ROCE_FAULT_SEED=<seed> cargo test -p roce-core --test fault_matrix`.

use std::collections::BTreeMap;
use std::net::IpAddr;

use roce_core::*;
use roce_io::{Backend, Fabric, FabricPort, FaultConfig, FaultInjector, LinkConfig, PacketBatch};
use roce_testkit::rc::{self, Link};

const MEM: usize = 6 << 20;
const BASE: [u64; 2] = [0x1000_0000, 0x2000_0000];

struct Side {
    dev: Device,
    net: FaultInjector<FabricPort>,
    pd: PdId,
    cq: CqId,
    mr: MrKeys,
    qp: Qpn,
    tx: PacketBatch,
}

#[derive(Clone, Copy, Debug)]
struct Faults {
    loss: f64,
    dup: f64,
    reorder: f64,
    corrupt: f64,
    jitter_ns: u64,
    retry_cnt: u8,
}

/// A small deterministic generator for the workload (the faults have their own).
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

#[derive(Debug, Clone)]
enum Expect {
    Send,
    Write { peer_off: u64, data: Vec<u8> },
    Read { local_off: u64, data: Vec<u8> },
    FetchAdd { local_off: u64, add: u64 },
    CompareSwap { local_off: u64, want_orig: u64 },
}

fn setup(fabric: &Fabric, i: usize, seed: u64, f: Faults) -> Side {
    let addr: std::net::IpAddr = format!("10.0.0.{}", i + 1).parse().unwrap();
    let port = fabric
        .endpoint_with(addr, LinkConfig::new().latency(2_000))
        .unwrap();
    let cfg = FaultConfig::new(seed ^ (i as u64 * 0x5151))
        .loss(f.loss)
        .duplicate(f.dup)
        .reorder(f.reorder)
        .corrupt(f.corrupt)
        .delay(0, f.jitter_ns);
    let net = FaultInjector::new(port, cfg);
    let mut c = DeviceConfig::new(addr);
    c.active_mtu = 1024;
    let mut dev = Device::new(c);
    let pd = dev.alloc_pd();
    let cq = dev.create_cq(100_000);
    let access =
        Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ | Access::REMOTE_ATOMIC;
    let mr = dev
        .reg_mr(pd, BASE[i], Box::new(vec![0u8; MEM]), access)
        .unwrap();
    let init = QpInitAttr {
        qp_type: QpType::Rc,
        pd,
        send_cq: cq,
        recv_cq: cq,
        srq: None,
        cap: QpCaps {
            max_send_wr: 4096,
            max_recv_wr: 4096,
            ..QpCaps::default()
        },
        sq_sig_all: true,
    };
    let qp = dev.create_qp(init).unwrap();
    Side {
        dev,
        net,
        pd,
        cq,
        mr,
        qp,
        tx: PacketBatch::new(64, 4400),
    }
}

/// RESET → RTS towards the other side: the local ACK timeout 8
/// (1.05 ms), `retry_cnt` retries.
fn connect(s: &mut Side, peer: IpAddr, peer_qpn: Qpn, sq: u32, rq: u32, retry_cnt: u8) {
    let link = Link {
        qp_type: QpType::Rc,
        pmtu: 1024,
        peer,
        peer_qpn,
        sq_psn: Psn::new(sq),
        rq_psn: Psn::new(rq),
    };
    rc::bring_up(&mut s.dev, s.qp, &link, |a| {
        a.timeout = 8;
        a.retry_cnt = retry_cnt;
    });
}

fn read(s: &Side, off: u64, len: usize, i: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    s.dev.mr_read(s.mr, s.pd, BASE[i] + off, &mut v).unwrap();
    v
}

/// Memory map of each side: [0, 2M) SEND/WRITE sources, [2M, 3M) READ and
/// atomic results, [3M, 4M) receive buffers, [4M, 5M) WRITE targets with
/// the FETCH_ADD counter and the CAS word at its end, [5M, 6M) READ sources.
const RESULT_AREA: u64 = 2 << 20;
const RECV_AREA: u64 = 3 << 20;
const WRITE_AREA: u64 = 4 << 20;
const READ_AREA: u64 = 5 << 20;
const COUNTER: u64 = READ_AREA - 64;
const CAS_WORD: u64 = READ_AREA - 128;

fn run_case(seed: u64, f: Faults, wrs_per_side: usize) {
    let ctx = format!("seed {seed} faults {f:?}: replay with ROCE_FAULT_SEED={seed} cargo test -p roce-core --test fault_matrix");
    let fabric = Fabric::new();
    let mut sides = [setup(&fabric, 0, seed, f), setup(&fabric, 1, seed, f)];
    let addrs = [sides[0].dev.addrs()[0], sides[1].dev.addrs()[0]];
    let qps = [sides[0].qp, sides[1].qp];
    connect(
        &mut sides[0],
        addrs[1],
        qps[1],
        0xff_ff00,
        0x12_3400,
        f.retry_cnt,
    );
    connect(
        &mut sides[1],
        addrs[0],
        qps[0],
        0x12_3400,
        0xff_ff00,
        f.retry_cnt,
    );
    let mut rng = Rng(seed | 1);
    let mut expects: [BTreeMap<u64, Expect>; 2] = [BTreeMap::new(), BTreeMap::new()];
    let mut sends: [Vec<(u64, Vec<u8>)>; 2] = [Vec::new(), Vec::new()];
    let mut adds = [0u64; 2];
    // Fill READ sources and seed the atomic words.
    for i in 0..2 {
        let src: Vec<u8> = (0..1 << 20)
            .map(|k: u32| (k.wrapping_mul(2_654_435_761) >> 13) as u8 ^ i as u8)
            .collect();
        sides[i]
            .dev
            .mr_write(sides[i].mr, sides[i].pd, BASE[i] + READ_AREA, &src)
            .unwrap();
        sides[i]
            .dev
            .mr_write(
                sides[i].mr,
                sides[i].pd,
                BASE[i] + COUNTER,
                &1000u64.to_ne_bytes(),
            )
            .unwrap();
        sides[i]
            .dev
            .mr_write(
                sides[i].mr,
                sides[i].pd,
                BASE[i] + CAS_WORD,
                &0u64.to_ne_bytes(),
            )
            .unwrap();
    }
    for i in 0..2 {
        let peer = 1 - i;
        let (mut src_off, mut recv_off, mut write_off, mut result_off) =
            (0u64, RECV_AREA, WRITE_AREA, RESULT_AREA);
        let mut cas_expect = 0u64;
        for n in 0..wrs_per_side as u64 {
            let wr_id = (i as u64) << 32 | n;
            let choice = rng.below(100);
            let len = match rng.below(4) {
                0 => rng.below(64) as u32,
                1 => rng.below(1025) as u32,
                2 => 1024 * (1 + rng.below(4) as u32),
                _ => rng.below(16 * 1024) as u32 + 1,
            };
            let peer_rkey = sides[peer].mr.rkey;
            let lkey = sides[i].mr.lkey;
            let sge = |off: u64, len: u32| Sge {
                addr: BASE[i] + off,
                length: len,
                lkey,
            };
            let (wr, exp) = if choice < 30 {
                let data: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
                sides[i]
                    .dev
                    .mr_write(sides[i].mr, sides[i].pd, BASE[i] + src_off, &data)
                    .unwrap();
                // The peer posts a receive of exactly this size, in order.
                let rsge = Sge {
                    addr: BASE[peer] + recv_off,
                    length: len.max(1),
                    lkey: sides[peer].mr.lkey,
                };
                sides[peer]
                    .dev
                    .post_recv(
                        qps[peer],
                        RecvWr {
                            wr_id: (peer as u64) << 32 | 0x8000_0000 | n,
                            sgl: vec![rsge].into(),
                        },
                    )
                    .unwrap();
                sends[peer].push((recv_off, data));
                recv_off += len as u64 + 1;
                let wr = SendWr::send(wr_id, [sge(src_off, len)]);
                src_off += len as u64;
                (wr, Expect::Send)
            } else if choice < 55 {
                let data: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
                sides[i]
                    .dev
                    .mr_write(sides[i].mr, sides[i].pd, BASE[i] + src_off, &data)
                    .unwrap();
                let wr = SendWr::rdma(
                    wr_id,
                    SendOp::Write,
                    [sge(src_off, len)],
                    BASE[peer] + write_off,
                    peer_rkey,
                );
                let e = Expect::Write {
                    peer_off: write_off,
                    data,
                };
                src_off += len as u64;
                write_off += len as u64;
                (wr, e)
            } else if choice < 75 {
                let off = rng.below((1 << 20) - 16 * 1024);
                let wr = SendWr::rdma(
                    wr_id,
                    SendOp::Read,
                    [sge(result_off, len)],
                    BASE[peer] + READ_AREA + off,
                    peer_rkey,
                );
                let e = Expect::Read {
                    local_off: result_off,
                    data: read(&sides[peer], READ_AREA + off, len as usize, peer),
                };
                result_off += len as u64;
                (wr, e)
            } else if choice < 92 {
                let add = rng.below(1000) + 1;
                adds[peer] += add;
                let wr = SendWr::rdma(
                    wr_id,
                    SendOp::FetchAdd { add },
                    [sge(result_off, 8)],
                    BASE[peer] + COUNTER,
                    peer_rkey,
                );
                let e = Expect::FetchAdd {
                    local_off: result_off,
                    add,
                };
                result_off += 8;
                (wr, e)
            } else {
                // A chain of CAS: each expects the previous one's swap value.
                let swap = cas_expect + 1;
                let wr = SendWr::rdma(
                    wr_id,
                    SendOp::CompareSwap {
                        compare: cas_expect,
                        swap,
                    },
                    [sge(result_off, 8)],
                    BASE[peer] + CAS_WORD,
                    peer_rkey,
                );
                let e = Expect::CompareSwap {
                    local_off: result_off,
                    want_orig: cas_expect,
                };
                cas_expect = swap;
                result_off += 8;
                (wr, e)
            };
            assert!(
                src_off < RESULT_AREA
                    && result_off < RECV_AREA
                    && recv_off < WRITE_AREA
                    && write_off < CAS_WORD,
                "{ctx}: workload overflows the memory map"
            );
            sides[i].dev.post_send(qps[i], wr).unwrap();
            expects[i].insert(wr_id, exp);
        }
    }
    // Drive both sides in virtual time.
    let mut now = 0u64;
    let mut rx = PacketBatch::new(64, 4400);
    let mut completions: [Vec<Wc>; 2] = [Vec::new(), Vec::new()];
    let total_expected = [wrs_per_side + sends[0].len(), wrs_per_side + sends[1].len()];
    let mut buf = [Wc::new(0, WcStatus::Success, WcOpcode::Send, Qpn::new(0)); 256];
    let mut iterations = 0u64;
    let trace = std::env::var("ROCE_TRACE").is_ok();
    loop {
        iterations += 1;
        assert!(
            now < 120_000_000_000,
            "{ctx}: no progress after 120 s of virtual time (deadlock?)"
        );
        assert!(iterations < 50_000_000, "{ctx}: livelock");
        let mut busy = false;
        for s in sides.iter_mut() {
            loop {
                let dev = &mut s.dev;
                let pushed =
                    s.tx.push_transmit_with(|slot| dev.poll_transmit(now, slot).datagram());
                if !pushed {
                    break;
                }
                if s.tx.is_full() {
                    break;
                }
            }
            if !s.tx.is_empty() {
                if trace {
                    for d in s.tx.iter() {
                        eprintln!("{now} {} tx {}", s.dev.addrs()[0], describe(d));
                    }
                }
                let n = s.net.send(now, &s.tx).unwrap();
                s.tx.drain_front(n);
                busy |= n > 0;
            }
        }
        for s in sides.iter_mut() {
            let n = s.net.recv(now, &mut rx).unwrap();
            for k in 0..n {
                if trace {
                    eprintln!("{now} {} rx {}", s.dev.addrs()[0], describe(rx.get(k)));
                }
                let info = rx.meta(k);
                s.dev.handle_datagram(now, rx.get(k), info);
            }
            busy |= n > 0;
            if s.dev.poll_timeout().is_some_and(|t| t <= now) {
                s.dev.handle_timeout(now);
                busy = true;
            }
        }
        for (i, s) in sides.iter_mut().enumerate() {
            let n = s
                .dev
                .poll_cq(s.cq, &mut buf)
                .unwrap_or_else(|_| panic!("{ctx}: CQ overflow"));
            completions[i].extend_from_slice(&buf[..n]);
        }
        if completions[0].len() >= total_expected[0] && completions[1].len() >= total_expected[1] {
            break;
        }
        for s in sides.iter() {
            if s.dev.qp(s.qp).unwrap().state() == QpState::Err {
                eprintln!(
                    "{ctx}\nA {:?}\nB {:?}",
                    sides[0].dev.qp_counters(sides[0].qp),
                    sides[1].dev.qp_counters(sides[1].qp)
                );
            }
            assert_ne!(
                s.dev.qp(s.qp).unwrap().state(),
                QpState::Err,
                "{ctx}: QP entered ERR; completions so far: {:?}",
                completions
                    .iter()
                    .map(|c| c
                        .iter()
                        .filter(|w| w.status != WcStatus::Success)
                        .take(3)
                        .copied()
                        .collect::<Vec<_>>())
                    .collect::<Vec<_>>()
            );
        }
        if !busy {
            let next = sides
                .iter()
                .flat_map(|s| [s.dev.poll_timeout(), s.net.poll_at()])
                .flatten()
                .min();
            match next {
                Some(t) if t > now => now = t,
                Some(_) => now += 1,
                None => panic!(
                    "{ctx}: idle with {} + {} completions of {:?}",
                    completions[0].len(),
                    completions[1].len(),
                    total_expected
                ),
            }
        }
    }
    // Exactly once, all successful.
    for i in 0..2 {
        let mut seen = BTreeMap::new();
        for c in &completions[i] {
            assert_eq!(c.status, WcStatus::Success, "{ctx}: side {i} {c:?}");
            *seen.entry(c.wr_id).or_insert(0) += 1;
        }
        assert!(
            seen.values().all(|&n| n == 1),
            "{ctx}: a WR completed twice"
        );
        assert_eq!(seen.len(), total_expected[i], "{ctx}: completions missing");
    }
    // Data.
    for i in 0..2 {
        let peer = 1 - i;
        let mut cas_origs = Vec::new();
        for (id, e) in &expects[i] {
            match e {
                Expect::Send => {}
                Expect::Write { peer_off, data } => {
                    assert_eq!(
                        &read(&sides[peer], *peer_off, data.len(), peer),
                        data,
                        "{ctx}: WRITE {id:#x}"
                    )
                }
                Expect::Read { local_off, data } => {
                    assert_eq!(
                        &read(&sides[i], *local_off, data.len(), i),
                        data,
                        "{ctx}: READ {id:#x}"
                    )
                }
                Expect::FetchAdd { .. } => {}
                Expect::CompareSwap {
                    local_off,
                    want_orig,
                } => {
                    let got =
                        u64::from_ne_bytes(read(&sides[i], *local_off, 8, i).try_into().unwrap());
                    assert_eq!(got, *want_orig, "{ctx}: CAS {id:#x} original");
                    cas_origs.push(got);
                }
            }
        }
        // FETCH_ADD ran exactly once each: the counter is exact and the
        // originals returned are the running sums in posting order.
        let counter = u64::from_ne_bytes(read(&sides[peer], COUNTER, 8, peer).try_into().unwrap());
        assert_eq!(
            counter,
            1000 + adds[peer],
            "{ctx}: FETCH_ADD counter at side {peer}"
        );
        let mut running = 1000;
        for e in expects[i].values() {
            if let Expect::FetchAdd { local_off, add } = e {
                let got = u64::from_ne_bytes(read(&sides[i], *local_off, 8, i).try_into().unwrap());
                assert_eq!(got, running, "{ctx}: FETCH_ADD original");
                running += add;
            }
        }
        let cas_final =
            u64::from_ne_bytes(read(&sides[peer], CAS_WORD, 8, peer).try_into().unwrap());
        assert_eq!(cas_final, cas_origs.len() as u64, "{ctx}: CAS chain");
        // Received SENDs, in order, byte for byte.
        let recvs: Vec<&Wc> = completions[i]
            .iter()
            .filter(|c| c.opcode == WcOpcode::Recv)
            .collect();
        assert_eq!(recvs.len(), sends[i].len(), "{ctx}");
        for (c, (off, data)) in recvs.iter().zip(&sends[i]) {
            assert_eq!(c.byte_len as usize, data.len(), "{ctx}");
            assert_eq!(
                &read(&sides[i], *off, data.len(), i),
                data,
                "{ctx}: SEND data"
            );
        }
    }
}

/// One line about a datagram, for ROCE_TRACE.
fn describe(d: &[u8]) -> String {
    match roce_wire::RocePacket::parse_ip(d) {
        Ok(p) => {
            let aeth = p
                .ext
                .aeth
                .map(|a| format!(" {}", a.syndrome))
                .unwrap_or_default();
            format!(
                "{} psn={:#x} len={}{aeth}",
                p.bth.opcode,
                p.bth.psn.value(),
                p.payload.len()
            )
        }
        Err(e) => format!("unparsable: {e}"),
    }
}

fn seeds() -> Vec<u64> {
    match std::env::var("ROCE_FAULT_SEED") {
        Ok(s) => vec![s.parse().expect("ROCE_FAULT_SEED is a number")],
        Err(_) => vec![1, 2],
    }
}

const CLEAN: Faults = Faults {
    loss: 0.0,
    dup: 0.0,
    reorder: 0.0,
    corrupt: 0.0,
    jitter_ns: 0,
    retry_cnt: 7,
};

#[test]
fn no_faults() {
    for seed in seeds() {
        run_case(seed, CLEAN, 200);
    }
}

#[test]
fn loss_1_percent() {
    for seed in seeds() {
        run_case(
            seed,
            Faults {
                loss: 0.01,
                ..CLEAN
            },
            200,
        );
    }
}

#[test]
fn loss_5_percent() {
    for seed in seeds() {
        run_case(
            seed,
            Faults {
                loss: 0.05,
                ..CLEAN
            },
            200,
        );
    }
}

#[test]
fn loss_20_percent() {
    for seed in seeds() {
        run_case(
            seed,
            Faults {
                loss: 0.20,
                ..CLEAN
            },
            100,
        );
    }
}

#[test]
fn duplication() {
    for seed in seeds() {
        run_case(seed, Faults { dup: 0.10, ..CLEAN }, 200);
    }
}

#[test]
fn reordering_and_jitter() {
    for seed in seeds() {
        run_case(
            seed,
            Faults {
                reorder: 0.10,
                jitter_ns: 5_000,
                ..CLEAN
            },
            200,
        );
    }
}

#[test]
fn corruption_is_dropped_by_the_icrc_and_recovered() {
    for seed in seeds() {
        run_case(
            seed,
            Faults {
                corrupt: 0.05,
                ..CLEAN
            },
            200,
        );
    }
}

#[test]
fn everything_at_once() {
    for seed in seeds() {
        run_case(
            seed,
            Faults {
                loss: 0.03,
                dup: 0.03,
                reorder: 0.05,
                corrupt: 0.02,
                jitter_ns: 3_000,
                retry_cnt: 7,
            },
            200,
        );
    }
}

#[test]
fn loss_5_percent_with_a_finite_retry_budget() {
    for seed in seeds() {
        run_case(
            seed,
            Faults {
                loss: 0.05,
                retry_cnt: 6,
                ..CLEAN
            },
            200,
        );
    }
}
