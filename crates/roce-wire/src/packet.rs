//! [`RocePacket`]: a whole RoCE v2 packet parsed into its layers.

use crate::bth::{self, BthRepr};
use crate::crc32::Code;
use crate::error::{Error, Layer, Result};
use crate::ethernet::{ethertype, EthernetFrame, EthernetRepr};
use crate::ext::ExtHeaders;
use crate::icrc;
use crate::ip::IpRepr;
use crate::ipv4::Ipv4Repr;
use crate::ipv6::Ipv6Repr;
use crate::opcode::PayloadRule;
use crate::udp::{UdpPacket, UdpRepr, ROCE_V2_PORT};
use crate::FrameRepr;

/// A validated RoCE v2 packet, borrowing its payload from the frame.
///
/// Parsing checks the structure (lengths at every layer, IPv4 checksum,
/// non-zero UDP checksum, destination port 4791, TVer 0, a known opcode, the
/// opcode's header set, PadCnt against the payload, the opcode's payload
/// rule as far as it does not depend on the path MTU). The ICRC is checked
/// separately by [`RocePacket::check_icrc`], so that a tool can still show a
/// packet whose ICRC is wrong.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RocePacket<'a> {
    /// Ethernet header, when parsed from a frame.
    pub eth: Option<EthernetRepr>,
    /// IP header.
    pub ip: IpRepr,
    /// UDP header.
    pub udp: UdpRepr,
    /// Base transport header.
    pub bth: BthRepr,
    /// Extended transport headers.
    pub ext: ExtHeaders,
    /// Payload, without pad bytes.
    pub payload: &'a [u8],
    /// ICRC found on the wire.
    pub icrc: u32,
    covered: &'a [u8],
    /// `covered` starts at the IP header (else at the BTH: the packet was
    /// parsed from its UDP payload).
    with_headers: bool,
}

impl<'a> RocePacket<'a> {
    /// Parses an Ethernet frame (optionally 802.1Q tagged, without FCS;
    /// bytes after the IP datagram, such as Ethernet padding, are ignored).
    pub fn parse_ethernet(frame: &'a [u8]) -> Result<RocePacket<'a>> {
        let f = EthernetFrame::new_checked(frame)?;
        let eth = EthernetRepr::parse(&f);
        match eth.ethertype {
            ethertype::IPV4 | ethertype::IPV6 => {}
            t => return Err(Error::NotIp { ethertype: t }),
        }
        let start = f.header_len();
        let mut p = RocePacket::parse_ip(&frame[start..])?;
        let version_matches = matches!(
            (eth.ethertype, &p.ip),
            (ethertype::IPV4, IpRepr::V4(_)) | (ethertype::IPV6, IpRepr::V6(_))
        );
        if !version_matches {
            return Err(Error::BadIpVersion {
                version: frame[start] >> 4,
            });
        }
        p.eth = Some(eth);
        Ok(p)
    }

    /// Parses an IP datagram (IPv4 or IPv6, by its version nibble).
    pub fn parse_ip(dgram: &'a [u8]) -> Result<RocePacket<'a>> {
        let (ip, total) = match dgram.first().map(|b| b >> 4) {
            Some(4) => {
                let (r, n) = Ipv4Repr::parse(dgram)?;
                (IpRepr::V4(r), n)
            }
            Some(6) => {
                let (r, n) = Ipv6Repr::parse(dgram)?;
                (IpRepr::V6(r), n)
            }
            Some(v) => return Err(Error::BadIpVersion { version: v }),
            None => return Err(Error::Truncated { layer: Layer::Ipv4 }),
        };
        let ip_hlen = ip.header_len();
        let udp_bytes = &dgram[ip_hlen..total];
        let port = UdpPacket::new_checked(udp_bytes)?.dst_port();
        if port != ROCE_V2_PORT {
            return Err(Error::NotRocePort { port });
        }
        let (udp, udp_len) = UdpRepr::parse(udp_bytes, |len| ip.pseudo_header_sum(len))?;
        let roce = &udp_bytes[crate::udp::HEADER_LEN..udp_len];
        let covered_len = ip_hlen + udp_len - icrc::LEN.min(udp_len);
        RocePacket::parse_transport(ip, udp, roce, &dgram[..covered_len.min(total)], true)
    }

    /// Parses a RoCE v2 datagram held as its UDP payload alone (BTH to
    /// ICRC), with the IP and UDP header it arrived with given as reprs
    /// (what a UDP socket or a same-host ring says of it, with
    /// `ip.payload_len` and the UDP destination port free: they follow
    /// from `payload`). Nothing is copied; the ICRC, checked by
    /// [`check_icrc`](Self::check_icrc) as for [`parse_ip`](Self::parse_ip),
    /// is computed from the reprs' covered fields
    /// ([`icrc::compute_udp`]).
    pub fn parse_udp_payload(
        mut ip: IpRepr,
        src_port: u16,
        payload: &'a [u8],
    ) -> Result<RocePacket<'a>> {
        let udp = UdpRepr {
            src_port,
            dst_port: ROCE_V2_PORT,
            checksum: crate::UdpChecksum::Zero,
        };
        ip.set_payload_len(crate::udp::HEADER_LEN + payload.len());
        let covered = &payload[..payload.len().saturating_sub(icrc::LEN)];
        RocePacket::parse_transport(ip, udp, payload, covered, false)
    }

    /// The layers from the BTH on (`roce`: BTH to ICRC); `covered` is what
    /// the ICRC covers of the bytes held: from the IP header when
    /// `with_headers`, else from the BTH.
    fn parse_transport(
        ip: IpRepr,
        udp: UdpRepr,
        roce: &'a [u8],
        covered: &'a [u8],
        with_headers: bool,
    ) -> Result<RocePacket<'a>> {
        let bth = BthRepr::parse(roce)?;
        let (ext, ext_len) = ExtHeaders::parse(bth.opcode, &roce[bth::HEADER_LEN..])?;
        let rest = &roce[bth::HEADER_LEN + ext_len..];
        if rest.len() < icrc::LEN {
            return Err(Error::Truncated { layer: Layer::Icrc });
        }
        let (body, icrc_bytes) = rest.split_at(rest.len() - icrc::LEN);
        let pad = bth.pad_count as usize;
        if body.len() % 4 != 0 || pad > body.len() {
            return Err(Error::BadPadding {
                pad: bth.pad_count,
                available: body.len(),
            });
        }
        let payload = &body[..body.len() - pad];
        let rule = bth.opcode.payload();
        let len_ok = if rule == PayloadRule::None {
            body.is_empty()
        } else {
            rule.allows_any_pmtu(payload.len())
        };
        if !len_ok {
            return Err(Error::BadPayloadLength {
                opcode: bth.opcode,
                len: body.len() - pad,
            });
        }
        let mut wire = [0u8; icrc::LEN];
        wire.copy_from_slice(icrc_bytes);
        Ok(RocePacket {
            eth: None,
            ip,
            udp,
            bth,
            ext,
            payload,
            icrc: icrc::read(wire),
            covered,
            with_headers,
        })
    }

