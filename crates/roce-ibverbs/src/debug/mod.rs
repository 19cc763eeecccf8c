//! `roce exec --pcap/--faults/--stats/--trace` in the library
//! (docs/debugging.md): `ROCE_PCAP`, `ROCE_FAULTS`, `ROCE_STATS` and
//! `ROCE_STATS_JSON`, and `ROCE_TRACE` (`crate::trace`, read at the first call
//! rather than the first open, so that it sees `ibv_get_device_list`).
//!
//! Unlike the other settings (`config`), these are read once per process,
//! when its first engine opens: one capture file, one fault plan (whose
//! Nth datagram and time windows are the process's) and one summary per
//! process. That is the state kept here, process-wide, beside the
//! engines: [`Debug`]. A setting that does not parse is reported once on
//! stderr and the program runs without that aid (never a failed open).
//! What it gathers is flushed and said by an `atexit` handler.

use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::{Mutex, OnceLock};

use roce_io::{
    self, Backend, FaultAction, FaultInjector, FaultLog, FaultPlan, Injection, PcapTap, QpIndex,
    SharedPcap, TargetedFaults,
};
use roce_verbs::OpenOptions;

use crate::config::say;

mod stats;
mod top;

pub(crate) use stats::{count_status, cq_destroyed, qp_destroyed, StatusCounts};

/// A live context as the summary at exit and `roce top` see it: the
/// engine handles of its QPs and its CQs' counts. The debugging aids
/// know no object of the library; [`Walk`] hands them these.
pub(crate) struct Seen<'a> {
    /// The context's engine (its backend's counters).
    pub(crate) verbs: &'a roce_verbs::Context,
    /// The device's name and the context's address.
    pub(crate) device: &'a str,
    pub(crate) local: IpAddr,
    /// Tells the contexts apart from one snapshot to the next.
    pub(crate) key: usize,
    pub(crate) qps: Vec<&'a roce_verbs::QueuePair>,
    /// Each CQ's engine id and completions by status.
    pub(crate) cqs: Vec<(u32, &'a StatusCounts)>,
}

/// Calls its argument with each live context (`crate::open::seen`,
/// given at the first open: the module that knows the objects).
pub(crate) type Walk = fn(&mut dyn FnMut(&Seen<'_>));

static WALK: OnceLock<Walk> = OnceLock::new();

/// Sets how the debugging aids find the live contexts (once per process).
pub(crate) fn watch(walk: Walk) {
    let _ = WALK.set(walk);
}

/// Calls `f` with each live context, once [`watch`] has been given a walk.
fn each_seen(mut f: impl FnMut(&Seen<'_>)) {
    if let Some(w) = WALK.get() {
        w(&mut f);
    }
}

/// Where the summary goes.
enum StatsOut {
    Stderr,
    File(PathBuf),
}

/// The debugging aids of this process.
pub(crate) struct Debug {
    /// The engines' clock at the start (the first open): fault windows
    /// count from it.
    start: u64,
    pcap: Option<(PathBuf, SharedPcap)>,
    faults: Option<(FaultPlan, FaultLog)>,
    qps: QpIndex,
    stats: Option<(StatsOut, bool)>,
    /// The summary of objects already destroyed.
    done: Mutex<stats::Done>,
    /// The process that read the settings.
    pid: u32,
    /// What `roce top` reads of this process (`ROCE_TOP`).
    top: Option<top::Top>,
}

static DEBUG: OnceLock<Debug> = OnceLock::new();

/// Live lines for the first injections of each rule.
fn live_line(i: &Injection, r: &roce_io::FaultRule) {
    say(format_args!(
        "fault: {} at {:.3} ms: {} {} opcode {:#04x} to QP {:#08x} PSN {:#08x} [{}]",
        i.action.name(),
        i.at as f64 / 1e6,
        if i.tx { "sent" } else { "received" },
        i.opcode_name(),
        i.opcode,
        i.dest_qpn,
        i.psn,
        r.describe()
    ));
}

impl Debug {
    fn from_env() -> Debug {
        let var = |k: &str| std::env::var(k).ok().filter(|v| !v.trim().is_empty());
        let pcap = var("ROCE_PCAP").and_then(|v| {
            let path = crate::config::file_name(v.trim());
            match SharedPcap::create(&path) {
                Ok(f) => Some((path, f)),
                Err(e) => {
                    say(format_args!(
                        "ROCE_PCAP={v}: cannot create {}: {e}; no capture",
                        path.display()
                    ));
                    None
                }
            }
        });
        let faults = var("ROCE_FAULTS").and_then(|v| match FaultPlan::parse(&v) {
            Ok(plan) => {
                let sink: roce_io::InjectionSink = Box::new(live_line);
                let log = FaultLog::new(plan.rules.clone(), Some(sink));
                Some((plan, log))
            }
            Err(e) => {
                say(format_args!("ROCE_FAULTS={v}: {e}; running without faults"));
                None
            }
        });
        let stats = var("ROCE_STATS").map(|v| {
            let out = match v.trim() {
                "1" | "-" | "stderr" => StatsOut::Stderr,
                f => StatsOut::File(crate::config::file_name(f)),
            };
            (
                out,
                std::env::var("ROCE_STATS_JSON").is_ok_and(|j| j != "0"),
            )
        });
        Debug {
            start: roce_verbs::clock_nanos(),
            pcap,
            faults,
            qps: QpIndex::new(),
            stats,
            done: Mutex::new(stats::Done::default()),
            pid: std::process::id(),
            top: top::Top::start(),
        }
    }

    fn active(&self) -> bool {
        self.pcap.is_some() || self.faults.is_some() || self.stats.is_some() || self.top.is_some()
    }
}

/// Registered with `atexit`: the capture flushed, the summaries said;
/// panics are caught here (as `cm/exit.rs` does). A child made by
/// `fork()` does nothing: the file and the objects are its parent's.
extern "C" fn at_exit() {
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        if let Some(d) = DEBUG.get().filter(|d| d.pid == std::process::id()) {
            finish(d);
        }
    }));
}

