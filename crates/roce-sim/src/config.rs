//! Fabric, host and measurement parameters (everything but topology and
//! workload), with the published defaults of `docs/dcb.md`.

use roce_core::CcConfig;
use roce_wire::Ecn;
use serde::Serialize;

use crate::dcb::Dcb;
use crate::time::{Ps, US};

/// RED/ECN marking of one traffic class on an egress queue (docs/dcb.md §3).
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct EcnTc {
    /// No marking at or below this queue depth (bytes).
    pub kmin: u64,
    /// Probability `pmax` at this depth; 1 above it.
    pub kmax: u64,
    /// Marking probability at `kmax`.
    pub pmax: f64,
}

impl EcnTc {
    /// RED marking probability at queue depth `q` bytes:
    /// 0 for q ≤ Kmin, Pmax·(q−Kmin)/(Kmax−Kmin) up to Kmax, 1 above.
    pub fn probability(&self, q: u64) -> f64 {
        if q <= self.kmin {
            0.0
        } else if q <= self.kmax {
            if self.kmax == self.kmin {
                return self.pmax;
            }
            self.pmax * (q - self.kmin) as f64 / (self.kmax - self.kmin) as f64
        } else {
            1.0
        }
    }
}

/// How a switch decides XOFF for an ingress (port, priority).
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub enum Xoff {
    /// Pause when the ingress bytes of the (port, priority) exceed this.
    Static(u64),
    /// Pause above `alpha × (buffer − headroom reserve − shared used)`.
    Dynamic(f64),
}

/// Headroom per lossless ingress (port, priority).
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub enum Headroom {
    /// `2 × max frame + 2 × link delay × rate + PFC response (1 max frame
    /// + 1 PFC frame)`, computed per port from its link.
    Auto,
    /// A fixed number of bytes.
    Bytes(u64),
}

/// Shared-buffer and PFC thresholds of every switch.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct BufferConfig {
    /// Total buffer bytes per switch.
    pub size: u64,
    /// XOFF rule.
    pub xoff: Xoff,
    /// XON when the ingress bytes fall to the threshold minus this.
    pub resume_offset: u64,
    /// Headroom per lossless ingress (port, priority).
    pub headroom: Headroom,
}

impl Default for BufferConfig {
    fn default() -> BufferConfig {
        BufferConfig {
            size: 32 << 20,
            xoff: Xoff::Dynamic(0.125),
            resume_offset: 3 * 1024,
            headroom: Headroom::Auto,
        }
    }
}

/// The PFC watchdog (docs/dcb.md §1): poll, detect a stuck queue, drop.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct WatchdogConfig {
    /// Poll interval.
    pub poll: Ps,
    /// Polls of a paused, non-draining, non-empty queue before acting.
    pub detect: u32,
    /// How long the queue's packets (queued and arriving) are dropped and
    /// pauses for it ignored.
    pub restore: Ps,
}

/// Everything about the switches and links except the wiring.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct FabricConfig {
    /// PFC, ETS and DSCP→priority settings (the same on every port).
    pub dcb: Dcb,
    /// ECN marking per traffic class (None: no marking).
    pub ecn: [Option<EcnTc>; 8],
    /// Buffer and thresholds.
    pub buffer: BufferConfig,
    /// Quanta in an XOFF frame.
    pub pfc_quanta: u16,
    /// Re-send XOFF after this fraction of the pause time while congested.
    pub pfc_refresh: f64,
    /// PFC watchdog, if enabled.
    pub watchdog: Option<WatchdogConfig>,
    /// DWRR quantum per percent of tc-bw, in bytes.
    pub dwrr_quantum_per_pct: u32,
}

impl Default for FabricConfig {
    fn default() -> FabricConfig {
        FabricConfig {
            dcb: Dcb::default(),
            ecn: [None; 8],
            buffer: BufferConfig::default(),
            pfc_quanta: 0xffff,
            pfc_refresh: 0.5,
            watchdog: None,
            dwrr_quantum_per_pct: 256,
        }
    }
}

/// Host NIC and application settings.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct HostConfig {
    /// Path MTU of the QPs (256..=4096).
    pub mtu: u32,
    /// ECN codepoint of the engine's packets.
    #[serde(skip)]
    pub ecn: Ecn,
    /// IBA local ACK timeout exponent (4.096 µs × 2^t; 0 = never).
    pub qp_timeout: u8,
    /// Default DSCP of flows (26 → priority 3).
    pub dscp: u8,
    /// Congestion control of every NIC (DCQCN variant and parameters,
    /// CNP interval and DSCP). Off by default.
    #[serde(skip)]
    pub cc: CcConfig,
}

impl Default for HostConfig {
    fn default() -> HostConfig {
        HostConfig {
            mtu: 1024,
            ecn: Ecn::Ect0,
            qp_timeout: 14,
            dscp: 26,
            cc: CcConfig::default(),
        }
    }
}

/// What to measure and how often.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct MetricsConfig {
    /// Queue sampling interval (0: off).
    pub sample_interval: Ps,
    /// At most this many queue samples are kept.
    pub max_queue_samples: usize,
    /// Per-connection throughput bin width (0: off).
    pub throughput_bin: Ps,
    /// Deadlock check interval (0: off).
    pub deadlock_check: Ps,
    /// A pause cycle must persist this long to be reported.
    pub deadlock_after: Ps,
    /// Upper bounds (bytes, exclusive) of the flow-size buckets; a last
    /// bucket catches the rest.
    pub size_buckets: Vec<u64>,
    /// Start of the fairness window (Jain's index over the throughput of
    /// the flows active from here until the first of them completes).
    pub convergence: Ps,
}

impl Default for MetricsConfig {
    fn default() -> MetricsConfig {
        MetricsConfig {
            sample_interval: 10 * US,
            max_queue_samples: 1_000_000,
            throughput_bin: 10 * US,
            deadlock_check: 10 * US,
            deadlock_after: 100 * US,
            size_buckets: vec![1_000, 10_000, 100_000, 1_000_000, 10_000_000],
            convergence: 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn red_curve() {
        let e = EcnTc {
            kmin: 5_000,
            kmax: 200_000,
            pmax: 0.01,
        };
        assert_eq!(e.probability(0), 0.0);
        assert_eq!(e.probability(5_000), 0.0);
        assert!((e.probability(102_500) - 0.005).abs() < 1e-12);
        assert!((e.probability(200_000) - 0.01).abs() < 1e-12);
        assert_eq!(e.probability(200_001), 1.0);
    }
}
