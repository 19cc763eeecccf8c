//! Workloads: flow-size CDFs, Poisson arrivals at a target load, incasts.

use rand_core::{RngCore, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;
use serde::Serialize;

use crate::time::{Ps, SEC};

/// One flow: an RDMA WRITE of `size` bytes from `src` to `dst` posted at
/// `start`, on the QP of that host pair for `dscp`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct FlowSpec {
    /// Sending host.
    pub src: u32,
    /// Receiving host.
    pub dst: u32,
    /// Bytes.
    pub size: u64,
    /// Start time.
    pub start: Ps,
    /// DSCP of the QP (26 → priority 3 by default).
    pub dscp: u8,
}

/// A piecewise-linear flow-size CDF.
#[derive(Clone, Debug, PartialEq)]
pub struct Cdf {
    /// (size in bytes, cumulative percent), both non-decreasing, last 100.
    points: Vec<(f64, f64)>,
}

impl Cdf {
    /// Parses lines of `size percent` (`#` starts a comment).
    pub fn parse(text: &str) -> Result<Cdf, String> {
        let mut points: Vec<(f64, f64)> = Vec::new();
        for (n, line) in text.lines().enumerate() {
            let line = line.split('#').next().unwrap_or("").trim();
            if line.is_empty() {
                continue;
            }
            let mut it = line.split_whitespace();
            let (Some(a), Some(b), None) = (it.next(), it.next(), it.next()) else {
                return Err(format!("line {}: expected `size percent`", n + 1));
            };
            let size: f64 = a
                .parse()
                .map_err(|_| format!("line {}: bad size `{a}`", n + 1))?;
            let pct: f64 = b
                .parse()
                .map_err(|_| format!("line {}: bad percent `{b}`", n + 1))?;
            if !(size >= 0.0 && (0.0..=100.0).contains(&pct)) {
                return Err(format!("line {}: out of range", n + 1));
            }
            if let Some(&(ps, pp)) = points.last() {
                if size < ps || pct < pp {
                    return Err(format!("line {}: CDF must not decrease", n + 1));
                }
            }
            points.push((size, pct));
        }
        let cdf = match points.last() {
            Some(&(_, p)) if (p - 100.0).abs() < 1e-9 => Cdf { points },
            _ => return Err("the CDF must end at 100 percent".into()),
        };
        // A mean of 0 would make the arrival rate infinite.
        if cdf.mean() < 1.0 {
            return Err("the CDF's mean flow size is under 1 byte".into());
        }
        Ok(cdf)
    }

    /// The WebSearch CDF (docs/dcb.md §6).
    pub fn websearch() -> Cdf {
        Cdf::parse(include_str!("../cdf/websearch.txt")).expect("shipped CDF parses")
    }

    /// The FB_Hadoop CDF (docs/dcb.md §6).
    pub fn fb_hadoop() -> Cdf {
        Cdf::parse(include_str!("../cdf/fb_hadoop.txt")).expect("shipped CDF parses")
    }

    /// A shipped CDF by name (`websearch`, `fb_hadoop`).
    pub fn named(name: &str) -> Option<Cdf> {
        match name {
            "websearch" | "web_search" => Some(Cdf::websearch()),
            "fb_hadoop" | "hadoop" => Some(Cdf::fb_hadoop()),
            _ => None,
        }
    }

    /// Mean flow size in bytes.
    pub fn mean(&self) -> f64 {
        self.points
            .windows(2)
            .map(|w| (w[1].1 - w[0].1) / 100.0 * (w[0].0 + w[1].0) / 2.0)
            .sum::<f64>()
            + self.points[0].1 / 100.0 * self.points[0].0
    }

    /// The size at quantile `u` in [0, 1), interpolated, at least 1 byte.
    pub fn sample(&self, u: f64) -> u64 {
        let p = u * 100.0;
        let mut prev = self.points[0];
        if p <= prev.1 {
            return (prev.0 as u64).max(1);
        }
        for &pt in &self.points[1..] {
            if p <= pt.1 {
                let span = pt.1 - prev.1;
                let f = if span > 0.0 { (p - prev.1) / span } else { 1.0 };
                return ((prev.0 + f * (pt.0 - prev.0)).round() as u64).max(1);
            }
            prev = pt;
        }
        (prev.0 as u64).max(1)
    }
}

