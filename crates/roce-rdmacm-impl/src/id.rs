//! Ids and addresses: `rdma_create_id`, `rdma_destroy_id`,
//! `rdma_migrate_id`, `rdma_set_option`, `rdma_bind_addr`,
//! `rdma_resolve_addr`, `rdma_resolve_route`, the port getters and
//! `rdma_get_devices`. Which context an address gets is `contexts`'s,
//! the addresses and route an id holds `route`'s.

use std::net::SocketAddr;
use std::os::raw::{c_int, c_void};

use super::channel::{deliver, Event};
use super::contexts::{all_contexts, bound_context, context_at, context_towards};
use super::contexts::{is_loopback, listen_contexts};
use super::route::{set_route, set_source, sockaddr_in};
use super::{lock, ports, rc, Channel, Id, State};
use crate::abi::*;
use crate::ffi::{arg_mut, ptr_ret, Res};
use crate::ffi::{value_or, void};
use crate::verbs;

export! {
    /// `rdma_create_id`: without a channel the id is synchronous (its
    /// calls wait for their outcome).
    fn rdma_create_id(ch: *mut rdma_event_channel, out: *mut *mut rdma_cm_id, context: *mut c_void, ps: u32) -> c_int {
        rc(|| {
            // SAFETY: the program's out pointer.
            let out = unsafe { arg_mut(out)? };
            let qp_type = match ps {
                ps::TCP | ps::IB => crate::abi::consts::IBV_QPT_RC,
                ps::UDP | ps::IPOIB => crate::abi::consts::IBV_QPT_UD,
                _ => return Err(libc::EINVAL),
            };
            let sync = ch.is_null();
            let channel = if sync {
                Channel::new()?
            } else {
                // SAFETY: the program's channel.
                unsafe { Channel::from_ptr(ch)? }
            };
            let id = Id::new(std::ptr::null_mut(), channel, sync, ps, qp_type, context);
            *out = Box::into_raw(id).cast();
            Ok(())
        })
    }
}

/// Frees an id the program will not use again: its connection or
/// listeners go from the engine and the tables, its queued events go.
pub(crate) fn destroy(id: *mut rdma_cm_id) -> Res<()> {
    // SAFETY: the program's id.
    let i = unsafe { Id::from_ptr(id)? };
    let (conn, listens, channel) = {
        let mut st = i.st();
        (
            st.conn.take(),
            std::mem::take(&mut st.listens),
            st.channel.clone(),
        )
    };
    ports::release(i.c() as usize);
    // A synchronous id's last event.
    i.ack_held();
    for (c, l) in &listens {
        // SAFETY: contexts of this library, open for the process.
        if let Ok(ctx) = unsafe { verbs::context(*c) } {
            ctx.verbs.cm_unlisten(*l);
            lock(&ctx.table()).forget(i);
        }
    }
    if let Ok(ctx) = i.ctx() {
        lock(&ctx.table()).forget(i);
        if let Some(c) = conn {
            ctx.verbs.cm_release(c);
        }
        // What the CM has to send (a DREQ, a REJ) leaves now: programs
        // often exit right after destroying their ids, and the context
        // (open for the process) is never closed to flush it.
        ctx.verbs.flush();
    }
    // Its queued events go; requests for it (as a listener) nobody took
    // are refused and their ids go too.
    for e in channel.take_events_of(id) {
        if e.c.listen_id == id {
            let child = e.c.id;
            drop(e);
            let _ = destroy(child);
        }
    }
    // A PD the library allocated for the id (`rdma_create_qp` without
    // one) goes with it, if the program left nothing on it.
    if std::mem::take(&mut i.st().own_pd) {
        // SAFETY: the id's C view; the PD is the library's.
        let pd = unsafe { (*i.c()).pd };
        // SAFETY: a PD of this library.
        unsafe { crate::verbs::ibv_dealloc_pd(pd) };
    }
    // SAFETY: allocated by rdma_create_id or for a request; the program
    // gives it up.
    drop(unsafe { Box::from_raw(id.cast::<Id>()) });
    Ok(())
}

export! {
    /// `rdma_destroy_id`.
    fn rdma_destroy_id(id: *mut rdma_cm_id) -> c_int {
        rc(|| destroy(id))
    }
}

