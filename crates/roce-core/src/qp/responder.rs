//! The responder (IBTA Vol 1 §9.7.4–§9.7.5.2 as rxe applies them, docs/protocol.md
//! §6): PSN checks, duplicate handling (re-ACK, READ replay,
//! atomic replay without re-execution), RNR, R_Key and bound checks, NAKs,
//! ACK coalescing and READ response generation; UC and UD receive paths.
//!
//! [`Responder`] holds the receive-side state, the receive queue included,
//! and does all of it, given the QP's shared part ([`QpCommon`]). This
//! file: the responder's state, the receive queue, the PSN checks and
//! duplicates, UC and UD; `ops`: executing SEND, WRITE, READ and atomics; `transmit`:
//! building the ACKs, NAKs and READ and atomic responses.

use std::collections::VecDeque;
use std::net::IpAddr;

use roce_wire::{MessageKind, Msn, NakCode, Psn, Rkey, RocePacket, Syndrome};

use super::state::{QpState, QpType};
use super::PostError;
use super::{Ctx, Half, QpCommon};
use crate::sgl::{self, ScatterError};
use crate::wc::{NetworkHdr, Wc, WcFlags, WcOpcode, WcStatus};
use crate::wr::RecvWr;
use crate::{AsyncEvent, Nanos};

mod ack;
mod ops;
mod transmit;

pub use ack::AckDelay;
use ack::AckHold;

/// Responses one QP's responder holds at most (ACKs coalesce, so these
/// are mostly NAKs, READ responses and atomic ACKs): a request that finds
/// the queue full is dropped unexecuted, as if lost, and its sender
/// resends it; the queue cannot grow with what the peer sends.
const MAX_OUT: usize = 512;

/// A message being received over several packets.
#[derive(Debug)]
enum InProgress {
    Send {
        wr: RecvWr,
        offset: u64,
    },
    Write {
        va: u64,
        rkey: Rkey,
        remaining: u64,
        total: u64,
    },
}

/// What a duplicate READ or atomic needs to be answered again.
#[derive(Debug, Clone, Copy)]
struct Record {
    psn: Psn,
    npsn: u32,
    kind: RecordKind,
}

#[derive(Debug, Clone, Copy)]
enum RecordKind {
    Read { va: u64, rkey: Rkey, len: u64 },
    Atomic { orig: u64 },
}

/// A response waiting to be sent, in PSN order.
#[derive(Debug, Clone, Copy)]
enum Job {
    Ack {
        psn: Psn,
        syndrome: Syndrome,
    },
    AtomicAck {
        psn: Psn,
        orig: u64,
        /// Answers a request executed as new (not a replay of one the
        /// requester may already have its answer to): holds a responder
        /// resource until it leaves.
        fresh: bool,
    },
    Read {
        psn: Psn,
        va: u64,
        rkey: Rkey,
        remaining: u64,
        started: bool,
        /// As for `AtomicAck`.
        fresh: bool,
    },
}

impl Job {
    /// A NAK that ends the responder (a class C error), not a PSN
    /// sequence NAK, which asks for a retry and changes no state.
    fn is_error_nak(&self) -> bool {
        matches!(
            self,
            Job::Ack {
                syndrome: Syndrome::Nak(code),
                ..
            } if *code != NakCode::PsnSequenceError
        )
    }
}

/// Responder state of one QP.
#[derive(Debug, Default)]
pub(crate) struct Responder {
    /// The receive queue (a QP on an SRQ takes from the SRQ instead).
    rq: VecDeque<RecvWr>,
    epsn: Psn,
    msn: Msn,
    cur: Option<InProgress>,
    /// A sequence-error NAK went out for the current expected PSN.
    nak_sent: bool,
    records: VecDeque<Record>,
    out: VecDeque<Job>,
    /// In the error state: how many jobs at the front of `out` are still
    /// owed (they go out, the rest is dropped).
    owed_in_error: usize,
    /// The next [`Responder::on_error`] keeps every queued job: set by a
    /// request that failed without a NAK of its own (its completion was
    /// lost to a full CQ), whose predecessors' answers are still owed.
    keep_queued: bool,
    /// The positive ACK at the end of `out`, while it is deferred
    /// ([`ack`]).
    ack_hold: AckHold,
    /// The PSN of the last positive ACK sent (the span a deferred ACK
    /// covers is counted from it).
    last_ack_psn: Psn,
}

