//! Connection management in the shape of librdmacm: listen on a port,
//! take a connection request and accept or reject it, connect a QP to a
//! listening peer, disconnect. The engine speaks IB CM over QP1 with
//! rdma_cm's addressing (see [`roce_core::cm`]), so the peer may be
//! librdmacm on Linux (`rping`, `ib_write_bw -R`, ...).
//!
//! The calls block until the CM answers (or `timeout` passes); the QP's
//! transitions to RTR and RTS are made by the engine when the REP (active
//! side) or the accept (passive side) happens, as the kernel does for
//! rdma_cm.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use roce_core::cm::{CmEvent, CmId, ConnParam, ConnRequest, ListenId, UdRequest};
use roce_core::{Owner, QpAttr, QpAttrMask, QpState, QpType, Qpn};

use crate::error::Error;
use crate::progress::kick;
use crate::state::owners;
use crate::state::{lock, Shared};
use crate::{Context, QueuePair};

/// Why a connection attempt or wait failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CmError {
    /// The verbs layer refused a call.
    Verbs(Error),
    /// The peer rejected the connection (`reason` 8: nobody listens on the
    /// port, 28: the application refused).
    Rejected {
        /// IB CM REJ reason.
        reason: u16,
        /// The REJ's private data.
        private_data: Vec<u8>,
    },
    /// The peer never answered.
    Unreachable,
    /// Nothing happened within the caller's timeout.
    TimedOut,
}

impl std::fmt::Display for CmError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CmError::Verbs(e) => write!(f, "{e}"),
            CmError::Rejected { reason: 8, .. } => {
                f.write_str("connection refused (no listener on that port)")
            }
            CmError::Rejected { reason, .. } => write!(f, "connection rejected (reason {reason})"),
            CmError::Unreachable => f.write_str("peer unreachable (no answer to the CM)"),
            CmError::TimedOut => f.write_str("timed out"),
        }
    }
}

impl std::error::Error for CmError {}

impl From<Error> for CmError {
    fn from(e: Error) -> CmError {
        CmError::Verbs(e)
    }
}

impl From<roce_core::VerbsError> for CmError {
    fn from(e: roce_core::VerbsError) -> CmError {
        CmError::Verbs(Error::Verbs(e))
    }
}

/// Waits for the first CM event `want` selects, taking it off the queue.
fn wait_event(
    shared: &Shared,
    timeout: Duration,
    mut want: impl FnMut(&CmEvent) -> bool,
) -> Option<CmEvent> {
    // A timeout too long to add to the clock waits for good.
    let end = Instant::now().checked_add(timeout);
    let mut q = lock(&shared.events.cm);
    loop {
        if let Some(i) = q.iter().position(&mut want) {
            return q.remove(i);
        }
        let left = match end {
            Some(end) => end.checked_duration_since(Instant::now())?,
            None => Duration::MAX,
        };
        // The progress thread delivers events; make sure it is awake.
        shared.unpark();
        q = shared
            .events
            .cm_cv
            .wait_timeout(q, left.min(Duration::from_millis(10)))
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .0;
    }
}

/// The application lets go of connection `id`: its queued events go, and
/// later ones are not queued (`core` is the engine, locked). With
/// `abandon`, a connection not yet established is given up in the engine
/// too (REJ, see `Device::cm_abandon`).
fn forget_connection(shared: &Shared, core: &mut crate::state::Core, id: CmId, abandon: bool) {
    if abandon {
        core.dev.cm_abandon(id);
    }
    if core.dev.cm_state(id).is_some() && !core.cm_dropped.contains(&id) {
        core.cm_dropped.push(id);
    }
    lock(&shared.events.cm).retain(|e| e.id() != id);
}

/// After a wait for `id` timed out: gives the attempt up, unless it got
/// established meanwhile (its event is then on its way: taken here).
fn give_up(shared: &Shared, id: CmId) -> Option<CmEvent> {
    {
        let mut core = shared.core();
        if core.dev.cm_state(id) != Some(roce_core::cm::CmState::Established) {
            forget_connection(shared, &mut core, id, true);
            drop(core);
            shared.unpark();
            return None;
        }
    }
    wait_event(shared, Duration::from_secs(1), |e| e.id() == id)
}

