//! Ethernet II and IEEE 802.1Q (the PCP carries the PFC priority).

use core::fmt;

use crate::error::{Error, Layer, Result};
use crate::field::{set_u16, u16_at};

/// EtherType values this crate knows.
pub mod ethertype {
    /// IPv4.
    pub const IPV4: u16 = 0x0800;
    /// IPv6.
    pub const IPV6: u16 = 0x86dd;
    /// ARP.
    pub const ARP: u16 = 0x0806;
    /// IEEE 802.1Q customer VLAN tag.
    pub const VLAN: u16 = 0x8100;
    /// IEEE 802.3 MAC control (PAUSE, PFC).
    pub const MAC_CONTROL: u16 = 0x8808;
}

/// A 48-bit MAC address.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
pub struct MacAddr(pub [u8; 6]);

impl MacAddr {
    /// The broadcast address.
    pub const BROADCAST: MacAddr = MacAddr([0xff; 6]);
    /// The reserved multicast destination of PAUSE and PFC frames.
    pub const MAC_CONTROL: MacAddr = MacAddr([0x01, 0x80, 0xc2, 0x00, 0x00, 0x01]);
}

impl fmt::Display for MacAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = self.0;
        write!(
            f,
            "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
            b[0], b[1], b[2], b[3], b[4], b[5]
        )
    }
}

impl fmt::Debug for MacAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// An 802.1Q tag control field.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct VlanTag {
    /// Priority Code Point (0..=7): the class PFC pauses.
    pub pcp: u8,
    /// Drop Eligible Indicator.
    pub dei: bool,
    /// VLAN identifier (12 bits).
    pub vid: u16,
}

impl VlanTag {
    fn from_tci(tci: u16) -> VlanTag {
        VlanTag {
            pcp: (tci >> 13) as u8,
            dei: tci & 0x1000 != 0,
            vid: tci & 0x0fff,
        }
    }

    fn tci(&self) -> Result<u16> {
        if self.pcp > 7 {
            return Err(Error::InvalidField("802.1Q PCP above 7"));
        }
        if self.vid > 0x0fff {
            return Err(Error::InvalidField("802.1Q VID above 4095"));
        }
        Ok(((self.pcp as u16) << 13) | ((self.dei as u16) << 12) | self.vid)
    }
}

mod field {
    pub(super) const DST: core::ops::Range<usize> = 0..6;
    pub(super) const SRC: core::ops::Range<usize> = 6..12;
    pub(super) const TYPE: usize = 12;
    pub(super) const TCI: usize = 14;
    pub(super) const INNER_TYPE: usize = 16;
}

/// A view of an Ethernet II frame (without FCS), optionally 802.1Q tagged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EthernetFrame<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> EthernetFrame<T> {
    /// Untagged header length.
    pub const HEADER_LEN: usize = 14;
    /// Header length with one 802.1Q tag.
    pub const TAGGED_HEADER_LEN: usize = 18;

    /// Wraps a buffer without checks.
    pub const fn new_unchecked(buffer: T) -> Self {
        EthernetFrame { buffer }
    }

    /// Wraps a buffer after checking that the header (and tag) fit.
    pub fn new_checked(buffer: T) -> Result<Self> {
        let f = EthernetFrame::new_unchecked(buffer);
        f.check_len()?;
        Ok(f)
    }

    /// Checks that the header, and the 802.1Q tag when present, fit.
    pub fn check_len(&self) -> Result<()> {
        let b = self.buffer.as_ref();
        if b.len() < Self::HEADER_LEN {
            return Err(Error::Truncated {
                layer: Layer::Ethernet,
            });
        }
        if u16_at(b, field::TYPE) == ethertype::VLAN && b.len() < Self::TAGGED_HEADER_LEN {
            return Err(Error::Truncated { layer: Layer::Vlan });
        }
        Ok(())
    }

    /// Destination address.
    pub fn dst(&self) -> MacAddr {
        let mut m = [0; 6];
        m.copy_from_slice(&self.buffer.as_ref()[field::DST]);
        MacAddr(m)
    }

    /// Source address.
    pub fn src(&self) -> MacAddr {
        let mut m = [0; 6];
        m.copy_from_slice(&self.buffer.as_ref()[field::SRC]);
        MacAddr(m)
    }

    /// The 802.1Q tag, if the frame has one.
    pub fn vlan(&self) -> Option<VlanTag> {
        let b = self.buffer.as_ref();
        (u16_at(b, field::TYPE) == ethertype::VLAN)
            .then(|| VlanTag::from_tci(u16_at(b, field::TCI)))
    }

    /// The EtherType of the payload (behind the tag when tagged).
    pub fn ethertype(&self) -> u16 {
        let b = self.buffer.as_ref();
        match u16_at(b, field::TYPE) {
            ethertype::VLAN => u16_at(b, field::INNER_TYPE),
            t => t,
        }
    }

    /// Header length (14 or 18).
    pub fn header_len(&self) -> usize {
        if u16_at(self.buffer.as_ref(), field::TYPE) == ethertype::VLAN {
            Self::TAGGED_HEADER_LEN
        } else {
            Self::HEADER_LEN
        }
    }

    /// The bytes after the header.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[self.header_len()..]
    }
}

