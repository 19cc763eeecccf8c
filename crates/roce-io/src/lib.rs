//! Packet I/O for the RoCE v2 stack: the [`Backend`] trait that moves whole
//! IP datagrams, an in-memory [`Fabric`] for deterministic tests, and
//! middleware that wraps any backend: [`FaultInjector`] and [`PcapTap`].
//!
//! Where it sits: between the sans-IO engine (`roce-core`) and the
//! operating system. `roce-verbs`' progress engine moves the engine's
//! datagrams through a backend; the backend never parses what the engine
//! built beyond fixing the ICRC for the header the kernel writes, and
//! reads no byte of what it receives. See the
//! repository's `docs/architecture.md`.
//!
//! On Linux, two real backends:
//!
//! * [`UdpBackend`] — unprivileged UDP sockets on port 4791, per-QP
//!   source ports, per-packet DSCP/ECN, `sendmmsg`/`recvmmsg` with UDP
//!   GSO/GRO. The kernel writes the IP header, so the backend keeps the
//!   ICRC consistent with what goes on the wire, and on receive hands on
//!   each UDP payload with what the socket showed of its header
//!   ([`RxHeader`](roce_wire::RxHeader)): the engine checks the ICRC from
//!   that; see its module docs.
//! * [`PacketBackend`] — whole Ethernet frames through `AF_PACKET` on one
//!   interface (`CAP_NET_RAW`): 802.1Q PCP from the DSCP, neighbour
//!   resolution through the kernel, a kernel BPF filter for RoCE, the
//!   ICRC verifiable on receive, and PAUSE/PFC frames on the side.
//!
//! [`host`] is the host table: which process of this user owns which QPN,
//! CM listener, communication ID and rdma_cm port on a shared address (a
//! file in `/dev/shm`, docs/host.md); the UDP backend attaches to it when
//! it shares its address with other processes (`UdpConfig::share`), and
//! [`Backend::claim`], [`Backend::release`] and [`Backend::forward`] are
//! what a driver calls then.
//!
//! [`interfaces`] lists the interfaces with their MAC, MTU, state and
//! addresses. Both real backends expose their descriptor ([`AsFd`],
//! [`Backend::wait_fd`]) and a `wait_readable(timeout)`, and a [`Sleeper`]
//! lets a progress thread sleep until there is something to receive or
//! another thread wakes it.
//!
//! [`AsFd`]: std::os::fd::AsFd
//!
//! The transport engine (`roce-core`) is sans-IO: it emits complete IP
//! datagrams — IPv4 or IPv6 header, UDP, BTH, extended headers, payload,
//! ICRC, exactly what `roce_wire::FrameRepr::emit` writes with `eth: None` —
//! and consumes the same, or a UDP payload with its
//! [`RxHeader`](roce_wire::RxHeader) from a backend that does not see the
//! IP header. A backend carries those datagrams. Nothing here
//! reads a clock: every call takes `now` ([`Nanos`]), virtual time on the
//! fabric, a monotonic clock in real use.
//!
//! # Call order
//!
//! A progress loop drives a backend like this:
//!
//! 1. fill a [`PacketBatch`] with outgoing datagrams
//!    ([`PacketBatch::push_transmit_with`] lets the engine emit straight
//!    into the arena, and keeps the [`Transmit`](roce_wire::Transmit) that
//!    says how to send each one, so no backend parses a header) and call
//!    [`Backend::send`]; it returns how many it took, from
//!    the front, and the rest are offered again later
//!    ([`PacketBatch::drain_front`]);
//! 2. call [`Backend::recv`] with a receive batch and hand each datagram
//!    (and its [`RxMeta`]) to the engine: a UDP payload with its
//!    [`PacketBatch::header`] to `Device::handle_udp`, a whole datagram to
//!    `Device::handle_datagram`;
//! 3. sleep — in virtual time, jump — until the earliest of the engine's
//!    timeout and [`Backend::poll_at`], then repeat. `poll_at` changes after
//!    every `send` / `recv`, so ask again each time round.
//!
//! Middleware is a backend that owns a backend, so it stacks, and the order
//! says what is seen: in `FaultInjector<PcapTap<FabricPort>>` the tap
//! records the wire (what the faults let through, as marked or corrupted),
//! in `PcapTap<FaultInjector<FabricPort>>` it records what the engine sent.
//! `Box<dyn Backend + Send>` and `&mut B` are backends too.
//!
//! # Example
//!
//! Two endpoints on a fabric with 1 µs links; the sender drops 10 % of
//! its packets (seeded, so the run is reproducible) and records a pcap:
//!
//! ```
//! use roce_io::{Backend, Fabric, FaultConfig, FaultInjector, LinkConfig, PacketBatch, PcapTap};
//! use roce_wire::{
//!     BthRepr, Ecn, ExtHeaders, FrameRepr, IpRepr, Ipv4Repr, Opcode, Psn, Qpn, RocePacket,
//!     UdpChecksum, UdpRepr, ROCE_V2_PORT,
//! };
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let fabric = Fabric::new();
//! let link = LinkConfig::new().latency(1_000);
//! let a = fabric.endpoint_with("10.0.0.1".parse()?, link)?;
//! let mut b = fabric.endpoint_with("10.0.0.2".parse()?, link)?;
//! let lossy = FaultInjector::new(a, FaultConfig::new(42).loss(0.1));
//! let mut a = PcapTap::new(lossy, Vec::new())?; // or PcapTap::create(.., "a.pcap")
//!
//! let mut tx = PacketBatch::new(32, 4096 + 128);
//! for psn in 0..32 {
//!     let repr = FrameRepr {
//!         eth: None,
//!         ip: IpRepr::V4(Ipv4Repr {
//!             src: "10.0.0.1".parse()?,
//!             dst: "10.0.0.2".parse()?,
//!             dscp: 26,
//!             ecn: Ecn::Ect0,
//!             ident: 0,
//!             dont_frag: true,
//!             ttl: 64,
//!             payload_len: 0,
//!         }),
//!         udp: UdpRepr { src_port: 0xc000, dst_port: ROCE_V2_PORT, checksum: UdpChecksum::Zero },
//!         bth: BthRepr::new(Opcode::RC_SEND_ONLY, Qpn::new(0x11), Psn::new(psn)),
//!         ext: ExtHeaders::default(),
//!         payload: b"hello",
//!     };
//!     tx.push_with(|slot| repr.emit(slot).unwrap_or(0)); // zero-copy emit
//! }
//! assert_eq!(a.send(0, &tx)?, 32);
//!
//! let mut rx = PacketBatch::new(32, 4096 + 128);
//! let now = b.poll_at().expect("something in flight"); // 2 µs: two 1 µs links
//! assert_eq!(now, 2_000);
//! let n = b.recv(now, &mut rx)?;
//! for (i, d) in rx.iter().enumerate() {
//!     let p = RocePacket::parse_ip(d)?;
//!     assert!(rx.meta(i).header_exact && p.check_icrc().is_ok());
//! }
//! let (lossy, pcap) = a.finish()?;
//! assert_eq!(n as u64, 32 - lossy.stats().lost);
//! assert!(pcap.len() > 24);
//! # Ok(()) }
//! ```
//!
//! # Determinism
//!
//! The fabric has no clock and no randomness; the fault injector draws from
//! a seeded portable generator. The same seed and the same calls give the
//! same datagrams at the same times, so a failing run replays.
#![deny(unsafe_code)]

