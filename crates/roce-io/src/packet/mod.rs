//! [`PacketBackend`]: RoCE v2 as whole Ethernet frames on one interface.

mod bpf;

use std::collections::{HashMap, VecDeque};
use std::io;
use std::net::IpAddr;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::time::Duration;

use nix::errno::Errno;
use nix::poll::{PollFd, PollFlags};
use nix::sys::time::TimeSpec;
use roce_wire::{MacAddr, MacControl};
use socket2::{Domain, Protocol, Socket, Type};

use crate::backend::{Backend, Nanos, PacketBatch};
use crate::iface;
use crate::ring::RxRing;
use crate::sys::{self, RxInfo, MAX_MMSG};

/// Receive slot: a jumbo frame and a tag.
const RX_SLOT: usize = 9216 + 18;
/// Memory of the receive ring: 4096 frames of a 1500-byte link, 512 of a
/// 9000-byte one, more than `roce perf` keeps in flight (4 MiB).
const RX_RING_BYTES: usize = 8 << 20;
/// PAUSE / PFC frames kept for `take_mac_control` at most.
const MAC_CONTROL_QUEUE: usize = 1024;
/// How long a resolved neighbour is trusted before it is read again.
const NEIGH_TTL: Nanos = 30_000_000_000;
/// How long after a failed lookup the table is read again.
const NEIGH_RETRY: Nanos = 1_000_000;

mod config;
mod rx;
mod tx;

pub use config::{PacketConfig, PacketStats};
use tx::Neigh;

/// RoCE v2 as whole Ethernet frames on one interface, through an
/// `AF_PACKET` socket (needs `CAP_NET_RAW`).
///
/// Sending prepends an Ethernet header to each of the engine's datagrams —
/// with an 802.1Q tag when configured, its PCP chosen from the datagram's
/// DSCP, which is what PFC pauses — and addresses it to the MAC address the
/// kernel's neighbour table has for the destination IP (on-link
/// destinations only: there is no route lookup, so a routed peer needs
/// [`PacketBackend::set_neighbor`] with its gateway's MAC). An unresolved
/// destination makes the kernel resolve it (a one-byte UDP datagram to the
/// discard port from a socket bound to the interface) and the datagram is
/// dropped and counted (`pkt_tx_unresolved`); RoCE's retransmission sends
/// it again once the neighbour is known.
///
/// Receiving, a classic BPF filter in the kernel keeps the socket to UDP
/// port 4791 over IPv4 / IPv6 (tagged or not) and to MAC control frames
/// (EtherType 0x8808). RoCE frames lose their Ethernet header and padding
/// and are handed on with [`RxMeta::header_exact`](crate::RxMeta::header_exact) set: the backend saw
/// the header that was on the wire, so the engine can check the ICRC.
/// PAUSE / PFC frames are parsed and queued for
/// [`take_mac_control`](PacketBackend::take_mac_control). Frames arrive
/// through a receive ring shared with the kernel (`PACKET_RX_RING`,
/// `TPACKET_V2`, 8 MiB): a poll looks at the next slot's status word in
/// memory, with no system call (between two namespaces a 2-byte WRITE
/// ping-pong's half round trip fell from 5.5-5.7 to 2.3-3.5 µs);
/// [`PacketConfig::rx_ring`]`(false)`, or a kernel that refuses
/// the ring, receives with `recvmmsg` instead. The host's own
/// outgoing frames are not delivered (`PACKET_IGNORE_OUTGOING`, and the
/// packet type is checked too).
///
/// Frames the kernel also delivers to its own stack: the kernel sees the
/// RoCE datagrams as well and, with no socket on port 4791, answers ICMP
/// port unreachable; run the kernel's rxe on the interface and the two
/// stacks would both answer. Keep the interface's addresses for this
/// backend or filter the kernel's replies with nftables.
pub struct PacketBackend {
    cfg: PacketConfig,
    ifindex: u32,
    mac: MacAddr,
    local: Vec<IpAddr>,
    sock: Socket,
    neigh: HashMap<IpAddr, Neigh>,
    headers: Vec<[u8; 18]>,
    rx_arena: Box<[u8]>,
    rx_info: Vec<RxInfo>,
    /// Headers and buffers of the mmsg calls, reused.
    mmsg: sys::MmsgScratch,
    /// The receive ring, when in use (`recvmmsg` otherwise).
    ring: Option<RxRing>,
    mac_ctl: VecDeque<(MacAddr, MacControl)>,
    stats: PacketStats,
}

impl std::fmt::Debug for PacketBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PacketBackend")
            .field("ifname", &self.cfg.ifname)
            .field("ifindex", &self.ifindex)
            .field("mac", &self.mac)
            .finish_non_exhaustive()
    }
}

