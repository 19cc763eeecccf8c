//! The requester and completer (IBTA Vol 1 §9.7.2–§9.7.5.1 as rxe applies
//! them, docs/protocol.md §6): segmentation into PMTU packets, PSN
//! assignment, ACK/NAK and response processing, go-back-N retransmission
//! from the exact PSN, the local ACK timeout and RNR timers, and in-order
//! completion of send work requests.
//!
//! [`Requester`] holds the send-side state and does all of it, given the
//! QP's shared part ([`QpCommon`]). This file: the send queue, posting,
//! building request packets, and completing (or failing) WQEs in order;
//! `response`: what ACKs, NAKs, READ responses and timeouts do.

use std::collections::VecDeque;

use roce_wire::{
    AtomicEthRepr, BthRepr, DethRepr, ExtHeaders, Opcode, Operation, Position, Psn, Qkey, RethRepr,
    Transport,
};

use super::state::{QpState, QpType};
use super::{Ctx, Half, PostError, QpCommon};
use crate::sgl;
use crate::wc::{Wc, WcOpcode, WcStatus};
use crate::wr::{Payload, SendFlags, SendOp, SendWr};
use crate::{AsyncEvent, Nanos};

mod response;

/// Most PSNs in flight (unacknowledged) at once; far below the 2^23 window.
pub(crate) const MAX_INFLIGHT_PSNS: i32 = 4096;
/// A long message asks for an ACK at least every this many packets.
pub(crate) const ACK_REQ_INTERVAL: u32 = 64;

/// A send work request in the queue.
#[derive(Debug)]
pub(crate) struct SendWqe {
    wr: SendWr,
    len: u64,
    seq: u64,
    started: bool,
    first_psn: Psn,
    npsn: u32,
    /// SEND/WRITE: acknowledged; READ/atomic: all response data in.
    done: bool,
    /// READ: response packets received in order.
    read_recv: u32,
    error: Option<WcStatus>,
}

impl SendWqe {
    fn last_psn(&self) -> Psn {
        self.first_psn.add(self.npsn.saturating_sub(1))
    }
    fn contains(&self, psn: Psn) -> bool {
        self.started && psn.diff(self.first_psn) >= 0 && psn.diff(self.first_psn) < self.npsn as i32
    }
    fn wc_opcode(&self) -> WcOpcode {
        match self.wr.op {
            SendOp::Send | SendOp::SendWithImm(_) | SendOp::SendWithInv(_) => WcOpcode::Send,
            SendOp::Write | SendOp::WriteWithImm(_) => WcOpcode::RdmaWrite,
            SendOp::Read => WcOpcode::RdmaRead,
            SendOp::CompareSwap { .. } => WcOpcode::CompSwap,
            SendOp::FetchAdd { .. } => WcOpcode::FetchAdd,
        }
    }
}

/// Requester state of one QP.
#[derive(Debug, Default)]
pub(crate) struct Requester {
    sq: VecDeque<SendWqe>,
    next_seq: u64,
    /// The WQE (by sequence number) and packet index to transmit next.
    cursor_seq: u64,
    cursor_pkt: u32,
    /// PSN of the next packet never sent before.
    next_psn: Psn,
    /// Oldest unacknowledged PSN.
    una: Psn,
    retry_left: u8,
    rnr_left: u8,
    /// Local ACK timeout deadline.
    timer: Option<Nanos>,
    /// No transmission before this time (RNR wait).
    rnr_until: Option<Nanos>,
    rd_atomic_outstanding: u32,
    /// A go-back-N retry is under way and no progress was made since: a
    /// NAK, implied NAK or out-of-order response caused by the same loss
    /// must not spend the retry budget again (rxe's `started_retry`). Only
    /// the ACK timeout retries again meanwhile.
    retry_started: bool,
    /// In SQD and not yet drained; `Some(true)` when the drain is to be
    /// announced (`EN_SQD_ASYNC_NOTIFY`).
    draining: Option<bool>,
}

impl Requester {
    pub(crate) fn reset_psn(&mut self, psn: Psn) {
        self.next_psn = psn;
        self.una = psn;
    }

