//! Executing requests at the responder: SEND into the receive queue,
//! WRITE and READ with their R_Key and bound checks, atomics with their
//! replay records (IBTA Vol 1 §9.7.4.1, docs/protocol.md §6).

use roce_wire::{NakCode, Operation, RocePacket};

use super::Responder;
use super::{Failure, InProgress, Job, Record, RecordKind};
use crate::mr::Access;
use crate::qp::state::QpType;
use crate::qp::{Ctx, QpCommon};
use crate::sgl::{self, ScatterError};
use crate::wc::{Wc, WcFlags, WcOpcode, WcStatus};

impl Responder {
    pub(super) fn recv_send(
        &mut self,
        qp: &mut QpCommon,
        p: &RocePacket<'_>,
        ctx: &mut Ctx<'_>,
    ) -> Result<(), Failure> {
        let pos = p.bth.opcode.position();
        let uc = qp.init.qp_type == QpType::Uc;
        if pos.starts() {
            if ctx.force_rnr && !uc {
                return Err(Failure::Rnr);
            }
            let Some(wr) = self.take_recv(qp, ctx) else {
                if uc {
                    qp.counters.drop_no_recv += 1;
                    return Err(Failure::Drop);
                }
                return Err(Failure::Rnr);
            };
            self.cur = Some(InProgress::Send { wr, offset: 0 });
        }
        let Some(InProgress::Send { wr, offset }) = self.cur.as_mut() else {
            return Err(Failure::Nak(NakCode::InvalidRequest));
        };
        match sgl::scatter(ctx.mrs, qp.init.pd, &wr.sgl, *offset, p.payload) {
            Ok(()) => *offset += p.payload.len() as u64,
            Err(ScatterError::TooLong) if uc => {
                // UC has no NAK to send: the message is dropped (its later
                // packets find no message in progress) and the receive is
                // kept for the next one, whose bytes overwrite these; the
                // QP goes on (rxe: a class D error, `drop_msg`).
                let Some(InProgress::Send { wr, .. }) = self.cur.take() else {
                    return Err(Failure::Drop);
                };
                self.untake_recv(qp, wr, ctx);
                qp.counters.drop_no_recv += 1;
                return Err(Failure::Drop);
            }
            Err(e) => {
                let status = match e {
                    ScatterError::TooLong => WcStatus::LocLenErr,
                    ScatterError::Access(_) => WcStatus::LocProtErr,
                };
                let wr_id = wr.wr_id;
                self.cur = None;
                ctx.complete(
                    qp.init.recv_cq,
                    Wc::new(wr_id, status, WcOpcode::Recv, qp.qpn),
                    false,
                );
                if uc {
                    self.enter_error(qp, ctx);
                    return Err(Failure::Drop);
                }
                return Err(Failure::Nak(match e {
                    ScatterError::TooLong => NakCode::InvalidRequest,
                    ScatterError::Access(_) => NakCode::RemoteOperationalError,
                }));
            }
        }
        if pos.ends() {
            let Some(InProgress::Send { wr, offset }) = self.cur.take() else {
                return Err(Failure::Nak(NakCode::InvalidRequest));
            };
            let mut wc = Wc::new(wr.wr_id, WcStatus::Success, WcOpcode::Recv, qp.qpn);
            wc.byte_len = offset as u32;
            wc.src_qp = qp.attr.dest_qp_num;
            if let Some(imm) = p.ext.imm {
                wc.imm_data = imm;
                wc.wc_flags = wc.wc_flags | WcFlags::WITH_IMM;
            }
            if let Some(rkey) = p.ext.ieth {
                if ctx.mrs.invalidate(qp.init.pd, rkey).is_err() {
                    // An R_Key that may not be invalidated (unknown, of
                    // another PD, or an ordinary registration rather than
                    // a memory window or fast-registered region): a class
                    // J error (IBTA Vol 1 §9.9.3.1.2, §10.6.3.6): the
                    // receive completes in error, the requester gets an
                    // Invalid Request NAK, the QP goes to the error state
                    // and the region stays valid (rxe:
                    // RESPST_ERR_INVALIDATE_RKEY, IB_WC_REM_INV_REQ_ERR).
                    let wc = Wc {
                        status: WcStatus::RemInvReqErr,
                        ..wc
                    };
                    ctx.complete(qp.init.recv_cq, wc, false);
                    return Err(Failure::Nak(NakCode::InvalidRequest));
                }
                wc.invalidated_rkey = rkey;
                wc.wc_flags = wc.wc_flags | WcFlags::WITH_INV;
            }
            self.msn = self.msn.next();
            ctx.complete(qp.init.recv_cq, wc, p.bth.solicited);
        }
        Ok(())
    }

