//! Send sockets, one per UDP source port, opened on demand and kept in a
//! bounded least-recently-used cache.
//!
//! RoCE v2 peers send each QP's packets from its own source port
//! (0xC000..=0xFFFF, docs/protocol.md §1) so that switches spread QPs
//! over ECMP paths, and the ICRC covers that port. A UDP socket has one
//! source port, so the backend keeps a socket bound to (local IP, port) for
//! every source port the engine uses. A port that cannot be bound (taken by
//! another socket, in the ephemeral range, ...) is remembered and its
//! datagrams take the fallback path (see `UdpBackend`).

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::{AsFd, BorrowedFd};

use rustc_hash::FxHashMap;
use socket2::{Domain, Protocol, SockAddr, Socket, Type};

use crate::sys;

/// Creates a non-blocking UDP socket for `ip`'s family with DF set
/// (`IP_PMTUDISC_DO`, so an unconnected socket sends IPv4 ID 0, docs/protocol.md
/// §4), bound to `(ip, port)`.
pub(crate) fn udp_socket(ip: IpAddr, port: u16, reuse: bool) -> io::Result<Socket> {
    let domain = if ip.is_ipv4() {
        Domain::IPV4
    } else {
        Domain::IPV6
    };
    let s = Socket::new(domain, Type::DGRAM.nonblocking(), Some(Protocol::UDP))?;
    if ip.is_ipv4() {
        sys::setsockopt_int(
            s.as_fd(),
            libc::IPPROTO_IP,
            libc::IP_MTU_DISCOVER,
            libc::IP_PMTUDISC_DO,
        )?;
    } else {
        s.set_only_v6(true)?;
        sys::setsockopt_int(
            s.as_fd(),
            libc::IPPROTO_IPV6,
            libc::IPV6_MTU_DISCOVER,
            libc::IPV6_PMTUDISC_DO,
        )?;
    }
    if reuse {
        s.set_reuse_port(true)?;
    }
    s.bind(&SockAddr::from(SocketAddr::new(ip, port)))?;
    Ok(s)
}

/// What a receive socket needs beyond [`udp_socket`]: its buffer, the
/// TOS / traffic class of each datagram, and (IPv6) zero UDP checksums
/// accepted, as RoCE peers may send them (the ICRC protects the payload).
pub(crate) fn receive_options(s: &Socket, v6: bool, recv_buffer: usize) -> io::Result<()> {
    grow_buffer(s, recv_buffer, true);
    if v6 {
        s.set_recv_tclass_v6(true)?;
        let _ = sys::setsockopt_int(s.as_fd(), libc::SOL_UDP, libc::UDP_NO_CHECK6_RX, 1);
    } else {
        s.set_recv_tos_v4(true)?;
    }
    Ok(())
}

/// Sets a socket buffer size, forcing past the sysctl limit when
/// privileged, and otherwise taking what the kernel allows.
pub(crate) fn grow_buffer(s: &Socket, bytes: usize, recv: bool) {
    use nix::sys::socket::{setsockopt, sockopt};
    let v = bytes.min(i32::MAX as usize);
    let forced = if recv {
        setsockopt(s, sockopt::RcvBufForce, &v)
    } else {
        setsockopt(s, sockopt::SndBufForce, &v)
    };
    if forced.is_err() {
        let _ = if recv {
            s.set_recv_buffer_size(v)
        } else {
            s.set_send_buffer_size(v)
        };
    }
}

struct Entry {
    sock: Socket,
    last_used: u64,
}

/// The cache.
pub(crate) struct PortSockets {
    ip: IpAddr,
    capacity: usize,
    reuse_port: bool,
    send_buffer: usize,
    /// Keyed by port with a fast unkeyed hash: ports are ours to choose,
    /// and the map is looked up on every send.
    map: FxHashMap<u16, Entry>,
    failed: Box<[u64; 1024]>,
    tick: u64,
    /// Sockets opened so far.
    pub(crate) opened: u64,
    /// Ports that could not be bound.
    pub(crate) bind_failures: u64,
    /// Sockets closed to make room.
    pub(crate) evictions: u64,
}

impl PortSockets {
    pub(crate) fn new(ip: IpAddr, capacity: usize, reuse_port: bool, send_buffer: usize) -> Self {
        PortSockets {
            ip,
            capacity,
            reuse_port,
            send_buffer,
            map: FxHashMap::default(),
            failed: Box::new([0; 1024]),
            tick: 0,
            opened: 0,
            bind_failures: 0,
            evictions: 0,
        }
    }

    /// Number of open sockets.
    pub(crate) fn len(&self) -> usize {
        self.map.len()
    }

    fn has_failed(&self, port: u16) -> bool {
        self.failed[usize::from(port / 64)] & (1 << (port % 64)) != 0
    }

    /// The socket for `port`, opening it if needed; `None` when the port
    /// cannot be bound (now or earlier) or the cache is disabled.
    pub(crate) fn get(&mut self, port: u16) -> Option<BorrowedFd<'_>> {
        if self.capacity == 0 || port == 0 || self.has_failed(port) {
            return None;
        }
        self.tick += 1;
        let tick = self.tick;
        // Two FxHash probes when the socket is open (every send looks it
        // up); returning the first probe's borrow would keep the map
        // borrowed on the opening path below too.
        if let Some(e) = self.map.get_mut(&port) {
            e.last_used = tick;
            return self.map.get(&port).map(|e| e.sock.as_fd());
        }
        if self.map.len() >= self.capacity {
            let oldest = self
                .map
                .iter()
                .min_by_key(|(_, e)| e.last_used)
                .map(|(p, _)| *p);
            if let Some(p) = oldest {
                self.map.remove(&p);
                self.evictions += 1;
            }
        }
        match udp_socket(self.ip, port, self.reuse_port) {
            Ok(sock) => {
                grow_buffer(&sock, self.send_buffer, false);
                // Nothing is ever read here: keep what a stray datagram
                // to this port could queue small.
                let _ = sock.set_recv_buffer_size(4096);
                self.opened += 1;
                let e = self.map.entry(port).or_insert(Entry {
                    sock,
                    last_used: tick,
                });
                Some(e.sock.as_fd())
            }
            Err(e) => {
                // Only a port someone else holds (or may not be used) is
                // given up for good; running out of descriptors is not
                // the port's fault: close the least recently used socket
                // so the next look finds one free.
                let port_refused = matches!(
                    e.kind(),
                    io::ErrorKind::AddrInUse
                        | io::ErrorKind::PermissionDenied
                        | io::ErrorKind::AddrNotAvailable
                );
                if port_refused {
                    self.failed[usize::from(port / 64)] |= 1 << (port % 64);
                } else if let Some(p) = self
                    .map
                    .iter()
                    .min_by_key(|(_, e)| e.last_used)
                    .map(|(p, _)| *p)
                {
                    self.map.remove(&p);
                    self.evictions += 1;
                }
                self.bind_failures += 1;
                None
            }
        }
    }
}