export! {
    /// `rdma_migrate_id`: the id's events go to `ch` from now on (its
    /// queued ones with them); NULL makes it synchronous.
    fn rdma_migrate_id(id: *mut rdma_cm_id, ch: *mut rdma_event_channel) -> c_int {
        rc(|| {
            // SAFETY: the program's id.
            let i = unsafe { Id::from_ptr(id)? };
            let new = if ch.is_null() {
                Channel::new()?
            } else {
                // SAFETY: the program's channel.
                unsafe { Channel::from_ptr(ch)? }
            };
            // A synchronous id's held event is acked; the id is
            // synchronous from now on exactly when it has no channel
            // (librdmacm's `rdma_migrate_id`): libfabric's verbs provider
            // resolves an endpoint's address synchronously, then moves
            // it to its EQ's channel, where the route and connection
            // events must arrive rather than be waited for in the call.
            if i.is_sync() {
                i.ack_held();
            }
            i.sync.store(ch.is_null(), std::sync::atomic::Ordering::Release);
            let old = std::mem::replace(&mut i.st().channel, new.clone());
            for e in old.take_events_of(id) {
                new.push(e);
            }
            // SAFETY: the id's C view (`channel` is read by programs).
            unsafe { (*i.c()).channel = new.ptr() };
            Ok(())
        })
    }
}

/// `sizeof(struct ibv_path_data)`: flags, reserved, a 64-byte path record.
const PATH_DATA_LEN: usize = 72;

export! {
    /// `rdma_set_option`: TOS, REUSEADDR, AFONLY and ACK_TIMEOUT are
    /// taken; an IB path record is accepted (the route is the IP one).
    /// Lengths as the kernel's ucma checks them: exactly a `u8` for TOS
    /// and ACK_TIMEOUT, an `int` for REUSEADDR and AFONLY, whole
    /// `ibv_path_data` records (at least one) for IB_PATH, else `EINVAL`;
    /// an option it does not know is `ENOSYS`.
    fn rdma_set_option(id: *mut rdma_cm_id, level: c_int, name: c_int, val: *mut c_void, len: usize) -> c_int {
        rc(|| {
            // SAFETY: the program's id.
            let i = unsafe { Id::from_ptr(id)? };
            let want = match (level, name) {
                (option::ID, option::ID_TOS | option::ID_ACK_TIMEOUT) => len == 1,
                (option::ID, option::ID_REUSEADDR | option::ID_AFONLY) => len == size_of::<c_int>(),
                (option::IB, option::IB_PATH) => len > 0 && len.is_multiple_of(PATH_DATA_LEN),
                _ => return Err(libc::ENOSYS),
            };
            if !want {
                return Err(libc::EINVAL);
            }
            if val.is_null() {
                // The kernel copies the value in first.
                return Err(libc::EFAULT);
            }
            match (level, name) {
                (option::ID, option::ID_TOS) => {
                    // SAFETY: one readable byte (checked above).
                    i.st().tos = unsafe { *val.cast::<u8>() };
                }
                (option::ID, option::ID_ACK_TIMEOUT) => {
                    // SAFETY: one readable byte (checked above).
                    i.st().ack_timeout = unsafe { *val.cast::<u8>() };
                }
                (option::ID, option::ID_REUSEADDR) => {
                    // SAFETY: a readable int (checked above).
                    let on = unsafe { *val.cast::<c_int>() } != 0;
                    let mut st = i.st();
                    // rdma_set_reuseaddr: a listener cannot become
                    // reusable, and only an idle id can stop being so.
                    if !((on && st.state != State::Listening) || st.state == State::Idle) {
                        return Err(libc::EINVAL);
                    }
                    st.reuse = on;
                }
                (option::ID, option::ID_AFONLY) => {
                    // SAFETY: a readable int (checked above).
                    let on = unsafe { *val.cast::<c_int>() } != 0;
                    let mut st = i.st();
                    // rdma_set_afonly: before the id is bound.
                    if st.state != State::Idle || st.local.is_some() {
                        return Err(libc::EINVAL);
                    }
                    st.afonly = on;
                }
                _ => {}
            }
            Ok(())
        })
    }
}

