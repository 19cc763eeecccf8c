//! [`UdpBackend`]: RoCE v2 over an ordinary (unprivileged) UDP socket.

mod hdr;
mod ports;

use std::io::{self, IoSlice};
use std::net::{IpAddr, SocketAddr};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::time::Duration;

use nix::errno::Errno;
use nix::poll::{PollFd, PollFlags};
use nix::sys::time::TimeSpec;
use roce_wire::{ipv4, ROCE_V2_PORT};
use smallvec::SmallVec;
use socket2::{SockAddr, Socket};

use crate::backend::{Backend, Nanos, PacketBatch, RxMeta};
use crate::sys::{self, RxInfo, TxMsg, MAX_MMSG};
use hdr::{RxHdr, TxHdr, WireFields};
use ports::PortSockets;

/// Most segments in one GSO send (the kernel's `UDP_MAX_SEGMENTS` is 64 on
/// older kernels, 128 on newer).
const GSO_MAX_SEGMENTS: usize = 64;
/// Most UDP payload bytes in one GSO send (an IPv4 datagram's limit).
const GSO_MAX_BYTES: usize = 65_535 - ipv4::HEADER_LEN - 8;
/// Datagrams planned per `sendmmsg`.
const TX_CHUNK: usize = 256;
/// `recvmmsg` calls per `recv` at most (a flood of junk cannot spin).
const RX_ROUNDS: usize = 4;

/// How the backend gets a datagram's UDP source port onto the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum SourcePorts {
    /// One send socket per source port (the engine's per-QP port), with
    /// [`Rewrite`](Self::Rewrite) as the fallback for ports that cannot be
    /// bound.
    #[default]
    PerQp,
    /// Send everything from the receive socket: the source port becomes
    /// the RoCE port and the ICRC is recomputed (one socket, no ECMP
    /// entropy).
    Rewrite,
}

/// What the receive path does about the ICRC of IPv4 datagrams, whose
/// identification field it cannot see (IPv6 is always fully verifiable and
/// left to the engine).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum IcrcCheck {
    /// Nothing: hand every datagram on unverified.
    Off,
    /// Recompute the ICRC assuming ID 0, else find whether one of the IDs
    /// 1..=127 of a GSO sender's segments matches, and count matches and
    /// mismatches.
    #[default]
    Count,
    /// As `Count`, and drop mismatches: for peers known to send ID 0 (or
    /// GSO segment numbers), such as this backend.
    Require,
}

/// Settings of a [`UdpBackend`]. Start from [`UdpConfig::new`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UdpConfig {
    local: IpAddr,
    port: u16,
    remote_port: u16,
    source_ports: SourcePorts,
    socket_cache: usize,
    reuse_port: bool,
    gso: bool,
    gro: bool,
    icrc_check: IcrcCheck,
    max_datagram: usize,
    recv_buffer: usize,
    send_buffer: usize,
}

impl UdpConfig {
    /// Defaults for the local address `local`: port 4791 both ways,
    /// per-QP source ports with a 1024-socket cache, GSO and GRO when the
    /// kernel has them, ID-0 ICRC counting, datagrams up to 9216 bytes,
    /// 8 MiB socket buffers (forced past the sysctl limit when privileged).
    pub fn new(local: IpAddr) -> Self {
        UdpConfig {
            local,
            port: ROCE_V2_PORT,
            remote_port: ROCE_V2_PORT,
            source_ports: SourcePorts::PerQp,
            socket_cache: 1024,
            reuse_port: false,
            gso: true,
            gro: true,
            icrc_check: IcrcCheck::Count,
            max_datagram: 9216,
            recv_buffer: 8 << 20,
            send_buffer: 8 << 20,
        }
    }

    /// The local port to receive on (default 4791; 0 lets the kernel
    /// pick, see [`UdpBackend::local_addr`]).
    pub fn port(mut self, port: u16) -> Self {
        self.port = port;
        self
    }

