//! ACK deferral: how long an RC responder may keep a positive ACK back.
//!
//! A responder owes an ACK for every request packet with the AckReq bit
//! (IBTA Vol 1 §9.7.5.1) and may coalesce them: one ACK with the latest
//! PSN acknowledges every request before it (§9.7.5.1.1, "coalesced
//! acknowledges"). Deferring the ACK a little buys two things:
//!
//! * in a ping-pong the application's answer, which the peer is waiting
//!   for, leaves before the ACK instead of behind it (the ACK follows the
//!   answer's first packet);
//! * in a stream fewer ACKs are sent.
//!
//! The policy is the engine's own, as a deadline: an ACK held back is
//! reported by [`Device::poll_timeout`](crate::Device::poll_timeout) and
//! released by [`Device::handle_timeout`](crate::Device::handle_timeout)
//! or by the QP's next request packet, so whoever drives the engine, and
//! however the application polls, it leaves in time. No driver knows
//! that an ACK is being held, so none can deadlock it (the model is
//! quinn-proto's `max_ack_delay`).
//!
//! Only a plain positive ACK at the end of the responder's queue is ever
//! held. NAKs, RNR NAKs, READ responses, atomic ACKs, re-ACKs of
//! duplicates and ACKs owed in the error state go at once; an ACK with
//! anything queued behind it goes at once (responses leave in PSN order).

use crate::Nanos;

/// How an RC responder defers its positive ACKs (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AckDelay {
    /// Longest a positive ACK waits after the first request packet it
    /// acknowledges was taken. 0 turns deferral off: every ACK leaves
    /// with the next transmit.
    pub max_delay: Nanos,
    /// An ACK that would acknowledge this many PSNs or more beyond the
    /// last ACK sent leaves at once (at least 1). Keep it well below the
    /// peer's window of unacknowledged PSNs (rxe and this stack: 128), or
    /// a streaming peer waits out `max_delay` before it may go on.
    pub max_psns: u32,
    /// A held ACK leaves just before the QP's answer instead of just
    /// after it when the answer completes a receive at the peer (SEND,
    /// WRITE with immediate): the order of an HCA, where the requester's
    /// send completion always comes before the receive completion its
    /// request provoked (programs that take both CQs' events from one
    /// channel rely on it: perftest's `ib_send_lat -e`). The ACK still
    /// waits for the answer, or its deadline, and goes in the answer's
    /// send call. Before an answer the peer sees only in memory (RDMA
    /// WRITE, READ, atomics) the ACK stays behind it, so that the memory
    /// is written by the time the peer's send completion shows: a
    /// program that polls until that completion and then spins on memory
    /// (perftest's `ib_write_lat`) finds the answer there instead of
    /// waiting for whoever receives next. The ACK then goes in the
    /// answer's send call rather than the next one (`ack_first` off ends
    /// the batch after the answer, `Device::poll_transmit`): that program
    /// waits for it.
    pub ack_first: bool,
}

impl AckDelay {
    /// No deferral: an ACK leaves with the next transmit (as rxe).
    pub const OFF: AckDelay = AckDelay {
        max_delay: 0,
        max_psns: 1,
        ack_first: false,
    };

    /// What a program driving the engine from its polling loop wants: up
    /// to 25 µs, time for an application to answer a request it has just
    /// seen, and an ACK at least every 32 PSNs (a quarter of the peer's
    /// default window).
    pub const INTERACTIVE: AckDelay = AckDelay {
        max_delay: 25_000,
        max_psns: 32,
        ack_first: false,
    };

    /// True when ACKs are never held.
    pub fn is_off(&self) -> bool {
        self.max_delay == 0
    }
}

impl Default for AckDelay {
    fn default() -> AckDelay {
        AckDelay::OFF
    }
}

/// Where a responder's positive ACK is between being queued and sent.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum AckState {
    /// No positive ACK is waiting.
    #[default]
    Idle,
    /// Held until this time at the latest.
    Held(Nanos),
    /// Due: it leaves with the next transmit, whatever is merged into it.
    Due,
}

/// A responder's ACK deferral: the waiting ACK, and whether holding pays
/// on this QP.
///
/// Holding pays when the application answers: a held ACK released by the
/// QP's own request packet. One that runs out its deadline instead stops
/// the holding (a peer that streams, or waits for the completion of a
/// request nobody answers, would pay `max_delay` on every message), until
/// the QP sends a request within `max_delay` of an ACK again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct AckHold {
    state: AckState,
    pays: bool,
    /// When the last positive ACK went out.
    last_sent: Option<Nanos>,
}

impl Default for AckHold {
    fn default() -> AckHold {
        AckHold {
            state: AckState::Idle,
            pays: true,
            last_sent: None,
        }
    }
}

