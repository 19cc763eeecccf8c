//! Building the [`Results`] of a finished run: per-flow outcomes and
//! percentiles, port and queue statistics, fairness and throughput series.

use std::collections::BTreeMap;

use super::{
    jain_index, BucketStats, DeadlockReport, EngineTotals, Fairness, FlowRecord, PauseSample,
    PauseTimeline, PortReport, QpCcReport, QueueSample, QueueStats, Results, ThroughputSeries,
};
use crate::event::Node;
use crate::host::{FlowDone, Host};
use crate::switch::{DropCounters, Switch, WatchdogEvent};
use crate::time::Ps;
use crate::workload::FlowSpec;

/// Nearest-rank percentile of sorted values.
pub(crate) fn percentile(sorted: &[f64], p: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    Some(sorted[rank.clamp(1, sorted.len()) - 1])
}

pub(crate) struct Inputs<'a> {
    pub(crate) name: &'a str,
    pub(crate) topology: &'a str,
    pub(crate) seed: u64,
    pub(crate) end: Ps,
    pub(crate) events: u64,
    pub(crate) wall: f64,
    pub(crate) threads: usize,
    pub(crate) mtu: u32,
    pub(crate) flows: Vec<(FlowSpec, Ps, FlowDone)>,
    pub(crate) size_buckets: &'a [u64],
    pub(crate) switches: &'a [Switch],
    pub(crate) hosts: &'a [Host],
    pub(crate) watchdog: &'a [WatchdogEvent],
    pub(crate) deadlocks: &'a [DeadlockReport],
    pub(crate) queue_samples: &'a [QueueSample],
    pub(crate) sample_ticks: u64,
    pub(crate) pause_samples: &'a [PauseSample],
    pub(crate) sample_interval: Ps,
    pub(crate) ecn: [Option<crate::config::EcnTc>; 8],
    pub(crate) tc_of: [u8; 8],
    pub(crate) convergence: Ps,
    pub(crate) cc: &'a str,
    pub(crate) tput: &'a BTreeMap<(u32, u32, u8), Vec<u64>>,
    pub(crate) tput_bin: Ps,
    pub(crate) pool_high_water: usize,
    pub(crate) queue_high_water: usize,
}

fn node_name(n: Node, switches: &[Switch]) -> String {
    match n {
        Node::Host(h) => format!("h{h}"),
        Node::Switch(s) => switches
            .get(s as usize)
            .map_or_else(|| format!("s{s}"), |s| s.name.clone()),
    }
}

