//! The responder (IBTA Vol 1 §9.7.4–§9.7.5.2 as rxe applies them, protocol
//! reference §6): PSN checks, duplicate handling (re-ACK, READ replay,
//! atomic replay without re-execution), RNR, R_Key and bound checks, NAKs,
//! ACK coalescing and READ response generation; UC and UD receive paths.

use std::collections::VecDeque;
use std::net::IpAddr;

use roce_wire::{
    AethRepr, BthRepr, ExtHeaders, MessageKind, Msn, NakCode, Opcode, Operation, Psn, Qpn, Rkey,
    RocePacket, Syndrome, Transport,
};

use super::state::{QpState, QpType};
use super::{Ctx, Qp};
use crate::mr::Access;
use crate::sgl::{self, ScatterError};
use crate::wc::{Wc, WcFlags, WcOpcode, WcStatus};
use crate::wr::RecvWr;

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
    },
    Read {
        psn: Psn,
        va: u64,
        rkey: Rkey,
        remaining: u64,
        started: bool,
    },
}

/// Responder state of one QP.
#[derive(Debug, Default)]
pub(crate) struct Responder {
    epsn: Psn,
    msn: Msn,
    cur: Option<InProgress>,
    /// A sequence-error NAK went out for the current expected PSN.
    nak_sent: bool,
    records: VecDeque<Record>,
    out: VecDeque<Job>,
}

impl Responder {
    pub(crate) fn reset(&mut self, epsn: Psn) {
        self.epsn = epsn;
    }

