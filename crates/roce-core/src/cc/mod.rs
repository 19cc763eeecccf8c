//! Congestion control: ECN marking of data packets, the DCQCN notification
//! point (CNP on CE), the reaction point in two variants (the paper's
//! [`dcqcn`] and NVIDIA's [`mlx5`]), and a per-QP [`pacing`] rate limiter
//! in the requester (docs/dcb.md §3–§4, docs/protocol.md §7).
//!
//! What goes on the wire: request packets carry the device's ECN codepoint
//! (`DeviceConfig::ecn`: Not-ECT by default, ECT(0) or ECT(1)); ACKs, NAKs
//! and CNPs are always Not-ECT. A CNP (opcode 0x81, BECN set, PSN 0, 16
//! reserved bytes) goes to the peer QP (`dest_qp_num`) with DSCP
//! `cnp_dscp` (48, priority 6 in the usual `dscp-prio 48:6` map); data keep
//! the address vector's traffic class.
//!
//! Per QP, with CC on: the reaction point owns the rate; while it limits
//! (after a CNP, until back at line rate) the requester may send a packet
//! only at the pacer's next-send time, and the QP's deadline (its entry in
//! the device's timer heap) is that time, so `Device::handle_timeout`
//! marks it ready again. The reaction point's own timers (rate increase,
//! deferred cut) and the notification point's hold-off go through the
//! same deadline.

pub mod dcqcn;
pub mod mlx5;
pub mod np;
pub mod pacing;

pub use dcqcn::{Dcqcn, DcqcnParams, Phase};
pub use mlx5::{DcqcnMlx5, Mlx5Params};
pub use np::NotificationPoint;
pub use pacing::Pacer;

use crate::Nanos;

/// The reaction point algorithm.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub enum CcAlgorithm {
    /// No rate control (the default): QPs send as fast as the link allows.
    #[default]
    None,
    /// DCQCN as in the paper.
    Dcqcn(DcqcnParams),
    /// DCQCN as NVIDIA mlx5 firmware runs it.
    DcqcnMlx5(Mlx5Params),
}

impl CcAlgorithm {
    /// "none", "dcqcn" or "dcqcn-mlx5".
    pub fn name(&self) -> &'static str {
        match self {
            CcAlgorithm::None => "none",
            CcAlgorithm::Dcqcn(_) => "dcqcn",
            CcAlgorithm::DcqcnMlx5(_) => "dcqcn-mlx5",
        }
    }
}

/// Congestion control settings of a device.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CcConfig {
    /// Reaction point algorithm.
    pub algorithm: CcAlgorithm,
    /// Answer CE-marked packets with CNPs (the notification point; on by
    /// default, as on NICs: it costs nothing when no packet is CE).
    pub np_enabled: bool,
    /// At most one CNP per QP per this interval, ns (default 4 µs as
    /// NVIDIA's `min_time_between_cnps` range 0–4 µs; the paper: 50 µs).
    pub min_time_between_cnps: Nanos,
    /// DSCP of CNPs (48).
    pub cnp_dscp: u8,
}

impl Default for CcConfig {
    fn default() -> CcConfig {
        CcConfig {
            algorithm: CcAlgorithm::None,
            np_enabled: true,
            min_time_between_cnps: 4_000,
            cnp_dscp: 48,
        }
    }
}

impl CcConfig {
    /// The paper's DCQCN with its 50 µs CNP interval.
    pub fn dcqcn() -> CcConfig {
        CcConfig {
            algorithm: CcAlgorithm::Dcqcn(DcqcnParams::default()),
            min_time_between_cnps: 50_000,
            ..CcConfig::default()
        }
    }

    /// NVIDIA's DCQCN with firmware defaults.
    pub fn dcqcn_mlx5() -> CcConfig {
        CcConfig::dcqcn_mlx5_with(Mlx5Params::default())
    }

