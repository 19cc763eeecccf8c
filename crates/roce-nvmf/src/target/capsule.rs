//! From a received capsule to actions: queue checks, the data plan of each
//! command (which way data moves and how much, NVMe-oF 1.1 §2.4 and
//! §7.3.2), SGL validation, and the response.

use std::time::Duration;

use super::controller::SubsysRef;
use super::queue::{ConnId, Queue, Waiting};
use super::{Action, Target, ADMIN_QUEUE_DEPTH};
use crate::wire::cm::{CmAccept, CmRequest, RejectStatus, ACCEPT_LEN, RECFMT_1_0, REJECT_LEN};
use crate::wire::cqe::CqeRepr;
use crate::wire::fabrics::fctype;
use crate::wire::log::{ErrorEntry, GetLogPage, TRTYPE_RDMA};
use crate::wire::sgl::SglDesc;
use crate::wire::sqe::{admin_opc, io_opc, Psdt, Sqe, SQE_LEN};
use crate::wire::status::Status;
use crate::wire::{Cid, Qid, Rkey};

/// Which way a command's data moves, and how many bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Dir {
    None,
    ToTarget(u32),
    ToHost(u32),
}

/// How a command ended: answered now, or held (an AER).
#[derive(Debug)]
pub(crate) enum Outcome {
    Done(Completion),
    Held,
}

/// A command's result.
#[derive(Debug)]
pub(crate) struct Completion {
    pub(crate) status: Status,
    pub(crate) dw0: u32,
    pub(crate) dw1: u32,
    /// Data for the host (commands with [`Dir::ToHost`]).
    pub(crate) data: Vec<u8>,
}

impl Completion {
    pub(crate) fn ok() -> Completion {
        Completion {
            status: Status::SUCCESS,
            dw0: 0,
            dw1: 0,
            data: Vec::new(),
        }
    }

    pub(crate) fn status(status: Status) -> Completion {
        Completion {
            status,
            dw0: 0,
            dw1: 0,
            data: Vec::new(),
        }
    }

    pub(crate) fn dw0(dw0: u32) -> Completion {
        Completion {
            status: Status::SUCCESS,
            dw0,
            dw1: 0,
            data: Vec::new(),
        }
    }

    pub(crate) fn data(data: Vec<u8>) -> Completion {
        Completion {
            status: Status::SUCCESS,
            dw0: 0,
            dw1: 0,
            data,
        }
    }
}

/// Status for a submission beyond the queue's depth. No status in NVMe
/// base 1.4 or NVMe-oF 1.1 names a full SQ over fabrics (on PCIe it is the
/// Invalid Doorbell Write Value asynchronous event, §5.2.1); this core
/// answers Command Sequence Error and runs nothing.
pub(crate) const QUEUE_FULL: Status = Status::COMMAND_SEQUENCE_ERROR;

impl Target {
    /// Handles an RDMA CM connection request's private data (NVMe-oF 1.1
    /// §7.3.5). On success the connection exists and the driver accepts
    /// with the returned 32 bytes; on failure it rejects with the returned
    /// 4 bytes.
    pub fn on_cm_request(
        &mut self,
        private_data: &[u8],
    ) -> Result<(ConnId, [u8; ACCEPT_LEN]), [u8; REJECT_LEN]> {
        let reject = |s: RejectStatus| crate::wire::cm::CmReject::new(s).to_bytes();
        let req = CmRequest::parse(private_data).map_err(reject)?;
        let lim = self.cfg.limits;
        let max_depth = if req.qid == Qid::ADMIN {
            ADMIN_QUEUE_DEPTH
        } else {
            lim.max_queue_depth
        };
        if req.qid.0 > lim.max_io_queues {
            return Err(reject(RejectStatus::InvalidQid));
        }
        let depth = req.hsqsize as u32 + 1;
        if req.hsqsize == 0 || depth > max_depth as u32 {
            return Err(reject(RejectStatus::InvalidHsqsize));
        }
        if req.hrqsize == 0 {
            return Err(reject(RejectStatus::InvalidHrqsize));
        }
        if self.conns.len() >= lim.max_connections {
            return Err(reject(RejectStatus::NoResources));
        }
        let id = ConnId(self.next_conn);
        self.next_conn += 1;
        self.conns.insert(id, Queue::new(req.qid, depth as u16));
        let acc = CmAccept {
            recfmt: RECFMT_1_0,
            crqsize: depth as u16,
        };
        Ok((id, acc.to_bytes()))
    }