    pub(crate) fn has_output(&self) -> bool {
        !self.out.is_empty()
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

    /// In the error state only NAKs already queued still go out.
    pub(crate) fn on_error(&mut self) {
        self.out.retain(|j| {
            matches!(
                j,
                Job::Ack {
                    syndrome: Syndrome::Nak(_),
                    ..
                }
            )
        });
        self.cur = None;
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

/// What went wrong with a request, and how to answer it.
enum Failure {
    /// NAK with this code; the QP goes to the error state.
    Nak(NakCode),
    /// RNR NAK: no receive posted; the request is retried later.
    Rnr,
    /// Drop silently (UC/UD).
    Drop,
}

impl Qp {
    /// Handles a request packet addressed to this QP.
    pub(crate) fn resp_handle_request(
        &mut self,
        p: &RocePacket<'_>,
        raw_ip_header: &[u8],
        ctx: &mut Ctx<'_>,
    ) {
        if !matches!(
            self.state,
            QpState::Rtr | QpState::Rts | QpState::Sqd | QpState::Sqe
        ) {
            self.counters.drop_bad_state += 1;
            return;
        }
        match self.init.qp_type {
            QpType::Rc => self.rc_request(p, ctx),
            QpType::Uc => self.uc_request(p, ctx),
            QpType::Ud => self.ud_request(p, raw_ip_header, ctx),
        }
    }

    fn rc_request(&mut self, p: &RocePacket<'_>, ctx: &mut Ctx<'_>) {
        let psn = p.bth.psn;
        let d = psn.diff(self.resp.epsn);
        if d > 0 {
            self.counters.drop_out_of_sequence += 1;
            if !self.resp.nak_sent {
                self.resp.nak_sent = true;
                self.counters.seq_naks_sent += 1;
                let e = self.resp.epsn;
                self.resp.out.push_back(Job::Ack {
                    psn: e,
                    syndrome: Syndrome::Nak(NakCode::PsnSequenceError),
                });
            }
            return;
        }
        if d < 0 {
            self.duplicate(p);
            return;
        }
        self.counters.rx_packets += 1;
        self.counters.rx_bytes += p.payload.len() as u64;
        match self.execute(p, ctx) {
            Ok(()) => {
                self.resp.nak_sent = false;
                // READ responses and atomic ACKs acknowledge by themselves.
                let acked_by_response = matches!(
                    p.bth.opcode.kind(),
                    MessageKind::ReadRequest | MessageKind::CompareSwap | MessageKind::FetchAdd
                );
                if p.bth.ack_req && !acked_by_response {
                    let e = self.resp.epsn.sub(1);
                    self.resp.push_ack(e, Syndrome::ACK_UNLIMITED);
                }
            }
            Err(Failure::Rnr) => {
                self.counters.rnr_naks_sent += 1;
                let timer = self.attr.min_rnr_timer & 31;
                self.resp.out.push_back(Job::Ack {
                    psn,
                    syndrome: Syndrome::RnrNak { timer },
                });
            }
            Err(Failure::Nak(code)) => {
                self.counters.error_naks_sent += 1;
                self.resp.out.push_back(Job::Ack {
                    psn,
                    syndrome: Syndrome::Nak(code),
                });
                self.enter_error(ctx);
            }
            Err(Failure::Drop) => {}
        }
    }

    /// A request with a PSN already executed.
    fn duplicate(&mut self, p: &RocePacket<'_>) {
        self.counters.duplicates += 1;
        let psn = p.bth.psn;
        match p.bth.opcode.kind() {
            MessageKind::ReadRequest => {
                let Some(reth) = p.ext.reth else { return };
                let pmtu = self.pmtu() as u64;
                let rec = self.resp.records.iter().find(|r| {
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
                        self.counters.read_replays += 1;
                        // Drop any unsent remainder of the same READ (its PSN
                        // range), which is now served again; other READs stay.
                        self.resp.out.retain(|j| match j {
                            Job::Read { psn: p, .. } => {
                                !(p.diff(rpsn) >= 0 && p.diff(rpsn) < rnpsn as i32)
                            }
                            _ => true,
                        });
                        self.resp.out.push_back(Job::Read {
                            psn,
                            va: reth.va,
                            rkey,
                            remaining: reth.dma_len as u64,
                            started: false,
                        });
                    }
                }
            }
            MessageKind::CompareSwap | MessageKind::FetchAdd => {
                let rec = self
                    .resp
                    .records
                    .iter()
                    .find(|r| r.psn == psn && matches!(r.kind, RecordKind::Atomic { .. }));
                if let Some(&Record {
                    kind: RecordKind::Atomic { orig },
                    ..
                }) = rec
                {
                    self.counters.atomic_replays += 1;
                    self.resp.out.push_back(Job::AtomicAck { psn, orig });
                }
            }
            _ => {
                // SEND/WRITE are never executed twice: acknowledge again.
                let e = self.resp.epsn.sub(1);
                self.resp.push_ack(e, Syndrome::ACK_UNLIMITED);
            }
        }
    }

    /// Executes an in-sequence request (RC and UC). On success the
    /// expected PSN has advanced.
    fn execute(&mut self, p: &RocePacket<'_>, ctx: &mut Ctx<'_>) -> Result<(), Failure> {
        let op = p.bth.opcode;
        let pos = op.position();
        let kind = op.kind();
        let pmtu = self.pmtu() as usize;
        let len = p.payload.len();
        let uc = self.init.qp_type == QpType::Uc;
        let invalid = if uc {
            Failure::Drop
        } else {
            Failure::Nak(NakCode::InvalidRequest)
        };
        // Opcode sequence (IBTA 9.7.5.1.1): a message in progress continues
        // with MIDDLE/LAST of the same kind; anything else, including a new
        // FIRST/ONLY, is an invalid request. No message in progress: only a
        // FIRST/ONLY (or a single-packet request) may come.
        let in_sequence = match (&self.resp.cur, kind) {
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
        match kind {
            MessageKind::Send => self.recv_send(p, ctx)?,
            MessageKind::Write => self.recv_write(p, ctx)?,
            MessageKind::ReadRequest if !uc => return self.recv_read(p, ctx),
            MessageKind::CompareSwap | MessageKind::FetchAdd if !uc => self.recv_atomic(p, ctx)?,
            _ => return Err(invalid),
        }
        self.resp.epsn = self.resp.epsn.next();
        Ok(())
    }

    fn recv_send(&mut self, p: &RocePacket<'_>, ctx: &mut Ctx<'_>) -> Result<(), Failure> {
        let pos = p.bth.opcode.position();
        let uc = self.init.qp_type == QpType::Uc;
        if pos.starts() {
            let Some(wr) = self.take_recv(ctx) else {
                if uc {
                    self.counters.drop_no_recv += 1;
                    return Err(Failure::Drop);
                }
                return Err(Failure::Rnr);
            };
            self.resp.cur = Some(InProgress::Send { wr, offset: 0 });
        }
        let Some(InProgress::Send { wr, offset }) = self.resp.cur.as_mut() else {
            return Err(Failure::Nak(NakCode::InvalidRequest));
        };
        match sgl::scatter(ctx.mrs, self.init.pd, &wr.sgl, *offset, p.payload) {
            Ok(()) => *offset += p.payload.len() as u64,
            Err(e) => {
                let status = match e {
                    ScatterError::TooLong => WcStatus::LocLenErr,
                    ScatterError::Access(_) => WcStatus::LocProtErr,
                };
                let wr_id = wr.wr_id;
                self.resp.cur = None;
                ctx.complete(
                    self.init.recv_cq,
                    Wc::new(wr_id, status, WcOpcode::Recv, self.qpn),
                    false,
                );
                if uc {
                    self.enter_error(ctx);
                    return Err(Failure::Drop);
                }
                return Err(Failure::Nak(match e {
                    ScatterError::TooLong => NakCode::InvalidRequest,
                    ScatterError::Access(_) => NakCode::RemoteOperationalError,
                }));
            }
        }
        if pos.ends() {
            let Some(InProgress::Send { wr, offset }) = self.resp.cur.take() else {
                return Err(Failure::Nak(NakCode::InvalidRequest));
            };
            let mut wc = Wc::new(wr.wr_id, WcStatus::Success, WcOpcode::Recv, self.qpn);
            wc.byte_len = offset as u32;
            wc.src_qp = self.attr.dest_qp_num;
            if let Some(imm) = p.ext.imm {
                wc.imm_data = imm;
                wc.wc_flags = wc.wc_flags | WcFlags::WITH_IMM;
            }
            if let Some(rkey) = p.ext.ieth {
                if ctx.mrs.invalidate(self.init.pd, rkey).is_err() {
                    // IBTA C9-…: an invalid R_Key to invalidate is an operational error.
                    let wc = Wc {
                        status: WcStatus::LocProtErr,
                        ..wc
                    };
                    ctx.complete(self.init.recv_cq, wc, false);
                    return Err(Failure::Nak(NakCode::RemoteOperationalError));
                }
                wc.invalidated_rkey = rkey;
                wc.wc_flags = wc.wc_flags | WcFlags::WITH_INV;
            }
            self.resp.msn = self.resp.msn.next();
            ctx.complete(self.init.recv_cq, wc, p.bth.solicited);
        }
        Ok(())
    }

    fn recv_write(&mut self, p: &RocePacket<'_>, ctx: &mut Ctx<'_>) -> Result<(), Failure> {
        let pos = p.bth.opcode.position();
        let uc = self.init.qp_type == QpType::Uc;
        let access_fail = if uc {
            Failure::Drop
        } else {
            Failure::Nak(NakCode::RemoteAccessError)
        };
        if pos.starts() {
            let Some(reth) = p.ext.reth else {
                return Err(Failure::Nak(NakCode::InvalidRequest));
            };
            let total = reth.dma_len as u64;
            if total > 0 {
                if !self.attr.qp_access_flags.contains(Access::REMOTE_WRITE) {
                    return Err(access_fail);
                }
                if ctx
                    .mrs
                    .check(
                        reth.rkey.value(),
                        self.init.pd,
                        reth.va,
                        total,
                        Access::REMOTE_WRITE,
                    )
                    .is_err()
                {
                    return Err(access_fail);
                }
            }
            self.resp.cur = Some(InProgress::Write {
                va: reth.va,
                rkey: reth.rkey,
                remaining: total,
                total,
            });
        }
        let Some(InProgress::Write {
            va,
            rkey,
            remaining,
            total,
        }) = self.resp.cur
        else {
            return Err(Failure::Nak(NakCode::InvalidRequest));
        };
        let len = p.payload.len() as u64;
        if len > remaining || (pos.ends() && len != remaining) {
            self.resp.cur = None;
            return Err(if uc {
                Failure::Drop
            } else {
                Failure::Nak(NakCode::InvalidRequest)
            });
        }
        // A WRITE with immediate consumes a receive: check it before
        // touching memory, so an RNR retry finds the state unchanged.
        let needs_recv = p.ext.imm.is_some();
        let recv = if needs_recv {
            match self.take_recv(ctx) {
                Some(wr) => Some(wr),
                None if uc => {
                    self.counters.drop_no_recv += 1;
                    self.resp.cur = None;
                    return Err(Failure::Drop);
                }
                None => return Err(Failure::Rnr),
            }
        } else {
            None
        };
        if len > 0 {
            match ctx
                .mrs
                .check(rkey.value(), self.init.pd, va, len, Access::REMOTE_WRITE)
            {
                Ok(span) => ctx.mrs.write(span, 0, p.payload),
                Err(_) => {
                    self.resp.cur = None;
                    if let Some(wr) = recv {
                        self.untake_recv(wr, ctx);
                    }
                    return Err(access_fail);
                }
            }
        }
        self.resp.cur = Some(InProgress::Write {
            va: va + len,
            rkey,
            remaining: remaining - len,
            total,
        });
        if pos.ends() {
            self.resp.cur = None;
            self.resp.msn = self.resp.msn.next();
            if let Some(wr) = recv {
                let mut wc = Wc::new(
                    wr.wr_id,
                    WcStatus::Success,
                    WcOpcode::RecvRdmaWithImm,
                    self.qpn,
                );
                wc.byte_len = total as u32;
                wc.imm_data = p.ext.imm.unwrap_or(0);
                wc.wc_flags = WcFlags::WITH_IMM;
                wc.src_qp = self.attr.dest_qp_num;
                ctx.complete(self.init.recv_cq, wc, p.bth.solicited);
            }
        }
        Ok(())
    }

    fn push_record(&mut self, rec: Record) {
        let max = self.attr.max_dest_rd_atomic.max(1) as usize;
        while self.resp.records.len() >= max {
            self.resp.records.pop_front();
        }
        self.resp.records.push_back(rec);
    }

    fn recv_read(&mut self, p: &RocePacket<'_>, ctx: &mut Ctx<'_>) -> Result<(), Failure> {
        let Some(reth) = p.ext.reth else {
            return Err(Failure::Nak(NakCode::InvalidRequest));
        };
        let len = reth.dma_len as u64;
        if len > 0 {
            if !self.attr.qp_access_flags.contains(Access::REMOTE_READ) {
                return Err(Failure::Nak(NakCode::RemoteAccessError));
            }
            if ctx
                .mrs
                .check(
                    reth.rkey.value(),
                    self.init.pd,
                    reth.va,
                    len,
                    Access::REMOTE_READ,
                )
                .is_err()
            {
                return Err(Failure::Nak(NakCode::RemoteAccessError));
            }
        }
        let npsn = len.div_ceil(self.pmtu() as u64).max(1) as u32;
        let psn = p.bth.psn;
        self.push_record(Record {
            psn,
            npsn,
            kind: RecordKind::Read {
                va: reth.va,
                rkey: reth.rkey,
                len,
            },
        });
        self.resp.msn = self.resp.msn.next();
        self.resp.out.push_back(Job::Read {
            psn,
            va: reth.va,
            rkey: reth.rkey,
            remaining: len,
            started: false,
        });
        self.resp.epsn = psn.add(npsn);
        self.resp.nak_sent = false;
        Ok(())
    }

    fn recv_atomic(&mut self, p: &RocePacket<'_>, ctx: &mut Ctx<'_>) -> Result<(), Failure> {
        let Some(a) = p.ext.atomic else {
            return Err(Failure::Nak(NakCode::InvalidRequest));
        };
        if a.va % 8 != 0 {
            return Err(Failure::Nak(NakCode::InvalidRequest));
        }
        if !self.attr.qp_access_flags.contains(Access::REMOTE_ATOMIC) {
            return Err(Failure::Nak(NakCode::RemoteAccessError));
        }
        let span = ctx
            .mrs
            .check(a.rkey.value(), self.init.pd, a.va, 8, Access::REMOTE_ATOMIC)
            .map_err(|_| Failure::Nak(NakCode::RemoteAccessError))?;
        let orig = ctx.mrs.read_u64(span);
        let new = match p.bth.opcode.operation() {
            Operation::CompareSwap if orig == a.compare => a.swap_add,
            Operation::CompareSwap => orig,
            _ => orig.wrapping_add(a.swap_add),
        };
        ctx.mrs.write_u64(span, new);
        let psn = p.bth.psn;
        self.push_record(Record {
            psn,
            npsn: 1,
            kind: RecordKind::Atomic { orig },
        });
        self.resp.msn = self.resp.msn.next();
        self.resp.out.push_back(Job::AtomicAck { psn, orig });
        Ok(())
    }

    fn uc_request(&mut self, p: &RocePacket<'_>, ctx: &mut Ctx<'_>) {
        let psn = p.bth.psn;
        if psn != self.resp.epsn {
            // A gap: the message in progress is lost; resynchronise on the
            // next FIRST/ONLY packet.
            if let Some(InProgress::Send { wr, .. }) = self.resp.cur.take() {
                self.untake_recv(wr, ctx);
            }
            self.resp.cur = None;
            if !p.bth.opcode.position().starts() {
                self.counters.drop_out_of_sequence += 1;
                self.resp.epsn = psn.next();
                return;
            }
            self.resp.epsn = psn;
        }
        self.counters.rx_packets += 1;
        self.counters.rx_bytes += p.payload.len() as u64;
        if self.execute(p, ctx).is_err() {
            self.counters.drop_invalid += 1;
            if let Some(InProgress::Send { wr, .. }) = self.resp.cur.take() {
                self.untake_recv(wr, ctx);
            }
            self.resp.epsn = psn.next();
        }
    }

    fn ud_request(&mut self, p: &RocePacket<'_>, raw_ip_header: &[u8], ctx: &mut Ctx<'_>) {
        let Some(deth) = p.ext.deth else {
            self.counters.drop_invalid += 1;
            return;
        };
        if deth.qkey != self.attr.qkey {
            self.counters.drop_qkey += 1;
            return;
        }
        if p.payload.len() > self.pmtu() as usize {
            self.counters.drop_invalid += 1;
            return;
        }
        let Some(wr) = self.take_recv(ctx) else {
            self.counters.drop_no_recv += 1;
            return;
        };
        self.counters.rx_packets += 1;
        self.counters.rx_bytes += p.payload.len() as u64;
        // The first 40 bytes of the buffer receive the GRH: for IPv4, 20
        // zero bytes and then the IPv4 header (IBTA A17.4.5.1).
        let mut grh = [0u8; 40];
        match p.ip.src() {
            IpAddr::V4(_) => {
                let n = raw_ip_header.len().min(20);
                grh[20..20 + n].copy_from_slice(&raw_ip_header[..n]);
            }
            IpAddr::V6(_) => {
                let n = raw_ip_header.len().min(40);
                grh[..n].copy_from_slice(&raw_ip_header[..n]);
            }
        }
        let pd = self.init.pd;
        let res = sgl::scatter(ctx.mrs, pd, &wr.sgl, 0, &grh)
            .and_then(|_| sgl::scatter(ctx.mrs, pd, &wr.sgl, 40, p.payload));
        let mut wc = Wc::new(wr.wr_id, WcStatus::Success, WcOpcode::Recv, self.qpn);
        match res {
            Ok(()) => {
                wc.byte_len = 40 + p.payload.len() as u32;
                wc.src_qp = deth.src_qp;
                wc.wc_flags = WcFlags::GRH;
                if let Some(imm) = p.ext.imm {
                    wc.imm_data = imm;
                    wc.wc_flags = wc.wc_flags | WcFlags::WITH_IMM;
                }
            }
            Err(ScatterError::TooLong) => wc.status = WcStatus::LocLenErr,
            Err(ScatterError::Access(_)) => wc.status = WcStatus::LocProtErr,
        }
        ctx.complete(self.init.recv_cq, wc, p.bth.solicited);
    }

    /// Emits the next queued response.
    pub(crate) fn resp_poll_transmit(
        &mut self,
        ctx: &mut Ctx<'_>,
        buf: &mut [u8],
    ) -> Option<usize> {
        let job = *self.resp.out.front()?;
        if self.state == QpState::Err
            && !matches!(
                job,
                Job::Ack {
                    syndrome: Syndrome::Nak(_),
                    ..
                }
            )
        {
            self.resp.out.clear();
            return None;
        }
        let path = self.path(None, ctx)?;
        // ACKs and NAKs are not ECN-capable (protocol reference §7); READ
        // responses carry data and keep the device's codepoint.
        let ack_path = super::Path {
            ecn: roce_wire::Ecn::NotEct,
            ..path
        };
        let dest = self.attr.dest_qp_num;
        let aeth = |syndrome| {
            Some(AethRepr {
                syndrome,
                msn: self.resp.msn,
            })
        };
        match job {
            Job::Ack { psn, syndrome } => {
                self.resp.out.pop_front();
                let bth = response_bth(Operation::Acknowledge, dest, psn);
                let ext = ExtHeaders {
                    aeth: aeth(syndrome),
                    ..Default::default()
                };
                self.counters.acks_sent += 1;
                ack_path.emit(bth, ext, 0, buf, |_| {})
            }
            Job::AtomicAck { psn, orig } => {
                self.resp.out.pop_front();
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
            } => {
                let pmtu = self.pmtu() as u64;
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
                        .check(rkey.value(), self.init.pd, va, n, Access::REMOTE_READ)
                    {
                        Ok(s) => Some(s),
                        Err(_) => {
                            self.resp.out.pop_front();
                            self.resp.out.push_front(Job::Ack {
                                psn,
                                syndrome: Syndrome::Nak(NakCode::RemoteAccessError),
                            });
                            return self.resp_poll_transmit(ctx, buf);
                        }
                    }
                } else {
                    None
                };
                let mrs = &*ctx.mrs;
                let out = path.emit(bth, ext, n as usize, buf, |dst| {
                    if let Some(s) = span {
                        mrs.read(s, 0, dst);
                    }
                })?;
                self.counters.tx_bytes += n;
                if last {
                    self.resp.out.pop_front();
                } else if let Some(Job::Read {
                    psn: p,
                    va: v,
                    remaining: r,
                    started: s,
                    ..
                }) = self.resp.out.front_mut()
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