    pub(crate) fn reset_retries(&mut self, retry: u8, rnr: u8) {
        self.retry_left = retry;
        self.rnr_left = rnr;
    }

    /// True when the cursor points at a WQE still to (re)send. O(1): this
    /// runs for every packet.
    pub(crate) fn has_work(&self) -> bool {
        self.index_of(self.cursor_seq).is_some()
    }

    /// True when the packet to send next belongs to a request that
    /// completes a receive at the responder (SEND, WRITE with immediate):
    /// one the peer's program learns of from a CQ rather than from memory.
    pub(crate) fn next_completes_a_receive(&self) -> bool {
        self.index_of(self.cursor_seq).is_some_and(|i| {
            matches!(
                self.sq[i].wr.op,
                SendOp::Send
                    | SendOp::SendWithImm(_)
                    | SendOp::SendWithInv(_)
                    | SendOp::WriteWithImm(_)
            )
        })
    }

    pub(crate) fn poll_timeout(&self) -> Option<Nanos> {
        match (self.timer, self.rnr_until) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Completes every WQE left with its error, or WR_FLUSH_ERR.
    pub(crate) fn flush(&mut self, qp: &QpCommon, ctx: &mut Ctx<'_>) {
        for w in self.sq.drain(..) {
            let status = w.error.unwrap_or(WcStatus::WrFlushErr);
            let wc = Wc::new(w.wr.wr_id, status, w.wc_opcode(), qp.qpn);
            ctx.complete(qp.init.send_cq, wc, false);
        }
        self.timer = None;
        self.rnr_until = None;
        self.rd_atomic_outstanding = 0;
    }

    fn index_of(&self, seq: u64) -> Option<usize> {
        let front = self.sq.front()?.seq;
        let i = seq.checked_sub(front)? as usize;
        (i < self.sq.len()).then_some(i)
    }

    fn in_flight(&self) -> bool {
        self.next_psn != self.una
    }

    /// Still draining: in SQD with a message begun and not finished.
    pub(crate) fn draining(&self) -> bool {
        self.draining.is_some()
    }
}

/// PSNs a message of `len` bytes takes.
fn psns_for(op: SendOp, len: u64, pmtu: u32) -> u32 {
    if op.is_atomic() {
        return 1;
    }
    len.div_ceil(pmtu as u64).max(1) as u32
}

impl Requester {
    /// `ibv_post_send`.
    pub(crate) fn post_send(
        &mut self,
        qp: &QpCommon,
        mut wr: SendWr,
        ctx: &mut Ctx<'_>,
    ) -> Result<(), PostError> {
        let qt = qp.init.qp_type;
        match qp.state {
            QpState::Rts | QpState::Sqd | QpState::Err => {}
            QpState::Sqe if qt != QpType::Rc => {}
            s => return Err(PostError::BadState(s)),
        }
        if self.sq.len() >= qp.init.cap.max_send_wr as usize {
            return Err(PostError::QueueFull);
        }
        let allowed = match qt {
            QpType::Rc => true,
            QpType::Uc => matches!(
                wr.op,
                SendOp::Send | SendOp::SendWithImm(_) | SendOp::Write | SendOp::WriteWithImm(_)
            ),
            QpType::Ud => matches!(wr.op, SendOp::Send | SendOp::SendWithImm(_)),
        };
        if !allowed {
            return Err(PostError::UnsupportedOp);
        }
        // The UD fields (address, remote QPN and Q_Key) mean nothing to a
        // connected QP, as in verbs: its peer is in its attributes.
        if qt != QpType::Ud {
            wr.ud = None;
        }
        if qt == QpType::Ud && wr.ud.is_none() {
            return Err(PostError::InvalidWr("UD send without an address handle"));
        }
        if let Payload::Sgl(s) = &wr.payload {
            if s.len() > qp.init.cap.max_send_sge as usize {
                return Err(PostError::TooManySge);
            }
        }
        // Inline by the flag, or given as bytes: the same rules either way.
        if wr.flags.contains(SendFlags::INLINE) || matches!(wr.payload, Payload::Inline(_)) {
            if wr.op.is_read_or_atomic() {
                return Err(PostError::InvalidWr("READ and atomics cannot be inline"));
            }
            if wr.payload.len() > qp.init.cap.max_inline_data as u64 {
                return Err(PostError::InlineTooLong);
            }
            if let Payload::Sgl(s) = &wr.payload {
                let mut data = vec![0u8; wr.payload.len() as usize];
                if sgl::gather(ctx.mrs, qp.init.pd, s, 0, &mut data).is_err() {
                    return Err(PostError::InvalidWr("inline SGE outside registered memory"));
                }
                wr.payload = Payload::Inline(data);
            }
        }
        let len = wr.payload.len();
        if wr.op.is_atomic() && len != 8 {
            return Err(PostError::InvalidWr(
                "atomics need one 8-byte result buffer",
            ));
        }
        if len > (1u64 << 31) {
            return Err(PostError::InvalidWr("message longer than 2 GiB"));
        }
        // PSNs compare within half their 24-bit space (`Psn::diff`): a message
        // needs fewer than 2^23 of them. Only a message within 256 bytes
        // of 2 GiB at a 256-byte path MTU needs more.
        if psns_for(wr.op, len, qp.pmtu()) >= 1 << 23 {
            return Err(PostError::InvalidWr(
                "message spans 2^23 PSNs at this path MTU (half the PSN space)",
            ));
        }
        if qt == QpType::Ud && len > qp.pmtu() as u64 {
            return Err(PostError::InvalidWr("UD message longer than the path MTU"));
        }
        let seq = self.next_seq;
        self.next_seq += 1;
        let wqe = SendWqe {
            npsn: psns_for(wr.op, len, qp.pmtu()),
            wr,
            len,
            seq,
            started: false,
            first_psn: Psn::new(0),
            done: false,
            read_recv: 0,
            error: None,
        };
        if qp.state == QpState::Err {
            let wc = Wc::new(wqe.wr.wr_id, WcStatus::WrFlushErr, wqe.wc_opcode(), qp.qpn);
            ctx.complete(qp.init.send_cq, wc, false);
            return Ok(());
        }
        self.sq.push_back(wqe);
        Ok(())
    }

