//! DCQCN reaction point, the paper version (Zhu et al., SIGCOMM 2015,
//! docs/dcb.md §4), as a sans-IO state machine.
//!
//! State per QP: current rate `Rc`, target rate `Rt`, `α`, the timer stage
//! `T` and the byte stage `BC`. Implemented equations:
//!
//! ```text
//! on CNP:       Rt ← Rc;  Rc ← max(Rmin, Rc·(1 − α/2));  α ← (1 − g)·α + g
//!               T ← BC ← 0; byte counter, α timer and rate timer restart
//! α timer:      every K without a CNP:  α ← (1 − g)·α
//! rate timer:   every T_inc:            T ← T + 1; increase()
//! byte counter: every B bytes sent:     BC ← BC + 1; increase()
//! increase():   max(T, BC) ≤ F   → fast recovery   Rc ← (Rt + Rc)/2
//!               min(T, BC) > F   → hyper increase  Rt ← Rt + (min(T, BC) − F)·R_HAI
//!                                                  Rc ← (Rt + Rc)/2
//!               otherwise        → additive        Rt ← Rt + R_AI; Rc ← (Rt + Rc)/2
//!               Rt ← min(Rt, line); Rc ← min(Rc, line)
//! ```
//!
//! Choices where implementations differ:
//! * the cut uses α *before* the CNP's own α update (the order above, as
//!   in the paper's Algorithm 1 and ns3-rdma);
//! * stages are counted after incrementing and compared with `≤ F`, so a
//!   cut is followed by exactly F fast-recovery steps (T = 1..=F);
//! * α starts at `initial_alpha` (1) and its timer starts at the first CNP:
//!   a QP that never saw a CNP cuts by half on its first one;
//! * α decay is computed lazily (exactly as a periodic K timer restarted at
//!   every CNP would give), so it costs no timer events;
//! * the rate limiter is released (pacing off, rate timer stopped) once
//!   `Rc` is within 1 Mb/s of line rate; α keeps decaying meanwhile.

use crate::Nanos;

/// Paper DCQCN parameters (defaults from the paper; `r_hai` and `r_min`
/// are not fixed by it).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DcqcnParams {
    /// α gain g (paper: 1/256).
    pub g: f64,
    /// α update period K without CNPs (paper: 55 µs).
    pub k: Nanos,
    /// Rate increase timer period T_inc (paper: 55 µs).
    pub t_inc: Nanos,
    /// Byte counter B (paper: 10 MB = 10 000 000 bytes).
    pub b: u64,
    /// Fast recovery steps F (paper: 5).
    pub f: u32,
    /// Additive increase R_AI in b/s (paper: 40 Mb/s).
    pub r_ai: u64,
    /// Hyper increase R_HAI in b/s (default 200 Mb/s = 5 × R_AI; simulators
    /// use 5–10 × R_AI).
    pub r_hai: u64,
    /// Lowest rate Rmin in b/s (default 10 Mb/s).
    pub r_min: u64,
    /// α before the first CNP (paper: 1).
    pub initial_alpha: f64,
}

impl Default for DcqcnParams {
    fn default() -> DcqcnParams {
        DcqcnParams {
            g: 1.0 / 256.0,
            k: 55_000,
            t_inc: 55_000,
            b: 10_000_000,
            f: 5,
            r_ai: 40_000_000,
            r_hai: 200_000_000,
            r_min: 10_000_000,
            initial_alpha: 1.0,
        }
    }
}

/// Which increase step ran last (for tests and traces).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// No limiter: the QP sends at line rate.
    LineRate,
    /// Just cut.
    Cut,
    /// Fast recovery: Rc ← (Rt + Rc)/2.
    FastRecovery,
    /// Additive increase of Rt.
    Additive,
    /// Hyper increase of Rt.
    Hyper,
}

/// The increase step shared by both variants: counters, thresholds and
/// rates in b/s. Returns the phase it applied, or [`Phase::LineRate`] when
/// Rc came within [`RELEASE_BPS`] of line rate: then Rc and Rt are set to
/// line rate and the caller frees the limiter.
#[allow(clippy::too_many_arguments)]
pub(crate) fn increase(
    t: u32,
    bc: u32,
    f: u32,
    r_ai: f64,
    r_hai: f64,
    rt: &mut f64,
    rc: &mut f64,
    line: f64,
) -> Phase {
    let phase = if t.max(bc) <= f {
        Phase::FastRecovery
    } else if t.min(bc) > f {
        *rt += (t.min(bc) - f) as f64 * r_hai;
        Phase::Hyper
    } else {
        *rt += r_ai;
        Phase::Additive
    };
    *rt = rt.min(line);
    *rc = ((*rt + *rc) / 2.0).min(line);
    if *rc >= line - RELEASE_BPS {
        *rc = line;
        *rt = line;
        return Phase::LineRate;
    }
    phase
}

/// Within this of line rate the limiter is released.
const RELEASE_BPS: f64 = 1e6;

