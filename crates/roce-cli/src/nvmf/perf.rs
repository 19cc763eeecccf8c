//! `roce nvmf perf`: an I/O generator in the manner of fio or
//! spdk_nvme_perf over `roce_nvmf`'s host driver: reads or writes of
//! `--bs` bytes, sequential or random, `--qd` in flight on each of
//! `--queues` I/O queues, for `--time` seconds (or `--ios` I/Os); a
//! progress line per second on stderr, then IOPS, MiB/s and latency
//! percentiles (or a JSON object).
//!
//! `--verify` checks the data, as fio's `verify` does: writes carry the
//! pattern of [`super::verify`] (each block its LBA and `--verify-seed`),
//! and are read back and checked once the timed phase ends; reads are
//! checked as they complete (a write pass with the same seed first).
//! Each block that differs is counted, the first few reported with their
//! LBA, and the command fails.

use std::borrow::Cow;
use std::net::IpAddr;
use std::time::{Duration, Instant};

use clap::{Args, ValueEnum};
use roce_nvmf::driver::{connect, Host, HostOptions, IoDone};
use roce_nvmf::wire::Nsid;

use super::error::NvmfError;
use super::verify::{Mismatch, Pattern};
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
    /// Stop after this many I/Os, or at --time, whichever comes first (0:
    /// --time alone).
    #[arg(long, default_value_t = 0)]
    ios: u64,
    /// Verify the data: writes carry a pattern of their LBA and
    /// --verify-seed and are read back and checked after the run; reads
    /// are checked against it. A block that differs fails the command.
    #[arg(long)]
    verify: bool,
    /// The generation of the verified pattern: a read pass checks what a
    /// write pass with the same seed left.
    #[arg(long, default_value_t = 1)]
    verify_seed: u64,
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
    /// UDP port of the RoCE traffic.
    #[arg(long, default_value_t = 4791)]
    roce_port: u16,
}

/// Mismatches reported one by one on stderr; the rest are only counted.
const MISMATCHES_SHOWN: usize = 10;

/// Latency percentile `p` (0..=100) of sorted samples, in microseconds.
fn pct(sorted: &[u32], p: f64) -> u32 {
    if sorted.is_empty() {
        return 0;
    }
    let i = ((p / 100.0) * (sorted.len() - 1) as f64).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// What a phase of I/O needs besides its source of LBAs.
struct Io<'a> {
    host: &'a mut Host,
    bsz: u32,
    nlb: u64,
    in_capsule: bool,
    /// Commands in flight at most.
    qd: usize,
    /// The pattern of a verified run.
    pattern: Option<Pattern>,
}

/// What came back from the commands of a phase.
#[derive(Default)]
struct Tally {
    ios: u64,
    errors: u64,
    lat: Vec<u32>,
    /// Blocks read back and checked.
    checked: u64,
    mismatches: u64,
    shown: Vec<Mismatch>,
}

impl Io<'_> {
    /// Keeps up to `qd` commands in flight, each at the next LBA `next`
    /// gives, until it gives none, `end` (if any) passes or `stop` is requested;
    /// then waits up to 10 s for those in flight. Reads are checked against the
    /// pattern when there is one; `progress` prints a line a second.
    fn run(
        &mut self,
        write: bool,
        next: &mut dyn FnMut() -> Option<u64>,
        end: Option<Instant>,
        stop: &Stop,
        progress: bool,
    ) -> Result<Tally, NvmfError> {
        let start = Instant::now();
        let mut t = Tally::default();
        let mut started: Vec<Option<(Instant, u64)>> = vec![None; self.qd];
        let mut done: Vec<IoDone> = Vec::new();
        let mut next_report = start + Duration::from_secs(1);
        let (mut last_ios, mut dry) = (0u64, false);
        let mut stopped: Option<Instant> = None;
        let fixed: Vec<u8> = (0..(self.nlb * self.bsz as u64) as usize)
            .map(|i| (i * 37 + 11) as u8)
            .collect();
        loop {
            let running = !dry && end.is_none_or(|e| Instant::now() < e) && !stop.requested();
            if running {
                for (slot, s) in started.iter_mut().enumerate() {
                    if s.is_some() {
                        continue;
                    }
                    let Some(lba) = next() else {
                        dry = true;
                        break;
                    };
                    let r = if write {
                        let data = match self.pattern {
                            Some(p) => Cow::Owned(p.data(lba, self.nlb)),
                            None => Cow::Borrowed(fixed.as_slice()),
                        };
                        self.host.submit_write(
                            Nsid(1),
                            lba,
                            &data,
                            self.bsz,
                            self.in_capsule,
                            slot as u64,
                        )
                    } else {
                        self.host
                            .submit_read(Nsid(1), lba, self.nlb as u16, self.bsz, slot as u64)
                    };
                    r?;
                    *s = Some((Instant::now(), lba));
                }
            } else if started.iter().all(Option::is_none) {
                break;
            }
            done.clear();
            self.host.poll_io(&mut done, Duration::from_millis(10))?;
            let now = Instant::now();
            for d in &done {
                let Some((s, lba)) = started.get_mut(d.tag as usize).and_then(Option::take) else {
                    continue;
                };
                t.lat
                    .push(now.duration_since(s).as_micros().min(u32::MAX as u128) as u32);
                t.ios += 1;
                if !d.status.is_success() {
                    t.errors += 1;
                }
                if let (Some(p), Some(data)) = (self.pattern, &d.data) {
                    let mut bad = Vec::new();
                    t.checked += p.check(lba, data, &mut bad);
                    t.mismatches += bad.len() as u64;
                    let room = MISMATCHES_SHOWN.saturating_sub(t.shown.len());
                    t.shown.extend(bad.into_iter().take(room));
                }
            }
            if progress && now >= next_report {
                eprint!(
                    "\r{:>6.1} s  {:>10} IOPS",
                    now.duration_since(start).as_secs_f64(),
                    t.ios - last_ios
                );
                last_ios = t.ios;
                next_report += Duration::from_secs(1);
            }
            // What is in flight when submission stops (its time ran out,
            // its I/Os or slots did, or Ctrl-C) has 10 s to complete.
            if !running {
                let since = *stopped.get_or_insert(now);
                if now > since + Duration::from_secs(10) {
                    return Err(NvmfError::StillInFlight);
                }
            }
        }
        Ok(t)
    }
}