    /// NVIDIA's DCQCN with these parameters (CNP interval 4 µs).
    pub fn dcqcn_mlx5_with(p: Mlx5Params) -> CcConfig {
        CcConfig {
            algorithm: CcAlgorithm::DcqcnMlx5(p),
            ..CcConfig::default()
        }
    }
}

/// Congestion control counters and state of one QP.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct CcCounters {
    /// CE-marked packets received (notification point).
    pub ce_received: u64,
    /// CNPs sent.
    pub cnp_sent: u64,
    /// CNPs received (reaction point).
    pub cnp_received: u64,
    /// Current sending rate in b/s (line rate when not limited).
    pub rate_bps: u64,
    /// Target rate in b/s.
    pub target_rate_bps: u64,
    /// α of the reaction point (0 without one).
    pub alpha: f64,
    /// Times the pacer held a packet back.
    pub paced: u64,
}

/// A reaction point of either variant.
#[derive(Clone, Debug)]
pub enum ReactionPoint {
    /// The paper's.
    Dcqcn(Dcqcn),
    /// NVIDIA's.
    Mlx5(DcqcnMlx5),
}

impl ReactionPoint {
    /// The reaction point of `alg` at line rate `line_bps` (None for no CC).
    pub fn new(alg: &CcAlgorithm, line_bps: u64) -> Option<ReactionPoint> {
        match alg {
            CcAlgorithm::None => None,
            CcAlgorithm::Dcqcn(p) => Some(ReactionPoint::Dcqcn(Dcqcn::new(*p, line_bps))),
            CcAlgorithm::DcqcnMlx5(p) => Some(ReactionPoint::Mlx5(DcqcnMlx5::new(*p, line_bps))),
        }
    }

    /// A CNP arrived.
    pub fn on_cnp(&mut self, now: Nanos) {
        match self {
            ReactionPoint::Dcqcn(r) => r.on_cnp(now),
            ReactionPoint::Mlx5(r) => r.on_cnp(now),
        }
    }

    /// Bytes were sent.
    pub fn on_bytes_sent(&mut self, n: u64, now: Nanos) {
        match self {
            ReactionPoint::Dcqcn(r) => r.on_bytes_sent(n, now),
            ReactionPoint::Mlx5(r) => r.on_bytes_sent(n, now),
        }
    }

    /// Timers due by `now`.
    pub fn on_timer(&mut self, now: Nanos) {
        match self {
            ReactionPoint::Dcqcn(r) => r.on_timer(now),
            ReactionPoint::Mlx5(r) => r.on_timer(now),
        }
    }

    /// Next timer deadline.
    pub fn poll_timeout(&self) -> Option<Nanos> {
        match self {
            ReactionPoint::Dcqcn(r) => r.poll_timeout(),
            ReactionPoint::Mlx5(r) => r.poll_timeout(),
        }
    }

    /// Current rate, b/s.
    pub fn rate(&self) -> u64 {
        match self {
            ReactionPoint::Dcqcn(r) => r.rate(),
            ReactionPoint::Mlx5(r) => r.rate(),
        }
    }

    /// Target rate, b/s.
    pub fn target_rate(&self) -> u64 {
        match self {
            ReactionPoint::Dcqcn(r) => r.target_rate(),
            ReactionPoint::Mlx5(r) => r.target_rate(),
        }
    }

    /// α as a fraction.
    pub fn alpha(&self) -> f64 {
        match self {
            ReactionPoint::Dcqcn(r) => r.alpha(),
            ReactionPoint::Mlx5(r) => r.alpha(),
        }
    }

    /// A rate limiter is allocated.
    pub fn is_limiting(&self) -> bool {
        match self {
            ReactionPoint::Dcqcn(r) => r.is_limiting(),
            ReactionPoint::Mlx5(r) => r.is_limiting(),
        }
    }
}

/// Congestion control state of one QP.
#[derive(Clone, Debug)]
pub(crate) struct QpCc {
    rp: Option<ReactionPoint>,
    np: NotificationPoint,
    np_enabled: bool,
    cnp_dscp: u8,
    pacer: Pacer,
    line_bps: u64,
    cnp_sent: u64,
    cnp_received: u64,
    paced: u64,
}