    /// Builds the next request packet, if the QP may send one now.
    pub(crate) fn poll_transmit(
        &mut self,
        qp: &mut QpCommon,
        ctx: &mut Ctx<'_>,
        buf: &mut [u8],
    ) -> Option<roce_wire::Transmit> {
        if !matches!(qp.state, QpState::Rts | QpState::Sqd) {
            return None;
        }
        if self.rnr_until.is_some_and(|t| ctx.now < t) {
            return None;
        }
        let pmtu = qp.pmtu();
        let idx = self.index_of(self.cursor_seq)?;
        // The rate limiter (congestion control): wait for the pacer's slot.
        if !qp.cc.may_send(ctx.now) {
            return None;
        }
        // Gate the start of a new message.
        if !self.sq[idx].started {
            if qp.state == QpState::Sqd {
                return None;
            }
            let w = &self.sq[idx];
            if w.wr.op.is_read_or_atomic()
                && self.rd_atomic_outstanding >= qp.attr.max_rd_atomic.max(1) as u32
            {
                return None;
            }
            if w.wr.flags.contains(SendFlags::FENCE)
                && self
                    .sq
                    .iter()
                    .take(idx)
                    .any(|p| p.wr.op.is_read_or_atomic() && !p.done)
            {
                return None;
            }
            // Counted in i64: a message of millions of PSNs must not wrap
            // the 24-bit difference and slip past the limit.
            if qp.init.qp_type == QpType::Rc
                && i64::from(self.next_psn.diff(self.una)) + i64::from(w.npsn)
                    > i64::from(MAX_INFLIGHT_PSNS)
                && self.in_flight()
            {
                return None;
            }
            let next_psn = self.next_psn;
            let w = &mut self.sq[idx];
            w.started = true;
            w.first_psn = next_psn;
            if w.wr.op.is_read_or_atomic() {
                self.rd_atomic_outstanding += 1;
            }
            self.cursor_pkt = 0;
        }
        let k = self.cursor_pkt;
        let w = &self.sq[idx];
        let psn = w.first_psn.add(k);
        let retransmission = psn.diff(self.next_psn) < 0;
        // The per-packet window (rxe's RXE_MAX_UNACKED_PSNS): a new packet
        // waits for ACKs once it would be too far past the oldest
        // unacknowledged PSN.
        let window = ctx.max_unacked as i32;
        let rc = qp.init.qp_type == QpType::Rc;
        if rc && window > 0 && !retransmission && psn.diff(self.una) > window {
            return None;
        }
        let (mut bth, ext, offset, plen, last_pkt) = self.build_request(qp, idx, k, pmtu);
        // The packet that fills the window asks for the ACK that reopens it.
        if rc && window > 0 && psn.diff(self.una) >= window {
            bth.ack_req = true;
        }
        let ud_av = self.sq[idx].wr.ud.map(|u| u.av);
        let Some(path) = qp.path(ud_av.as_ref(), ctx) else {
            // The address vector names a GID index the device does not have.
            self.fail_wqe(qp, idx, WcStatus::LocQpOpErr, ctx);
            return None;
        };
        let w = &self.sq[idx];
        let mut gather_err = None;
        let n = {
            let mrs = &*ctx.mrs;
            let pd = qp.init.pd;
            path.emit(bth, ext, plen, buf, |dst| {
                let r = match &w.wr.payload {
                    Payload::Inline(d) => {
                        dst.copy_from_slice(&d[offset as usize..offset as usize + plen]);
                        Ok(())
                    }
                    Payload::Sgl(s) => sgl::gather(mrs, pd, s, offset, dst),
                };
                gather_err = r.err();
            })
        };
        let Some(n) = n else {
            // Addresses of different families: the WR cannot be sent.
            self.fail_wqe(qp, idx, WcStatus::LocQpOpErr, ctx);
            return None;
        };
        if gather_err.is_some() {
            self.fail_wqe(qp, idx, WcStatus::LocProtErr, ctx);
            return None;
        }
        // Advance the cursor.
        if last_pkt {
            self.cursor_seq += 1;
            self.cursor_pkt = 0;
        } else {
            self.cursor_pkt += 1;
        }
        let end = if matches!(self.sq[idx].wr.op, SendOp::Read) {
            self.sq[idx].first_psn.add(self.sq[idx].npsn)
        } else {
            psn.next()
        };
        if end.diff(self.next_psn) > 0 {
            self.next_psn = end;
            if rc {
                let out = self.next_psn.diff(self.una).max(0) as u64;
                qp.counters.max_outstanding = qp.counters.max_outstanding.max(out);
            }
        }
        qp.counters.tx_bytes += plen as u64;
        qp.cc.on_sent(n.size as u64, ctx.now);
        if retransmission {
            qp.counters.retransmitted += 1;
        }
        match qp.init.qp_type {
            QpType::Rc => {
                if self.timer.is_none() {
                    self.timer = qp.ack_timeout_ns().map(|t| ctx.now + t);
                }
            }
            // Unreliable: a WR is complete once its last packet is out.
            QpType::Uc | QpType::Ud => {
                if last_pkt {
                    self.sq[idx].done = true;
                    self.una = self.next_psn;
                    self.retire(qp, ctx);
                }
            }
        }
        Some(n)
    }