impl AckHold {
    /// A positive ACK acknowledging `span` PSNs beyond the last one sent
    /// was just queued (or merged into the waiting one) at `now`.
    pub(crate) fn on_ack_queued(&mut self, now: Nanos, span: i32, policy: AckDelay) {
        let wide = span >= policy.max_psns.max(1) as i32 || span <= 0;
        self.state = match self.state {
            AckState::Due => AckState::Due,
            _ if policy.is_off() || wide || !self.pays => AckState::Due,
            AckState::Held(t) => AckState::Held(t),
            AckState::Idle => AckState::Held(now.saturating_add(policy.max_delay)),
        };
    }

    /// The QP sent a request packet at `now`: a waiting ACK follows it.
    /// An ACK held until now was worth holding; one sent shortly before
    /// would have been. True when a held ACK was released (the answer it
    /// waited for is leaving).
    pub(crate) fn answered(&mut self, now: Nanos, policy: AckDelay) -> bool {
        let held = matches!(self.state, AckState::Held(_));
        match self.state {
            AckState::Held(_) => self.pays = true,
            AckState::Idle => {
                let recent = self
                    .last_sent
                    .is_some_and(|t| now.saturating_sub(t) < policy.max_delay);
                self.pays |= recent;
            }
            AckState::Due => {}
        }
        self.release();
        held
    }

    /// The held ACK's deadline came (at `now`): it is due, and holding
    /// stops paying. True when it did.
    pub(crate) fn expire(&mut self, now: Nanos) -> bool {
        if let AckState::Held(t) = self.state {
            if t <= now {
                self.state = AckState::Due;
                self.pays = false;
                return true;
            }
        }
        false
    }

    /// The waiting ACK is due now (something is queued behind it, or the
    /// QP is going away).
    pub(crate) fn release(&mut self) {
        if self.state != AckState::Idle {
            self.state = AckState::Due;
        }
    }

    /// The ACK went out at `now`.
    pub(crate) fn sent(&mut self, now: Nanos) {
        self.state = AckState::Idle;
        self.last_sent = Some(now);
    }

    /// Nothing is waiting any more (the queue was dropped).
    pub(crate) fn forget(&mut self) {
        self.state = AckState::Idle;
    }

    /// A positive ACK is waiting (held or due).
    pub(crate) fn waiting(&self) -> bool {
        self.state != AckState::Idle
    }

    /// Whether the ACK is still held at `now`.
    pub(crate) fn holds(&self, now: Nanos) -> bool {
        matches!(self.state, AckState::Held(t) if now < t)
    }

    /// When the held ACK must leave.
    pub(crate) fn deadline(&self) -> Option<Nanos> {
        match self.state {
            AckState::Held(t) => Some(t),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const P: AckDelay = AckDelay {
        max_delay: 100,
        max_psns: 4,
        ack_first: false,
    };

    #[test]
    fn the_deadline_runs_from_the_first_ack_coalesced() {
        let mut h = AckHold::default();
        h.on_ack_queued(10, 1, P);
        h.on_ack_queued(60, 2, P);
        assert_eq!(h.deadline(), Some(110));
        assert!(h.holds(109));
        assert!(!h.holds(110));
    }

    #[test]
    fn a_wide_span_off_or_a_reack_makes_it_due_until_sent() {
        let mut h = AckHold::default();
        h.on_ack_queued(10, 1, P);
        h.on_ack_queued(20, 4, P);
        assert_eq!(h.state, AckState::Due);
        // More merged into a due ACK: still due.
        h.on_ack_queued(25, 5, P);
        assert_eq!(h.state, AckState::Due);
        h.sent(25);
        h.on_ack_queued(30, 1, AckDelay::OFF);
        assert_eq!(h.state, AckState::Due);
        h.sent(30);
        h.on_ack_queued(30, 0, P);
        assert!(!h.holds(31) && h.waiting());
    }

    #[test]
    fn an_expired_hold_stops_holding_until_an_answer_follows_an_ack() {
        let mut h = AckHold::default();
        h.on_ack_queued(0, 1, P);
        h.expire(99);
        assert!(h.holds(99), "expired early");
        h.expire(100);
        assert_eq!(h.state, AckState::Due);
        h.sent(100);
        // Not worth it now: the next ACK is due at once.
        h.on_ack_queued(200, 1, P);
        assert_eq!(h.state, AckState::Due);
        h.sent(200);
        // A request long after that ACK proves nothing...
        h.answered(400, P);
        h.on_ack_queued(500, 1, P);
        assert_eq!(h.state, AckState::Due);
        h.sent(500);
        // ... one within the delay after it does.
        h.answered(550, P);
        h.on_ack_queued(600, 1, P);
        assert_eq!(h.deadline(), Some(700));
        // An answer releases it, and holding goes on paying.
        h.answered(650, P);
        assert_eq!(h.state, AckState::Due);
        h.sent(650);
        h.on_ack_queued(800, 1, P);
        assert_eq!(h.deadline(), Some(900));
    }
}
