//! Ids and addresses: `rdma_create_id`, `rdma_destroy_id`,
//! `rdma_migrate_id`, `rdma_set_option`, `rdma_bind_addr`,
//! `rdma_resolve_addr`, `rdma_resolve_route`, the port getters and
//! `rdma_get_devices`; and which context an address gets (module docs of
//! `cm`).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::raw::{c_int, c_void};
use std::sync::{Arc, Mutex};

use super::channel::{deliver, Event};
use super::dispatch::table;
use super::{lock, ports, rc, Channel, Id, IdState, State};
use crate::abi::*;
use crate::config::log;
use crate::ffi::{arg_mut, ptr_ret, Res};
use crate::ffi::{value_or, void};
use crate::verbs::{self, live, side};
use cabi::conv::{gid_of, mtu_enum};

/// A new id (not yet in any table).
pub(crate) fn new_id(
    verbs: *mut ibv_context,
    channel: Arc<Channel>,
    sync: bool,
    ps: u32,
    qp_type: u32,
    context: *mut c_void,
) -> Box<Id> {
    // SAFETY: all-zero is a valid rdma_cm_id (NULL pointers, zeros, and
    // zeroed socket addresses).
    let mut c: rdma_cm_id = unsafe { std::mem::zeroed() };
    c.verbs = verbs;
    c.channel = channel.ptr();
    c.context = context;
    c.ps = ps;
    c.qp_type = qp_type;
    if !verbs.is_null() {
        c.port_num = 1;
    }
    Box::new(Id {
        cview: std::cell::UnsafeCell::new(c),
        sync: sync.into(),
        st: Mutex::new(IdState {
            state: State::Idle,
            channel,
            local: None,
            peer: None,
            conn: None,
            listens: Vec::new(),
            path: Box::default(),
            own_cqs: false,
            own_pd: false,
            ep_qp_attr: None,
            tos: 0,
            ack_timeout: 0,
            reuse: false,
            afonly: false,
            depths: (0, 0),
        }),
    })
}

/// A socket address from a program's `struct sockaddr`.
///
/// # Safety
/// `sa` must be NULL or point to a socket address of its family's size.
pub(crate) unsafe fn sockaddr_in(sa: *const libc::sockaddr) -> Res<SocketAddr> {
    // SAFETY: the caller's contract.
    let fam = unsafe { sa.as_ref() }.ok_or(libc::EINVAL)?.sa_family as c_int;
    match fam {
        libc::AF_INET => {
            // SAFETY: an AF_INET address is a sockaddr_in.
            let s = unsafe { &*sa.cast::<libc::sockaddr_in>() };
            Ok(SocketAddr::new(
                IpAddr::V4(Ipv4Addr::from(u32::from_be(s.sin_addr.s_addr))),
                u16::from_be(s.sin_port),
            ))
        }
        libc::AF_INET6 => {
            // SAFETY: an AF_INET6 address is a sockaddr_in6.
            let s = unsafe { &*sa.cast::<libc::sockaddr_in6>() };
            Ok(SocketAddr::new(
                IpAddr::V6(Ipv6Addr::from(s.sin6_addr.s6_addr)),
                u16::from_be(s.sin6_port),
            ))
        }
        // AF_IB addresses need an InfiniBand fabric.
        _ => Err(libc::EAFNOSUPPORT),
    }
}

/// The C union of an address.
pub(crate) fn to_sockaddr(a: SocketAddr) -> rdma_sockaddr {
    // SAFETY: all-zero is a valid sockaddr_storage.
    let mut u: rdma_sockaddr = unsafe { std::mem::zeroed() };
    match a {
        SocketAddr::V4(v4) => {
            u.sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: v4.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from(*v4.ip()).to_be(),
                },
                sin_zero: [0; 8],
            }
        }
        SocketAddr::V6(v6) => {
            u.sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: v6.port().to_be(),
                sin6_flowinfo: 0,
                sin6_addr: libc::in6_addr {
                    s6_addr: v6.ip().octets(),
                },
                sin6_scope_id: v6.scope_id(),
            }
        }
    }
    u
}

/// Fills the id's route: both addresses, their GIDs, one path record.
pub(crate) fn set_route(id: &Id, local: SocketAddr, peer: SocketAddr) {
    let mut st = id.st();
    st.path.sgid = gid_of(local.ip());
    st.path.dgid = gid_of(peer.ip());
    st.path.pkey = 0xffff_u16.to_be();
    st.path.hop_limit = 64;
    st.path.numb_path = 1;
    st.path.reversible = 1;
    st.path.mtu_selector = 2;
    st.path.mtu = id
        .ctx()
        .map_or(mtu_enum(1024) as u8, |c| mtu_enum(c.mtu) as u8);
    st.path.rate_selector = 2;
    st.path.packet_life_time_selector = 2;
    st.path.packet_life_time = 14;
    let path: *mut ibv_sa_path_rec = &mut *st.path;
    // SAFETY: the id's C view; the program only reads the route.
    let c = unsafe { &mut *id.c() };
    c.route.addr.src = to_sockaddr(local);
    c.route.addr.dst = to_sockaddr(peer);
    c.route.addr.ibaddr = rdma_ib_addr {
        sgid: gid_of(local.ip()),
        dgid: gid_of(peer.ip()),
        pkey: 0xffff_u16.to_be(),
    };
    c.route.path_rec = path;
    c.route.num_paths = 1;
}

