//! The engine's CM events become `rdma_cm_event`s on the channel of the
//! id they concern.
//!
//! Each context that librdmacm uses has a [`Table`] mapping the engine's
//! connections and listeners to ids; the engine hands every CM event to
//! a sink (`roce_verbs::Context::set_cm_sink`) that looks the id up here,
//! under the table's lock, on the thread that collected it and while the
//! engine is locked. So the library never calls into the engine while it
//! holds a table (the sink would wait for it with the engine locked): an
//! operation starts the engine first, then registers the connection it
//! got. An event that comes before its registration waits in `early`
//! and is delivered by [`Table::register`].

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use roce_verbs::{CmEvent, CmId, ConnRequest, ListenId, UdRequest};

use super::channel::Event;
use super::{Channel, Id, State};
use crate::abi::*;
use cabi::conv::gid_of;

/// Private data sizes the kernel reports for each message (after
/// rdma_cm's 36-byte header where the message has one).
const REQ_PRIVATE: usize = 92 - 36;
const REP_PRIVATE: usize = 196;
const REJ_PRIVATE: usize = 148;
const SIDR_REQ_PRIVATE: usize = 216 - 36;

/// Events kept for connections not registered yet; beyond it the oldest
/// go (they belong to connections the library let go of).
const MAX_EARLY: usize = 256;

/// An id pointer in a table.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) struct IdRef(pub(crate) *const Id);
// SAFETY: an id is removed from every table (under its lock) before it
// is freed, and only used under that lock.
unsafe impl Send for IdRef {}

/// One context's map from the engine's CM to ids.
pub(crate) struct Table {
    /// The context (`verbs` of the ids its requests create).
    ctx: *mut ibv_context,
    conns: HashMap<CmId, IdRef>,
    listeners: HashMap<ListenId, IdRef>,
    early: Vec<CmEvent>,
}

// SAFETY: `ctx` is a context kept open for the process; ids as `IdRef`.
unsafe impl Send for Table {}

impl Table {
    /// The empty table of the context `ctx`.
    pub(crate) fn new(ctx: *mut ibv_context) -> Table {
        Table {
            ctx,
            conns: HashMap::new(),
            listeners: HashMap::new(),
            early: Vec::new(),
        }
    }

    /// A connection of `id` (its engine id `conn`): events already
    /// waiting for it are delivered now.
    pub(crate) fn register(&mut self, conn: CmId, id: &Id) {
        self.conns.insert(conn, IdRef(id));
        let (mine, rest): (Vec<CmEvent>, Vec<CmEvent>) = std::mem::take(&mut self.early)
            .into_iter()
            .partition(|e| e.id() == conn);
        self.early = rest;
        for e in mine {
            self.handle(e);
        }
    }

    /// A listener of `id`.
    pub(crate) fn register_listener(&mut self, l: ListenId, id: &Id) {
        self.listeners.insert(l, IdRef(id));
    }

    /// Forgets everything that names `id` (it is being destroyed).
    pub(crate) fn forget(&mut self, id: &Id) {
        let p = IdRef(id);
        self.conns.retain(|_, v| *v != p);
        self.listeners.retain(|_, v| *v != p);
    }

    /// The engine's connections the table maps.
    pub(crate) fn conn_ids(&self) -> Vec<CmId> {
        self.conns.keys().copied().collect()
    }

    /// Forgets one connection (its outcome was delivered).
    pub(crate) fn forget_conn(&mut self, conn: CmId) {
        self.conns.remove(&conn);
    }

    pub(crate) fn handle(&mut self, e: CmEvent) {
        match e {
            CmEvent::ConnectRequest(r) => self.request(r),
            CmEvent::UdRequest(r) => self.ud_request(r),
            other => {
                let Some(&IdRef(p)) = self.conns.get(&other.id()) else {
                    if self.early.len() >= MAX_EARLY {
                        self.early.remove(0);
                    }
                    self.early.push(other);
                    return;
                };
                // SAFETY: registered ids are alive (forgotten before freed).
                let id = unsafe { &*p };
                let over = !matches!(
                    other,
                    CmEvent::Established { .. } | CmEvent::ConnectResponse { .. }
                );
                if over {
                    self.conns.remove(&other.id());
                }
                conn_event(id, other);
            }
        }
    }

