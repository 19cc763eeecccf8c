//! `roce nvmf perf`: an I/O generator in the manner of fio or
//! spdk_nvme_perf over `roce_nvmf`'s host driver: reads or writes of
//! `--bs` bytes, sequential or random, `--qd` in flight on each of
//! `--queues` I/O queues, for `--time` seconds; a progress line per
//! second on stderr, then IOPS, MiB/s and latency percentiles (or a JSON
//! object).

use std::net::IpAddr;
use std::time::{Duration, Instant};

use clap::{Args, ValueEnum};
use roce_nvmf::driver::{connect, HostOptions, IoDone};
use roce_nvmf::wire::Nsid;

use crate::stop::Stop;

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Rw {
    Read,
    Write,
    Randread,
    Randwrite,
}

/// `roce nvmf perf` flags.
#[derive(Args, Debug)]
pub(crate) struct PerfArgs {
    /// The target's address.
    addr: IpAddr,
    /// Local address of the RoCE device.
    #[arg(long, default_value = "127.0.0.2")]
    bind: IpAddr,
    /// RDMA CM port.
    #[arg(long, default_value_t = 4420)]
    port: u16,
    /// Subsystem NQN.
    #[arg(long, default_value = "nqn.2026-01.org.roce:nvmf")]
    nqn: String,
    /// This host's NQN.
    #[arg(long, default_value = "nqn.2026-01.org.roce:host")]
    hostnqn: String,
    /// Pattern.
    #[arg(long, value_enum, default_value_t = Rw::Randread)]
    rw: Rw,
    /// I/O size in bytes (a multiple of the block size).
    #[arg(long, default_value_t = 4096)]
    bs: u32,
    /// Commands in flight per I/O queue (at most its depth).
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u16).range(1..=128))]
    qd: u16,
    /// I/O queues (the controller may grant fewer).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=64))]
    queues: u16,
    /// Seconds to run.
    #[arg(long, default_value_t = 5.0)]
    time: f64,
    /// Writes carry their data in the command capsule when it fits.
    #[arg(long)]
    in_capsule: bool,
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
    /// UDP port of the RoCE traffic.
    #[arg(long, default_value_t = 4791)]
    roce_port: u16,
}