/// Brings a fresh RC QP to INIT (the state the CM needs) if it is in
/// RESET.
pub(crate) fn to_init(qp: &QueuePair) -> Result<(), Error> {
    if qp.qp_type() != QpType::Rc {
        return Err(Error::InvalidArgument("rdma_cm connects RC QPs"));
    }
    if qp.state() == QpState::Reset {
        let a = QpAttr {
            qp_state: QpState::Init,
            port_num: 1,
            qp_access_flags: roce_core::Access::LOCAL_WRITE
                | roce_core::Access::REMOTE_WRITE
                | roce_core::Access::REMOTE_READ
                | roce_core::Access::REMOTE_ATOMIC,
            ..QpAttr::default()
        };
        qp.modify(
            &a,
            QpAttrMask::required(QpType::Rc, QpState::Reset, QpState::Init),
        )?;
    }
    Ok(())
}

/// A listening port (`rdma_listen`); stops listening when dropped.
#[derive(Debug)]
pub struct CmListener {
    ctx: Context,
    id: ListenId,
}

impl Context {
    /// `rdma_bind_addr` + `rdma_listen` on `port` (rdma_cm's TCP port
    /// space, all local addresses).
    pub fn cm_listen(&self, port: u16) -> Result<CmListener, Error> {
        let id = self.listen_with(|dev| dev.cm_listen(port))?;
        Ok(CmListener {
            ctx: self.clone(),
            id,
        })
    }

    /// Listens with `listen`, the service ID claimed host-wide
    /// (docs/host.md): another process's listener on it is
    /// `Busy`, as a second listener of this process is.
    pub(crate) fn listen_with(
        &self,
        listen: impl FnOnce(&mut roce_core::Device) -> Result<ListenId, roce_core::VerbsError>,
    ) -> Result<ListenId, Error> {
        let shared = self.shared();
        let mut io = lock(&shared.io);
        let mut core = shared.core();
        owners::settle(&mut io, &mut core, &shared.addrs);
        let id = listen(&mut core.dev)?;
        let service = Owner::Service(id.0);
        if !owners::claim(&mut *io.backend, &shared.addrs, service) {
            let _ = core.dev.cm_stop_listen(id);
            return Err(Error::Verbs(roce_core::VerbsError::Busy));
        }
        Ok(id)
    }

    /// Stops listener `id`, its service ID released host-wide.
    pub(crate) fn unlisten_in(core: &mut crate::state::Core, id: ListenId) {
        let _ = core.dev.cm_stop_listen(id);
        core.retired.release(Owner::Service(id.0));
    }
}

impl Context {
    /// `rdma_listen` on `port` in rdma_cm's UDP port space: UD service
    /// resolution requests (SIDR) arrive through
    /// [`CmListener::get_ud_request`].
    pub fn cm_listen_ud(&self, port: u16) -> Result<CmListener, Error> {
        let id = self.listen_with(|dev| dev.cm_listen_ud(port))?;
        Ok(CmListener {
            ctx: self.clone(),
            id,
        })
    }

    /// `rdma_connect` on a UD id (`RDMA_PS_UDP`): asks the service at
    /// `peer:port` for its QPN and Q_Key (SIDR) and returns them.
    pub fn cm_resolve_ud(
        &self,
        peer: IpAddr,
        port: u16,
        private_data: &[u8],
        timeout: Duration,
    ) -> Result<(Qpn, u32), CmError> {
        let shared = self.shared().clone();
        let id = {
            let mut core = shared.core();
            let now = shared.now();
            core.dev.cm_resolve_ud(now, peer, port, private_data)?
        };
        kick(&shared);
        match wait_event(&shared, timeout, |e| e.id() == id).ok_or(CmError::TimedOut)? {
            CmEvent::UdResolved { qpn, qkey, .. } => Ok((qpn, qkey)),
            CmEvent::Rejected {
                reason,
                private_data,
                ..
            } => Err(CmError::Rejected {
                reason,
                private_data,
            }),
            _ => Err(CmError::Unreachable),
        }
    }
}

/// A UD service resolution request to answer with a QP (or refuse);
/// refused when dropped unanswered.
#[derive(Debug)]
pub struct UdCmRequest {
    ctx: Context,
    req: UdRequest,
    answered: bool,
}

impl UdCmRequest {
    /// Who asks, and their private data.
    pub fn info(&self) -> &UdRequest {
        &self.req
    }

