//! The responder's output: ACKs (coalesced), NAKs, and READ and atomic
//! responses, built from the queued jobs (IBTA Vol 1 §9.7.5.2).

use roce_wire::{
    AethRepr, BthRepr, ExtHeaders, NakCode, Opcode, Operation, Psn, Qpn, Syndrome, Transport,
};

use super::Job;
use super::Responder;
use crate::mr::Access;
use crate::qp::state::QpState;
use crate::qp::{Ctx, QpCommon};

impl Responder {
    /// A READ that cannot be served at `psn` (its R_Key refused, or its
    /// memory gone under the copy): a class C error (IBTA Vol 1 §9.9,
    /// §9.7.5.1.5 C9-85): the remote access error NAK goes out first,
    /// the responses queued after it are dropped, and the QP goes to the
    /// error state.
    fn nak_access(&mut self, qp: &mut QpCommon, ctx: &mut Ctx<'_>, psn: Psn) {
        self.out.clear();
        self.out.push_front(Job::Ack {
            psn,
            syndrome: Syndrome::Nak(NakCode::RemoteAccessError),
        });
        qp.counters.error_naks_sent += 1;
        self.enter_error(qp, ctx);
    }

    /// Emits the next queued response.
    pub(crate) fn poll_transmit(
        &mut self,
        qp: &mut QpCommon,
        ctx: &mut Ctx<'_>,
        buf: &mut [u8],
    ) -> Option<roce_wire::Transmit> {
        let job = *self.out.front()?;
        if qp.state == QpState::Err && !self.owes_in_error() {
            self.out.clear();
            return None;
        }
        if qp.state != QpState::Err && self.held(ctx.now) {
            // Deferred (responder/ack.rs): its deadline is a timer.
            return None;
        }
        let path = qp.path(None, ctx)?;
        // ACKs and NAKs are not ECN-capable (docs/protocol.md §7); READ
        // responses carry data and keep the device's codepoint.
        let ack_path = crate::qp::Path {
            ecn: roce_wire::Ecn::NotEct,
            ..path
        };
        let dest = qp.attr.dest_qp_num;
        let msn = self.msn;
        let aeth = |syndrome| Some(AethRepr { syndrome, msn });
        match job {
            Job::Ack { psn, syndrome } => {
                self.pop_job();
                if matches!(syndrome, Syndrome::Ack { .. }) {
                    self.ack_sent(ctx.now, psn);
                }
                let bth = response_bth(Operation::Acknowledge, dest, psn);
                let ext = ExtHeaders {
                    aeth: aeth(syndrome),
                    ..Default::default()
                };
                qp.counters.acks_sent += 1;
                ack_path.emit(bth, ext, 0, buf, |_| {})
            }
            Job::AtomicAck { psn, orig, .. } => {
                self.pop_job();
                let bth = response_bth(Operation::AtomicAcknowledge, dest, psn);
                let ext = ExtHeaders {
                    aeth: aeth(Syndrome::ACK_UNLIMITED),
                    atomic_ack: Some(orig),
                    ..Default::default()
                };
                ack_path.emit(bth, ext, 0, buf, |_| {})
            }
            Job::Read {
                psn,
                va,
                rkey,
                remaining,
                started,
                ..
            } => {
                let pmtu = qp.pmtu() as u64;
                let n = remaining.min(pmtu);
                let last = remaining <= pmtu;
                let op = match (started, last) {
                    (false, true) => Operation::ReadResponseOnly,
                    (false, false) => Operation::ReadResponseFirst,
                    (true, true) => Operation::ReadResponseLast,
                    (true, false) => Operation::ReadResponseMiddle,
                };
                let bth = response_bth(op, dest, psn);
                let ext = match op {
                    Operation::ReadResponseMiddle => ExtHeaders::default(),
                    _ => ExtHeaders {
                        aeth: aeth(Syndrome::ACK_UNLIMITED),
                        ..Default::default()
                    },
                };
                // Bounds were checked when the request was accepted; check
                // again in case the region went away since.
                let span = if n > 0 {
                    match ctx
                        .mrs
                        .check(rkey.value(), qp.init.pd, va, n, Access::REMOTE_READ)
                    {
                        Ok(s) => Some(s),
                        Err(_) => {
                            self.nak_access(qp, ctx, psn);
                            return self.poll_transmit(qp, ctx, buf);
                        }
                    }
                } else {
                    None
                };
                let mrs = &*ctx.mrs;
                let mut fault = false;
                let out = path.emit(bth, ext, n as usize, buf, |dst| {
                    if let Some(s) = span {
                        fault = mrs.read(s, 0, dst).is_err();
                    }
                })?;
                if fault {
                    // The memory went away under the copy (the region is
                    // revoked now): the packet is not sent, and the READ
                    // ends as one the check above refuses.
                    self.nak_access(qp, ctx, psn);
                    return self.poll_transmit(qp, ctx, buf);
                }
                qp.counters.tx_bytes += n;
                if last {
                    self.pop_job();
                } else if let Some(Job::Read {
                    psn: p,
                    va: v,
                    remaining: r,
                    started: s,
                    ..
                }) = self.out.front_mut()
                {
                    *p = p.next();
                    *v += n;
                    *r -= n;
                    *s = true;
                }
                Some(out)
            }
        }
    }
}

fn response_bth(op: Operation, dest: Qpn, psn: Psn) -> BthRepr {
    // Every response operation exists on RC.
    let opcode = Opcode::new(Transport::Rc, op).unwrap_or(Opcode::RC_ACK);
    BthRepr::new(opcode, dest, psn)
}
