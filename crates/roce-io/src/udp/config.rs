//! [`UdpConfig`] and what the UDP backend reports: its offloads and counters.

use std::net::IpAddr;
use std::path::PathBuf;

use roce_wire::ROCE_V2_PORT;

use crate::CpuTuning;

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

/// Settings of a [`UdpBackend`](super::UdpBackend). Start from [`UdpConfig::new`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UdpConfig {
    pub(super) local: IpAddr,
    pub(super) port: u16,
    pub(super) remote_port: u16,
    pub(super) source_ports: SourcePorts,
    pub(super) socket_cache: usize,
    pub(super) reuse_port: bool,
    pub(super) gso: bool,
    pub(super) gro: bool,
    pub(super) max_datagram: usize,
    pub(super) recv_buffer: usize,
    pub(super) send_buffer: usize,
    pub(super) cpu: CpuTuning,
    pub(super) shm: bool,
    pub(super) shm_ring: usize,
    pub(super) shm_icrc_trusted: bool,
    pub(super) shm_build_in_place: bool,
    pub(super) share: bool,
    pub(super) share_dir: Option<PathBuf>,
}

impl UdpConfig {
    /// Defaults for the local address `local`: port 4791 both ways,
    /// per-QP source ports with a 1024-socket cache, GSO and GRO when the
    /// kernel has them, datagrams up to 9216 bytes,
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
            max_datagram: 9216,
            recv_buffer: 8 << 20,
            send_buffer: 8 << 20,
            cpu: CpuTuning::NATIVE,
            shm: false,
            shm_ring: super::shm::DEFAULT_RING,
            shm_icrc_trusted: false,
            shm_build_in_place: false,
            share: false,
            share_dir: None,
        }
    }

    /// The local port to receive on (default 4791; 0 lets the kernel
    /// pick, see [`UdpBackend::local_addr`](super::UdpBackend::local_addr)).
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

    /// Largest UDP payload received without GRO (default 9216).
    pub fn max_datagram(mut self, bytes: usize) -> Self {
        self.max_datagram = bytes.max(64);
        self
    }

    /// The code choices for this CPU (default [`CpuTuning::NATIVE`];
    /// [`CpuTuning::detect`] for the automatic choice): the receive
    /// path's ICRC check and payload copies follow it.
    pub fn cpu(mut self, tuning: CpuTuning) -> Self {
        self.cpu = tuning;
        self
    }

    /// Send to backends of other processes on this host (same network
    /// namespace, same user) through shared memory instead of the
    /// kernel's UDP stack, and take theirs (default false; docs/shm.md).
    /// What such a peer receives is what UDP would have delivered, but
    /// a packet capture on the interface does not see it.
    pub fn shm(mut self, yes: bool) -> Self {
        self.shm = yes;
        self
    }

    /// The record area of each same-host ring this backend makes, in
    /// bytes: a power of two from 64 KiB to 64 MiB (default 4 MiB; other
    /// values are rounded up to one). Like a socket buffer, it
    /// holds what the reader has not taken yet; a full ring drops.
    pub fn shm_ring(mut self, bytes: usize) -> Self {
        self.shm_ring = bytes
            .clamp(1 << 16, 1 << 26)
            .next_power_of_two()
            .min(1 << 26);
        self
    }

    /// Whether the engine this backend feeds takes a same-host ring's
    /// intact datagrams ([`RxMeta::host_intact`](crate::RxMeta::host_intact))
    /// without checking their ICRC (roce-core's
    /// `DeviceConfig::icrc_trust_host`). Then a datagram whose sender left
    /// its ICRC out goes to the engine so; otherwise (the default) this
    /// backend computes the ICRC first (`udp_shm_rx_icrc_filled`). Either
    /// way the ICRC a same-host sender leaves out is one nobody on its
    /// side needed (docs/shm.md, "What the receiver trusts").
    pub fn shm_icrc_trusted(mut self, yes: bool) -> Self {
        self.shm_icrc_trusted = yes;
        self
    }

    /// Whether the engine may build its datagrams straight into a
    /// same-host ring ([`Backend::transmit_in_place`](crate::Backend::transmit_in_place),
    /// docs/shm.md, "Building in place"; default false). It saves the
    /// copy from the send batch into the ring (about 10 % of the
    /// instructions of a 64 KiB WRITE) but costs small messages more than
    /// it saves (docs/performance.md, "A 64 KiB WRITE between two
    /// engines of one host"), so it is
    /// off until that is understood.
    pub fn shm_build_in_place(mut self, yes: bool) -> Self {
        self.shm_build_in_place = yes;
        self
    }

    /// Share the address and port with the other processes of this user
    /// on this host (default false; docs/host.md): the receive socket
    /// binds with `SO_REUSEPORT` (the kernel refuses another user's
    /// socket, and one without it, with `EADDRINUSE`), the backend
    /// attaches to the address's host table for its life, listens for
    /// same-host peers on a name of its own (docs/shm.md), and switches
    /// the same-host path on (as [`shm`](Self::shm)). Then
    /// [`Backend::claim`](crate::Backend::claim) /
    /// [`release`](crate::Backend::release) say what this process
    /// owns, datagrams to a QPN another process of this host owns go
    /// through its ring, and [`Backend::forward`](crate::Backend::forward)
    /// hands on what the kernel gave this process but another owns.
    pub fn share(mut self, yes: bool) -> Self {
        self.share = yes;
        self
    }

    /// Where the host tables of [`share`](Self::share) are (default
    /// [`crate::host::default_dir`]: `$XDG_RUNTIME_DIR`, else
    /// `/dev/shm`); every process sharing an address must use the same.
    pub fn share_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.share_dir = Some(dir.into());
        self
    }

    /// Socket buffer sizes in bytes (default 8 MiB each).
    pub fn buffers(mut self, recv: usize, send: usize) -> Self {
        self.recv_buffer = recv;
        self.send_buffer = send;
        self
    }
}