/// Sets only the source address of the route (a bound id).
fn set_source(id: &Id, local: SocketAddr) {
    // SAFETY: the id's C view; the program only reads the route.
    let c = unsafe { &mut *id.c() };
    c.route.addr.src = to_sockaddr(local);
    c.route.addr.ibaddr.sgid = gid_of(local.ip());
    c.route.addr.ibaddr.pkey = 0xffff_u16.to_be();
}

fn is_loopback(a: IpAddr) -> bool {
    a.to_canonical().is_loopback()
}

/// Whether `a` is an address of this host (any interface).
fn is_local(a: IpAddr) -> bool {
    is_loopback(a)
        || roce_verbs::Device::list()
            .map(|l| l.iter().any(|d| d.gids().contains(&a)))
            .unwrap_or(false)
}

/// The open context (the program's or librdmacm's) whose address `f`
/// accepts, pinned for librdmacm: ids share the one context of an
/// address (as rdma-core's share one per device), and it stays open for
/// the process's life (ids and the objects made on them point into it).
fn opened(f: impl Fn(IpAddr) -> bool) -> Option<*mut ibv_context> {
    live().into_iter().find_map(|p| {
        // SAFETY: the live contexts of this library.
        let c = unsafe { verbs::context(p) }.ok()?;
        f(c.local).then(|| {
            c.pin();
            p
        })
    })
}

/// A new context of `dev` (on `at`, or where `ibv_open_device` would
/// open it), kept open for librdmacm.
fn open_pinned(dev: &roce_verbs::Device, at: Option<IpAddr>) -> Res<*mut ibv_context> {
    let ctx = side()?.open(dev, at)?;
    // SAFETY: just opened by the verbs library.
    unsafe { verbs::context(ctx)? }.pin();
    Ok(ctx)
}

/// The device that owns `addr` (the loopback device for 127/8 and ::1).
fn device_of(addr: IpAddr) -> Res<&'static roce_verbs::Device> {
    let side = side()?;
    side.devices()?
        .into_iter()
        .find(|d| side.owns(d, addr))
        .ok_or(libc::EADDRNOTAVAIL)
}

/// The context on exactly `addr` (opened the first time).
pub(crate) fn context_at(addr: IpAddr) -> Res<*mut ibv_context> {
    if let Some(c) = opened(|a| a == addr) {
        return Ok(c);
    }
    open_pinned(device_of(addr)?, Some(addr))
}

/// A loopback context of the family of `v6`: one already open, or a new
/// one on the first free loopback address.
fn loopback_context(v6: bool) -> Res<*mut ibv_context> {
    if let Some(c) = opened(|a| is_loopback(a) && a.is_ipv6() == v6) {
        return Ok(c);
    }
    let dev = side()?
        .devices()?
        .into_iter()
        .find(|d| d.interface().loopback)
        .ok_or(libc::ENODEV)?;
    open_pinned(dev, v6.then_some(IpAddr::V6(Ipv6Addr::LOCALHOST)))
}

/// The source address the kernel's routing picks towards `dst`, or the
/// routing error.
fn route_source(dst: IpAddr) -> Res<IpAddr> {
    roce_verbs::loopback::route_source(dst)
        .map_err(|e| e.raw_os_error().unwrap_or(libc::ENETUNREACH))
}

/// The context to reach `dst` from: a loopback one for this host's own
/// addresses, else the one on the routed source address.
fn context_towards(dst: IpAddr) -> Res<*mut ibv_context> {
    if is_local(dst) {
        return loopback_context(dst.is_ipv6() && dst.to_canonical().is_ipv6());
    }
    context_at(route_source(dst)?)
}

/// A context for each device (loopback: the one the process uses).
fn all_contexts() -> Res<Vec<*mut ibv_context>> {
    let mut out = Vec::new();
    for d in side()?.devices()? {
        let c = if d.interface().loopback {
            loopback_context(false)
        } else {
            match d.gids().iter().find(|a| a.is_ipv4()).or(d.gids().first()) {
                Some(a) => context_at(*a),
                None => continue,
            }
        };
        match c {
            Ok(c) => out.push(c),
            Err(e) => log!("librdmacm: {} not used: errno {e}", d.name()),
        }
    }
    Ok(out)
}

/// The context an id is tied to: its `verbs`, or for an id bound to a
/// loopback address (whose `verbs` stays NULL, see `bind`) the loopback
/// context on that address; None for an unbound or wildcard id.
pub(crate) fn bound_context(i: &Id) -> Res<Option<*mut ibv_context>> {
    // SAFETY: the id's C view.
    let verbs = unsafe { (*i.c()).verbs };
    if !verbs.is_null() {
        return Ok(Some(verbs));
    }
    match i.st().local {
        Some(a) if is_loopback(a.ip()) => context_at(a.ip()).map(Some),
        _ => Ok(None),
    }
}

/// The contexts a wildcard listener listens on.
pub(crate) fn listen_contexts(any: IpAddr) -> Res<Vec<*mut ibv_context>> {
    let all = all_contexts()?;
    // SAFETY: contexts this library opened and keeps open.
    let fits = |c: &*mut ibv_context| {
        unsafe { verbs::context(*c) }
            .is_ok_and(|c| c.local.is_ipv4() == any.is_ipv4() || any.is_ipv6())
    };
    let v: Vec<_> = all.into_iter().filter(fits).collect();
    if v.is_empty() {
        return Err(libc::ENODEV);
    }
    Ok(v)
}

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
            let id = new_id(std::ptr::null_mut(), channel, sync, ps, qp_type, context);
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
            lock(&table(ctx)).forget(i);
        }
    }
    if let Ok(ctx) = i.ctx() {
        lock(&table(ctx)).forget(i);
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
