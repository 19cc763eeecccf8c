//! [`UdpBackend`]: RoCE v2 over an ordinary (unprivileged) UDP socket.

mod config;
mod flows;
mod forward;
mod hdr;
mod ports;
mod rx;
mod set;
mod share;
#[allow(unsafe_code)] // shared memory and received descriptors (docs/shm.md)
mod shm;
mod tx;

pub use config::{SourcePorts, UdpConfig, UdpOffloads, UdpStats};
pub use set::UdpSet;

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::time::Duration;

use nix::errno::Errno;
use nix::poll::{PollFd, PollFlags};
use nix::sys::socket::{getsockopt, setsockopt, sockopt};
use nix::sys::time::TimeSpec;
use roce_wire::ipv4;
use socket2::Socket;

use crate::backend::{Backend, BuildInPlace, Forwarded, InPlace, Nanos, PacketBatch, RxMeta};
use crate::sys::{self, RxInfo, TxMsg, MAX_MMSG};
use forward::Hop;
use ports::PortSockets;
use roce_wire::{Owner, RxHeader, Transmit};
use rx::FollowUp;
use shm::Made;
use tx::{Planned, Seg, Sent, Via};

/// Most segments in one GSO send (the kernel's `UDP_MAX_SEGMENTS` is 64 on
/// older kernels, 128 on newer).
const GSO_MAX_SEGMENTS: usize = 64;
/// Most UDP payload bytes in one GSO send (an IPv4 datagram's limit).
const GSO_MAX_BYTES: usize = 65_535 - ipv4::HEADER_LEN - 8;
/// Datagrams planned per `sendmmsg`.
const TX_CHUNK: usize = 256;
/// `recvmmsg` calls per `recv` at most (a flood of junk cannot spin).
const RX_ROUNDS: usize = 4;
/// With datagrams coming through same-host rings, a UDP socket that has
/// had nothing for this long is probed only every [`UDP_PROBE_GAP`]
/// (docs/shm.md).
const UDP_QUIET_AFTER: Nanos = 1_000_000;
const UDP_PROBE_GAP: Nanos = 10_000;

/// The socket a `recvmmsg` reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum RxSocket {
    /// The receive socket.
    Main,
    /// Flow socket `i` (`udp/flows.rs`).
    Flow(usize),
}