/// Binds `id` to `addr` (the work of `rdma_bind_addr`).
pub(crate) fn bind(i: &Id, addr: SocketAddr) -> Res<()> {
    let (reuse, afonly) = {
        let st = i.st();
        if st.local.is_some() {
            return Err(libc::EINVAL);
        }
        (st.reuse, st.afonly)
    };
    // The wildcard ties the id to no device; so does a loopback
    // address, as in the kernel's `rdma_bind_addr` (`cma_any_addr` is
    // the zero or a loopback address): `id->verbs` stays NULL, which
    // libfabric's verbs provider reads as "not one device's address" and
    // then lists every device's MSG domain. The loopback context is
    // still opened on that exact address (claiming it from other
    // processes), and listen and resolve use it (`bound_context`).
    let ctx = if addr.ip().is_unspecified() {
        None
    } else {
        let c = context_at(addr.ip())?;
        (!is_loopback(addr.ip())).then_some(c)
    };
    // SAFETY: the id's C view.
    let ps = unsafe { (*i.c()).ps };
    let port = ports::bind(i.c() as usize, ps, addr.ip(), addr.port(), reuse, afonly)?;
    let local = SocketAddr::new(addr.ip(), port);
    if let Some(ctx) = ctx {
        // SAFETY: the id's C view; a context this library keeps open.
        unsafe {
            (*i.c()).verbs = ctx;
            (*i.c()).port_num = 1;
        }
    }
    i.st().local = Some(local);
    set_source(i, local);
    Ok(())
}

/// A program's explicit bind is usually a server's, whose listen follows;
/// some tell their peer the port before they listen (qperf 0.4.11's
/// `cm_open_server`), so a REQ can come first. The contexts a listen
/// would use are opened now (the listen is then quick; a wildcard's
/// devices, as the kernel's, are open already), and in the TCP port space
/// they hold such a REQ instead of refusing it
/// (`Context::cm_expect_listen`). Best effort: a device that fails is
/// said by the listen.
fn expect_listen(i: &Id) {
    let Some(local) = i.st().local else { return };
    let ctxs = match bound_context(i) {
        Ok(Some(c)) => vec![c],
        _ => listen_contexts(local.ip()).unwrap_or_default(),
    };
    // SAFETY: the id's C view.
    if unsafe { (*i.c()).ps } != ps::TCP {
        return;
    }
    for c in ctxs {
        // SAFETY: a context this library keeps open.
        if let Ok(ctx) = unsafe { verbs::context(c) } {
            ctx.verbs
                .cm_expect_listen(roce_verbs::PortSpace::Tcp, local.port());
        }
    }
}

export! {
    /// `rdma_bind_addr`: a specific address ties the id to a context on
    /// it; the wildcard address leaves it free (a listener then listens
    /// on every device).
    fn rdma_bind_addr(id: *mut rdma_cm_id, addr: *mut libc::sockaddr) -> c_int {
        rc(|| {
            // SAFETY: the program's id and address.
            let (i, a) = unsafe { (Id::from_ptr(id)?, sockaddr_in(addr)?) };
            bind(i, a)?;
            expect_listen(i);
            Ok(())
        })
    }
}

/// Waits for a synchronous id's next event (the previous one acked) and
/// returns its outcome as rdma-core's `ucma_complete` does.
pub(crate) fn complete(i: &Id) -> Res<()> {
    if !i.is_sync() {
        return Ok(());
    }
    let ch = i.st().channel.clone();
    i.ack_held();
    let e = ch.take()?;
    let (kind, status) = (e.c.event, e.c.status);
    i.hold(e);
    if status == 0 {
        return Ok(());
    }
    Err(if kind == event::REJECTED {
        libc::ECONNREFUSED
    } else {
        status.abs()
    })
}

export! {
    /// `rdma_resolve_addr`: picks the local address and context towards
    /// `dst` (ADDR_RESOLVED); without a route the call fails with the
    /// routing error (`ENETUNREACH`).
    fn rdma_resolve_addr(id: *mut rdma_cm_id, src: *mut libc::sockaddr, dst: *mut libc::sockaddr, _timeout_ms: c_int) -> c_int {
        rc(|| {
            // SAFETY: the program's id and addresses.
            let (i, d) = unsafe { (Id::from_ptr(id)?, sockaddr_in(dst)?) };
            if !src.is_null() && i.st().local.is_none() {
                // SAFETY: the program's address.
                bind(i, unsafe { sockaddr_in(src)? })?;
            }
            // A destination without a route, or of the other address
            // family, fails the call itself, as the kernel's does.
            resolve(i, d)?;
            deliver(i, Event::new(i.c(), event::ADDR_RESOLVED, 0));
            complete(i)
        })
    }
}