mod backend;
mod batch;
mod datagram;
#[allow(unsafe_code)]
mod emu;
mod fabric;
mod fault;
#[cfg(target_os = "linux")]
pub mod host;
#[cfg(target_os = "linux")]
mod iface;
#[cfg(target_os = "linux")]
mod neigh;
#[cfg(target_os = "linux")]
mod packet;
mod pcap;
#[cfg(target_os = "linux")]
#[allow(unsafe_code)]
mod ring;
#[cfg(target_os = "linux")]
mod sleeper;
#[cfg(target_os = "linux")]
#[allow(unsafe_code)]
mod sys;
#[cfg(test)]
mod testutil;
#[cfg(target_os = "linux")]
mod udp;

pub use backend::{Backend, BuildInPlace, Forwarded, InPlace, Nanos, PacketBatch, RxMeta};
pub use emu::{copy_payload, emulated, CpuTuning, COPY_PIECE};
pub use fabric::{Fabric, FabricError, FabricPort, LinkConfig, PortStats};
pub use fault::{
    parse_duration, FaultAction, FaultConfig, FaultInjector, FaultLog, FaultPlan, FaultRule,
    FaultStats, Injection, InjectionSink, OpFilter, QpIndex, QpSelector, TargetedFaults,
    DEFAULT_SEED, LOG_KEEP,
};
#[cfg(target_os = "linux")]
pub use host::{HostError, HostTable};
#[cfg(target_os = "linux")]
pub use iface::{interface, interfaces, InterfaceInfo};
pub use neigh::neighbor;
#[cfg(target_os = "linux")]
pub use packet::{PacketBackend, PacketConfig, PacketStats};
pub use pcap::{mac_for, PcapStats, PcapTap, SharedPcap, ETHERTYPE_UNKNOWN};
#[cfg(target_os = "linux")]
pub use sleeper::{Either, Sleeper, Wake};
#[cfg(target_os = "linux")]
pub use udp::{SourcePorts, UdpBackend, UdpConfig, UdpOffloads, UdpSet, UdpStats};