/// RoCE v2 over UDP sockets: unprivileged, one receive socket on port 4791
/// plus per-source-port send sockets.
///
/// The engine hands over whole IP datagrams, each with a
/// [`Transmit`](roce_wire::Transmit) (source, destination, DSCP / ECN);
/// the kernel builds the IP and UDP headers itself, so the backend sends
/// each datagram's UDP payload (BTH ... ICRC) as its `Transmit` says,
/// reading no header, and on receive hands on the payload the socket
/// returns with what the socket said of its header
/// ([`PacketBatch::header`]). The ICRC covers header fields that the
/// backend does not write itself, so the rules below keep what goes on the
/// wire consistent with its ICRC ([`roce_wire::icrc::rebase`]).
///
/// # Source ports
///
/// RoCE v2 peers use a fixed UDP source port per QP (0xC000..=0xFFFF) as
/// ECMP entropy, and the ICRC covers it (docs/protocol.md §1, §4). A UDP
/// socket has one source port, so the backend opens, on demand, one send
/// socket bound to (local IP, source port) per port the engine uses, and
/// keeps them in a bounded LRU cache ([`UdpConfig::socket_cache`], default
/// 1024, one file descriptor each). Only the socket on the RoCE port (4791)
/// receives.
///
/// When a port cannot be bound (another socket holds it — the default
/// ephemeral range 32768..=60999 overlaps 0xC000..=0xEE47 — or the cache is
/// disabled with [`SourcePorts::Rewrite`]), the datagram is sent from the
/// receive socket instead: its source port becomes the RoCE port and the
/// backend recomputes the ICRC for that header (counted as
/// `udp_tx_sport_rewritten`). The packet stays valid, and RC peers such as
/// Linux rxe do not look at the source port, but every QP that falls back
/// shares one 5-tuple, so ECMP puts them all on one path.
///
/// # What the kernel writes, and the ICRC
///
/// The sockets are unconnected and set `IP_PMTUDISC_DO`, so IPv4 datagrams
/// carry DF and identification 0 — what `roce-core` writes. With UDP GSO
/// the first segment of a run carries ID 0 and each further segment one
/// more (0, 1, 2, ...: the kernel's software segmentation does that on
/// Linux 6.18 and NIC segmentation offload increments too), so the backend
/// recomputes the ICRC of segment *k* for ID *k*. Whenever the header on
/// the wire will differ from the engine's (that ID, the source address or
/// port, a missing DF), the ICRC is recomputed and counted
/// (`udp_tx_icrc_recomputed`); IPv6 has no identification. The DSCP and ECN
/// of each datagram go out per packet as an `IP_TOS` / `IPV6_TCLASS` cmsg.
///
/// # What the receiver knows
///
/// A UDP socket shows the payload, the peer's address and port, the local
/// address and (asked with `IP_RECVTOS` / `IPV6_RECVTCLASS`) the TOS byte:
/// the [`RxHeader`] each payload comes with, without the IPv4
/// identification, which the socket never shows. The backend reads no
/// payload byte; the engine checks the ICRC from those facts and owns the
/// policy for the identification it cannot see (roce-core's `IcrcCheck`,
/// docs/protocol.md §4).
///
/// # Batching and offloads
///
/// Datagrams go out with `sendmmsg`, one call per run of datagrams with the
/// same source port (a batch that interleaves QPs packet by packet gets
/// shorter runs). Within a run, consecutive datagrams to the same
/// destination with the same TOS and size become one UDP GSO send
/// (`UDP_SEGMENT`) when the kernel offers it; GRO (`UDP_GRO`) coalesces on
/// receive, and the backend splits the coalesced payload again. Both are
/// probed once at bind time; a GSO send the kernel rejects switches GSO off
/// for good and the datagrams are resent one by one.
///
/// # Sharing the address with other processes
///
/// With [`UdpConfig::share`], any number of processes of one user on this
/// host receive on the same address and port (docs/host.md): each binds
/// with `SO_REUSEPORT` and the kernel hands each datagram to one of them.
/// The backend attaches to the address's host table, says what its
/// engine owns there ([`Backend::claim`], [`Backend::release`]), sends
/// each datagram to an address with a host table to the process owning
/// its destination QPN through a same-host ring (to its own receive path
/// when that is this backend), and hands on what the kernel gave it but
/// another process owns ([`Backend::forward`]). A remote flow forwarded
/// to this backend is then steered to it: a socket connected to the
/// flow's source takes it from the group (docs/host.md, "Steering";
/// `udp/flows.rs`).
///
/// # Ports in tests
///
/// The receive port is [`UdpConfig::port`] (4791 by default) and datagrams
/// addressed to port 4791 are sent to [`UdpConfig::remote_port`], so two
/// backends can talk on other ports (4791 may be held by the kernel's rxe).
/// The engine takes a received payload as sent to port 4791. The ICRC
/// keeps covering 4791, so on another port the wire's ICRC does not match
/// the wire's header; only use other ports between two of these backends.
///
/// ```no_run
/// use roce_io::{Backend, PacketBatch, UdpBackend, UdpConfig};
/// use std::time::Duration;
/// # fn main() -> std::io::Result<()> {
/// let mut b = UdpBackend::bind(UdpConfig::new("192.0.2.1".parse().unwrap()))?;
/// let mut rx = PacketBatch::new(64, 9216);
/// if b.wait_readable(Some(Duration::from_millis(10)))? {
///     let n = b.recv(0, &mut rx)?;
///     println!("{n} datagrams, offloads {:?}", b.offloads());
/// }
/// # Ok(()) }
/// ```
pub struct UdpBackend {
    cfg: UdpConfig,
    local: [IpAddr; 1],
    v6: bool,
    sock: Socket,
    ports: PortSockets,
    offloads: UdpOffloads,
    stats: UdpStats,
    segs: Vec<Seg>,
    plan: Vec<Planned>,
    /// The sendmmsg headers of a chunk, kept between calls.
    tx_msgs: Vec<TxMsg>,
    rx_arena: Box<[u8]>,
    /// The last receive call found nothing (see `recv`).
    rx_idle: bool,
    follow: FollowUp,
    rx_slot: usize,
    rx_info: Vec<RxInfo>,
    /// Headers and buffers of the mmsg calls, reused.
    mmsg: sys::MmsgScratch,
    rx_cur: usize,
    rx_off: usize,
    /// Moves ICRCs to the header fields the kernel writes.
    rebaser: roce_wire::icrc::Rebaser,
    /// The same-host path, when configured.
    shm: Option<shm::Shm>,
    /// The host table and what sharing the address needs, when shared.
    share: Option<share::Share>,
    /// Sockets connected to remote flows forwarded here, when shared.
    flows: Option<flows::Flows>,
    /// What `rx_info` holds came from a flow socket.
    rx_from_flow: bool,
    /// The receive socket left the address's group (`Backend::leave`).
    left: bool,
    /// The way the last datagram sent through a host table went.
    last_hop: Option<forward::LastHop>,
    /// A datagram built in a ring that turned out to go elsewhere is
    /// copied here and sent the usual way ([`Backend::transmit_in_place`]).
    spill: Option<PacketBatch>,
    /// The time the last call was given (for `wait_readable`, which is
    /// given none).
    last_now: Nanos,
    /// When the UDP socket last had a datagram.
    udp_last_data: Nanos,
    /// When a quiet socket is probed next ([`UDP_PROBE_GAP`]).
    udp_next_probe: Nanos,
    /// epoll said the socket is readable: probe it at the next receive.
    udp_ready_hint: bool,
}