    /// Where datagrams addressed to port 4791 are sent (default 4791).
    pub fn remote_port(mut self, port: u16) -> Self {
        self.remote_port = port;
        self
    }

    /// Source-port strategy (default [`SourcePorts::PerQp`]).
    pub fn source_ports(mut self, mode: SourcePorts) -> Self {
        self.source_ports = mode;
        self
    }

    /// Most per-port send sockets kept open (default 1024); the least
    /// recently used is closed to make room.
    pub fn socket_cache(mut self, sockets: usize) -> Self {
        self.socket_cache = sockets;
        self
    }

    /// Sets `SO_REUSEPORT` on the per-port send sockets (default off), so
    /// that several stacks on one address can use the same source ports.
    /// Datagrams that arrive at those ports are never read.
    pub fn reuse_port(mut self, yes: bool) -> Self {
        self.reuse_port = yes;
        self
    }

    /// Use UDP GSO when the kernel has it (default true).
    pub fn gso(mut self, yes: bool) -> Self {
        self.gso = yes;
        self
    }

    /// Use UDP GRO when the kernel has it (default true).
    pub fn gro(mut self, yes: bool) -> Self {
        self.gro = yes;
        self
    }

    /// IPv4 receive-side ICRC policy (default [`IcrcCheck::Count`]).
    pub fn icrc_check(mut self, check: IcrcCheck) -> Self {
        self.icrc_check = check;
        self
    }

    /// Largest UDP payload received without GRO (default 9216).
    pub fn max_datagram(mut self, bytes: usize) -> Self {
        self.max_datagram = bytes.max(64);
        self
    }

    /// Socket buffer sizes in bytes (default 8 MiB each).
    pub fn buffers(mut self, recv: usize, send: usize) -> Self {
        self.recv_buffer = recv;
        self.send_buffer = send;
        self
    }
}

/// Which offloads a [`UdpBackend`] uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct UdpOffloads {
    /// UDP GSO (`UDP_SEGMENT`) on send.
    pub gso: bool,
    /// UDP GRO (`UDP_GRO`) on receive.
    pub gro: bool,
}

/// Counters of a [`UdpBackend`] (also listed by
/// [`Backend::counters`] with a `udp_` prefix).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct UdpStats {
    /// Datagrams the kernel accepted.
    pub tx_datagrams: u64,
    /// Their UDP payload bytes.
    pub tx_bytes: u64,
    /// `sendmmsg` calls.
    pub tx_syscalls: u64,
    /// GSO sends (each carries two or more datagrams).
    pub tx_gso_sends: u64,
    /// Datagrams sent inside GSO sends.
    pub tx_gso_datagrams: u64,
    /// Datagrams that were not an IPv4 / IPv6 UDP datagram of the
    /// backend's family carrying at least a BTH and an ICRC; dropped.
    pub tx_malformed: u64,
    /// Datagrams the kernel refused (no route, too big for the path MTU,
    /// ...); dropped.
    pub tx_errors: u64,
    /// Datagrams sent from the receive socket with a rewritten source port.
    pub tx_sport_rewritten: u64,
    /// Datagrams whose ICRC was recomputed for the header on the wire.
    pub tx_icrc_recomputed: u64,
    /// Per-port send sockets opened.
    pub sport_sockets_opened: u64,
    /// Source ports that could not be bound.
    pub sport_bind_failures: u64,
    /// Per-port send sockets closed to make room.
    pub sport_evictions: u64,
    /// GSO switched off after the kernel rejected a GSO send.
    pub gso_disabled: u64,
    /// Datagrams handed to the engine.
    pub rx_datagrams: u64,
    /// Their UDP payload bytes.
    pub rx_bytes: u64,
    /// `recvmmsg` calls that returned data.
    pub rx_syscalls: u64,
    /// `recvmmsg` calls that found nothing waiting.
    pub rx_empty_polls: u64,
    /// Receives that stopped after a one-slot probe found a datagram,
    /// without asking again (learnt: in a ping-pong that call finds
    /// nothing).
    pub rx_follow_ups_skipped: u64,
    /// GRO-coalesced receives split into several datagrams.
    pub rx_gro_batches: u64,
    /// Datagrams too big for the receive buffers or the batch; dropped.
    pub rx_too_big: u64,
    /// IPv4 datagrams handed on without ICRC verification.
    pub rx_icrc_unverified: u64,
    /// IPv4 datagrams whose ICRC matches with ID 0.
    pub rx_icrc_ok_id0: u64,
    /// IPv4 datagrams whose ICRC matches with an ID in 1..=127 (segments
    /// of a GSO send); the rebuilt header carries that ID.
    pub rx_icrc_ok_gso_id: u64,
    /// IPv4 datagrams whose ICRC matches none of those IDs: corrupt, or a
    /// peer that uses other IDs (indistinguishable).
    pub rx_icrc_bad: u64,
    /// Datagrams dropped by [`IcrcCheck::Require`].
    pub rx_icrc_dropped: u64,
}

