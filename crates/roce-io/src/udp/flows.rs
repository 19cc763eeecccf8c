//! Flow sockets: steering a remote flow to the process that owns it
//! (docs/host.md, "Steering").
//!
//! Sharing an address ([`UdpConfig::share`](super::UdpConfig::share)),
//! every process binds the receive port with `SO_REUSEPORT` and the
//! kernel hands each datagram from another host to the member its hash
//! picks, which forwards it through a ring when another process owns it.
//! Linux's UDP lookup prefers a *connected* socket whose 4-tuple matches
//! exactly over the `SO_REUSEPORT` group (whose hash skips connected
//! members). So when this process is given a forwarded datagram from
//! source `S`, it opens a socket bound to its own address and port and
//! connected to `S`: from then on the kernel hands `S`'s datagrams to
//! this process directly.
//!
//! A bounded number of them ([`MAX_FLOWS`], least recently used evicted;
//! closing one returns the flow to the group). A source whose datagrams
//! this process forwards onward (several processes' QPs behind one remote
//! port) is never given a flow socket here, and one it has is closed
//! after [`ONWARD_LIMIT`] such datagrams: the owners would otherwise take
//! the flow from each other in turn.

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::{AsFd, BorrowedFd};

use nix::sys::epoll::{Epoll, EpollCreateFlags, EpollEvent, EpollFlags, EpollTimeout};
use rustc_hash::{FxHashMap, FxHashSet};
use socket2::Socket;

use super::{ports, UdpStats};
use crate::backend::{Nanos, PacketBatch};

/// Flow sockets per backend at most (one file descriptor each).
pub(super) const MAX_FLOWS: usize = 64;
/// Datagrams of a flow forwarded onward from this process before its
/// flow socket is closed.
pub(super) const ONWARD_LIMIT: u32 = 3;
/// Sources remembered as forwarded onward (forgotten all at once when
/// full: a flow then may be steered here once more, and closed again).
const MAX_ONWARD: usize = 1024;

/// How flow sockets are set up: as the backend's receive socket.
#[derive(Clone, Copy, Debug)]
pub(super) struct Setup {
    pub local: IpAddr,
    pub port: u16,
    pub recv_buffer: usize,
    pub gro: bool,
}

struct Flow {
    sock: Socket,
    peer: SocketAddr,
    last_used: Nanos,
    onward: u32,
}

/// The flow sockets of one backend, and an epoll set over them (token:
/// the slot) that the same-host path's wait set watches.
pub(super) struct Flows {
    setup: Setup,
    epoll: Epoll,
    slots: Vec<Option<Flow>>,
    by_peer: FxHashMap<SocketAddr, usize>,
    /// Sources this process forwarded onward: never steered here.
    onward: FxHashSet<SocketAddr>,
    /// Slots epoll said readable, still to read.
    ready: Vec<usize>,
    /// The backend left its address's group (`Backend::leave`).
    left: bool,
}

impl Flows {
    pub(super) fn new(setup: Setup) -> io::Result<Flows> {
        Ok(Flows {
            setup,
            epoll: Epoll::new(EpollCreateFlags::EPOLL_CLOEXEC)?,
            slots: Vec::new(),
            by_peer: FxHashMap::default(),
            onward: FxHashSet::default(),
            ready: Vec::new(),
            left: false,
        })
    }

