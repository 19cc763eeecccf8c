//! The same-host path of [`UdpBackend`](super::UdpBackend): datagrams to
//! a backend of another process on this host (same network namespace,
//! same user) go through a ring in shared memory instead of the kernel's
//! UDP stack (docs/shm.md).
//!
//! Each backend listens on an abstract Unix socket named after its UDP
//! address ([`link`]); a backend that shares its address with other
//! processes (`UdpConfig::share`, docs/host.md) also on a name of its own,
//! which its host table slot holds, and its peers link to it by that name
//! (a [`Dest::Proc`]) rather than by address. The first datagram to a
//! destination without a route tries that name: when a peer answers, the sender makes a ring
//! ([`ring`]) and an eventfd, hands both over with a hello, and sends by
//! UDP until the peer has taken them; from then on the destination's
//! datagrams go into the ring. A destination with no such peer is asked
//! again after [`RETRY`]. A full ring drops the datagram, as a full
//! socket buffer does, and RC's retransmission recovers it.
//!
//! The receiver reads its rings after its UDP socket in every receive and
//! hands on each datagram's UDP payload, as for a socket's datagram, with
//! the header its record tells (source address, port, TOS, and the IPv4
//! identification when the record's header is exact: the sender's
//! engine's to the bit, so the receiving engine checks the ICRC; the
//! original sender's, for a datagram another process forwarded) and the
//! record's forwarded flag.
//! Before a thread sleeps on the backend's descriptor, which is an
//! epoll set over the socket, the listener, the connections and the
//! peers' eventfds, it calls `Backend::prepare_wait`, which asks every
//! ring's producer to ring its eventfd at the next record: a receiver
//! that keeps polling costs its senders no system call.

mod incoming;
mod link;
mod mem;
mod ring;

use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use nix::sys::epoll::{Epoll, EpollCreateFlags, EpollEvent, EpollFlags, EpollTimeout};
use nix::sys::eventfd::{EfdFlags, EventFd};
use rustc_hash::FxHashMap;

use roce_wire::RxHeader;

use super::UdpStats;
use crate::backend::{Nanos, PacketBatch, RxMeta};
use crate::host::SlotName;
pub(super) use link::process_name;
use ring::{Consumer, Producer, Push};
pub(super) use ring::{Made, RecMeta};

/// The record area of each ring a backend makes (`UdpConfig::shm_ring`).
pub(crate) const DEFAULT_RING: usize = 4 << 20;
/// Most rings a backend reads, and most it writes.
const MAX_LINKS: usize = 64;
/// Most destinations remembered (those without a peer are forgotten
/// first).
const MAX_ROUTES: usize = 1024;
/// A destination with no same-host peer is asked again after this long.
pub(crate) const RETRY: Nanos = 1_000_000_000;
/// A hello not answered (or, on the receiving side, not sent) within this
/// long is given up.
const HANDSHAKE: Nanos = 1_000_000_000;
/// How often a sender looks for the answer to its hello.
const ANSWER_POLL: Nanos = 20_000;
/// How often a sender checks that the reader of a ring is still there.
const LIVENESS: Nanos = 100_000_000;
/// How often a busy receiver looks at its listener and connections.
const HOUSEKEEPING: Nanos = 1_000_000;

/// Most connections taken per look at the listener.
const MAX_ACCEPTS: usize = 16;

/// Epoll tokens: the UDP socket, the address's listener, this process's
/// listener, then two per incoming link (its connection, its doorbell).
const TOKEN_UDP: u64 = 0;
const TOKEN_LISTENER: u64 = 1;
const TOKEN_OWN: u64 = 2;
const FIRST_LINK_TOKEN: u64 = 3;
/// The epoll set of the backend's flow sockets (`udp/flows.rs`).
const TOKEN_FLOWS: u64 = u64::MAX;
/// Outgoing link `i`'s connection, watched for its reader's end, is
/// `FIRST_OUT_TOKEN + i` (above every incoming link's token).
const FIRST_OUT_TOKEN: u64 = 1 << 40;
fn out_token(i: usize) -> u64 {
    FIRST_OUT_TOKEN + i as u64
}
fn conn_token(i: usize) -> u64 {
    FIRST_LINK_TOKEN + 2 * i as u64
}
fn bell_token(i: usize) -> u64 {
    FIRST_LINK_TOKEN + 1 + 2 * i as u64
}

/// A ring this backend reads.
struct Incoming {
    conn: OwnedFd,
    state: InState,
}