    /// Handles a received command capsule. Unknown or closed connections
    /// are ignored; a capsule shorter than an SQE cannot be answered and
    /// disconnects the queue (NVMe-oF 1.1 §7.3.1: a capsule is at least an
    /// SQE).
    pub fn on_capsule(&mut self, conn: ConnId, capsule: &[u8], now: Duration) {
        let Some(q) = self.conns.get_mut(&conn) else {
            return;
        };
        if q.state == super::QueueState::Closed {
            return;
        }
        let Ok(sqe) = Sqe::new_checked(capsule) else {
            self.on_disconnect(conn);
            self.actions.push_back(Action::Disconnect { conn });
            return;
        };
        q.consume();
        // Traffic-based keep alive: any command on any of a controller's
        // queues counts (Linux's host before 6.7 sends no Keep Alive while
        // it connects its I/O queues, which loss can stretch past KATO).
        if let Some(c) = q.cntlid().and_then(|id| self.ctrls.get_mut(&id)) {
            c.note_traffic();
        }
        let cid = sqe.cid();
        if q.outstanding.contains(&cid) {
            // The CID stays with the command already running.
            let cqe = self.cqe(conn, cid, Completion::status(Status::CID_CONFLICT));
            self.actions.push_back(Action::Respond {
                conn,
                cqe,
                invalidate: None,
            });
            return;
        }
        if q.outstanding.len() >= q.depth as usize {
            let cqe = self.cqe(conn, cid, Completion::status(QUEUE_FULL));
            self.actions.push_back(Action::Respond {
                conn,
                cqe,
                invalidate: None,
            });
            return;
        }
        q.outstanding.insert(cid);
        let sgl = sqe.sgl1();
        let dir = match self.plan(conn, &sqe) {
            Ok(d) => d,
            Err(st) => {
                return self.finish(
                    conn,
                    cid,
                    sgl,
                    Dir::None,
                    Outcome::Done(Completion::status(st)),
                    Some(&sqe),
                )
            }
        };
        let in_capsule = match self.check_sgl(conn, &sqe, dir) {
            Ok(r) => r,
            Err(st) => {
                return self.finish(
                    conn,
                    cid,
                    sgl,
                    Dir::None,
                    Outcome::Done(Completion::status(st)),
                    Some(&sqe),
                )
            }
        };
        match (dir, sgl, in_capsule) {
            (Dir::ToTarget(len), _, Some(range)) => {
                let data = &sqe.in_capsule_data()[range];
                debug_assert_eq!(data.len(), len as usize);
                let out = self.execute(conn, &sqe, data, now);
                self.finish(conn, cid, sgl, dir, out, Some(&sqe));
            }
            // Connect data (1 KiB a connection, bounded by the connection
            // table) is exempt, so new hosts still connect under load.
            (Dir::ToTarget(len), SglDesc::Keyed { .. }, None)
                if len > 0
                    && sqe.opcode() != admin_opc::FABRICS
                    && self.pending_host_data + len as u64
                        > self.cfg.limits.max_pending_host_data =>
            {
                let out = Outcome::Done(Completion::status(Status::COMMAND_INTERRUPTED));
                self.finish(conn, cid, sgl, Dir::None, out, Some(&sqe));
            }
            (Dir::ToTarget(len), SglDesc::Keyed { addr, key, .. }, None) if len > 0 => {
                self.pending_host_data += len as u64;
                let mut raw = [0u8; SQE_LEN];
                raw.copy_from_slice(sqe.raw());
                if let Some(q) = self.conns.get_mut(&conn) {
                    q.waiting.insert(cid, Waiting { sqe: raw, len });
                }
                self.actions.push_back(Action::ReadHost {
                    conn,
                    cid,
                    addr,
                    key,
                    len,
                });
            }
            _ => {
                let out = self.execute(conn, &sqe, &[], now);
                self.finish(conn, cid, sgl, dir, out, Some(&sqe));
            }
        }
    }