    /// The ICRC recomputed over the packet.
    pub fn computed_icrc(&self) -> u32 {
        self.computed_icrc_with(Code::Fast)
    }

    /// [`computed_icrc`](Self::computed_icrc) by `code` (see
    /// [`crate::crc32`]).
    pub fn computed_icrc_with(&self, code: Code) -> u32 {
        // `covered` was validated to hold the BTH, and the IP and UDP
        // headers when they were parsed.
        let icrc = if self.with_headers {
            icrc::compute_with(code, self.covered, &[])
        } else {
            icrc::compute_udp(code, &self.header_fields(), self.covered)
        };
        icrc.unwrap_or(!self.icrc)
    }

    /// The covered IP and UDP header fields the ICRC does not mask, as
    /// the packet's reprs hold them.
    pub fn header_fields(&self) -> icrc::HeaderFields {
        let (ipv4_id, dont_frag) = match self.ip {
            IpRepr::V4(r) => (r.ident, r.dont_frag),
            IpRepr::V6(_) => (0, true),
        };
        icrc::HeaderFields {
            src: self.ip.src(),
            dst: self.ip.dst(),
            src_port: self.udp.src_port,
            ipv4_id,
            dont_frag,
        }
    }

    /// Verifies the ICRC.
    pub fn check_icrc(&self) -> Result<()> {
        self.check_icrc_with(Code::Fast)
    }

    /// [`check_icrc`](Self::check_icrc), computing the ICRC by `code`.
    pub fn check_icrc_with(&self, code: Code) -> Result<()> {
        let expected = self.computed_icrc_with(code);
        if expected == self.icrc {
            Ok(())
        } else {
            Err(Error::BadIcrc {
                expected,
                found: self.icrc,
            })
        }
    }

    /// The bytes held that the ICRC covers: the IP datagram from its IP
    /// header through the pad, or, for a packet parsed from its UDP
    /// payload ([`parse_udp_payload`](Self::parse_udp_payload)), from the
    /// BTH through the pad.
    pub fn icrc_covered(&self) -> &'a [u8] {
        self.covered
    }

    /// Length of the IP datagram (with the ICRC).
    pub fn ip_len(&self) -> usize {
        let headers = if self.with_headers {
            0
        } else {
            self.ip.header_len() + crate::udp::HEADER_LEN
        };
        headers + self.covered.len() + icrc::LEN
    }

    /// The reprs that [`FrameRepr::emit`] turns back into this packet.
    pub fn to_repr(&self) -> FrameRepr<'a> {
        FrameRepr {
            eth: self.eth,
            ip: self.ip,
            udp: self.udp,
            bth: self.bth,
            ext: self.ext,
            payload: self.payload,
        }
    }
}
