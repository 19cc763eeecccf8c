//! Which context an id uses (`docs/dropin.md`, "librdmacm"): binding to
//! an address opens (once per process) a context of the device that owns
//! it, on that address; resolving a destination takes the source address
//! the kernel's routing would use, and on loopback any loopback context
//! of the process; a listener bound to the wildcard address listens on a
//! context of every device. Every context librdmacm uses is pinned: it
//! stays open for the process.

use std::net::{IpAddr, Ipv6Addr};

use super::Id;
use crate::abi::*;
use crate::config::log;
use crate::ffi::Res;
use crate::verbs::{self, live, side};

pub(crate) fn is_loopback(a: IpAddr) -> bool {
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
pub(crate) fn context_towards(dst: IpAddr) -> Res<*mut ibv_context> {
    if is_local(dst) {
        return loopback_context(dst.is_ipv6() && dst.to_canonical().is_ipv6());
    }
    context_at(route_source(dst)?)
}

/// A context for each device (loopback: the one the process uses).
pub(crate) fn all_contexts() -> Res<Vec<*mut ibv_context>> {
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
