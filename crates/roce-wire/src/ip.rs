//! What IPv4 and IPv6 share: the ECN codepoint, DSCP, and [`IpRepr`].

use core::fmt;
use core::net::IpAddr;

use crate::error::{Error, Result};
use crate::ipv4::Ipv4Repr;
use crate::ipv6::Ipv6Repr;

/// IP protocol number of UDP.
pub const PROTO_UDP: u8 = 17;

/// The two ECN bits of the IPv4 TOS / IPv6 traffic class (RFC 3168).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
pub enum Ecn {
    /// 0b00: not ECN-capable transport.
    #[default]
    NotEct,
    /// 0b01: ECT(1).
    Ect1,
    /// 0b10: ECT(0).
    Ect0,
    /// 0b11: congestion experienced.
    Ce,
}

impl Ecn {
    /// From the low two bits of `v`.
    pub const fn from_bits(v: u8) -> Ecn {
        match v & 3 {
            0 => Ecn::NotEct,
            1 => Ecn::Ect1,
            2 => Ecn::Ect0,
            _ => Ecn::Ce,
        }
    }

    /// The two-bit codepoint.
    pub const fn bits(self) -> u8 {
        match self {
            Ecn::NotEct => 0,
            Ecn::Ect1 => 1,
            Ecn::Ect0 => 2,
            Ecn::Ce => 3,
        }
    }

    /// Short name: `not-ect`, `ect1`, `ect0`, `ce`.
    pub const fn name(self) -> &'static str {
        match self {
            Ecn::NotEct => "not-ect",
            Ecn::Ect1 => "ect1",
            Ecn::Ect0 => "ect0",
            Ecn::Ce => "ce",
        }
    }
}

impl fmt::Display for Ecn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Builds the TOS / traffic-class byte from DSCP and ECN.
pub(crate) fn tos(dscp: u8, ecn: Ecn) -> Result<u8> {
    if dscp > 63 {
        return Err(Error::InvalidField("DSCP above 63"));
    }
    Ok((dscp << 2) | ecn.bits())
}

/// An IPv4 or IPv6 header carrying UDP.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum IpRepr {
    /// IPv4.
    V4(Ipv4Repr),
    /// IPv6.
    V6(Ipv6Repr),
}

impl IpRepr {
    /// Source address.
    pub fn src(&self) -> IpAddr {
        match self {
            IpRepr::V4(r) => IpAddr::V4(r.src),
            IpRepr::V6(r) => IpAddr::V6(r.src),
        }
    }

    /// Destination address.
    pub fn dst(&self) -> IpAddr {
        match self {
            IpRepr::V4(r) => IpAddr::V4(r.dst),
            IpRepr::V6(r) => IpAddr::V6(r.dst),
        }
    }

    /// DSCP (6 bits).
    pub const fn dscp(&self) -> u8 {
        match self {
            IpRepr::V4(r) => r.dscp,
            IpRepr::V6(r) => r.dscp,
        }
    }

    /// ECN codepoint.
    pub const fn ecn(&self) -> Ecn {
        match self {
            IpRepr::V4(r) => r.ecn,
            IpRepr::V6(r) => r.ecn,
        }
    }

    /// Sets the ECN codepoint.
    pub fn set_ecn(&mut self, ecn: Ecn) {
        match self {
            IpRepr::V4(r) => r.ecn = ecn,
            IpRepr::V6(r) => r.ecn = ecn,
        }
    }

    /// Header length in bytes (20 or 40).
    pub const fn header_len(&self) -> usize {
        match self {
            IpRepr::V4(_) => crate::ipv4::HEADER_LEN,
            IpRepr::V6(_) => crate::ipv6::HEADER_LEN,
        }
    }

    /// Payload length (the UDP datagram) recorded in the header.
    pub const fn payload_len(&self) -> usize {
        match self {
            IpRepr::V4(r) => r.payload_len,
            IpRepr::V6(r) => r.payload_len,
        }
    }

    /// Sets the payload length.
    pub fn set_payload_len(&mut self, n: usize) {
        match self {
            IpRepr::V4(r) => r.payload_len = n,
            IpRepr::V6(r) => r.payload_len = n,
        }
    }

    /// The EtherType that carries this header.
    pub const fn ethertype(&self) -> u16 {
        match self {
            IpRepr::V4(_) => crate::ethernet::ethertype::IPV4,
            IpRepr::V6(_) => crate::ethernet::ethertype::IPV6,
        }
    }

    /// Writes the header into the start of `buf`.
    pub fn emit(&self, buf: &mut [u8]) -> Result<()> {
        match self {
            IpRepr::V4(r) => r.emit(buf),
            IpRepr::V6(r) => r.emit(buf),
        }
    }

    /// One's-complement sum of the UDP pseudo-header (RFC 768 / RFC 8200 §8.1).
    pub(crate) fn pseudo_header_sum(&self, udp_len: usize) -> u32 {
        use crate::field::ones_sum;
        match self {
            IpRepr::V4(r) => {
                let mut s = ones_sum(0, &r.src.octets());
                s = ones_sum(s, &r.dst.octets());
                ones_sum(s, &[0, PROTO_UDP, (udp_len >> 8) as u8, udp_len as u8])
            }
            IpRepr::V6(r) => {
                let mut s = ones_sum(0, &r.src.octets());
                s = ones_sum(s, &r.dst.octets());
                s = ones_sum(s, &(udp_len as u32).to_be_bytes());
                ones_sum(s, &[0, 0, 0, PROTO_UDP])
            }
        }
    }
}
