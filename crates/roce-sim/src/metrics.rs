//! Results: per-flow FCT and slowdown with percentiles per size bucket,
//! port counters (PFC, pause time, ECN marks, queue maxima), drops by
//! cause, watchdog actions, deadlocks, queue samples, per-connection
//! throughput, and the simulator's own cost. Serializable; CSV writers
//! for the tables.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Serialize;

use crate::event::Node;
use crate::host::{FlowDone, Host};
use crate::switch::{DropCounters, Switch, WatchdogEvent};
use crate::time::Ps;
use crate::workload::FlowSpec;

/// One flow's outcome.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct FlowRecord {
    /// Index in the workload.
    pub id: u32,
    /// Sender.
    pub src: u32,
    /// Receiver.
    pub dst: u32,
    /// Bytes.
    pub size: u64,
    /// DSCP.
    pub dscp: u8,
    /// Start time.
    pub start_ps: Ps,
    /// Completion time (the send completion), if it completed.
    pub end_ps: Option<Ps>,
    /// Flow completion time.
    pub fct_ps: Option<Ps>,
    /// Ideal FCT on the empty network ([`crate::ideal_fct`]).
    pub ideal_ps: Ps,
    /// FCT ÷ ideal.
    pub slowdown: Option<f64>,
    /// Completed with an error status.
    pub failed: bool,
}

/// Slowdown percentiles of the flows in one size range.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct BucketStats {
    /// Smallest size (inclusive).
    pub min_size: u64,
    /// Largest size (exclusive; `u64::MAX` for the last bucket).
    pub max_size: u64,
    /// Completed flows in the bucket.
    pub count: usize,
    /// Median slowdown (None when the bucket is empty).
    pub p50: Option<f64>,
    /// 95th percentile.
    pub p95: Option<f64>,
    /// 99th percentile.
    pub p99: Option<f64>,
}

/// Counters of one port, per priority.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PortReport {
    /// Node name (`h12` or the switch name).
    pub node: String,
    /// Port number.
    pub port: u16,
    /// What the port connects to.
    pub peer: String,
    /// Line rate.
    pub rate_bps: u64,
    /// Frame bytes sent.
    pub tx_bytes: [u64; 8],
    /// Frames sent.
    pub tx_pkts: [u64; 8],
    /// XOFF frames sent (pausing the peer).
    pub pfc_xoff_tx: [u64; 8],
    /// XON frames sent.
    pub pfc_xon_tx: [u64; 8],
    /// PFC frames received (this port's transmitter paused/resumed).
    pub pfc_rx: [u64; 8],
    /// Time this port's transmitter was paused.
    pub paused_ps: [u64; 8],
    /// Packets CE-marked on dequeue.
    pub ecn_marked: [u64; 8],
    /// Largest egress queue.
    pub max_queue_bytes: [u64; 8],
}

/// A reported PFC deadlock.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct DeadlockReport {
    /// When it was reported.
    pub detected_ps: Ps,
    /// Since when the cycle had been seen.
    pub since_ps: Ps,
    /// The paused egress queues of the cycle, `switch:portN:prioP`, each
    /// waiting for the next.
    pub cycle: Vec<String>,
}

/// One queue-depth sample.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct QueueSample {
    /// Time.
    pub time_ps: Ps,
    /// Switch index.
    pub switch: u32,
    /// Egress port.
    pub port: u16,
    /// Priority.
    pub prio: u8,
    /// Queued frame bytes.
    pub bytes: u64,
}

/// Bytes received per time bin for one (sender, receiver, priority).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ThroughputSeries {
    /// Sender.
    pub src: u32,
    /// Receiver.
    pub dst: u32,
    /// Priority.
    pub prio: u8,
    /// Bin width.
    pub bin_ps: Ps,
    /// IP bytes of request packets received in each bin.
    pub bytes: Vec<u64>,
}

impl ThroughputSeries {
    /// Mean rate in bits per second over bins `from..to`.
    pub fn rate_bps(&self, from: usize, to: usize) -> f64 {
        let to = to.min(self.bytes.len());
        if to <= from {
            return 0.0;
        }
        let b: u64 = self.bytes[from..to].iter().sum();
        b as f64 * 8.0 / ((to - from) as f64 * self.bin_ps as f64 * 1e-12)
    }
}