impl std::fmt::Debug for UdpBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UdpBackend")
            .field("local", &self.local_addr())
            .field("offloads", &self.offloads)
            .field("sport_sockets", &self.ports.len())
            .field("shm", &self.shm.as_ref().map(|s| s.listening()))
            .field("shared", &self.share.is_some())
            .finish_non_exhaustive()
    }
}

impl UdpBackend {
    /// Binds the receive socket to `(local, port)` and probes GSO / GRO.
    ///
    /// # Errors
    ///
    /// [`io::ErrorKind::AddrInUse`], naming the address, when another
    /// socket holds it (the kernel's rxe binds 4791 on every address); any
    /// other socket error as is.
    pub fn bind(cfg: UdpConfig) -> io::Result<Self> {
        // The ICRC covers the source and destination addresses: a device
        // must own one address, which the kernel then writes and reports.
        if cfg.local.is_unspecified() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "a RoCE device needs an address of its own, not {}",
                    cfg.local
                ),
            ));
        }
        let addr = SocketAddr::new(cfg.local, cfg.port);
        let sock = ports::udp_socket(cfg.local, cfg.port, cfg.share).map_err(|e| {
            if e.kind() == io::ErrorKind::AddrInUse {
                let who = if cfg.share {
                    "another RoCE stack such as the kernel's rxe, a backend that does \
                     not share it, or one of another user"
                } else {
                    "another RoCE stack such as the kernel's rxe, or another backend"
                };
                io::Error::new(
                    io::ErrorKind::AddrInUse,
                    format!("UDP {addr} is already in use ({who}): {e}"),
                )
            } else {
                io::Error::new(e.kind(), format!("binding UDP {addr}: {e}"))
            }
        })?;
        let mut cfg = cfg;
        if let Some(a) = sock.local_addr()?.as_socket() {
            cfg.port = a.port(); // the kernel's pick when asked for port 0
        }
        let v6 = cfg.local.is_ipv6();
        ports::receive_options(&sock, v6, cfg.recv_buffer)?;
        ports::grow_buffer(&sock, cfg.send_buffer, false);
        let gso = cfg.gso && getsockopt(&sock, sockopt::UdpGsoSegment).is_ok();
        let gro = cfg.gro && setsockopt(&sock, sockopt::UdpGroSegment, &true).is_ok();
        let rx_slot = if gro { 65_536 } else { cfg.max_datagram };
        let rx_msgs = if gro { 32 } else { MAX_MMSG };
        let ports = PortSockets::new(
            cfg.local,
            match cfg.source_ports {
                SourcePorts::PerQp => cfg.socket_cache,
                SourcePorts::Rewrite => 0,
            },
            cfg.reuse_port,
            cfg.send_buffer,
        );
        let at = SocketAddr::new(cfg.local, cfg.port);
        // Sharing: a listener of this backend's own, named in its host
        // table slot (docs/host.md), made before the slot is.
        let own_name = cfg.share.then(|| shm::process_name(at));
        let shm = if cfg.shm || cfg.share {
            Some(shm::Shm::new(
                at,
                sock.as_fd(),
                cfg.shm_ring,
                cfg.cpu.copy_piece,
                own_name.as_deref(),
            )?)
        } else {
            None
        };
        let share = match &own_name {
            Some(n) => Some(share::Share::attach(cfg.share_dir.clone(), at, n)?),
            None => None,
        };
        // Sharing: flow sockets steer remote flows to their owners
        // (docs/host.md, "Steering"), watched by the same-host wait set.
        let flows = match (&share, &shm) {
            (Some(_), Some(shm)) => {
                let f = flows::Flows::new(flows::Setup {
                    local: cfg.local,
                    port: cfg.port,
                    recv_buffer: cfg.recv_buffer,
                    gro,
                })?;
                shm.watch_flows(f.wait_fd())?;
                Some(f)
            }
            _ => None,
        };
        Ok(UdpBackend {
            shm,
            flows,
            rx_from_flow: false,
            share,
            left: false,
            last_hop: None,
            spill: None,
            last_now: 0,
            udp_last_data: 0,
            udp_next_probe: 0,
            udp_ready_hint: false,
            local: [cfg.local],
            v6,
            sock,
            ports,
            offloads: UdpOffloads { gso, gro },
            stats: UdpStats::default(),
            segs: Vec::with_capacity(TX_CHUNK),
            plan: Vec::with_capacity(MAX_MMSG),
            tx_msgs: Vec::with_capacity(MAX_MMSG),
            rx_arena: vec![0u8; rx_slot * rx_msgs].into_boxed_slice(),
            rx_idle: false,
            follow: FollowUp::new(),
            rx_slot,
            rx_info: Vec::with_capacity(rx_msgs),
            mmsg: sys::MmsgScratch::new(),
            rx_cur: 0,
            rx_off: 0,
            rebaser: roce_wire::icrc::Rebaser::default(),
            cfg,
        })
    }

    /// [`bind`](Self::bind) with the defaults for `local` on port 4791.
    pub fn new(local: IpAddr) -> io::Result<Self> {
        Self::bind(UdpConfig::new(local))
    }

    /// The receive socket's address.
    pub fn local_addr(&self) -> SocketAddr {
        SocketAddr::new(self.cfg.local, self.cfg.port)
    }

    /// The host table this backend is attached to when it shares its
    /// address ([`UdpConfig::share`], docs/host.md): for rdma_cm's port
    /// spaces and diagnostics.
    pub fn host_table(&self) -> Option<&crate::HostTable> {
        self.share.as_ref().map(|s| s.table())
    }

    /// The configuration.
    pub fn config(&self) -> &UdpConfig {
        &self.cfg
    }

    /// The offloads in use (probed at bind time; GSO may turn off later).
    pub fn offloads(&self) -> UdpOffloads {
        self.offloads
    }

    /// The counters.
    pub fn stats(&self) -> UdpStats {
        let mut s = self.stats;
        s.sport_sockets_opened = self.ports.opened;
        s.sport_bind_failures = self.ports.bind_failures;
        s.sport_evictions = self.ports.evictions;
        s
    }

    /// Sleeps until a datagram can be received or `timeout` passes (`None`:
    /// no limit). Returns true when [`recv`](Backend::recv) has something
    /// (including segments left over from a coalesced receive), false on
    /// timeout or a signal. An engine that waits on several descriptors
    /// can poll [`as_fd`](AsFd::as_fd) itself, but must call `recv` until
    /// it returns 0 before sleeping, since left-over segments do not make
    /// the socket readable.
    pub fn wait_readable(&mut self, timeout: Option<Duration>) -> io::Result<bool> {
        if self.rx_cur < self.rx_info.len() || self.prepare_wait(self.last_now) {
            return Ok(true);
        }
        let mut fds = [PollFd::new(self.wait_descriptor(), PollFlags::POLLIN)];
        match nix::poll::ppoll(&mut fds, timeout.map(TimeSpec::from_duration), None) {
            Ok(n) => Ok(n > 0),
            Err(Errno::EINTR) => Ok(false),
            Err(e) => Err(e.into()),
        }
    }

    /// The socket, or the same-host path's epoll set over it.
    pub(super) fn wait_descriptor(&self) -> BorrowedFd<'_> {
        match &self.shm {
            Some(s) => s.wait_fd(),
            None => self.sock.as_fd(),
        }
    }

    /// Sends the datagrams of `batch`, to same-host peers through their
    /// rings, the rest by UDP; returns how many were taken.
    fn send_udp_and_rings(&mut self, now: Nanos, batch: &PacketBatch) -> usize {
        let mut i = 0;
        // After the kernel refused a GSO send: the errors sent before the
        // one-datagram probe that tells whose fault it was.
        let mut probe: Option<u64> = None;
        while i < batch.len() {
            let Some(t) = self.sendable(batch, i) else {
                self.stats.tx_malformed += 1;
                i += 1;
                continue;
            };
            let hop = self.hop(now, &t);
            if hop != Hop::Udp || !batch.icrc_present(i) {
                let made = Made {
                    intact: batch.intact(i),
                    no_icrc: !batch.icrc_present(i),
                };
                self.send_by(now, batch.get(i), &t, hop, made);
                i += 1;
                continue;
            }
            let sport = t.src.port();
            let via = if sport == self.cfg.port || self.ports.get(sport).is_none() {
                Via::Main
            } else {
                Via::Port(sport)
            };
            let limit = if probe.is_some() { 1 } else { TX_CHUNK };
            let end = self.plan_chunk(now, batch, i, &t, via, limit);
            match self.send_chunk(batch, via) {
                Sent::All => {
                    if let Some(before) = probe.take() {
                        if self.stats.tx_errors > before {
                            // Refused on its own too: the message was at
                            // fault (EINVAL for UDP port 0, say), not GSO.
                            self.offloads.gso = true;
                        } else {
                            // Alone it went: the kernel cannot segment.
                            self.stats.gso_disabled += 1;
                        }
                    }
                    i = end;
                }
                Sent::WouldBlock(at) => {
                    if probe.is_some() {
                        // Undecided: GSO stays, the next send tries again.
                        self.offloads.gso = true;
                    }
                    return at;
                }
                Sent::GsoFailed(at) => {
                    // The refused message's first datagram goes again
                    // alone, to see whether GSO or the message was refused.
                    self.offloads.gso = false;
                    probe = Some(self.stats.tx_errors);
                    i = at;
                }
            }
        }
        batch.len()
    }

    /// Whether this receive probes the UDP socket: always, but while
    /// same-host rings carry the traffic and the socket has been quiet
    /// for [`UDP_QUIET_AFTER`] (a probe is a system call that finds
    /// nothing): then every [`UDP_PROBE_GAP`], or when epoll said it is
    /// readable.
    fn udp_due(&self, now: Nanos) -> bool {
        let Some(shm) = &self.shm else { return true };
        self.udp_ready_hint
            || !self.rx_idle
            || !shm.has_incoming()
            || now.saturating_sub(self.udp_last_data) < UDP_QUIET_AFTER
            || now >= self.udp_next_probe
    }

    /// One `recvmmsg` of at most `want` datagrams on `from` into
    /// `rx_info` (what it held must have been pushed); `push_rx` hands
    /// them on. A flow socket that is gone gives nothing.
    fn recv_on(&mut self, from: RxSocket, want: usize) -> io::Result<usize> {
        let fd = match from {
            RxSocket::Main => self.sock.as_fd(),
            RxSocket::Flow(i) => match self.flows.as_ref().and_then(|f| f.sock(i)) {
                Some(fd) => fd,
                None => return Ok(0),
            },
        };
        let n = sys::recvmmsg(
            fd,
            &mut self.mmsg,
            &mut self.rx_arena,
            self.rx_slot,
            want,
            &mut self.rx_info,
        );
        self.rx_cur = 0;
        self.rx_off = 0;
        self.rx_from_flow = matches!(from, RxSocket::Flow(_));
        n
    }

    /// Takes what the UDP socket has, as many `recvmmsg` rounds as the
    /// batch has room for.
    fn recv_udp(&mut self, batch: &mut PacketBatch) -> io::Result<()> {
        for _ in 0..RX_ROUNDS {
            self.push_rx(batch);
            if batch.is_full() {
                break;
            }
            let want = if self.rx_idle {
                // The last look found nothing: a busy-polling caller would
                // otherwise set up a full batch of headers on every empty
                // poll. One slot tells whether traffic is back; the next
                // call takes the rest of a burst in a full batch.
                1
            } else if self.offloads.gro {
                usize::MAX
            } else {
                batch.capacity() - batch.len()
            };
            let n = self.recv_on(RxSocket::Main, want)?;
            self.rx_idle = n == 0;
            self.follow.learn(n);
            if n == 0 {
                self.stats.rx_empty_polls += 1;
                break;
            }
            self.stats.rx_syscalls += 1;
            if want == 1 && !self.follow.probe_hit() {
                self.stats.rx_follow_ups_skipped += 1;
                break;
            }
        }
        self.push_rx(batch);
        Ok(())
    }
}