    /// A new id for request `conn` on listener `l`, registered under
    /// `conn` and owned by the program from its CONNECT_REQUEST on; and
    /// the event to fill, already naming both ids (`None`: no such
    /// listener, or no channel could be made). The caller pushes the event
    /// to the listener's channel, which comes with it.
    fn adopt(
        &mut self,
        l: ListenId,
        conn: CmId,
        local: IpAddr,
        peer: SocketAddr,
    ) -> Option<(&'static Id, Box<Event>, Arc<Channel>)> {
        let &IdRef(p) = self.listeners.get(&l)?;
        // SAFETY: registered ids are alive.
        let listener = unsafe { &*p };
        let (to, sync, port, ps, qp_type, context) = {
            let st = listener.st();
            // SAFETY: the listener's C view; `ps` and `qp_type` are not
            // the program's to write, `context` is read as rdma-core
            // reads it (a request's id inherits it).
            let c = unsafe { &*listener.c() };
            let port = st.local.map_or(0, |a| a.port());
            (
                st.channel.clone(),
                listener.is_sync(),
                port,
                c.ps,
                c.qp_type,
                c.context,
            )
        };
        // A synchronous listener's requests get a channel of their own
        // (rdma-core migrates them), the event still goes to the
        // listener's.
        let channel = if sync {
            Channel::new().ok()?
        } else {
            to.clone()
        };
        let local = SocketAddr::new(local, port);
        let id = Id::new(self.ctx, channel, sync, ps, qp_type, context);
        {
            let mut st = id.st();
            st.state = State::Requested;
            st.local = Some(local);
            st.peer = Some(peer);
            st.conn = Some(conn);
        }
        super::route::set_route(&id, local, peer);
        // SAFETY: a fresh id's C view.
        unsafe { (*id.c()).port_num = 1 };
        // The program frees it (rdma_destroy_id); until then the table
        // reaches it through `conns`, forgotten before it is freed.
        let id: &'static Id = Box::leak(id);
        self.conns.insert(conn, IdRef(id));
        let mut ev = Event::new(id.c(), event::CONNECT_REQUEST, 0);
        ev.c.listen_id = listener.c();
        Some((id, ev, to))
    }

    fn request(&mut self, r: ConnRequest) {
        let peer = SocketAddr::new(r.peer, r.peer_port);
        let Some((id, mut ev, to)) = self.adopt(r.listen, r.id, r.local, peer) else {
            return;
        };
        // Our view: we may issue what they accept, accept what they issue.
        id.st().depths = (r.responder_resources, r.initiator_depth);
        ev.set_conn(
            &r.private_data,
            REQ_PRIVATE,
            rdma_conn_param {
                responder_resources: r.initiator_depth,
                initiator_depth: r.responder_resources,
                rnr_retry_count: 7,
                qp_num: r.remote_qpn.value(),
                ..zero_conn()
            },
        );
        to.push(ev);
    }

    fn ud_request(&mut self, r: UdRequest) {
        let peer = SocketAddr::new(r.peer, r.peer_port);
        let Some((_, mut ev, to)) = self.adopt(r.listen, r.id, r.local, peer) else {
            return;
        };
        ev.set_ud(&r.private_data, SIDR_REQ_PRIVATE, ud_param(r.peer, 0, 0));
        to.push(ev);
    }
}

