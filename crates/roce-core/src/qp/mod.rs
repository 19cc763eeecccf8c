//! Queue pairs: the state machine, the requester (send side) and the
//! responder (receive side) of RC, UC and UD (IBTA Vol 1 chapter 9, §10.3).
//!
//! A [`Qp`] is three parts: `QpCommon` (identity, attributes, state,
//! counters, congestion control), the `Requester` (requester/: the send
//! queue, request packets, ACKs and responses) and the `Responder`
//! (responder/: the receive queue, executing requests, ACKs, NAKs and
//! READ responses). Each half's behaviour is its own methods, handed
//! `&mut QpCommon`; neither reaches into the other. `Qp` calls them in
//! order (responses before requests, a CNP first) and decides what
//! concerns both: `ibv_modify_qp`, and the error state. A half that
//! enters the error state flushes its own queue at once and leaves the
//! other to be flushed by `Qp` when it returns (`QpCommon::unflushed`).

pub(crate) mod accept;
mod attr;
mod cnp;
pub(crate) mod path;
mod requester;
mod responder;
pub mod state;

use std::collections::VecDeque;
use std::net::IpAddr;

use roce_wire::{Ecn, Qpn, RocePacket};

pub use attr::{
    mtu_from_enum, mtu_to_enum, path_mtu_for_link, AddressVector, QpAttr, QpCaps, QpInitAttr,
};
pub(crate) use path::Path;
use requester::Requester;
pub use responder::AckDelay;
use responder::Responder;
use state::{check_modify_with_cur_state, ModifyError, QpAttrMask, QpState, QpType};

use crate::cc::{CcCounters, QpCc};
use crate::counters::QpCounters;
use crate::cq::{Cq, CqId, Pushed};
use crate::mr::MrTable;
use crate::srq::{Srq, SrqId};
use crate::wc::Wc;
use crate::wr::{RecvWr, SendWr};
use crate::{AsyncEvent, Nanos};

/// What a QP borrows from its device while it works.
pub(crate) struct Ctx<'a> {
    pub(crate) now: Nanos,
    pub(crate) mrs: &'a mut MrTable,
    pub(crate) cqs: &'a mut Vec<Option<Cq>>,
    pub(crate) srqs: &'a mut Vec<Option<Srq>>,
    pub(crate) events: &'a mut VecDeque<AsyncEvent>,
    pub(crate) local_addrs: &'a [IpAddr],
    pub(crate) ecn: Ecn,
    /// [`DeviceConfig::max_unacked_psns`](crate::DeviceConfig).
    pub(crate) max_unacked: u32,
    /// [`DeviceConfig::ack_delay`](crate::DeviceConfig).
    pub(crate) ack_delay: AckDelay,
    /// A request packet released a held ACK: the ACK goes in the next
    /// batch, after the answer (see `Device::poll_transmit`).
    pub(crate) boundary: bool,
    /// [`DeviceConfig::icrc_code`](crate::DeviceConfig); `None` while
    /// [`Device::poll_transmit_icrc_if`](crate::Device::poll_transmit_icrc_if)
    /// leaves the ICRC of the packets it builds to its caller.
    pub(crate) icrc_code: Option<roce_wire::crc32::Code>,
    /// A completion did not fit its CQ: the QP that made it must go to the
    /// error state (see [`Ctx::complete`]).
    pub(crate) cq_lost: bool,
    /// Inside [`DeviceConfig::force_rnr`](crate::DeviceConfig)'s window:
    /// a request that needs a receive is answered RNR.
    pub(crate) force_rnr: bool,
}

impl Ctx<'_> {
    /// Delivers a completion. A full CQ goes into error and raises the CQ
    /// error event (once); the completion is lost, and the QP that made it
    /// cannot go on as if it were delivered (`cq_lost`: the device moves it
    /// to the error state before anything else of its step leaves, so a
    /// responder does not acknowledge a SEND whose completion was lost; as
    /// rxe's class G error, `RESPST_ERR_CQ_OVERFLOW`).
    pub(crate) fn complete(&mut self, cq: CqId, wc: Wc, solicited: bool) {
        if let Some(Some(c)) = self.cqs.get_mut(cq.0 as usize) {
            match c.push(wc, solicited) {
                Pushed::Queued => {}
                Pushed::Overflowed => {
                    self.events.push_back(AsyncEvent::CqError(cq));
                    self.cq_lost = true;
                }
                Pushed::Lost => self.cq_lost = true,
            }
        }
    }

    pub(crate) fn srq(&mut self, id: SrqId) -> Option<&mut Srq> {
        self.srqs.get_mut(id.0 as usize).and_then(|s| s.as_mut())
    }
}

