//! DCQCN reaction point as NVIDIA mlx5 firmware exposes it (the
//! `/sys/class/net/<if>/ecn/roce_rp/` parameters, docs/dcb.md §4), as a sans-IO
//! state machine. The increase procedure is the paper's (see
//! [`super::dcqcn`]) with F = `rpg_threshold`, R_AI = `rpg_ai_rate`,
//! R_HAI = `rpg_hai_rate`, T_inc = `rpg_time_reset` and
//! B = `rpg_byte_reset` × 64 bytes. What differs:
//!
//! ```text
//! α in 1/1024 units (A, 0..=1023), updated every dce_tcp_rtt:
//!     A ← ⌊A·dce_tcp_g/1024⌋ + (1024 − dce_tcp_g)·[a CNP arrived in the period]
//! first CNP:  Rc ← Rt ← rate_to_set_on_first_cnp (0 = line rate); A ← initial_alpha_value
//! cut (at most one per rate_reduce_monitor_period):
//!     Rc ← max(rpg_min_rate, Rc·rpg_min_dec_fac/100, Rc − Rc·A/2^rpg_gd)
//!     Rt ← Rc_before if clamp_tgt_rate, or if clamp_tgt_rate_after_time_inc
//!           and a timer increase happened since the last cut, or on the first cut
//! ```
//!
//! Choices where sources differ: `rpg_byte_reset` is taken in 64-byte
//! units (32767 → 2 MiB; NVIDIA's page says bytes, which would fire every
//! 6.5 µs at 40 G and make the byte counter dominate; several firmware
//! notes say 64 B). A CNP inside a monitor period after a cut defers one
//! cut to the period's end ("reduced at the beginning of the next
//! rate_reduce_monitor_period"). α's periodic update is computed lazily
//! with the exact integer recurrence. A limiter released at line rate is
//! a new flow context: its next CNP is a first CNP again.

use super::dcqcn::{increase, Phase};
use crate::Nanos;

/// mlx5 `roce_rp` parameters, with the firmware's names, units and
/// defaults.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Mlx5Params {
    /// µs between rate increases without CNPs (300).
    pub rpg_time_reset: u32,
    /// Bytes sent between rate increases, in 64-byte units (32767).
    pub rpg_byte_reset: u32,
    /// Increase events before leaving fast recovery (F, 1).
    pub rpg_threshold: u32,
    /// Additive increase in Mb/s (5).
    pub rpg_ai_rate: u32,
    /// Hyper increase in Mb/s (50).
    pub rpg_hai_rate: u32,
    /// log2 of the cut divisor: cut = Rc·A/2^gd with A in 1/1024 (11).
    pub rpg_gd: u32,
    /// Lowest factor of Rc one cut may leave, percent (50).
    pub rpg_min_dec_fac: u32,
    /// Lowest rate in Mb/s (1).
    pub rpg_min_rate: u32,
    /// Rate on the first CNP in Mb/s (0 = line rate).
    pub rate_to_set_on_first_cnp: u32,
    /// α gain: 1 − g = dce_tcp_g/1024 (1019, g = 5/1024).
    pub dce_tcp_g: u32,
    /// α update period in µs (1).
    pub dce_tcp_rtt: u32,
    /// At most one cut per this many µs (4).
    pub rate_reduce_monitor_period: u32,
    /// α on the first CNP, in 1/1024 (1023).
    pub initial_alpha_value: u32,
    /// Rt ← Rc on every cut (false).
    pub clamp_tgt_rate: bool,
    /// Rt ← Rc on a cut after a timer increase (true).
    pub clamp_tgt_rate_after_time_inc: bool,
}

impl Default for Mlx5Params {
    fn default() -> Mlx5Params {
        Mlx5Params {
            rpg_time_reset: 300,
            rpg_byte_reset: 32767,
            rpg_threshold: 1,
            rpg_ai_rate: 5,
            rpg_hai_rate: 50,
            rpg_gd: 11,
            rpg_min_dec_fac: 50,
            rpg_min_rate: 1,
            rate_to_set_on_first_cnp: 0,
            dce_tcp_g: 1019,
            dce_tcp_rtt: 1,
            rate_reduce_monitor_period: 4,
            initial_alpha_value: 1023,
            clamp_tgt_rate: false,
            clamp_tgt_rate_after_time_inc: true,
        }
    }
}

const US: Nanos = 1_000;
const MBPS: f64 = 1e6;

/// The mlx5 reaction point of one QP.
#[derive(Clone, Debug)]
pub struct DcqcnMlx5 {
    p: Mlx5Params,
    line: f64,
    rc: f64,
    rt: f64,
    /// α in 1/1024 units.
    alpha: u32,
    /// Start of the current α period.
    alpha_at: Nanos,
    cnp_in_period: bool,
    t: u32,
    bc: u32,
    bytes: u64,
    active: bool,
    next_inc: Nanos,
    last_cut: Option<Nanos>,
    cut_pending: bool,
    timer_inc_since_cut: bool,
    phase: Phase,
}

