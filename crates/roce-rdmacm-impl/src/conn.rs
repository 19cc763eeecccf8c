//! Connections: `rdma_listen`, `rdma_get_request`, `rdma_connect`,
//! `rdma_accept`, `rdma_reject`, `rdma_disconnect`, `rdma_establish`,
//! `rdma_notify`, `rdma_init_qp_attr`.
//!
//! The engine's CM does what the kernel does for rdma_cm: it sends and
//! resends the MADs and moves an id's QP to RTR and RTS (on the REP for
//! the active side, on `rdma_accept` for the passive side) and to ERR on
//! a disconnect. The outcome comes back as an event (`dispatch`); a
//! synchronous id waits for it here.

use std::net::SocketAddr;
use std::os::raw::{c_int, c_void};

use roce_verbs::{ConnParam, ListenId, PortSpace, QpState};

use super::contexts::{bound_context, listen_contexts};
use super::id::{bind, complete};
use super::{lock, rc, Id, State};
use crate::abi::*;
use crate::ffi::{arg_mut, Res};
use crate::verbs;

/// The largest READ/atomic depth this device takes on a connection.
const MAX_DEPTH: u8 = 16;

/// The engine's parameters from a program's `rdma_conn_param` (NULL:
/// rdma-core's defaults), with the id's ACK timeout option.
///
/// # Safety
/// `p` must be NULL or point to a valid `rdma_conn_param` whose private
/// data pointer covers its length.
unsafe fn param_of(p: *const rdma_conn_param, ack_timeout: u8) -> ConnParam {
    let mut out = ConnParam {
        responder_resources: MAX_DEPTH,
        initiator_depth: MAX_DEPTH,
        ack_timeout,
        ..ConnParam::default()
    };
    // SAFETY: the caller's contract.
    let Some(p) = (unsafe { p.as_ref() }) else {
        return out;
    };
    let depth = |v: u8| {
        if v == u8::MAX {
            MAX_DEPTH
        } else {
            v.min(MAX_DEPTH)
        }
    };
    out.responder_resources = depth(p.responder_resources);
    out.initiator_depth = depth(p.initiator_depth);
    out.retry_count = p.retry_count.min(7);
    out.rnr_retry_count = p.rnr_retry_count.min(7);
    if !p.private_data.is_null() && p.private_data_len > 0 {
        // SAFETY: the caller's contract.
        out.private_data = unsafe {
            std::slice::from_raw_parts(p.private_data.cast::<u8>(), p.private_data_len as usize)
        }
        .to_vec();
    }
    out
}

/// The id's QP, as the engine knows it.
fn qp_of(i: &Id) -> Res<&roce_verbs::QueuePair> {
    // SAFETY: the id's C view; `qp` is NULL or a QP of the verbs library.
    unsafe { verbs::engine_qp((*i.c()).qp) }
}

/// For an RC id without a QP: the QP the program manages itself, as
/// `rdma_conn_param` names it (`qp_num`, `srq`); `None` when the id has
/// a QP. Such a QP is brought up by the program (`rdma_init_qp_attr`),
/// never by the CM.
fn program_qp(i: &Id, param: *const rdma_conn_param) -> Res<Option<(roce_verbs::Qpn, bool)>> {
    // SAFETY: the id's C view.
    if !unsafe { (*i.c()).qp }.is_null() || is_ud(i) {
        return Ok(None);
    }
    // SAFETY: the program's parameters (or NULL).
    let p = unsafe { param.as_ref() }.ok_or(libc::EINVAL)?;
    if p.qp_num == 0 || p.qp_num > 0xff_ffff {
        return Err(libc::EINVAL);
    }
    Ok(Some((roce_verbs::Qpn::new(p.qp_num), p.srq != 0)))
}

fn is_ud(i: &Id) -> bool {
    // SAFETY: the id's C view; `ps` is not the program's to write.
    unsafe { (*i.c()).ps == ps::UDP || (*i.c()).ps == ps::IPOIB }
}