impl Responder {
    pub(crate) fn reset(&mut self, epsn: Psn) {
        self.epsn = epsn;
        self.last_ack_psn = epsn.sub(1);
    }

    /// Output that may go at `now` (not a deferred ACK still held).
    pub(crate) fn has_output_at(&self, now: Nanos) -> bool {
        !self.out.is_empty() && !self.held(now)
    }

    /// A deferred ACK is still held at `now` (responder/ack.rs): nothing
    /// leaves before its deadline or the QP's answer.
    pub(crate) fn held(&self, now: Nanos) -> bool {
        self.deferred_ack() && self.ack_hold.holds(now)
    }

    /// The only job queued is a positive ACK that has not been sent: it
    /// was deferred, or is still owed after its deferral ended.
    fn deferred_ack(&self) -> bool {
        self.ack_hold.waiting()
            && self.out.len() == 1
            && matches!(
                self.out.front(),
                Some(Job::Ack {
                    syndrome: Syndrome::Ack { .. },
                    ..
                })
            )
    }

    /// When a deferred ACK must leave at the latest.
    pub(crate) fn poll_timeout(&self) -> Option<Nanos> {
        if self.deferred_ack() {
            self.ack_hold.deadline()
        } else {
            None
        }
    }

    /// A deferred ACK whose deadline has come is due.
    pub(crate) fn on_timer(&mut self, now: Nanos) -> bool {
        self.ack_hold.expire(now)
    }

    /// The job at the front went out: a positive ACK among them ends the
    /// deferral.
    fn ack_sent(&mut self, now: Nanos, psn: Psn) {
        self.ack_hold.sent(now);
        self.last_ack_psn = psn;
    }

    /// Makes a deferred ACK due; false when there is none.
    pub(crate) fn release_deferred_ack(&mut self) -> bool {
        let d = self.deferred_ack();
        self.ack_hold.release();
        d
    }

    /// The requester sent a packet at `now`: a deferred ACK follows it.
    pub(crate) fn answered(&mut self, now: Nanos, policy: AckDelay) -> bool {
        self.ack_hold.answered(now, policy)
    }

    pub(crate) fn has_output(&self) -> bool {
        !self.out.is_empty()
    }

    /// Whether `max` READ and atomic requests already have their
    /// responses queued: the responder resources are all in use (IBTA
    /// Vol 1 §9.5.4, max_dest_rd_atomic). Stops at the `max`-th.
    fn rd_atomic_full(&self, max: usize) -> bool {
        max == 0
            || self
                .out
                .iter()
                .filter(|j| {
                    matches!(
                        j,
                        Job::AtomicAck { fresh: true, .. } | Job::Read { fresh: true, .. }
                    )
                })
                .nth(max - 1)
                .is_some()
    }

    /// The receive WR of a SEND in progress, if any (it must still complete).
    pub(crate) fn take_in_progress_recv(&mut self) -> Option<RecvWr> {
        match self.cur.take() {
            Some(InProgress::Send { wr, .. }) => Some(wr),
            other => {
                self.cur = other;
                None
            }
        }
    }

    /// On entering the error state: what was queued up to the last error
    /// NAK still goes out, in order, and nothing after it. Responses are queued
    /// in PSN order, so the READ responses, atomic ACKs and ACKs before a
    /// NAK answer requests executed before the one that failed: the NAK
    /// acknowledges those requests, and their responses must precede it
    /// (IBTA Vol 1 §9.7.5, responses in PSN order; §9.9, a class C
    /// error ends the responder after its NAK). With no error NAK queued
    /// (the QP was moved to the error state, or its requester failed)
    /// nothing goes out, not even a queued sequence NAK.
    ///
    /// A deferred ACK still goes out: with deferral off it would have left
    /// before the application could see the completions it acknowledges
    /// and move the QP to the error state.
    pub(crate) fn on_error(&mut self) {
        let deferred = self.deferred_ack();
        let keep = if std::mem::take(&mut self.keep_queued) || deferred {
            self.out.len()
        } else {
            self.out
                .iter()
                .rposition(Job::is_error_nak)
                .map_or(0, |i| i + 1)
        };
        self.out.truncate(keep);
        self.owed_in_error = keep;
        self.cur = None;
        if deferred {
            self.ack_hold.release();
        } else {
            self.ack_hold.forget();
        }
    }

    /// In the error state: whether queued output is still owed.
    pub(crate) fn owes_in_error(&self) -> bool {
        self.owed_in_error > 0
    }