enum InState {
    /// Accepted, the hello not read yet.
    Waiting { since: Nanos },
    Active {
        ring: Consumer,
        doorbell: OwnedFd,
        /// The sender has gone: read what is left, then drop.
        closing: bool,
    },
}

/// Whom a link goes to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) enum Dest {
    /// The backend listening on the name of a UDP address (docs/shm.md).
    Addr(SocketAddr),
    /// The backend of another process listening on a name of its own,
    /// from its host table slot (docs/host.md): one link per process,
    /// whichever of the addresses it is reached for.
    Proc(SlotName),
}

/// The way to a per-process destination ([`Shm::route_proc`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum ProcRoute {
    /// Link `i`, taken by the peer.
    Link(usize),
    /// Link `i`, its hello not answered yet: records written now are
    /// read once the peer takes the ring (or lost if it refuses).
    Pending(usize),
    /// Refused lately, or no link can be made now: not through a ring.
    Udp,
    /// Nobody has the name: its process is gone (reap its slot).
    Gone,
}

/// What [`Shm::open`] made of a destination.
enum Opened {
    Link(usize),
    /// Nobody listens on the name.
    NoPeer,
    Failed,
}

/// A ring this backend writes.
struct Outgoing {
    dst: Dest,
    conn: OwnedFd,
    ring: Producer,
    doorbell: EventFd,
    /// The peer took the ring.
    active: bool,
    since: Nanos,
    next_check: Nanos,
    /// Which link this is, of all this path made (a slot is reused).
    serial: u64,
}

#[derive(Clone, Copy, Debug)]
enum Route {
    Link(usize),
    Udp { retry_at: Nanos },
}

/// The route to each destination, in one map per kind: every datagram
/// sent by address looks its route up, so that lookup hashes and
/// compares a socket address alone, not a [`Dest`] sized for a name.
#[derive(Default)]
struct Routes {
    by_addr: FxHashMap<SocketAddr, Route>,
    by_proc: FxHashMap<SlotName, Route>,
}

impl Routes {
    fn get(&self, d: &Dest) -> Option<Route> {
        match d {
            Dest::Addr(a) => self.by_addr.get(a).copied(),
            Dest::Proc(n) => self.by_proc.get(n).copied(),
        }
    }

    fn insert(&mut self, d: Dest, r: Route) {
        match d {
            Dest::Addr(a) => self.by_addr.insert(a, r),
            Dest::Proc(n) => self.by_proc.insert(n, r),
        };
    }

    fn remove(&mut self, d: &Dest) {
        match d {
            Dest::Addr(a) => self.by_addr.remove(a),
            Dest::Proc(n) => self.by_proc.remove(n),
        };
    }

    fn len(&self) -> usize {
        self.by_addr.len() + self.by_proc.len()
    }

    /// Forgets every destination without a link.
    fn keep_links(&mut self) {
        self.by_addr.retain(|_, r| matches!(r, Route::Link(_)));
        self.by_proc.retain(|_, r| matches!(r, Route::Link(_)));
    }
}

/// The same-host path's state in a [`UdpBackend`](super::UdpBackend).
pub(super) struct Shm {
    local: SocketAddr,
    cap: usize,
    piece: Option<usize>,
    epoll: Epoll,
    /// On the address's name, when this backend got it.
    listener: Option<OwnedFd>,
    /// On this process's own name (sharing the address, docs/host.md).
    own: Option<OwnedFd>,
    incoming: Vec<Option<Incoming>>,
    outgoing: Vec<Option<Outgoing>>,
    routes: Routes,
    /// Outgoing links written to since the last flush.
    touched: Vec<usize>,
    next_housekeeping: Nanos,
    rx_next: usize,
    /// The serial of the next link made.
    next_serial: u64,
}