impl DcqcnMlx5 {
    /// A reaction point at line rate `line_bps`.
    pub fn new(p: Mlx5Params, line_bps: u64) -> DcqcnMlx5 {
        let line = line_bps.max(1) as f64;
        DcqcnMlx5 {
            p,
            line,
            rc: line,
            rt: line,
            alpha: p.initial_alpha_value.min(1023),
            alpha_at: 0,
            cnp_in_period: false,
            t: 0,
            bc: 0,
            bytes: 0,
            active: false,
            next_inc: 0,
            last_cut: None,
            cut_pending: false,
            timer_inc_since_cut: false,
            phase: Phase::LineRate,
        }
    }

    fn alpha_period(&self) -> Nanos {
        (self.p.dce_tcp_rtt as Nanos * US).max(1)
    }

    fn monitor_period(&self) -> Nanos {
        self.p.rate_reduce_monitor_period as Nanos * US
    }

    fn byte_reset(&self) -> u64 {
        self.p.rpg_byte_reset as u64 * 64
    }

    /// Applies the α updates of the periods that ended by `now`.
    fn settle_alpha(&mut self, now: Nanos) {
        if !self.active {
            self.alpha_at = now;
            self.cnp_in_period = false;
            return;
        }
        let per = self.alpha_period();
        if now < self.alpha_at + per {
            return;
        }
        let n = (now - self.alpha_at) / per;
        let g = self.p.dce_tcp_g.min(1024);
        for i in 0..n.min(4096) {
            let cnp = i == 0 && self.cnp_in_period;
            self.alpha = (self.alpha * g / 1024 + if cnp { 1024 - g } else { 0 }).min(1023);
            if self.alpha == 0 && i > 0 {
                break;
            }
        }
        self.cnp_in_period = false;
        self.alpha_at += n * per;
    }

    /// A CNP arrived for this QP.
    pub fn on_cnp(&mut self, now: Nanos) {
        self.settle_alpha(now);
        if !self.active {
            self.active = true;
            let first = match self.p.rate_to_set_on_first_cnp {
                0 => self.line,
                r => (r as f64 * MBPS).min(self.line),
            };
            self.rc = first;
            self.rt = first;
            // A new limiter starts from initial_alpha_value (the flow's
            // context was released at line rate).
            self.alpha = self.p.initial_alpha_value.min(1023);
            self.alpha_at = now;
            self.cnp_in_period = false;
            self.cut(now, true);
        } else if self
            .last_cut
            .is_none_or(|t| now >= t + self.monitor_period())
        {
            self.cut(now, false);
        } else {
            self.cut_pending = true;
        }
        self.cnp_in_period = true;
    }

    fn cut(&mut self, now: Nanos, first: bool) {
        let before = self.rc;
        if first
            || self.p.clamp_tgt_rate
            || (self.p.clamp_tgt_rate_after_time_inc && self.timer_inc_since_cut)
        {
            self.rt = before;
        }
        let dec = before * self.alpha as f64 / (1u64 << self.p.rpg_gd.min(40)) as f64;
        let floor = (before * self.p.rpg_min_dec_fac.min(100) as f64 / 100.0)
            .max(self.p.rpg_min_rate as f64 * MBPS);
        self.rc = (before - dec).max(floor).min(self.line);
        self.t = 0;
        self.bc = 0;
        self.bytes = 0;
        self.timer_inc_since_cut = false;
        self.cut_pending = false;
        self.last_cut = Some(now);
        self.next_inc = now + (self.p.rpg_time_reset as Nanos * US).max(1);
        self.phase = Phase::Cut;
    }

    fn step(&mut self) {
        self.phase = increase(
            self.t,
            self.bc,
            self.p.rpg_threshold,
            self.p.rpg_ai_rate as f64 * MBPS,
            self.p.rpg_hai_rate as f64 * MBPS,
            &mut self.rt,
            &mut self.rc,
            self.line,
        );
        self.active = self.phase != Phase::LineRate;
    }

    /// `n` bytes were sent (the byte counter).
    pub fn on_bytes_sent(&mut self, n: u64, _now: Nanos) {
        let b = self.byte_reset();
        if !self.active || b == 0 {
            return;
        }
        self.bytes += n;
        while self.active && self.bytes >= b {
            self.bytes -= b;
            self.bc += 1;
            self.step();
        }
    }

