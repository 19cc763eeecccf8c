//! The target core: controllers and queues of an NVMe-oF/RDMA target as a
//! state machine with no I/O of its own.
//!
//! # Call order
//!
//! A driver owns the RDMA CM listener, the queue pairs and a clock. For
//! every connection request it calls [`Target::on_cm_request`] with the
//! request's private data and accepts (with the returned private data) or
//! rejects. Then, in any order:
//!
//! * [`Target::on_capsule`] for every command capsule received (a SEND);
//! * [`Target::on_host_data`] when an RDMA READ asked for by
//!   [`Action::ReadHost`] has completed, or [`Target::on_transfer_error`]
//!   when it failed;
//! * [`Target::on_disconnect`] when a connection goes away;
//! * [`Target::on_timeout`] once the time in [`Target::next_deadline`] has
//!   passed;
//!
//! and after each call it drains [`Target::poll_action`] and performs the
//! actions in order: RDMA WRITEs of data to host buffers before the
//! response SEND that completes the command (the RC queue pair keeps that
//! order, NVMe-oF 1.1 §7.3.3), SEND with Invalidate where asked, and
//! disconnects.
//!
//! Every table is bounded by [`Limits`]; a hostile host gets the NVMe
//! status the specification names for its mistake, or its connection
//! dropped when the capsule cannot even be answered (shorter than an SQE).

mod admin;
mod capsule;
mod config;
mod connect;
mod controller;
mod io;
mod namespace;
mod queue;

#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

pub use config::{
    Limits, NamespaceEntry, PortInfo, Subsystem, TargetConfig, ADMIN_QUEUE_DEPTH, DISCOVERY_NQN,
};
pub use namespace::{FileNamespace, MemNamespace, Namespace, NsError};
pub use queue::{ConnId, IllegalTransition, QueueEvent, QueueState};

use crate::wire::cqe::CQE_LEN;
use crate::wire::{Cid, Cntlid, Rkey};
use controller::Controller;
use queue::Queue;

/// What the driver must do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// RDMA READ `len` bytes from the host at `addr` with `key`, then call
    /// [`Target::on_host_data`] with them (or
    /// [`Target::on_transfer_error`]).
    ReadHost {
        /// Connection.
        conn: ConnId,
        /// The command waiting for the data.
        cid: Cid,
        /// Host address.
        addr: u64,
        /// Host rkey.
        key: Rkey,
        /// Bytes to read.
        len: u32,
    },
    /// RDMA WRITE `data` to the host at `addr` with `key`.
    WriteHost {
        /// Connection.
        conn: ConnId,
        /// The command the data is for.
        cid: Cid,
        /// Host address.
        addr: u64,
        /// Host rkey.
        key: Rkey,
        /// The data.
        data: Vec<u8>,
    },
    /// SEND the response capsule (a CQE); with `invalidate`, as SEND with
    /// Invalidate of that key (NVMe-oF 1.1 §7.3.2).
    Respond {
        /// Connection.
        conn: ConnId,
        /// The 16-byte CQE.
        cqe: [u8; CQE_LEN],
        /// Key to invalidate remotely.
        invalidate: Option<Rkey>,
    },
    /// Disconnect the connection (after the responses before it).
    Disconnect {
        /// Connection.
        conn: ConnId,
    },
}

/// An NVMe-oF target: subsystems, controllers and queues.
#[derive(Debug)]
pub struct Target {
    cfg: TargetConfig,
    conns: BTreeMap<ConnId, Queue>,
    ctrls: BTreeMap<Cntlid, Controller>,
    actions: VecDeque<Action>,
    next_conn: u64,
    next_cntlid: u16,
    genctr: u64,
    /// Bytes of `ReadHost` actions not yet answered (all queues).
    pending_host_data: u64,
}

impl Target {
    /// A target serving `cfg`. Namespaces beyond
    /// [`Limits::max_namespaces`] and namespaces with NSID 0 or the
    /// broadcast value are dropped.
    pub fn new(mut cfg: TargetConfig) -> Target {
        let max_ns = cfg.limits.max_namespaces;
        for s in &mut cfg.subsystems {
            s.namespaces
                .retain(|n| n.nsid.0 != 0 && n.nsid.0 != u32::MAX);
            s.namespaces.truncate(max_ns);
            s.namespaces.sort_by_key(|n| n.nsid);
            s.namespaces.dedup_by_key(|n| n.nsid);
        }
        Target {
            cfg,
            conns: BTreeMap::new(),
            ctrls: BTreeMap::new(),
            actions: VecDeque::new(),
            next_conn: 1,
            next_cntlid: 1,
            genctr: 1,
            pending_host_data: 0,
        }
    }