impl Backend for UdpBackend {
    fn local_addrs(&self) -> &[IpAddr] {
        &self.local
    }

    fn transmit_in_place(&mut self, now: Nanos, build: &mut BuildInPlace<'_>) -> InPlace {
        if !self.cfg.shm_build_in_place {
            return InPlace::Unavailable;
        }
        self.build_in_place(now, build)
    }

    fn needs_icrc(&mut self, now: Nanos, t: &Transmit) -> bool {
        // Only a ring's reader, whose engine may trust the sender's
        // bytes, can do without it (docs/shm.md, "What the receiver
        // trusts"); the way found here is remembered for `send`.
        !matches!(self.hop(now, t), Hop::Ring { .. })
    }

    fn send(&mut self, now: Nanos, batch: &PacketBatch) -> io::Result<usize> {
        self.last_now = now;
        let taken = self.send_udp_and_rings(now, batch);
        if let Some(shm) = self.shm.as_mut() {
            shm.flush(&mut self.stats);
        }
        Ok(taken)
    }

    fn recv(&mut self, now: Nanos, batch: &mut PacketBatch) -> io::Result<usize> {
        self.last_now = now;
        batch.clear();
        if let Some(shm) = self.shm.as_mut() {
            // New peers, their hellos and the ends of old ones, every
            // millisecond of a busy receiver (and before each sleep).
            if shm.housekeeping_due(now) {
                self.udp_ready_hint |= shm.poll_events(now, &mut self.stats);
            }
        }
        let udp = if self.udp_due(now) {
            let got = batch.len();
            let r = self.recv_udp(batch);
            if batch.len() > got {
                self.udp_last_data = now;
            }
            self.udp_ready_hint = false;
            self.udp_next_probe = now.saturating_add(UDP_PROBE_GAP);
            r
        } else {
            self.push_rx(batch);
            Ok(())
        };
        let udp = udp.and(self.recv_flows(now, batch));
        let from_rings = batch.len();
        if let Some(shm) = self.shm.as_mut() {
            let trusted = self.cfg.shm_icrc_trusted;
            shm.recv(batch, self.v6, trusted, &mut self.stats);
        }
        self.steer_forwarded(now, batch, from_rings);
        if let Some(share) = self.share.as_mut() {
            // Counted when sent (`udp_shm_local`).
            share.drain_local(batch);
        }
        if batch.is_empty() {
            udp?;
        }
        Ok(batch.len())
    }

