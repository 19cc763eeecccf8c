//! `ROCE_STATS`: per-context counters at exit (docs/debugging.md,
//! "Counters"): per QP what the engine counted (`roce_core::QpCounters`,
//! the congestion-control CNPs), per CQ the completions by status (counted
//! where the program polls them, [`StatusCounts`]).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};

use roce_core::QpCounters;

use super::{each_seen, Debug, Seen, DEBUG};
use crate::trace::WC_STATUS;

/// Completions polled from one CQ, by status: one relaxed addition per
/// completion, on the polling thread.
#[derive(Default)]
pub(crate) struct StatusCounts([AtomicU64; 22]);

impl StatusCounts {
    fn snapshot(&self) -> [u64; 22] {
        std::array::from_fn(|i| self.0[i].load(Ordering::Relaxed))
    }
}

/// The completions counted so far, by status (for `roce top`).
pub(super) fn status_snapshot(c: &StatusCounts) -> [u64; 22] {
    c.snapshot()
}

/// Counts a completion of `status` (an `ibv_wc_status`).
pub(crate) fn count_status(c: &StatusCounts, status: u32) {
    if let Some(a) = c.0.get(status as usize) {
        a.fetch_add(1, Ordering::Relaxed);
    }
}

#[derive(Clone)]
struct QpRec {
    ctx: (String, IpAddr),
    qpn: u32,
    qp_type: String,
    c: QpCounters,
    cnp: (u64, u64),
    destroyed: bool,
}

#[derive(Clone)]
struct CqRec {
    ctx: (String, IpAddr),
    id: u32,
    by_status: [u64; 22],
    destroyed: bool,
}

/// What was destroyed before the exit.
#[derive(Default)]
pub(super) struct Done {
    qps: Vec<QpRec>,
    cqs: Vec<CqRec>,
    /// The middleware counters of engines already closed.
    backend: BTreeMap<&'static str, u64>,
}

fn qp_rec(ctx: (&str, IpAddr), q: &roce_verbs::QueuePair, destroyed: bool) -> QpRec {
    let cc = q.cc_counters();
    QpRec {
        ctx: (ctx.0.to_string(), ctx.1),
        qpn: q.qpn().value(),
        qp_type: format!("{:?}", q.qp_type()).to_uppercase(),
        c: q.counters(),
        cnp: (cc.cnp_sent, cc.cnp_received),
        destroyed,
    }
}

fn cq_rec(ctx: (&str, IpAddr), id: u32, by_status: &StatusCounts, destroyed: bool) -> CqRec {
    CqRec {
        ctx: (ctx.0.to_string(), ctx.1),
        id,
        by_status: by_status.snapshot(),
        destroyed,
    }
}

fn stats_on() -> Option<&'static Debug> {
    DEBUG
        .get()
        .filter(|d| d.stats.is_some() || d.faults.is_some())
}

fn done(d: &Debug) -> std::sync::MutexGuard<'_, Done> {
    d.done.lock().unwrap_or_else(|p| p.into_inner())
}

/// A QP of the context on `ctx` (device, address) is being destroyed:
/// its counters are kept for the summary.
pub(crate) fn qp_destroyed(ctx: (&str, IpAddr), q: &roce_verbs::QueuePair) {
    if let Some(d) = stats_on() {
        let r = qp_rec(ctx, q, true);
        done(d).qps.push(r);
    }
}

/// A CQ (engine id `id`) of the context on `ctx` is being destroyed.
pub(crate) fn cq_destroyed(ctx: (&str, IpAddr), id: u32, by_status: &StatusCounts) {
    if let Some(d) = stats_on() {
        let r = cq_rec(ctx, id, by_status, true);
        done(d).cqs.push(r);
    }
}

/// An engine closed: its middleware counters are kept.
pub(super) fn engine_counters(counters: Vec<(&'static str, u64)>) {
    if let Some(d) = DEBUG.get() {
        let mut g = done(d);
        for (k, v) in counters {
            *g.backend.entry(k).or_default() += v;
        }
    }
}

/// The seeded faults' counters (`fault_tx_lost 3, ...`) of every engine.
pub(super) fn seeded_summary() -> String {
    let Some(d) = DEBUG.get() else {
        return String::new();
    };
    let mut all = done(d).backend.clone();
    each_seen(|c: &Seen<'_>| {
        for (k, v) in c.verbs.backend_counters() {
            *all.entry(k).or_default() += v;
        }
    });
    let v: Vec<String> = all
        .iter()
        .filter(|(k, v)| k.starts_with("fault_") && **v != 0 && !k.ends_with("_packets"))
        .map(|(k, v)| format!("{} {v}", k.trim_start_matches("fault_")))
        .collect();
    if v.is_empty() {
        "nothing".into()
    } else {
        v.join(", ")
    }
}