    /// Headers, payload offset and length of packet `k` of WQE `idx`.
    fn build_request(
        &self,
        qp: &QpCommon,
        idx: usize,
        k: u32,
        pmtu: u32,
    ) -> (BthRepr, ExtHeaders, u64, usize, bool) {
        let w = &self.sq[idx];
        let qt = qp.init.qp_type;
        let transport = match qt {
            QpType::Rc => Transport::Rc,
            QpType::Uc => Transport::Uc,
            QpType::Ud => Transport::Ud,
        };
        let psn = w.first_psn.add(k);
        let mut ext = ExtHeaders::default();
        let dest_qp = w.wr.ud.map_or(qp.attr.dest_qp_num, |u| u.qpn);
        if let Some(u) = w.wr.ud {
            let qkey = if u.qkey.value() & 0x8000_0000 != 0 {
                qp.attr.qkey
            } else {
                u.qkey
            };
            ext.deth = Some(DethRepr {
                qkey: Qkey::new(qkey.value()),
                src_qp: qp.qpn,
            });
        }
        let (op, offset, plen, last) = match w.wr.op {
            SendOp::Read => {
                let off = k as u64 * pmtu as u64;
                ext.reth = Some(RethRepr {
                    va: w.wr.remote_addr.wrapping_add(off),
                    rkey: w.wr.rkey,
                    dma_len: (w.len - off.min(w.len)) as u32,
                });
                (Operation::ReadRequest, 0, 0, true)
            }
            SendOp::CompareSwap { compare, swap } => {
                ext.atomic = Some(AtomicEthRepr {
                    va: w.wr.remote_addr,
                    rkey: w.wr.rkey,
                    swap_add: swap,
                    compare,
                });
                (Operation::CompareSwap, 0, 0, true)
            }
            SendOp::FetchAdd { add } => {
                ext.atomic = Some(AtomicEthRepr {
                    va: w.wr.remote_addr,
                    rkey: w.wr.rkey,
                    swap_add: add,
                    compare: 0,
                });
                (Operation::FetchAdd, 0, 0, true)
            }
            op => {
                let off = k as u64 * pmtu as u64;
                let plen = (w.len - off).min(pmtu as u64) as usize;
                let first = k == 0;
                let last = k + 1 >= w.npsn;
                let pos = match (first, last) {
                    (true, true) => Position::Only,
                    (true, false) => Position::First,
                    (false, true) => Position::Last,
                    (false, false) => Position::Middle,
                };
                let write = matches!(op, SendOp::Write | SendOp::WriteWithImm(_));
                if write && first {
                    ext.reth = Some(RethRepr {
                        va: w.wr.remote_addr,
                        rkey: w.wr.rkey,
                        dma_len: w.len as u32,
                    });
                }
                let imm = match op {
                    SendOp::SendWithImm(v) | SendOp::WriteWithImm(v) => Some(v),
                    _ => None,
                };
                if pos.ends() {
                    ext.imm = imm;
                    if let SendOp::SendWithInv(r) = op {
                        ext.ieth = Some(r);
                    }
                }
                let operation = match (
                    write,
                    pos,
                    imm.is_some(),
                    matches!(op, SendOp::SendWithInv(_)),
                ) {
                    (false, Position::First, ..) => Operation::SendFirst,
                    (false, Position::Middle, ..) => Operation::SendMiddle,
                    (false, Position::Last, _, true) => Operation::SendLastInv,
                    (false, Position::Only, _, true) => Operation::SendOnlyInv,
                    (false, Position::Last, true, _) => Operation::SendLastImm,
                    (false, Position::Last, false, _) => Operation::SendLast,
                    (false, Position::Only, true, _) => Operation::SendOnlyImm,
                    (false, Position::Only, false, _) => Operation::SendOnly,
                    (true, Position::First, ..) => Operation::WriteFirst,
                    (true, Position::Middle, ..) => Operation::WriteMiddle,
                    (true, Position::Last, true, _) => Operation::WriteLastImm,
                    (true, Position::Last, false, _) => Operation::WriteLast,
                    (true, Position::Only, true, _) => Operation::WriteOnlyImm,
                    (true, Position::Only, false, _) => Operation::WriteOnly,
                };
                (operation, off, plen, last)
            }
        };
        // Every operation here is valid on this transport (checked at post).
        let opcode = Opcode::new(transport, op).unwrap_or(Opcode::RC_SEND_ONLY);
        let mut bth = BthRepr::new(opcode, dest_qp, psn);
        bth.mig_req = true;
        bth.solicited = last && w.wr.flags.contains(SendFlags::SOLICITED);
        bth.ack_req = qt == QpType::Rc && (last || (k + 1).is_multiple_of(ACK_REQ_INTERVAL));
        (bth, ext, offset, plen, last)
    }
}

impl Requester {
    /// Completes the WQE holding `psn` with an error status; the QP goes
    /// to the error state and flushes the rest.
    fn fail_at(&mut self, qp: &mut QpCommon, psn: Psn, status: WcStatus, ctx: &mut Ctx<'_>) {
        let idx = self
            .sq
            .iter()
            .position(|w| w.contains(psn) && !w.done)
            .or_else(|| self.sq.iter().position(|w| !w.done));
        match idx {
            Some(i) => self.fail_wqe(qp, i, status, ctx),
            None => self.enter_error(qp, ctx),
        }
    }

