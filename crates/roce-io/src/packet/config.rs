//! [`PacketConfig`] and the counters of a [`PacketBackend`](super::PacketBackend).

use std::net::IpAddr;

/// Settings of a [`PacketBackend`](super::PacketBackend). Start from [`PacketConfig::new`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PacketConfig {
    pub(super) ifname: String,
    pub(super) vlan: Option<u16>,
    pub(super) dscp_to_pcp: [u8; 64],
    pub(super) local: Option<Vec<IpAddr>>,
    pub(super) rx_ring: bool,
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
    /// ring the backend uses `recvmmsg` ([`PacketBackend::uses_rx_ring`](super::PacketBackend::uses_rx_ring)).
    pub fn rx_ring(mut self, yes: bool) -> Self {
        self.rx_ring = yes;
        self
    }
}

/// Counters of a [`PacketBackend`](super::PacketBackend) (also listed by
/// [`Backend::counters`](crate::Backend::counters) with a `pkt_` prefix).
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
