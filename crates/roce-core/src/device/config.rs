//! [`DeviceConfig`]: the settings a device is built with.

use std::net::IpAddr;

use roce_wire::Ecn;

use crate::cc::CcConfig;
use crate::qp::AckDelay;
use crate::Nanos;

/// The engine's ICRC policy for the one datagram whose ICRC it cannot
/// always check: an IPv4 datagram received as its UDP payload without its
/// identification, which the ICRC covers and a UDP socket never shows
/// ([`RxHeader::ipv4_id`](roce_wire::RxHeader::ipv4_id) `None`;
/// docs/protocol.md §4). Every other datagram's ICRC is checked and a
/// mismatch dropped: a whole datagram's, an IPv6 one's (the ICRC masks
/// the fields a socket does not show), an IPv4 one's whose
/// identification the receiver knows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum IcrcCheck {
    /// Not checked: taken, and counted unverified
    /// ([`rx_icrc_unverified`](crate::DeviceCounters::rx_icrc_unverified)).
    Off,
    /// Checked assuming identification 0, else one of 1..=127 (the
    /// segment numbers a UDP GSO send gives its datagrams); one that
    /// matches none is taken all the same and counted unverified: for
    /// peers whose identifications cannot be known (Linux rxe numbers them
    /// as the kernel likes).
    Count,
    /// As `Count`, and one that matches no identification is dropped as
    /// damaged ([`rx_bad_icrc`](crate::DeviceCounters::rx_bad_icrc)): for
    /// peers that send 0 or GSO segment numbers, as this stack does. The
    /// default.
    #[default]
    Require,
}

/// The seed of a device configured without one (tests, the simulator):
/// a fixed string with the first address folded in, so that two such
/// devices draw different identifiers, the same on every run.
pub(super) fn default_seed(addrs: &[IpAddr]) -> [u8; 32] {
    let mut seed = *b"roce-core fixed seed: tests only";
    if let Some(a) = addrs.first() {
        let b = match a {
            IpAddr::V4(v) => v.to_ipv6_mapped().octets(),
            IpAddr::V6(v) => v.octets(),
        };
        for (s, x) in seed.iter_mut().zip(b) {
            *s ^= x;
        }
    }
    seed
}

/// Device-wide settings.
#[derive(Clone, Debug)]
pub struct DeviceConfig {
    /// Local addresses; index = GID index.
    pub addrs: Vec<IpAddr>,
    /// ECN codepoint of request (data) packets: Not-ECT (the default),
    /// ECT(0) or ECT(1). ACKs, NAKs and CNPs are always Not-ECT.
    pub ecn: Ecn,
    /// Line rate of the port in b/s (the reaction point's ceiling;
    /// default 100 Gb/s).
    pub link_bps: u64,
    /// Congestion control (off by default; the notification point is on).
    pub cc: CcConfig,
    /// Seed of the device's CSPRNG (ChaCha20), from which QPNs, initial
    /// PSNs, memory keys and CM identifiers are drawn (see `crate::ids`).
    /// `None` uses a fixed seed: reproducible, and so predictable — for
    /// tests and the simulator only. roce-verbs fills it from the
    /// operating system's `getrandom` when it opens a device.
    pub seed: Option<[u8; 32]>,
    /// Active MTU of the port in bytes (256..=4096): the path MTU of UD
    /// QPs and the default of connected ones.
    pub active_mtu: u32,
    /// An RC requester sends a new packet only while it is at most this
    /// many PSNs past the oldest unacknowledged one (a READ counts its
    /// response packets), as rxe does with 128 (`RXE_MAX_UNACKED_PSNS`):
    /// a slow responder is not flooded, and a loss costs at most this many
    /// resent packets. 0: no per-packet limit (a message still starts only
    /// within 4096 PSNs).
    pub max_unacked_psns: u32,
    /// Packets one QP may send in a row before the next ready QP's turn
    /// (round robin in bursts; at least 1). Runs of one QP's packets are
    /// what a UDP backend can hand the kernel as one GSO send (its
    /// datagrams share a socket and a destination): with per-packet turns
    /// eight busy QPs cost a system call per packet. 16 packets of a 4096
    /// MTU are one 64 KiB GSO send; a simulated NIC arbitrating per
    /// packet uses 1.
    pub tx_burst: u32,
    /// How RC responders defer their positive ACKs ([`AckDelay`]; off by
    /// default, as a NIC).
    pub ack_delay: AckDelay,
    /// The code that computes and checks ICRCs (docs/protocol.md §4):
    /// crc32fast by default; the table-driven code under an emulated CPU,
    /// where it is faster ([`roce_wire::crc32`]; roce-io's
    /// `CpuTuning::detect` says which suits the CPU). Only speed differs.
    pub icrc_code: roce_wire::crc32::Code,
    /// What to do with an IPv4 datagram received as its UDP payload whose
    /// identification the receiver could not see ([`IcrcCheck`]; the
    /// default: [`IcrcCheck::Require`]).
    pub icrc_check: IcrcCheck,
    /// Take a datagram that another engine of this host handed over
    /// through memory, untouched ([`RxMeta::host_intact`]: a same-host
    /// ring's, docs/shm.md), without computing its ICRC: the sender's
    /// engine computed it over the same bytes, and no wire lay between.
    /// Counted in
    /// [`rx_icrc_host_trusted`](crate::DeviceCounters::rx_icrc_host_trusted).
    /// True by default; false checks every ICRC that can be checked (to
    /// find a bug between two engines of one host).
    ///
    /// [`RxMeta::host_intact`]: roce_wire::RxMeta::host_intact
    pub icrc_trust_host: bool,
    /// Other processes share this device's addresses (docs/host.md): each
    /// binds UDP 4791 with `SO_REUSEPORT`, so the kernel may hand this
    /// process a datagram that is another's. When true,
    /// [`Device::handle_datagram`](crate::Device::handle_datagram) returns
    /// [`RxOutcome::Foreign`](crate::RxOutcome::Foreign) for a datagram
    /// that names no object here (unless it was already handed on), and
    /// the CM queues the claims and releases of its local communication
    /// IDs ([`Device::poll_owner_change`](crate::Device::poll_owner_change)).
    /// False (the default): the device is its addresses' only user.
    pub shared: bool,
    /// A fault window for debugging (`roce exec --faults rnr`,
    /// docs/debugging.md): from the first instant to before the second
    /// (the device's `now`), every RC request that would consume a
    /// receive (a SEND, a WRITE with immediate) is answered with an RNR
    /// NAK, as if the program had posted none. None (the default): never.
    pub force_rnr: Option<(Nanos, Nanos)>,
}

impl DeviceConfig {
    /// A device with one address (and no seed: see [`DeviceConfig::seed`]).
    pub fn new(addr: IpAddr) -> DeviceConfig {
        DeviceConfig {
            addrs: vec![addr],
            ecn: Ecn::NotEct,
            seed: None,
            active_mtu: 4096,
            link_bps: 100_000_000_000,
            cc: CcConfig::default(),
            max_unacked_psns: 128,
            tx_burst: 16,
            ack_delay: AckDelay::OFF,
            icrc_code: roce_wire::crc32::Code::Fast,
            icrc_check: IcrcCheck::Require,
            icrc_trust_host: true,
            shared: false,
            force_rnr: None,
        }
    }
}
