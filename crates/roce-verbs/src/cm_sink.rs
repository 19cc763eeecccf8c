//! The connection manager without waiting: for a caller that runs an
//! event loop of its own, as librdmacm's C API does (`rdma_connect`
//! returns at once, the outcome arrives later as an event on a channel
//! the program polls). The drop-in `librdmacm.so.1` is built on it.
//!
//! The caller installs a [`CmSink`] once per context: from then on every
//! CM event of the context goes to it, in the engine's order, instead of
//! the queue the blocking API of `cm.rs` waits on (a context serves one
//! style or the other). The operations here send what the CM has to send
//! and return; they never wait for the peer.
//!
//! Ordering: the sink runs on whichever thread collects the engine's
//! events (usually the progress thread) while the engine is locked, so
//! events reach it one at a time and in order. It must not call back
//! into the context. A caller that maps [`CmId`]s to objects of its own
//! should register the id returned by an operation before letting the
//! sink look it up, under one lock of its own taken around both: the
//! sink may see the first event of a connection as soon as the engine is
//! unlocked.

use std::net::IpAddr;

#[cfg(doc)]
use roce_core::cm::CmEvent;
use roce_core::cm::{CmId, CmState, ConnParam, ListenId};
use roce_core::{QpAttr, QpAttrMask, QpState, QpType, Qpn};

use crate::error::Error;
use crate::progress::kick;
use crate::{Context, QueuePair};

pub use crate::state::CmSink;

/// rdma_cm's port spaces that this CM serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PortSpace {
    /// `RDMA_PS_TCP`: reliable connections (REQ/REP/RTU).
    Tcp,
    /// `RDMA_PS_UDP`: UD service resolution (SIDR).
    Udp,
}

impl Context {
    /// Sends every CM event of this context to `sink` from now on (see the
    /// module docs). Only the first call takes effect; false for a later
    /// one.
    pub fn set_cm_sink(&self, sink: CmSink) -> bool {
        self.shared().events.cm_sink.set(sink).is_ok()
    }

    /// `rdma_listen(id, backlog)` on `port`: requests arrive at the sink
    /// as [`CmEvent::ConnectRequest`] (TCP) or [`CmEvent::UdRequest`] (UDP).
    pub fn cm_listen_nowait(
        &self,
        space: PortSpace,
        port: u16,
        backlog: usize,
    ) -> Result<ListenId, Error> {
        self.listen_with(|dev| match space {
            PortSpace::Tcp => dev.cm_listen_backlog(port, backlog),
            PortSpace::Udp => dev.cm_listen_ud(port),
        })
    }

    /// `rdma_bind_addr` of `port` in `space`, ahead of a listen: a REQ
    /// that comes before the listen is left unanswered (its sender
    /// resends it) rather than refused (roce-core
    /// `Device::cm_expect_listen`). Nothing for the UDP port space.
    pub fn cm_expect_listen(&self, space: PortSpace, port: u16) {
        if space == PortSpace::Tcp {
            self.shared().core().dev.cm_expect_listen(port);
        }
    }

    /// Stops listening. Requests already handed to the sink stay the
    /// caller's to answer (or to [`release`](Context::cm_release)).
    pub fn cm_unlisten(&self, id: ListenId) {
        Context::unlisten_in(&mut self.shared().core(), id);
    }

    /// `rdma_connect` on an RC QP (brought to INIT if it is in RESET):
    /// sends the REQ. [`CmEvent::Established`] follows the REP, with the
    /// QP in RTS; [`CmEvent::Rejected`] or [`CmEvent::Unreachable`] if not.
    pub fn cm_connect_nowait(
        &self,
        qp: &QueuePair,
        peer: IpAddr,
        port: u16,
        param: &ConnParam,
    ) -> Result<CmId, Error> {
        if !qp.pd().context().same(self) {
            return Err(Error::WrongContext);
        }
        crate::cm::to_init(qp)?;
        let shared = self.shared();
        let id = {
            let mut core = shared.core();
            let now = shared.now();
            core.dev.cm_connect(now, qp.qpn(), peer, port, param)?
        };
        kick(shared);
        Ok(id)
    }

    /// `rdma_accept` of a connection request on an RC QP: the QP goes to
    /// RTS and the REP leaves; [`CmEvent::Established`] follows the RTU.
    pub fn cm_accept_nowait(
        &self,
        id: CmId,
        qp: &QueuePair,
        param: &ConnParam,
    ) -> Result<(), Error> {
        if !qp.pd().context().same(self) {
            return Err(Error::WrongContext);
        }
        crate::cm::to_init(qp)?;
        let shared = self.shared();
        {
            let mut core = shared.core();
            let now = shared.now();
            core.dev.cm_accept(now, id, qp.qpn(), param)?;
        }
        kick(shared);
        Ok(())
    }

    /// `rdma_reject` of a connection request (REJ with `private_data`).
    pub fn cm_reject_nowait(&self, id: CmId, private_data: &[u8]) -> Result<(), Error> {
        self.shared().core().dev.cm_reject(id, private_data)?;
        kick(self.shared());
        Ok(())
    }

