//! `rdma_getaddrinfo` / `rdma_freeaddrinfo`: host and service names to
//! the addresses `rdma_create_ep` takes. Names resolve as
//! `getaddrinfo(3)` resolves them; the route is the IP one, so no path
//! records are returned.

use std::ffi::CStr;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, ToSocketAddrs};
use std::os::raw::{c_char, c_int};

use super::rc;
use super::route::to_sockaddr;
use crate::abi::consts::{IBV_QPT_RC, IBV_QPT_UD};
use crate::abi::*;
use crate::ffi::void;
use crate::ffi::{arg_mut, Res};

/// One answer: the C view first, then the addresses it points to.
#[repr(C)]
struct Info {
    c: rdma_addrinfo,
    src: rdma_sockaddr,
    dst: rdma_sockaddr,
}

fn len_of(a: SocketAddr) -> libc::socklen_t {
    (match a {
        SocketAddr::V4(_) => size_of::<libc::sockaddr_in>(),
        SocketAddr::V6(_) => size_of::<libc::sockaddr_in6>(),
    }) as libc::socklen_t
}

/// A C string argument, or None for NULL.
///
/// # Safety
/// `p` must be NULL or a NUL-terminated string.
unsafe fn text<'a>(p: *const c_char) -> Res<Option<&'a str>> {
    if p.is_null() {
        return Ok(None);
    }
    // SAFETY: the caller's contract.
    let s = unsafe { CStr::from_ptr(p) };
    s.to_str().map(Some).map_err(|_| libc::EINVAL)
}

/// The port of a service: a number, or a name from the services
/// database.
fn port_of(service: &str) -> Res<u16> {
    if let Ok(p) = service.parse::<u16>() {
        return Ok(p);
    }
    let name = std::ffi::CString::new(service).map_err(|_| libc::EINVAL)?;
    // SAFETY: a NUL-terminated name and protocol; the result is read at
    // once (getservbyname's static buffer, as getaddrinfo uses it).
    let s = unsafe { libc::getservbyname(name.as_ptr(), c"tcp".as_ptr()) };
    // SAFETY: NULL or a valid servent.
    match unsafe { s.as_ref() } {
        Some(s) => Ok(u16::from_be(s.s_port as u16)),
        None => Err(libc::ENOENT),
    }
}

/// The first address of `node` of the family asked for.
fn resolve(node: &str, port: u16, family: c_int, numeric: bool) -> Res<SocketAddr> {
    if let Ok(ip) = node.parse::<IpAddr>() {
        return Ok(SocketAddr::new(ip, port));
    }
    if numeric {
        return Err(libc::EINVAL);
    }
    let addrs = (node, port)
        .to_socket_addrs()
        .map_err(|_| libc::EADDRNOTAVAIL)?;
    addrs
        .into_iter()
        .find(|a| match family {
            libc::AF_INET => a.is_ipv4(),
            libc::AF_INET6 => a.is_ipv6(),
            _ => true,
        })
        .ok_or(libc::EADDRNOTAVAIL)
}

/// Makes the one answer: its source and destination addresses, the QP
/// type asked for (RC by default) and its port space.
fn answer(
    out: &mut *mut rdma_addrinfo,
    flags: c_int,
    qp_type: c_int,
    space: c_int,
    src: Option<SocketAddr>,
    dst: Option<SocketAddr>,
) -> Res<()> {
    let Some(family_of) = dst.or(src) else {
        return Err(libc::EINVAL);
    };
    // SAFETY: calloc of one Info (all-zero is valid for it).
    let info = unsafe { libc::calloc(1, size_of::<Info>()) }.cast::<Info>();
    if info.is_null() {
        return Err(libc::ENOMEM);
    }
    // SAFETY: the allocation just made.
    let i = unsafe { &mut *info };
    let qp_type = if qp_type == 0 {
        IBV_QPT_RC as c_int
    } else {
        qp_type
    };
    i.c.ai_flags = flags;
    i.c.ai_family = if family_of.is_ipv4() {
        libc::AF_INET
    } else {
        libc::AF_INET6
    };
    i.c.ai_qp_type = qp_type;
    i.c.ai_port_space = if space != 0 {
        space
    } else if qp_type == IBV_QPT_UD as c_int {
        ps::UDP as c_int
    } else {
        ps::TCP as c_int
    };
    if let Some(s) = src {
        i.src = to_sockaddr(s);
        i.c.ai_src_len = len_of(s);
        i.c.ai_src_addr = (&raw mut i.src).cast();
    }
    if let Some(d) = dst {
        i.dst = to_sockaddr(d);
        i.c.ai_dst_len = len_of(d);
        i.c.ai_dst_addr = (&raw mut i.dst).cast();
    }
    *out = info.cast();
    Ok(())
}