    /// With the same-host path: takes new peers and hellos, empties rung
    /// doorbells, and asks every ring's writer to ring at its next record.
    fn prepare_wait(&mut self, now: Nanos) -> bool {
        self.last_now = now;
        let Some(shm) = self.shm.as_mut() else {
            return false;
        };
        let udp = shm.poll_events(now, &mut self.stats);
        self.udp_ready_hint |= udp;
        let local = self.share.as_ref().is_some_and(|s| s.has_local());
        shm.arm() || udp || local
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        let s = self.stats();
        vec![
            ("udp_tx_datagrams", s.tx_datagrams),
            ("udp_tx_bytes", s.tx_bytes),
            ("udp_tx_syscalls", s.tx_syscalls),
            ("udp_tx_gso_sends", s.tx_gso_sends),
            ("udp_tx_gso_datagrams", s.tx_gso_datagrams),
            ("udp_tx_malformed", s.tx_malformed),
            ("udp_tx_not_own_source", s.tx_not_own_source),
            ("udp_tx_errors", s.tx_errors),
            ("udp_tx_sport_rewritten", s.tx_sport_rewritten),
            ("udp_tx_icrc_recomputed", s.tx_icrc_recomputed),
            ("udp_sport_sockets_opened", s.sport_sockets_opened),
            ("udp_sport_bind_failures", s.sport_bind_failures),
            ("udp_sport_evictions", s.sport_evictions),
            ("udp_gso_disabled", s.gso_disabled),
            ("udp_rx_datagrams", s.rx_datagrams),
            ("udp_rx_bytes", s.rx_bytes),
            ("udp_rx_syscalls", s.rx_syscalls),
            ("udp_rx_empty_polls", s.rx_empty_polls),
            ("udp_rx_follow_ups_skipped", s.rx_follow_ups_skipped),
            ("udp_rx_gro_batches", s.rx_gro_batches),
            ("udp_rx_too_big", s.rx_too_big),
            ("udp_shm_tx_datagrams", s.shm_tx_datagrams),
            ("udp_shm_tx_bytes", s.shm_tx_bytes),
            ("udp_shm_tx_full_drops", s.shm_tx_full_drops),
            ("udp_shm_tx_no_icrc", s.shm_tx_no_icrc),
            ("udp_shm_tx_in_place", s.shm_tx_in_place),
            ("udp_shm_tx_no_icrc_dropped", s.shm_tx_no_icrc_dropped),
            ("udp_shm_doorbells", s.shm_doorbells),
            ("udp_shm_links_out", s.shm_links_out),
            ("udp_shm_links_in", s.shm_links_in),
            ("udp_shm_refused", s.shm_refused),
            ("udp_shm_broken", s.shm_broken),
            ("udp_shm_rx_datagrams", s.shm_rx_datagrams),
            ("udp_shm_rx_bytes", s.shm_rx_bytes),
            ("udp_shm_rx_no_icrc", s.shm_rx_no_icrc),
            ("udp_shm_rx_icrc_filled", s.shm_rx_icrc_filled),
            ("udp_shm_rx_forwarded", s.shm_rx_forwarded),
            ("udp_shm_qpn_routes", s.shm_qpn_routes),
            ("udp_shm_local", s.shm_local),
            ("udp_shm_forwarded", s.shm_forwarded),
            ("udp_shm_forward_no_owner", s.shm_forward_no_owner),
            ("udp_shm_forward_unreachable", s.shm_forward_unreachable),
            ("udp_shm_links_gone", s.shm_links_gone),
            ("udp_shm_reaped", s.shm_reaped),
            ("udp_flow_sockets_opened", s.flow_sockets_opened),
            ("udp_flow_rx_datagrams", s.flow_rx_datagrams),
            ("udp_flow_sockets_closed", s.flow_sockets_closed),
        ]
    }