    /// Takes the front job off the queue (it went out whole).
    pub(crate) fn pop_job(&mut self) {
        if self.out.pop_front().is_some() {
            self.owed_in_error = self.owed_in_error.saturating_sub(1);
        }
    }

    /// Queues an ACK, merging it into a trailing ACK (cumulative).
    fn push_ack(&mut self, psn: Psn, syndrome: Syndrome) {
        if let (
            Some(Job::Ack {
                psn: p,
                syndrome: s,
            }),
            Syndrome::Ack { .. },
        ) = (self.out.back_mut(), syndrome)
        {
            if matches!(s, Syndrome::Ack { .. }) {
                *p = psn;
                return;
            }
        }
        self.out.push_back(Job::Ack { psn, syndrome });
    }
}

/// The receive queue, and the error state of the receive side.
impl Responder {
    /// `ibv_post_recv`.
    pub(crate) fn post_recv(
        &mut self,
        qp: &QpCommon,
        wr: RecvWr,
        ctx: &mut Ctx<'_>,
    ) -> Result<(), PostError> {
        if qp.init.srq.is_some() {
            return Err(PostError::InvalidWr("the QP uses a shared receive queue"));
        }
        if qp.state == QpState::Reset {
            return Err(PostError::BadState(qp.state));
        }
        if wr.sgl.len() > qp.init.cap.max_recv_sge as usize {
            return Err(PostError::TooManySge);
        }
        if self.rq.len() >= qp.init.cap.max_recv_wr as usize {
            return Err(PostError::QueueFull);
        }
        if qp.state == QpState::Err {
            let wc = Wc::new(wr.wr_id, WcStatus::WrFlushErr, WcOpcode::Recv, qp.qpn);
            ctx.complete(qp.init.recv_cq, wc, false);
            return Ok(());
        }
        self.rq.push_back(wr);
        Ok(())
    }

    /// The next receive WR: from the SRQ or the QP's own queue.
    fn take_recv(&mut self, qp: &QpCommon, ctx: &mut Ctx<'_>) -> Option<RecvWr> {
        match qp.init.srq {
            Some(id) => {
                let srq = ctx.srq(id)?;
                let wr = srq.take();
                if srq.check_limit() {
                    ctx.events.push_back(AsyncEvent::SrqLimitReached(id));
                }
                wr
            }
            None => self.rq.pop_front(),
        }
    }

    /// Gives back a receive WR that a broken UC message had taken.
    fn untake_recv(&mut self, qp: &QpCommon, wr: RecvWr, ctx: &mut Ctx<'_>) {
        match qp.init.srq {
            Some(id) => {
                if let Some(srq) = ctx.srq(id) {
                    srq.push_front(wr);
                }
            }
            None => self.rq.push_front(wr),
        }
    }

    /// On reset or destroy: a receive taken from the SRQ by a SEND in
    /// progress goes back to the SRQ's head. It is the SRQ's, not this
    /// QP's (the application posted it there and holds its memory until
    /// it completes or the SRQ goes), and the QP's queues are discarded
    /// without completions.
    pub(crate) fn return_srq_recv(&mut self, qp: &QpCommon, ctx: &mut Ctx<'_>) {
        if qp.init.srq.is_some() {
            if let Some(wr) = self.take_in_progress_recv() {
                self.untake_recv(qp, wr, ctx);
            }
        }
    }

    /// Completes every receive WR with WR_FLUSH_ERR (a receive taken by
    /// a SEND still in progress first) and keeps only the output still
    /// owed ([`Responder::on_error`]).
    pub(crate) fn flush(&mut self, qp: &QpCommon, ctx: &mut Ctx<'_>) {
        let in_progress = self.take_in_progress_recv();
        for wr in in_progress.into_iter().chain(std::mem::take(&mut self.rq)) {
            let wc = Wc::new(wr.wr_id, WcStatus::WrFlushErr, WcOpcode::Recv, qp.qpn);
            ctx.complete(qp.init.recv_cq, wc, false);
        }
        self.on_error();
        if qp.init.srq.is_some() {
            // It takes no more SRQ receives: the one in progress, if any,
            // was flushed above.
            ctx.events.push_back(AsyncEvent::QpLastWqeReached(qp.qpn));
        }
    }

