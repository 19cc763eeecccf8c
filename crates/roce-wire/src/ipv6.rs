//! IPv6 header (RFC 8200) as RoCE v2 uses it: UDP directly after the fixed
//! header, no extension headers.

use core::net::Ipv6Addr;

use crate::error::{Error, Layer, Result};
use crate::field::{set_u16, u16_at, u32_at};
use crate::ip::{tos, Ecn, PROTO_UDP};
use crate::view::fixed_view;

/// Fixed header length.
pub const HEADER_LEN: usize = 40;

mod field {
    pub(super) const VER_TC_FLOW: usize = 0;
    pub(super) const LENGTH: usize = 4;
    pub(super) const NEXT_HEADER: usize = 6;
    pub(super) const HOP_LIMIT: usize = 7;
    pub(super) const SRC: usize = 8;
    pub(super) const DST: usize = 24;
}

fixed_view!(
    /// A view of an IPv6 fixed header.
    Ipv6Packet,
    HEADER_LEN,
    Layer::Ipv6
);

impl<T: AsRef<[u8]>> Ipv6Packet<T> {
    fn word0(&self) -> u32 {
        u32_at(self.buffer.as_ref(), field::VER_TC_FLOW)
    }
    /// Version nibble.
    pub fn version(&self) -> u8 {
        (self.word0() >> 28) as u8
    }
    /// Traffic class byte (DSCP << 2 | ECN).
    pub fn traffic_class(&self) -> u8 {
        (self.word0() >> 20) as u8
    }
    /// Flow label (20 bits).
    pub fn flow_label(&self) -> u32 {
        self.word0() & 0x000f_ffff
    }
    /// Payload length.
    pub fn payload_len(&self) -> u16 {
        u16_at(self.buffer.as_ref(), field::LENGTH)
    }
    /// Next header.
    pub fn next_header(&self) -> u8 {
        self.buffer.as_ref()[field::NEXT_HEADER]
    }
    /// Hop limit.
    pub fn hop_limit(&self) -> u8 {
        self.buffer.as_ref()[field::HOP_LIMIT]
    }
    fn addr(&self, at: usize) -> Ipv6Addr {
        let mut a = [0u8; 16];
        a.copy_from_slice(&self.buffer.as_ref()[at..at + 16]);
        Ipv6Addr::from(a)
    }
    /// Source address.
    pub fn src(&self) -> Ipv6Addr {
        self.addr(field::SRC)
    }
    /// Destination address.
    pub fn dst(&self) -> Ipv6Addr {
        self.addr(field::DST)
    }
}

/// An IPv6 header carrying UDP.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Ipv6Repr {
    /// Source address.
    pub src: Ipv6Addr,
    /// Destination address.
    pub dst: Ipv6Addr,
    /// DSCP (upper six traffic-class bits).
    pub dscp: u8,
    /// ECN codepoint.
    pub ecn: Ecn,
    /// Flow label (20 bits).
    pub flow_label: u32,
    /// Hop limit.
    pub hop_limit: u8,
    /// Length of the UDP datagram that follows.
    pub payload_len: usize,
}

impl Ipv6Repr {
    /// Parses and validates a header; returns the repr and the datagram
    /// length (header + payload length), which may be shorter than `buf`.
    pub fn parse(buf: &[u8]) -> Result<(Ipv6Repr, usize)> {
        let p = Ipv6Packet::new_checked(buf)?;
        if p.version() != 6 {
            return Err(Error::BadIpVersion {
                version: p.version(),
            });
        }
        if p.next_header() != PROTO_UDP {
            return Err(Error::NotUdp {
                protocol: p.next_header(),
            });
        }
        let total = HEADER_LEN + p.payload_len() as usize;
        if total > buf.len() {
            return Err(Error::BadIpLength);
        }
        let tc = p.traffic_class();
        let repr = Ipv6Repr {
            src: p.src(),
            dst: p.dst(),
            dscp: tc >> 2,
            ecn: Ecn::from_bits(tc),
            flow_label: p.flow_label(),
            hop_limit: p.hop_limit(),
            payload_len: p.payload_len() as usize,
        };
        Ok((repr, total))
    }

    /// Writes the header into the start of `buf`.
    pub fn emit(&self, buf: &mut [u8]) -> Result<()> {
        if buf.len() < HEADER_LEN {
            return Err(Error::BufferTooSmall { needed: HEADER_LEN });
        }
        if self.payload_len > u16::MAX as usize {
            return Err(Error::InvalidField("IPv6 payload length above 65535"));
        }
        if self.flow_label > 0x000f_ffff {
            return Err(Error::InvalidField("IPv6 flow label above 20 bits"));
        }
        let tc = tos(self.dscp, self.ecn)? as u32;
        let w0 = (6u32 << 28) | (tc << 20) | self.flow_label;
        buf[0..4].copy_from_slice(&w0.to_be_bytes());
        set_u16(buf, field::LENGTH, self.payload_len as u16);
        buf[field::NEXT_HEADER] = PROTO_UDP;
        buf[field::HOP_LIMIT] = self.hop_limit;
        buf[field::SRC..field::SRC + 16].copy_from_slice(&self.src.octets());
        buf[field::DST..field::DST + 16].copy_from_slice(&self.dst.octets());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let r = Ipv6Repr {
            src: "fe80::1".parse().unwrap(),
            dst: "2001:db8::2".parse().unwrap(),
            dscp: 26,
            ecn: Ecn::Ect0,
            flow_label: 0xabcde,
            hop_limit: 64,
            payload_len: 8,
        };
        let mut buf = [0u8; 48];
        r.emit(&mut buf).unwrap();
        assert_eq!(buf[0], 0x66);
        assert_eq!(buf[1], 0xaa); // TC low nibble 0xa, flow label bits 19:16 = 0xa
        assert_eq!(Ipv6Repr::parse(&buf), Ok((r, 48)));
        assert_eq!(Ipv6Repr::parse(&buf[..47]), Err(Error::BadIpLength));
        buf[6] = 6;
        assert_eq!(Ipv6Repr::parse(&buf), Err(Error::NotUdp { protocol: 6 }));
    }
}
