//! Free loopback addresses, for a stack that holds its address alone.
//!
//! Processes of one user share each address by default (docs/host.md:
//! `SO_REUSEPORT` on UDP 4791 and a host table of who owns which QPN), so
//! every one of them opens on `127.0.0.1`. A context that does not share
//! (`ROCE_SHM=0`, or one that meets a socket that does not share: another
//! user's, a kernel rxe device) owns `ADDR:4791` for its GID, and then a
//! second such process needs another address. On Linux every address of
//! `127.0.0.0/8` is routed to `lo` with no configuration, so it can take
//! `127.0.0.2`, a third `127.0.0.3`, and so on: [`free_loopback_v4`]
//! finds the first such address whose UDP port is free.
//!
//! # The race
//!
//! The search probes each address by binding a UDP socket to it and
//! releasing it at once; it does not reserve what it finds. Another
//! process may bind the same address between the probe and the caller's
//! own bind. The caller's [`OpenOptions::open`](crate::OpenOptions::open)
//! then fails with [`OpenError::PortInUse`](crate::OpenError::PortInUse)
//! naming the address and port, and a caller that wants to may search
//! again from the next address. A backend that does not share binds
//! without `SO_REUSEADDR`/`SO_REUSEPORT`, so at most one such context
//! holds an address's port.

use std::io;
use std::net::{IpAddr, Ipv4Addr, UdpSocket};

/// Most addresses one search probes (a bound on the system calls made
/// when every address is taken, e.g. by a kernel rxe device listening on
/// the wildcard address).
pub const MAX_PROBES: u32 = 1024;

/// Whether UDP `port` on `addr` can be bound now (a probe: the socket is
/// closed again at once). An address that is not this host's is not free.
pub fn udp_port_free(addr: IpAddr, port: u16) -> bool {
    UdpSocket::bind((addr, port)).is_ok()
}

/// The first address of `127.0.0.0/8`, from `first` upwards, whose UDP
/// `port` is free, probing at most [`MAX_PROBES`] addresses; `None` when
/// all are taken or the host does not route `127.0.0.0/8` to loopback.
/// `first` outside `127.0.0.0/8` starts the search at `127.0.0.1`. See
/// the module docs for the race between the probe and the caller's bind.
pub fn free_loopback_v4(port: u16, first: Ipv4Addr) -> Option<Ipv4Addr> {
    free_loopback_v4_avoiding(port, first, &[])
}

/// As [`free_loopback_v4`], skipping the addresses in `avoid` even when
/// their port is free: addresses a peer on this host is about to bind
/// (a server that binds its address only once a client connects).
pub fn free_loopback_v4_avoiding(
    port: u16,
    first: Ipv4Addr,
    avoid: &[Ipv4Addr],
) -> Option<Ipv4Addr> {
    const LAST: u32 = 0x7fff_fffe; // 127.255.255.254
    let start = if first.octets()[0] == 127 && u32::from(first) != 0x7f00_0000 {
        u32::from(first)
    } else {
        0x7f00_0001
    };
    for n in (start..=LAST).take(MAX_PROBES as usize) {
        let a = Ipv4Addr::from(n);
        if avoid.contains(&a) {
            continue;
        }
        match UdpSocket::bind((a, port)) {
            Ok(_) => return Some(a),
            Err(e) if e.kind() == io::ErrorKind::AddrInUse => {}
            // 127/8 is not all loopback here (not Linux?): stop.
            Err(_) => return None,
        }
    }
    None
}

/// Whether `addr` is a loopback address (`127.0.0.0/8`, `::1`, or an
/// IPv4-mapped loopback address).
pub fn is_loopback(addr: IpAddr) -> bool {
    addr.to_canonical().is_loopback()
}

/// The source address the kernel's routing picks towards `dst` (a UDP
/// socket connected to it, which sends nothing): the local address a
/// RoCE endpoint talking to `dst` should use. The error is the routing
/// one (`ENETUNREACH` where there is no route).
pub fn route_source(dst: IpAddr) -> io::Result<IpAddr> {
    let any = match dst {
        IpAddr::V4(_) => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
        IpAddr::V6(_) => IpAddr::V6(std::net::Ipv6Addr::UNSPECIFIED),
    };
    let s = UdpSocket::bind((any, 0))?;
    s.connect((dst, 4791))?;
    Ok(s.local_addr()?.ip())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_taken_address_is_skipped() {
        // A port of this test's own, on addresses no other test uses.
        let port = roce_testkit::free_port();
        let first = Ipv4Addr::new(127, 0, 41, 1);
        let held = UdpSocket::bind((first, port)).unwrap();
        assert!(!udp_port_free(IpAddr::V4(first), port));
        let got = free_loopback_v4(port, first).unwrap();
        assert_eq!(got, Ipv4Addr::new(127, 0, 41, 2));
        // Released again: the probe keeps nothing.
        assert!(udp_port_free(IpAddr::V4(got), port));
        drop(held);
        assert_eq!(free_loopback_v4(port, first), Some(first));
        assert_eq!(
            free_loopback_v4_avoiding(port, first, &[first]),
            Some(Ipv4Addr::new(127, 0, 41, 2))
        );
    }

    #[test]
    fn the_search_stays_in_127_8() {
        let port = roce_testkit::free_port();
        let got = free_loopback_v4(port, Ipv4Addr::new(10, 0, 0, 1)).unwrap();
        assert_eq!(got.octets()[0], 127);
        let last = Ipv4Addr::new(127, 255, 255, 254);
        assert_eq!(free_loopback_v4(port, last), Some(last));
        assert_eq!(free_loopback_v4_avoiding(port, last, &[last]), None);
        assert!(is_loopback("::ffff:127.0.0.9".parse().unwrap()));
        assert!(!is_loopback("192.0.2.1".parse().unwrap()));
    }
}
