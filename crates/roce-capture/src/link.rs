//! Link-layer header types and removal of the capture's link header.

/// Length of a Linux cooked-mode (SLL, link type 113) header.
pub const SLL_HEADER_LEN: usize = 16;
/// Length of a Linux cooked-mode v2 (SLL2, link type 276) header.
pub const SLL2_HEADER_LEN: usize = 20;

/// The link-layer header type of a packet (pcap `network` / pcapng IDB `LinkType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LinkType {
    /// `LINKTYPE_ETHERNET` (1): Ethernet II frames, destination MAC first.
    Ethernet,
    /// Raw IPv4/IPv6: `LINKTYPE_RAW` (101), the historical `DLT_RAW` values 12 and 14
    /// that some writers stored in files, and `LINKTYPE_IPV4`/`LINKTYPE_IPV6`
    /// (228/229).
    RawIp,
    /// `LINKTYPE_LINUX_SLL` (113): Linux cooked capture, 16-byte header.
    LinuxSll,
    /// `LINKTYPE_LINUX_SLL2` (276): Linux cooked capture v2, 20-byte header.
    LinuxSll2,
    /// Any other link type, by number; the caller can skip and count such packets.
    Other(u32),
}

impl LinkType {
    /// Maps a link-type number from a file to a `LinkType`.
    ///
    /// 12 and 14 are treated as raw IP, as libpcap and Wireshark do (they are the
    /// values of `DLT_RAW` on some platforms and occur in old files).
    pub fn from_raw(value: u32) -> Self {
        match value {
            1 => LinkType::Ethernet,
            12 | 14 | 101 | 228 | 229 => LinkType::RawIp,
            113 => LinkType::LinuxSll,
            276 => LinkType::LinuxSll2,
            other => LinkType::Other(other),
        }
    }

    /// The canonical link-type number (`LINKTYPE_RAW` = 101 for [`LinkType::RawIp`]).
    pub fn to_raw(self) -> u32 {
        match self {
            LinkType::Ethernet => 1,
            LinkType::RawIp => 101,
            LinkType::LinuxSll => 113,
            LinkType::LinuxSll2 => 276,
            LinkType::Other(v) => v,
        }
    }
}

/// The link-layer payload after removing the capture's link header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Payload<'a> {
    /// A whole Ethernet II frame (destination MAC first).
    Ethernet(&'a [u8]),
    /// An IPv4 or IPv6 datagram (raw-IP link types).
    Ip(&'a [u8]),
    /// Linux cooked capture (SLL or SLL2).
    Cooked {
        /// The protocol field of the SLL/SLL2 header: normally an EtherType such as
        /// 0x0800 (IPv4), 0x86dd (IPv6) or 0x8808 (MAC control). For some ARPHRD
        /// types Linux stores other values here (e.g. 0x0004 for 802.2 LLC).
        protocol: u16,
        /// The bytes after the SLL/SLL2 header.
        data: &'a [u8],
    },
    /// A link type this crate does not decode, by number.
    Unsupported(u32),
}

/// Error texts of [`decapsulate`].
pub(crate) const SLL_TOO_SHORT: &str = "captured bytes shorter than the Linux SLL header";
pub(crate) const SLL2_TOO_SHORT: &str = "captured bytes shorter than the Linux SLL2 header";

/// Removes the link header of `data` captured with link type `link`.
pub(crate) fn decapsulate(link: LinkType, data: &[u8]) -> Result<Payload<'_>, &'static str> {
    match link {
        LinkType::Ethernet => Ok(Payload::Ethernet(data)),
        LinkType::RawIp => Ok(Payload::Ip(data)),
        // SLL: packet type(2) ARPHRD(2) address length(2) address(8) protocol(2)
        LinkType::LinuxSll => match (data.get(14..16), data.get(SLL_HEADER_LEN..)) {
            (Some(&[hi, lo]), Some(rest)) => Ok(Payload::Cooked {
                protocol: u16::from_be_bytes([hi, lo]),
                data: rest,
            }),
            _ => Err(SLL_TOO_SHORT),
        },
        // SLL2: protocol(2) reserved(2) ifindex(4) ARPHRD(2) packet type(1)
        // address length(1) address(8)
        LinkType::LinuxSll2 => match (data.get(0..2), data.get(SLL2_HEADER_LEN..)) {
            (Some(&[hi, lo]), Some(rest)) => Ok(Payload::Cooked {
                protocol: u16::from_be_bytes([hi, lo]),
                data: rest,
            }),
            _ => Err(SLL2_TOO_SHORT),
        },
        LinkType::Other(v) => Ok(Payload::Unsupported(v)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raw_mapping_round_trips() {
        for v in [1, 101, 113, 276, 147] {
            assert_eq!(LinkType::from_raw(v).to_raw(), v);
        }
        assert_eq!(LinkType::from_raw(12), LinkType::RawIp);
        assert_eq!(LinkType::from_raw(14), LinkType::RawIp);
        assert_eq!(LinkType::from_raw(0), LinkType::Other(0));
    }

    #[test]
    fn sll_headers() {
        let mut sll = vec![0u8; 16];
        sll[14] = 0x08;
        sll.push(0x45);
        assert_eq!(
            decapsulate(LinkType::LinuxSll, &sll),
            Ok(Payload::Cooked {
                protocol: 0x0800,
                data: &[0x45]
            })
        );
        assert_eq!(
            decapsulate(LinkType::LinuxSll, &sll[..15]),
            Err(SLL_TOO_SHORT)
        );
        let mut sll2 = vec![0x86, 0xdd];
        sll2.resize(20, 0);
        assert_eq!(
            decapsulate(LinkType::LinuxSll2, &sll2),
            Ok(Payload::Cooked {
                protocol: 0x86dd,
                data: &[]
            })
        );
        assert_eq!(
            decapsulate(LinkType::LinuxSll2, &sll2[..19]),
            Err(SLL2_TOO_SHORT)
        );
        assert_eq!(decapsulate(LinkType::LinuxSll2, &[]), Err(SLL2_TOO_SHORT));
    }
}