/// Why a post was refused (the errno `ibv_post_*` would return).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PostError {
    /// The QP's state does not accept this post (EINVAL).
    BadState(QpState),
    /// The queue is full (ENOMEM).
    QueueFull,
    /// Too many scatter/gather entries (EINVAL).
    TooManySge,
    /// Inline data larger than `max_inline_data` (EINVAL).
    InlineTooLong,
    /// The operation is not supported by this QP type (EINVAL).
    UnsupportedOp,
    /// A UD send without a destination, or a message too long (EINVAL).
    InvalidWr(&'static str),
    /// No such QP or SRQ.
    NoSuchObject,
}

impl std::fmt::Display for PostError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PostError::BadState(s) => {
                write!(f, "QP in state {} does not accept this post", s.name())
            }
            PostError::QueueFull => f.write_str("queue full"),
            PostError::TooManySge => f.write_str("too many scatter/gather entries"),
            PostError::InlineTooLong => f.write_str("inline data longer than max_inline_data"),
            PostError::UnsupportedOp => f.write_str("operation not supported by this QP type"),
            PostError::InvalidWr(w) => write!(f, "invalid work request: {w}"),
            PostError::NoSuchObject => f.write_str("no such QP or SRQ"),
        }
    }
}

impl std::error::Error for PostError {}

/// A queue pair: what both halves share, and the halves.
#[derive(Debug)]
pub struct Qp {
    pub(crate) common: QpCommon,
    /// The send side (requester/).
    pub(crate) req: Requester,
    /// The receive side, with the receive queue (responder/).
    pub(crate) resp: Responder,
    /// On the device's ready list.
    pub(crate) queued: bool,
    /// The deadline last entered in the device's timer heap.
    pub(crate) armed: Option<Nanos>,
}

/// What the requester and the responder of a QP both read and change:
/// identity, attributes, state, counters and congestion control.
#[derive(Debug)]
pub(crate) struct QpCommon {
    pub(crate) qpn: Qpn,
    pub(crate) init: QpInitAttr,
    pub(crate) state: QpState,
    pub(crate) attr: QpAttr,
    pub(crate) sport: u16,
    pub(crate) counters: QpCounters,
    /// Congestion control (notification and reaction point, pacing).
    pub(crate) cc: QpCc,
    /// A half entered the error state and flushed itself; this half is
    /// flushed when control returns to [`Qp`] (see [`Qp::settle`]).
    pub(crate) unflushed: Option<Half>,
}

/// One half of a QP.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Half {
    Requester,
    Responder,
}

impl Qp {
    pub(crate) fn new(qpn: Qpn, init: QpInitAttr) -> Qp {
        Qp {
            common: QpCommon {
                qpn,
                init,
                state: QpState::Reset,
                attr: QpAttr::default(),
                sport: path::udp_sport(qpn.value()),
                counters: QpCounters::default(),
                cc: QpCc::default(),
                unflushed: None,
            },
            req: Requester::default(),
            resp: Responder::default(),
            queued: false,
            armed: None,
        }
    }

    /// QP number.
    pub fn qpn(&self) -> Qpn {
        self.common.qpn
    }

    /// Current state.
    pub fn state(&self) -> QpState {
        self.common.state
    }

    /// Transport type.
    pub fn qp_type(&self) -> QpType {
        self.common.init.qp_type
    }

    /// Current attributes.
    pub fn attr(&self) -> &QpAttr {
        &self.common.attr
    }

    /// Counters.
    pub fn counters(&self) -> &QpCounters {
        &self.common.counters
    }

    /// Congestion control counters of this QP.
    pub fn cc_counters(&self) -> CcCounters {
        self.common.cc.counters()
    }