/// High-level form of an Ethernet header.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct EthernetRepr {
    /// Destination address.
    pub dst: MacAddr,
    /// Source address.
    pub src: MacAddr,
    /// Optional 802.1Q tag.
    pub vlan: Option<VlanTag>,
    /// EtherType of the payload.
    pub ethertype: u16,
}

impl EthernetRepr {
    /// Parses a checked view.
    pub fn parse<T: AsRef<[u8]>>(f: &EthernetFrame<T>) -> EthernetRepr {
        EthernetRepr {
            dst: f.dst(),
            src: f.src(),
            vlan: f.vlan(),
            ethertype: f.ethertype(),
        }
    }

    /// Header length this repr emits.
    pub const fn header_len(&self) -> usize {
        if self.vlan.is_some() {
            18
        } else {
            14
        }
    }

    /// Writes the header into the start of `buf`.
    pub fn emit(&self, buf: &mut [u8]) -> Result<()> {
        let n = self.header_len();
        if buf.len() < n {
            return Err(Error::BufferTooSmall { needed: n });
        }
        buf[field::DST].copy_from_slice(&self.dst.0);
        buf[field::SRC].copy_from_slice(&self.src.0);
        match self.vlan {
            Some(tag) => {
                set_u16(buf, field::TYPE, ethertype::VLAN);
                set_u16(buf, field::TCI, tag.tci()?);
                set_u16(buf, field::INNER_TYPE, self.ethertype);
            }
            None => set_u16(buf, field::TYPE, self.ethertype),
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tagged_frame_round_trip() {
        let repr = EthernetRepr {
            dst: MacAddr([2, 0, 0, 0, 0, 1]),
            src: MacAddr([2, 0, 0, 0, 0, 2]),
            vlan: Some(VlanTag {
                pcp: 3,
                dei: false,
                vid: 100,
            }),
            ethertype: ethertype::IPV4,
        };
        let mut buf = [0u8; 18];
        repr.emit(&mut buf).unwrap();
        assert_eq!(&buf[12..18], &[0x81, 0x00, 0x60, 0x64, 0x08, 0x00]);
        let f = EthernetFrame::new_checked(&buf[..]).unwrap();
        assert_eq!(EthernetRepr::parse(&f), repr);
        assert_eq!(f.header_len(), 18);
        assert!(EthernetFrame::new_checked(&buf[..16]).is_err());
    }

    #[test]
    fn bad_tag_values_are_errors() {
        let mut repr = EthernetRepr {
            dst: MacAddr::BROADCAST,
            src: MacAddr::default(),
            vlan: Some(VlanTag {
                pcp: 8,
                dei: false,
                vid: 1,
            }),
            ethertype: ethertype::IPV4,
        };
        let mut buf = [0u8; 18];
        assert!(repr.emit(&mut buf).is_err());
        repr.vlan = Some(VlanTag {
            pcp: 1,
            dei: true,
            vid: 4096,
        });
        assert!(repr.emit(&mut buf).is_err());
    }
}