    /// `rdma_accept`: tells the requester to send to `qp` with `qkey`.
    pub fn accept(mut self, qp: &QueuePair, qkey: u32) -> Result<(), CmError> {
        if qp.qp_type() != QpType::Ud {
            return Err(Error::InvalidArgument("a UD service answers with a UD QP").into());
        }
        let shared = self.ctx.shared().clone();
        shared
            .core()
            .dev
            .cm_accept_ud(self.req.id, qp.qpn(), qkey)?;
        self.answered = true;
        kick(&shared);
        Ok(())
    }

    /// `rdma_reject` (SIDR_REP status 2).
    pub fn reject(mut self) -> Result<(), CmError> {
        let shared = self.ctx.shared().clone();
        shared.core().dev.cm_reject_ud(self.req.id)?;
        self.answered = true;
        kick(&shared);
        Ok(())
    }
}

impl Drop for UdCmRequest {
    fn drop(&mut self) {
        if !self.answered {
            let shared = self.ctx.shared();
            let _ = shared.core().dev.cm_reject_ud(self.req.id);
            shared.unpark();
        }
    }
}

impl CmListener {
    /// Waits for the next UD service resolution request (listeners made
    /// with [`Context::cm_listen_ud`]).
    pub fn get_ud_request(&self, timeout: Duration) -> Result<UdCmRequest, CmError> {
        let id = self.id;
        let Some(CmEvent::UdRequest(req)) = wait_event(
            self.ctx.shared(),
            timeout,
            |e| matches!(e, CmEvent::UdRequest(r) if r.listen == id),
        ) else {
            return Err(CmError::TimedOut);
        };
        Ok(UdCmRequest {
            ctx: self.ctx.clone(),
            req,
            answered: false,
        })
    }

    /// The port.
    pub fn port(&self) -> u16 {
        self.id.port()
    }

    /// Waits for the next connection request (`RDMA_CM_EVENT_CONNECT_REQUEST`).
    pub fn get_request(&self, timeout: Duration) -> Result<CmRequest, CmError> {
        let id = self.id;
        let Some(CmEvent::ConnectRequest(req)) = wait_event(
            self.ctx.shared(),
            timeout,
            |e| matches!(e, CmEvent::ConnectRequest(r) if r.listen == id),
        ) else {
            return Err(CmError::TimedOut);
        };
        Ok(CmRequest {
            ctx: self.ctx.clone(),
            req,
            answered: false,
        })
    }
}

impl Drop for CmListener {
    /// `rdma_destroy_id` of a listener: no new requests, and those it
    /// received and nobody took are rejected (the peers hear at once
    /// instead of waiting out their timeouts); a request already taken
    /// stays the application's, as in rdma_cm.
    fn drop(&mut self) {
        let shared = self.ctx.shared();
        let mut core = shared.core();
        Context::unlisten_in(&mut core, self.id);
        // Every request not yet handed out has its event queued now (the
        // engine's pending ones included); those handed out (a CmRequest
        // the application holds) are the application's to answer.
        crate::progress::collect_cm_events(&mut core, shared);
        let id = self.id;
        let queued: Vec<CmId> = lock(&shared.events.cm)
            .iter()
            .filter_map(|e| match e {
                CmEvent::ConnectRequest(r) if r.listen == id => Some(r.id),
                CmEvent::UdRequest(r) if r.listen == id => Some(r.id),
                _ => None,
            })
            .collect();
        for c in queued {
            forget_connection(shared, &mut core, c, true);
        }
        drop(core);
        shared.unpark();
    }
}

/// A connection request to accept or reject; rejected when dropped
/// unanswered.
#[derive(Debug)]
pub struct CmRequest {
    ctx: Context,
    req: ConnRequest,
    answered: bool,
}

impl CmRequest {
    /// What the active side asked for (its address, QPN, READ/atomic
    /// depths and private data).
    pub fn info(&self) -> &ConnRequest {
        &self.req
    }

    /// `rdma_accept`: brings `qp` (RESET or INIT) to RTS against the
    /// requester and answers with a REP; waits for the RTU.
    pub fn accept(
        self,
        qp: &QueuePair,
        param: &ConnParam,
        timeout: Duration,
    ) -> Result<CmConnection, CmError> {
        let mut a = self.accept_nowait(qp, param)?;
        if let Some(r) = a.wait(timeout) {
            return r;
        }
        a.done = true;
        let e = give_up(&a.shared, a.id).ok_or(CmError::TimedOut)?;
        connection_from(e, qp, a.shared.clone())
    }