/// The UD parameters of a peer: an address vector to it, its QP and
/// Q_Key.
pub(crate) fn ud_param(peer: IpAddr, qpn: u32, qkey: u32) -> rdma_ud_param {
    rdma_ud_param {
        private_data: std::ptr::null(),
        private_data_len: 0,
        ah_attr: ibv_ah_attr {
            grh: ibv_global_route {
                dgid: gid_of(peer),
                flow_label: 0,
                sgid_index: 0,
                hop_limit: 64,
                traffic_class: 0,
            },
            dlid: 0,
            sl: 0,
            src_path_bits: 0,
            static_rate: 0,
            is_global: 1,
            port_num: 1,
        },
        qp_num: qpn,
        qkey,
    }
}

/// The event of an established, refused or closed connection of `id`.
fn conn_event(id: &Id, e: CmEvent) {
    let mut st = id.st();
    let peer = st.peer.map(|a| a.ip());
    let ev = match e {
        CmEvent::Established { private_data, .. } => {
            st.state = State::Connected;
            rep_event(id, event::ESTABLISHED, st.depths, &private_data)
        }
        // The program brings its own QP up, then rdma_establish.
        CmEvent::ConnectResponse { private_data, .. } => {
            rep_event(id, event::CONNECT_RESPONSE, st.depths, &private_data)
        }
        CmEvent::UdResolved { qpn, qkey, .. } => {
            st.state = State::Connected;
            st.conn = None;
            let mut ev = Event::new(id.c(), event::ESTABLISHED, 0);
            let peer = peer.unwrap_or(IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED));
            ev.set_ud(&[], 0, ud_param(peer, qpn.value(), qkey));
            ev
        }
        CmEvent::Rejected {
            reason,
            private_data,
            ..
        } => {
            st.state = State::Closed;
            st.conn = None;
            // A refused service resolution (SIDR_REP status) is
            // UNREACHABLE with the status, as the kernel reports it.
            // SAFETY: the id's C view; `ps` is not the program's to write.
            let ud = unsafe { (*id.c()).ps } == ps::UDP;
            let (kind, status) = if ud {
                (event::UNREACHABLE, reason as i32)
            } else {
                (event::REJECTED, reason as i32)
            };
            let mut ev = Event::new(id.c(), kind, status);
            let full = if private_data.is_empty() {
                0
            } else {
                REJ_PRIVATE
            };
            ev.set_conn(&private_data, full, zero_conn());
            ev
        }
        CmEvent::Unreachable { .. } => {
            st.state = State::Closed;
            st.conn = None;
            Event::new(id.c(), event::UNREACHABLE, -libc::ETIMEDOUT)
        }
        CmEvent::Disconnected { .. } => {
            st.state = State::Closed;
            st.conn = None;
            Event::new(id.c(), event::DISCONNECTED, 0)
        }
        CmEvent::ConnectRequest(_) | CmEvent::UdRequest(_) => return,
    };
    let ch = st.channel.clone();
    drop(st);
    ch.push(ev);
}

/// ESTABLISHED or CONNECT_RESPONSE: the REP's private data (none on the
/// passive side) and the depths the connection settled on.
fn rep_event(id: &Id, kind: u32, (init, resp): (u8, u8), private_data: &[u8]) -> Box<Event> {
    let mut ev = Event::new(id.c(), kind, 0);
    let full = if private_data.is_empty() {
        0
    } else {
        REP_PRIVATE
    };
    ev.set_conn(
        private_data,
        full,
        rdma_conn_param {
            responder_resources: resp,
            initiator_depth: init,
            retry_count: 7,
            rnr_retry_count: 7,
            ..zero_conn()
        },
    );
    ev
}

/// Connection parameters with nothing in them.
pub(crate) fn zero_conn() -> rdma_conn_param {
    rdma_conn_param {
        private_data: std::ptr::null(),
        private_data_len: 0,
        responder_resources: 0,
        initiator_depth: 0,
        flow_control: 0,
        retry_count: 0,
        rnr_retry_count: 0,
        srq: 0,
        qp_num: 0,
    }
}