    /// The data of an [`Action::ReadHost`] arrived. Data of another length
    /// than asked for completes the command with Data Transfer Error.
    pub fn on_host_data(&mut self, conn: ConnId, cid: Cid, data: &[u8], now: Duration) {
        let Some((w, sqe)) = self.take_waiting(conn, cid) else {
            return;
        };
        let sgl = sqe.sgl1();
        let out = if data.len() != w.len as usize {
            Outcome::Done(Completion::status(Status::DATA_TRANSFER_ERROR))
        } else {
            self.execute(conn, &sqe, data, now)
        };
        self.finish(conn, cid, sgl, Dir::ToTarget(w.len), out, Some(&sqe));
    }

    /// The RDMA READ of an [`Action::ReadHost`] failed: the command
    /// completes with Data Transfer Error (NVMe base 1.4 Figure 128).
    pub fn on_transfer_error(&mut self, conn: ConnId, cid: Cid) {
        let Some((_, sqe)) = self.take_waiting(conn, cid) else {
            return;
        };
        let out = Outcome::Done(Completion::status(Status::DATA_TRANSFER_ERROR));
        self.finish(conn, cid, sqe.sgl1(), Dir::None, out, Some(&sqe));
    }

    /// The command `cid` of `conn` that waited for host data, no longer
    /// waiting, with its SQE (none for an unknown command).
    fn take_waiting(&mut self, conn: ConnId, cid: Cid) -> Option<(Waiting, Sqe<[u8; 64]>)> {
        let w = self.conns.get_mut(&conn)?.waiting.remove(&cid)?;
        self.pending_host_data = self.pending_host_data.saturating_sub(w.len as u64);
        let sqe = Sqe::new_checked(w.sqe).ok()?;
        Some((w, sqe))
    }