    /// The epoll set: readable when a flow socket is.
    pub(super) fn wait_fd(&self) -> BorrowedFd<'_> {
        self.epoll.0.as_fd()
    }

    /// Whether there is any flow socket.
    pub(super) fn is_empty(&self) -> bool {
        self.by_peer.is_empty()
    }

    /// A datagram from `peer` reached this process through another's
    /// forwarding: opens a flow socket for `peer` unless it has one, the
    /// source is forwarded onward from here, it is no unicast source of
    /// this family, or the backend left. Failures leave things as they
    /// were (the flow keeps being forwarded).
    pub(super) fn forwarded_here(&mut self, now: Nanos, peer: SocketAddr, stats: &mut UdpStats) {
        if self.left || self.by_peer.contains_key(&peer) || self.onward.contains(&peer) {
            return;
        }
        let ip = peer.ip();
        let unicast = match ip {
            IpAddr::V4(a) => !a.is_broadcast() && !a.is_multicast(),
            IpAddr::V6(a) => !a.is_multicast(),
        };
        if !unicast
            || ip.is_unspecified()
            || peer.port() == 0
            || ip.is_ipv4() != self.setup.local.is_ipv4()
        {
            return;
        }
        if self.by_peer.len() >= MAX_FLOWS {
            let lru = self
                .slots
                .iter()
                .enumerate()
                .filter_map(|(i, f)| f.as_ref().map(|f| (f.last_used, i)))
                .min();
            if let Some((_, i)) = lru {
                self.close(i, stats);
            }
        }
        let Ok(sock) = self.open(peer) else { return };
        let i = match self.slots.iter().position(Option::is_none) {
            Some(i) => i,
            None => {
                self.slots.push(None);
                self.slots.len() - 1
            }
        };
        let ev = EpollEvent::new(EpollFlags::EPOLLIN, i as u64);
        if self.epoll.add(&sock, ev).is_err() {
            return; // closed: its flow goes back to the group
        }
        self.slots[i] = Some(Flow {
            sock,
            peer,
            last_used: now,
            onward: 0,
        });
        self.by_peer.insert(peer, i);
        stats.flow_sockets_opened += 1;
    }

    /// A socket as the backend's receive socket, connected to `peer`.
    fn open(&self, peer: SocketAddr) -> io::Result<Socket> {
        let s = &self.setup;
        let sock = ports::udp_socket(s.local, s.port, true)?;
        ports::receive_options(&sock, s.local.is_ipv6(), s.recv_buffer)?;
        if s.gro {
            // The backend splits what GRO coalesced; without it too.
            let _ = nix::sys::socket::setsockopt(
                &sock,
                nix::sys::socket::sockopt::UdpGroSegment,
                &true,
            );
        }
        sock.connect(&peer.into())?;
        Ok(sock)
    }

    /// A datagram from `peer` is forwarded onward from this process:
    /// `peer` is never steered here, and a flow socket it has is closed
    /// after [`ONWARD_LIMIT`] of them.
    pub(super) fn forwarded_onward(&mut self, peer: SocketAddr, stats: &mut UdpStats) {
        if self.onward.len() >= MAX_ONWARD && !self.onward.contains(&peer) {
            self.onward.clear();
        }
        self.onward.insert(peer);
        let Some(&i) = self.by_peer.get(&peer) else {
            return;
        };
        let Some(f) = self.slots.get_mut(i).and_then(Option::as_mut) else {
            return;
        };
        f.onward += 1;
        if f.onward >= ONWARD_LIMIT {
            self.close(i, stats);
        }
    }

    /// Closes flow socket `i`: its flow goes back to the group (what it
    /// had queued is lost, as UDP to a closed socket).
    pub(super) fn close(&mut self, i: usize, stats: &mut UdpStats) {
        if let Some(f) = self.slots.get_mut(i).and_then(Option::take) {
            let _ = self.epoll.delete(&f.sock);
            self.by_peer.remove(&f.peer);
            self.ready.retain(|&r| r != i);
            stats.flow_sockets_closed += 1;
        }
    }

    /// Asks epoll which flow sockets are readable (one `epoll_wait`
    /// without waiting); [`next_ready`](Self::next_ready) gives them.
    pub(super) fn poll_ready(&mut self) {
        self.ready.clear();
        let mut events = [EpollEvent::empty(); MAX_FLOWS];
        let n = self
            .epoll
            .wait(&mut events, EpollTimeout::ZERO)
            .unwrap_or(0);
        for e in &events[..n] {
            if let Ok(i) = usize::try_from(e.data()) {
                self.ready.push(i);
            }
        }
    }

    /// The next readable flow socket's slot.
    pub(super) fn next_ready(&mut self) -> Option<usize> {
        self.ready.pop()
    }

    /// Flow socket `i`, if open.
    pub(super) fn sock(&self, i: usize) -> Option<BorrowedFd<'_>> {
        self.slots.get(i)?.as_ref().map(|f| f.sock.as_fd())
    }

    /// Flow socket `i` had datagrams at `now`.
    pub(super) fn touch(&mut self, i: usize, now: Nanos) {
        if let Some(f) = self.slots.get_mut(i).and_then(Option::as_mut) {
            f.last_used = now;
        }
    }

    /// The backend leaves its address's group: every flow socket is
    /// connected to the discard port of its own address, as the receive
    /// socket is (no new datagram reaches them, those queued stay
    /// readable), and none is opened any more.
    pub(super) fn leave(&mut self) {
        self.left = true;
        let nowhere = SocketAddr::new(self.setup.local, 9);
        for f in self.slots.iter().flatten() {
            let _ = f.sock.connect(&nowhere.into());
        }
    }
}

