//! The DCQCN notification point of one QP (docs/dcb.md §4, docs/protocol.md §7):
//! the first CE-marked packet triggers a CNP at once; afterwards at most
//! one CNP per `min_time_between_cnps`, sent at the end of the interval
//! only if a CE-marked packet arrived during it.

use crate::Nanos;

/// Notification point state.
#[derive(Clone, Copy, Debug, Default)]
pub struct NotificationPoint {
    min_gap: Nanos,
    last_cnp: Option<Nanos>,
    /// A CE arrived inside the hold-off interval.
    pending: bool,
    /// A CNP is decided and waits to be emitted.
    due: bool,
    /// CE-marked packets received.
    pub ce_received: u64,
    /// CNPs decided (emitted by the QP's transmit path).
    pub cnps_decided: u64,
}

impl NotificationPoint {
    /// At most one CNP per `min_gap`.
    pub fn new(min_gap: Nanos) -> NotificationPoint {
        NotificationPoint {
            min_gap,
            ..NotificationPoint::default()
        }
    }

    fn decide(&mut self, now: Nanos) {
        self.pending = false;
        self.due = true;
        self.last_cnp = Some(now);
        self.cnps_decided += 1;
    }

    /// A CE-marked packet arrived; returns true when a CNP became due.
    pub fn on_ce(&mut self, now: Nanos) -> bool {
        self.ce_received += 1;
        if self.due {
            return false; // the queued CNP covers it
        }
        match self.last_cnp {
            Some(t) if now < t + self.min_gap => {
                self.pending = true;
                false
            }
            _ => {
                self.decide(now);
                true
            }
        }
    }

    /// End of a hold-off interval; returns true when a CNP became due.
    pub fn on_timer(&mut self, now: Nanos) -> bool {
        match (self.pending, self.last_cnp) {
            (true, Some(t)) if now >= t + self.min_gap => {
                self.decide(now);
                true
            }
            _ => false,
        }
    }

    /// When [`NotificationPoint::on_timer`] has work.
    pub fn poll_timeout(&self) -> Option<Nanos> {
        if self.pending {
            self.last_cnp.map(|t| t + self.min_gap)
        } else {
            None
        }
    }

    /// A CNP waits to be sent.
    pub fn cnp_due(&self) -> bool {
        self.due
    }

    /// Takes the due CNP (the transmit path sent it).
    pub fn take_cnp(&mut self) -> bool {
        std::mem::take(&mut self.due)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_ce_at_once_then_one_per_interval_if_ce_seen() {
        let mut np = NotificationPoint::new(50_000);
        assert!(np.on_ce(1_000));
        assert!(np.take_cnp());
        // CE at 10 µs and 30 µs: held until 51 µs, one CNP for both.
        assert!(!np.on_ce(10_000));
        assert!(!np.on_ce(30_000));
        assert_eq!(np.poll_timeout(), Some(51_000));
        assert!(!np.on_timer(50_999));
        assert!(np.on_timer(51_000));
        assert!(np.take_cnp());
        // No CE in the next interval: no CNP, no timer.
        assert_eq!(np.poll_timeout(), None);
        assert!(!np.on_timer(101_000));
        // A CE long after: at once again.
        assert!(np.on_ce(200_000));
        assert_eq!(np.ce_received, 4);
        assert_eq!(np.cnps_decided, 3);
    }

    #[test]
    fn zero_interval_answers_every_ce_unless_one_is_queued() {
        let mut np = NotificationPoint::new(0);
        assert!(np.on_ce(5));
        assert!(!np.on_ce(5), "coalesced into the queued CNP");
        assert!(np.take_cnp());
        assert!(np.on_ce(6));
    }
}