pub(crate) fn collect(i: Inputs<'_>) -> Results {
    let _ = i.mtu;
    let flows: Vec<FlowRecord> = i
        .flows
        .iter()
        .enumerate()
        .map(|(id, (f, ideal, d))| {
            let fct = d.end.map(|e| e.saturating_sub(f.start));
            FlowRecord {
                id: id as u32,
                src: f.src,
                dst: f.dst,
                size: f.size,
                dscp: f.dscp,
                start_ps: f.start,
                end_ps: d.end,
                fct_ps: fct,
                ideal_ps: *ideal,
                slowdown: fct
                    .filter(|_| !d.failed)
                    .map(|x| x as f64 / (*ideal).max(1) as f64),
                failed: d.failed,
            }
        })
        .collect();
    let mut bounds = vec![0u64];
    bounds.extend_from_slice(i.size_buckets);
    bounds.push(u64::MAX);
    let slowdown = bounds
        .windows(2)
        .map(|w| {
            let mut v: Vec<f64> = flows
                .iter()
                .filter(|f| f.size >= w[0] && f.size < w[1])
                .filter_map(|f| f.slowdown)
                .collect();
            v.sort_by(f64::total_cmp);
            BucketStats {
                min_size: w[0],
                max_size: w[1],
                count: v.len(),
                p50: percentile(&v, 50.0),
                p95: percentile(&v, 95.0),
                p99: percentile(&v, 99.0),
            }
        })
        .collect();
    let mut ports = Vec::new();
    let mut report = |node: String, port: u16, tx: &crate::port::PortTx| {
        let st = tx.stats;
        ports.push(PortReport {
            node,
            port,
            peer: node_name(tx.peer, i.switches),
            rate_bps: tx.rate_bps,
            tx_bytes: st.tx_bytes,
            tx_pkts: st.tx_pkts,
            pfc_xoff_tx: st.xoff_tx,
            pfc_xon_tx: st.xon_tx,
            pfc_rx: st.pfc_rx,
            paused_ps: st.paused_ps,
            ecn_marked: st.ecn_marked,
            max_queue_bytes: st.max_queue,
        });
    };
    for s in i.switches {
        for (p, tx) in s.ports.iter().enumerate() {
            report(s.name.clone(), p as u16, tx);
        }
    }
    for h in i.hosts {
        report(format!("h{}", h.id), 0, &h.tx);
    }
    let mut drops = DropCounters::default();
    let mut drops_by_switch = BTreeMap::new();
    for s in i.switches {
        drops.add(&s.drops);
        if s.drops.total() > 0 {
            drops_by_switch.insert(s.name.clone(), s.drops);
        }
    }
    let mut engine = EngineTotals::default();
    let mut qp_cc = Vec::new();
    for h in i.hosts {
        let c = h.dev.counters();
        engine.tx_datagrams += c.tx_datagrams;
        engine.rx_datagrams += c.rx_datagrams;
        engine.rx_malformed += c.rx_malformed;
        engine.rx_bad_icrc += c.rx_bad_icrc;
        engine.rx_cnp += c.rx_cnp;
        engine.rx_ce += h.ce_received;
        for ((peer, dscp), c) in h.cc_counters() {
            engine.tx_cnp += c.cnp_sent;
            if c.ce_received + c.cnp_sent + c.cnp_received > 0 {
                qp_cc.push(QpCcReport {
                    host: h.id,
                    peer,
                    dscp,
                    ce_received: c.ce_received,
                    cnp_sent: c.cnp_sent,
                    cnp_received: c.cnp_received,
                    rate_bps: c.rate_bps,
                    paced: c.paced,
                });
            }
        }
        let (r, t, n) = h.qp_totals();
        engine.retransmitted += r;
        engine.timeouts += t;
        engine.seq_naks += n;
    }
    let queue_stats = queue_stats(&i);
    let throughput: Vec<ThroughputSeries> = i
        .tput
        .iter()
        .map(|(&(src, dst, prio), b)| ThroughputSeries {
            src,
            dst,
            prio,
            bin_ps: i.tput_bin,
            bytes: b.clone(),
        })
        .collect();
    let fairness = fairness(&flows, &throughput, i.convergence, i.end);
    let mut pauses: BTreeMap<(String, u16, u8), Vec<Ps>> = BTreeMap::new();
    for p in i.pause_samples {
        pauses
            .entry((node_name(p.node, i.switches), p.port, p.prio))
            .or_default()
            .push(p.time_ps);
    }
    let pauses = pauses
        .into_iter()
        .map(|((node, port, prio), paused_at_ps)| PauseTimeline {
            node,
            port,
            prio,
            paused_at_ps,
        })
        .collect();
    Results {
        cc: i.cc.to_string(),
        queue_stats,
        fairness,
        qp_cc,
        name: i.name.to_string(),
        topology: i.topology.to_string(),
        seed: i.seed,
        sim_time_ps: i.end,
        events: i.events,
        wall_seconds: i.wall,
        threads: i.threads,
        events_per_second: if i.wall > 0.0 {
            i.events as f64 / i.wall
        } else {
            0.0
        },
        packet_pool_high_water: i.pool_high_water,
        event_queue_high_water: i.queue_high_water,
        flows_completed: flows
            .iter()
            .filter(|f| f.end_ps.is_some() && !f.failed)
            .count(),
        flows,
        slowdown,
        ports,
        drops,
        drops_by_switch,
        watchdog: i.watchdog.to_vec(),
        deadlocks: i.deadlocks.to_vec(),
        queue_samples: i.queue_samples.to_vec(),
        sample_interval_ps: i.sample_interval,
        pauses,
        throughput,
        engine,
    }
}