/// Engine counters summed over hosts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct EngineTotals {
    /// Datagrams the engines sent.
    pub tx_datagrams: u64,
    /// Datagrams handed to the engines.
    pub rx_datagrams: u64,
    /// Datagrams that did not parse.
    pub rx_malformed: u64,
    /// Datagrams with a bad ICRC.
    pub rx_bad_icrc: u64,
    /// CE-marked datagrams received.
    pub rx_ce: u64,
    /// CNPs received.
    pub rx_cnp: u64,
    /// Retransmitted packets.
    pub retransmitted: u64,
    /// Local ACK timeouts.
    pub timeouts: u64,
    /// Sequence-error NAKs sent.
    pub seq_naks: u64,
}

/// Everything a run measured.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Results {
    /// Scenario name.
    pub name: String,
    /// Topology name.
    pub topology: String,
    /// Seed.
    pub seed: u64,
    /// Simulated time reached.
    pub sim_time_ps: Ps,
    /// Events processed.
    pub events: u64,
    /// Wall-clock seconds spent in the event loop.
    pub wall_seconds: f64,
    /// Events per wall-clock second.
    pub events_per_second: f64,
    /// Most packets in flight at once (pool slots).
    pub packet_pool_high_water: usize,
    /// Flows.
    pub flows: Vec<FlowRecord>,
    /// Flows that completed successfully.
    pub flows_completed: usize,
    /// Slowdown percentiles per size bucket.
    pub slowdown: Vec<BucketStats>,
    /// Port counters (switch ports and host NICs).
    pub ports: Vec<PortReport>,
    /// Drops by cause, all switches.
    pub drops: DropCounters,
    /// Drops by cause per switch (switches with drops only).
    pub drops_by_switch: BTreeMap<String, DropCounters>,
    /// PFC watchdog actions.
    pub watchdog: Vec<WatchdogEvent>,
    /// Deadlocks detected.
    pub deadlocks: Vec<DeadlockReport>,
    /// Queue samples.
    pub queue_samples: Vec<QueueSample>,
    /// Throughput per (sender, receiver, priority).
    pub throughput: Vec<ThroughputSeries>,
    /// Engine counters.
    pub engine: EngineTotals,
}

impl Results {
    /// XOFF frames sent by all switch ports, per priority.
    pub fn pfc_xoff_sent(&self) -> [u64; 8] {
        let mut s = [0; 8];
        for p in &self.ports {
            for (a, b) in s.iter_mut().zip(p.pfc_xoff_tx) {
                *a += b;
            }
        }
        s
    }

    /// The port report of `node`'s `port`.
    pub fn port(&self, node: &str, port: u16) -> Option<&PortReport> {
        self.ports.iter().find(|p| p.node == node && p.port == port)
    }

    /// The throughput series of (src, dst, prio).
    pub fn series(&self, src: u32, dst: u32, prio: u8) -> Option<&ThroughputSeries> {
        self.throughput
            .iter()
            .find(|s| s.src == src && s.dst == dst && s.prio == prio)
    }

