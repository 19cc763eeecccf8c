//! The completer half of the requester: ACK/NAK and response processing,
//! go-back-N retransmission from the exact PSN, the local ACK timeout and
//! RNR timers (IBTA Vol 1 §9.7.5.1, docs/protocol.md §6).

use roce_wire::aeth::RNR_TIMER_US;
use roce_wire::{MessageKind, NakCode, Position, Psn, RocePacket, Syndrome};

use super::Requester;
use crate::qp::state::QpState;
use crate::qp::{Ctx, QpCommon};
use crate::sgl;
use crate::wc::WcStatus;
use crate::wr::{Payload, SendOp};

impl Requester {
    /// Handles a response packet (ACK, NAK, READ response, atomic ACK).
    /// Returns whether it acknowledged something outstanding (IBTA Vol 1
    /// §9.7.5.1.2: any other is a ghost or a duplicate, and changes
    /// nothing but the transport timer).
    pub(crate) fn handle_response(
        &mut self,
        qp: &mut QpCommon,
        p: &RocePacket<'_>,
        ctx: &mut Ctx<'_>,
    ) -> bool {
        let psn = p.bth.psn;
        // A response must acknowledge something outstanding.
        let outstanding = psn.diff(self.una) >= 0 && psn.diff(self.next_psn) < 0;
        let syndrome = p.ext.aeth.map(|a| a.syndrome);
        let is_dup_ack = matches!(syndrome, Some(Syndrome::Ack { .. })) && psn == self.una.sub(1);
        if !outstanding {
            if psn.diff(self.una) < 0 && self.timer.is_some() {
                // An old response: the responder is alive and still serving
                // requests it got earlier (each re-request makes it send a
                // READ's responses again). Restart the transport timer,
                // without restoring the retries; otherwise a responder
                // slower than the timeout gets a re-request per timeout,
                // each costing it a whole READ, and never reaches the one
                // that is waited for (rxe in an emulated VM serving 4 MiB
                // READs).
                qp.counters.duplicates += 1;
                self.timer = qp.ack_timeout_ns().map(|t| ctx.now + t);
            } else if !is_dup_ack {
                qp.counters.drop_ghost_response += 1;
            }
            return false;
        }
        qp.counters.rx_packets += 1;
        match p.bth.opcode.kind() {
            MessageKind::Ack => match syndrome {
                Some(Syndrome::Ack { .. }) => {
                    self.ack_through(qp, psn, ctx);
                }
                Some(Syndrome::Nak(NakCode::PsnSequenceError)) => {
                    qp.counters.seq_naks_received += 1;
                    // During an RNR wait the responder NAKs the packets
                    // that followed the one it could not take (as rxe
                    // does): the wait already goes back to that packet, so
                    // the NAK is no transport error and costs no retry.
                    let rnr_waiting = self.rnr_until.is_some_and(|t| ctx.now < t);
                    if self.ack_through(qp, psn.sub(1), ctx) && !rnr_waiting {
                        self.retry(qp, psn, false, ctx);
                    }
                }
                Some(Syndrome::RnrNak { timer }) => {
                    qp.counters.rnr_naks_received += 1;
                    if !self.ack_through(qp, psn.sub(1), ctx) {
                        return true;
                    }
                    if qp.attr.rnr_retry != 7 {
                        if self.rnr_left == 0 {
                            self.fail_at(qp, psn, WcStatus::RnrRetryExcErr, ctx);
                            return true;
                        }
                        self.rnr_left -= 1;
                    }
                    let wait = RNR_TIMER_US[(timer & 31) as usize] as u64 * 1000;
                    self.rnr_until = Some(ctx.now + wait);
                    self.timer = None;
                    self.go_back(psn);
                }
                Some(Syndrome::Nak(code)) => {
                    qp.counters.error_naks_received += 1;
                    if !self.ack_through(qp, psn.sub(1), ctx) {
                        return true;
                    }
                    let status = match code {
                        NakCode::InvalidRequest => WcStatus::RemInvReqErr,
                        NakCode::RemoteAccessError => WcStatus::RemAccessErr,
                        NakCode::RemoteOperationalError => WcStatus::RemOpErr,
                        _ => WcStatus::BadRespErr,
                    };
                    self.fail_at(qp, psn, status, ctx);
                }
                _ => qp.counters.drop_invalid += 1,
            },
            MessageKind::ReadResponse => self.read_response(qp, p, ctx),
            MessageKind::AtomicAck => self.atomic_ack(qp, p, ctx),
            _ => qp.counters.drop_invalid += 1,
        }
        true
    }

