//! [`FrameRepr`]: building a complete RoCE v2 frame from reprs.

use crate::bth::{self, BthRepr};
use crate::crc32::Code;
use crate::error::{Error, Result};
use crate::ethernet::EthernetRepr;
use crate::ext::ExtHeaders;
use crate::icrc;
use crate::ip::IpRepr;
use crate::opcode::PayloadRule;
use crate::udp::{self, UdpChecksum, UdpRepr};

/// Everything needed to emit one RoCE v2 packet.
///
/// [`FrameRepr::emit`] writes it into a caller-provided buffer without
/// allocating: Ethernet (when `eth` is set; its EtherType is taken from the
/// IP version), IP with its length and checksum, UDP with its length, the
/// BTH with PadCnt derived from the payload, the extended headers, the
/// payload, zero pad bytes, the ICRC, and last the UDP checksum if asked
/// for (it covers the ICRC).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FrameRepr<'a> {
    /// Ethernet header; `None` emits a bare IP datagram.
    pub eth: Option<EthernetRepr>,
    /// IP header (its payload length is recomputed).
    pub ip: IpRepr,
    /// UDP header.
    pub udp: UdpRepr,
    /// BTH (its pad count is recomputed).
    pub bth: BthRepr,
    /// Extended headers: exactly the opcode's set.
    pub ext: ExtHeaders,
    /// Payload.
    pub payload: &'a [u8],
}

impl FrameRepr<'_> {
    /// Pad bytes after the payload.
    pub const fn pad_len(&self) -> usize {
        (4 - self.payload.len() % 4) % 4
    }

    /// Length of the UDP payload: BTH, extended headers, payload, pad, ICRC.
    pub fn transport_len(&self) -> usize {
        bth::HEADER_LEN
            + self.bth.opcode.headers().len()
            + self.payload.len()
            + self.pad_len()
            + icrc::LEN
    }

    /// Length of the IP datagram.
    pub fn ip_len(&self) -> usize {
        self.ip.header_len() + udp::HEADER_LEN + self.transport_len()
    }

    /// Length of the whole emitted buffer.
    pub fn len(&self) -> usize {
        self.eth.map_or(0, |e| e.header_len()) + self.ip_len()
    }

    /// Always false: a frame has headers.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Emits the frame into the start of `buf`; returns its length.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize> {
        let payload = self.payload;
        self.emit_inner(
            buf,
            payload.len(),
            |dst| dst.copy_from_slice(payload),
            Some(Code::Fast),
        )
    }

    /// Emits the frame with a payload of `payload_len` bytes that `fill`
    /// writes in place (the `payload` field is ignored), so that a caller
    /// can gather the payload straight into the transmit buffer. `fill`
    /// receives exactly `payload_len` bytes; the ICRC is computed after it.
    pub fn emit_with(
        &self,
        buf: &mut [u8],
        payload_len: usize,
        fill: impl FnOnce(&mut [u8]),
    ) -> Result<usize> {
        self.emit_inner(buf, payload_len, fill, Some(Code::Fast))
    }

    /// [`emit_with`](Self::emit_with), computing the ICRC by `code` (see
    /// [`crate::crc32`]), or, with `code` `None`, not at all: its four
    /// bytes are left zero, for a datagram whose receiver does not check
    /// it (a same-host ring's, docs/shm.md); [`icrc::fill`] computes it
    /// later when something needs it. A UDP checksum asked for is not
    /// computed either.
    pub fn emit_with_icrc(
        &self,
        buf: &mut [u8],
        payload_len: usize,
        fill: impl FnOnce(&mut [u8]),
        code: Option<Code>,
    ) -> Result<usize> {
        self.emit_inner(buf, payload_len, fill, code)
    }

    fn emit_inner(
        &self,
        buf: &mut [u8],
        plen: usize,
        fill: impl FnOnce(&mut [u8]),
        code: Option<Code>,
    ) -> Result<usize> {
        let opcode = self.bth.opcode;
        let rule = opcode.payload();
        let len_ok = if rule == PayloadRule::None {
            plen == 0
        } else {
            rule.allows_any_pmtu(plen)
        };
        if !len_ok {
            return Err(Error::BadPayloadLength { opcode, len: plen });
        }
        let pad = (4 - plen % 4) % 4;
        let transport_len = bth::HEADER_LEN + opcode.headers().len() + plen + pad + icrc::LEN;
        let udp_len = udp::HEADER_LEN + transport_len;
        let eth_len = self.eth.map_or(0, |e| e.header_len());
        let total = eth_len + self.ip.header_len() + udp_len;
        if buf.len() < total {
            return Err(Error::BufferTooSmall { needed: total });
        }
        let buf = &mut buf[..total];
        let mut at = 0;
        if let Some(mut eth) = self.eth {
            eth.ethertype = self.ip.ethertype();
            eth.emit(buf)?;
            at = eth.header_len();
        }
        let ip_start = at;
        let mut ip = self.ip;
        ip.set_payload_len(udp_len);
        ip.emit(&mut buf[at..])?;
        at += ip.header_len();
        let udp_start = at;
        self.udp.emit(&mut buf[at..], udp_len)?;
        at += udp::HEADER_LEN;
        let mut bth = self.bth;
        bth.pad_count = pad as u8;
        bth.emit(&mut buf[at..])?;
        at += bth::HEADER_LEN;
        at += self.ext.emit(opcode, &mut buf[at..])?;
        fill(&mut buf[at..at + plen]);
        at += plen;
        buf[at..at + pad].fill(0);
        at += pad;
        let Some(code) = code else {
            buf[at..at + icrc::LEN].fill(0);
            return Ok(total);
        };
        let crc = icrc::compute_with(code, &buf[ip_start..at], &[])?;
        buf[at..at + icrc::LEN].copy_from_slice(&icrc::to_wire(crc));
        at += icrc::LEN;
        if self.udp.checksum == UdpChecksum::Compute {
            let pseudo = ip.pseudo_header_sum(udp_len);
            udp::fill_checksum(&mut buf[udp_start..at], pseudo);
        }
        debug_assert_eq!(at, total);
        Ok(total)
    }
}