    /// The QP goes to the error state: this half flushes now, the
    /// responder when control returns to the QP.
    fn enter_error(&mut self, qp: &mut QpCommon, ctx: &mut Ctx<'_>) {
        if qp.enter_error(ctx) {
            self.flush(qp, ctx);
            qp.unflushed = Some(Half::Responder);
        }
    }

    fn fail_wqe(&mut self, qp: &mut QpCommon, idx: usize, status: WcStatus, ctx: &mut Ctx<'_>) {
        if let Some(w) = self.sq.get_mut(idx) {
            w.error = Some(status);
        }
        self.retire(qp, ctx);
        self.enter_error(qp, ctx);
    }

    /// Entering SQD (`notify`: announce the drain) or leaving it.
    pub(crate) fn set_draining(
        &mut self,
        qp: &QpCommon,
        sqd: bool,
        notify: bool,
        ctx: &mut Ctx<'_>,
    ) {
        self.draining = sqd.then_some(notify);
        self.check_drained(qp, ctx);
    }

    /// In SQD: once no message is begun and unfinished and nothing is
    /// unacknowledged, the send queue has drained (raising
    /// [`AsyncEvent::SqDrained`] when asked to).
    fn check_drained(&mut self, qp: &QpCommon, ctx: &mut Ctx<'_>) {
        let Some(notify) = self.draining else {
            return;
        };
        if qp.state != QpState::Sqd {
            self.draining = None;
            return;
        }
        if self.in_flight() || self.sq.iter().any(|w| w.started && !w.done) {
            return;
        }
        self.draining = None;
        if notify {
            ctx.events.push_back(AsyncEvent::SqDrained(qp.qpn));
        }
    }