export! {
    /// `rdma_listen`: an unbound id is bound to the wildcard address and
    /// a free port first.
    fn rdma_listen(id: *mut rdma_cm_id, backlog: c_int) -> c_int {
        rc(|| {
            // SAFETY: the program's id.
            let i = unsafe { Id::from_ptr(id)? };
            if i.st().local.is_none() {
                bind(i, SocketAddr::from(([0, 0, 0, 0], 0)))?;
            }
            let (local, state) = {
                let st = i.st();
                (st.local.ok_or(libc::EINVAL)?, st.state)
            };
            if state != State::Idle {
                return Err(libc::EINVAL);
            }
            // SAFETY: the id's C view.
            let ps = unsafe { (*i.c()).ps };
            super::ports::listen(i.c() as usize, ps, local.port())?;
            i.st().reuse = false;
            let ctxs = match bound_context(i)? {
                Some(c) => vec![c],
                None => listen_contexts(local.ip())?,
            };
            let ud = is_ud(i);
            let space = if ud { PortSpace::Udp } else { PortSpace::Tcp };
            let backlog = if backlog <= 0 { 1024 } else { backlog as usize };
            let l = ListenId::for_port(ud, local.port());
            let mut done = Vec::new();
            for c in ctxs {
                // SAFETY: a context this library keeps open.
                let ctx = unsafe { verbs::context(c)? };
                // In the table first: a request may come as soon as the
                // engine listens.
                lock(&ctx.table()).register_listener(l, i);
                match ctx.verbs.cm_listen_nowait(space, local.port(), backlog) {
                    Ok(_) => done.push((c, l)),
                    Err(e) => {
                        lock(&ctx.table()).forget(i);
                        for (c, l) in done {
                            // SAFETY: as above.
                            let ctx = unsafe { verbs::context(c)? };
                            ctx.verbs.cm_unlisten(l);
                            lock(&ctx.table()).forget(i);
                        }
                        return Err(match e {
                            roce_verbs::Error::Verbs(roce_core::VerbsError::Busy) => {
                                libc::EADDRINUSE
                            }
                            e => crate::ffi::errno_of(&e),
                        });
                    }
                }
            }
            crate::config::log!(
                "librdmacm: listening on port {} ({} device(s), {})",
                local.port(),
                done.len(),
                if ud { "UDP port space" } else { "TCP port space" }
            );
            let mut st = i.st();
            st.listens = done;
            st.state = State::Listening;
            Ok(())
        })
    }
}

export! {
    /// `rdma_get_request`: a synchronous listener's next connection
    /// request, as a new id (with a QP if the listener is an endpoint of
    /// `rdma_create_ep` with QP attributes).
    fn rdma_get_request(listen: *mut rdma_cm_id, out: *mut *mut rdma_cm_id) -> c_int {
        rc(|| {
            // SAFETY: the program's id and out pointer.
            let (l, out) = unsafe { (Id::from_ptr(listen)?, arg_mut(out)?) };
            if !l.is_sync() {
                return Err(libc::EINVAL);
            }
            l.ack_held();
            let ch = l.st().channel.clone();
            let e = ch.take()?;
            if e.c.event == event::REJECTED {
                l.hold(e);
                return Err(libc::ECONNREFUSED);
            }
            if e.c.status != 0 || e.c.event != event::CONNECT_REQUEST {
                let err = if e.c.status != 0 { e.c.status.abs() } else { libc::EINVAL };
                l.hold(e);
                return Err(err);
            }
            let child = e.c.id;
            let (attr, pd) = {
                let st = l.st();
                // SAFETY: the listener's C view.
                (st.ep_qp_attr, unsafe { (*l.c()).pd })
            };
            if let Some(mut a) = attr {
                // SAFETY: the new id is a live id of this library.
                super::qp::create_qp(unsafe { Id::from_ptr(child)? }, pd, &mut a)?;
            }
            // SAFETY: the new id is live; its event is the request.
            unsafe { Id::from_ptr(child)? }.hold(e);
            *out = child;
            Ok(())
        })
    }
}