    /// The QP goes to the error state: this half flushes now, the
    /// requester when control returns to the QP.
    fn enter_error(&mut self, qp: &mut QpCommon, ctx: &mut Ctx<'_>) {
        if qp.enter_error(ctx) {
            self.flush(qp, ctx);
            qp.unflushed = Some(Half::Requester);
        }
    }
}

/// What went wrong with a request, and how to answer it.
enum Failure {
    /// NAK with this code; the QP goes to the error state.
    Nak(NakCode),
    /// RNR NAK: no receive posted; the request is retried later.
    Rnr,
    /// Drop silently (UC/UD).
    Drop,
}

impl Responder {
    /// Handles a request packet addressed to this QP. Returns whether it
    /// was taken as the next in sequence (its ECN mark may then count).
    pub(crate) fn handle_request(
        &mut self,
        qp: &mut QpCommon,
        p: &RocePacket<'_>,
        ctx: &mut Ctx<'_>,
    ) -> bool {
        if !matches!(
            qp.state,
            QpState::Rtr | QpState::Rts | QpState::Sqd | QpState::Sqe
        ) {
            qp.counters.drop_bad_state += 1;
            return false;
        }
        match qp.init.qp_type {
            QpType::Rc => self.rc_request(qp, p, ctx),
            QpType::Uc => self.uc_request(qp, p, ctx),
            QpType::Ud => self.ud_request(qp, p, ctx),
        }
    }

    fn rc_request(&mut self, qp: &mut QpCommon, p: &RocePacket<'_>, ctx: &mut Ctx<'_>) -> bool {
        if self.out.len() >= MAX_OUT {
            qp.counters.drop_responder_full += 1;
            return false;
        }
        let psn = p.bth.psn;
        let d = psn.diff(self.epsn);
        if d > 0 {
            qp.counters.drop_out_of_sequence += 1;
            if !self.nak_sent {
                self.nak_sent = true;
                qp.counters.seq_naks_sent += 1;
                let e = self.epsn;
                self.out.push_back(Job::Ack {
                    psn: e,
                    syndrome: Syndrome::Nak(NakCode::PsnSequenceError),
                });
            }
            return false;
        }
        if d < 0 {
            self.duplicate(qp, p);
            return false;
        }
        qp.counters.rx_packets += 1;
        qp.counters.rx_bytes += p.payload.len() as u64;
        match self.execute(qp, p, ctx) {
            Ok(()) if std::mem::take(&mut ctx.cq_lost) => {
                // Its completion did not fit the CQ: no ACK (the requester
                // must not believe it delivered), the error state, and the
                // answers to earlier requests still go out (a class G
                // error in rxe, RESPST_ERR_CQ_OVERFLOW).
                self.keep_queued = true;
                self.enter_error(qp, ctx);
            }
            Ok(()) => {
                self.nak_sent = false;
                // READ responses and atomic ACKs acknowledge by themselves.
                let acked_by_response = matches!(
                    p.bth.opcode.kind(),
                    MessageKind::ReadRequest | MessageKind::CompareSwap | MessageKind::FetchAdd
                );
                if p.bth.ack_req && !acked_by_response {
                    let e = self.epsn.sub(1);
                    self.push_ack(e, Syndrome::ACK_UNLIMITED);
                    if self.out.len() == 1 {
                        let span = e.diff(self.last_ack_psn);
                        self.ack_hold.on_ack_queued(ctx.now, span, ctx.ack_delay);
                    } else {
                        self.ack_hold.release();
                    }
                } else if acked_by_response {
                    // Its response goes behind the held ACK, in order.
                    self.ack_hold.release();
                }
            }
            Err(Failure::Rnr) => {
                qp.counters.rnr_naks_sent += 1;
                let timer = qp.attr.min_rnr_timer & 31;
                self.out.push_back(Job::Ack {
                    psn,
                    syndrome: Syndrome::RnrNak { timer },
                });
            }
            Err(Failure::Nak(code)) => {
                qp.counters.error_naks_sent += 1;
                self.out.push_back(Job::Ack {
                    psn,
                    syndrome: Syndrome::Nak(code),
                });
                self.enter_error(qp, ctx);
            }
            Err(Failure::Drop) => {}
        }
        true
    }

