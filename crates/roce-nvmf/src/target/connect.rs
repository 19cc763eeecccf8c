//! The Fabrics Connect command (NVMe-oF 1.1 §3.3): creates a controller
//! on the admin queue, attaches an I/O queue to an existing one.

use std::time::Duration;

use super::capsule::Completion;
use super::controller::{Controller, SubsysRef};
use super::queue::{ConnId, QueueEvent};
use super::{Target, DISCOVERY_NQN};
use crate::wire::fabrics::{
    connect_cmd_off, connect_data_off, invalid_param_dw0, ConnectCmd, ConnectData,
};
use crate::wire::sqe::Sqe;
use crate::wire::status::Status;
use crate::wire::{Cntlid, Qid};

/// Connect Attributes bit 2: SQ flow control disable (NVMe-oF 1.1
/// Figure 19, TP 8005).
const CATTR_DISABLE_SQFLOW: u8 = 1 << 2;

fn invalid(in_data: bool, off: u16) -> (Completion, QueueEvent) {
    let mut c = Completion::status(Status::CONNECT_INVALID_PARAMETERS);
    c.dw0 = invalid_param_dw0(in_data, off);
    (c, QueueEvent::ConnectFailed)
}

fn fail(st: Status) -> (Completion, QueueEvent) {
    (Completion::status(st), QueueEvent::ConnectFailed)
}

impl Target {
    /// Validates and performs a Connect; `data` is the Connect data.
    pub(crate) fn connect<T: AsRef<[u8]>>(
        &mut self,
        conn: ConnId,
        sqe: &Sqe<T>,
        data: &[u8],
        now: Duration,
    ) -> (Completion, QueueEvent) {
        let cmd = ConnectCmd::parse(sqe);
        if cmd.recfmt != 0 {
            return fail(Status::CONNECT_INCOMPATIBLE_FORMAT);
        }
        let Some(q) = self.conns.get(&conn) else {
            return fail(Status::INTERNAL_ERROR);
        };
        let (cm_qid, depth) = (q.qid, q.depth);
        if cmd.qid != cm_qid {
            return invalid(false, connect_cmd_off::QID);
        }
        // SQSIZE is 0's based and shall not be 0 (NVMe-oF 1.1 Figure 19);
        // it must match the HSQSIZE of the RDMA CM request (§7.3.5.1).
        if cmd.sqsize == 0 || cmd.sqsize as u32 + 1 != depth as u32 {
            return invalid(false, connect_cmd_off::SQSIZE);
        }
        let d = match ConnectData::parse_fields(data) {
            Ok(d) => d,
            Err((_, off)) => return invalid(true, off),
        };
        let subsys = if d.subnqn == DISCOVERY_NQN {
            SubsysRef::Discovery
        } else {
            match self.cfg.subsystems.iter().position(|s| s.nqn == d.subnqn) {
                Some(i) => SubsysRef::Nvm(i),
                None => return invalid(true, connect_data_off::SUBNQN),
            }
        };
        if let SubsysRef::Nvm(i) = subsys {
            if !self.cfg.subsystems[i].host_allowed(&d.hostnqn) {
                return fail(Status::CONNECT_INVALID_HOST);
            }
        }
        let cntlid = if cmd.qid == Qid::ADMIN {
            // Dynamic controller model (FCATT bit 0 = 0): the host asks
            // for 0xFFFF (or 0xFFFE, "any") and gets a new controller.
            if d.cntlid.0 < 0xFFFE {
                return invalid(true, connect_data_off::CNTLID);
            }
            if self.ctrls.len() >= self.cfg.limits.max_controllers {
                return fail(Status::CONNECT_CONTROLLER_BUSY);
            }
            let Some(id) = self.alloc_cntlid() else {
                return fail(Status::CONNECT_CONTROLLER_BUSY);
            };
            let kato = if subsys == SubsysRef::Discovery && cmd.kato == 0 {
                0
            } else {
                cmd.kato
            };
            let c = Controller::new(id, subsys, d.hostnqn, d.hostid, conn, kato, now);
            self.ctrls.insert(id, c);
            id
        } else {
            let max_io = self.cfg.limits.max_io_queues;
            let Some(c) = self.ctrls.get_mut(&d.cntlid) else {
                return invalid(true, connect_data_off::CNTLID);
            };
            if c.subsys != subsys || c.hostnqn != d.hostnqn || c.hostid != d.hostid {
                return invalid(true, connect_data_off::CNTLID);
            }
            if subsys == SubsysRef::Discovery
                || cmd.qid.0 > if c.io_queues_set { c.io_queues } else { max_io }
                || c.io_conns.contains_key(&cmd.qid)
            {
                return invalid(false, connect_cmd_off::QID);
            }
            if !c.ready() {
                return fail(Status::COMMAND_SEQUENCE_ERROR);
            }
            c.io_conns.insert(cmd.qid, conn);
            // An I/O queue's Connect is traffic too (TBKAS).
            c.note_traffic();
            d.cntlid
        };
        if let Some(q) = self.conns.get_mut(&conn) {
            q.sqhd_disabled = cmd.cattr & CATTR_DISABLE_SQFLOW != 0;
        }
        // Connect response DW0: CNTLID in bits 15:0 (NVMe-oF 1.1 Fig. 22).
        (
            Completion::dw0(cntlid.0 as u32),
            QueueEvent::Connected(cntlid),
        )
    }

    fn alloc_cntlid(&mut self) -> Option<Cntlid> {
        // Controller IDs 0x0001..=0xFFEF (NVMe base 1.4 §7.10).
        for _ in 0..0xFFEF {
            let id = Cntlid(self.next_cntlid);
            self.next_cntlid = if self.next_cntlid >= 0xFFEF {
                1
            } else {
                self.next_cntlid + 1
            };
            if !self.ctrls.contains_key(&id) {
                return Some(id);
            }
        }
        None
    }
}
