//! IPv4 header (RFC 791) as RoCE v2 uses it: no options, never fragmented.

use core::net::Ipv4Addr;

use crate::error::{Error, Layer, Result};
use crate::field::{ones_sum, set_u16, u16_at};
use crate::ip::{tos, Ecn, PROTO_UDP};
use crate::view::fixed_view;

/// Header length without options.
pub const HEADER_LEN: usize = 20;

mod field {
    pub(super) const VER_IHL: usize = 0;
    pub(super) const TOS: usize = 1;
    pub(super) const LENGTH: usize = 2;
    pub(super) const IDENT: usize = 4;
    pub(super) const FLAGS_FRAG: usize = 6;
    pub(super) const TTL: usize = 8;
    pub(super) const PROTOCOL: usize = 9;
    pub(super) const CHECKSUM: usize = 10;
    pub(super) const SRC: usize = 12;
    pub(super) const DST: usize = 16;
}

fixed_view!(
    /// A view of an IPv4 header (the 20 fixed bytes).
    Ipv4Packet,
    HEADER_LEN,
    Layer::Ipv4
);

impl<T: AsRef<[u8]>> Ipv4Packet<T> {
    fn b(&self) -> &[u8] {
        self.buffer.as_ref()
    }
    /// Version nibble.
    pub fn version(&self) -> u8 {
        self.b()[field::VER_IHL] >> 4
    }
    /// Header length in 32-bit words.
    pub fn ihl(&self) -> u8 {
        self.b()[field::VER_IHL] & 0x0f
    }
    /// DSCP (upper six TOS bits).
    pub fn dscp(&self) -> u8 {
        self.b()[field::TOS] >> 2
    }
    /// ECN codepoint (lower two TOS bits).
    pub fn ecn(&self) -> Ecn {
        Ecn::from_bits(self.b()[field::TOS])
    }
    /// Total length (header + payload).
    pub fn total_len(&self) -> u16 {
        u16_at(self.b(), field::LENGTH)
    }
    /// Identification.
    pub fn ident(&self) -> u16 {
        u16_at(self.b(), field::IDENT)
    }
    /// Don't Fragment flag.
    pub fn dont_frag(&self) -> bool {
        self.b()[field::FLAGS_FRAG] & 0x40 != 0
    }
    /// More Fragments flag.
    pub fn more_frags(&self) -> bool {
        self.b()[field::FLAGS_FRAG] & 0x20 != 0
    }
    /// Fragment offset in 8-byte units.
    pub fn frag_offset(&self) -> u16 {
        u16_at(self.b(), field::FLAGS_FRAG) & 0x1fff
    }
    /// Time to live.
    pub fn ttl(&self) -> u8 {
        self.b()[field::TTL]
    }
    /// Protocol of the payload.
    pub fn protocol(&self) -> u8 {
        self.b()[field::PROTOCOL]
    }
    /// Header checksum as found.
    pub fn checksum(&self) -> u16 {
        u16_at(self.b(), field::CHECKSUM)
    }
    /// Source address.
    pub fn src(&self) -> Ipv4Addr {
        let b = self.b();
        Ipv4Addr::new(
            b[field::SRC],
            b[field::SRC + 1],
            b[field::SRC + 2],
            b[field::SRC + 3],
        )
    }
    /// Destination address.
    pub fn dst(&self) -> Ipv4Addr {
        let b = self.b();
        Ipv4Addr::new(
            b[field::DST],
            b[field::DST + 1],
            b[field::DST + 2],
            b[field::DST + 3],
        )
    }
    /// True when the header checksum verifies.
    pub fn verify_checksum(&self) -> bool {
        let n = (self.ihl() as usize * 4).clamp(HEADER_LEN, self.b().len());
        ones_sum(0, &self.b()[..n]) == 0xffff
    }
}

/// An IPv4 header that carries UDP (no options, not fragmented).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Ipv4Repr {
    /// Source address.
    pub src: Ipv4Addr,
    /// Destination address.
    pub dst: Ipv4Addr,
    /// Differentiated services code point (traffic class selector).
    pub dscp: u8,
    /// ECN codepoint.
    pub ecn: Ecn,
    /// Identification. Covered by the ICRC: whoever builds the header must
    /// know what goes here (docs/protocol.md §4).
    pub ident: u16,
    /// Don't Fragment (RoCE v2 senders set it).
    pub dont_frag: bool,
    /// Time to live.
    pub ttl: u8,
    /// Length of the UDP datagram that follows.
    pub payload_len: usize,
}