    /// Which way data moves and how much, after the queue-state checks.
    fn plan<T: AsRef<[u8]>>(&self, conn: ConnId, sqe: &Sqe<T>) -> Result<Dir, Status> {
        let q = self.conns.get(&conn).ok_or(Status::INTERNAL_ERROR)?;
        let opc = sqe.opcode();
        let is_connect = opc == admin_opc::FABRICS && sqe.fctype() == fctype::CONNECT;
        let Some(cntlid) = q.cntlid() else {
            return if is_connect {
                Ok(Dir::ToTarget(crate::wire::fabrics::CONNECT_DATA_LEN as u32))
            } else {
                Err(Status::COMMAND_SEQUENCE_ERROR)
            };
        };
        if is_connect {
            return Err(Status::COMMAND_SEQUENCE_ERROR);
        }
        if sqe.fuse() != 0 {
            return Err(Status::INVALID_FIELD);
        }
        let ctrl = self.ctrls.get(&cntlid).ok_or(Status::INTERNAL_ERROR)?;
        let max = self.cfg.limits.max_transfer();
        if q.qid == Qid::ADMIN {
            if opc == admin_opc::FABRICS {
                return match sqe.fctype() {
                    fctype::PROPERTY_GET | fctype::PROPERTY_SET => Ok(Dir::None),
                    _ => Err(Status::INVALID_OPCODE),
                };
            }
            if !ctrl.ready() {
                return Err(Status::COMMAND_SEQUENCE_ERROR);
            }
            return Ok(match opc {
                admin_opc::IDENTIFY => Dir::ToHost(crate::wire::identify::IDENTIFY_LEN as u32),
                admin_opc::GET_LOG_PAGE => {
                    let g =
                        GetLogPage::from_cdw(sqe.cdw(10), sqe.cdw(11), sqe.cdw(12), sqe.cdw(13));
                    if g.len_bytes() > max as u64 {
                        return Err(Status::INVALID_FIELD);
                    }
                    Dir::ToHost(g.len_bytes() as u32)
                }
                _ => Dir::None,
            });
        }
        if opc == admin_opc::FABRICS {
            return Err(Status::INVALID_OPCODE);
        }
        if !ctrl.ready() {
            return Err(Status::COMMAND_SEQUENCE_ERROR);
        }
        let SubsysRef::Nvm(si) = ctrl.subsys else {
            return Err(Status::INVALID_OPCODE);
        };
        let needs_ns = matches!(
            opc,
            io_opc::READ
                | io_opc::WRITE
                | io_opc::WRITE_ZEROES
                | io_opc::DATASET_MANAGEMENT
                | io_opc::FLUSH
        );
        if !needs_ns {
            return Err(Status::INVALID_OPCODE);
        }
        let ns = self
            .namespace(si, sqe.nsid())
            .ok_or(Status::INVALID_NAMESPACE)?;
        let bs = ns.storage.block_size() as u64;
        let nlb = (sqe.cdw(12) & 0xFFFF) as u64 + 1;
        let bytes = nlb * bs;
        Ok(match opc {
            io_opc::READ | io_opc::WRITE => {
                if bytes > max as u64 {
                    return Err(Status::INVALID_FIELD);
                }
                if opc == io_opc::READ {
                    Dir::ToHost(bytes as u32)
                } else {
                    Dir::ToTarget(bytes as u32)
                }
            }
            io_opc::DATASET_MANAGEMENT => Dir::ToTarget(((sqe.cdw(10) & 0xFF) + 1) * 16),
            _ => Dir::None,
        })
    }

    /// Checks SGL1 against the plan (NVMe base 1.4 §4.4; NVMe-oF 1.1
    /// §7.3.2). For in-capsule data returns the range of the data within
    /// the in-capsule area.
    fn check_sgl<T: AsRef<[u8]>>(
        &self,
        conn: ConnId,
        sqe: &Sqe<T>,
        dir: Dir,
    ) -> Result<Option<core::ops::Range<usize>>, Status> {
        let need = match dir {
            Dir::None => return Ok(None),
            Dir::ToTarget(n) | Dir::ToHost(n) => n,
        };
        if !matches!(sqe.psdt(), Psdt::SglMptrContig | Psdt::SglMptrSgl) {
            return Err(Status::INVALID_FIELD);
        }
        let admin = self.conns.get(&conn).is_some_and(|q| q.qid == Qid::ADMIN);
        match sqe.sgl1() {
            SglDesc::Keyed { len, .. } => {
                if len < need {
                    Err(Status::DATA_SGL_LENGTH_INVALID)
                } else {
                    Ok(None)
                }
            }
            SglDesc::InCapsule { offset, len } => {
                if matches!(dir, Dir::ToHost(_)) {
                    return Err(Status::SGL_DESCRIPTOR_TYPE_INVALID);
                }
                // The admin queue's capsules are 64 bytes (NVMe-oF 1.1
                // §2.4.1); I/O queues take IOCCSZ * 16 bytes.
                let max = if admin {
                    0
                } else {
                    self.cfg.limits.in_capsule_data as u64
                };
                if offset > max {
                    return Err(Status::SGL_OFFSET_INVALID);
                }
                let end = offset + len as u64;
                let have = sqe.in_capsule_data().len() as u64;
                if len < need || end > max || end > have {
                    return Err(Status::DATA_SGL_LENGTH_INVALID);
                }
                Ok(Some(offset as usize..offset as usize + need as usize))
            }
            SglDesc::Other { .. } => Err(Status::SGL_DESCRIPTOR_TYPE_INVALID),
        }
    }

