//! The transmit side: [`Device::poll_transmit`], the ready queue that
//! serves QPs round robin in bursts, and the farewell ACKs sent first.

use roce_wire::Transmit;

use super::Device;
use crate::qp::Ctx;
use crate::Nanos;

/// What [`Device::poll_transmit`] gives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[must_use]
pub enum Tx {
    /// A datagram, written into the caller's buffer, and how to send it.
    Datagram(Transmit),
    /// The end of a batch: send what was gathered before asking again
    /// (there may be more at once; see [`Device::poll_transmit`]).
    EndOfBatch,
    /// Nothing is due: [`Device::poll_timeout`] says when to look again.
    Idle,
}

impl Tx {
    /// The datagram's [`Transmit`], if this is one.
    pub fn datagram(self) -> Option<Transmit> {
        match self {
            Tx::Datagram(t) => Some(t),
            _ => None,
        }
    }
}

impl Device {
    pub(super) fn mark_ready(&mut self, qpn: u32) {
        if let Some(qp) = self.qps.get_mut(&qpn) {
            if !qp.queued {
                qp.queued = true;
                self.ready.push_back(qpn);
            }
        }
    }

    /// Writes the next datagram to send into `buf` (which should hold at
    /// least 4200 bytes) and returns [`Tx::Datagram`] with how to send it
    /// (its length, addresses, DSCP / ECN: a backend sends from these
    /// without parsing it); [`Tx::Idle`] when nothing is due; or
    /// [`Tx::EndOfBatch`], once, after an answer that released a deferred
    /// ACK (qp/responder/ack.rs; not with `AckDelay::ack_first`, whose
    /// peers wait for the ACK): a driver sends what it has gathered at
    /// `EndOfBatch`, so that the answer, which the peer waits for, goes in
    /// a send call of its own, and then calls again for the ACK, which
    /// goes in the next (its system call then runs while the peer works
    /// on the answer). A driver that only polls again later loses nothing
    /// either.
    pub fn poll_transmit(&mut self, now: Nanos, buf: &mut [u8]) -> Tx {
        self.next_datagram(now, buf, false)
    }

    /// [`poll_transmit`](Self::poll_transmit), asking `needs_icrc`
    /// whether the datagram's ICRC must be computed: when it says no (a
    /// backend that hands the datagram to a receiver that does not check
    /// it, a same-host ring's, docs/shm.md), the ICRC is not computed and
    /// its four bytes are left zero; the second value is then false
    /// (`true`: the datagram's ICRC is valid, as `poll_transmit` gives
    /// it). The caller computes it later, when something needs it after
    /// all, with [`roce_wire::icrc::fill`] and
    /// [`DeviceConfig::icrc_code`](crate::DeviceConfig). Counted in
    /// `tx_icrc_deferred`.
    pub fn poll_transmit_icrc_if(
        &mut self,
        now: Nanos,
        buf: &mut [u8],
        needs_icrc: impl FnOnce(&Transmit) -> bool,
    ) -> (Tx, bool) {
        let tx = self.next_datagram(now, buf, true);
        let Tx::Datagram(t) = tx else {
            return (tx, true);
        };
        if !needs_icrc(&t) {
            self.counters.tx_icrc_deferred += 1;
            return (tx, false);
        }
        // Packets of QPs were built without it; a CM datagram or a stored
        // ACK has it already, and gets the same value again.
        let code = self.config.icrc_code;
        let filled = buf
            .get_mut(..t.size)
            .is_some_and(|d| roce_wire::icrc::fill(code, d).is_ok());
        (tx, filled)
    }

    /// The next datagram [`poll_transmit`](Self::poll_transmit) sends;
    /// with `defer_icrc`, a QP's packet without its ICRC.
    fn next_datagram(&mut self, now: Nanos, buf: &mut [u8], defer_icrc: bool) -> Tx {
        // A QP's last ACK before the CM message that may end it (a DREQ),
        // and before an end of batch (a send-call split for latency),
        // which must not hold it back from the batch a closing device's
        // driver sends last.
        if let Some((p, t)) = self.farewell.pop_front() {
            let Some(out) = buf.get_mut(..p.len()) else {
                return Tx::Idle;
            };
            out.copy_from_slice(&p);
            self.counters.tx_datagrams += 1;
            return Tx::Datagram(t);
        }
        if std::mem::take(&mut self.boundary) {
            return Tx::EndOfBatch;
        }
        if let Some(n) = self.cm_poll_transmit(buf) {
            self.counters.tx_datagrams += 1;
            return Tx::Datagram(n);
        }
        let rounds = self.ready.len();
        for _ in 0..rounds {
            let Some(qpn) = self.ready.pop_front() else {
                break;
            };
            let Some(qp) = self.qps.get_mut(&qpn) else {
                continue;
            };
            qp.queued = false;
            let mut ctx = ctx!(self, now);
            if defer_icrc {
                ctx.icrc_code = None;
            }
            let sent = qp.poll_transmit(&mut ctx, buf);
            self.boundary = ctx.boundary;
            qp.check_cq_lost(&mut ctx);
            if let Some(n) = sent {
                // Round robin in bursts: the QP keeps its turn for up to
                // `tx_burst` packets, then goes to the back if it has more.
                self.burst += 1;
                if qp.wants_to_send() {
                    qp.queued = true;
                    if self.burst < self.config.tx_burst {
                        self.ready.push_front(qpn);
                    } else {
                        self.burst = 0;
                        self.ready.push_back(qpn);
                    }
                } else {
                    self.burst = 0;
                }
                self.counters.tx_datagrams += 1;
                self.note_timer(qpn);
                return Tx::Datagram(n);
            }
            self.note_timer(qpn);
            self.burst = 0;
            // Nothing now (window, credits, RNR wait, a deferred ACK):
            // timers or incoming packets will make it ready again.
        }
        self.prune_timers();
        Tx::Idle
    }

    /// Whether [`Device::poll_transmit`] would give a datagram at `now`
    /// (a cheap look: a QP whose only output is a deferred ACK, or whose
    /// window or pacing holds it back, may still say yes). A driver that
    /// has just handed the engine datagrams can skip its transmit phase
    /// when this is false and no timer is due: nothing is lost, since the
    /// engine's deadlines say when to look again. (Whether a transmit
    /// phase has drained the engine, `poll_transmit` says itself:
    /// [`Tx::Idle`].)
    pub fn transmit_due(&self, now: Nanos) -> bool {
        !self.farewell.is_empty()
            || self.cm.has_output()
            || self
                .ready
                .iter()
                .any(|q| self.qps.get(q).is_some_and(|qp| qp.wants_to_send_at(now)))
    }
}