/// Latency percentile `p` (0..=100) of sorted samples, in microseconds.
fn pct(sorted: &[u32], p: f64) -> u32 {
    if sorted.is_empty() {
        return 0;
    }
    let i = ((p / 100.0) * (sorted.len() - 1) as f64).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// Runs the generator.
pub(crate) fn run(a: &PerfArgs, stop: &Stop) -> Result<(), String> {
    let ctx = super::open(a.bind, a.roce_port)?;
    let mut o = HostOptions::new(&a.nqn, &a.hostnqn);
    o.queue_depth = a.qd.max(2);
    o.io_queues = a.queues;
    let mut host = connect(&ctx, a.addr, a.port, &o).map_err(|e| e.to_string())?;
    let ns = host
        .identify_namespace(Nsid(1))
        .map_err(|e| e.to_string())?;
    let bsz = 1u32 << ns.lbaf0_lbads;
    if a.bs == 0 || !a.bs.is_multiple_of(bsz) {
        return Err(format!(
            "--bs {} is not a multiple of the block size {bsz}",
            a.bs
        ));
    }
    if host.max_transfer().is_some_and(|m| a.bs as usize > m) {
        let m = host.max_transfer().unwrap_or(0);
        return Err(format!(
            "--bs {} is larger than the controller's largest transfer ({m} bytes)",
            a.bs
        ));
    }
    let nlb = (a.bs / bsz) as u64;
    let slots = ns.nsze / nlb;
    if slots == 0 {
        return Err("the namespace is smaller than one I/O".into());
    }
    // Slot `s` goes to queue `s % queues`: qd slots per queue.
    let queues = host.io_queues().max(1);
    let qd = (a.qd as usize * queues).min(host.io_depth());
    let write = matches!(a.rw, Rw::Write | Rw::Randwrite);
    let random = matches!(a.rw, Rw::Randread | Rw::Randwrite);
    let payload: Vec<u8> = (0..a.bs as usize).map(|i| (i * 37 + 11) as u8).collect();
    let mut x: u64 = 0x2545_F491_4F6C_DD1D;
    let mut next_seq = 0u64;
    let mut pick = || {
        if random {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x % slots) * nlb
        } else {
            let l = (next_seq % slots) * nlb;
            next_seq += 1;
            l
        }
    };
    let start = Instant::now();
    let end = start + Duration::from_secs_f64(a.time.max(0.001));
    let mut started: Vec<Option<Instant>> = vec![None; qd];
    let mut lat: Vec<u32> = Vec::new();
    let (mut ios, mut errors) = (0u64, 0u64);
    let mut done: Vec<IoDone> = Vec::new();
    let mut next_report = start + Duration::from_secs(1);
    let mut last_ios = 0u64;
    loop {
        let now = Instant::now();
        let running = now < end && !stop.requested();
        if running {
            for (slot, s) in started.iter_mut().enumerate() {
                if s.is_some() {
                    continue;
                }
                let lba = pick();
                let r = if write {
                    host.submit_write(Nsid(1), lba, &payload, bsz, a.in_capsule, slot as u64)
                } else {
                    host.submit_read(Nsid(1), lba, nlb as u16, bsz, slot as u64)
                };
                r.map_err(|e| e.to_string())?;
                *s = Some(Instant::now());
            }
        } else if started.iter().all(Option::is_none) {
            break;
        }
        done.clear();
        host.poll_io(&mut done, Duration::from_millis(10))
            .map_err(|e| e.to_string())?;
        let t = Instant::now();
        for d in &done {
            if let Some(s) = started.get_mut(d.tag as usize).and_then(Option::take) {
                lat.push(t.duration_since(s).as_micros().min(u32::MAX as u128) as u32);
            }
            ios += 1;
            if !d.status.is_success() {
                errors += 1;
            }
        }
        if t >= next_report && !a.json {
            eprint!(
                "\r{:>6.1} s  {:>10} IOPS",
                t.duration_since(start).as_secs_f64(),
                ios - last_ios
            );
            last_ios = ios;
            next_report += Duration::from_secs(1);
        }
        if !running && t > end + Duration::from_secs(10) {
            return Err("commands still in flight 10 s after the end".into());
        }
    }
    let secs = start.elapsed().as_secs_f64();
    host.disconnect().map_err(|e| e.to_string())?;
    lat.sort_unstable();
    let iops = ios as f64 / secs;
    let mib = iops * a.bs as f64 / (1 << 20) as f64;
    let avg = if lat.is_empty() {
        0.0
    } else {
        lat.iter().map(|&v| v as f64).sum::<f64>() / lat.len() as f64
    };
    let (p50, p99, p999, max) = (
        pct(&lat, 50.0),
        pct(&lat, 99.0),
        pct(&lat, 99.9),
        lat.last().copied().unwrap_or(0),
    );
    if a.json {
        let v = serde_json::json!({
            "rw": format!("{:?}", a.rw).to_lowercase(), "bs": a.bs, "qd": a.qd, "queues": queues, "seconds": secs,
            "ios": ios, "errors": errors, "iops": iops, "mib_per_s": mib,
            "lat_us": {"avg": avg, "p50": p50, "p99": p99, "p99_9": p999, "max": max},
        });
        println!("{v}");
    } else {
        eprintln!();
        println!(
            "{:?} bs={} qd={} queues={queues}: {ios} I/Os in {secs:.2} s, {iops:.0} IOPS, {mib:.1} MiB/s, {errors} errors",
            a.rw, a.bs, a.qd
        );
        println!("latency (us): avg {avg:.1}, p50 {p50}, p99 {p99}, p99.9 {p999}, max {max}");
    }
    if errors > 0 {
        return Err(format!("{errors} commands failed"));
    }
    Ok(())
}