    /// A request with a PSN already executed.
    fn duplicate(&mut self, qp: &mut QpCommon, p: &RocePacket<'_>) {
        qp.counters.duplicates += 1;
        let psn = p.bth.psn;
        match p.bth.opcode.kind() {
            MessageKind::ReadRequest => {
                let Some(reth) = p.ext.reth else { return };
                let pmtu = qp.pmtu() as u64;
                let rec = self.records.iter().find(|r| {
                    psn.diff(r.psn) >= 0
                        && psn.diff(r.psn) < r.npsn as i32
                        && matches!(r.kind, RecordKind::Read { .. })
                });
                if let Some(&Record {
                    psn: rpsn,
                    npsn: rnpsn,
                    kind: RecordKind::Read { va, rkey, len },
                }) = rec
                {
                    let off = psn.diff(rpsn) as u64 * pmtu;
                    // The retried request may ask for a subset of the original range.
                    let ok = reth.rkey == rkey
                        && reth.va == va + off
                        && reth.dma_len as u64 <= len - off.min(len);
                    if ok {
                        qp.counters.read_replays += 1;
                        // Drop any unsent remainder of the same READ (its PSN
                        // range), which is now served again; other READs
                        // stay. The replay keeps the resource the
                        // remainder held, and takes none otherwise.
                        let mut fresh = false;
                        self.out.retain(|j| match j {
                            Job::Read {
                                psn: p, fresh: f, ..
                            } => {
                                let same = p.diff(rpsn) >= 0 && p.diff(rpsn) < rnpsn as i32;
                                fresh |= same && *f;
                                !same
                            }
                            _ => true,
                        });
                        self.out.push_back(Job::Read {
                            psn,
                            va: reth.va,
                            rkey,
                            remaining: reth.dma_len as u64,
                            started: false,
                            fresh,
                        });
                    }
                }
            }
            MessageKind::CompareSwap | MessageKind::FetchAdd => {
                let rec = self
                    .records
                    .iter()
                    .find(|r| r.psn == psn && matches!(r.kind, RecordKind::Atomic { .. }));
                if let Some(&Record {
                    kind: RecordKind::Atomic { orig },
                    ..
                }) = rec
                {
                    qp.counters.atomic_replays += 1;
                    self.out.push_back(Job::AtomicAck {
                        psn,
                        orig,
                        fresh: false,
                    });
                }
            }
            _ => {
                // SEND/WRITE are never executed twice: acknowledge again,
                // at once (the requester is retrying: it waits for this).
                let e = self.epsn.sub(1);
                self.push_ack(e, Syndrome::ACK_UNLIMITED);
                self.ack_hold.release();
            }
        }
    }

    /// Executes an in-sequence request (RC and UC). On success the
    /// expected PSN has advanced.
    fn execute(
        &mut self,
        qp: &mut QpCommon,
        p: &RocePacket<'_>,
        ctx: &mut Ctx<'_>,
    ) -> Result<(), Failure> {
        let op = p.bth.opcode;
        let pos = op.position();
        let kind = op.kind();
        let pmtu = qp.pmtu() as usize;
        let len = p.payload.len();
        let uc = qp.init.qp_type == QpType::Uc;
        let invalid = if uc {
            Failure::Drop
        } else {
            Failure::Nak(NakCode::InvalidRequest)
        };
        // Opcode sequence (IBTA 9.7.5.1.1): a message in progress continues
        // with MIDDLE/LAST of the same kind; anything else, including a new
        // FIRST/ONLY, is an invalid request. No message in progress: only a
        // FIRST/ONLY (or a single-packet request) may come.
        let in_sequence = match (&self.cur, kind) {
            (Some(InProgress::Send { .. }), MessageKind::Send)
            | (Some(InProgress::Write { .. }), MessageKind::Write) => !pos.starts(),
            (Some(_), _) => false,
            (None, _) => pos.starts(),
        };
        if !in_sequence {
            return Err(invalid);
        }
        if !op.payload().allows(len, pmtu) {
            return Err(invalid);
        }
        // A responder with no READ/atomic resources (max_dest_rd_atomic 0)
        // refuses those requests as invalid, as rxe does.
        let rd_atomic = matches!(
            kind,
            MessageKind::ReadRequest | MessageKind::CompareSwap | MessageKind::FetchAdd
        );
        if rd_atomic && qp.attr.max_dest_rd_atomic == 0 {
            return Err(invalid);
        }
        // Responder resources (IBTA Vol 1 §9.5.4, C9-14x): a new READ or
        // atomic beyond max_dest_rd_atomic outstanding is an Invalid
        // Request (class C; rxe names it ERR_TOO_MANY_RDMA_ATM_REQ but
        // recycles its oldest resource instead). A requester that keeps
        // to its max_rd_atomic never sees it: it counts a request until
        // its response arrives, and this queue lets go of it when sent.
        if rd_atomic && self.rd_atomic_full(qp.attr.max_dest_rd_atomic as usize) {
            return Err(invalid);
        }
        match kind {
            MessageKind::Send => self.recv_send(qp, p, ctx)?,
            MessageKind::Write => self.recv_write(qp, p, ctx)?,
            MessageKind::ReadRequest if !uc => return self.recv_read(qp, p, ctx),
            MessageKind::CompareSwap | MessageKind::FetchAdd if !uc => {
                self.recv_atomic(qp, p, ctx)?
            }
            _ => return Err(invalid),
        }
        self.epsn = self.epsn.next();
        Ok(())
    }