impl super::UdpBackend {
    /// Reads the flow sockets epoll says are readable (one `epoll_wait`
    /// per call, none without flow sockets) into `batch`, as the receive
    /// socket's datagrams are read; a flow socket whose read fails is
    /// closed.
    pub(super) fn recv_flows(&mut self, now: Nanos, batch: &mut PacketBatch) -> io::Result<()> {
        match self.flows.as_mut() {
            Some(f) if !f.is_empty() => f.poll_ready(),
            _ => return Ok(()),
        }
        while let Some(i) = self.flows.as_mut().and_then(Flows::next_ready) {
            for _ in 0..super::RX_ROUNDS {
                self.push_rx(batch);
                if batch.is_full() {
                    // Still readable: the next receive's look finds it.
                    return Ok(());
                }
                let want = if self.offloads.gro {
                    usize::MAX
                } else {
                    batch.capacity() - batch.len()
                };
                match self.recv_on(super::RxSocket::Flow(i), want) {
                    Ok(0) => break,
                    Ok(_) => {
                        self.stats.rx_syscalls += 1;
                        if let Some(f) = self.flows.as_mut() {
                            f.touch(i, now);
                        }
                    }
                    Err(_) => {
                        if let Some(f) = self.flows.as_mut() {
                            f.close(i, &mut self.stats);
                        }
                        break;
                    }
                }
            }
        }
        self.push_rx(batch);
        Ok(())
    }

    /// After the rings were read into `batch` from index `from`: the
    /// source of each datagram another process forwarded here is given a
    /// flow socket (docs/host.md, "Steering").
    pub(super) fn steer_forwarded(&mut self, now: Nanos, batch: &PacketBatch, from: usize) {
        let Some(flows) = self.flows.as_mut() else {
            return;
        };
        for i in from..batch.len() {
            if !batch.meta(i).forwarded {
                continue;
            }
            if let Some(h) = batch.header(i) {
                flows.forwarded_here(now, h.src, &mut self.stats);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    fn flows() -> (Socket, Flows) {
        let lo = IpAddr::V4(Ipv4Addr::LOCALHOST);
        let main = ports::udp_socket(lo, 0, true).unwrap();
        let port = main.local_addr().unwrap().as_socket().unwrap().port();
        let setup = Setup {
            local: lo,
            port,
            recv_buffer: 1 << 16,
            gro: false,
        };
        (main, Flows::new(setup).unwrap())
    }

    fn peer(port: u16) -> SocketAddr {
        SocketAddr::new(IpAddr::V4(Ipv4Addr::new(127, 0, 0, 5)), port)
    }

    #[test]
    fn opened_once_closed_when_forwarded_onward_never_reopened() {
        let (_main, mut f) = flows();
        let mut s = UdpStats::default();
        f.forwarded_here(1, peer(0xC000), &mut s);
        f.forwarded_here(2, peer(0xC000), &mut s);
        assert_eq!(s.flow_sockets_opened, 1);
        assert!(f.sock(0).is_some());
        for _ in 1..ONWARD_LIMIT {
            f.forwarded_onward(peer(0xC000), &mut s);
        }
        assert_eq!(s.flow_sockets_closed, 0);
        f.forwarded_onward(peer(0xC000), &mut s);
        assert_eq!(s.flow_sockets_closed, 1);
        assert!(f.is_empty());
        f.forwarded_here(3, peer(0xC000), &mut s);
        assert_eq!(
            s.flow_sockets_opened, 1,
            "forwarded onward: not steered here"
        );
        // Sources that are no flow: nothing.
        let bad = [
            SocketAddr::new(IpAddr::V4(Ipv4Addr::BROADCAST), 5),
            SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), 5),
            SocketAddr::new(IpAddr::V4(Ipv4Addr::new(224, 0, 0, 1)), 5),
            SocketAddr::new("::1".parse().unwrap(), 5),
            peer(0),
        ];
        for p in bad {
            f.forwarded_here(4, p, &mut s);
        }
        assert_eq!(s.flow_sockets_opened, 1);
    }

    #[test]
    fn bounded_least_recently_used_goes() {
        let (_main, mut f) = flows();
        let mut s = UdpStats::default();
        for k in 0..MAX_FLOWS as u16 {
            f.forwarded_here(Nanos::from(k) + 10, peer(0xC000 + k), &mut s);
        }
        f.touch(0, 1_000);
        f.forwarded_here(2_000, peer(0xF000), &mut s);
        assert_eq!(s.flow_sockets_opened, MAX_FLOWS as u64 + 1);
        assert_eq!(s.flow_sockets_closed, 1);
        assert!(f.by_peer.contains_key(&peer(0xC000)), "used last: kept");
        assert!(!f.by_peer.contains_key(&peer(0xC001)), "least recent: gone");
        f.leave();
        f.forwarded_here(3_000, peer(0xF001), &mut s);
        assert_eq!(s.flow_sockets_opened, MAX_FLOWS as u64 + 1, "left");
    }
}