    /// Retires finished WQEs from the front of the send queue, in order.
    fn retire(&mut self, qp: &QpCommon, ctx: &mut Ctx<'_>) {
        while let Some(w) = self.sq.front() {
            if !(w.done || w.error.is_some()) {
                break;
            }
            let Some(w) = self.sq.pop_front() else {
                break;
            };
            let signaled = qp.init.sq_sig_all || w.wr.flags.contains(SendFlags::SIGNALED);
            if let Some(status) = w.error {
                ctx.complete(
                    qp.init.send_cq,
                    Wc::new(w.wr.wr_id, status, w.wc_opcode(), qp.qpn),
                    false,
                );
            } else if signaled {
                let mut wc = Wc::new(w.wr.wr_id, WcStatus::Success, w.wc_opcode(), qp.qpn);
                wc.byte_len = match w.wr.op {
                    SendOp::Read => w.len as u32,
                    op if op.is_atomic() => 8,
                    _ => w.len as u32,
                };
                ctx.complete(qp.init.send_cq, wc, false);
            }
        }
        if self.sq.is_empty() {
            self.cursor_seq = self.next_seq;
            self.cursor_pkt = 0;
        } else if self.index_of(self.cursor_seq).is_none() {
            // The cursor pointed at a retired WQE: move to the front.
            if let Some(f) = self.sq.front() {
                if self.cursor_seq < f.seq {
                    self.cursor_seq = f.seq;
                    self.cursor_pkt = 0;
                }
            }
        }
        if !self.in_flight() {
            self.timer = None;
        }
        self.check_drained(qp, ctx);
    }
}
