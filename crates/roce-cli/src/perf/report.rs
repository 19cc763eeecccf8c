//! perftest-style results: the statistics and the tables `ib_*_bw` and
//! `ib_*_lat` print, plus JSON.

use std::fmt::Write as _;

use roce_verbs::Completion;
use serde_json::json;

/// Bytes per "MB" in perftest's MB/sec (it divides by 0x100000).
const MIB: f64 = 1_048_576.0;
/// Bytes per second in one Gb/sec (perftest's --report_gbits).
const GBIT: f64 = 125_000_000.0;

/// Result of a bandwidth test at one message size.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct BwResult {
    pub(crate) bytes: u64,
    pub(crate) iterations: u64,
    /// Bytes per second over the whole run.
    pub(crate) avg_bps: f64,
    /// Best bytes per second over any measurement interval.
    pub(crate) peak_bps: f64,
    /// Messages per second.
    pub(crate) msg_rate: f64,
}

impl BwResult {
    /// From a run of `iterations` messages of `bytes` that took `secs`,
    /// with the best interval rate `peak_bps` (falls back to the average).
    /// The peer's figures come from its `measured` message: any u64 must
    /// do (the product is taken in floating point).
    pub(crate) fn new(bytes: u64, iterations: u64, secs: f64, peak_bps: f64) -> BwResult {
        let secs = secs.max(1e-12);
        let avg_bps = bytes as f64 * iterations as f64 / secs;
        BwResult {
            bytes,
            iterations,
            avg_bps,
            peak_bps: peak_bps.max(avg_bps),
            msg_rate: iterations as f64 / secs,
        }
    }
}

/// The BW table header, as perftest prints it.
pub(crate) fn bw_header(gbits: bool) -> String {
    let unit = if gbits { "Gb/sec" } else { "MB/sec" };
    format!(" #bytes     #iterations    BW peak[{unit}]    BW average[{unit}]   MsgRate[Mpps]")
}

/// One BW table row.
pub(crate) fn bw_row(r: &BwResult, gbits: bool) -> String {
    let f = if gbits { GBIT } else { MIB };
    format!(
        " {:<10} {:<16} {:<18.2} {:<20.2} {:.6}",
        r.bytes,
        r.iterations,
        r.peak_bps / f,
        r.avg_bps / f,
        r.msg_rate / 1e6
    )
}

/// A BW result as JSON.
pub(crate) fn bw_json(r: &BwResult) -> serde_json::Value {
    json!({
        "bytes": r.bytes,
        "iterations": r.iterations,
        "bw_peak_mb_per_sec": r.peak_bps / MIB,
        "bw_avg_mb_per_sec": r.avg_bps / MIB,
        "bw_avg_gbit_per_sec": r.avg_bps / GBIT,
        "msg_rate_mpps": r.msg_rate / 1e6,
    })
}

/// Latency statistics in microseconds.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct LatResult {
    pub(crate) bytes: u64,
    pub(crate) iterations: u64,
    pub(crate) min: f64,
    pub(crate) max: f64,
    /// The median (perftest's "typical").
    pub(crate) typical: f64,
    pub(crate) avg: f64,
    pub(crate) stdev: f64,
    pub(crate) p99: f64,
    pub(crate) p999: f64,
}

impl LatResult {
    /// Statistics of per-iteration latencies (µs). Percentiles are the
    /// sample at rank ceil(p × n) as perftest computes them.
    pub(crate) fn from_samples(bytes: u64, samples: &mut [f64]) -> Option<LatResult> {
        if samples.is_empty() {
            return None;
        }
        samples.sort_by(|a, b| a.total_cmp(b));
        let n = samples.len();
        let avg = samples.iter().sum::<f64>() / n as f64;
        let var = samples.iter().map(|x| (x - avg) * (x - avg)).sum::<f64>() / n as f64;
        let rank = |p: f64| samples[(((p * n as f64).ceil() as usize).max(1) - 1).min(n - 1)];
        Some(LatResult {
            bytes,
            iterations: n as u64,
            min: samples[0],
            max: samples[n - 1],
            typical: samples[n / 2],
            avg,
            stdev: var.sqrt(),
            p99: rank(0.99),
            p999: rank(0.999),
        })
    }
}