    /// The configuration (subsystems and their namespaces).
    pub fn config(&self) -> &TargetConfig {
        &self.cfg
    }

    /// The next action for the driver.
    pub fn poll_action(&mut self) -> Option<Action> {
        self.actions.pop_front()
    }

    /// The earliest keep-alive deadline of any controller.
    pub fn next_deadline(&self) -> Option<Duration> {
        self.ctrls.values().filter_map(|c| c.ka_deadline).min()
    }

    /// Tears down every controller whose keep-alive deadline is at or
    /// before `now` with no command since its timer started (NVMe base
    /// 1.4 §7.12.1: the controller "shall treat this as a fatal error"),
    /// disconnecting its queues; one that had traffic gets another
    /// period (traffic-based keep alive).
    pub fn on_timeout(&mut self, now: Duration) {
        let expired: Vec<Cntlid> = self
            .ctrls
            .values_mut()
            .filter(|c| c.ka_deadline.is_some_and(|d| d <= now))
            .filter_map(|c| c.keep_alive_expired(now).then_some(c.cntlid))
            .collect();
        for id in expired {
            self.destroy_controller(id);
        }
    }

    /// The connection went away: its commands are dropped; if it was an
    /// admin queue its controller and that controller's I/O queues go too.
    pub fn on_disconnect(&mut self, conn: ConnId) {
        let Some(q) = self.conns.remove(&conn) else {
            return;
        };
        self.forget_waiting(&q);
        let Some(cntlid) = q.cntlid() else { return };
        if q.qid.0 == 0 {
            self.destroy_controller(cntlid);
        } else if let Some(c) = self.ctrls.get_mut(&cntlid) {
            c.io_conns.remove(&q.qid);
        }
    }

    /// How many controllers exist.
    pub fn controller_count(&self) -> usize {
        self.ctrls.len()
    }

    /// How many connections exist.
    pub fn connection_count(&self) -> usize {
        self.conns.len()
    }

    /// The state of a connection.
    pub fn queue_state(&self, conn: ConnId) -> Option<QueueState> {
        self.conns.get(&conn).map(|q| q.state)
    }

    /// Host data a queue's commands were waiting for is no longer pending.
    fn forget_waiting(&mut self, q: &Queue) {
        let pending: u64 = q.waiting.values().map(|w| w.len as u64).sum();
        self.pending_host_data = self.pending_host_data.saturating_sub(pending);
    }

    fn destroy_controller(&mut self, id: Cntlid) {
        let Some(c) = self.ctrls.remove(&id) else {
            return;
        };
        let mut conns: Vec<ConnId> = c.io_conns.values().copied().collect();
        conns.push(c.admin_conn);
        for conn in conns {
            if let Some(q) = self.conns.get_mut(&conn) {
                q.state = q
                    .state
                    .transition(QueueEvent::Disconnect)
                    .unwrap_or(QueueState::Closed);
                q.outstanding.clear();
                let pending: u64 = q.waiting.values().map(|w| w.len as u64).sum();
                self.pending_host_data = self.pending_host_data.saturating_sub(pending);
                q.waiting.clear();
                self.actions.push_back(Action::Disconnect { conn });
            }
        }
    }

    /// Adds a namespace to subsystem `subsys` (an index into the
    /// configuration) and tells its controllers: the Changed Namespace
    /// List records it and, where enabled, an asynchronous event reports
    /// it (NVMe base 1.4 §5.2, §5.14.1.4). Returns false if the subsystem
    /// does not exist, the NSID is taken or invalid, or the table is full.
    pub fn add_namespace(&mut self, subsys: usize, entry: NamespaceEntry) -> bool {
        let max = self.cfg.limits.max_namespaces;
        let Some(s) = self.cfg.subsystems.get_mut(subsys) else {
            return false;
        };
        let nsid = entry.nsid;
        if nsid.0 == 0
            || nsid.0 == u32::MAX
            || s.namespaces.len() >= max
            || s.namespaces.iter().any(|n| n.nsid == nsid)
        {
            return false;
        }
        s.namespaces.push(entry);
        s.namespaces.sort_by_key(|n| n.nsid);
        self.genctr += 1;
        self.namespace_changed(subsys, nsid.0);
        true
    }
}