/// Which socket a run of datagrams leaves from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Via {
    /// The per-port socket of this source port.
    Port(u16),
    /// The receive socket (source port rewritten).
    Main,
}

/// One datagram of a planned chunk.
#[derive(Clone, Copy, Debug)]
struct Seg {
    idx: usize,
    payload_at: usize,
    icrc: Option<[u8; 4]>,
}

/// One planned message: `segs[start..end]`, GSO when more than one.
#[derive(Clone, Copy, Debug)]
struct Planned {
    dst: SocketAddr,
    tos: u8,
    start: usize,
    end: usize,
    seg_size: usize,
}

/// Whether to receive again right after a one-slot probe (the first look
/// after an idle one) found a datagram, learnt from what the call after
/// such a hit finds.
///
/// In a stream the next call finds more (in a slow guest, where the
/// receiver often catches up with the sender, those calls are what makes
/// batches; skipping them made write-bw 3x slower there). In a ping-pong
/// the request comes alone, and asking again is a system call that finds
/// nothing between the request's arrival and the engine seeing it.
#[derive(Clone, Copy, Debug)]
struct FollowUp {
    /// Calls after a hit that may find nothing before they stop: refilled
    /// whenever one finds something.
    credit: u8,
    /// The last call was a probe that found a datagram.
    after_hit: bool,
}

impl FollowUp {
    const CREDIT: u8 = 8;

    fn new() -> FollowUp {
        FollowUp {
            credit: FollowUp::CREDIT,
            after_hit: false,
        }
    }

    /// After every receive call: learns from the one that follows a hit.
    fn learn(&mut self, got: usize) {
        if std::mem::take(&mut self.after_hit) {
            self.credit = if got > 0 {
                FollowUp::CREDIT
            } else {
                self.credit.saturating_sub(1)
            };
        }
    }

    /// A probe found a datagram: whether to ask again at once.
    fn probe_hit(&mut self) -> bool {
        self.after_hit = true;
        self.credit > 0
    }
}

/// Outcome of sending one planned chunk.
enum Sent {
    /// All messages done (sent or dropped).
    All,
    /// The socket buffer is full: datagrams before batch index `.0` were
    /// taken.
    WouldBlock(usize),
    /// A GSO send failed; datagrams before batch index `.0` were taken.
    GsoFailed(usize),
}