export! {
    /// `rdma_connect`: REQ for an RC id (ESTABLISHED when the REP comes,
    /// the QP then in RTS), service resolution for a UD id (ESTABLISHED
    /// with the peer's QPN and Q_Key).
    fn rdma_connect(id: *mut rdma_cm_id, param: *mut rdma_conn_param) -> c_int {
        rc(|| {
            // SAFETY: the program's id.
            let i = unsafe { Id::from_ptr(id)? };
            let ctx = i.ctx()?;
            let (peer, state, ack) = {
                let st = i.st();
                (st.peer.ok_or(libc::EINVAL)?, st.state, st.ack_timeout)
            };
            if state != State::RouteResolved && state != State::AddrResolved {
                return Err(libc::EINVAL);
            }
            // SAFETY: the program's parameters (or NULL).
            let p = unsafe { param_of(param, ack) };
            crate::config::log!("librdmacm: connecting from {} to {peer}", ctx.local);
            let conn = if is_ud(i) {
                ctx.verbs
                    .cm_resolve_ud_nowait(peer.ip(), peer.port(), &p.private_data)
                    .map_err(crate::ffi::verr)?
            } else if let Some((qpn, srq)) = program_qp(i, param)? {
                i.st().depths = (p.initiator_depth, p.responder_resources);
                ctx.verbs
                    .cm_connect_manual_nowait(qpn, srq, peer.ip(), peer.port(), &p)
                    .map_err(crate::ffi::verr)?
            } else {
                let qp = qp_of(i)?;
                i.st().depths = (p.initiator_depth, p.responder_resources);
                ctx.verbs
                    .cm_connect_nowait(qp, peer.ip(), peer.port(), &p)
                    .map_err(crate::ffi::verr)?
            };
            {
                let mut st = i.st();
                st.conn = Some(conn);
                st.state = State::Connecting;
                if let Some(l) = st.local.as_mut() {
                    l.set_port(conn.source_port());
                }
                let l = st.local;
                drop(st);
                if let Some(l) = l {
                    super::route::set_route(i, l, peer);
                }
            }
            lock(&ctx.table()).register(conn, i);
            complete(i)
        })
    }
}

export! {
    /// `rdma_accept`: RC: the id's QP goes to RTS and the REP leaves
    /// (ESTABLISHED follows the RTU); UD: the requester is told the
    /// id's QP and Q_Key.
    fn rdma_accept(id: *mut rdma_cm_id, param: *mut rdma_conn_param) -> c_int {
        rc(|| {
            // SAFETY: the program's id.
            let i = unsafe { Id::from_ptr(id)? };
            let ctx = i.ctx()?;
            let (conn, state, ack, (init, resp)) = {
                let st = i.st();
                (st.conn.ok_or(libc::EINVAL)?, st.state, st.ack_timeout, st.depths)
            };
            if state != State::Requested {
                return Err(libc::EINVAL);
            }
            // SAFETY: the program's parameters (or NULL).
            let mut p = unsafe { param_of(param, ack) };
            // What the requester offered bounds what we take.
            p.initiator_depth = p.initiator_depth.min(init.max(1));
            p.responder_resources = p.responder_resources.min(resp.max(1));
            if let Some((qpn, srq)) = program_qp(i, param)? {
                i.st().state = State::Connecting;
                ctx.verbs.cm_accept_manual_nowait(conn, qpn, srq, &p).map_err(|e| {
                    i.st().state = State::Requested;
                    crate::ffi::verr(e)
                })?;
                return complete(i);
            }
            let qp = qp_of(i)?;
            if is_ud(i) {
                ctx.verbs
                    .cm_answer_ud(conn, Some((qp, RDMA_UDP_QKEY)))
                    .map_err(crate::ffi::verr)?;
                lock(&ctx.table()).forget_conn(conn);
                let mut st = i.st();
                st.conn = None;
                st.state = State::Connected;
                drop(st);
                if i.is_sync() {
                    i.ack_held();
                }
                return Ok(());
            }
            i.st().depths = (p.initiator_depth, p.responder_resources);
            i.st().state = State::Connecting;
            ctx.verbs.cm_accept_nowait(conn, qp, &p).map_err(|e| {
                i.st().state = State::Requested;
                crate::ffi::verr(e)
            })?;
            complete(i)
        })
    }
}

export! {
    /// `rdma_reject`: REJ (consumer reason) with the private data; a UD
    /// request is refused.
    fn rdma_reject(id: *mut rdma_cm_id, data: *const c_void, len: u8) -> c_int {
        rc(|| reject(id, data, len))
    }
}

export! {
    /// `rdma_reject_ece`: as `rdma_reject` (no ECE on this device).
    fn rdma_reject_ece(id: *mut rdma_cm_id, data: *const c_void, len: u8) -> c_int {
        rc(|| reject(id, data, len))
    }
}