    /// `rdma_accept` without waiting: brings `qp` (RESET or INIT) to RTS
    /// against the requester and sends the REP; the RTU is waited for
    /// with [`CmAccepting::wait`]. A server may so have several requests
    /// accepted at once, as with rdma_cm's event channel, and take
    /// whichever connects: a request whose RTU never comes (a forged
    /// one, docs/security.md) does not hold the others up.
    pub fn accept_nowait(
        mut self,
        qp: &QueuePair,
        param: &ConnParam,
    ) -> Result<CmAccepting, CmError> {
        if !qp.pd().context().same(&self.ctx) {
            return Err(Error::WrongContext.into());
        }
        to_init(qp)?;
        let shared = self.ctx.shared().clone();
        let id = self.req.id;
        {
            let mut core = shared.core();
            let now = shared.now();
            core.dev.cm_accept(now, id, qp.qpn(), param)?;
        }
        self.answered = true;
        kick(&shared);
        Ok(CmAccepting {
            shared,
            id,
            qp: qp.clone(),
            done: false,
        })
    }

    /// `rdma_reject` with `private_data` (REJ reason 28).
    pub fn reject(mut self, private_data: &[u8]) -> Result<(), CmError> {
        let shared = self.ctx.shared().clone();
        shared.core().dev.cm_reject(self.req.id, private_data)?;
        self.answered = true;
        kick(&shared);
        Ok(())
    }
}

impl Drop for CmRequest {
    fn drop(&mut self) {
        if !self.answered {
            let shared = self.ctx.shared();
            let _ = shared.core().dev.cm_reject(self.req.id, &[]);
            shared.unpark();
        }
    }
}

/// A request accepted with [`CmRequest::accept_nowait`], its REP sent,
/// waiting for the RTU. Dropped before it connected, it is given up (a
/// REJ to the requester, the QP to ERR).
#[derive(Debug)]
pub struct CmAccepting {
    shared: Arc<Shared>,
    id: CmId,
    qp: QueuePair,
    /// Its outcome was taken by [`CmAccepting::wait`].
    done: bool,
}

impl CmAccepting {
    /// Waits up to `timeout` (zero: only looks) for the requester's RTU:
    /// `None` while it has not come, else the connection, or why there is
    /// none (the requester refused, or never answered the REP's resends).
    /// After an outcome, later calls return `None`.
    pub fn wait(&mut self, timeout: Duration) -> Option<Result<CmConnection, CmError>> {
        if self.done {
            return None;
        }
        let id = self.id;
        let e = wait_event(&self.shared, timeout, |e| e.id() == id)?;
        self.done = true;
        Some(connection_from(e, &self.qp, self.shared.clone()))
    }
}

impl Drop for CmAccepting {
    fn drop(&mut self) {
        if !self.done {
            let mut core = self.shared.core();
            // Connected meanwhile: nobody will use it, disconnect.
            if core.dev.cm_state(self.id) == Some(roce_core::cm::CmState::Established) {
                let now = self.shared.now();
                let _ = core.dev.cm_disconnect(now, self.id);
            }
            forget_connection(&self.shared, &mut core, self.id, true);
            drop(core);
            self.shared.unpark();
        }
    }
}

fn connection_from(
    e: CmEvent,
    qp: &QueuePair,
    shared: Arc<Shared>,
) -> Result<CmConnection, CmError> {
    match e {
        CmEvent::Established { id, private_data } => Ok(CmConnection {
            shared,
            id,
            qp: qp.clone(),
            private_data,
        }),
        CmEvent::Rejected {
            reason,
            private_data,
            ..
        } => Err(CmError::Rejected {
            reason,
            private_data,
        }),
        _ => Err(CmError::Unreachable),
    }
}

impl QueuePair {
    /// `rdma_connect` to `port` at `peer`: sends the REQ for this RC QP
    /// (RESET or INIT) and waits until the connection is established
    /// (the QP is in RTS) or refused.
    pub fn cm_connect(
        &self,
        peer: IpAddr,
        port: u16,
        param: &ConnParam,
        timeout: Duration,
    ) -> Result<CmConnection, CmError> {
        to_init(self)?;
        let shared = self.pd().context().shared().clone();
        let id = {
            let mut core = shared.core();
            let now = shared.now();
            core.dev.cm_connect(now, self.qpn(), peer, port, param)?
        };
        kick(&shared);
        let e = wait_event(&shared, timeout, |e| e.id() == id)
            .or_else(|| give_up(&shared, id))
            .ok_or(CmError::TimedOut)?;
        connection_from(e, self, shared)
    }
}

