//! Timers: the heap of QP deadlines, [`Device::poll_timeout`] and
//! [`Device::handle_timeout`].

use std::cmp::Reverse;

use super::Device;
use crate::qp::Ctx;
use crate::Nanos;

impl Device {
    /// Records a QP's current deadline in the timer heap if it changed.
    pub(super) fn note_timer(&mut self, qpn: u32) {
        if let Some(qp) = self.qps.get_mut(&qpn) {
            let t = qp.poll_timeout();
            if t != qp.armed {
                qp.armed = t;
                if let Some(t) = t {
                    self.timers.push(Reverse((t, qpn)));
                }
            }
        }
    }

    /// Drops the stale entries at the top of the timer heap, so that
    /// [`Device::poll_timeout`] names a live deadline (after timers ran,
    /// and when a transmit drain ends: a deferred ACK's deadline, left
    /// behind when the ACK followed its answer, would otherwise have a
    /// driver wake up for nothing every round trip).
    pub(super) fn prune_timers(&mut self) {
        while let Some(&Reverse((t, qpn))) = self.timers.peek() {
            if self.timer_is_live(t, qpn) {
                break;
            }
            self.timers.pop();
        }
    }

    /// True when a heap entry still describes its QP's deadline.
    fn timer_is_live(&self, t: Nanos, qpn: u32) -> bool {
        self.qps.get(&qpn).is_some_and(|q| q.armed == Some(t))
    }

    /// Earliest time [`Device::handle_timeout`] has work. O(1); may name a
    /// deadline that has since moved later (the call then does nothing).
    pub fn poll_timeout(&self) -> Option<Nanos> {
        let qp = self.timers.peek().map(|Reverse((t, _))| *t);
        match (qp, self.cm.next_deadline()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Runs expired timers; touches only the QPs that are due.
    pub fn handle_timeout(&mut self, now: Nanos) {
        if self.cm.next_deadline().is_some_and(|t| t <= now) {
            self.cm_handle_timeout(now);
        }
        while let Some(&Reverse((t, qpn))) = self.timers.peek() {
            if t > now {
                break;
            }
            self.timers.pop();
            if !self.timer_is_live(t, qpn) {
                continue;
            }
            if let Some(qp) = self.qps.get_mut(&qpn) {
                qp.armed = None;
                let mut ctx = ctx!(self, now);
                qp.handle_timeout(&mut ctx);
                qp.check_cq_lost(&mut ctx);
                if qp.wants_to_send() {
                    self.mark_ready(qpn);
                }
            }
            self.note_timer(qpn);
        }
        // So that poll_timeout reports a live deadline.
        self.prune_timers();
    }
}