    /// JSON of everything.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("results serialize")
    }

    /// CSV of the flows.
    pub fn flows_csv(&self) -> String {
        let mut s =
            String::from("id,src,dst,size,dscp,start_ps,end_ps,fct_ps,ideal_ps,slowdown,failed\n");
        for f in &self.flows {
            let opt = |v: Option<u64>| v.map_or(String::new(), |v| v.to_string());
            let _ = writeln!(
                s,
                "{},{},{},{},{},{},{},{},{},{},{}",
                f.id,
                f.src,
                f.dst,
                f.size,
                f.dscp,
                f.start_ps,
                opt(f.end_ps),
                opt(f.fct_ps),
                f.ideal_ps,
                f.slowdown.map_or(String::new(), |v| format!("{v:.4}")),
                f.failed
            );
        }
        s
    }

    /// CSV of the queue samples.
    pub fn queues_csv(&self) -> String {
        let mut s = String::from("time_ps,switch,port,prio,bytes\n");
        for q in &self.queue_samples {
            let _ = writeln!(
                s,
                "{},{},{},{},{}",
                q.time_ps, q.switch, q.port, q.prio, q.bytes
            );
        }
        s
    }

    /// CSV of the port counters, one row per (port, priority) with traffic
    /// or PFC activity.
    pub fn ports_csv(&self) -> String {
        let mut s = String::from(
            "node,port,peer,prio,tx_bytes,tx_pkts,pfc_xoff_tx,pfc_xon_tx,pfc_rx,paused_ps,ecn_marked,max_queue_bytes\n",
        );
        for p in &self.ports {
            for i in 0..8 {
                if p.tx_pkts[i] + p.pfc_xoff_tx[i] + p.pfc_rx[i] == 0 {
                    continue;
                }
                let _ = writeln!(
                    s,
                    "{},{},{},{},{},{},{},{},{},{},{},{}",
                    p.node,
                    p.port,
                    p.peer,
                    i,
                    p.tx_bytes[i],
                    p.tx_pkts[i],
                    p.pfc_xoff_tx[i],
                    p.pfc_xon_tx[i],
                    p.pfc_rx[i],
                    p.paused_ps[i],
                    p.ecn_marked[i],
                    p.max_queue_bytes[i]
                );
            }
        }
        s
    }

    /// CSV of the throughput series (one row per bin).
    pub fn throughput_csv(&self) -> String {
        let mut s = String::from("src,dst,prio,bin_start_ps,bytes,gbps\n");
        for t in &self.throughput {
            for (i, b) in t.bytes.iter().enumerate() {
                let gbps = *b as f64 * 8.0 / (t.bin_ps as f64 * 1e-12) / 1e9;
                let _ = writeln!(
                    s,
                    "{},{},{},{},{},{:.3}",
                    t.src,
                    t.dst,
                    t.prio,
                    i as u64 * t.bin_ps,
                    b,
                    gbps
                );
            }
        }
        s
    }
}

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
    pub(crate) mtu: u32,
    pub(crate) flows: Vec<(FlowSpec, Ps, FlowDone)>,
    pub(crate) size_buckets: &'a [u64],
    pub(crate) switches: &'a [Switch],
    pub(crate) hosts: &'a [Host],
    pub(crate) watchdog: &'a [WatchdogEvent],
    pub(crate) deadlocks: &'a [DeadlockReport],
    pub(crate) queue_samples: &'a [QueueSample],
    pub(crate) tput: &'a BTreeMap<(u32, u32, u8), Vec<u64>>,
    pub(crate) tput_bin: Ps,
    pub(crate) pool_high_water: usize,
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
    for h in i.hosts {
        let c = h.dev.counters();
        engine.tx_datagrams += c.tx_datagrams;
        engine.rx_datagrams += c.rx_datagrams;
        engine.rx_malformed += c.rx_malformed;
        engine.rx_bad_icrc += c.rx_bad_icrc;
        engine.rx_cnp += c.rx_cnp;
        engine.rx_ce += h.ce_received;
        let (r, t, n) = h.qp_totals();
        engine.retransmitted += r;
        engine.timeouts += t;
        engine.seq_naks += n;
    }
    let throughput = i
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
    Results {
        name: i.name.to_string(),
        topology: i.topology.to_string(),
        seed: i.seed,
        sim_time_ps: i.end,
        events: i.events,
        wall_seconds: i.wall,
        events_per_second: if i.wall > 0.0 {
            i.events as f64 / i.wall
        } else {
            0.0
        },
        packet_pool_high_water: i.pool_high_water,
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
        throughput,
        engine,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank() {
        let v: Vec<f64> = (1..=100).map(|x| x as f64).collect();
        assert_eq!(percentile(&v, 50.0), Some(50.0));
        assert_eq!(percentile(&v, 99.0), Some(99.0));
        assert_eq!(percentile(&[3.0], 99.0), Some(3.0));
        assert_eq!(percentile(&[], 50.0), None);
    }
}