/// The summary text (or JSON) of every context's QPs and CQs.
pub(super) fn summary(d: &Debug, json: bool) -> String {
    let (mut qps, mut cqs) = {
        let g = done(d);
        (g.qps.clone(), g.cqs.clone())
    };
    each_seen(|c: &Seen<'_>| {
        qps.extend(c.qps.iter().map(|q| qp_rec((c.device, c.local), q, false)));
        cqs.extend(
            c.cqs
                .iter()
                .map(|&(id, by)| cq_rec((c.device, c.local), id, by, false)),
        );
    });
    let mut ctxs: Vec<(String, IpAddr)> = qps
        .iter()
        .map(|q| q.ctx.clone())
        .chain(cqs.iter().map(|c| c.ctx.clone()))
        .collect();
    ctxs.sort();
    ctxs.dedup();
    let pid = std::process::id();
    let mut s = String::new();
    if json {
        let _ = write!(s, "{{\"pid\":{pid},\"contexts\":[");
        for (i, cx) in ctxs.iter().enumerate() {
            let _ = write!(
                s,
                "{}{{\"device\":\"{}\",\"addr\":\"{}\",\"qps\":[",
                if i > 0 { "," } else { "" },
                cx.0,
                cx.1
            );
            for (j, q) in qps.iter().filter(|q| q.ctx == *cx).enumerate() {
                let c = &q.c;
                let _ = write!(
                    s,
                    "{}{{\"qpn\":{},\"type\":\"{}\",\"destroyed\":{},\"tx_packets\":{},\"tx_bytes\":{},\"rx_packets\":{},\"rx_bytes\":{},\"retransmitted\":{},\"timeouts\":{},\"rnr_naks_sent\":{},\"rnr_naks_received\":{},\"seq_naks_sent\":{},\"seq_naks_received\":{},\"error_naks_sent\":{},\"error_naks_received\":{},\"cnps_sent\":{},\"cnps_received\":{},\"duplicates\":{},\"max_outstanding\":{}}}",
                    if j > 0 { "," } else { "" }, q.qpn, q.qp_type, q.destroyed, c.tx_packets, c.tx_bytes, c.rx_packets, c.rx_bytes,
                    c.retransmitted, c.timeouts, c.rnr_naks_sent, c.rnr_naks_received, c.seq_naks_sent,
                    c.seq_naks_received, c.error_naks_sent, c.error_naks_received, q.cnp.0, q.cnp.1, c.duplicates,
                    c.max_outstanding
                );
            }
            s += "],\"cqs\":[";
            for (j, c) in cqs.iter().filter(|c| c.ctx == *cx).enumerate() {
                let st: Vec<String> = statuses(&c.by_status)
                    .map(|(n, v)| format!("\"{n}\":{v}"))
                    .collect();
                let _ = write!(
                    s,
                    "{}{{\"cq\":{},\"destroyed\":{},\"completions\":{{{}}}}}",
                    if j > 0 { "," } else { "" },
                    c.id,
                    c.destroyed,
                    st.join(",")
                );
            }
            s += "]}";
        }
        s += "]}\n";
        return s;
    }
    let _ = writeln!(s, "libibverbs (roce): counters of process {pid}");
    for cx in &ctxs {
        let _ = writeln!(s, "  {} on {}:", cx.0, cx.1);
        for q in qps.iter().filter(|q| q.ctx == *cx) {
            let c = &q.c;
            let _ = writeln!(
                s,
                "    QP {:#08x} {}{}: sent {} packets {} bytes, received {} packets {} bytes, \
                 retransmitted {}, timeouts {}, RNR NAKs sent {} received {}, sequence NAKs sent {} \
                 received {}, error NAKs sent {} received {}, CNPs sent {} received {}, duplicate requests {}, \
                 most PSNs outstanding {}",
                q.qpn, q.qp_type, if q.destroyed { "" } else { " (live)" }, c.tx_packets, c.tx_bytes, c.rx_packets,
                c.rx_bytes, c.retransmitted, c.timeouts, c.rnr_naks_sent, c.rnr_naks_received,
                c.seq_naks_sent, c.seq_naks_received, c.error_naks_sent, c.error_naks_received,
                q.cnp.0, q.cnp.1, c.duplicates, c.max_outstanding
            );
        }
        for c in cqs.iter().filter(|c| c.ctx == *cx) {
            let st: Vec<String> = statuses(&c.by_status)
                .map(|(n, v)| format!("{n} {v}"))
                .collect();
            let st = if st.is_empty() {
                "none".to_string()
            } else {
                st.join(", ")
            };
            let _ = writeln!(
                s,
                "    CQ {}{}: completions {st}",
                c.id,
                if c.destroyed { "" } else { " (live)" }
            );
        }
    }
    s
}

fn statuses(by: &[u64; 22]) -> impl Iterator<Item = (&'static str, u64)> + '_ {
    by.iter()
        .enumerate()
        .filter(|(_, v)| **v != 0)
        .map(|(i, v)| (WC_STATUS[i], *v))
}
