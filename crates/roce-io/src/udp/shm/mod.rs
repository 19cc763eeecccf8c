//! The same-host path of [`UdpBackend`](super::UdpBackend): datagrams to
//! a backend of another process on this host (same network namespace,
//! same user) go through a ring in shared memory instead of the kernel's
//! UDP stack (docs/shm.md).
//!
//! Each backend listens on an abstract Unix socket named after its UDP
//! address ([`link`]). The first datagram to a destination without a
//! route tries that name: when a peer answers, the sender makes a ring
//! ([`ring`]) and an eventfd, hands both over with a hello, and sends by
//! UDP until the peer has taken them; from then on the destination's
//! datagrams go into the ring. A destination with no such peer is asked
//! again after [`RETRY`]. A full ring drops the datagram, as a full
//! socket buffer does, and RC's retransmission recovers it.
//!
//! The receiver reads its rings after its UDP socket in every receive,
//! rebuilds each datagram's IP and UDP header as for a socket's datagram
//! (source: the address in the hello; source port and TOS: the record's)
//! and hands it on with the header marked exact: it is the sender's
//! engine's to the bit, so the receiving engine checks the ICRC. Before a thread sleeps on the backend's descriptor, which is an
//! epoll set over the socket, the listener, the connections and the
//! peers' eventfds, it calls `Backend::prepare_wait`, which asks every
//! ring's producer to ring its eventfd at the next record: a receiver
//! that keeps polling costs its senders no system call.

mod link;
mod mem;
mod ring;

use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use nix::sys::epoll::{Epoll, EpollCreateFlags, EpollEvent, EpollFlags, EpollTimeout};
use nix::sys::eventfd::{EfdFlags, EventFd};
use rustc_hash::FxHashMap;

use super::hdr::{self, RxHdr};
use super::UdpStats;
use crate::backend::{Nanos, PacketBatch, RxMeta};
use ring::{Consumer, Producer, Push};

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

/// Epoll tokens: the UDP socket, the listener, then two per incoming
/// link (its connection, its doorbell).
const TOKEN_UDP: u64 = 0;
const TOKEN_LISTENER: u64 = 1;
fn conn_token(i: usize) -> u64 {
    2 + 2 * i as u64
}
fn bell_token(i: usize) -> u64 {
    3 + 2 * i as u64
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
        /// The sender's UDP address: the datagrams' source.
        from: SocketAddr,
        /// The sender has gone: read what is left, then drop.
        closing: bool,
    },
}

/// A ring this backend writes.
struct Outgoing {
    dst: SocketAddr,
    conn: OwnedFd,
    ring: Producer,
    doorbell: EventFd,
    /// The peer took the ring.
    active: bool,
    since: Nanos,
    next_check: Nanos,
}

#[derive(Clone, Copy, Debug)]
enum Route {
    Link(usize),
    Udp { retry_at: Nanos },
}

/// The same-host path's state in a [`UdpBackend`](super::UdpBackend).
pub(super) struct Shm {
    local: SocketAddr,
    cap: usize,
    piece: Option<usize>,
    epoll: Epoll,
    listener: Option<OwnedFd>,
    incoming: Vec<Option<Incoming>>,
    outgoing: Vec<Option<Outgoing>>,
    routes: FxHashMap<SocketAddr, Route>,
    /// Outgoing links written to since the last flush.
    touched: Vec<usize>,
    next_housekeeping: Nanos,
    rx_next: usize,
}

