//! An id's addresses and route: socket addresses between the program's
//! `struct sockaddr` and Rust's, and the route (`id->route`: both
//! addresses, their GIDs, one path record) an id gets when it binds or
//! resolves. Address and route resolution are immediate here
//! (`docs/dropin.md`, "librdmacm").

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::raw::c_int;

use super::Id;
use crate::abi::*;
use crate::ffi::Res;
use cabi::conv::{gid_of, mtu_enum};

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
pub(crate) fn set_source(id: &Id, local: SocketAddr) {
    // SAFETY: the id's C view; the program only reads the route.
    let c = unsafe { &mut *id.c() };
    c.route.addr.src = to_sockaddr(local);
    c.route.addr.ibaddr.sgid = gid_of(local.ip());
    c.route.addr.ibaddr.pkey = 0xffff_u16.to_be();
}
