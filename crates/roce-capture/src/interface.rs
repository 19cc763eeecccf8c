//! pcapng interfaces: link type, snap length and timestamp resolution/offset.

use pcap_parser::{InterfaceDescriptionBlock, OptionCode};

use crate::link::LinkType;

const NS_PER_SEC: u128 = 1_000_000_000;

/// What a pcapng Interface Description Block says about the packets of its interface.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Interface {
    pub(crate) link: LinkType,
    /// 0 means "no limit".
    pub(crate) snaplen: u32,
    /// Raw `if_tsresol` byte (default 6: microseconds).
    tsresol: u8,
    /// `if_tsoffset`, seconds to add to every timestamp (default 0).
    tsoffset: i64,
}

impl Interface {
    /// Reads an IDB. `big_endian` is the byte order of the current section.
    ///
    /// The options are decoded here rather than with pcap-parser's helpers because
    /// pcap-parser 0.17 decodes `if_tsoffset` as little-endian even in big-endian
    /// sections and rejects every power-of-two `if_tsresol`.
    pub(crate) fn from_idb(idb: &InterfaceDescriptionBlock<'_>, big_endian: bool) -> Self {
        let mut tsresol = 6;
        let mut tsoffset = 0;
        for opt in &idb.options {
            let Ok(value) = opt.as_bytes() else {
                continue;
            };
            if opt.code == OptionCode::IfTsresol {
                if let Some(&b) = value.first() {
                    tsresol = b;
                }
            } else if opt.code == OptionCode::IfTsoffset {
                if let Ok(bytes) = <[u8; 8]>::try_from(value) {
                    tsoffset = if big_endian {
                        i64::from_be_bytes(bytes)
                    } else {
                        i64::from_le_bytes(bytes)
                    };
                }
            }
        }
        Interface {
            link: LinkType::from_raw(u32::from(idb.linktype.0 as u16)),
            snaplen: idb.snaplen,
            tsresol,
            tsoffset,
        }
    }

    /// Converts an EPB timestamp (in units of this interface's resolution) to
    /// nanoseconds since the epoch, saturating at 0 and `u64::MAX`.
    pub(crate) fn ts_ns(&self, ts_high: u32, ts_low: u32) -> u64 {
        let units = (u128::from(ts_high) << 32) | u128::from(ts_low);
        let exp = u32::from(self.tsresol & 0x7f);
        let ns = if self.tsresol & 0x80 == 0 {
            // resolution 10^-exp seconds
            if exp <= 9 {
                units * 10u128.pow(9 - exp)
            } else {
                10u128.checked_pow(exp - 9).map_or(0, |div| units / div)
            }
        } else {
            // resolution 2^-exp seconds; units < 2^64 so units * 1e9 < 2^94
            (units * NS_PER_SEC) >> exp
        };
        let total = ns as i128 + i128::from(self.tsoffset) * NS_PER_SEC as i128;
        u64::try_from(total.max(0)).unwrap_or(u64::MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn iface(tsresol: u8, tsoffset: i64) -> Interface {
        Interface {
            link: LinkType::Ethernet,
            snaplen: 0,
            tsresol,
            tsoffset,
        }
    }

    #[test]
    fn resolutions() {
        let ts = 1_700_000_000_123_456u64; // microseconds
        let (hi, lo) = ((ts >> 32) as u32, ts as u32);
        assert_eq!(iface(6, 0).ts_ns(hi, lo), ts * 1000);
        assert_eq!(iface(9, 0).ts_ns(hi, lo), ts);
        assert_eq!(iface(12, 0).ts_ns(hi, lo), ts / 1000);
        assert_eq!(iface(6, 10).ts_ns(hi, lo), ts * 1000 + 10_000_000_000);
        assert_eq!(iface(6, -2_000_000_000).ts_ns(hi, lo), 0);
        // 2^-10 s units: 1024 units = 1 s
        assert_eq!(iface(0x80 | 10, 0).ts_ns(0, 1024 * 5 + 512), 5_500_000_000);
        // absurd resolutions do not panic
        assert_eq!(iface(127, 0).ts_ns(u32::MAX, u32::MAX), 0);
        assert_eq!(iface(0, i64::MAX).ts_ns(u32::MAX, u32::MAX), u64::MAX);
        assert_eq!(iface(0xff, 0).ts_ns(u32::MAX, u32::MAX), 0);
    }
}