    /// `ibv_modify_qp`: validates the transition and its attribute mask
    /// against the declared table, then applies it.
    pub(crate) fn modify(
        &mut self,
        attr: &QpAttr,
        mask: QpAttrMask,
        ctx: &mut Ctx<'_>,
    ) -> Result<(), ModifyError> {
        let next = if mask.contains(QpAttrMask::STATE) {
            attr.qp_state
        } else {
            self.common.state
        };
        check_modify_with_cur_state(
            self.common.init.qp_type,
            self.common.state,
            mask,
            next,
            attr.cur_qp_state,
        )?;
        // SQD -> SQD (changing attributes in SQD) waits for the drain
        // (as rxe, which refuses it while `sq_draining`).
        if self.common.state == QpState::Sqd && next == QpState::Sqd && self.req.draining() {
            return Err(ModifyError::SqDraining);
        }
        if mask.contains(QpAttrMask::PATH_MTU)
            && !matches!(attr.path_mtu, 256 | 512 | 1024 | 2048 | 4096)
        {
            return Err(ModifyError::InvalidValue("path_mtu"));
        }
        if mask.contains(QpAttrMask::RETRY_CNT) && attr.retry_cnt > 7 {
            return Err(ModifyError::InvalidValue("retry_cnt"));
        }
        if mask.contains(QpAttrMask::RNR_RETRY) && attr.rnr_retry > 7 {
            return Err(ModifyError::InvalidValue("rnr_retry"));
        }
        if mask.contains(QpAttrMask::MIN_RNR_TIMER) && attr.min_rnr_timer > 31 {
            return Err(ModifyError::InvalidValue("min_rnr_timer"));
        }
        if mask.contains(QpAttrMask::TIMEOUT) && attr.timeout > 31 {
            return Err(ModifyError::InvalidValue("timeout"));
        }
        // The port's P_Key table has one entry (IBTA Vol 1 §10.9.2; rxe
        // refuses an index past its table too).
        if mask.contains(QpAttrMask::PKEY_INDEX)
            && attr.pkey_index as usize >= accept::PKEY_TABLE.len()
        {
            return Err(ModifyError::InvalidValue("pkey_index"));
        }
        if mask.contains(QpAttrMask::AV)
            && ctx
                .local_addrs
                .get(attr.ah_attr.sgid_index as usize)
                .is_none()
        {
            return Err(ModifyError::InvalidValue("ah_attr.sgid_index"));
        }
        let a = &mut self.common.attr;
        macro_rules! take {
            ($bit:ident, $field:ident) => {
                if mask.contains(QpAttrMask::$bit) {
                    a.$field = attr.$field;
                }
            };
        }
        take!(PATH_MTU, path_mtu);
        take!(QKEY, qkey);
        take!(RQ_PSN, rq_psn);
        take!(SQ_PSN, sq_psn);
        take!(DEST_QPN, dest_qp_num);
        take!(ACCESS_FLAGS, qp_access_flags);
        take!(PKEY_INDEX, pkey_index);
        take!(PORT, port_num);
        take!(AV, ah_attr);
        take!(TIMEOUT, timeout);
        take!(RETRY_CNT, retry_cnt);
        take!(RNR_RETRY, rnr_retry);
        take!(MIN_RNR_TIMER, min_rnr_timer);
        take!(MAX_QP_RD_ATOMIC, max_rd_atomic);
        take!(MAX_DEST_RD_ATOMIC, max_dest_rd_atomic);
        if mask.contains(QpAttrMask::RQ_PSN) {
            self.resp.reset(attr.rq_psn);
        }
        if mask.contains(QpAttrMask::SQ_PSN) {
            self.req.reset_psn(attr.sq_psn);
        }
        if mask.contains(QpAttrMask::RETRY_CNT) || mask.contains(QpAttrMask::RNR_RETRY) {
            self.req
                .reset_retries(self.common.attr.retry_cnt, self.common.attr.rnr_retry);
        }
        let prev = self.common.state;
        self.common.state = next;
        self.common.attr.qp_state = next;
        self.common.attr.cur_qp_state = next;
        match next {
            QpState::Reset if prev != QpState::Reset => {
                // Back to RESET: everything is discarded without completions.
                self.resp.return_srq_recv(&self.common, ctx);
                self.req = Requester::default();
                self.resp = Responder::default();
            }
            QpState::Err if prev != QpState::Err => self.flush(ctx),
            _ => {}
        }
        if next == QpState::Sqd && prev != QpState::Sqd {
            let notify = mask.contains(QpAttrMask::EN_SQD_ASYNC_NOTIFY);
            self.req.set_draining(&self.common, true, notify, ctx);
        } else if next != QpState::Sqd {
            self.req.set_draining(&self.common, false, false, ctx);
        }
        Ok(())
    }