/// The paper's reaction point of one QP.
#[derive(Clone, Debug)]
pub struct Dcqcn {
    p: DcqcnParams,
    line: f64,
    rc: f64,
    rt: f64,
    alpha: f64,
    t: u32,
    bc: u32,
    bytes: u64,
    /// A rate limiter is allocated (Rc below line rate).
    active: bool,
    /// α has been updated by a CNP (its timer runs from `alpha_at`).
    alpha_started: bool,
    alpha_at: Nanos,
    next_inc: Nanos,
    phase: Phase,
}

impl Dcqcn {
    /// A reaction point at line rate `line_bps`.
    pub fn new(p: DcqcnParams, line_bps: u64) -> Dcqcn {
        let line = line_bps.max(1) as f64;
        Dcqcn {
            p,
            line,
            rc: line,
            rt: line,
            alpha: p.initial_alpha,
            t: 0,
            bc: 0,
            bytes: 0,
            active: false,
            alpha_started: false,
            alpha_at: 0,
            next_inc: 0,
            phase: Phase::LineRate,
        }
    }

    /// Applies the α timer ticks due by `now` (α ← (1 − g)·α per K).
    fn settle_alpha(&mut self, now: Nanos) {
        if !self.alpha_started || self.p.k == 0 || now < self.alpha_at + self.p.k {
            return;
        }
        let n = (now - self.alpha_at) / self.p.k;
        self.alpha *= (1.0 - self.p.g).powi(n.min(i32::MAX as u64) as i32);
        self.alpha_at += n * self.p.k;
    }

    /// A CNP arrived for this QP.
    pub fn on_cnp(&mut self, now: Nanos) {
        self.settle_alpha(now);
        if !self.active {
            self.active = true;
            self.rc = self.line;
            self.rt = self.line;
        }
        self.rt = self.rc;
        self.rc = (self.rc * (1.0 - self.alpha / 2.0)).max(self.p.r_min as f64);
        self.alpha = (1.0 - self.p.g) * self.alpha + self.p.g;
        self.alpha_started = true;
        self.alpha_at = now;
        self.t = 0;
        self.bc = 0;
        self.bytes = 0;
        self.next_inc = now + self.p.t_inc.max(1);
        self.phase = Phase::Cut;
    }

    fn step(&mut self) {
        self.phase = increase(
            self.t,
            self.bc,
            self.p.f,
            self.p.r_ai as f64,
            self.p.r_hai as f64,
            &mut self.rt,
            &mut self.rc,
            self.line,
        );
        self.active = self.phase != Phase::LineRate;
    }

    /// `n` bytes were sent (the byte counter).
    pub fn on_bytes_sent(&mut self, n: u64, _now: Nanos) {
        if !self.active || self.p.b == 0 {
            return;
        }
        self.bytes += n;
        while self.active && self.bytes >= self.p.b {
            self.bytes -= self.p.b;
            self.bc += 1;
            self.step();
        }
    }

    /// Runs the timers due by `now`.
    pub fn on_timer(&mut self, now: Nanos) {
        self.settle_alpha(now);
        while self.active && now >= self.next_inc {
            self.next_inc += self.p.t_inc.max(1);
            self.t += 1;
            self.step();
        }
    }

    /// When [`Dcqcn::on_timer`] has work.
    pub fn poll_timeout(&self) -> Option<Nanos> {
        self.active.then_some(self.next_inc)
    }

    /// Current sending rate in b/s (line rate when no limiter).
    pub fn rate(&self) -> u64 {
        self.rc as u64
    }

    /// Target rate in b/s.
    pub fn target_rate(&self) -> u64 {
        self.rt as u64
    }

    /// α as of the last event.
    pub fn alpha(&self) -> f64 {
        self.alpha
    }