impl Shm {
    /// The path of the backend receiving on `local` with socket `udp`:
    /// rings of `cap` bytes, copies in `piece`s. Without a listener
    /// (another socket has the name) it still sends. With `own` (a name
    /// from [`process_name`]), it listens on that name too, which must be
    /// free.
    pub(super) fn new(
        local: SocketAddr,
        udp: BorrowedFd<'_>,
        cap: usize,
        piece: Option<usize>,
        own: Option<&[u8]>,
    ) -> io::Result<Shm> {
        let epoll = Epoll::new(EpollCreateFlags::EPOLL_CLOEXEC)?;
        epoll.add(udp, EpollEvent::new(EpollFlags::EPOLLIN, TOKEN_UDP))?;
        let listener = link::listen_on(local).ok();
        if let Some(l) = &listener {
            epoll.add(l, EpollEvent::new(EpollFlags::EPOLLIN, TOKEN_LISTENER))?;
        }
        let own = match own {
            Some(n) => {
                let l = link::listen_named(n)?;
                epoll.add(&l, EpollEvent::new(EpollFlags::EPOLLIN, TOKEN_OWN))?;
                Some(l)
            }
            None => None,
        };
        Ok(Shm {
            local,
            cap,
            piece,
            epoll,
            listener,
            own,
            incoming: Vec::new(),
            outgoing: Vec::new(),
            routes: Routes::default(),
            touched: Vec::new(),
            next_housekeeping: 0,
            rx_next: 0,
            next_serial: 0,
        })
    }

