//! GIDs, addresses and MTUs between the headers' encodings and the
//! engine's. Every GID of this stack is RoCE v2, an IP address: IPv4 as
//! `::ffff:a.b.c.d` (IBTA Annex A17, RoCE v2; `docs/protocol.md`).

use std::net::{IpAddr, Ipv6Addr};

use crate::abi::ibv_gid;

/// The GID of an address: IPv4 as `::ffff:a.b.c.d`.
pub fn gid_of(a: IpAddr) -> ibv_gid {
    let v6 = match a {
        IpAddr::V4(v4) => v4.to_ipv6_mapped(),
        IpAddr::V6(v6) => v6,
    };
    ibv_gid { raw: v6.octets() }
}

/// The address of a GID (`::ffff:a.b.c.d` is IPv4).
pub fn addr_of(g: &ibv_gid) -> IpAddr {
    let v6 = Ipv6Addr::from(g.raw);
    match v6.to_ipv4_mapped() {
        Some(v4) => IpAddr::V4(v4),
        None => IpAddr::V6(v6),
    }
}

/// `enum ibv_mtu` of a path MTU in bytes.
pub fn mtu_enum(bytes: u32) -> u32 {
    roce_core::qp::mtu_to_enum(bytes).into()
}