    fn uc_request(&mut self, qp: &mut QpCommon, p: &RocePacket<'_>, ctx: &mut Ctx<'_>) -> bool {
        let psn = p.bth.psn;
        if psn != self.epsn {
            // A gap: the message in progress is lost; resynchronise on the
            // next FIRST/ONLY packet.
            if let Some(InProgress::Send { wr, .. }) = self.cur.take() {
                self.untake_recv(qp, wr, ctx);
            }
            self.cur = None;
            if !p.bth.opcode.position().starts() {
                qp.counters.drop_out_of_sequence += 1;
                self.epsn = psn.next();
                return false;
            }
            self.epsn = psn;
        }
        qp.counters.rx_packets += 1;
        qp.counters.rx_bytes += p.payload.len() as u64;
        if self.execute(qp, p, ctx).is_err() {
            qp.counters.drop_invalid += 1;
            if let Some(InProgress::Send { wr, .. }) = self.cur.take() {
                self.untake_recv(qp, wr, ctx);
            }
            self.epsn = psn.next();
        }
        true
    }

    fn ud_request(&mut self, qp: &mut QpCommon, p: &RocePacket<'_>, ctx: &mut Ctx<'_>) -> bool {
        let Some(deth) = p.ext.deth else {
            qp.counters.drop_invalid += 1;
            return false;
        };
        if deth.qkey != qp.attr.qkey {
            qp.counters.drop_qkey += 1;
            return false;
        }
        if p.payload.len() > qp.pmtu() as usize {
            qp.counters.drop_invalid += 1;
            return false;
        }
        let Some(wr) = self.take_recv(qp, ctx) else {
            qp.counters.drop_no_recv += 1;
            return true;
        };
        qp.counters.rx_packets += 1;
        qp.counters.rx_bytes += p.payload.len() as u64;
        // The first 40 bytes of the buffer receive the GRH: for IPv4, 20
        // zero bytes and then the IPv4 header (IBTA A17.4.5.1), written
        // from the parsed header's repr (the datagram may have come
        // without its header bytes, as a UDP payload).
        let mut grh = [0u8; 40];
        let at = match p.ip.src() {
            IpAddr::V4(_) => 20,
            IpAddr::V6(_) => 0,
        };
        // A repr that parsed (or was built from a receiver's header)
        // emits; should it not, the GRH stays zero.
        let _ = p.ip.emit(&mut grh[at..]);
        let pd = qp.init.pd;
        let res = sgl::scatter(ctx.mrs, pd, &wr.sgl, 0, &grh)
            .and_then(|_| sgl::scatter(ctx.mrs, pd, &wr.sgl, 40, p.payload));
        let mut wc = Wc::new(wr.wr_id, WcStatus::Success, WcOpcode::Recv, qp.qpn);
        match res {
            Ok(()) => {
                wc.byte_len = 40 + p.payload.len() as u32;
                wc.src_qp = deth.src_qp;
                wc.wc_flags = WcFlags::GRH;
                wc.network_hdr = Some(match p.ip.src() {
                    IpAddr::V4(_) => NetworkHdr::Ipv4,
                    IpAddr::V6(_) => NetworkHdr::Ipv6,
                });
                if let Some(imm) = p.ext.imm {
                    wc.imm_data = imm;
                    wc.wc_flags = wc.wc_flags | WcFlags::WITH_IMM;
                }
            }
            Err(ScatterError::TooLong) => wc.status = WcStatus::LocLenErr,
            Err(ScatterError::Access(_)) => wc.status = WcStatus::LocProtErr,
        }
        ctx.complete(qp.init.recv_cq, wc, p.bth.solicited);
        true
    }
}