export! {
    /// `rdma_getaddrinfo`: one answer. Passive (`RAI_PASSIVE`): the
    /// source address (the node's, or the wildcard); active: the
    /// destination, and the hints' source address if they give one.
    /// Without node and service, the hints' own addresses.
    fn rdma_getaddrinfo(node: *const c_char, service: *const c_char, hints: *const rdma_addrinfo, res: *mut *mut rdma_addrinfo) -> c_int {
        rc(|| {
            // SAFETY: the program's out pointer and strings.
            let (out, node, service) = unsafe { (arg_mut(res)?, text(node)?, text(service)?) };
            // SAFETY: NULL or the program's hints.
            let h = unsafe { hints.as_ref() };
            let flags = h.map_or(0, |h| h.ai_flags);
            let family = h.map_or(0, |h| h.ai_family);
            let qp_type = h.map_or(0, |h| h.ai_qp_type);
            let space = h.map_or(0, |h| h.ai_port_space);
            // SAFETY: NULL or the hints' addresses (of their lengths).
            let hint_src = h.filter(|h| !h.ai_src_addr.is_null() && h.ai_src_len > 0)
                .and_then(|h| unsafe { super::route::sockaddr_in(h.ai_src_addr) }.ok());
            // SAFETY: as above.
            let hint_dst = h.filter(|h| !h.ai_dst_addr.is_null() && h.ai_dst_len > 0)
                .and_then(|h| unsafe { super::route::sockaddr_in(h.ai_dst_addr) }.ok());
            if node.is_none() && service.is_none() && hint_src.is_none() && hint_dst.is_none() {
                return Err(libc::EINVAL);
            }
            let port = service.map(port_of).transpose()?.unwrap_or(0);
            let passive = flags & rai::PASSIVE != 0;
            if node.is_none() && service.is_none() {
                // librdmacm answers from the hints' own addresses (as
                // libfabric's verbs provider asks when it makes an
                // endpoint from an fi_info).
                return answer(out, flags, qp_type, space, hint_src, hint_dst);
            }
            let any = if family == libc::AF_INET6 {
                IpAddr::V6(Ipv6Addr::UNSPECIFIED)
            } else {
                IpAddr::V4(Ipv4Addr::UNSPECIFIED)
            };
            let addr = match node {
                Some(n) => resolve(n, port, family, flags & rai::NUMERICHOST != 0)?,
                None if passive => SocketAddr::new(any, port),
                None => SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), port),
            };
            if passive {
                answer(out, flags, qp_type, space, Some(addr), None)
            } else {
                answer(out, flags, qp_type, space, hint_src, Some(addr))
            }
        })
    }
}

export! {
    /// `rdma_freeaddrinfo`.
    fn rdma_freeaddrinfo(res: *mut rdma_addrinfo) {
        void(|| {
            let mut p = res;
            while !p.is_null() {
                // SAFETY: an answer of rdma_getaddrinfo (calloc'd Info).
                let next = unsafe { (*p).ai_next };
                // SAFETY: as above.
                unsafe { libc::free(p.cast()) };
                p = next;
            }
            Ok(())
        })
    }
}