    /// Answers a command: data to the host first, then the response, and
    /// an Error Information entry for a failure.
    pub(crate) fn finish<T: AsRef<[u8]>>(
        &mut self,
        conn: ConnId,
        cid: Cid,
        sgl: SglDesc,
        dir: Dir,
        out: Outcome,
        sqe: Option<&Sqe<T>>,
    ) {
        let c = match out {
            Outcome::Held => return,
            Outcome::Done(c) => c,
        };
        let (key, invalidate) = match sgl {
            SglDesc::Keyed {
                key, invalidate, ..
            } => (key, invalidate),
            _ => (Rkey(0), false),
        };
        if c.status.is_success() {
            if let (Dir::ToHost(n), SglDesc::Keyed { addr, .. }) = (dir, sgl) {
                let mut data = c.data.clone();
                data.resize(n as usize, 0);
                self.actions.push_back(Action::WriteHost {
                    conn,
                    cid,
                    addr,
                    key,
                    data,
                });
            }
        } else {
            self.record_error(conn, cid, c.status, sqe);
        }
        let cqe = self.cqe(conn, cid, c);
        if let Some(q) = self.conns.get_mut(&conn) {
            q.outstanding.remove(&cid);
        }
        let invalidate = (invalidate && self.cfg.limits.remote_invalidate).then_some(key);
        self.actions.push_back(Action::Respond {
            conn,
            cqe,
            invalidate,
        });
    }

    pub(crate) fn cqe(&self, conn: ConnId, cid: Cid, c: Completion) -> [u8; 16] {
        let (sqhd, sqid) = self
            .conns
            .get(&conn)
            .map_or((0, 0), |q| (q.reported_sqhd(), q.qid.0));
        CqeRepr {
            dw0: c.dw0,
            dw1: c.dw1,
            sqhd,
            sqid,
            cid,
            phase: false,
            status: c.status,
        }
        .to_bytes()
    }

    fn record_error<T: AsRef<[u8]>>(
        &mut self,
        conn: ConnId,
        cid: Cid,
        st: Status,
        sqe: Option<&Sqe<T>>,
    ) {
        let Some(q) = self.conns.get(&conn) else {
            return;
        };
        let qid = q.qid.0;
        let Some(ctrl) = q.cntlid().and_then(|id| self.ctrls.get_mut(&id)) else {
            return;
        };
        let nsid = sqe.map_or(0, |s| {
            if s.opcode() == admin_opc::FABRICS {
                0
            } else {
                s.nsid().0
            }
        });
        let e = ErrorEntry {
            error_count: 0,
            sqid: qid,
            cid: cid.0,
            status: st.to_field(false),
            param_loc: 0xFFFF,
            lba: 0,
            nsid,
            trtype: TRTYPE_RDMA,
        };
        ctrl.log_error(e, self.cfg.limits.error_log_entries as usize);
    }

    /// Runs a command whose data (if any) is in `data`.
    fn execute<T: AsRef<[u8]>>(
        &mut self,
        conn: ConnId,
        sqe: &Sqe<T>,
        data: &[u8],
        now: Duration,
    ) -> Outcome {
        let Some(q) = self.conns.get(&conn) else {
            return Outcome::Done(Completion::status(Status::INTERNAL_ERROR));
        };
        let admin = q.qid == Qid::ADMIN;
        match q.cntlid() {
            None => {
                let (c, ev) = self.connect(conn, sqe, data, now);
                if let Some(q) = self.conns.get_mut(&conn) {
                    q.state = q.state.transition(ev).unwrap_or(q.state);
                }
                Outcome::Done(c)
            }
            Some(cntlid) if admin => self.admin(conn, cntlid, sqe, data, now),
            Some(cntlid) => Outcome::Done(self.io(cntlid, sqe, data)),
        }
    }
}