impl PacketBackend {
    /// Opens the socket on the configured interface (in the calling
    /// thread's network namespace) and attaches the filter.
    ///
    /// # Errors
    ///
    /// `PermissionDenied` without `CAP_NET_RAW`; `NotFound` for an unknown
    /// interface; `InvalidInput` for one without an Ethernet address.
    pub fn open(cfg: PacketConfig) -> io::Result<Self> {
        let info = iface::interface(&cfg.ifname)?;
        let mac = info.mac.ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{} has no Ethernet address", cfg.ifname),
            )
        })?;
        // Protocol 0 receives nothing until bound, so no frame slips in
        // before the filter is attached.
        let sock = Socket::new(
            Domain::PACKET,
            Type::RAW.nonblocking(),
            Some(Protocol::from(0)),
        )
        .map_err(|e| io::Error::new(e.kind(), format!("AF_PACKET socket: {e}")))?;
        sock.attach_filter(&bpf::roce_filter())?;
        let _ = sys::setsockopt_int(
            sock.as_fd(),
            libc::SOL_PACKET,
            sys::PACKET_IGNORE_OUTGOING,
            1,
        );
        sys::setsockopt_int(sock.as_fd(), libc::SOL_PACKET, sys::PACKET_AUXDATA, 1)?;
        let _ = sock.set_recv_buffer_size(8 << 20);
        // Set up before binding, so that every frame goes through it.
        // Slots fit the link's frames (with a VLAN tag); a larger MTU set
        // later truncates frames, which are counted and dropped.
        let max_frame = info.mtu.map_or(RX_SLOT, |m| (m as usize + 18).min(RX_SLOT));
        let ring = cfg
            .rx_ring
            .then(|| RxRing::new(sock.as_fd(), max_frame, RX_RING_BYTES).ok())
            .flatten();
        sys::bind_packet(sock.as_fd(), info.index, libc::ETH_P_ALL as u16)?;
        let local = cfg.local.clone().unwrap_or_else(|| info.addrs.clone());
        Ok(PacketBackend {
            ifindex: info.index,
            mac,
            local,
            sock,
            neigh: HashMap::new(),
            headers: Vec::with_capacity(MAX_MMSG),
            rx_arena: vec![0u8; RX_SLOT * MAX_MMSG].into_boxed_slice(),
            rx_info: Vec::with_capacity(MAX_MMSG),
            mmsg: sys::MmsgScratch::new(),
            ring,
            mac_ctl: VecDeque::new(),
            stats: PacketStats::default(),
            cfg,
        })
    }

    /// The interface's MAC address (the source of every frame).
    pub fn mac(&self) -> MacAddr {
        self.mac
    }

    /// The interface index.
    pub fn ifindex(&self) -> u32 {
        self.ifindex
    }

    /// The counters.
    pub fn stats(&self) -> PacketStats {
        self.stats
    }

    /// Whether frames are received through the shared ring (see
    /// [`PacketConfig::rx_ring`]), and its number of frame slots.
    pub fn uses_rx_ring(&self) -> Option<usize> {
        self.ring.as_ref().map(RxRing::frames)
    }

    /// Pins `ip` to `mac` (no neighbour-table lookups for it).
    pub fn set_neighbor(&mut self, ip: IpAddr, mac: MacAddr) {
        self.neigh.insert(ip, Neigh::Static(mac));
    }

    /// The PAUSE / PFC frames received since the last call, with their
    /// source MAC, oldest first.
    pub fn take_mac_control(&mut self) -> Vec<(MacAddr, MacControl)> {
        self.mac_ctl.drain(..).collect()
    }

    /// Sends a PAUSE or PFC frame from this interface.
    pub fn send_mac_control(&mut self, ctl: &MacControl) -> io::Result<()> {
        let mut frame = [0u8; 64];
        let n = ctl
            .emit_frame(self.mac, &mut frame)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e.to_string()))?;
        let sent = self.sock.send(&frame[..n])?;
        if sent == n {
            self.stats.tx_frames += 1;
            self.stats.tx_bytes += n as u64;
        }
        Ok(())
    }

    /// Sleeps until a frame can be received or `timeout` passes; see
    /// [`UdpBackend::wait_readable`](crate::UdpBackend::wait_readable).
    pub fn wait_readable(&self, timeout: Option<Duration>) -> io::Result<bool> {
        let mut fds = [PollFd::new(self.sock.as_fd(), PollFlags::POLLIN)];
        match nix::poll::ppoll(&mut fds, timeout.map(TimeSpec::from_duration), None) {
            Ok(n) => Ok(n > 0),
            Err(Errno::EINTR) => Ok(false),
            Err(e) => Err(e.into()),
        }
    }
}

