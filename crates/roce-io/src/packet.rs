//! [`PacketBackend`]: RoCE v2 as whole Ethernet frames on one interface.

mod bpf;

use std::collections::{HashMap, VecDeque};
use std::io::{self, IoSlice};
use std::net::IpAddr;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::time::Duration;

use nix::errno::Errno;
use nix::poll::{PollFd, PollFlags};
use nix::sys::time::TimeSpec;
use roce_wire::ethernet::{ethertype, EthernetFrame};
use roce_wire::{EthernetRepr, MacAddr, MacControl, VlanTag, ROCE_V2_PORT};
use socket2::{Domain, Protocol, Socket, Type};

use crate::backend::{Backend, Nanos, PacketBatch, RxMeta};
use crate::datagram;
use crate::iface;
use crate::neigh;
use crate::ring::RxRing;
use crate::sys::{self, RxInfo, TxMsg, MAX_MMSG};

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

/// Settings of a [`PacketBackend`]. Start from [`PacketConfig::new`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PacketConfig {
    ifname: String,
    vlan: Option<u16>,
    dscp_to_pcp: [u8; 64],
    local: Option<Vec<IpAddr>>,
    rx_ring: bool,
}

impl PacketConfig {
    /// Defaults for interface `ifname`: untagged frames, the interface's
    /// own addresses as local addresses, and (when tagging) PCP = DSCP / 8
    /// (the class selector: DSCP 26 → 3, 48 → 6, the common RoCE data and
    /// CNP classes).
    pub fn new(ifname: impl Into<String>) -> Self {
        let mut map = [0u8; 64];
        for (d, p) in map.iter_mut().enumerate() {
            *p = (d >> 3) as u8;
        }
        PacketConfig {
            ifname: ifname.into(),
            vlan: None,
            dscp_to_pcp: map,
            local: None,
            rx_ring: true,
        }
    }

    /// Tags every frame with 802.1Q VLAN `vid` (0 = priority tag only);
    /// `None` sends untagged frames.
    pub fn vlan(mut self, vid: Option<u16>) -> Self {
        self.vlan = vid.map(|v| v & 0x0fff);
        self
    }

    /// Maps DSCP `dscp` (0..=63) to 802.1Q priority `pcp` (0..=7).
    pub fn pcp_for_dscp(mut self, dscp: u8, pcp: u8) -> Self {
        self.dscp_to_pcp[usize::from(dscp & 63)] = pcp & 7;
        self
    }

    /// The local addresses to report (default: the interface's).
    pub fn local_addrs(mut self, addrs: Vec<IpAddr>) -> Self {
        self.local = Some(addrs);
        self
    }

    /// Receive through a ring shared with the kernel (`PACKET_RX_RING`,
    /// the default: frames are taken from memory, no system call per
    /// batch) or with `recvmmsg` (`false`). When the kernel refuses the
    /// ring the backend uses `recvmmsg` ([`PacketBackend::uses_rx_ring`]).
    pub fn rx_ring(mut self, yes: bool) -> Self {
        self.rx_ring = yes;
        self
    }
}

/// Counters of a [`PacketBackend`] (also listed by
/// [`Backend::counters`] with a `pkt_` prefix).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct PacketStats {
    /// Frames the kernel accepted.
    pub tx_frames: u64,
    /// Their bytes.
    pub tx_bytes: u64,
    /// Datagrams dropped because the destination's MAC was not known yet.
    pub tx_unresolved: u64,
    /// Datagrams that were not IPv4 / IPv6; dropped.
    pub tx_malformed: u64,
    /// Frames the kernel refused; dropped.
    pub tx_errors: u64,
    /// Neighbour-table reads.
    pub neigh_lookups: u64,
    /// Resolutions started.
    pub neigh_solicits: u64,
    /// RoCE datagrams handed to the engine.
    pub rx_datagrams: u64,
    /// Their bytes (IP datagrams).
    pub rx_bytes: u64,
    /// PAUSE / PFC frames received.
    pub rx_mac_control: u64,
    /// Frames that passed the kernel filter but are not usable (truncated,
    /// inconsistent lengths, unknown MAC control opcode, queue full).
    pub rx_dropped: u64,
    /// Own outgoing frames skipped.
    pub rx_outgoing: u64,
    /// RoCE frames of another VLAN than the device's; dropped.
    pub rx_other_vlan: u64,
    /// RoCE frames received per 802.1Q priority.
    pub rx_by_pcp: [u64; 8],
    /// RoCE frames received without a tag.
    pub rx_untagged: u64,
}