/// Runs the generator.
pub(crate) fn run(a: &PerfArgs, stop: &Stop) -> Result<(), NvmfError> {
    let ctx = super::open(a.bind, a.roce_port)?;
    let mut o = HostOptions::new(&a.nqn, &a.hostnqn);
    o.queue_depth = a.qd.max(2);
    o.io_queues = a.queues;
    let mut host = connect(&ctx, a.addr, a.port, &o)?;
    let ns = host.identify_namespace(Nsid(1))?;
    let bsz = 1u32 << ns.lbaf0_lbads;
    if a.bs == 0 || !a.bs.is_multiple_of(bsz) {
        return Err(NvmfError::BsNotMultiple {
            bs: a.bs,
            block: bsz,
        });
    }
    if host.max_transfer().is_some_and(|m| a.bs as usize > m) {
        let m = host.max_transfer().unwrap_or(0);
        return Err(NvmfError::BsAboveMdts { bs: a.bs, max: m });
    }
    let nlb = (a.bs / bsz) as u64;
    let slots = ns.nsze / nlb;
    if slots == 0 {
        return Err(NvmfError::NamespaceTooSmall);
    }
    // Slot `s` goes to queue `s % queues`: qd slots per queue.
    let queues = host.io_queues().max(1);
    let qd = (a.qd as usize * queues).min(host.io_depth());
    let write = matches!(a.rw, Rw::Write | Rw::Randwrite);
    let random = matches!(a.rw, Rw::Randread | Rw::Randwrite);
    let pattern = a.verify.then(|| Pattern::new(a.verify_seed, bsz));
    // The slots a verified write touched, to read back afterwards.
    let mut written = vec![false; if a.verify && write { slots as usize } else { 0 }];
    let mut x: u64 = 0x2545_F491_4F6C_DD1D;
    let (mut next_seq, mut issued) = (0u64, 0u64);
    let mut pick = || {
        if a.ios > 0 && issued >= a.ios {
            return None;
        }
        issued += 1;
        let s = if random {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % slots
        } else {
            let s = next_seq % slots;
            next_seq += 1;
            s
        };
        if let Some(w) = written.get_mut(s as usize) {
            *w = true;
        }
        Some(s * nlb)
    };
    let mut io = Io {
        host: &mut host,
        bsz,
        nlb,
        in_capsule: a.in_capsule,
        qd,
        pattern,
    };
    let start = Instant::now();
    let end = start + Duration::from_secs_f64(a.time.max(0.001));
    let mut t = io.run(write, &mut pick, Some(end), stop, !a.json)?;
    let secs = start.elapsed().as_secs_f64();
    // The verify phase of a verified write: every slot written, read back
    // in order (not counted in the figures above).
    if a.verify && write && !stop.requested() {
        let mut slot = written
            .iter()
            .enumerate()
            .filter(|(_, w)| **w)
            .map(|(s, _)| s as u64 * nlb);
        // No time limit: the phase submits until every slot is read.
        let v = io.run(false, &mut || slot.next(), None, stop, false)?;
        t.errors += v.errors;
        t.checked = v.checked;
        t.mismatches = v.mismatches;
        t.shown = v.shown;
    }
    host.disconnect()?;
    let Tally {
        ios,
        errors,
        mut lat,
        checked,
        mismatches,
        shown,
    } = t;
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
    if !a.json {
        eprintln!();
    }
    for m in &shown {
        eprintln!("verify: {m}");
    }
    if mismatches > shown.len() as u64 {
        eprintln!(
            "verify: {} more blocks differ",
            mismatches - shown.len() as u64
        );
    }
    if a.json {
        let v = serde_json::json!({
            "rw": format!("{:?}", a.rw).to_lowercase(), "bs": a.bs, "qd": a.qd, "queues": queues, "seconds": secs,
            "ios": ios, "errors": errors, "iops": iops, "mib_per_s": mib,
            "lat_us": {"avg": avg, "p50": p50, "p99": p99, "p99_9": p999, "max": max},
            "verify": {"enabled": a.verify, "seed": a.verify_seed, "blocks_checked": checked,
                       "mismatches": mismatches,
                       "first": shown.iter().map(|m| m.lba).collect::<Vec<_>>()},
        });
        println!("{v}");
    } else {
        println!(
            "{:?} bs={} qd={} queues={queues}: {ios} I/Os in {secs:.2} s, {iops:.0} IOPS, {mib:.1} MiB/s, {errors} errors",
            a.rw, a.bs, a.qd
        );
        println!("latency (us): avg {avg:.1}, p50 {p50}, p99 {p99}, p99.9 {p999}, max {max}");
        if a.verify {
            println!(
                "verify (seed {}): {checked} blocks checked, {mismatches} differ",
                a.verify_seed
            );
        }
    }
    if errors > 0 {
        return Err(NvmfError::CommandsFailed(errors));
    }
    if mismatches > 0 {
        return Err(NvmfError::VerifyFailed(mismatches));
    }
    Ok(())
}