impl Ipv4Repr {
    /// Parses and validates a header: version 4, no options, not a fragment,
    /// protocol UDP, checksum correct, total length within `buf`.
    ///
    /// Returns the repr and the datagram length (total length), which may be
    /// shorter than `buf` when the link layer padded the frame.
    pub fn parse(buf: &[u8]) -> Result<(Ipv4Repr, usize)> {
        let p = Ipv4Packet::new_checked(buf)?;
        if p.version() != 4 {
            return Err(Error::BadIpVersion {
                version: p.version(),
            });
        }
        if p.protocol() != PROTO_UDP {
            return Err(Error::NotUdp {
                protocol: p.protocol(),
            });
        }
        if p.ihl() != 5 {
            return Err(Error::Ipv4Options { ihl: p.ihl() });
        }
        let total = p.total_len() as usize;
        if total < HEADER_LEN || total > buf.len() {
            return Err(Error::BadIpLength);
        }
        if p.more_frags() || p.frag_offset() != 0 {
            return Err(Error::Fragmented);
        }
        if !p.verify_checksum() {
            return Err(Error::BadIpChecksum);
        }
        let repr = Ipv4Repr {
            src: p.src(),
            dst: p.dst(),
            dscp: p.dscp(),
            ecn: p.ecn(),
            ident: p.ident(),
            dont_frag: p.dont_frag(),
            ttl: p.ttl(),
            payload_len: total - HEADER_LEN,
        };
        Ok((repr, total))
    }

    /// Writes the header, checksum included, into the start of `buf`.
    pub fn emit(&self, buf: &mut [u8]) -> Result<()> {
        if buf.len() < HEADER_LEN {
            return Err(Error::BufferTooSmall { needed: HEADER_LEN });
        }
        let total = self.payload_len + HEADER_LEN;
        if total > u16::MAX as usize {
            return Err(Error::InvalidField("IPv4 total length above 65535"));
        }
        let b = &mut buf[..HEADER_LEN];
        b[field::VER_IHL] = 0x45;
        b[field::TOS] = tos(self.dscp, self.ecn)?;
        set_u16(b, field::LENGTH, total as u16);
        set_u16(b, field::IDENT, self.ident);
        set_u16(
            b,
            field::FLAGS_FRAG,
            if self.dont_frag { 0x4000 } else { 0 },
        );
        b[field::TTL] = self.ttl;
        b[field::PROTOCOL] = PROTO_UDP;
        set_u16(b, field::CHECKSUM, 0);
        b[field::SRC..field::SRC + 4].copy_from_slice(&self.src.octets());
        b[field::DST..field::DST + 4].copy_from_slice(&self.dst.octets());
        let sum = !(ones_sum(0, b) as u16);
        set_u16(b, field::CHECKSUM, sum);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // The Scapy vector's IPv4 header (docs/protocol.md §4 / testdata/icrc.md).
    const HDR: [u8; 20] = [
        0x45, 0x01, 0x00, 0x40, 0x04, 0x78, 0x40, 0x00, 0x40, 0x11, 0xb4, 0xd5, 0xc0, 0xa8, 0x00,
        0x07, 0xc0, 0xa8, 0x00, 0x07,
    ];

    #[test]
    fn parse_and_emit_reproduce_header() {
        let mut buf = [0u8; 64];
        buf[..20].copy_from_slice(&HDR);
        let (r, total) = Ipv4Repr::parse(&buf).unwrap();
        assert_eq!(total, 64);
        assert_eq!(r.ident, 0x0478);
        assert_eq!(r.ecn, Ecn::Ect1);
        assert_eq!(r.dscp, 0);
        assert!(r.dont_frag);
        let mut out = [0u8; 20];
        r.emit(&mut out).unwrap();
        assert_eq!(out, HDR);
    }

    #[test]
    fn rejects_bad_headers() {
        let mut buf = [0u8; 64];
        buf[..20].copy_from_slice(&HDR);
        let mut bad = buf;
        bad[10] ^= 1;
        assert_eq!(Ipv4Repr::parse(&bad), Err(Error::BadIpChecksum));
        assert_eq!(Ipv4Repr::parse(&buf[..40]), Err(Error::BadIpLength));
        assert_eq!(
            Ipv4Repr::parse(&buf[..19]),
            Err(Error::Truncated { layer: Layer::Ipv4 })
        );
        let mut tcp = buf;
        tcp[9] = 6;
        assert_eq!(Ipv4Repr::parse(&tcp), Err(Error::NotUdp { protocol: 6 }));
        let mut frag = buf;
        frag[6] = 0x20;
        assert_eq!(Ipv4Repr::parse(&frag), Err(Error::Fragmented));
        let mut opts = buf;
        opts[0] = 0x46;
        assert_eq!(Ipv4Repr::parse(&opts), Err(Error::Ipv4Options { ihl: 6 }));
    }
}