fn reject(id: *mut rdma_cm_id, data: *const c_void, len: u8) -> Res<()> {
    // SAFETY: the program's id.
    let i = unsafe { Id::from_ptr(id)? };
    let ctx = i.ctx()?;
    let conn = {
        let st = i.st();
        if st.state != State::Requested {
            return Err(libc::EINVAL);
        }
        st.conn.ok_or(libc::EINVAL)?
    };
    let pd: &[u8] = if data.is_null() || len == 0 {
        &[]
    } else {
        // SAFETY: the program's buffer of `len` bytes.
        unsafe { std::slice::from_raw_parts(data.cast::<u8>(), len as usize) }
    };
    if is_ud(i) {
        ctx.verbs.cm_answer_ud(conn, None)
    } else {
        ctx.verbs.cm_reject_nowait(conn, pd)
    }
    .map_err(crate::ffi::verr)?;
    lock(&ctx.table()).forget_conn(conn);
    let mut st = i.st();
    st.conn = None;
    st.state = State::Closed;
    Ok(())
}

export! {
    /// `rdma_disconnect`: the QP goes to ERR and a DREQ leaves
    /// (DISCONNECTED follows). A connection already closed by the peer
    /// is left as it is.
    fn rdma_disconnect(id: *mut rdma_cm_id) -> c_int {
        rc(|| {
            // SAFETY: the program's id.
            let i = unsafe { Id::from_ptr(id)? };
            let ctx = i.ctx()?;
            let (conn, state) = {
                let st = i.st();
                (st.conn, st.state)
            };
            match (state, conn) {
                (State::Connected, Some(c)) => {
                    ctx.verbs.cm_disconnect_nowait(c).map_err(crate::ffi::verr)?;
                    complete(i)
                }
                (State::Closed, _) => Ok(()),
                _ => Err(libc::EINVAL),
            }
        })
    }
}

export! {
    /// `rdma_establish`: after CONNECT_RESPONSE (a program-managed QP,
    /// now in RTS), the RTU leaves and the id is connected. An id whose
    /// QP the CM brought up is connected already.
    fn rdma_establish(id: *mut rdma_cm_id) -> c_int {
        rc(|| {
            // SAFETY: the program's id.
            let i = unsafe { Id::from_ptr(id)? };
            let (state, conn) = {
                let st = i.st();
                (st.state, st.conn)
            };
            match (state, conn) {
                (State::Connected, _) => Ok(()),
                (State::Connecting, Some(c)) => {
                    i.ctx()?.verbs.cm_establish(c).map_err(crate::ffi::verr)?;
                    i.st().state = State::Connected;
                    Ok(())
                }
                _ => Err(libc::EINVAL),
            }
        })
    }
}

export! {
    /// `rdma_notify`: the engine already knows its QPs' events.
    fn rdma_notify(id: *mut rdma_cm_id, _event: u32) -> c_int {
        rc(|| {
            // SAFETY: the program's id.
            unsafe { Id::from_ptr(id)? };
            Ok(())
        })
    }
}

export! {
    /// `rdma_init_qp_attr`: the attributes (and mask) that bring a QP the
    /// program manages to `qp_attr->qp_state` for this id: INIT at any
    /// time, RTR and RTS once the peer's parameters are known (the
    /// request, on the passive side; CONNECT_RESPONSE, on the active).
    fn rdma_init_qp_attr(id: *mut rdma_cm_id, attr: *mut ibv_qp_attr, mask: *mut c_int) -> c_int {
        rc(|| {
            // SAFETY: the program's id and output structures.
            let (i, a, m) = unsafe { (Id::from_ptr(id)?, arg_mut(attr)?, arg_mut(mask)?) };
            let ctx = i.ctx()?;
            if a.qp_state == 2 || a.qp_state == 3 {
                let conn = i.st().conn.ok_or(libc::EINVAL)?;
                let state = if a.qp_state == 2 { QpState::Rtr } else { QpState::Rts };
                let (q, qm) = ctx.verbs.cm_qp_attr(conn, state).map_err(crate::ffi::verr)?;
                *a = ibv_qp_attr_of(&q);
                *m = qm.0 as c_int;
                return Ok(());
            }
            if a.qp_state != 1 {
                return Err(libc::EINVAL);
            }
            a.pkey_index = 0;
            a.port_num = 1;
            // IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT
            *m = 1 | (1 << 4) | (1 << 5);
            if is_ud(i) {
                a.qkey = RDMA_UDP_QKEY;
                *m |= 1 << 6; // IBV_QP_QKEY
            } else {
                // LOCAL_WRITE | REMOTE_WRITE | REMOTE_READ
                a.qp_access_flags = 0x7;
                *m |= 1 << 3; // IBV_QP_ACCESS_FLAGS
            }
            Ok(())
        })
    }
}