    /// Cumulative acknowledgement of every PSN up to and including `psn`.
    /// Returns false if an unfinished READ/atomic lies inside the range
    /// (an implied NAK: its request is sent again) or the QP failed.
    fn ack_through(&mut self, qp: &mut QpCommon, psn: Psn, ctx: &mut Ctx<'_>) -> bool {
        let mut ok = true;
        let mut new_una = None;
        for w in self.sq.iter_mut() {
            if !w.started || w.done || w.error.is_some() {
                continue;
            }
            if w.first_psn.diff(psn) > 0 {
                break;
            }
            if w.wr.op.is_read_or_atomic() {
                // The responder acknowledged beyond a READ/atomic whose
                // response we never got: request it again.
                let resume = w.first_psn.add(w.read_recv);
                new_una = Some(resume);
                ok = false;
                break;
            }
            if w.last_psn().diff(psn) <= 0 {
                w.done = true;
            } else {
                break;
            }
        }
        let target = new_una.unwrap_or(psn.next());
        if target.diff(self.una) > 0 {
            self.una = target;
            self.progress(qp, ctx);
        }
        self.retire(qp, ctx);
        if !ok {
            // An implied NAK: spend a retry like a sequence error, once per
            // missing PSN (every later ACK would otherwise spend another).
            let resume = self.una;
            self.retry(qp, resume, false, ctx);
        }
        ok && qp.state != QpState::Err
    }

    /// Forward progress: reset the retry budget and restart the timer.
    fn progress(&mut self, qp: &QpCommon, ctx: &mut Ctx<'_>) {
        self.retry_left = qp.attr.retry_cnt;
        self.rnr_left = qp.attr.rnr_retry;
        self.retry_started = false;
        self.timer = if self.in_flight() {
            qp.ack_timeout_ns().map(|t| ctx.now + t)
        } else {
            None
        };
    }

    /// A sequence error or timeout: spend one retry and go back to `psn`.
    /// A NAK-driven retry while one is already under way is ignored.
    fn retry(&mut self, qp: &mut QpCommon, psn: Psn, timeout: bool, ctx: &mut Ctx<'_>) {
        if self.retry_started && !timeout {
            return;
        }
        self.retry_started = true;
        // retry_cnt 7 retries forever, as Linux rxe does (rxe_comp.c only
        // decrements a count other than 7; IBTA reads it as 7 retries).
        // Peers built on rdma-core's tools all use 7.
        if qp.attr.retry_cnt != 7 {
            if self.retry_left == 0 {
                self.fail_at(qp, self.una, WcStatus::RetryExcErr, ctx);
                return;
            }
            self.retry_left -= 1;
        }
        self.go_back(psn);
        self.timer = qp.ack_timeout_ns().map(|t| ctx.now + t);
    }

    /// Go-back-N: the next packet sent is `psn` again, inside whichever
    /// message holds it (a READ resumes at the first missing response).
    fn go_back(&mut self, psn: Psn) {
        for w in self.sq.iter() {
            if w.contains(psn) && !w.done {
                self.cursor_seq = w.seq;
                self.cursor_pkt = if matches!(w.wr.op, SendOp::Read) {
                    w.read_recv
                } else {
                    psn.diff(w.first_psn) as u32
                };
                return;
            }
        }
        // Nothing started holds it: continue with the first unstarted WQE.
        if let Some(w) = self.sq.iter().find(|w| !w.started) {
            self.cursor_seq = w.seq;
            self.cursor_pkt = 0;
        }
    }