impl Default for QpCc {
    fn default() -> QpCc {
        QpCc::new(&CcConfig::default(), 100_000_000_000)
    }
}

impl QpCc {
    pub(crate) fn new(cfg: &CcConfig, line_bps: u64) -> QpCc {
        QpCc {
            rp: ReactionPoint::new(&cfg.algorithm, line_bps),
            np: NotificationPoint::new(cfg.min_time_between_cnps),
            np_enabled: cfg.np_enabled,
            cnp_dscp: cfg.cnp_dscp & 63,
            pacer: Pacer::default(),
            line_bps,
            cnp_sent: 0,
            cnp_received: 0,
            paced: 0,
        }
    }

    fn limiting(&self) -> bool {
        self.rp.as_ref().is_some_and(|r| r.is_limiting())
    }

    /// A CE-marked packet for this QP; true when a CNP became due.
    pub(crate) fn on_ce(&mut self, now: Nanos) -> bool {
        self.np_enabled && self.np.on_ce(now)
    }

    /// A CNP for this QP.
    pub(crate) fn on_cnp(&mut self, now: Nanos) {
        self.cnp_received += 1;
        if let Some(r) = &mut self.rp {
            r.on_cnp(now);
        }
    }

    fn rate(&self) -> u64 {
        self.rp.as_ref().map_or(self.line_bps, |r| r.rate())
    }

    /// May a request packet leave now? (Only the pacer can refuse.)
    pub(crate) fn may_send(&mut self, now: Nanos) -> bool {
        if !self.limiting() {
            return true;
        }
        let rate = self.rate();
        let ok = self.pacer.check(now, rate);
        if !ok {
            self.paced += 1;
        }
        ok
    }

    /// A request packet of `bytes` left at `now`.
    pub(crate) fn on_sent(&mut self, bytes: u64, now: Nanos) {
        let Some(r) = &mut self.rp else {
            return;
        };
        r.on_bytes_sent(bytes, now);
        if r.is_limiting() {
            let rate = r.rate();
            self.pacer.on_sent(bytes, now, rate);
        } else {
            self.pacer.reset();
        }
    }

    /// Timers due by `now`; true when a CNP became due.
    pub(crate) fn on_timer(&mut self, now: Nanos) -> bool {
        if let Some(r) = &mut self.rp {
            r.on_timer(now);
        }
        if !self.limiting() {
            self.pacer.reset();
        }
        let rate = self.rate();
        self.pacer.on_timer(now, rate);
        self.np.on_timer(now)
    }

    /// Earliest deadline of the CC machinery.
    pub(crate) fn poll_timeout(&self) -> Option<Nanos> {
        [
            self.rp.as_ref().and_then(|r| r.poll_timeout()),
            self.np.poll_timeout(),
            self.pacer.blocked_until(self.rate()),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    pub(crate) fn cnp_due(&self) -> bool {
        self.np.cnp_due()
    }

    /// Takes the due CNP (whether or not the QP can send it: a CNP that
    /// cannot be built is not retried forever); the DSCP it goes with.
    pub(crate) fn take_cnp(&mut self) -> u8 {
        self.np.take_cnp();
        self.cnp_dscp
    }

    /// A CNP left.
    pub(crate) fn cnp_sent(&mut self) {
        self.cnp_sent += 1;
    }

    pub(crate) fn counters(&self) -> CcCounters {
        CcCounters {
            ce_received: self.np.ce_received,
            cnp_sent: self.cnp_sent,
            cnp_received: self.cnp_received,
            rate_bps: self.rate(),
            target_rate_bps: self.rp.as_ref().map_or(self.line_bps, |r| r.target_rate()),
            alpha: self.rp.as_ref().map_or(0.0, |r| r.alpha()),
            paced: self.paced,
        }
    }
}