    /// After a step of this QP: a completion it made was lost to a full
    /// CQ, so it goes to the error state (its flushes are lost as well).
    pub(crate) fn check_cq_lost(&mut self, ctx: &mut Ctx<'_>) {
        if std::mem::take(&mut ctx.cq_lost) {
            self.enter_error(ctx);
        }
    }

    /// On reset or destroy: a receive taken from the SRQ by a SEND in
    /// progress goes back to the SRQ (see [`Responder::return_srq_recv`]).
    pub(crate) fn return_srq_recv(&mut self, ctx: &mut Ctx<'_>) {
        self.resp.return_srq_recv(&self.common, ctx);
    }

    /// Moves the QP to the error state and flushes both queues.
    pub(crate) fn enter_error(&mut self, ctx: &mut Ctx<'_>) {
        if self.common.enter_error(ctx) {
            self.flush(ctx);
        }
    }

    /// Completes every outstanding WR with WR_FLUSH_ERR: the send queue,
    /// then the receive queue.
    fn flush(&mut self, ctx: &mut Ctx<'_>) {
        self.req.flush(&self.common, ctx);
        self.resp.flush(&self.common, ctx);
    }

    /// After a half ran: if it entered the error state, the other half
    /// is flushed now (each half flushes itself at once).
    fn settle(&mut self, ctx: &mut Ctx<'_>) {
        match self.common.unflushed.take() {
            Some(Half::Requester) => self.req.flush(&self.common, ctx),
            Some(Half::Responder) => self.resp.flush(&self.common, ctx),
            None => {}
        }
    }

    /// `ibv_post_send`.
    pub(crate) fn post_send(&mut self, wr: SendWr, ctx: &mut Ctx<'_>) -> Result<(), PostError> {
        self.req.post_send(&self.common, wr, ctx)
    }

    /// `ibv_post_recv`.
    pub(crate) fn post_recv(&mut self, wr: RecvWr, ctx: &mut Ctx<'_>) -> Result<(), PostError> {
        self.resp.post_recv(&self.common, wr, ctx)
    }

    /// A request packet addressed to this QP (the responder's). Returns
    /// whether it was taken as the next in sequence (its ECN mark may
    /// then count).
    pub(crate) fn handle_request(&mut self, p: &RocePacket<'_>, ctx: &mut Ctx<'_>) -> bool {
        let taken = self.resp.handle_request(&mut self.common, p, ctx);
        self.settle(ctx);
        taken
    }

    /// A response packet addressed to this QP (the requester's). Returns
    /// whether it acknowledged something outstanding.
    pub(crate) fn handle_response(&mut self, p: &RocePacket<'_>, ctx: &mut Ctx<'_>) -> bool {
        let acked = self.req.handle_response(&mut self.common, p, ctx);
        self.settle(ctx);
        acked
    }

    /// True when the QP may have packets to send.
    pub(crate) fn wants_to_send(&self) -> bool {
        self.resp.has_output() || self.req.has_work() || self.common.cc.cnp_due()
    }

    /// [`Qp::wants_to_send`], but a deferred ACK still held at `now` does
    /// not count.
    pub(crate) fn wants_to_send_at(&self, now: Nanos) -> bool {
        self.resp.has_output_at(now) || self.req.has_work() || self.common.cc.cnp_due()
    }

    /// Emits the next packet: a due CNP, then responses, then requests. A
    /// deferred ACK (responder/ack.rs) waits, and follows the first
    /// request packet that leaves: the peer is waiting for that one.
    pub(crate) fn poll_transmit(
        &mut self,
        ctx: &mut Ctx<'_>,
        buf: &mut [u8],
    ) -> Option<roce_wire::Transmit> {
        let n = self.next_packet(ctx, buf);
        self.sent(n, ctx)
    }

    /// After a half wrote `n` (or nothing): the other half flushed if the
    /// writer failed ([`Qp::settle`]), the packet counted.
    fn sent(
        &mut self,
        n: Option<roce_wire::Transmit>,
        ctx: &mut Ctx<'_>,
    ) -> Option<roce_wire::Transmit> {
        self.settle(ctx);
        if n.is_some() {
            self.common.counters.tx_packets += 1;
        }
        n
    }

