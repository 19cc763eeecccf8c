//! The header fields the kernel writes and the ICRC moved to them (from
//! the datagram's `Transmit`, no header is read), and rebuilding a
//! datagram's IP and UDP header around a received UDP payload (with
//! roce-wire's emitters).

use std::net::IpAddr;

use roce_wire::{
    icrc, ipv4, ipv6, udp, Ecn, IpRepr, Ipv4Repr, Ipv6Repr, Transmit, UdpChecksum, UdpRepr,
    ROCE_V2_PORT,
};

/// The covered fields the kernel will write for a datagram sent from
/// `local`, source port `sport`, as GSO segment `segment` of its send (IPv4
/// numbers the segments' identifications from 0; DF is always set: the
/// sockets use `IP_PMTUDISC_DO`).
pub(crate) fn wire_fields(local: IpAddr, sport: u16, segment: usize) -> icrc::Rewritable {
    icrc::Rewritable {
        src: local,
        src_port: sport,
        ipv4_id: if local.is_ipv4() {
            u16::try_from(segment).unwrap_or(0)
        } else {
            0
        },
        dont_frag: true,
    }
}

/// The ICRC of datagram `d` (sent as `t` says) once the kernel has written
/// `wire` into its header, in wire byte order, carrying over whatever
/// mismatch the datagram's own ICRC has: a datagram damaged after the
/// engine computed its ICRC (a fault injector, a bad buffer) must not get
/// a valid one here ([`icrc::Rebaser`], which reads no payload byte).
/// `None` when the kernel writes what the engine did, so the ICRC stands.
pub(crate) fn icrc_for_wire(
    rebaser: &mut icrc::Rebaser,
    d: &[u8],
    t: &Transmit,
    wire: &icrc::Rewritable,
) -> Option<[u8; 4]> {
    let from = t.rewritable();
    if from == *wire {
        return None;
    }
    let mut engine = [0u8; 4];
    engine.copy_from_slice(&d[d.len() - icrc::LEN..]);
    let covered = d.len() - icrc::LEN;
    let c = rebaser.rebase(icrc::read(engine), covered, !t.is_ipv6(), &from, wire);
    Some(icrc::to_wire(c))
}

/// Length of the header [`rebuild`] writes in front of a payload.
pub(crate) const fn rebuilt_header_len(v6: bool) -> usize {
    if v6 {
        ipv6::HEADER_LEN + udp::HEADER_LEN
    } else {
        ipv4::HEADER_LEN + udp::HEADER_LEN
    }
}

/// What a receive socket knows about a datagram.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RxHdr {
    /// Sender address.
    pub(crate) src: IpAddr,
    /// Sender port.
    pub(crate) sport: u16,
    /// Our address.
    pub(crate) dst: IpAddr,
    /// TOS / traffic class (0 when the kernel did not say).
    pub(crate) tos: u8,
}

/// Writes the IP and UDP header of a datagram carrying `payload_len` bytes
/// of UDP payload into `out` (exactly [`rebuilt_header_len`] bytes), with
/// roce-wire's emitters: IPv4 with identification `ident`, DF, TTL 64 and
/// its header checksum, or IPv6 with flow label 0 and hop limit 64; UDP to
/// port 4791 with checksum 0 (the kernel verified the real one). Returns
/// false when the lengths do not fit the headers' fields or the families
/// disagree.
pub(crate) fn rebuild(out: &mut [u8], h: &RxHdr, payload_len: usize, ident: u16) -> bool {
    let udp_len = udp::HEADER_LEN + payload_len;
    let (dscp, ecn) = (h.tos >> 2, Ecn::from_bits(h.tos));
    let ip = match (h.src, h.dst) {
        (IpAddr::V4(src), IpAddr::V4(dst)) => IpRepr::V4(Ipv4Repr {
            src,
            dst,
            dscp,
            ecn,
            ident,
            dont_frag: true,
            ttl: 64,
            payload_len: udp_len,
        }),
        (IpAddr::V6(src), IpAddr::V6(dst)) => IpRepr::V6(Ipv6Repr {
            src,
            dst,
            dscp,
            ecn,
            flow_label: 0,
            hop_limit: 64,
            payload_len: udp_len,
        }),
        _ => return false,
    };
    let at = ip.header_len();
    let udp = UdpRepr {
        src_port: h.sport,
        dst_port: ROCE_V2_PORT,
        checksum: UdpChecksum::Zero,
    };
    ip.emit(out).is_ok() && out.len() >= at && udp.emit(&mut out[at..], udp_len).is_ok()
}