    /// α at `now` (the α timer ticks applied).
    pub fn alpha_at(&self, now: Nanos) -> f64 {
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

    /// (T, BC) stage counters.
    pub fn stages(&self) -> (u32, u32) {
        (self.t, self.bc)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const G40: u64 = 40_000_000_000;
    const US: Nanos = 1_000;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-6 * b.abs().max(1.0)
    }

    #[test]
    fn one_cnp_halves_the_rate_with_alpha_one() {
        let mut r = Dcqcn::new(DcqcnParams::default(), G40);
        assert_eq!(r.rate(), G40);
        assert_eq!(r.poll_timeout(), None);
        r.on_cnp(100 * US);
        // Rc = 40G·(1 − 1/2) = 20G; Rt = 40G; α = 255/256 + 1/256 = 1.
        assert_eq!(r.rate(), 20_000_000_000);
        assert_eq!(r.target_rate(), G40);
        assert!(close(r.alpha(), 1.0));
        assert_eq!(r.poll_timeout(), Some(155 * US));
        // A second CNP 10 µs later: Rt = 20G, Rc = 10G.
        r.on_cnp(110 * US);
        assert_eq!(r.rate(), 10_000_000_000);
        assert_eq!(r.target_rate(), 20_000_000_000);
    }

    #[test]
    fn alpha_decays_once_per_k_without_cnp() {
        let p = DcqcnParams::default();
        let mut r = Dcqcn::new(p, G40);
        r.on_cnp(0);
        let a0 = r.alpha();
        let g = 1.0 / 256.0;
        assert!(close(r.alpha_at(54 * US), a0));
        assert!(close(r.alpha_at(55 * US), a0 * (1.0 - g)));
        assert!(close(r.alpha_at(165 * US), a0 * (1.0 - g).powi(3)));
        // A CNP at 120 µs: α decayed twice (55, 110), the cut uses it,
        // then α ← (1 − g)α + g and the α timer restarts at 120 µs.
        let rc = r.rate() as f64;
        r.on_cnp(120 * US);
        let a2 = a0 * (1.0 - g).powi(2);
        assert!(close(r.rate() as f64, rc * (1.0 - a2 / 2.0)));
        assert!(close(r.alpha(), (1.0 - g) * a2 + g));
        assert!(close(r.alpha_at(174 * US), (1.0 - g) * a2 + g));
        assert!(close(
            r.alpha_at(175 * US),
            ((1.0 - g) * a2 + g) * (1.0 - g)
        ));
    }

    #[test]
    fn fast_recovery_then_additive_then_hyper() {
        // Hand-computed trace, line 40G, B large enough to stay out of the
        // way until we feed bytes explicitly.
        let p = DcqcnParams {
            b: 1_000_000,
            ..DcqcnParams::default()
        };
        let mut r = Dcqcn::new(p, G40);
        r.on_cnp(0);
        let (mut rc, mut rt) = (20e9, 40e9);
        // F = 5 timer ticks of fast recovery: Rc = (Rt + Rc)/2.
        for i in 1..=5u64 {
            r.on_timer(i * 55 * US);
            assert_eq!(r.phase(), Phase::FastRecovery, "tick {i}");
            rc = (rt + rc) / 2.0;
            assert!(close(r.rate() as f64, rc), "tick {i}: {} vs {rc}", r.rate());
            assert_eq!(r.target_rate() as f64, rt);
        }
        assert!(close(rc, 39_375_000_000.0));
        // T = 6 > F, BC = 0: additive increase, but Rt is at line rate.
        // Cut again to get room below line rate.
        r.on_cnp(400 * US);
        // α = 1 − g·(…) ≈ still near 1 — recompute from the machine.
        let rc0 = r.rate() as f64;
        rt = r.target_rate() as f64;
        rc = rc0;
        for i in 1..=5u64 {
            r.on_timer(400 * US + i * 55 * US);
            rc = (rt + rc) / 2.0;
        }
        assert!(close(r.rate() as f64, rc));
        r.on_timer(400 * US + 6 * 55 * US);
        assert_eq!(r.phase(), Phase::Additive);
        rt += 40e6;
        rc = (rt + rc) / 2.0;
        assert!(close(r.target_rate() as f64, rt));
        assert!(close(r.rate() as f64, rc));
        // Bytes: BC 1..=5 while T = 6 → min(T, BC) ≤ F: additive each.
        for _ in 0..5 {
            r.on_bytes_sent(1_000_000, 800 * US);
            assert_eq!(r.phase(), Phase::Additive);
            rt += 40e6;
            rc = (rt + rc) / 2.0;
        }
        assert!(close(r.rate() as f64, rc));
        // BC = 6, T = 6: hyper, i = 1 → Rt += R_HAI.
        r.on_bytes_sent(1_000_000, 800 * US);
        assert_eq!(r.phase(), Phase::Hyper);
        rt += 200e6;
        rc = (rt + rc) / 2.0;
        assert!(close(r.rate() as f64, rc));
        assert!(close(r.target_rate() as f64, rt));
        // T = 7, BC = 6: hyper with i = min(7, 6) − 5 = 1.
        r.on_timer(400 * US + 7 * 55 * US);
        assert_eq!(r.phase(), Phase::Hyper);
        rt = (rt + 200e6).min(40e9);
        rc = (rt + rc) / 2.0;
        assert!(close(r.rate() as f64, rc));
    }

    #[test]
    fn rate_floor_and_release_at_line_rate() {
        let p = DcqcnParams {
            r_min: 15_000_000_000,
            ..DcqcnParams::default()
        };
        let mut r = Dcqcn::new(p, G40);
        r.on_cnp(0);
        r.on_cnp(1);
        assert_eq!(r.rate(), 15_000_000_000);
        // Enough ticks bring it back to line rate and release the limiter.
        let mut t = 0;
        while r.is_limiting() {
            t += 55 * US;
            r.on_timer(t);
            assert!(t < 1_000_000_000);
        }
        assert_eq!(r.rate(), G40);
        assert_eq!(r.poll_timeout(), None);
    }
}