impl Shm {
    /// The path of the backend receiving on `local` with socket `udp`:
    /// rings of `cap` bytes, copies in `piece`s. Without a listener
    /// (another socket has the name) it still sends.
    pub(super) fn new(
        local: SocketAddr,
        udp: BorrowedFd<'_>,
        cap: usize,
        piece: Option<usize>,
    ) -> io::Result<Shm> {
        let epoll = Epoll::new(EpollCreateFlags::EPOLL_CLOEXEC)?;
        epoll.add(udp, EpollEvent::new(EpollFlags::EPOLLIN, TOKEN_UDP))?;
        let listener = link::listen_on(local).ok();
        if let Some(l) = &listener {
            epoll.add(l, EpollEvent::new(EpollFlags::EPOLLIN, TOKEN_LISTENER))?;
        }
        Ok(Shm {
            local,
            cap,
            piece,
            epoll,
            listener,
            incoming: Vec::new(),
            outgoing: Vec::new(),
            routes: FxHashMap::default(),
            touched: Vec::new(),
            next_housekeeping: 0,
            rx_next: 0,
        })
    }

    /// The descriptor to sleep on: readable when the socket, a ring's
    /// doorbell, the listener or a connection is.
    pub(super) fn wait_fd(&self) -> BorrowedFd<'_> {
        self.epoll.0.as_fd()
    }

    /// Whether this backend listens for same-host peers.
    pub(super) fn listening(&self) -> bool {
        self.listener.is_some()
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
        match self.routes.get(&dst).copied() {
            Some(Route::Link(i)) => self.check_link(now, i, stats),
            Some(Route::Udp { retry_at }) if now < retry_at => None,
            _ => {
                self.open(now, dst, stats);
                None
            }
        }
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
                self.close_out(now, i);
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
                self.close_out(now, i);
                None
            }
        }
    }

    fn close_out(&mut self, now: Nanos, i: usize) {
        if let Some(o) = self.outgoing.get_mut(i).and_then(Option::take) {
            self.routes.insert(
                o.dst,
                Route::Udp {
                    retry_at: now.saturating_add(RETRY),
                },
            );
        }
        self.touched.retain(|t| *t != i);
    }

    /// Says hello to the backend receiving on `dst`, if there is one.
    fn open(&mut self, now: Nanos, dst: SocketAddr, stats: &mut UdpStats) {
        if self.routes.len() >= MAX_ROUTES {
            self.routes.retain(|_, r| matches!(r, Route::Link(_)));
            if self.routes.len() >= MAX_ROUTES {
                return;
            }
        }
        let slot = free_slot(&mut self.outgoing);
        let made = slot
            .ok_or_else(|| io::Error::other("too many links"))
            .and_then(|i| {
                let conn = link::connect_to(dst)?;
                let ring = Producer::create(self.cap)?;
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
                self.outgoing[i] = Some(Outgoing {
                    dst,
                    conn,
                    ring,
                    doorbell,
                    active: false,
                    since: now,
                    next_check: now,
                });
                self.routes.insert(dst, Route::Link(i));
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
            }
        }
    }

    /// Writes one datagram's UDP payload into link `i`'s ring (visible at
    /// [`flush`](Self::flush)); a full ring drops it.
    pub(super) fn push(
        &mut self,
        now: Nanos,
        i: usize,
        sport: u16,
        tos: u8,
        payload: &[u8],
        stats: &mut UdpStats,
    ) {
        let Some(o) = self.outgoing.get_mut(i).and_then(Option::as_mut) else {
            return;
        };
        match o.ring.push(sport, tos, payload, self.piece) {
            Ok(Push::Written) => {
                stats.shm_tx_datagrams += 1;
                stats.shm_tx_bytes += payload.len() as u64;
                if !self.touched.contains(&i) {
                    self.touched.push(i);
                }
            }
            Ok(Push::Full) => {
                stats.shm_tx_full_drops += 1;
                // A reader that went away leaves its ring full: look now
                // rather than at the next liveness check.
                if link::closed(&o.conn) {
                    self.close_out(now, i);
                }
            }
            Ok(Push::TooBig) => stats.tx_errors += 1,
            Err(_) => {
                stats.shm_broken += 1;
                self.close_out(now, i);
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

    /// Whether the listener and connections are due a look even though
    /// receives keep finding datagrams.
    pub(super) fn housekeeping_due(&self, now: Nanos) -> bool {
        now >= self.next_housekeeping
    }

    /// Looks at every descriptor without waiting: takes new peers and
    /// their hellos, notices peers that went, empties doorbells. Returns
    /// whether the UDP socket is readable.
    pub(super) fn poll_events(&mut self, now: Nanos, stats: &mut UdpStats) -> bool {
        self.next_housekeeping = now.saturating_add(HOUSEKEEPING);
        let mut events = [EpollEvent::empty(); 32];
        let n = self
            .epoll
            .wait(&mut events, EpollTimeout::ZERO)
            .unwrap_or(0);
        let mut udp = false;
        for e in &events[..n] {
            match e.data() {
                TOKEN_UDP => udp = true,
                TOKEN_LISTENER => self.accept(now, stats),
                t => {
                    let i = ((t - 2) / 2) as usize;
                    if t % 2 == 0 {
                        self.conn_ready(i, stats);
                    } else if let Some(Incoming {
                        state: InState::Active { doorbell, .. },
                        ..
                    }) = self.incoming.get(i).and_then(Option::as_ref)
                    {
                        let mut b = [0u8; 8];
                        let _ = nix::unistd::read(doorbell, &mut b);
                    }
                }
            }
        }
        // Connections that never said hello.
        for i in 0..self.incoming.len() {
            if let Some(Incoming {
                state: InState::Waiting { since },
                ..
            }) = &self.incoming[i]
            {
                if now.saturating_sub(*since) > HANDSHAKE {
                    stats.shm_refused += 1;
                    self.close_in(i);
                }
            }
        }
        udp || n == events.len()
    }

    fn accept(&mut self, now: Nanos, stats: &mut UdpStats) {
        let Some(l) = &self.listener else { return };
        // A bounded number per look: a flood of connections (refused
        // ones included) cannot hold the receive path.
        for _ in 0..MAX_ACCEPTS {
            let Ok(Some(conn)) = link::accept_from(l) else {
                break;
            };
            let Some(i) = free_slot(&mut self.incoming) else {
                stats.shm_refused += 1;
                continue; // dropped: closed
            };
            if self
                .epoll
                .add(&conn, EpollEvent::new(EpollFlags::EPOLLIN, conn_token(i)))
                .is_err()
            {
                continue;
            }
            self.incoming[i] = Some(Incoming {
                conn,
                state: InState::Waiting { since: now },
            });
        }
    }

    /// Incoming link `i`'s connection is readable: its hello, or its end.
    fn conn_ready(&mut self, i: usize, stats: &mut UdpStats) {
        let Some(inc) = self.incoming.get_mut(i).and_then(Option::as_mut) else {
            return;
        };
        match &mut inc.state {
            InState::Active { closing, .. } => {
                // Nothing is sent after the hello: the peer closed.
                *closing = true;
                let _ = self.epoll.delete(&inc.conn);
            }
            InState::Waiting { .. } => match link::recv_hello(&inc.conn) {
                Ok(link::Heard::Nothing) => {}
                Ok(link::Heard::Hello(h)) => match self.take_ring(i, h) {
                    Ok(()) => stats.shm_links_in += 1,
                    Err(_) => {
                        stats.shm_refused += 1;
                        self.close_in(i);
                    }
                },
                Ok(link::Heard::Gone) | Err(_) => {
                    stats.shm_refused += 1;
                    self.close_in(i);
                }
            },
        }
    }

    /// Checks and maps the ring of a hello, and answers it.
    fn take_ring(&mut self, i: usize, h: link::Hello) -> io::Result<()> {
        let bad = |what: &str| io::Error::new(io::ErrorKind::InvalidData, what.to_string());
        if h.from.is_ipv6() != self.local.is_ipv6() {
            return Err(bad("the peer's address family differs"));
        }
        if !h.cap.is_power_of_two() || !(ring::MIN_CAP..=ring::MAX_CAP).contains(&h.cap) {
            return Err(bad("the ring's capacity is out of range"));
        }
        let mem = mem::SharedMem::open(h.ring, ring::CONTROL + h.cap)?;
        let ring = Consumer::open(mem).map_err(|b| bad(b.0))?;
        self.epoll.add(
            &h.doorbell,
            EpollEvent::new(EpollFlags::EPOLLIN, bell_token(i)),
        )?;
        let inc = self.incoming[i].as_mut().expect("the slot is in use");
        link::answer(&inc.conn, link::ACCEPTED)?;
        inc.state = InState::Active {
            ring,
            doorbell: h.doorbell,
            from: h.from,
            closing: false,
        };
        Ok(())
    }

    fn close_in(&mut self, i: usize) {
        if let Some(inc) = self.incoming.get_mut(i).and_then(Option::take) {
            let _ = self.epoll.delete(&inc.conn);
            if let InState::Active { doorbell, .. } = &inc.state {
                let _ = self.epoll.delete(doorbell);
            }
        }
    }

    /// Fills `batch` from the rings, the header of each datagram rebuilt
    /// for `local` (`v6`: IPv6), taking the rings in turn.
    pub(super) fn recv(&mut self, batch: &mut PacketBatch, v6: bool, stats: &mut UdpStats) {
        let n = self.incoming.len();
        if n == 0 {
            return;
        }
        let hl = hdr::rebuilt_header_len(v6);
        let dst = self.local.ip();
        let piece = self.piece;
        let start = self.rx_next % n;
        self.rx_next = start + 1;
        for k in 0..n {
            let i = (start + k) % n;
            let Some(Incoming {
                state:
                    InState::Active {
                        ring,
                        from,
                        closing,
                        ..
                    },
                ..
            }) = self.incoming[i].as_mut()
            else {
                continue;
            };
            let mut drop_link = false;
            while !batch.is_full() {
                let r = match ring.next() {
                    Ok(Some(r)) => r,
                    Ok(None) => {
                        drop_link = *closing;
                        break;
                    }
                    Err(_) => {
                        stats.shm_broken += 1;
                        drop_link = true;
                        break;
                    }
                };
                let h = RxHdr {
                    src: from.ip(),
                    sport: r.sport,
                    dst,
                    tos: r.tos,
                };
                let mut took = false;
                let pushed = batch.push_with(|slot| {
                    let total = hl + r.len;
                    if total > slot.len() || !hdr::rebuild(&mut slot[..hl], &h, r.len, 0) {
                        return 0;
                    }
                    ring.take(&r, &mut slot[hl..total], piece);
                    took = true;
                    total
                });
                if pushed {
                    // The rebuilt header is the sender's engine's to the
                    // bit (IPv4 ID 0 and DF, the record's port and TOS):
                    // the engine checks the ICRC, and damage done between
                    // the two engines (a fault injector's, a bug) is
                    // caught as on a wire.
                    batch.set_meta(batch.len() - 1, RxMeta::exact());
                    stats.shm_rx_datagrams += 1;
                    stats.shm_rx_bytes += r.len as u64;
                } else {
                    if !took {
                        ring.skip(&r);
                    }
                    stats.rx_too_big += 1;
                }
            }
            ring.release();
            if drop_link {
                self.close_in(i);
            }
            if batch.is_full() {
                break;
            }
        }
    }

    /// Whether some ring is being read (the UDP socket then need not be
    /// probed at every receive).
    pub(super) fn has_incoming(&self) -> bool {
        self.incoming
            .iter()
            .flatten()
            .any(|i| matches!(i.state, InState::Active { .. }))
    }

    /// Before the caller sleeps: asks every ring's producer for a
    /// doorbell. True when a datagram arrived meanwhile (receive again,
    /// do not sleep).
    pub(super) fn arm(&self) -> bool {
        let mut any = false;
        for inc in self.incoming.iter().flatten() {
            if let InState::Active { ring, .. } = &inc.state {
                any |= ring.arm();
            }
        }
        any
    }
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
mod tests {
    use super::*;
    use std::net::UdpSocket;

    /// A receiving path on `127.0.0.<n>`, its UDP socket, and the
    /// address.
    fn receiver(n: u8) -> (Shm, UdpSocket, SocketAddr) {
        let udp = UdpSocket::bind(format!("127.0.0.{n}:0")).unwrap();
        let at = udp.local_addr().unwrap();
        let shm = Shm::new(at, udp.as_fd(), 1 << 16, None).unwrap();
        assert!(shm.listening());
        (shm, udp, at)
    }

    /// Runs the receiver's event look a few times (accept, then hello).
    fn settle(shm: &mut Shm, stats: &mut UdpStats) {
        for t in 1..4 {
            shm.poll_events(t, stats);
        }
    }

    #[test]
    fn a_hello_with_an_unsealed_ring_is_refused_and_closed() {
        let (mut shm, _udp, at) = receiver(31);
        let conn = link::connect_to(at).unwrap();
        let fd =
            nix::sys::memfd::memfd_create(c"forged", nix::sys::memfd::MFdFlags::empty()).unwrap();
        nix::unistd::ftruncate(&fd, (ring::CONTROL + (1 << 16)) as libc::off_t).unwrap();
        let bell = EventFd::new().unwrap();
        let from: SocketAddr = "127.0.0.32:4791".parse().unwrap();
        link::send_hello(&conn, from, 1 << 16, fd.as_fd(), bell.as_fd()).unwrap();
        let mut stats = UdpStats::default();
        settle(&mut shm, &mut stats);
        assert_eq!((stats.shm_refused, stats.shm_links_in), (1, 0));
        assert_eq!(link::read_answer(&conn), link::Answer::Refused);
        assert!(shm.incoming.iter().all(Option::is_none), "nothing kept");
    }

    #[test]
    fn a_ring_broken_by_its_writer_is_dropped_and_the_rest_goes_on() {
        let (mut shm, _udp, at) = receiver(33);
        let mut stats = UdpStats::default();
        // A well-behaved sender's ring, taken.
        let conn = link::connect_to(at).unwrap();
        let mut p = Producer::create(1 << 16).unwrap();
        let bell = EventFd::new().unwrap();
        let from: SocketAddr = "127.0.0.34:4791".parse().unwrap();
        link::send_hello(&conn, from, 1 << 16, p.mem().fd().as_fd(), bell.as_fd()).unwrap();
        settle(&mut shm, &mut stats);
        assert_eq!(stats.shm_links_in, 1);
        assert_eq!(link::read_answer(&conn), link::Answer::Accepted);
        // A record too short for a BTH still arrives: parsing is the
        // engine's, on its own copy.
        assert_eq!(p.push(0xC001, 0x02, b"hello", None), Ok(Push::Written));
        p.publish();
        let mut batch = PacketBatch::new(4, 9216);
        shm.recv(&mut batch, false, &mut stats);
        assert_eq!(batch.len(), 1);
        assert_eq!(&batch.get(0)[28..], b"hello");
        assert!(batch.meta(0).header_exact, "the engine checks the ICRC");
        // Then the writer forges its tail two laps ahead.
        let forged =
            mem::SharedMem::open(p.mem().fd().try_clone().unwrap(), ring::CONTROL + (1 << 16))
                .unwrap();
        // SAFETY: the tail word is at offset 128 of the control page
        // (magic, cap, tail: one 64-byte line each), inside the mapping;
        // it is an atomic in the ring's protocol.
        let tail =
            unsafe { &*(forged.base().as_ptr().add(128) as *const std::sync::atomic::AtomicU64) };
        tail.store(3 << 16, std::sync::atomic::Ordering::SeqCst);
        batch.clear();
        shm.recv(&mut batch, false, &mut stats);
        assert_eq!((batch.len(), stats.shm_broken), (0, 1));
        assert!(shm.incoming.iter().all(Option::is_none), "the link is gone");
        assert!(link::closed(&conn), "and its connection closed");
    }
}