/// A uniform f64 in [0, 1).
pub(crate) fn unit(r: &mut Xoshiro256PlusPlus) -> f64 {
    (r.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
}

/// Poisson arrivals between `start` and `stop` among `hosts` hosts: each
/// host offers `load` × `host_bps` on average; sizes from `cdf`; source
/// and destination uniformly random, distinct.
#[allow(clippy::too_many_arguments)]
pub fn poisson(
    hosts: u32,
    cdf: &Cdf,
    load: f64,
    host_bps: u64,
    start: Ps,
    stop: Ps,
    dscp: u8,
    seed: u64,
) -> Vec<FlowSpec> {
    let mut out = Vec::new();
    if hosts < 2 || load <= 0.0 {
        return out;
    }
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed);
    // Flows per second over the whole fabric.
    let lambda = load * host_bps as f64 * hosts as f64 / (8.0 * cdf.mean());
    let mut t = start as f64;
    loop {
        t += -(1.0 - unit(&mut rng)).ln() / lambda * SEC as f64;
        // The scenario caps the expected count (MAX_FLOWS); this bounds
        // what chance can add to it.
        if t >= stop as f64 || out.len() as u64 >= 2 * crate::scenario::MAX_FLOWS {
            return out;
        }
        let src = (rng.next_u64() % hosts as u64) as u32;
        let mut dst = (rng.next_u64() % (hosts as u64 - 1)) as u32;
        if dst >= src {
            dst += 1;
        }
        out.push(FlowSpec {
            src,
            dst,
            size: cdf.sample(unit(&mut rng)),
            start: t as Ps,
            dscp,
        });
    }
}

/// An N:1 incast: every sender writes `size` bytes to `receiver` at `time`.
pub fn incast(senders: &[u32], receiver: u32, size: u64, time: Ps, dscp: u8) -> Vec<FlowSpec> {
    senders
        .iter()
        .map(|&src| FlowSpec {
            src,
            dst: receiver,
            size,
            start: time,
            dscp,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shipped_cdfs() {
        let w = Cdf::websearch();
        let h = Cdf::fb_hadoop();
        assert_eq!(w.sample(0.15), 10_000);
        assert_eq!(w.sample(0.999_999), 29_999_333);
        assert_eq!(h.sample(0.5), 700);
        // Means of the piecewise-linear CDFs.
        assert!((w.mean() - 1_711_250.0).abs() < 1.0, "{}", w.mean());
        assert!((h.mean() - 120_420.75).abs() < 1.0, "{}", h.mean());
    }

    #[test]
    fn cdf_errors() {
        assert!(Cdf::parse("0 0\n10 50").unwrap_err().contains("100"));
        assert!(Cdf::parse("0 0\n10 60\n5 100")
            .unwrap_err()
            .contains("decrease"));
        assert!(Cdf::parse("0 0\nx 100").unwrap_err().contains("bad size"));
    }

    #[test]
    fn poisson_offers_the_load() {
        let cdf = Cdf::fb_hadoop();
        let f = poisson(
            16,
            &cdf,
            0.3,
            100_000_000_000,
            0,
            100 * crate::time::MS,
            26,
            7,
        );
        let bytes: u64 = f.iter().map(|f| f.size).sum();
        let offered = bytes as f64 * 8.0 / 0.1 / 16.0 / 100e9;
        assert!((offered - 0.3).abs() < 0.03, "offered {offered}");
        assert!(f.iter().all(|f| f.src != f.dst && f.src < 16 && f.dst < 16));
        assert!(f.windows(2).all(|w| w[0].start <= w[1].start));
    }

    /// A CDF whose sizes are all 0 has no arrival rate (the mean is the
    /// divisor): refused.
    #[test]
    fn a_cdf_of_empty_flows_is_refused() {
        assert!(Cdf::parse("0 0\n0 100\n").is_err());
        assert!(Cdf::parse("0 0\n10 100\n").is_ok());
    }
}
