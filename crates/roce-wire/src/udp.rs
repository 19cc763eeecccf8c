//! UDP header (RFC 768). RoCE v2 uses destination port 4791.

use crate::error::{Error, Layer, Result};
use crate::field::{set_u16, u16_at};
use crate::view::fixed_view;

/// The IANA-assigned RoCE v2 UDP port.
pub const ROCE_V2_PORT: u16 = 4791;
/// UDP header length.
pub const HEADER_LEN: usize = 8;

fixed_view!(
    /// A view of a UDP header.
    UdpPacket,
    HEADER_LEN,
    Layer::Udp
);

impl<T: AsRef<[u8]>> UdpPacket<T> {
    /// Source port.
    pub fn src_port(&self) -> u16 {
        u16_at(self.buffer.as_ref(), 0)
    }
    /// Destination port.
    pub fn dst_port(&self) -> u16 {
        u16_at(self.buffer.as_ref(), 2)
    }
    /// Length (header + payload).
    pub fn len(&self) -> u16 {
        u16_at(self.buffer.as_ref(), 4)
    }
    /// True when the length field says there is no payload.
    pub fn is_empty(&self) -> bool {
        self.len() as usize <= HEADER_LEN
    }
    /// Checksum as found (0 = not computed).
    pub fn checksum(&self) -> u16 {
        u16_at(self.buffer.as_ref(), 6)
    }
}

/// How the UDP checksum is (or was) set.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum UdpChecksum {
    /// Zero: no checksum. What rxe and RoCE NICs send over IPv4.
    #[default]
    Zero,
    /// A computed checksum (it covers the ICRC, so it is computed last).
    Compute,
}

/// A UDP header.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct UdpRepr {
    /// Source port (per-QP entropy for ECMP in 0xC000..=0xFFFF).
    pub src_port: u16,
    /// Destination port.
    pub dst_port: u16,
    /// Checksum policy.
    pub checksum: UdpChecksum,
}

impl UdpRepr {
    /// Parses a UDP datagram. `pseudo_sum` is the one's-complement sum of
    /// the IP pseudo-header; a non-zero checksum must verify against it.
    /// Returns the repr and the datagram length from the length field.
    pub(crate) fn parse(
        buf: &[u8],
        pseudo_sum: impl FnOnce(usize) -> u32,
    ) -> Result<(UdpRepr, usize)> {
        let p = UdpPacket::new_checked(buf)?;
        let len = p.len() as usize;
        if len < HEADER_LEN || len > buf.len() {
            return Err(Error::BadUdpLength);
        }
        let checksum = if p.checksum() == 0 {
            UdpChecksum::Zero
        } else {
            let sum = crate::field::ones_sum(pseudo_sum(len), &buf[..len]);
            if sum != 0xffff {
                return Err(Error::BadUdpChecksum);
            }
            UdpChecksum::Compute
        };
        Ok((
            UdpRepr {
                src_port: p.src_port(),
                dst_port: p.dst_port(),
                checksum,
            },
            len,
        ))
    }

    /// Writes the header with the given datagram length and a zero checksum
    /// (`FrameRepr::emit` computes the checksum itself when asked to).
    pub fn emit(&self, buf: &mut [u8], len: usize) -> Result<()> {
        if buf.len() < HEADER_LEN {
            return Err(Error::BufferTooSmall { needed: HEADER_LEN });
        }
        if len > u16::MAX as usize {
            return Err(Error::InvalidField("UDP length above 65535"));
        }
        set_u16(buf, 0, self.src_port);
        set_u16(buf, 2, self.dst_port);
        set_u16(buf, 4, len as u16);
        set_u16(buf, 6, 0);
        Ok(())
    }
}

/// Computes and stores the checksum of the complete datagram `dgram`
/// (header with zero checksum + payload) given the pseudo-header sum.
pub(crate) fn fill_checksum(dgram: &mut [u8], pseudo_sum: u32) {
    let sum = !(crate::field::ones_sum(pseudo_sum, dgram) as u16);
    set_u16(dgram, 6, if sum == 0 { 0xffff } else { sum });
}