#[derive(Clone, Copy, Debug)]
enum Neigh {
    Known { mac: MacAddr, until: Nanos },
    Static(MacAddr),
    Unknown { retry_at: Nanos },
}

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
/// and are handed on with [`RxMeta::header_exact`] set: the backend saw
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

    /// The destination MAC for `ip`, reading the neighbour table when
    /// needed and starting a resolution when it has none.
    fn resolve(&mut self, now: Nanos, ip: IpAddr) -> Option<MacAddr> {
        match self.neigh.get(&ip) {
            Some(Neigh::Static(mac)) => return Some(*mac),
            Some(Neigh::Known { mac, until }) if now < *until => return Some(*mac),
            Some(Neigh::Unknown { retry_at }) if now < *retry_at => return None,
            _ => {}
        }
        self.stats.neigh_lookups += 1;
        match neigh::lookup(self.ifindex, ip) {
            Ok(Some(mac)) => {
                self.neigh.insert(
                    ip,
                    Neigh::Known {
                        mac,
                        until: now.saturating_add(NEIGH_TTL),
                    },
                );
                Some(mac)
            }
            _ => {
                if neigh::solicit(&self.cfg.ifname, ip).is_ok() {
                    self.stats.neigh_solicits += 1;
                }
                self.neigh.insert(
                    ip,
                    Neigh::Unknown {
                        retry_at: now.saturating_add(NEIGH_RETRY),
                    },
                );
                None
            }
        }
    }

    /// Ethernet header for a datagram with `dscp` to `dst`; returns its
    /// length.
    fn header(&self, dst: MacAddr, dscp: u8, v6: bool, out: &mut [u8; 18]) -> usize {
        let eth = EthernetRepr {
            dst,
            src: self.mac,
            vlan: self.cfg.vlan.map(|vid| VlanTag {
                pcp: self.cfg.dscp_to_pcp[usize::from(dscp & 63)],
                dei: false,
                vid,
            }),
            ethertype: if v6 { ethertype::IPV6 } else { ethertype::IPV4 },
        };
        match eth.emit(out) {
            Ok(()) => eth.header_len(),
            Err(_) => 0,
        }
    }

    fn handle_frame(&mut self, frame: &[u8], info: &RxInfo, batch: &mut PacketBatch) {
        if info.truncated {
            self.stats.rx_dropped += 1;
            return;
        }
        if info.pkttype == Some(sys::PACKET_OUTGOING) {
            self.stats.rx_outgoing += 1;
            return;
        }
        let Ok(f) = EthernetFrame::new_checked(frame) else {
            self.stats.rx_dropped += 1;
            return;
        };
        let pcp = f
            .vlan()
            .map(|t| t.pcp)
            .or(info.vlan_tci.map(|tci| (tci >> 13) as u8));
        // RoCE from this device's VLAN only (an untagged or priority-tagged
        // frame, VID 0, when it has none): the tag in the frame, or the one
        // the kernel moved into the packet's metadata. MAC control (PFC)
        // is per link, whatever the VLAN.
        let vid = f
            .vlan()
            .map(|t| t.vid)
            .or(info.vlan_tci.map(|tci| tci & 0x0fff))
            .unwrap_or(0);
        let other_vlan = vid != self.cfg.vlan.unwrap_or(0);
        match f.ethertype() {
            ethertype::MAC_CONTROL => match MacControl::parse(f.payload()) {
                Ok(c) if self.mac_ctl.len() < MAC_CONTROL_QUEUE => {
                    self.stats.rx_mac_control += 1;
                    self.mac_ctl.push_back((f.src(), c));
                }
                _ => self.stats.rx_dropped += 1,
            },
            ethertype::IPV4 | ethertype::IPV6 if other_vlan => self.stats.rx_other_vlan += 1,
            ethertype::IPV4 | ethertype::IPV6 => {
                let p = f.payload();
                let len = match datagram::ip_header_len(p).map(|_| p[0] >> 4) {
                    Some(4) => usize::from(u16::from_be_bytes([p[2], p[3]])),
                    Some(6) => 40 + usize::from(u16::from_be_bytes([p[4], p[5]])),
                    _ => 0,
                };
                let hl = datagram::ip_header_len(p).unwrap_or(0);
                let roce = len > hl + 8
                    && len <= p.len()
                    && u16::from_be_bytes([p[hl + 2], p[hl + 3]]) == ROCE_V2_PORT;
                if !roce || !batch.push_with_meta(&p[..len], RxMeta::exact()) {
                    self.stats.rx_dropped += 1;
                    return;
                }
                self.stats.rx_datagrams += 1;
                self.stats.rx_bytes += len as u64;
                match pcp {
                    Some(p) => self.stats.rx_by_pcp[usize::from(p & 7)] += 1,
                    None => self.stats.rx_untagged += 1,
                }
            }
            _ => self.stats.rx_dropped += 1,
        }
    }
}