/// Largest IPv4 identification a receiver looks for
/// ([`icrc::solve_ipv4_id`]): the segment numbers of a UDP GSO send (at
/// most 128 segments).
pub(crate) const MAX_SOLVED_ID: u16 = 127;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil;
    use roce_wire::RocePacket;

    fn fix_ipv4_checksum(e: &mut [u8]) {
        e[10..12].fill(0);
        let mut sum = 0u32;
        for w in e[..20].chunks_exact(2) {
            sum += u32::from(u16::from_be_bytes([w[0], w[1]]));
        }
        while sum > 0xffff {
            sum = (sum & 0xffff) + (sum >> 16);
        }
        e[10..12].copy_from_slice(&(!(sum as u16)).to_be_bytes());
    }

    #[test]
    fn moved_icrc_matches_a_real_emit() {
        // Emitted with ident 7 and sport 0xc007; moved to ident 3, source
        // 10.0.0.9 and sport 0xd000, and compared with what parses.
        let d = testutil::v4_frame("10.0.0.1", "10.0.0.2", 7, 40, Ecn::Ect0);
        let t = Transmit::of_datagram(&d).unwrap();
        let wire = wire_fields("10.0.0.9".parse().unwrap(), 0xd000, 3);
        let mut e = d.clone();
        e[4..6].copy_from_slice(&3u16.to_be_bytes());
        e[12..16].copy_from_slice(&[10, 0, 0, 9]);
        e[20..22].copy_from_slice(&0xd000u16.to_be_bytes());
        let n = e.len();
        e[n - 4..]
            .copy_from_slice(&icrc_for_wire(&mut icrc::Rebaser::default(), &d, &t, &wire).unwrap());
        fix_ipv4_checksum(&mut e);
        let p = RocePacket::parse_ip(&e).unwrap();
        assert!(p.check_icrc().is_ok());
        // Unchanged fields leave the engine's own ICRC.
        let same = wire_fields(t.src.ip(), t.src.port(), 7);
        assert_eq!(
            icrc_for_wire(&mut icrc::Rebaser::default(), &d, &t, &same),
            None
        );
        let d6 = testutil::v6_frame("fd00::1", "fd00::2", 2, 10);
        let t6 = Transmit::of_datagram(&d6).unwrap();
        let same6 = wire_fields(t6.src.ip(), t6.src.port(), 5);
        assert_eq!(
            icrc_for_wire(&mut icrc::Rebaser::default(), &d6, &t6, &same6),
            None,
            "no IPv6 ID"
        );
    }

    #[test]
    fn rebuilt_datagrams_parse() {
        for (src, dst) in [("10.0.0.1", "10.0.0.2"), ("fd00::1", "fd00::2")] {
            let d = if src.contains(':') {
                testutil::v6_frame(src, dst, 1, 20)
            } else {
                let mut d = testutil::v4_frame(src, dst, 1, 20, Ecn::Ce);
                // The sender used ID 0, as the kernel writes it.
                let t = Transmit::of_datagram(&d).unwrap();
                let w = wire_fields(t.src.ip(), t.src.port(), 0);
                let c = icrc_for_wire(&mut icrc::Rebaser::default(), &d, &t, &w).unwrap();
                let n = d.len();
                d[n - 4..].copy_from_slice(&c);
                d
            };
            let t = Transmit::of_datagram(&d).unwrap();
            let payload = &d[t.header_len()..];
            let hl = rebuilt_header_len(t.is_ipv6());
            let mut out = vec![0u8; hl + payload.len()];
            let rx = RxHdr {
                src: t.src.ip(),
                sport: t.src.port(),
                dst: t.destination.ip(),
                tos: t.tos(),
            };
            assert!(rebuild(&mut out, &rx, payload.len(), 0));
            out[hl..].copy_from_slice(payload);
            let p = RocePacket::parse_ip(&out).unwrap();
            assert_eq!((p.ip.src(), p.ip.dst()), (t.src.ip(), t.destination.ip()));
            assert_eq!(p.udp.src_port, t.src.port());
            assert_eq!(p.ip.dscp(), 26);
            assert!(p.check_icrc().is_ok(), "{src}");
        }
    }
}