fn queue_stats(i: &Inputs<'_>) -> Vec<QueueStats> {
    let mut by: BTreeMap<(u32, u16, u8), Vec<u64>> = BTreeMap::new();
    for q in i
        .queue_samples
        .iter()
        .filter(|q| q.time_ps >= i.convergence)
    {
        by.entry((q.switch, q.port, q.prio))
            .or_default()
            .push(q.bytes);
    }
    let n = i.sample_ticks.max(1);
    by.into_iter()
        .map(|((s, o, pr), mut v)| {
            v.sort_unstable();
            let zeros = n.saturating_sub(v.len() as u64);
            // Nearest rank over `zeros` zero samples followed by `v`.
            let rank = |p: f64| {
                let r = ((p / 100.0) * n as f64).ceil().max(1.0) as u64;
                if r <= zeros {
                    0
                } else {
                    v[((r - zeros - 1) as usize).min(v.len() - 1)]
                }
            };
            let band = i.ecn[i.tc_of[pr as usize & 7] as usize];
            let frac = |f: &dyn Fn(u64) -> bool| {
                let k = v.iter().filter(|&&b| f(b)).count() as u64 + if f(0) { zeros } else { 0 };
                k as f64 / n as f64
            };
            let sw = &i.switches[s as usize];
            QueueStats {
                switch: sw.name.clone(),
                port: o,
                peer: node_name(sw.ports[o as usize].peer, i.switches),
                prio: pr,
                samples: n,
                mean: v.iter().sum::<u64>() as f64 / n as f64,
                p50: rank(50.0),
                p99: rank(99.0),
                max: v.last().copied().unwrap_or(0),
                in_ecn_band: band.map(|e| frac(&|b| b >= e.kmin && b <= e.kmax)),
                above_ecn_band: band.map(|e| frac(&|b| b > e.kmax)),
            }
        })
        .collect()
}

/// Jain's index over the flows that started by `from` and are still
/// running, from `from` to the first completion among them.
fn fairness(
    flows: &[FlowRecord],
    tput: &[ThroughputSeries],
    from: Ps,
    end: Ps,
) -> Option<Fairness> {
    let bin = tput.first()?.bin_ps;
    if bin == 0 {
        return None;
    }
    let active: Vec<&FlowRecord> = flows
        .iter()
        .filter(|f| f.start_ps <= from && f.end_ps.is_none_or(|e| e > from))
        .collect();
    let to = active
        .iter()
        .filter_map(|f| f.end_ps)
        .min()
        .unwrap_or(end)
        .min(end);
    let (b0, b1) = (from.div_ceil(bin) as usize, (to / bin) as usize);
    if active.len() < 2 || b1 < b0 + 2 {
        return None;
    }
    let mut keys: Vec<(u32, u32, u8)> = Vec::new();
    for f in &active {
        let prio = tput
            .iter()
            .find(|s| s.src == f.src && s.dst == f.dst)
            .map_or(0, |s| s.prio);
        let k = (f.src, f.dst, prio);
        if !keys.contains(&k) {
            keys.push(k);
        }
    }
    let gbps: Vec<f64> = keys
        .iter()
        .map(|&(s, d, p)| {
            tput.iter()
                .find(|t| t.src == s && t.dst == d && t.prio == p)
                .map_or(0.0, |t| t.rate_bps(b0, b1) / 1e9)
        })
        .collect();
    Some(Fairness {
        from_ps: b0 as u64 * bin,
        to_ps: b1 as u64 * bin,
        jain: jain_index(&gbps),
        flows: keys,
        gbps,
    })
}

#[cfg(test)]
mod tests {
    use super::percentile;

    #[test]
    fn nearest_rank() {
        let v: Vec<f64> = (1..=100).map(|x| x as f64).collect();
        assert_eq!(percentile(&v, 50.0), Some(50.0));
        assert_eq!(percentile(&v, 99.0), Some(99.0));
        assert_eq!(percentile(&[3.0], 99.0), Some(3.0));
        assert_eq!(percentile(&[], 50.0), None);
    }
}