/// An established connection. Dropping it disconnects (without waiting).
#[derive(Debug)]
pub struct CmConnection {
    shared: Arc<Shared>,
    id: CmId,
    qp: QueuePair,
    private_data: Vec<u8>,
}

impl CmConnection {
    /// The connected QP.
    pub fn qp(&self) -> &QueuePair {
        &self.qp
    }

    /// The peer's private data from the REP (active side; empty on the
    /// passive side).
    pub fn private_data(&self) -> &[u8] {
        &self.private_data
    }

    /// True while the CM has not seen a disconnect.
    pub fn is_connected(&self) -> bool {
        let gone = lock(&self.shared.events.cm)
            .iter()
            .any(|e| e.id() == self.id && matches!(e, CmEvent::Disconnected { .. }));
        !gone && self.shared.core_quiet().dev.cm_state(self.id).is_some()
    }

    /// Waits for the peer to disconnect (`RDMA_CM_EVENT_DISCONNECTED`);
    /// false on timeout.
    pub fn wait_disconnect(&self, timeout: Duration) -> bool {
        let id = self.id;
        wait_event(&self.shared, timeout, |e| {
            e.id() == id && matches!(e, CmEvent::Disconnected { .. })
        })
        .is_some()
    }

    /// `rdma_disconnect`: the QP goes to ERR (outstanding work requests
    /// complete with WR_FLUSH_ERR), a DREQ goes out; waits for the DREP.
    pub fn disconnect(self, timeout: Duration) -> Result<(), CmError> {
        let id = self.id;
        {
            let mut core = self.shared.core();
            let now = self.shared.now();
            if core.dev.cm_state(id).is_none() {
                return Ok(());
            }
            core.dev.cm_disconnect(now, id)?;
        }
        kick(&self.shared);
        wait_event(&self.shared, timeout, |e| {
            e.id() == id && matches!(e, CmEvent::Disconnected { .. })
        })
        .map(|_| ())
        .ok_or(CmError::TimedOut)
    }
}

impl Drop for CmConnection {
    fn drop(&mut self) {
        let mut core = self.shared.core();
        let now = self.shared.now();
        let _ = core.dev.cm_disconnect(now, self.id);
        // Nobody will wait for its Disconnected.
        forget_connection(&self.shared, &mut core, self.id, false);
        drop(core);
        self.shared.unpark();
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use crate::*;

    /// Connections closed by dropping their handles leave no events in
    /// the context's CM queue (their Disconnected used to stay for good).
    #[test]
    fn dropped_connections_leave_no_events_queued() {
        let fabric = roce_io::Fabric::new();
        let a = Context::open_fabric(&fabric, "10.0.0.1".parse().unwrap()).unwrap();
        let b = Context::open_fabric(&fabric, "10.0.0.2".parse().unwrap()).unwrap();
        let listener = b.cm_listen(7000).unwrap();
        let wait = Duration::from_secs(5);
        for _ in 0..10 {
            let (pa, pb) = (a.alloc_pd(), b.alloc_pd());
            let (ca, cb) = (a.create_cq(4, None).unwrap(), b.create_cq(4, None).unwrap());
            let qa = pa
                .create_qp(&QpInitAttr::new(QpType::Rc, &ca, &ca))
                .unwrap();
            let qb = pb
                .create_qp(&QpInitAttr::new(QpType::Rc, &cb, &cb))
                .unwrap();
            let server = {
                let l = &listener;
                std::thread::scope(|s| {
                    let h = s.spawn(|| {
                        l.get_request(wait)
                            .unwrap()
                            .accept(&qb, &ConnParam::default(), wait)
                            .unwrap()
                    });
                    let ca = qa
                        .cm_connect(
                            "10.0.0.2".parse().unwrap(),
                            7000,
                            &ConnParam::default(),
                            wait,
                        )
                        .unwrap();
                    (ca, h.join().unwrap())
                })
            };
            drop(server); // both sides drop their connection
            std::thread::sleep(Duration::from_millis(50));
        }
        let na = crate::state::lock(&a.shared().events.cm).len();
        let nb = crate::state::lock(&b.shared().events.cm).len();
        assert_eq!((na, nb), (0, 0));
        // Nor any id kept for them, once the engine forgot the connections.
        std::thread::sleep(Duration::from_millis(200));
        crate::progress::flush(a.shared());
        assert!(a.shared().core().cm_dropped.len() <= 1);
    }
}