    pub(super) fn recv_write(
        &mut self,
        qp: &mut QpCommon,
        p: &RocePacket<'_>,
        ctx: &mut Ctx<'_>,
    ) -> Result<(), Failure> {
        let pos = p.bth.opcode.position();
        let uc = qp.init.qp_type == QpType::Uc;
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
            // The QP's remote rights apply to every WRITE, zero-length
            // ones too (rxe's check_op_valid); only the R_Key and range
            // check is skipped for a zero-length one (C9-88).
            if !qp.attr.qp_access_flags.contains(Access::REMOTE_WRITE) {
                return Err(access_fail);
            }
            if total > 0
                && ctx
                    .mrs
                    .check(
                        reth.rkey.value(),
                        qp.init.pd,
                        reth.va,
                        total,
                        Access::REMOTE_WRITE,
                    )
                    .is_err()
            {
                return Err(access_fail);
            }
            self.cur = Some(InProgress::Write {
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
        }) = self.cur
        else {
            return Err(Failure::Nak(NakCode::InvalidRequest));
        };
        let len = p.payload.len() as u64;
        if len > remaining || (pos.ends() && len != remaining) {
            self.cur = None;
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
            let forced = ctx.force_rnr && !uc;
            match if forced {
                None
            } else {
                self.take_recv(qp, ctx)
            } {
                Some(wr) => Some(wr),
                None if uc => {
                    qp.counters.drop_no_recv += 1;
                    self.cur = None;
                    return Err(Failure::Drop);
                }
                None => {
                    // The retry must find the state this packet found: a
                    // message it started (WRITE_ONLY) is not in progress.
                    if pos.starts() {
                        self.cur = None;
                    }
                    return Err(Failure::Rnr);
                }
            }
        } else {
            None
        };
        if len > 0 {
            // Memory that faults under the copy (the program freed or
            // protected it) is refused as a bad R_Key is: a remote access
            // error NAK (IBTA Vol 1 §9.7.5.1.5, C9-85), and the region is
            // revoked (`MrTable::write`).
            match ctx
                .mrs
                .check(rkey.value(), qp.init.pd, va, len, Access::REMOTE_WRITE)
                .and_then(|span| ctx.mrs.write(span, 0, p.payload))
            {
                Ok(()) => {}
                Err(_) => {
                    self.cur = None;
                    if let Some(wr) = recv {
                        self.untake_recv(qp, wr, ctx);
                    }
                    return Err(access_fail);
                }
            }
        }
        self.cur = Some(InProgress::Write {
            va: va + len,
            rkey,
            remaining: remaining - len,
            total,
        });
        if pos.ends() {
            self.cur = None;
            self.msn = self.msn.next();
            if let Some(wr) = recv {
                let mut wc = Wc::new(
                    wr.wr_id,
                    WcStatus::Success,
                    WcOpcode::RecvRdmaWithImm,
                    qp.qpn,
                );
                wc.byte_len = total as u32;
                wc.imm_data = p.ext.imm.unwrap_or(0);
                wc.wc_flags = WcFlags::WITH_IMM;
                wc.src_qp = qp.attr.dest_qp_num;
                ctx.complete(qp.init.recv_cq, wc, p.bth.solicited);
            }
        }
        Ok(())
    }