impl Backend for PacketBackend {
    fn local_addrs(&self) -> &[IpAddr] {
        &self.local
    }

    fn send(&mut self, now: Nanos, batch: &PacketBatch) -> io::Result<usize> {
        self.send_frames(now, batch)
    }

    fn recv(&mut self, _now: Nanos, batch: &mut PacketBatch) -> io::Result<usize> {
        self.recv_frames(batch)
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        let s = self.stats;
        let mut v = vec![
            ("pkt_tx_frames", s.tx_frames),
            ("pkt_tx_bytes", s.tx_bytes),
            ("pkt_tx_unresolved", s.tx_unresolved),
            ("pkt_tx_malformed", s.tx_malformed),
            ("pkt_tx_errors", s.tx_errors),
            ("pkt_neigh_lookups", s.neigh_lookups),
            ("pkt_neigh_solicits", s.neigh_solicits),
            ("pkt_rx_datagrams", s.rx_datagrams),
            ("pkt_rx_bytes", s.rx_bytes),
            ("pkt_rx_mac_control", s.rx_mac_control),
            ("pkt_rx_dropped", s.rx_dropped),
            ("pkt_rx_outgoing", s.rx_outgoing),
            ("pkt_rx_other_vlan", s.rx_other_vlan),
            ("pkt_rx_untagged", s.rx_untagged),
        ];
        const PCP: [&str; 8] = [
            "pkt_rx_pcp0",
            "pkt_rx_pcp1",
            "pkt_rx_pcp2",
            "pkt_rx_pcp3",
            "pkt_rx_pcp4",
            "pkt_rx_pcp5",
            "pkt_rx_pcp6",
            "pkt_rx_pcp7",
        ];
        v.extend(PCP.iter().zip(s.rx_by_pcp).map(|(n, c)| (*n, c)));
        v
    }

    /// The packet socket.
    fn wait_fd(&self) -> Option<BorrowedFd<'_>> {
        Some(self.sock.as_fd())
    }
}

impl AsFd for PacketBackend {
    /// The packet socket.
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.sock.as_fd()
    }
}

impl AsRawFd for PacketBackend {
    /// The packet socket.
    fn as_raw_fd(&self) -> RawFd {
        self.sock.as_raw_fd()
    }
}

#[cfg(test)]
mod frame_tests;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil;
    use roce_wire::Ecn;

    fn eth(tag: bool, ethertype: u16, payload: &[u8]) -> Vec<u8> {
        let mut f = vec![2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1];
        if tag {
            f.extend_from_slice(&[0x81, 0x00, 0x60, 0x00]);
        }
        f.extend_from_slice(&ethertype.to_be_bytes());
        f.extend_from_slice(payload);
        f
    }

    #[test]
    fn filter_keeps_roce_and_mac_control_only() {
        let v4 = testutil::v4_frame("10.0.0.1", "10.0.0.2", 1, 16, Ecn::Ect0);
        let v6 = testutil::v6_frame("fd00::1", "fd00::2", 1, 16);
        for tag in [false, true] {
            assert!(bpf::run(&eth(tag, 0x0800, &v4)), "IPv4 tag={tag}");
            assert!(bpf::run(&eth(tag, 0x86dd, &v6)), "IPv6 tag={tag}");
            let mut other = v4.clone();
            other[22..24].copy_from_slice(&53u16.to_be_bytes());
            assert!(!bpf::run(&eth(tag, 0x0800, &other)), "UDP 53");
            let mut tcp = v4.clone();
            tcp[9] = 6;
            assert!(!bpf::run(&eth(tag, 0x0800, &tcp)), "TCP");
            let mut frag = v4.clone();
            frag[6] = 0x00;
            frag[7] = 0x10;
            assert!(!bpf::run(&eth(tag, 0x0800, &frag)), "later fragment");
            let mut v6o = v6.clone();
            v6o[42..44].copy_from_slice(&4790u16.to_be_bytes());
            assert!(!bpf::run(&eth(tag, 0x86dd, &v6o)), "IPv6 other port");
            assert!(!bpf::run(&eth(tag, 0x0806, &[0; 28])), "ARP");
        }
        let mut pfc = [0u8; 60];
        MacControl::Pause { quanta: 1 }
            .emit_frame(MacAddr([2, 0, 0, 0, 0, 1]), &mut pfc)
            .unwrap();
        assert!(bpf::run(&pfc));
        assert!(!bpf::run(&v4[..10]), "runt");
        // An IPv4 header with options moves the UDP header.
        let mut opt = v4[..20].to_vec();
        opt[0] = 0x46;
        opt.extend_from_slice(&[1, 1, 1, 1]);
        opt.extend_from_slice(&v4[20..]);
        assert!(bpf::run(&eth(false, 0x0800, &opt)));
    }
}