fn resolve(i: &Id, dst: SocketAddr) -> Res<()> {
    let (bound, st) = {
        let st = i.st();
        (st.local, st.state)
    };
    if !matches!(st, State::Idle | State::AddrResolved | State::RouteResolved) {
        return Err(libc::EINVAL);
    }
    let ctx = match bound_context(i)? {
        Some(c) => c,
        None => context_towards(dst.ip())?,
    };
    // SAFETY: a context this library keeps open.
    let c = unsafe { verbs::context(ctx)? };
    if c.local.is_ipv4() != dst.ip().to_canonical().is_ipv4() {
        return Err(libc::EAFNOSUPPORT);
    }
    let port = bound.map_or(0, |b| b.port());
    let local = SocketAddr::new(c.local, port);
    // SAFETY: the id's C view.
    unsafe {
        (*i.c()).verbs = ctx;
        (*i.c()).port_num = 1;
    }
    {
        let mut st = i.st();
        st.local = Some(local);
        st.peer = Some(dst);
        st.state = State::AddrResolved;
    }
    set_route(i, local, dst);
    Ok(())
}

export! {
    /// `rdma_resolve_route`: the route is the IP one (ROUTE_RESOLVED).
    fn rdma_resolve_route(id: *mut rdma_cm_id, _timeout_ms: c_int) -> c_int {
        rc(|| {
            // SAFETY: the program's id.
            let i = unsafe { Id::from_ptr(id)? };
            {
                let mut st = i.st();
                if st.state != State::AddrResolved && st.state != State::RouteResolved {
                    return Err(libc::EINVAL);
                }
                st.state = State::RouteResolved;
            }
            deliver(i, Event::new(i.c(), event::ROUTE_RESOLVED, 0));
            complete(i)
        })
    }
}

fn port_of(sa: &rdma_sockaddr) -> u16 {
    // SAFETY: the family field is common to every view of the union;
    // the port sits at the same offset in sockaddr_in and sockaddr_in6.
    unsafe {
        match sa.sa.sa_family as c_int {
            libc::AF_INET => sa.sin.sin_port,
            libc::AF_INET6 => sa.sin6.sin6_port,
            _ => 0,
        }
    }
}

export! {
    /// `rdma_get_src_port`: network byte order.
    fn rdma_get_src_port(id: *mut rdma_cm_id) -> u16 {
        // SAFETY: the program's id.
        value_or(0, || unsafe { Id::from_ptr(id) }.map_or(0, |i| port_of(unsafe { &(*i.c()).route.addr.src })))
    }
}

export! {
    /// `rdma_get_dst_port`: network byte order.
    fn rdma_get_dst_port(id: *mut rdma_cm_id) -> u16 {
        // SAFETY: the program's id.
        value_or(0, || unsafe { Id::from_ptr(id) }.map_or(0, |i| port_of(unsafe { &(*i.c()).route.addr.dst })))
    }
}

export! {
    /// `rdma_get_devices`: a NULL-terminated array of a context of every
    /// device (freed by `rdma_free_devices`; the contexts stay open).
    fn rdma_get_devices(num: *mut c_int) -> *mut *mut ibv_context {
        ptr_ret(|| {
            let all = all_contexts()?;
            // SAFETY: calloc of all.len() + 1 pointers; checked below.
            let arr = unsafe { libc::calloc(all.len() + 1, size_of::<*mut ibv_context>()) }
                .cast::<*mut ibv_context>();
            if arr.is_null() {
                return Err(libc::ENOMEM);
            }
            for (k, c) in all.iter().enumerate() {
                // SAFETY: k < all.len(), inside the allocation.
                unsafe { *arr.add(k) = *c };
            }
            if !num.is_null() {
                // SAFETY: the program's int pointer.
                unsafe { *num = all.len() as c_int };
            }
            Ok(arr)
        })
    }
}

export! {
    /// `rdma_free_devices`.
    fn rdma_free_devices(list: *mut *mut ibv_context) {
        // SAFETY: an array from rdma_get_devices (or NULL).
        void(|| {
            unsafe { libc::free(list.cast()) };
            Ok(())
        })
    }
}