/// RoCE v2 over UDP sockets: unprivileged, one receive socket on port 4791
/// plus per-source-port send sockets.
///
/// The engine hands over whole IP datagrams; the kernel builds the IP and
/// UDP headers itself, so the backend sends each datagram's UDP payload
/// (BTH ... ICRC) to the datagram's destination address and port, and on
/// receive rebuilds a whole datagram around the payload the socket returns.
/// The ICRC covers header fields that the backend does not write itself,
/// so the rules below keep what goes on the wire consistent with its ICRC.
///
/// # Source ports
///
/// RoCE v2 peers use a fixed UDP source port per QP (0xC000..=0xFFFF) as
/// ECMP entropy, and the ICRC covers it (protocol reference §1, §4). A UDP
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
/// # What the receiver can verify
///
/// A UDP socket shows the payload, the peer's address and port, the local
/// address and (asked with `IP_RECVTOS` / `IPV6_RECVTCLASS`) the TOS byte.
/// The rebuilt datagram has those, the lengths, TTL / hop limit 64, UDP
/// checksum 0 (the kernel checked the real one) and, for IPv4, DF and ID 0.
///
/// * IPv6: every field the ICRC covers is known exactly (the flow label,
///   traffic class and hop limit are masked), so the datagram is handed on
///   with [`RxMeta::icrc_verified`] set and the engine checks the ICRC.
/// * IPv4: the ICRC covers the identification, which the socket never
///   shows; a peer that sends non-zero IDs (Linux rxe uses the kernel's
///   hashed IDs) cannot be verified. Those datagrams are handed on with
///   `icrc_verified` false and counted (`udp_rx_icrc_unverified`). With
///   [`IcrcCheck::Count`] (the default) the backend also recomputes the
///   ICRC assuming ID 0 and counts matches (`udp_rx_icrc_id0_ok`: the
///   datagram is intact and the peer used ID 0, as this stack does) and
///   mismatches (`udp_rx_icrc_id0_bad`: corrupt, or a peer with other IDs —
///   indistinguishable); [`IcrcCheck::Require`] drops the mismatches,
///   for links whose peers are known to send ID 0.
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
/// # Ports in tests
///
/// The receive port is [`UdpConfig::port`] (4791 by default) and datagrams
/// addressed to port 4791 are sent to [`UdpConfig::remote_port`], so two
/// backends can talk on other ports (4791 may be held by the kernel's rxe).
/// Received datagrams are rebuilt with destination port 4791. The ICRC
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
    solver: hdr::IdSolver,
}

