//! Results: per-flow FCT and slowdown with percentiles per size bucket,
//! port counters (PFC, pause time, ECN marks, queue maxima), drops by
//! cause, watchdog actions, deadlocks, queue samples, per-connection
//! throughput, and the simulator's own cost. Serializable; CSV writers
//! for the tables. `collect` builds them from a finished run.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Serialize;

use crate::event::Node;
use crate::switch::{DropCounters, WatchdogEvent};
use crate::time::Ps;

mod collect;

pub(crate) use collect::{collect, Inputs};

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

/// A transmitter found paused at a sampling instant.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct PauseSample {
    /// Time.
    pub time_ps: Ps,
    /// The paused node.
    #[serde(skip)]
    pub node: Node,
    /// Its port.
    pub port: u16,
    /// Priority.
    pub prio: u8,
}

/// The pause timeline of one transmitter (node, port, priority): the
/// sampling instants at which it was paused.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PauseTimeline {
    /// Node name.
    pub node: String,
    /// Port.
    pub port: u16,
    /// Priority.
    pub prio: u8,
    /// Sampling instants at which it was paused.
    pub paused_at_ps: Vec<Ps>,
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
    /// Mean rate in bits per second over bins `from..to`. The series
    /// ends at the flow's last byte: bins past it count as empty, so a
    /// flow that stopped (finished, or stuck in a deadlock) is averaged
    /// over the whole window, not over the bins it was sending in.
    pub fn rate_bps(&self, from: usize, to: usize) -> f64 {
        if to <= from {
            return 0.0;
        }
        let end = to.min(self.bytes.len());
        let b: u64 = self.bytes.get(from..end).map_or(0, |s| s.iter().sum());
        b as f64 * 8.0 / ((to - from) as f64 * self.bin_ps as f64 * 1e-12)
    }
}

/// Queue-length statistics of one egress (switch, port, priority) over
/// the periodic samples taken from the convergence time on (an absent
/// sample is an empty queue).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct QueueStats {
    /// Switch name.
    pub switch: String,
    /// Egress port.
    pub port: u16,
    /// What the port leads to.
    pub peer: String,
    /// Priority.
    pub prio: u8,
    /// Sampling instants.
    pub samples: u64,
    /// Mean queued bytes.
    pub mean: f64,
    /// Median.
    pub p50: u64,
    /// 99th percentile.
    pub p99: u64,
    /// Largest sample.
    pub max: u64,
    /// Fraction of samples with Kmin ≤ q ≤ Kmax of the TC's ECN band
    /// (None when the TC does not mark).
    pub in_ecn_band: Option<f64>,
    /// Fraction of samples above Kmax.
    pub above_ecn_band: Option<f64>,
}

/// Jain's fairness index over per-flow throughput in a window.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Fairness {
    /// Window start (the configured convergence time).
    pub from_ps: Ps,
    /// Window end (the first completion among the flows, or the run's end).
    pub to_ps: Ps,
    /// (src, dst, prio) of the flows measured.
    pub flows: Vec<(u32, u32, u8)>,
    /// Their mean rates in Gb/s.
    pub gbps: Vec<f64>,
    /// (Σx)² / (n·Σx²): 1 is perfectly fair, 1/n is one flow taking all.
    pub jain: f64,
}

/// Jain's index of `x` (1 for an empty or all-zero set).
pub fn jain_index(x: &[f64]) -> f64 {
    let s: f64 = x.iter().sum();
    let s2: f64 = x.iter().map(|v| v * v).sum();
    if x.is_empty() || s2 == 0.0 {
        1.0
    } else {
        s * s / (x.len() as f64 * s2)
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
    /// CNPs sent (notification points).
    pub tx_cnp: u64,
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
    /// Threads the run used (the results do not depend on it).
    pub threads: usize,
    /// Most packets in flight at once (pool slots).
    pub packet_pool_high_water: usize,
    /// Most events pending at once in the event queue.
    pub event_queue_high_water: usize,
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
    /// Sampling interval of queues and pauses (0: off).
    pub sample_interval_ps: Ps,
    /// Pause timelines (transmitters paused at some sampling instant).
    pub pauses: Vec<PauseTimeline>,
    /// Throughput per (sender, receiver, priority).
    pub throughput: Vec<ThroughputSeries>,
    /// Engine counters.
    pub engine: EngineTotals,
    /// Congestion control algorithm of the NICs.
    pub cc: String,
    /// Queue-length statistics per egress (switch, port, priority) that
    /// ever held packets.
    pub queue_stats: Vec<QueueStats>,
    /// Jain's index after the convergence time (None without throughput
    /// bins or with fewer than two flows active over at least two bins).
    pub fairness: Option<Fairness>,
    /// Per-QP congestion control state at the end: (host, peer, DSCP,
    /// counters) for QPs that saw CE or CNPs.
    pub qp_cc: Vec<QpCcReport>,
}

/// Congestion control counters of one QP at the end of the run.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct QpCcReport {
    /// Host.
    pub host: u32,
    /// Peer host.
    pub peer: u32,
    /// DSCP.
    pub dscp: u8,
    /// CE-marked packets received.
    pub ce_received: u64,
    /// CNPs sent.
    pub cnp_sent: u64,
    /// CNPs received.
    pub cnp_received: u64,
    /// Rate at the end, b/s.
    pub rate_bps: u64,
    /// Times the pacer held a packet.
    pub paced: u64,
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

#[cfg(test)]
mod tests {
    use super::{jain_index, ThroughputSeries};

    /// A flow that sent in its first bin only, then stopped: its mean
    /// over ten bins is a tenth of that bin's rate (it read as the bin's
    /// rate: the bins after its last byte were not counted).
    #[test]
    fn a_rate_counts_the_bins_after_the_last_byte() {
        let s = ThroughputSeries {
            src: 0,
            dst: 1,
            prio: 3,
            bin_ps: 1_000_000, // 1 us
            bytes: vec![1000],
        };
        let close = |a: f64, b: f64| (a - b).abs() < 1e-6 * b;
        assert!(close(s.rate_bps(0, 1), 8e9), "{}", s.rate_bps(0, 1));
        assert!(close(s.rate_bps(0, 10), 8e8), "{}", s.rate_bps(0, 10));
        assert_eq!(s.rate_bps(5, 10), 0.0);
        assert_eq!(s.rate_bps(3, 3), 0.0);
    }

    #[test]
    fn jain() {
        assert_eq!(jain_index(&[5.0, 5.0, 5.0]), 1.0);
        assert!((jain_index(&[10.0, 0.0]) - 0.5).abs() < 1e-12);
        assert!((jain_index(&[3.0, 1.0]) - 16.0 / 20.0).abs() < 1e-12);
    }
}