/// Which offloads a [`UdpBackend`](super::UdpBackend) uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct UdpOffloads {
    /// UDP GSO (`UDP_SEGMENT`) on send.
    pub gso: bool,
    /// UDP GRO (`UDP_GRO`) on receive.
    pub gro: bool,
}

/// Counters of a [`UdpBackend`](super::UdpBackend) (also listed by
/// [`Backend::counters`](crate::Backend::counters) with a `udp_` prefix).
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
    /// Datagrams built in place
    /// ([`Backend::transmit_in_place`](crate::Backend::transmit_in_place))
    /// from an address that is not this backend's (a GID a
    /// [`UdpSet`](crate::UdpSet) has not bound yet, which it drops as
    /// well): dropped.
    pub tx_not_own_source: u64,
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
    /// Datagrams written into same-host rings (docs/shm.md).
    pub shm_tx_datagrams: u64,
    /// Their UDP payload bytes.
    pub shm_tx_bytes: u64,
    /// Datagrams dropped because the peer's ring was full.
    pub shm_tx_full_drops: u64,
    /// Of `shm_tx_datagrams`, those written without their ICRC: the
    /// engine left it out because they were going into a ring
    /// ([`Backend::needs_icrc`](crate::Backend::needs_icrc)).
    pub shm_tx_no_icrc: u64,
    /// Of `shm_tx_datagrams`, those the engine built straight into the
    /// ring ([`Backend::transmit_in_place`](crate::Backend::transmit_in_place)):
    /// not copied there from a batch.
    pub shm_tx_in_place: u64,
    /// Datagrams without their ICRC whose way was no longer a ring when
    /// sent (the link broke between asking and sending): dropped, as a
    /// datagram lost, rather than sent with a wrong ICRC.
    pub shm_tx_no_icrc_dropped: u64,
    /// Doorbells rung (eventfd writes to wake a reader).
    pub shm_doorbells: u64,
    /// Rings a same-host peer took from this backend.
    pub shm_links_out: u64,
    /// Rings this backend took from same-host peers.
    pub shm_links_in: u64,
    /// Handshakes refused or given up, either way.
    pub shm_refused: u64,
    /// Links dropped because the other side broke the ring protocol.
    pub shm_broken: u64,
    /// Datagrams read from same-host rings.
    pub shm_rx_datagrams: u64,
    /// Their UDP payload bytes.
    pub shm_rx_bytes: u64,
    /// Of `shm_rx_datagrams`, those that came without their ICRC
    /// (the sending engine left it out).
    pub shm_rx_no_icrc: u64,
    /// Of those, the ones whose ICRC this backend computed, because its
    /// engine checks it ([`UdpConfig::shm_icrc_trusted`] off, or the
    /// datagram not intact).
    pub shm_rx_icrc_filled: u64,
    /// Of those, datagrams another process forwarded
    /// ([`RxMeta::forwarded`](crate::RxMeta::forwarded)).
    pub shm_rx_forwarded: u64,
    /// Datagrams sent through a ring to the process owning their
    /// destination QPN, found in a host table (docs/host.md).
    pub shm_qpn_routes: u64,
    /// Datagrams to a QPN of this very backend, delivered to its own
    /// receive path without the kernel.
    pub shm_local: u64,
    /// Datagrams handed on by [`Backend::forward`](crate::Backend::forward).
    pub shm_forwarded: u64,
    /// Forwards refused: no other live process owns the datagram, its
    /// owner is gone, or it was forwarded already.
    pub shm_forward_no_owner: u64,
    /// Datagrams whose owner is a live process this backend could not
    /// reach just then ([`Forwarded::Unreachable`](crate::Forwarded::Unreachable)):
    /// dropped unanswered.
    pub shm_forward_unreachable: u64,
    /// Host table slots of processes found gone, reaped.
    pub shm_reaped: u64,
    /// Outgoing same-host links dropped as soon as their reader hung up
    /// (its process ended), seen at the next look at the descriptors.
    pub shm_links_gone: u64,
    /// Flow sockets opened: receive sockets connected to the source of a
    /// datagram another process forwarded here, so that the kernel hands
    /// that flow to this process directly (docs/host.md, "Steering").
    pub flow_sockets_opened: u64,
    /// Datagrams received on flow sockets (also in `rx_datagrams`).
    pub flow_rx_datagrams: u64,
    /// Flow sockets closed: evicted, broken, or carrying datagrams this
    /// process forwards onward.
    pub flow_sockets_closed: u64,
}
