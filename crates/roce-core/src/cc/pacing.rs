//! The per-QP rate limiter: a next-send-time pacer. After a packet of `n`
//! bytes at rate `R` the next may leave `n·8/R` later. The schedule is kept
//! in picoseconds so nanosecond time does not accumulate rounding: a packet
//! sent up to 1 ns after its slot keeps the schedule (the caller's clock
//! is nanoseconds); a QP that fell further behind (idle, or held by the
//! link) restarts from now, without credit for the idle time.

use crate::Nanos;

const PS_PER_NS: u64 = 1_000;

/// Next-send-time pacer. The slot of the next packet is computed from the
/// last packet's start and size at the *current* rate, so a rate increase
/// shortens the gap already running (a QP cut to 1 Mb/s must not wait out
/// an 8 ms gap after its rate recovered).
#[derive(Clone, Copy, Debug, Default)]
pub struct Pacer {
    /// Slot start of the last packet, ps.
    last_ps: u64,
    /// Its size, bytes (0: no packet yet).
    last_bytes: u64,
    /// The last transmit attempt was refused (a timer must wake the QP).
    blocked: bool,
}

fn gap_ps(bytes: u64, rate_bps: u64) -> u64 {
    (bytes as u128 * 8 * 1_000_000_000_000 / rate_bps.max(1) as u128).min(u64::MAX as u128) as u64
}

impl Pacer {
    fn next_ps(&self, rate_bps: u64) -> u64 {
        if self.last_bytes == 0 {
            return 0;
        }
        self.last_ps
            .saturating_add(gap_ps(self.last_bytes, rate_bps))
    }

    /// True when a packet may leave at `now` at `rate_bps`; otherwise
    /// remembers that the QP waits for [`Pacer::blocked_until`].
    pub fn check(&mut self, now: Nanos, rate_bps: u64) -> bool {
        let ok = now.saturating_mul(PS_PER_NS) >= self.next_ps(rate_bps);
        self.blocked = !ok;
        ok
    }

    /// A packet of `bytes` left at `now` while pacing at `rate_bps`.
    pub fn on_sent(&mut self, bytes: u64, now: Nanos, rate_bps: u64) {
        let now_ps = now.saturating_mul(PS_PER_NS);
        self.last_ps = self
            .next_ps(rate_bps)
            .max(now_ps.saturating_sub(PS_PER_NS - 1));
        self.last_bytes = bytes;
        self.blocked = false;
    }

    /// Forgets the schedule (the limiter was released).
    pub fn reset(&mut self) {
        *self = Pacer::default();
    }

    /// The time (ns, rounded up) the next packet may leave at `rate_bps`.
    pub fn next_send(&self, rate_bps: u64) -> Nanos {
        self.next_ps(rate_bps).div_ceil(PS_PER_NS)
    }

    /// The QP is waiting for its slot: the time its timer must fire.
    pub fn blocked_until(&self, rate_bps: u64) -> Option<Nanos> {
        self.blocked.then(|| self.next_send(rate_bps))
    }

    /// The timer fired at `now`: the QP may try again.
    pub fn on_timer(&mut self, now: Nanos, rate_bps: u64) {
        if self.blocked && now.saturating_mul(PS_PER_NS) >= self.next_ps(rate_bps) {
            self.blocked = false;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spacing_at_a_set_rate_is_exact_on_average() {
        // 1078-byte datagrams at 10 Gb/s: 862.4 ns apart.
        let mut p = Pacer::default();
        let mut now = 0;
        let mut sent = Vec::new();
        for _ in 0..1000 {
            while !p.check(now, 10_000_000_000) {
                now = p.blocked_until(10_000_000_000).unwrap();
                p.on_timer(now, 10_000_000_000);
            }
            sent.push(now);
            p.on_sent(1078, now, 10_000_000_000);
        }
        let avg = (sent[999] - sent[0]) as f64 / 999.0;
        assert!((avg - 862.4).abs() < 862.4 * 0.01, "{avg}");
        for w in sent.windows(2) {
            let gap = (w[1] - w[0]) as f64;
            assert!((gap - 862.4).abs() <= 1.0, "gap {gap}");
        }
    }

    #[test]
    fn no_credit_for_idle_time() {
        let r = 8_000_000_000; // 1000 bytes = 1 µs
        let mut p = Pacer::default();
        p.on_sent(1000, 0, r);
        assert!(!p.check(999, r));
        assert_eq!(p.blocked_until(r), Some(1000));
        assert!(p.check(50_000, r));
        p.on_sent(1000, 50_000, r);
        assert!(!p.check(50_999, r));
        assert!(p.check(51_000, r));
    }

    #[test]
    fn a_rate_increase_shortens_the_running_gap() {
        let mut p = Pacer::default();
        p.on_sent(1000, 0, 1_000_000); // 8 ms at 1 Mb/s
        assert!(!p.check(10_000, 1_000_000));
        assert_eq!(p.blocked_until(1_000_000), Some(8_000_000));
        // The rate went up to 8 Gb/s: the slot is 1 µs after the start.
        assert_eq!(p.blocked_until(8_000_000_000), Some(1_000));
        p.on_timer(10_000, 8_000_000_000);
        assert!(p.check(10_000, 8_000_000_000));
    }
}