    fn next_packet(&mut self, ctx: &mut Ctx<'_>, buf: &mut [u8]) -> Option<roce_wire::Transmit> {
        let qp = &mut self.common;
        if let Some(n) = qp.poll_cnp(ctx, buf) {
            return Some(n);
        }
        if let Some(n) = self.resp.poll_transmit(qp, ctx, buf) {
            return Some(n);
        }
        // HCA order: the held ACK just before an answer the peer takes
        // from a CQ; after one it sees only in memory.
        if ctx.ack_delay.ack_first
            && self.req.next_completes_a_receive()
            && self.resp.release_deferred_ack()
        {
            if let Some(n) = self.resp.poll_transmit(qp, ctx, buf) {
                return Some(n);
            }
        }
        let n = self.req.poll_transmit(qp, ctx, buf)?;
        if self.resp.answered(ctx.now, ctx.ack_delay) {
            // The answer in a send call of its own, the ACK in the next;
            // in the HCA order the peer's program waits for the ACK's
            // completion, so it goes in the same call.
            ctx.boundary = !ctx.ack_delay.ack_first;
            qp.counters.acks_after_answer += 1;
        }
        Some(n)
    }

    /// A deferred ACK, released and written into `buf` at once: the last
    /// packet of a QP that is destroyed or reset, which would have left
    /// before the application could act with deferral off.
    pub(crate) fn take_deferred_ack(
        &mut self,
        ctx: &mut Ctx<'_>,
        buf: &mut [u8],
    ) -> Option<roce_wire::Transmit> {
        if !self.resp.release_deferred_ack() {
            return None;
        }
        let n = self.resp.poll_transmit(&mut self.common, ctx, buf);
        self.sent(n, ctx)
    }

    /// Earliest timer deadline.
    pub(crate) fn poll_timeout(&self) -> Option<Nanos> {
        // Asked after every packet in and out: plain comparisons, no
        // iterator over the three.
        earliest(
            earliest(self.req.poll_timeout(), self.common.cc.poll_timeout()),
            self.resp.poll_timeout(),
        )
    }

    /// Deferred ACK deadlines, congestion control timers, the local ACK
    /// timeout and the RNR timer.
    pub(crate) fn handle_timeout(&mut self, ctx: &mut Ctx<'_>) {
        if self.resp.on_timer(ctx.now) {
            self.common.counters.ack_deadlines += 1;
        }
        self.common.cc.on_timer(ctx.now);
        self.req.handle_timeout(&mut self.common, ctx);
        self.settle(ctx);
    }
}

/// The earlier of two deadlines, either absent.
fn earliest(a: Option<Nanos>, b: Option<Nanos>) -> Option<Nanos> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, None) => a,
        (None, b) => b,
    }
}

impl QpCommon {
    /// Path MTU in bytes.
    pub(crate) fn pmtu(&self) -> u32 {
        self.attr.path_mtu
    }

    /// Moves the QP to the error state, raising the fatal event; false
    /// when it was there already. The caller flushes what it must.
    pub(crate) fn enter_error(&mut self, ctx: &mut Ctx<'_>) -> bool {
        if self.state == QpState::Err {
            return false;
        }
        self.state = QpState::Err;
        self.attr.qp_state = QpState::Err;
        ctx.events.push_back(AsyncEvent::QpFatal(self.qpn));
        true
    }

    /// The addressing of this QP's packets: along `av` (a UD destination's
    /// address vector), or along the connected path when `None`.
    pub(crate) fn path(&self, av: Option<&AddressVector>, ctx: &Ctx<'_>) -> Option<Path> {
        let av = av.unwrap_or(&self.attr.ah_attr);
        Some(Path {
            src: *ctx.local_addrs.get(av.sgid_index as usize)?,
            dst: av.dest,
            sport: self.sport,
            dscp: av.traffic_class >> 2,
            ecn: ctx.ecn,
            ttl: av.hop_limit,
            flow_label: av.flow_label,
            icrc_code: ctx.icrc_code,
        })
    }

    /// Local ACK timeout in nanoseconds (None = infinite).
    pub(crate) fn ack_timeout_ns(&self) -> Option<Nanos> {
        match self.attr.timeout {
            0 => None,
            t => Some(4096u64 << t.min(31)),
        }
    }
}