    /// Runs the timers due by `now`.
    pub fn on_timer(&mut self, now: Nanos) {
        if self.cut_pending {
            if let Some(t) = self.last_cut {
                if now >= t + self.monitor_period() {
                    self.settle_alpha(now);
                    self.cut(now, false);
                }
            }
        }
        self.settle_alpha(now);
        let per = (self.p.rpg_time_reset as Nanos * US).max(1);
        while self.active && now >= self.next_inc {
            self.next_inc += per;
            self.t += 1;
            self.timer_inc_since_cut = true;
            self.step();
        }
    }

    /// When [`DcqcnMlx5::on_timer`] has work.
    pub fn poll_timeout(&self) -> Option<Nanos> {
        let pending = self
            .cut_pending
            .then(|| self.last_cut.map(|t| t + self.monitor_period()))
            .flatten();
        let inc = self.active.then_some(self.next_inc);
        match (pending, inc) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Current rate in b/s.
    pub fn rate(&self) -> u64 {
        self.rc as u64
    }

    /// Target rate in b/s.
    pub fn target_rate(&self) -> u64 {
        self.rt as u64
    }

    /// α as a fraction (A/1024) as of the last event.
    pub fn alpha(&self) -> f64 {
        self.alpha as f64 / 1024.0
    }

    /// α in 1/1024 units at `now`.
    pub fn alpha_units_at(&self, now: Nanos) -> u32 {
        let mut c = self.clone();
        c.settle_alpha(now);
        c.alpha
    }

    /// True while a rate limiter is allocated.
    pub fn is_limiting(&self) -> bool {
        self.active
    }

    /// The step that ran last.
    pub fn phase(&self) -> Phase {
        self.phase
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const G100: u64 = 100_000_000_000;

    #[test]
    fn first_cnp_cuts_from_line_rate_by_alpha_over_two() {
        let mut r = DcqcnMlx5::new(Mlx5Params::default(), G100);
        r.on_cnp(10 * US);
        // Rc = 100G − 100G·1023/2048.
        let want = 100e9 - 100e9 * 1023.0 / 2048.0;
        assert!((r.rate() as f64 - want).abs() < 1.0, "{}", r.rate());
        assert_eq!(r.target_rate(), G100);
        // The α period that held the CNP: A = ⌊1023·1019/1024⌋ + 5 = 1018 + 5.
        assert_eq!(r.alpha_units_at(11 * US), 1023 * 1019 / 1024 + 5);
        // Then decay only: ⌊1023·1019/1024⌋ = 1018.
        assert_eq!(
            r.alpha_units_at(12 * US),
            (1023 * 1019 / 1024 + 5) * 1019 / 1024
        );
    }

    #[test]
    fn one_cut_per_monitor_period_the_rest_deferred() {
        let mut r = DcqcnMlx5::new(Mlx5Params::default(), G100);
        r.on_cnp(0);
        let after_first = r.rate();
        r.on_cnp(US);
        r.on_cnp(2 * US);
        assert_eq!(r.rate(), after_first, "no second cut inside 4 µs");
        assert_eq!(r.poll_timeout(), Some(4 * US));
        r.on_timer(4 * US);
        assert!(r.rate() < after_first);
        // Rt was not clamped (no timer increase since the first cut).
        assert_eq!(r.target_rate(), G100);
        // No further deferred cut: next deadline is the rate timer.
        assert_eq!(r.poll_timeout(), Some(4 * US + 300 * US));
    }

    #[test]
    fn threshold_one_gives_one_fast_recovery_step_then_additive() {
        let mut r = DcqcnMlx5::new(Mlx5Params::default(), G100);
        r.on_cnp(0);
        let rc0 = r.rate() as f64;
        r.on_timer(300 * US);
        assert_eq!(r.phase(), Phase::FastRecovery);
        let rc1 = (100e9 + rc0) / 2.0;
        assert!((r.rate() as f64 - rc1).abs() < 1.0);
        r.on_timer(600 * US);
        assert_eq!(r.phase(), Phase::Additive);
        // Rt was already at line rate: stays there.
        assert_eq!(r.target_rate(), G100);
        // A cut after a timer increase clamps Rt to the current rate.
        let before = r.rate();
        r.on_cnp(700 * US);
        assert_eq!(r.target_rate(), before);
    }

    #[test]
    fn byte_counter_in_64_byte_units_and_min_dec_fac() {
        let p = Mlx5Params {
            rpg_byte_reset: 16, // 1024 bytes
            rpg_gd: 1,          // cut = Rc·A/2: capped by min_dec_fac 50 %
            ..Mlx5Params::default()
        };
        let mut r = DcqcnMlx5::new(p, G100);
        r.on_cnp(0);
        assert_eq!(r.rate(), 50_000_000_000);
        r.on_bytes_sent(1023, US);
        assert_eq!(r.phase(), Phase::Cut);
        r.on_bytes_sent(1, US);
        assert_eq!(r.phase(), Phase::FastRecovery);
        assert_eq!(r.rate(), 75_000_000_000);
    }
}