    fn push_record(&mut self, qp: &QpCommon, rec: Record) {
        // At least 1: a QP with none refuses READs and atomics (execute).
        let max = qp.attr.max_dest_rd_atomic.max(1) as usize;
        while self.records.len() >= max {
            self.records.pop_front();
        }
        self.records.push_back(rec);
    }

    pub(super) fn recv_read(
        &mut self,
        qp: &mut QpCommon,
        p: &RocePacket<'_>,
        ctx: &mut Ctx<'_>,
    ) -> Result<(), Failure> {
        let Some(reth) = p.ext.reth else {
            return Err(Failure::Nak(NakCode::InvalidRequest));
        };
        let len = reth.dma_len as u64;
        // As for WRITE: the QP's rights apply at any length.
        if !qp.attr.qp_access_flags.contains(Access::REMOTE_READ) {
            return Err(Failure::Nak(NakCode::RemoteAccessError));
        }
        if len > 0
            && ctx
                .mrs
                .check(
                    reth.rkey.value(),
                    qp.init.pd,
                    reth.va,
                    len,
                    Access::REMOTE_READ,
                )
                .is_err()
        {
            return Err(Failure::Nak(NakCode::RemoteAccessError));
        }
        let npsn = len.div_ceil(qp.pmtu() as u64).max(1) as u32;
        let psn = p.bth.psn;
        self.push_record(
            qp,
            Record {
                psn,
                npsn,
                kind: RecordKind::Read {
                    va: reth.va,
                    rkey: reth.rkey,
                    len,
                },
            },
        );
        self.msn = self.msn.next();
        self.out.push_back(Job::Read {
            psn,
            va: reth.va,
            rkey: reth.rkey,
            remaining: len,
            started: false,
            fresh: true,
        });
        self.epsn = psn.add(npsn);
        self.nak_sent = false;
        Ok(())
    }

    pub(super) fn recv_atomic(
        &mut self,
        qp: &mut QpCommon,
        p: &RocePacket<'_>,
        ctx: &mut Ctx<'_>,
    ) -> Result<(), Failure> {
        let Some(a) = p.ext.atomic else {
            return Err(Failure::Nak(NakCode::InvalidRequest));
        };
        if a.va % 8 != 0 {
            return Err(Failure::Nak(NakCode::InvalidRequest));
        }
        if !qp.attr.qp_access_flags.contains(Access::REMOTE_ATOMIC) {
            return Err(Failure::Nak(NakCode::RemoteAccessError));
        }
        let span = ctx
            .mrs
            .check(a.rkey.value(), qp.init.pd, a.va, 8, Access::REMOTE_ATOMIC)
            .map_err(|_| Failure::Nak(NakCode::RemoteAccessError))?;
        // Read, compute, write under the engine lock: atomic with respect
        // to every other RDMA atomic of the device, not to the program's
        // own CPU accesses (IBTA Vol 1 §9.4.5, IBV_ATOMIC_HCA). Memory
        // that faults is a remote access error (C9-85).
        let fault = |_| Failure::Nak(NakCode::RemoteAccessError);
        let orig = ctx.mrs.read_u64(span).map_err(fault)?;
        let new = match p.bth.opcode.operation() {
            Operation::CompareSwap if orig == a.compare => a.swap_add,
            Operation::CompareSwap => orig,
            _ => orig.wrapping_add(a.swap_add),
        };
        ctx.mrs.write_u64(span, new).map_err(fault)?;
        let psn = p.bth.psn;
        self.push_record(
            qp,
            Record {
                psn,
                npsn: 1,
                kind: RecordKind::Atomic { orig },
            },
        );
        self.msn = self.msn.next();
        self.out.push_back(Job::AtomicAck {
            psn,
            orig,
            fresh: true,
        });
        Ok(())
    }
}