    /// `rdma_connect` on a UD id: asks the service at `peer:port` for its
    /// QPN and Q_Key (SIDR); [`CmEvent::UdResolved`] answers.
    pub fn cm_resolve_ud_nowait(
        &self,
        peer: IpAddr,
        port: u16,
        private_data: &[u8],
    ) -> Result<CmId, Error> {
        let shared = self.shared();
        let id = {
            let mut core = shared.core();
            let now = shared.now();
            core.dev.cm_resolve_ud(now, peer, port, private_data)?
        };
        kick(shared);
        Ok(id)
    }

    /// `rdma_accept` (with a UD QP and its Q_Key) or `rdma_reject` (None)
    /// of a UD service resolution request.
    pub fn cm_answer_ud(&self, id: CmId, answer: Option<(&QueuePair, u32)>) -> Result<(), Error> {
        {
            let mut core = self.shared().core();
            match answer {
                Some((qp, qkey)) => {
                    if qp.qp_type() != QpType::Ud {
                        return Err(Error::InvalidArgument("a UD service answers with a UD QP"));
                    }
                    core.dev.cm_accept_ud(id, qp.qpn(), qkey)?
                }
                None => core.dev.cm_reject_ud(id)?,
            }
        }
        kick(self.shared());
        Ok(())
    }

    /// `rdma_disconnect`: the QP goes to ERR and a DREQ leaves;
    /// [`CmEvent::Disconnected`] follows the DREP (or the retries). A
    /// connection already disconnecting or gone is left as it is.
    pub fn cm_disconnect_nowait(&self, id: CmId) -> Result<(), Error> {
        let shared = self.shared();
        {
            let mut core = shared.core();
            let now = shared.now();
            match core.dev.cm_state(id) {
                Some(CmState::Established) | Some(CmState::DreqSent) => {
                    core.dev.cm_disconnect(now, id)?
                }
                None => return Ok(()),
                Some(_) => return Err(Error::InvalidArgument("not connected")),
            }
        }
        kick(shared);
        Ok(())
    }

    /// `rdma_destroy_id` of a connection: one not yet established is
    /// given up (REJ to the peer; a request received is refused), an
    /// established one is disconnected (DREQ). Its later events still
    /// reach the sink, which drops what it no longer knows.
    pub fn cm_release(&self, id: CmId) {
        let shared = self.shared();
        {
            let mut core = shared.core();
            let now = shared.now();
            match core.dev.cm_state(id) {
                Some(CmState::Established) => {
                    let _ = core.dev.cm_disconnect(now, id);
                }
                Some(_) => core.dev.cm_abandon(id),
                None => return,
            }
        }
        kick(shared);
    }

    /// The state of a connection in the CM (`None` once it is gone).
    pub fn cm_state(&self, id: CmId) -> Option<CmState> {
        self.shared().core_quiet().dev.cm_state(id)
    }

    /// `rdma_connect` on an id without a QP: the REQ names `qpn`, a QP the
    /// program manages (the CM never modifies it). [`CmEvent::ConnectResponse`]
    /// follows the REP; the program then brings the QP up
    /// ([`Context::cm_qp_attr`]) and calls [`Context::cm_establish`].
    pub fn cm_connect_manual_nowait(
        &self,
        qpn: Qpn,
        srq: bool,
        peer: IpAddr,
        port: u16,
        param: &ConnParam,
    ) -> Result<CmId, Error> {
        let shared = self.shared();
        let id = {
            let mut core = shared.core();
            let now = shared.now();
            core.dev
                .cm_connect_manual(now, qpn, srq, peer, port, param)?
        };
        kick(shared);
        Ok(id)
    }

    /// `rdma_accept` on an id without a QP: the REP names `qpn`, which the
    /// program brought up itself ([`Context::cm_qp_attr`]).
    pub fn cm_accept_manual_nowait(
        &self,
        id: CmId,
        qpn: Qpn,
        srq: bool,
        param: &ConnParam,
    ) -> Result<(), Error> {
        let shared = self.shared();
        {
            let mut core = shared.core();
            let now = shared.now();
            core.dev.cm_accept_manual(now, id, qpn, srq, param)?;
        }
        kick(shared);
        Ok(())
    }

    /// `rdma_establish`: sends the RTU of a connection whose program
    /// brought its QP up after [`CmEvent::ConnectResponse`].
    pub fn cm_establish(&self, id: CmId) -> Result<(), Error> {
        self.shared().core().dev.cm_establish(id)?;
        kick(self.shared());
        Ok(())
    }

    /// `rdma_init_qp_attr` for RTR or RTS of a program-managed QP.
    pub fn cm_qp_attr(&self, id: CmId, state: QpState) -> Result<(QpAttr, QpAttrMask), Error> {
        Ok(self.shared().core_quiet().dev.cm_qp_attr(id, state)?)
    }
}
