//! Scenarios in TOML: topology, DCB settings as operators write them,
//! buffer and ECN thresholds, watchdog, workloads, duration and seed.
//!
//! ```toml
//! name = "incast"
//! seed = 1
//! duration = "2ms"
//!
//! [topology]
//! kind = "star"          # star | dumbbell | leaf-spine | fat-tree | hpcc | ring
//! hosts = 9
//! rate = "40G"
//! delay = "1us"
//!
//! [dcb]
//! pfc = "prio-pfc all:off 3:on"
//! ets = "prio-tc 3:3 6:6 tc-tsa all:strict 0:ets 3:ets tc-bw 0:50 3:50"
//! app = "dscp-prio 26:3 48:6"
//!
//! [buffer]
//! size = "12MB"
//! xoff = "dynamic"       # or "static" with xoff_bytes
//! alpha = 0.125
//!
//! [ecn]
//! tc3 = { kmin = "5KB", kmax = "200KB", pmax = 0.01 }
//!
//! [cc]                   # congestion control of every NIC (ECT(0) data)
//! algorithm = "dcqcn-mlx5"   # dcqcn (paper) | dcqcn-mlx5 | none
//! rpg_ai_rate = 5            # mlx5 roce_rp names and units (Mb/s, µs, …)
//! min_time_between_cnps = 4  # roce_np: µs (or "4us"); cnp_dscp = 48
//!
//! [[workload]]
//! kind = "incast"
//! count = 8
//! receiver = 0
//! size = "1MB"
//! ```
//!
//! Units: sizes in B/KB/MB/GB (decimal) or KiB/MiB/GiB, or a bare integer
//! of bytes; rates in bps/K/M/G/T (`40G`, `100Gbps`); times in
//! ps/ns/us/ms/s. Unknown keys are errors that name the key.

use std::fmt;
use std::path::Path;

use roce_core::CcAlgorithm;
use roce_wire::Ecn;

use crate::config::{
    BufferConfig, EcnTc, FabricConfig, Headroom, HostConfig, MetricsConfig, WatchdogConfig, Xoff,
};
use crate::metrics::Results;
use crate::sim::Simulation;
use crate::time::{Ps, MS};
use crate::topology::Topology;
use crate::workload::{self, Cdf, FlowSpec};

mod raw;
mod units;

use raw::{cc_config, Raw, RawBuffer, RawTopo, RawWorkload};
use units::{bytes, rate, time, Q};

/// Why a scenario was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Error {
    /// TOML syntax, a type mismatch or an unknown key (the message names
    /// it and its position).
    Toml(String),
    /// A value that parsed but makes no sense.
    Invalid {
        /// The key, dotted (`dcb.pfc`, `workload[1].load`).
        key: String,
        /// What is wrong.
        msg: String,
    },
    /// A file could not be read.
    Io(String),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Toml(m) => write!(f, "scenario: {m}"),
            Error::Invalid { key, msg } => write!(f, "scenario: `{key}`: {msg}"),
            Error::Io(m) => write!(f, "scenario: {m}"),
        }
    }
}

impl std::error::Error for Error {}

fn invalid(key: impl Into<String>, msg: impl Into<String>) -> Error {
    Error::Invalid {
        key: key.into(),
        msg: msg.into(),
    }
}

/// A workload of a scenario.
#[derive(Clone, Debug, PartialEq)]
pub enum Workload {
    /// Poisson arrivals at `load` of the host link rate, all-to-all random
    /// pairs among the first `hosts` hosts.
    Poisson {
        /// Flow sizes.
        cdf: Cdf,
        /// Fraction of host link capacity.
        load: f64,
        /// Host link rate the load refers to.
        host_bps: u64,
        /// Hosts taking part.
        hosts: u32,
        /// First arrival no earlier than this.
        start: Ps,
        /// No arrival at or after this (None: the scenario's duration).
        stop: Option<Ps>,
        /// DSCP.
        dscp: u8,
    },
    /// Explicit flows (incasts and single flows).
    Flows(Vec<FlowSpec>),
}