impl Backend for PacketBackend {
    fn local_addrs(&self) -> &[IpAddr] {
        &self.local
    }

    fn send(&mut self, now: Nanos, batch: &PacketBatch) -> io::Result<usize> {
        let mut i = 0;
        while i < batch.len() {
            // Plan up to MAX_MMSG frames: headers first, then iovecs.
            self.headers.clear();
            let mut plan: Vec<(usize, usize)> = Vec::with_capacity(MAX_MMSG);
            while i < batch.len() && plan.len() < MAX_MMSG {
                let d = batch.get(i);
                i += 1;
                let Some(t) = batch.transmit(i - 1).filter(|t| t.size == d.len()) else {
                    self.stats.tx_malformed += 1;
                    continue;
                };
                let Some(dst) = self.resolve(now, t.destination.ip()) else {
                    self.stats.tx_unresolved += 1;
                    continue;
                };
                let mut h = [0u8; 18];
                let n = self.header(dst, t.dscp, t.is_ipv6(), &mut h);
                self.headers.push(h);
                plan.push((i - 1, n));
            }
            let mut iovs: Vec<IoSlice<'_>> = Vec::with_capacity(2 * plan.len());
            let mut msgs: Vec<TxMsg> = Vec::with_capacity(plan.len());
            for (k, &(idx, n)) in plan.iter().enumerate() {
                msgs.push(TxMsg {
                    dst: None,
                    iov_start: iovs.len(),
                    iov_len: 2,
                    tos: None,
                    gso_size: 0,
                });
                iovs.push(IoSlice::new(&self.headers[k][..n]));
                iovs.push(IoSlice::new(batch.get(idx)));
            }
            let mut done = 0;
            while done < msgs.len() {
                match sys::sendmmsg(
                    self.sock.as_fd(),
                    &mut self.mmsg,
                    false,
                    &msgs[done..],
                    &iovs,
                ) {
                    Ok(n) => {
                        for &(idx, h) in &plan[done..done + n] {
                            self.stats.tx_frames += 1;
                            self.stats.tx_bytes += (h + batch.get(idx).len()) as u64;
                        }
                        done += n;
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                        // Everything before the first unsent frame was
                        // taken (dropped datagrams included).
                        return Ok(plan[done].0);
                    }
                    Err(_) => {
                        self.stats.tx_errors += 1;
                        done += 1;
                    }
                }
            }
        }
        Ok(batch.len())
    }

    fn recv(&mut self, _now: Nanos, batch: &mut PacketBatch) -> io::Result<usize> {
        batch.clear();
        if let Some(mut ring) = self.ring.take() {
            while !batch.is_full() {
                let Some(f) = ring.peek() else {
                    break;
                };
                self.handle_frame(f.data, &f.info, batch);
                ring.release();
            }
            self.ring = Some(ring);
            return Ok(batch.len());
        }
        for _ in 0..4 {
            if batch.is_full() {
                break;
            }
            let want = batch.capacity() - batch.len();
            let mut infos = std::mem::take(&mut self.rx_info);
            let n = sys::recvmmsg(
                self.sock.as_fd(),
                &mut self.mmsg,
                &mut self.rx_arena,
                RX_SLOT,
                want,
                &mut infos,
            )?;
            let arena = std::mem::take(&mut self.rx_arena);
            for (k, info) in infos.iter().enumerate() {
                let frame = &arena[k * RX_SLOT..k * RX_SLOT + info.len];
                self.handle_frame(frame, info, batch);
            }
            self.rx_arena = arena;
            self.rx_info = infos;
            if n == 0 {
                break;
            }
        }
        Ok(batch.len())
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