/// The latency table header.
pub(crate) fn lat_header() -> String {
    " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] ".to_string()
}

/// One latency table row.
pub(crate) fn lat_row(r: &LatResult) -> String {
    let mut s = String::new();
    let _ = write!(
        s,
        " {:<7} {:<10} {:<14.2} {:<12.2} {:<16.2} {:<14.2} {:<15.2} {:<22.2} {:.2}",
        r.bytes, r.iterations, r.min, r.max, r.typical, r.avg, r.stdev, r.p99, r.p999
    );
    s
}

/// A latency result as JSON.
pub(crate) fn lat_json(r: &LatResult) -> serde_json::Value {
    json!({
        "bytes": r.bytes,
        "iterations": r.iterations,
        "t_min_usec": r.min,
        "t_max_usec": r.max,
        "t_typical_usec": r.typical,
        "t_avg_usec": r.avg,
        "t_stdev_usec": r.stdev,
        "p99_usec": r.p99,
        "p99_9_usec": r.p999,
    })
}

/// The dashed rule perftest prints between sections.
pub(crate) const RULE: &str =
    "---------------------------------------------------------------------------------------";

/// The error line for a failed work completion, with what the status
/// usually means for a perf run.
pub(super) fn failed(c: &Completion) -> String {
    format!(
        "work request failed: {} ({:?}) on QP {}{}",
        c.status().as_str(),
        c.status(),
        c.qp_num(),
        hint(c.status())
    )
}

/// What a failed status usually means here: retries exhausted is a peer
/// that stopped answering.
pub(super) fn hint(s: roce_verbs::WcStatus) -> &'static str {
    match s {
        roce_verbs::WcStatus::RetryExcErr => {
            " (the peer stopped answering: killed, or unreachable)"
        }
        _ => "",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A peer's `measured` message may claim any count: 2^64 - 1
    /// operations of 64 KiB overflowed `bytes * iterations` (a panic in
    /// debug builds, a wrapped rate in release ones).
    #[test]
    fn a_peers_huge_count_does_not_overflow() {
        let r = BwResult::new(65536, u64::MAX, 1.0, 0.0);
        assert!(r.avg_bps > 1e24 && r.avg_bps == r.peak_bps, "{r:?}");
        assert_eq!(r.iterations, u64::MAX);
    }

    #[test]
    fn latency_statistics() {
        let mut s: Vec<f64> = (1..=1000).map(|i| i as f64).collect();
        s.reverse();
        let r = LatResult::from_samples(2, &mut s).unwrap();
        assert_eq!((r.min, r.max, r.typical), (1.0, 1000.0, 501.0));
        assert!((r.avg - 500.5).abs() < 1e-9);
        assert!((r.stdev - 288.6749).abs() < 1e-3);
        assert_eq!((r.p99, r.p999), (990.0, 999.0));
        assert!(LatResult::from_samples(2, &mut []).is_none());
        let row = lat_row(&r);
        assert!(row.starts_with(" 2       1000       1.00"), "{row}");
    }

    #[test]
    fn bandwidth_units_follow_perftest() {
        // 1000 messages of 65536 bytes in 0.1 s = 655.36 MB/s... in MiB: 625.
        let r = BwResult::new(65536, 1000, 0.1, 0.0);
        assert!((r.avg_bps / MIB - 625.0).abs() < 1e-9);
        assert!((r.msg_rate - 10_000.0).abs() < 1e-6);
        let row = bw_row(&r, false);
        assert!(row.contains("625.00"), "{row}");
        let row = bw_row(&r, true);
        assert!(row.contains("5.24"), "{row}");
        assert!(bw_header(true).contains("BW average[Gb/sec]"));
        assert_eq!(r.peak_bps, r.avg_bps, "peak is at least the average");
    }
}
