//! Building the IP datagram of one packet of a QP.

use std::net::{IpAddr, SocketAddr};

use roce_wire::{
    BthRepr, Ecn, ExtHeaders, FrameRepr, IpRepr, Ipv4Repr, Ipv6Repr, Transmit, UdpChecksum,
    UdpRepr, ROCE_V2_PORT,
};

/// The IPv4 identification the engine writes: what the kernel writes for
/// an unconnected DF UDP socket (docs/protocol.md §4), so UDP backends
/// keep the ICRC valid.
const IPV4_IDENT: u16 = 0;

/// The addressing of a QP's packets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Path {
    pub(crate) src: IpAddr,
    pub(crate) dst: IpAddr,
    pub(crate) sport: u16,
    pub(crate) dscp: u8,
    pub(crate) ecn: Ecn,
    pub(crate) ttl: u8,
    pub(crate) flow_label: u32,
    /// How the ICRC is computed ([`DeviceConfig::icrc_code`](crate::DeviceConfig));
    /// `None`: not at all, its bytes left zero (`Device::poll_transmit_icrc_if`).
    pub(crate) icrc_code: Option<roce_wire::crc32::Code>,
}

/// The UDP source port of a QP: fixed per QP for ECMP, in 0xC000..=0xFFFF
/// (RoCE v2 Annex A17.3; rxe hashes the QPN the same way in spirit).
pub(crate) fn udp_sport(qpn: u32) -> u16 {
    // A multiplicative hash spreads consecutive QPNs over the 14 bits.
    let h = qpn.wrapping_mul(0x9e37_79b1) >> 18;
    0xc000 | (h as u16 & 0x3fff)
}

impl Path {
    fn ip(&self) -> Option<IpRepr> {
        match (self.src, self.dst) {
            (IpAddr::V4(src), IpAddr::V4(dst)) => Some(IpRepr::V4(Ipv4Repr {
                src,
                dst,
                dscp: self.dscp,
                ecn: self.ecn,
                ident: IPV4_IDENT,
                dont_frag: true,
                ttl: self.ttl,
                payload_len: 0,
            })),
            (IpAddr::V6(src), IpAddr::V6(dst)) => Some(IpRepr::V6(Ipv6Repr {
                src,
                dst,
                dscp: self.dscp,
                ecn: self.ecn,
                flow_label: self.flow_label,
                hop_limit: self.ttl,
                payload_len: 0,
            })),
            _ => None,
        }
    }

    /// Emits one packet into `buf`; `fill` writes the payload in place.
    /// Returns the datagram length, or `None` if it cannot be built
    /// (address families differ, buffer too small).
    pub(crate) fn emit(
        &self,
        bth: BthRepr,
        ext: ExtHeaders,
        payload_len: usize,
        buf: &mut [u8],
        fill: impl FnOnce(&mut [u8]),
    ) -> Option<Transmit> {
        let repr = FrameRepr {
            eth: None,
            ip: self.ip()?,
            udp: UdpRepr {
                src_port: self.sport,
                dst_port: ROCE_V2_PORT,
                checksum: UdpChecksum::Zero,
            },
            bth,
            ext,
            payload: &[],
        };
        let size = repr
            .emit_with_icrc(buf, payload_len, fill, self.icrc_code)
            .ok()?;
        // How to send it, from what the header was built of (no parse).
        Some(Transmit {
            size,
            src: SocketAddr::new(self.src, self.sport),
            destination: SocketAddr::new(self.dst, ROCE_V2_PORT),
            dscp: self.dscp,
            ecn: self.ecn,
            ipv4_id: IPV4_IDENT,
            dont_frag: true,
            dest_qpn: repr.bth.dest_qp.value(),
            mad_owner: None,
        })
    }
}
