//! Builders of real RoCE v2 datagrams for the unit tests.

use roce_testkit::frames;
use roce_wire::*;

fn emit(ip: IpRepr, psn: u32, payload_len: usize, udp_checksum: UdpChecksum) -> Vec<u8> {
    let payload: Vec<u8> = (0..payload_len)
        .map(|i| (i * 7 + psn as usize) as u8)
        .collect();
    let mut bth = BthRepr::new(Opcode::RC_SEND_ONLY, Qpn::new(0x11), Psn::new(psn));
    bth.ack_req = true;
    frames::emit(&FrameRepr {
        eth: None,
        ip,
        udp: UdpRepr {
            checksum: udp_checksum,
            ..frames::udp(0xc000 | (psn as u16 & 0xff))
        },
        bth,
        ext: ExtHeaders::default(),
        payload: &payload,
    })
}

/// An RC SEND_ONLY over IPv4 with PSN `psn` and `payload_len` bytes.
pub(crate) fn v4_frame(src: &str, dst: &str, psn: u32, payload_len: usize, ecn: Ecn) -> Vec<u8> {
    let ip = IpRepr::V4(Ipv4Repr {
        dscp: 26,
        ecn,
        ident: psn as u16,
        ..frames::ipv4(src.parse().unwrap(), dst.parse().unwrap())
    });
    emit(ip, psn, payload_len, UdpChecksum::Zero)
}

/// The same over IPv6, ECT(0), with a computed UDP checksum.
pub(crate) fn v6_frame(src: &str, dst: &str, psn: u32, payload_len: usize) -> Vec<u8> {
    let ip = IpRepr::V6(Ipv6Repr {
        src: src.parse().unwrap(),
        dst: dst.parse().unwrap(),
        dscp: 26,
        ecn: Ecn::Ect0,
        flow_label: 0x12345,
        hop_limit: 64,
        payload_len: 0,
    });
    emit(ip, psn, payload_len, UdpChecksum::Compute)
}

/// The PSN of a valid RoCE datagram.
pub(crate) fn psn(d: &[u8]) -> u32 {
    RocePacket::parse_ip(d).expect("valid RoCE").bth.psn.value()
}