/// A parsed, validated scenario.
#[derive(Clone, Debug, PartialEq)]
pub struct Scenario {
    /// Name.
    pub name: String,
    /// Seed of every random choice (workload, ECMP salt, ECN marking).
    pub seed: u64,
    /// Simulated time to run.
    pub duration: Ps,
    /// Wiring.
    pub topology: Topology,
    /// Switch and link settings.
    pub fabric: FabricConfig,
    /// Host settings.
    pub host: HostConfig,
    /// Measurements.
    pub metrics: MetricsConfig,
    /// Workloads.
    pub workloads: Vec<Workload>,
}

impl Scenario {
    /// Parses a scenario; unknown keys, bad units and bad DCB strings are
    /// errors that name the key. `cdf` names are `websearch`, `fb_hadoop`,
    /// or a path (relative to the working directory).
    pub fn from_toml(text: &str) -> Result<Scenario, Error> {
        Self::parse(text, None)
    }

    /// Reads and parses a scenario file; CDF paths are relative to it.
    pub fn from_file(path: &Path) -> Result<Scenario, Error> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| Error::Io(format!("{}: {e}", path.display())))?;
        Self::parse(&text, path.parent())
    }

    fn parse(text: &str, base: Option<&Path>) -> Result<Scenario, Error> {
        let raw: Raw = toml::from_str(text).map_err(|e| Error::Toml(e.to_string()))?;
        let duration = time("duration", &raw.duration)?;
        if duration == 0 {
            return Err(invalid("duration", "must be positive"));
        }
        let (topology, host_bps) = topology(&raw.topology)?;

        let mut fabric = FabricConfig::default();
        if let Some(d) = &raw.dcb {
            let map = |e: crate::dcb::DcbError| invalid(format!("dcb.{}", e.setting), e.msg);
            if let Some(s) = &d.pfc {
                fabric.dcb.set_pfc(s).map_err(map)?;
            }
            if let Some(s) = &d.ets {
                fabric.dcb.set_ets(s).map_err(map)?;
            }
            if let Some(s) = &d.app {
                fabric.dcb.set_app(s).map_err(map)?;
            }
            if let Some(q) = d.pfc_quanta {
                if q == 0 {
                    return Err(invalid("dcb.pfc_quanta", "must be positive"));
                }
                fabric.pfc_quanta = q;
            }
            if let Some(r) = d.pfc_refresh {
                if !(r > 0.0 && r < 1.0) {
                    return Err(invalid("dcb.pfc_refresh", "must be in (0, 1)"));
                }
                fabric.pfc_refresh = r;
            }
            if let Some(q) = d.dwrr_quantum_per_pct {
                fabric.dwrr_quantum_per_pct = q.max(1);
            }
        }
        if let Some(b) = &raw.buffer {
            fabric.buffer = buffer(b)?;
        }
        if let Some(e) = &raw.ecn {
            for (k, v) in e {
                let tc = k
                    .strip_prefix("tc")
                    .and_then(|n| n.parse::<usize>().ok())
                    .filter(|&n| n < 8)
                    .ok_or_else(|| invalid(format!("ecn.{k}"), "expected a key tc0..tc7"))?;
                let key = |f: &str| format!("ecn.{k}.{f}");
                let kmin = bytes(&key("kmin"), &v.kmin)?;
                let kmax = bytes(&key("kmax"), &v.kmax)?;
                if kmax < kmin {
                    return Err(invalid(key("kmax"), "below kmin"));
                }
                if !(0.0..=1.0).contains(&v.pmax) {
                    return Err(invalid(key("pmax"), "must be in [0, 1]"));
                }
                fabric.ecn[tc] = Some(EcnTc {
                    kmin,
                    kmax,
                    pmax: v.pmax,
                });
            }
        }
        if let Some(w) = &raw.watchdog {
            if w.enabled {
                let cfg = WatchdogConfig {
                    poll: opt_time("watchdog.poll", &w.poll, 100 * MS)?,
                    detect: w.detect.unwrap_or(2).max(1),
                    restore: opt_time("watchdog.restore", &w.restore, 200 * MS)?,
                };
                if cfg.poll == 0 {
                    return Err(invalid("watchdog.poll", "must be positive"));
                }
                fabric.watchdog = Some(cfg);
            }
        }
        let mut host = HostConfig::default();
        if let Some(h) = &raw.host {
            if let Some(m) = h.mtu {
                if !matches!(m, 256 | 512 | 1024 | 2048 | 4096) {
                    return Err(invalid("host.mtu", "must be 256, 512, 1024, 2048 or 4096"));
                }
                host.mtu = m;
            }
            if let Some(e) = &h.ecn {
                host.ecn = match e.as_str() {
                    "not-ect" => Ecn::NotEct,
                    "ect0" => Ecn::Ect0,
                    "ect1" => Ecn::Ect1,
                    _ => return Err(invalid("host.ecn", "expected not-ect, ect0 or ect1")),
                };
            }
            if let Some(t) = h.qp_timeout {
                host.qp_timeout = t.min(31);
            }
            if let Some(d) = h.dscp {
                host.dscp = dscp("host.dscp", d)?;
            }
        }
        if let Some(c) = &raw.cc {
            host.cc = cc_config(c)?;
            if host.cc.algorithm != CcAlgorithm::None
                && raw.host.as_ref().is_none_or(|h| h.ecn.is_none())
            {
                // DCQCN needs ECN-capable data (the default already).
                host.ecn = Ecn::Ect0;
            }
        }
        let mut metrics = MetricsConfig::default();
        if let Some(m) = &raw.metrics {
            let d = MetricsConfig::default();
            metrics.sample_interval = opt_time(
                "metrics.sample_interval",
                &m.sample_interval,
                d.sample_interval,
            )?;
            metrics.throughput_bin = opt_time(
                "metrics.throughput_bin",
                &m.throughput_bin,
                d.throughput_bin,
            )?;
            metrics.deadlock_check = opt_time(
                "metrics.deadlock_check",
                &m.deadlock_check,
                d.deadlock_check,
            )?;
            metrics.deadlock_after = opt_time(
                "metrics.deadlock_after",
                &m.deadlock_after,
                d.deadlock_after,
            )?;
            metrics.convergence = opt_time("metrics.convergence", &m.convergence, d.convergence)?;
            if let Some(n) = m.max_queue_samples {
                if n as u64 > MAX_BINS {
                    return Err(invalid(
                        "metrics.max_queue_samples",
                        format!("{n}; at most {MAX_BINS}"),
                    ));
                }
                metrics.max_queue_samples = n;
            }
            if let Some(b) = &m.size_buckets {
                metrics.size_buckets = b
                    .iter()
                    .map(|q| bytes("metrics.size_buckets", q))
                    .collect::<Result<_, _>>()?;
                if metrics.size_buckets.windows(2).any(|w| w[0] >= w[1]) {
                    return Err(invalid("metrics.size_buckets", "must increase"));
                }
            }
        }
        if raw.workload.len() as u64 > MAX_FLOWS {
            return Err(invalid("workload", format!("at most {MAX_FLOWS}")));
        }
        let mut workloads = Vec::new();
        for (i, w) in raw.workload.iter().enumerate() {
            let key = |f: &str| format!("workload[{i}].{f}");
            let check_host = |f: &str, h: u32| {
                if h < topology.hosts {
                    Ok(h)
                } else {
                    Err(invalid(
                        key(f),
                        format!("host {h} does not exist ({} hosts)", topology.hosts),
                    ))
                }
            };
            let dscp_or = |d: Option<u8>| dscp(&key("dscp"), d.unwrap_or(host.dscp));
            workloads.push(match w {
                RawWorkload::Poisson {
                    cdf,
                    load,
                    start,
                    stop,
                    dscp,
                    hosts,
                } => {
                    let c = match Cdf::named(cdf) {
                        Some(c) => c,
                        None => {
                            let p = base.map_or_else(|| Path::new(cdf).to_path_buf(), |b| b.join(cdf));
                            let text = std::fs::read_to_string(&p).map_err(|e| {
                                invalid(key("cdf"), format!("not a shipped CDF (websearch, fb_hadoop) nor a readable file: {e}"))
                            })?;
                            Cdf::parse(&text).map_err(|e| invalid(key("cdf"), e))?
                        }
                    };
                    if !(*load > 0.0 && *load <= 1.0) {
                        return Err(invalid(key("load"), "must be in (0, 1]"));
                    }
                    let hosts = hosts.unwrap_or(topology.hosts);
                    if hosts < 2 || hosts > topology.hosts {
                        return Err(invalid(key("hosts"), "must be in 2..=hosts"));
                    }
                    let start = opt_time(&key("start"), start, 0)?;
                    let stop = stop.as_ref().map(|q| time(&key("stop"), q)).transpose()?;
                    Workload::Poisson {
                        cdf: c,
                        load: *load,
                        host_bps,
                        hosts,
                        start,
                        stop,
                        dscp: dscp_or(*dscp)?,
                    }
                }
                RawWorkload::Incast {
                    senders,
                    count,
                    receiver,
                    size,
                    time: t,
                    dscp,
                } => {
                    let receiver = check_host("receiver", *receiver)?;
                    let senders: Vec<u32> = match (senders, count) {
                        (Some(s), None) => s.clone(),
                        (None, Some(n)) => (0..topology.hosts).filter(|&h| h != receiver).take(*n as usize).collect(),
                        _ => return Err(invalid(key("senders"), "give either `senders` or `count`")),
                    };
                    for &s in &senders {
                        check_host("senders", s)?;
                        if s == receiver {
                            return Err(invalid(key("senders"), "a sender is the receiver"));
                        }
                    }
                    Workload::Flows(workload::incast(
                        &senders,
                        receiver,
                        flow_size(&key("size"), size)?,
                        opt_time(&key("time"), t, 0)?,
                        dscp_or(*dscp)?,
                    ))
                }
                RawWorkload::Flow {
                    src,
                    dst,
                    size,
                    start,
                    dscp,
                } => {
                    let (src, dst) = (check_host("src", *src)?, check_host("dst", *dst)?);
                    if src == dst {
                        return Err(invalid(key("dst"), "same as src"));
                    }
                    Workload::Flows(vec![FlowSpec {
                        src,
                        dst,
                        size: flow_size(&key("size"), size)?,
                        start: opt_time(&key("start"), start, 0)?,
                        dscp: dscp_or(*dscp)?,
                    }])
                }
            });
        }
        let s = Scenario {
            name: raw.name.unwrap_or_else(|| "scenario".into()),
            seed: raw.seed.unwrap_or(1),
            duration,
            topology,
            fabric,
            host,
            metrics,
            workloads,
        };
        s.check_counts()?;
        Ok(s)
    }

    /// Checks the counts that depend on the duration (the flows Poisson
    /// arrivals are expected to start, the bins of a throughput series):
    /// a hostile scenario must end in an error naming the field, not in an
    /// abort on allocation. Called by the parser; call it again after
    /// changing `duration`.
    pub fn check_counts(&self) -> Result<(), Error> {
        let bin = self.metrics.throughput_bin;
        if bin > 0 && self.duration / bin > MAX_BINS {
            return Err(invalid(
                "metrics.throughput_bin",
                format!(
                    "{} bins over the duration; at most {MAX_BINS} (use a longer bin or a shorter duration)",
                    self.duration / bin
                ),
            ));
        }
        let mut flows = 0f64;
        for (i, w) in self.workloads.iter().enumerate() {
            match w {
                Workload::Poisson {
                    cdf,
                    load,
                    host_bps,
                    hosts,
                    start,
                    stop,
                    ..
                } => {
                    let span = stop
                        .unwrap_or(self.duration)
                        .min(self.duration)
                        .saturating_sub(*start);
                    let rate = load * *host_bps as f64 * f64::from(*hosts) / (8.0 * cdf.mean());
                    let expected = rate * span as f64 / crate::time::SEC as f64;
                    flows += expected;
                    if flows.is_nan() || flows > MAX_FLOWS as f64 {
                        return Err(invalid(
                            format!("workload[{i}].load"),
                            format!(
                                "about {expected:.0} flows over {hosts} hosts; at most {MAX_FLOWS} in a scenario (lower the load, the hosts or the duration)"
                            ),
                        ));
                    }
                }
                Workload::Flows(f) => {
                    flows += f.len() as f64;
                    if flows > MAX_FLOWS as f64 {
                        return Err(invalid(
                            format!("workload[{i}]"),
                            format!("at most {MAX_FLOWS} flows in a scenario"),
                        ));
                    }
                }
            }
        }
        Ok(())
    }

    /// What parses but is likely a mistake, one sentence each: an `[ecn]`
    /// class no traffic of the workloads is in (a typo `tc4` for `tc3`
    /// runs with DCQCN on and nothing ever marked), congestion control
    /// with no ECN marking on any class the data uses, a PFC priority no
    /// data uses while the data's is lossy.
    pub fn warnings(&self) -> Vec<String> {
        let dcb = &self.fabric.dcb;
        let tc_of_dscp = |d: u8| dcb.tc_of(dcb.dscp_prio[usize::from(d & 63)]);
        let mut dscps: Vec<u8> = Vec::new();
        for w in &self.workloads {
            match w {
                Workload::Poisson { dscp, .. } => dscps.push(*dscp),
                Workload::Flows(f) => dscps.extend(f.iter().map(|f| f.dscp)),
            }
        }
        dscps.sort_unstable();
        dscps.dedup();
        let mut data_tcs: Vec<u8> = dscps.iter().map(|&d| tc_of_dscp(d)).collect();
        data_tcs.sort_unstable();
        data_tcs.dedup();
        let names = |v: &[u8]| {
            v.iter()
                .map(|t| format!("tc{t}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let mut out = Vec::new();
        if data_tcs.is_empty() {
            return out;
        }
        let cnp_tc = tc_of_dscp(self.host.cc.cnp_dscp);
        for (tc, e) in self.fabric.ecn.iter().enumerate() {
            let tc = tc as u8;
            if e.is_some() && !data_tcs.contains(&tc) && tc != cnp_tc {
                out.push(format!(
                    "ecn.tc{tc}: no traffic of the workloads is in traffic class {tc} (their DSCPs {:?} map to {}), so nothing is marked there; a typo?",
                    dscps,
                    names(&data_tcs)
                ));
            }
        }
        let marked = data_tcs
            .iter()
            .any(|&t| self.fabric.ecn[usize::from(t)].is_some());
        if self.host.cc.algorithm != CcAlgorithm::None && !marked {
            out.push(format!(
                "cc.algorithm: congestion control is on but no class the data uses ({}) has ECN marking ([ecn] tcN), so it never reacts",
                names(&data_tcs)
            ));
        }
        out
    }

    /// The flows of every workload, in start order (stable).
    pub fn flows(&self) -> Vec<FlowSpec> {
        let mut out = Vec::new();
        for (i, w) in self.workloads.iter().enumerate() {
            match w {
                Workload::Poisson {
                    cdf,
                    load,
                    host_bps,
                    hosts,
                    start,
                    stop,
                    dscp,
                } => out.extend(workload::poisson(
                    *hosts,
                    cdf,
                    *load,
                    *host_bps,
                    *start,
                    stop.unwrap_or(self.duration).min(self.duration),
                    *dscp,
                    self.seed ^ (i as u64 + 1).wrapping_mul(0xa076_1d64_78bd_642f),
                )),
                Workload::Flows(f) => out.extend_from_slice(f),
            }
        }
        out.sort_by_key(|f| f.start);
        out
    }

    /// Builds the simulation of this scenario.
    pub fn build(&self) -> Simulation {
        Simulation::new(
            &self.name,
            &self.topology,
            self.fabric.clone(),
            self.host,
            self.metrics.clone(),
            self.flows(),
            self.seed,
        )
    }
}

fn dscp(key: &str, d: u8) -> Result<u8, Error> {
    if d < 64 {
        Ok(d)
    } else {
        Err(invalid(key, "a DSCP is 0..=63"))
    }
}

/// Parses a time like `10ms` or `500us` (ps, ns, us, ms, s) into
/// picoseconds; `key` names it in the error.
pub fn parse_time(key: &str, s: &str) -> Result<Ps, Error> {
    time(key, &Q::Str(s.to_string()))
}

fn opt_time(key: &str, q: &Option<Q>, default: Ps) -> Result<Ps, Error> {
    q.as_ref().map_or(Ok(default), |q| time(key, q))
}

/// Most hosts a topology may have (the HPCC fat-tree has 320; each host
/// is a whole RoCE engine in memory).
const MAX_HOSTS: u64 = 65_536;
/// Most switches a topology may have (a k = 64 fat-tree has 5,120).
const MAX_SWITCHES: u64 = 8_192;
/// Most links (host and fabric) a topology may have.
const MAX_LINKS: u64 = 262_144;
/// Most flows the workloads of a scenario may start (expected, for
/// Poisson arrivals); each is a QP and a WRITE in some host's engine.
pub const MAX_FLOWS: u64 = 1_000_000;
/// Most bins a throughput series or samples a queue series may take.
const MAX_BINS: u64 = 10_000_000;

fn topology(t: &RawTopo) -> Result<(Topology, u64), Error> {
    let k = |f: &str| format!("topology.{f}");
    let hosts = match t {
        RawTopo::Star { hosts, .. } => u64::from(*hosts),
        RawTopo::Dumbbell { left, right, .. } => u64::from(*left) + u64::from(*right),
        RawTopo::LeafSpine {
            leaves,
            hosts_per_leaf,
            ..
        } => u64::from(*leaves) * u64::from(*hosts_per_leaf),
        RawTopo::FatTree { k: kk, .. } => u64::from(*kk).pow(3) / 4,
        RawTopo::Hpcc {} => 320,
        RawTopo::Ring {
            switches,
            hosts_per_switch,
            ..
        } => u64::from(*switches) * u64::from(*hosts_per_switch),
    };
    if hosts > MAX_HOSTS {
        return Err(invalid(
            "topology",
            format!("{hosts} hosts; at most {MAX_HOSTS}"),
        ));
    }
    // Every count within bounds before anything is built: a hostile
    // scenario must end in an error naming the field, not in an abort on
    // allocation.
    let cap = |f: &str, n: u32, lo: u32, hi: u64| {
        if n < lo || u64::from(n) > hi {
            Err(invalid(k(f), format!("{n}; must be {lo} to {hi}")))
        } else {
            Ok(())
        }
    };
    let (switches, links) = match t {
        RawTopo::Star { hosts, .. } => {
            cap("hosts", *hosts, 2, MAX_HOSTS)?;
            (1, u64::from(*hosts))
        }
        RawTopo::Dumbbell { left, right, .. } => {
            cap("left", *left, 1, MAX_HOSTS)?;
            cap("right", *right, 1, MAX_HOSTS)?;
            (2, hosts + 1)
        }
        RawTopo::LeafSpine {
            leaves,
            spines,
            hosts_per_leaf,
            ..
        } => {
            cap("leaves", *leaves, 1, MAX_SWITCHES)?;
            cap("spines", *spines, 1, MAX_SWITCHES)?;
            cap("hosts_per_leaf", *hosts_per_leaf, 1, MAX_HOSTS)?;
            (
                u64::from(*leaves) + u64::from(*spines),
                hosts + u64::from(*leaves) * u64::from(*spines),
            )
        }
        RawTopo::FatTree { k: kk, .. } => {
            cap("k", *kk, 2, 64)?;
            let kk = u64::from(*kk);
            (5 * kk * kk / 4, 3 * kk * kk * kk / 4)
        }
        RawTopo::Hpcc {} => (56, 0),
        RawTopo::Ring {
            switches,
            hosts_per_switch,
            ..
        } => {
            cap("switches", *switches, 3, MAX_SWITCHES)?;
            cap("hosts_per_switch", *hosts_per_switch, 1, MAX_HOSTS)?;
            (u64::from(*switches), hosts + u64::from(*switches))
        }
    };
    if hosts < 2 {
        return Err(invalid("topology", format!("{hosts} hosts; at least 2")));
    }
    if switches > MAX_SWITCHES || links > MAX_LINKS {
        return Err(invalid(
            "topology",
            format!(
                "{switches} switches and {links} links; at most {MAX_SWITCHES} and {MAX_LINKS}"
            ),
        ));
    }
    Ok(match t {
        RawTopo::Star {
            hosts,
            rate: r,
            delay,
        } => {
            if *hosts < 2 {
                return Err(invalid(k("hosts"), "at least 2"));
            }
            let r = rate(&k("rate"), r)?;
            (Topology::star(*hosts, r, time(&k("delay"), delay)?), r)
        }
        RawTopo::Dumbbell {
            left,
            right,
            host_rate,
            core_rate,
            delay,
        } => {
            let r = rate(&k("host_rate"), host_rate)?;
            (
                Topology::dumbbell(
                    *left,
                    *right,
                    r,
                    rate(&k("core_rate"), core_rate)?,
                    time(&k("delay"), delay)?,
                ),
                r,
            )
        }
        RawTopo::LeafSpine {
            leaves,
            spines,
            hosts_per_leaf,
            host_rate,
            fabric_rate,
            delay,
        } => {
            let r = rate(&k("host_rate"), host_rate)?;
            (
                Topology::leaf_spine(
                    *leaves,
                    *spines,
                    *hosts_per_leaf,
                    r,
                    rate(&k("fabric_rate"), fabric_rate)?,
                    time(&k("delay"), delay)?,
                ),
                r,
            )
        }
        RawTopo::FatTree {
            k: kk,
            host_rate,
            fabric_rate,
            delay,
        } => {
            if *kk < 2 || kk % 2 != 0 {
                return Err(invalid(k("k"), "must be even and at least 2"));
            }
            let r = rate(&k("host_rate"), host_rate)?;
            (
                Topology::fat_tree(
                    *kk,
                    r,
                    rate(&k("fabric_rate"), fabric_rate)?,
                    time(&k("delay"), delay)?,
                ),
                r,
            )
        }
        RawTopo::Hpcc {} => (Topology::hpcc(), 100_000_000_000),
        RawTopo::Ring {
            switches,
            hosts_per_switch,
            rate: r,
            delay,
            clockwise,
        } => {
            if *switches < 3 {
                return Err(invalid(k("switches"), "a ring needs at least 3"));
            }
            let r = rate(&k("rate"), r)?;
            (
                Topology::ring(
                    *switches,
                    *hosts_per_switch,
                    r,
                    time(&k("delay"), delay)?,
                    *clockwise,
                ),
                r,
            )
        }
    })
}

/// A flow is one RDMA WRITE: 1 byte to 2 GiB.
fn flow_size(key: &str, q: &Q) -> Result<u64, Error> {
    let n = bytes(key, q)?;
    if !(1..=1 << 31).contains(&n) {
        return Err(invalid(key, "a flow is 1 byte to 2 GiB (one RDMA WRITE)"));
    }
    Ok(n)
}

fn buffer(b: &RawBuffer) -> Result<BufferConfig, Error> {
    let mut c = BufferConfig::default();
    if let Some(s) = &b.size {
        c.size = bytes("buffer.size", s)?;
    }
    let alpha = b.alpha.unwrap_or(0.125);
    if !(alpha > 0.0 && alpha.is_finite()) {
        return Err(invalid("buffer.alpha", "must be positive"));
    }
    c.xoff = match b.xoff.as_deref() {
        None | Some("dynamic") => {
            if b.xoff_bytes.is_some() {
                return Err(invalid("buffer.xoff_bytes", "only with xoff = \"static\""));
            }
            Xoff::Dynamic(alpha)
        }
        Some("static") => match &b.xoff_bytes {
            Some(q) => Xoff::Static(bytes("buffer.xoff_bytes", q)?),
            None => {
                return Err(invalid(
                    "buffer.xoff_bytes",
                    "required with xoff = \"static\"",
                ))
            }
        },
        Some(o) => {
            return Err(invalid(
                "buffer.xoff",
                format!("`{o}`: expected \"static\" or \"dynamic\""),
            ))
        }
    };
    if let Some(q) = &b.resume_offset {
        c.resume_offset = bytes("buffer.resume_offset", q)?;
    }
    if let Some(q) = &b.headroom {
        c.headroom = match q {
            Q::Str(s) if s == "auto" => Headroom::Auto,
            q => Headroom::Bytes(bytes("buffer.headroom", q)?),
        };
    }
    Ok(c)
}

/// Runs a scenario to its duration (or until every flow completed),
/// reporting progress as a fraction of the duration.
pub fn run(s: &Scenario, progress: impl FnMut(f64)) -> Results {
    run_on(s, None, progress)
}

/// [`run`] on `threads` threads (1 or 2; `None`: as many as the machine
/// has, up to 2). The results are the same whatever the number.
pub fn run_on(s: &Scenario, threads: Option<usize>, progress: impl FnMut(f64)) -> Results {
    let mut sim = s.build();
    if let Some(n) = threads {
        sim.set_threads(n);
    }
    sim.run(s.duration, progress);
    sim.results()
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIN: &str = r#"
        duration = "1ms"
        [topology]
        kind = "star"
        hosts = 3
        rate = "40G"
        delay = "1us"
    "#;

    #[test]
    fn units() {
        assert_eq!(bytes("k", &Q::Str("100KB".into())).unwrap(), 100_000);
        assert_eq!(bytes("k", &Q::Str("32MiB".into())).unwrap(), 32 << 20);
        assert_eq!(bytes("k", &Q::Int(42)).unwrap(), 42);
        assert_eq!(rate("k", &Q::Str("40G".into())).unwrap(), 40_000_000_000);
        assert_eq!(
            rate("k", &Q::Str("100Gbps".into())).unwrap(),
            100_000_000_000
        );
        assert_eq!(time("k", &Q::Str("1.5us".into())).unwrap(), 1_500_000);
        assert!(time("k", &Q::Int(5)).is_err());
        assert!(bytes("k", &Q::Str("5 parsecs".into())).is_err());
    }

    #[test]
    fn minimal_scenario_has_the_defaults() {
        let s = Scenario::from_toml(MIN).unwrap();
        assert_eq!(s.duration, MS);
        assert_eq!(s.topology.hosts, 3);
        assert!(s.fabric.dcb.pfc_enabled[3]);
        assert_eq!(s.fabric.dcb.dscp_prio[26], 3);
        assert_eq!(s.host.mtu, 1024);
    }

    /// What would overflow the simulator's arithmetic or memory is refused
    /// with the key named: a flow over 2 GiB (one RDMA WRITE), a time over
    /// an hour (sums of picoseconds would wrap), too many hosts.
    #[test]
    fn refuses_values_past_the_simulators_limits() {
        let flow = |size: &str| {
            format!("{MIN}\n[[workload]]\nkind = \"flow\"\nsrc = 0\ndst = 1\nsize = {size}\n")
        };
        assert!(Scenario::from_toml(&flow("\"2GiB\"")).is_ok());
        for size in ["\"2147483649B\"", "\"100GB\"", "18446744073709551615", "0"] {
            let e = Scenario::from_toml(&flow(size)).unwrap_err().to_string();
            assert!(e.contains("workload[0].size"), "{size}: {e}");
        }
        let e = Scenario::from_toml(&MIN.replace("\"1us\"", "\"18446745s\""))
            .unwrap_err()
            .to_string();
        assert!(e.contains("topology.delay"), "{e}");
        let e = Scenario::from_toml(&MIN.replace("hosts = 3", "hosts = 4294967295"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("65536"), "{e}");
    }
}