    fn claim(&mut self, local: IpAddr, owner: Owner) -> io::Result<bool> {
        self.claim_owner(local, owner)
    }

    fn release(&mut self, local: IpAddr, owner: Owner) {
        self.release_owner(local, owner)
    }

    fn forward(
        &mut self,
        now: Nanos,
        header: RxHeader,
        payload: &[u8],
        meta: RxMeta,
        owner: Owner,
    ) -> Forwarded {
        self.last_now = now;
        self.forward_payload(now, header, payload, meta, owner)
    }

    /// Connects the receive socket to the discard port of its own
    /// address: Linux's `SO_REUSEPORT` selection skips a connected member
    /// of the group (it takes only its peer's datagrams, and nobody sends
    /// from port 9), while the datagrams queued before stay readable.
    fn leave(&mut self) -> bool {
        if self.share.is_none() || self.left {
            return false;
        }
        self.left = true;
        let nowhere = SocketAddr::new(self.cfg.local, 9);
        // Refused (it never is on Linux for a bound UDP socket): the
        // socket stays in the group until it closes, as before.
        let _ = self.sock.connect(&nowhere.into());
        if let Some(f) = self.flows.as_mut() {
            f.leave();
        }
        true
    }

    /// The receive socket, or with the same-host path an epoll set over
    /// it, the path's listener, connections and doorbells.
    fn wait_fd(&self) -> Option<BorrowedFd<'_>> {
        Some(self.wait_descriptor())
    }
}

impl AsFd for UdpBackend {
    /// The receive socket.
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.sock.as_fd()
    }
}

impl AsRawFd for UdpBackend {
    /// The receive socket.
    fn as_raw_fd(&self) -> RawFd {
        self.sock.as_raw_fd()
    }
}