    fn read_response(&mut self, qp: &mut QpCommon, p: &RocePacket<'_>, ctx: &mut Ctx<'_>) {
        let psn = p.bth.psn;
        let pmtu = qp.pmtu() as u64;
        let Some(idx) = self.sq.iter().position(|w| w.contains(psn)) else {
            qp.counters.drop_ghost_response += 1;
            return;
        };
        if !matches!(self.sq[idx].wr.op, SendOp::Read) || self.sq[idx].done {
            qp.counters.drop_invalid += 1;
            return;
        }
        // Implicitly acknowledges everything before the READ.
        let (first, seq) = (self.sq[idx].first_psn, self.sq[idx].seq);
        if !self.ack_through(qp, first.sub(1), ctx) {
            return;
        }
        // Acknowledging retires WQEs from the front: find ours again.
        let Some(idx) = self.index_of(seq) else {
            return;
        };
        let w = &self.sq[idx];
        let expected = w.first_psn.add(w.read_recv);
        let d = psn.diff(expected);
        if d < 0 {
            qp.counters.duplicates += 1;
            return;
        }
        if d > 0 {
            // A response was lost: ask again from the first missing one.
            qp.counters.drop_out_of_sequence += 1;
            self.retry(qp, expected, false, ctx);
            return;
        }
        let offset = w.read_recv as u64 * pmtu;
        let remaining = w.len - offset.min(w.len);
        let pos = p.bth.opcode.position();
        let len = p.payload.len() as u64;
        let fits = match pos {
            Position::First | Position::Middle => len == pmtu && remaining > pmtu,
            Position::Last | Position::Only => len == remaining,
        };
        if !fits {
            self.fail_wqe(qp, idx, WcStatus::BadRespErr, ctx);
            return;
        }
        let sgl_ok = match &w.wr.payload {
            Payload::Sgl(s) => sgl::scatter(ctx.mrs, qp.init.pd, s, offset, p.payload).is_ok(),
            Payload::Inline(_) => false,
        };
        if !sgl_ok {
            self.fail_wqe(qp, idx, WcStatus::LocProtErr, ctx);
            return;
        }
        qp.counters.rx_bytes += len;
        self.sq[idx].read_recv += 1;
        if pos.ends() {
            self.finish_rd_atomic(idx);
        }
        self.acked_response(qp, psn, ctx);
    }

    /// A READ or atomic WQE got its last response: done, one fewer
    /// outstanding.
    fn finish_rd_atomic(&mut self, idx: usize) {
        self.sq[idx].done = true;
        self.rd_atomic_outstanding = self.rd_atomic_outstanding.saturating_sub(1);
    }

    /// A response at `psn` acknowledges everything up to it: moves the
    /// oldest unacknowledged PSN past it and completes what is done.
    fn acked_response(&mut self, qp: &QpCommon, psn: Psn, ctx: &mut Ctx<'_>) {
        let una = psn.next();
        if una.diff(self.una) > 0 {
            self.una = una;
        }
        self.progress(qp, ctx);
        self.retire(qp, ctx);
    }

    fn atomic_ack(&mut self, qp: &mut QpCommon, p: &RocePacket<'_>, ctx: &mut Ctx<'_>) {
        let psn = p.bth.psn;
        let Some(idx) = self.sq.iter().position(|w| w.contains(psn)) else {
            qp.counters.drop_ghost_response += 1;
            return;
        };
        if !self.sq[idx].wr.op.is_atomic() || self.sq[idx].done {
            qp.counters.drop_invalid += 1;
            return;
        }
        let seq = self.sq[idx].seq;
        if !self.ack_through(qp, psn.sub(1), ctx) {
            return;
        }
        let Some(idx) = self.index_of(seq) else {
            return;
        };
        let orig = p.ext.atomic_ack.unwrap_or(0);
        let w = &self.sq[idx];
        let ok = match &w.wr.payload {
            Payload::Sgl(s) => sgl::scatter(ctx.mrs, qp.init.pd, s, 0, &orig.to_ne_bytes()).is_ok(),
            Payload::Inline(_) => false,
        };
        if !ok {
            self.fail_wqe(qp, idx, WcStatus::LocProtErr, ctx);
            return;
        }
        self.finish_rd_atomic(idx);
        self.acked_response(qp, psn, ctx);
    }

    /// Local ACK timeout / RNR wait expiry.
    pub(crate) fn handle_timeout(&mut self, qp: &mut QpCommon, ctx: &mut Ctx<'_>) {
        if let Some(until) = self.rnr_until {
            if ctx.now < until {
                // The RNR timer holds the transport timer: the responder
                // answered, it is waiting for a receive (IBTA Vol 1 §9.7.5.2.8), and
                // an ACK timeout now would spend a retry on that wait.
                self.timer = None;
                return;
            }
            self.rnr_until = None;
            self.timer = qp.ack_timeout_ns().map(|t| ctx.now + t);
        }
        if let Some(t) = self.timer {
            if ctx.now >= t {
                if !self.in_flight() {
                    self.timer = None;
                    return;
                }
                qp.counters.timeouts += 1;
                let una = self.una;
                self.retry(qp, una, true, ctx);
            }
        }
    }
}