export! {
    /// `rdma_join_multicast`: multicast needs the engine to carry
    /// multicast groups, which it does not: `ENOSYS`.
    fn rdma_join_multicast(id: *mut rdma_cm_id, _addr: *mut libc::sockaddr, _context: *mut c_void) -> c_int {
        rc(|| no_multicast(id))
    }
}

export! {
    /// `rdma_join_multicast_ex`: `ENOSYS` (no multicast).
    fn rdma_join_multicast_ex(id: *mut rdma_cm_id, _attr: *mut rdma_cm_join_mc_attr_ex, _context: *mut c_void) -> c_int {
        rc(|| no_multicast(id))
    }
}

export! {
    /// `rdma_leave_multicast`: `ENOSYS` (no multicast).
    fn rdma_leave_multicast(id: *mut rdma_cm_id, _addr: *mut libc::sockaddr) -> c_int {
        rc(|| no_multicast(id))
    }
}

fn no_multicast(id: *mut rdma_cm_id) -> Res<()> {
    // SAFETY: the program's id.
    unsafe { Id::from_ptr(id)? };
    crate::config::log!("librdmacm: multicast is not supported by this stack");
    Err(libc::ENOSYS)
}

/// `struct ibv_ece` (`verbs.h`): vendor_id, options, comp_mask.
type Ece = [u32; 3];

export! {
    /// `rdma_set_local_ece`: checked as rdma-core checks it; no ECE is
    /// exchanged on this device, so the options are not used.
    fn rdma_set_local_ece(id: *mut rdma_cm_id, ece: *mut c_void) -> c_int {
        rc(|| {
            // SAFETY: the program's id and its 12-byte ibv_ece.
            let (i, e) = unsafe { (Id::from_ptr(id)?, arg_mut(ece.cast::<Ece>())?) };
            // SAFETY: the id's C view.
            if !unsafe { (*i.c()).qp }.is_null() || e[0] == 0 || e[2] != 0 {
                return Err(libc::EINVAL);
            }
            Ok(())
        })
    }
}

export! {
    /// `rdma_get_remote_ece`: the peer sent none (all zero).
    fn rdma_get_remote_ece(id: *mut rdma_cm_id, ece: *mut c_void) -> c_int {
        rc(|| {
            // SAFETY: the program's id and its 12-byte ibv_ece.
            let (i, e) = unsafe { (Id::from_ptr(id)?, arg_mut(ece.cast::<Ece>())?) };
            // SAFETY: the id's C view.
            if !unsafe { (*i.c()).qp }.is_null() {
                return Err(libc::EINVAL);
            }
            *e = [0; 3];
            Ok(())
        })
    }
}

/// The C attributes of the engine's.
fn ibv_qp_attr_of(q: &roce_verbs::QpAttr) -> ibv_qp_attr {
    ibv_qp_attr {
        qp_state: q.qp_state as u32,
        path_mtu: cabi::conv::mtu_enum(q.path_mtu),
        rq_psn: q.rq_psn.value(),
        sq_psn: q.sq_psn.value(),
        dest_qp_num: q.dest_qp_num.value(),
        qp_access_flags: q.qp_access_flags.0,
        ah_attr: ibv_ah_attr {
            grh: ibv_global_route {
                dgid: cabi::conv::gid_of(q.ah_attr.dest),
                flow_label: q.ah_attr.flow_label,
                sgid_index: q.ah_attr.sgid_index,
                hop_limit: q.ah_attr.hop_limit,
                traffic_class: q.ah_attr.traffic_class,
            },
            is_global: 1,
            port_num: 1,
            ..Default::default()
        },
        // A foreign peer's REQ may ask for more than this device has:
        // the attributes stay ones ibv_modify_qp takes.
        max_rd_atomic: q.max_rd_atomic.min(MAX_DEPTH),
        max_dest_rd_atomic: q.max_dest_rd_atomic.min(MAX_DEPTH),
        min_rnr_timer: q.min_rnr_timer,
        port_num: 1,
        timeout: q.timeout,
        retry_cnt: q.retry_cnt,
        rnr_retry: q.rnr_retry,
        ..Default::default()
    }
}