    /// The descriptor to sleep on: readable when the socket, a ring's
    /// doorbell, the listener or a connection is.
    pub(super) fn wait_fd(&self) -> BorrowedFd<'_> {
        self.epoll.0.as_fd()
    }

    /// Adds the epoll set of the backend's flow sockets (docs/host.md,
    /// "Steering") to the set to sleep on: readable when one of them is.
    pub(super) fn watch_flows(&self, flows: BorrowedFd<'_>) -> io::Result<()> {
        self.epoll
            .add(flows, EpollEvent::new(EpollFlags::EPOLLIN, TOKEN_FLOWS))
            .map_err(io::Error::from)
    }

    /// Whether this backend listens for same-host peers.
    pub(super) fn listening(&self) -> bool {
        self.listener.is_some() || self.own.is_some()
    }

    /// The outgoing link datagrams to `dst` take now, if any; starts the
    /// handshake with a destination not tried lately.
    pub(super) fn route(
        &mut self,
        now: Nanos,
        dst: SocketAddr,
        stats: &mut UdpStats,
    ) -> Option<usize> {
        if dst == self.local {
            return None;
        }
        match self.routes.get(&Dest::Addr(dst)) {
            Some(Route::Link(i)) => self.check_link(now, i, stats),
            Some(Route::Udp { retry_at }) if now < retry_at => None,
            _ => {
                self.open(now, Dest::Addr(dst), stats);
                None
            }
        }
    }

    /// The way to the backend of another process named `name` in a host
    /// table; starts the handshake when there is no link.
    pub(super) fn route_proc(
        &mut self,
        now: Nanos,
        name: &SlotName,
        stats: &mut UdpStats,
    ) -> ProcRoute {
        let dest = Dest::Proc(*name);
        if let Some(Route::Link(i)) = self.routes.get(&dest) {
            match self.check_link(now, i, stats) {
                Some(i) => return ProcRoute::Link(i),
                None if self.outgoing.get(i).is_some_and(Option::is_some) => {
                    return ProcRoute::Pending(i)
                }
                // Closed just now: a reader that went away is tried
                // again at once below (and found gone if its process
                // died), one that refused after a while.
                None => {}
            }
        }
        match self.routes.get(&dest) {
            Some(Route::Udp { retry_at }) if now < retry_at => ProcRoute::Udp,
            Some(Route::Link(i)) => ProcRoute::Pending(i),
            _ => match self.open(now, dest, stats) {
                Opened::Link(i) => ProcRoute::Pending(i),
                Opened::NoPeer => ProcRoute::Gone,
                Opened::Failed => ProcRoute::Udp,
            },
        }
    }

    /// Outgoing link `i` if it is (still) the active link of that
    /// `serial`: for a sender that remembers the link of its last
    /// destination.
    pub(super) fn active_link(
        &mut self,
        now: Nanos,
        i: usize,
        serial: u64,
        stats: &mut UdpStats,
    ) -> Option<usize> {
        let same = self.outgoing.get(i)?.as_ref()?.serial == serial;
        if same {
            self.check_link(now, i, stats)
        } else {
            None
        }
    }

    /// The serial of outgoing link `i`.
    pub(super) fn link_serial(&self, i: usize) -> Option<u64> {
        Some(self.outgoing.get(i)?.as_ref()?.serial)
    }

    /// An outgoing link's answer or liveness, when due.
    fn check_link(&mut self, now: Nanos, i: usize, stats: &mut UdpStats) -> Option<usize> {
        let o = self.outgoing.get_mut(i)?.as_mut()?;
        if now < o.next_check {
            return o.active.then_some(i);
        }
        if o.active {
            o.next_check = now.saturating_add(LIVENESS);
            if link::closed(&o.conn) {
                self.close_out(now, i, true);
                return None;
            }
            return Some(i);
        }
        o.next_check = now.saturating_add(ANSWER_POLL);
        match link::read_answer(&o.conn) {
            link::Answer::Accepted => {
                o.active = true;
                o.next_check = now.saturating_add(LIVENESS);
                stats.shm_links_out += 1;
                Some(i)
            }
            link::Answer::Nothing if now.saturating_sub(o.since) < HANDSHAKE => None,
            _ => {
                stats.shm_refused += 1;
                self.close_out(now, i, false);
                None
            }
        }
    }

    /// Drops outgoing link `i`. `gone`: its reader closed; a
    /// per-process destination is then tried again at once (and found
    /// gone, its slot reaped, if its process died), an address after
    /// [`RETRY`].
    fn close_out(&mut self, now: Nanos, i: usize, gone: bool) {
        if let Some(o) = self.outgoing.get_mut(i).and_then(Option::take) {
            let _ = self.epoll.delete(&o.conn);
            if gone && matches!(o.dst, Dest::Proc(_)) {
                self.routes.remove(&o.dst);
            } else {
                self.routes.insert(
                    o.dst,
                    Route::Udp {
                        retry_at: now.saturating_add(RETRY),
                    },
                );
            }
        }
        self.touched.retain(|t| *t != i);
    }

    /// Says hello to the backend of `dst`, if there is one.
    fn open(&mut self, now: Nanos, dst: Dest, stats: &mut UdpStats) -> Opened {
        if self.routes.len() >= MAX_ROUTES {
            self.routes.keep_links();
            if self.routes.len() >= MAX_ROUTES {
                return Opened::Failed;
            }
        }
        let slot = free_slot(&mut self.outgoing);
        let made = slot
            .ok_or_else(|| io::Error::other("too many links"))
            .and_then(|i| {
                let conn = match &dst {
                    Dest::Addr(a) => link::connect_to(*a)?,
                    Dest::Proc(n) => link::connect_named(n.as_bytes())?,
                };
                let ring = Producer::create(self.cap)?.with_own_source(self.local.ip());
                let doorbell = EventFd::from_flags(EfdFlags::EFD_NONBLOCK | EfdFlags::EFD_CLOEXEC)?;
                link::send_hello(
                    &conn,
                    self.local,
                    self.cap,
                    ring.mem().fd().as_fd(),
                    doorbell.as_fd(),
                )?;
                Ok((i, conn, ring, doorbell))
            });
        match made {
            Ok((i, conn, ring, doorbell)) => {
                // The reader's end (its process exiting or killed) is
                // seen at the next look at the descriptors, not at the
                // next liveness check: records written meanwhile are lost.
                let _ = self
                    .epoll
                    .add(&conn, EpollEvent::new(EpollFlags::EPOLLRDHUP, out_token(i)));
                self.outgoing[i] = Some(Outgoing {
                    dst,
                    conn,
                    ring,
                    doorbell,
                    active: false,
                    since: now,
                    next_check: now,
                    serial: self.next_serial,
                });
                self.next_serial += 1;
                self.routes.insert(dst, Route::Link(i));
                Opened::Link(i)
            }
            Err(e) => {
                if e.kind() == io::ErrorKind::PermissionDenied {
                    stats.shm_refused += 1;
                }
                self.routes.insert(
                    dst,
                    Route::Udp {
                        retry_at: now.saturating_add(RETRY),
                    },
                );
                if e.kind() == io::ErrorKind::ConnectionRefused {
                    Opened::NoPeer
                } else {
                    Opened::Failed
                }
            }
        }
    }

    /// Writes one datagram's UDP payload into link `i`'s ring (visible at
    /// [`flush`](Self::flush)), with what the record says about it
    /// (`meta`: its source, TOS, flags); a full ring drops it. Returns
    /// whether the link took it (written, or dropped as a full socket
    /// buffer drops): false when there is no such link or it broke.
    pub(super) fn push(
        &mut self,
        now: Nanos,
        i: usize,
        meta: &RecMeta,
        payload: &[u8],
        stats: &mut UdpStats,
    ) -> bool {
        let piece = self.piece;
        self.push_with(now, i, payload.len(), stats, |r| {
            r.push(meta, payload, piece)
        })
    }

    /// [`push`](Self::push) of a datagram this backend's engine sent from
    /// `sport` with `tos`: its own address, exact, not forwarded (the
    /// ring's short record); `made`: its bytes as the engine made them
    /// ([`crate::PacketBatch::intact`]), its ICRC left out
    /// ([`crate::PacketBatch::icrc_present`]).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn push_own(
        &mut self,
        now: Nanos,
        i: usize,
        sport: u16,
        tos: u8,
        made: Made,
        payload: &[u8],
        stats: &mut UdpStats,
    ) -> bool {
        let piece = self.piece;
        self.push_with(now, i, payload.len(), stats, |r| {
            r.push_own(sport, tos, made, payload, piece)
        })
    }

    /// Builds a datagram straight into link `i`'s ring: `f` gets room
    /// for up to `max` bytes at the tail ([`Producer::reserve`]) and
    /// says what it built there: a whole IP datagram to commit
    /// ([`InRing`], counted as [`push_own`](Self::push_own) counts it),
    /// or nothing (the room lapses). `None`, without calling `f`, when
    /// the link is not there or its ring has no room (the datagram then
    /// goes the usual way, which counts the drop).
    pub(super) fn build_in<R>(
        &mut self,
        now: Nanos,
        i: usize,
        max: usize,
        stats: &mut UdpStats,
        f: impl FnOnce(&mut [u8]) -> (R, Option<InRing>),
    ) -> Option<(R, bool)> {
        let o = self.outgoing.get_mut(i).and_then(Option::as_mut)?;
        let mut r = match o.ring.reserve(max) {
            Ok(r) => r?,
            Err(_) => {
                stats.shm_broken += 1;
                self.close_out(now, i, false);
                return None;
            }
        };
        // SAFETY: the producer lives in `self.outgoing[i]`, which `f`
        // cannot reach (it gets the room alone), and writes no other
        // record until the commit below; the reader does not look past
        // the published tail.
        let (out, commit) = f(unsafe { r.room() });
        let Some(c) = commit else {
            return Some((out, false));
        };
        let ring = self.push_with(now, i, c.payload_len, stats, |p| {
            p.commit(r, c.sport, c.tos, c.made, c.len)
        });
        Some((out, ring))
    }

    fn push_with(
        &mut self,
        now: Nanos,
        i: usize,
        len: usize,
        stats: &mut UdpStats,
        write: impl FnOnce(&mut Producer) -> Result<Push, ring::Broken>,
    ) -> bool {
        let Some(o) = self.outgoing.get_mut(i).and_then(Option::as_mut) else {
            return false;
        };
        match write(&mut o.ring) {
            Ok(Push::Written) => {
                stats.shm_tx_datagrams += 1;
                stats.shm_tx_bytes += len as u64;
                if !self.touched.contains(&i) {
                    self.touched.push(i);
                }
                true
            }
            Ok(Push::Full) => {
                stats.shm_tx_full_drops += 1;
                // A reader that went away leaves its ring full: look now
                // rather than at the next liveness check.
                if link::closed(&o.conn) {
                    self.close_out(now, i, true);
                }
                true
            }
            Ok(Push::TooBig) => {
                stats.tx_errors += 1;
                false
            }
            Err(_) => {
                stats.shm_broken += 1;
                self.close_out(now, i, false);
                false
            }
        }
    }

    /// Publishes what [`push`](Self::push) wrote and rings the doorbells
    /// of readers that asked.
    pub(super) fn flush(&mut self, stats: &mut UdpStats) {
        for i in self.touched.drain(..) {
            if let Some(o) = self.outgoing.get_mut(i).and_then(Option::as_mut) {
                if o.ring.publish() {
                    stats.shm_doorbells += 1;
                    let _ = o.doorbell.write(1);
                }
            }
        }
    }
}

/// A datagram built in a ring ([`Shm::build_in`]): a whole IP datagram
/// of `len` bytes whose UDP payload is `payload_len`, sent from `sport`
/// with `tos`, made as `made` says.
#[derive(Clone, Copy, Debug)]
pub(super) struct InRing {
    pub(super) sport: u16,
    pub(super) tos: u8,
    pub(super) made: Made,
    pub(super) len: usize,
    pub(super) payload_len: usize,
}

/// The first free slot of `v`, growing it up to [`MAX_LINKS`].
fn free_slot<T>(v: &mut Vec<Option<T>>) -> Option<usize> {
    if let Some(i) = v.iter().position(Option::is_none) {
        return Some(i);
    }
    if v.len() < MAX_LINKS {
        v.push(None);
        return Some(v.len() - 1);
    }
    None
}

#[cfg(test)]
mod tests;