/// The aids of this process, read from the environment the first time.
pub(crate) fn get() -> &'static Debug {
    DEBUG.get_or_init(|| {
        let d = Debug::from_env();
        if d.active() {
            // SAFETY: registers a handler with no arguments that only reads
            // this process's state (the C library calls it at exit).
            unsafe { libc::atexit(at_exit) };
        }
        d
    })
}

/// Gives an engine about to open the capture and fault middleware and
/// the RNR windows of the plan.
pub(crate) fn setup(mut o: OpenOptions) -> OpenOptions {
    let d = get();
    if d.pcap.is_none() && d.faults.is_none() {
        return o;
    }
    if let Some((plan, _)) = &d.faults {
        // The first window only: the engine keeps one.
        if let Some((from, until)) = plan.rnr_windows().next() {
            o.config.force_rnr = Some((d.start + from, d.start + until));
        }
    }
    let pcap = d.pcap.as_ref().map(|(_, f)| f.clone());
    let faults = d.faults.as_ref().map(|(p, l)| (p.seeded, l.clone()));
    let (qps, start) = (d.qps.clone(), d.start);
    o.wrap(Box::new(move |mut b: Box<dyn Backend + Send>| {
        // Innermost the capture, so that it holds what went on the wire
        // and what came from it (before receive-side faults).
        if let Some(f) = &pcap {
            b = Box::new(PcapTap::shared(b, f).with_time_offset(unix_offset()));
        }
        if let Some((seeded, log)) = faults {
            if let Some(c) = seeded {
                b = Box::new(FaultInjector::new(b, c));
            }
            if !log.rules().iter().all(|r| r.action == FaultAction::Rnr) {
                b = Box::new(TargetedFaults::new(b, log, qps, start));
            }
        }
        Ok(b)
    }))
}

/// Wall-clock nanoseconds at the engines' clock's zero, for the capture's
/// timestamps.
fn unix_offset() -> u64 {
    let unix = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    unix.saturating_sub(roce_verbs::clock_nanos())
}

/// A QP was created (for `qp=#N`).
pub(crate) fn qp_created(qpn: u32) {
    if let Some(d) = DEBUG.get().filter(|d| d.faults.is_some()) {
        d.qps.created(qpn);
    }
}

/// A QP was given its peer.
pub(crate) fn qp_connected(qpn: u32, remote: u32) {
    if let Some(d) = DEBUG.get().filter(|d| d.faults.is_some()) {
        d.qps.connected(qpn, remote);
    }
}

/// An engine closed: the capture so far goes to the file, its
/// middleware counters are kept for the summary.
pub(crate) fn engine_closed(counters: Vec<(&'static str, u64)>) {
    if let Some((_, f)) = DEBUG.get().and_then(|d| d.pcap.as_ref()) {
        let _ = f.flush();
    }
    stats::engine_counters(counters);
}

/// At exit: the capture flushed, the faults and the counters said,
/// `roce top`'s file removed.
fn finish(d: &Debug) {
    if let Some(t) = &d.top {
        t.stop();
    }
    if let Some((path, f)) = &d.pcap {
        let r = f.flush();
        let s = f.stats();
        crate::config::log!(
            "capture {}: {} datagrams{}",
            path.display(),
            s.written,
            r.err()
                .map(|e| format!(" (error: {e})"))
                .unwrap_or_default()
        );
    }
    if let Some((plan, log)) = &d.faults {
        let counts = log.counts();
        let mut parts: Vec<String> = plan
            .rules
            .iter()
            .zip(&counts)
            .map(|(r, n)| {
                if r.action == FaultAction::Rnr {
                    format!("[{}]: the engine's window", r.describe())
                } else {
                    format!("[{}]: {n} datagrams", r.describe())
                }
            })
            .collect();
        if let Some(c) = plan.seeded {
            parts.push(format!(
                "seeded (seed {}): {}",
                c.seed,
                stats::seeded_summary()
            ));
        }
        say(format_args!("faults injected: {}", parts.join("; ")));
    }
    if let Some((out, json)) = &d.stats {
        let text = stats::summary(d, *json);
        match out {
            StatsOut::Stderr => {
                use std::io::Write;
                let _ = std::io::stderr().lock().write_all(text.as_bytes());
            }
            StatsOut::File(p) => {
                if let Err(e) = std::fs::write(p, &text) {
                    say(format_args!(
                        "ROCE_STATS: cannot write {}: {e}",
                        p.display()
                    ));
                }
            }
        }
    }
}