impl std::fmt::Debug for UdpBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UdpBackend")
            .field("local", &self.local_addr())
            .field("offloads", &self.offloads)
            .field("sport_sockets", &self.ports.len())
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
        crate::emu::adapt_to_cpu();
        let addr = SocketAddr::new(cfg.local, cfg.port);
        let sock = ports::udp_socket(cfg.local, cfg.port, false).map_err(|e| {
            if e.kind() == io::ErrorKind::AddrInUse {
                io::Error::new(
                    io::ErrorKind::AddrInUse,
                    format!(
                        "UDP {addr} is already in use (another RoCE stack such as the \
                         kernel's rxe, or another backend): {e}"
                    ),
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
        ports::grow_buffer(&sock, cfg.recv_buffer, true);
        ports::grow_buffer(&sock, cfg.send_buffer, false);
        if v6 {
            sock.set_recv_tclass_v6(true)?;
            // Accept zero UDP checksums over IPv6 too, as RoCE peers may
            // send them (the ICRC protects the payload).
            let _ = sys::setsockopt_int(sock.as_fd(), libc::SOL_UDP, libc::UDP_NO_CHECK6_RX, 1);
        } else {
            sock.set_recv_tos_v4(true)?;
        }
        let gso =
            cfg.gso && sys::getsockopt_int(sock.as_fd(), libc::SOL_UDP, libc::UDP_SEGMENT).is_ok();
        let gro =
            cfg.gro && sys::setsockopt_int(sock.as_fd(), libc::SOL_UDP, libc::UDP_GRO, 1).is_ok();
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
        Ok(UdpBackend {
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
            solver: hdr::IdSolver::default(),
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
    pub fn wait_readable(&self, timeout: Option<Duration>) -> io::Result<bool> {
        if self.rx_cur < self.rx_info.len() {
            return Ok(true);
        }
        let mut fds = [PollFd::new(self.sock.as_fd(), PollFlags::POLLIN)];
        match nix::poll::ppoll(&mut fds, timeout.map(TimeSpec::from_duration), None) {
            Ok(n) => Ok(n > 0),
            Err(Errno::EINTR) => Ok(false),
            Err(e) => Err(e.into()),
        }
    }

    fn wire_dst(&self, h: &TxHdr) -> SocketAddr {
        let port = if h.dport == ROCE_V2_PORT {
            self.cfg.remote_port
        } else {
            h.dport
        };
        SocketAddr::new(h.dst, port)
    }

    /// Plans the chunk of datagrams from `first` that share `h0`'s source
    /// port and leave `via`; fills `self.segs` / `self.plan` and returns
    /// the batch index after the chunk.
    fn plan_chunk(&mut self, batch: &PacketBatch, first: usize, h0: &TxHdr, via: Via) -> usize {
        self.segs.clear();
        self.plan.clear();
        let sport = match via {
            Via::Port(p) => p,
            Via::Main => self.cfg.port,
        };
        let gso = self.offloads.gso;
        let mut i = first;
        while i < batch.len() && self.segs.len() < TX_CHUNK {
            let d = batch.get(i);
            let h = if i == first {
                *h0
            } else {
                match TxHdr::parse(d) {
                    Some(h) if h.sport == h0.sport && h.dst.is_ipv6() == self.v6 => h,
                    _ => break,
                }
            };
            let dst = self.wire_dst(&h);
            let payload_at = h.ip_hlen + 8;
            let size = d.len() - payload_at;
            // Join the open message as a GSO segment when it fits.
            let join = gso
                && self.plan.last().is_some_and(|m| {
                    let n = m.end - m.start;
                    let last_size =
                        batch.get(self.segs[m.end - 1].idx).len() - self.segs[m.end - 1].payload_at;
                    m.dst == dst
                        && m.tos == h.tos
                        && size <= m.seg_size
                        && last_size == m.seg_size
                        && n < GSO_MAX_SEGMENTS
                        && (n * m.seg_size + size) <= GSO_MAX_BYTES
                });
            if !join {
                if self.plan.len() == MAX_MMSG {
                    break;
                }
                let start = self.segs.len();
                self.plan.push(Planned {
                    dst,
                    tos: h.tos,
                    start,
                    end: start,
                    seg_size: size,
                });
            }
            let m = self.plan.last_mut().expect("a message is open");
            let k = m.end - m.start;
            let wire = WireFields {
                src: self.cfg.local,
                ident: u16::try_from(k).unwrap_or(0),
                sport,
            };
            let icrc = if wire.matches(&h) {
                None
            } else if h.ip_hlen == ipv4::HEADER_LEN
                && h.src == wire.src
                && h.sport == wire.sport
                && h.dont_frag
                && h.ident.max(wire.ident) <= hdr::MAX_SOLVED_ID
                && size == m.seg_size
            {
                // Only the IPv4 ID differs (a GSO segment's number): move
                // the engine's ICRC to it instead of computing it again.
                // Full-size segments only: their length recurs, so the
                // solver's per-length basis (seven CRCs over that length
                // to build) is reused; a GSO send's shorter last segment
                // is recomputed.
                let mut own = [0u8; 4];
                own.copy_from_slice(&d[d.len() - 4..]);
                let udp_len = d.len() - h.ip_hlen;
                Some(self.solver.move_id(udp_len, own, h.ident, wire.ident))
            } else {
                Some(hdr::icrc_for_wire(d, &h, &wire))
            };
            self.segs.push(Seg {
                idx: i,
                payload_at,
                icrc,
            });
            m.end += 1;
            i += 1;
        }
        i
    }

    /// Sends the planned chunk on `fd`.
    fn send_chunk(&mut self, batch: &PacketBatch, via: Via) -> Sent {
        let fd = match via {
            Via::Port(p) => self.ports.get(p),
            Via::Main => None,
        };
        let fd = fd.unwrap_or(self.sock.as_fd());
        // The iovecs borrow the batch, so their list is made per call: on
        // the stack for a few datagrams (a latency-bound exchange sends one
        // or two per call), allocated for a burst.
        let mut iovs: SmallVec<[IoSlice<'_>; 8]> = SmallVec::with_capacity(2 * self.segs.len());
        let mut msgs = std::mem::take(&mut self.tx_msgs);
        msgs.clear();
        for m in &self.plan {
            let iov_start = iovs.len();
            for s in &self.segs[m.start..m.end] {
                let d = batch.get(s.idx);
                match &s.icrc {
                    None => iovs.push(IoSlice::new(&d[s.payload_at..])),
                    Some(c) => {
                        iovs.push(IoSlice::new(&d[s.payload_at..d.len() - 4]));
                        iovs.push(IoSlice::new(c));
                    }
                }
            }
            let n = m.end - m.start;
            msgs.push(TxMsg {
                dst: Some(SockAddr::from(m.dst)),
                iov_start,
                iov_len: iovs.len() - iov_start,
                tos: Some(m.tos),
                gso_size: if n > 1 { m.seg_size as u16 } else { 0 },
            });
        }
        let stats = &mut self.stats;
        let mut done = 0;
        let mut result = Sent::All;
        while done < msgs.len() {
            match sys::sendmmsg(fd, &mut self.mmsg, self.v6, &msgs[done..], &iovs) {
                Ok(n) => {
                    stats.tx_syscalls += 1;
                    for m in &self.plan[done..done + n] {
                        let k = (m.end - m.start) as u64;
                        stats.tx_datagrams += k;
                        for s in &self.segs[m.start..m.end] {
                            let d = batch.get(s.idx);
                            stats.tx_bytes += (d.len() - s.payload_at) as u64;
                            stats.tx_icrc_recomputed += u64::from(s.icrc.is_some());
                        }
                        if k > 1 {
                            stats.tx_gso_sends += 1;
                            stats.tx_gso_datagrams += k;
                        }
                        if via == Via::Main {
                            stats.tx_sport_rewritten += k;
                        }
                    }
                    done += n;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    result = Sent::WouldBlock(self.segs[self.plan[done].start].idx);
                    break;
                }
                Err(_) if msgs[done].gso_size != 0 => {
                    result = Sent::GsoFailed(self.segs[self.plan[done].start].idx);
                    break;
                }
                Err(_) => {
                    stats.tx_errors += (self.plan[done].end - self.plan[done].start) as u64;
                    done += 1;
                }
            }
        }
        self.tx_msgs = msgs;
        result
    }

    fn push_rx(&mut self, batch: &mut PacketBatch) {
        let hl = hdr::rebuilt_header_len(self.v6);
        while self.rx_cur < self.rx_info.len() {
            let info = self.rx_info[self.rx_cur];
            let base = self.rx_cur * self.rx_slot;
            let seg = info
                .gro_size
                .map_or(info.len, usize::from)
                .clamp(1, info.len.max(1));
            if self.rx_off == 0 && info.gro_size.is_some_and(|g| usize::from(g) < info.len) {
                self.stats.rx_gro_batches += 1;
            }
            if info.truncated {
                self.stats.rx_too_big += 1;
                self.rx_off = info.len;
            }
            while self.rx_off < info.len {
                if batch.is_full() {
                    return;
                }
                let end = (self.rx_off + seg).min(info.len);
                let payload = &self.rx_arena[base + self.rx_off..base + end];
                self.rx_off = end;
                let Some(peer) = info.peer else {
                    continue;
                };
                let h = RxHdr {
                    src: peer.ip(),
                    sport: peer.port(),
                    dst: self.cfg.local,
                    tos: info.tos.unwrap_or(0),
                };
                let mut head = [0u8; 48];
                if !hdr::rebuild(&mut head[..hl], &h, payload.len()) {
                    self.stats.rx_too_big += 1;
                    continue;
                }
                if !self.v6 {
                    self.stats.rx_icrc_unverified += 1;
                    if self.cfg.icrc_check != IcrcCheck::Off
                        && !check_v4(&mut self.stats, &mut self.solver, &mut head, payload)
                    {
                        self.stats.rx_icrc_bad += 1;
                        if self.cfg.icrc_check == IcrcCheck::Require {
                            self.stats.rx_icrc_dropped += 1;
                            continue;
                        }
                    }
                }
                // IPv6: every covered field is known, the engine verifies.
                let meta = RxMeta::new().with_icrc_verified(self.v6);
                let pushed = batch.push_with(|slot| {
                    let total = hl + payload.len();
                    if total > slot.len() {
                        return 0;
                    }
                    slot[..hl].copy_from_slice(&head[..hl]);
                    crate::emu::copy_payload(&mut slot[hl..total], payload);
                    total
                });
                if pushed {
                    batch.set_meta(batch.len() - 1, meta);
                    self.stats.rx_datagrams += 1;
                    self.stats.rx_bytes += payload.len() as u64;
                } else {
                    self.stats.rx_too_big += 1;
                }
            }
            self.rx_cur += 1;
            self.rx_off = 0;
        }
    }
}

/// Checks an IPv4 datagram's ICRC assuming ID 0, then the IDs of GSO
/// segments; on a match writes the ID into `head` and counts it.
fn check_v4(
    stats: &mut UdpStats,
    solver: &mut hdr::IdSolver,
    head: &mut [u8; 48],
    payload: &[u8],
) -> bool {
    let hl = hdr::rebuilt_header_len(false);
    let n = payload.len();
    let Some(c0) = hdr::icrc_over(&head[..hl], payload, None) else {
        return false;
    };
    let mut got = [0u8; 4];
    got.copy_from_slice(&payload[n - 4..]);
    if c0 == got {
        stats.rx_icrc_ok_id0 += 1;
        return true;
    }
    match solver.solve(8 + n, c0, got) {
        Some(id) => {
            hdr::set_ipv4_ident(&mut head[..hl], id);
            stats.rx_icrc_ok_gso_id += 1;
            true
        }
        None => false,
    }
}

impl Backend for UdpBackend {
    fn local_addrs(&self) -> &[IpAddr] {
        &self.local
    }

    fn send(&mut self, _now: Nanos, batch: &PacketBatch) -> io::Result<usize> {
        let mut i = 0;
        while i < batch.len() {
            let h = match TxHdr::parse(batch.get(i)) {
                Some(h) if h.dst.is_ipv6() == self.v6 => h,
                _ => {
                    self.stats.tx_malformed += 1;
                    i += 1;
                    continue;
                }
            };
            let via = if h.sport == self.cfg.port || self.ports.get(h.sport).is_none() {
                Via::Main
            } else {
                Via::Port(h.sport)
            };
            let end = self.plan_chunk(batch, i, &h, via);
            match self.send_chunk(batch, via) {
                Sent::All => i = end,
                Sent::WouldBlock(at) => return Ok(at),
                Sent::GsoFailed(at) => {
                    self.offloads.gso = false;
                    self.stats.gso_disabled += 1;
                    i = at;
                }
            }
        }
        Ok(batch.len())
    }

    fn recv(&mut self, _now: Nanos, batch: &mut PacketBatch) -> io::Result<usize> {
        batch.clear();
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
            let n = sys::recvmmsg(
                self.sock.as_fd(),
                &mut self.mmsg,
                &mut self.rx_arena,
                self.rx_slot,
                want,
                &mut self.rx_info,
            )?;
            self.rx_cur = 0;
            self.rx_off = 0;
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
        Ok(batch.len())
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
            ("udp_rx_icrc_unverified", s.rx_icrc_unverified),
            ("udp_rx_icrc_ok_id0", s.rx_icrc_ok_id0),
            ("udp_rx_icrc_ok_gso_id", s.rx_icrc_ok_gso_id),
            ("udp_rx_icrc_bad", s.rx_icrc_bad),
            ("udp_rx_icrc_dropped", s.rx_icrc_dropped),
        ]
    }

    /// The receive socket.
    fn wait_fd(&self) -> Option<BorrowedFd<'_>> {
        Some(self.sock.as_fd())
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
