//! Reading the engine's datagram headers, recomputing an ICRC for the
//! header the kernel will really send, and rebuilding a datagram around a
//! received UDP payload.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use roce_wire::{bth, icrc, ipv4, ipv6, udp, ROCE_V2_PORT};

/// The fields of an outgoing datagram that decide how it is sent and which
/// the ICRC covers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct TxHdr {
    /// IP header length (20 or 40).
    pub(crate) ip_hlen: usize,
    /// Source address.
    pub(crate) src: IpAddr,
    /// Destination address.
    pub(crate) dst: IpAddr,
    /// TOS / traffic class byte.
    pub(crate) tos: u8,
    /// IPv4 identification (0 for IPv6).
    pub(crate) ident: u16,
    /// IPv4 DF flag (true for IPv6).
    pub(crate) dont_frag: bool,
    /// UDP ports.
    pub(crate) sport: u16,
    /// UDP destination port.
    pub(crate) dport: u16,
}

impl TxHdr {
    /// Reads an IPv4 (without options) or IPv6 datagram that carries UDP
    /// and at least a BTH and an ICRC, whose lengths agree with the buffer.
    /// Anything else is `None`: the backend cannot send it faithfully.
    pub(crate) fn parse(d: &[u8]) -> Option<TxHdr> {
        let (ip_hlen, src, dst, tos, ident, dont_frag, ip_total) = match d.first()? >> 4 {
            4 => {
                if d.len() < ipv4::HEADER_LEN || d[0] & 0x0f != 5 || d[9] != 17 {
                    return None;
                }
                let total = usize::from(u16::from_be_bytes([d[2], d[3]]));
                let frag = u16::from_be_bytes([d[6], d[7]]);
                if frag & 0x3fff != 0 {
                    return None; // a fragment (MF or offset set)
                }
                let src = Ipv4Addr::new(d[12], d[13], d[14], d[15]);
                let dst = Ipv4Addr::new(d[16], d[17], d[18], d[19]);
                let ident = u16::from_be_bytes([d[4], d[5]]);
                (
                    20,
                    src.into(),
                    dst.into(),
                    d[1],
                    ident,
                    frag & 0x4000 != 0,
                    total,
                )
            }
            6 => {
                if d.len() < ipv6::HEADER_LEN || d[6] != 17 {
                    return None;
                }
                let plen = usize::from(u16::from_be_bytes([d[4], d[5]]));
                let tc = (d[0] << 4) | (d[1] >> 4);
                let mut s = [0u8; 16];
                s.copy_from_slice(&d[8..24]);
                let mut t = [0u8; 16];
                t.copy_from_slice(&d[24..40]);
                let (src, dst) = (Ipv6Addr::from(s), Ipv6Addr::from(t));
                (40, src.into(), dst.into(), tc, 0, true, 40 + plen)
            }
            _ => return None,
        };
        if ip_total != d.len() || d.len() < ip_hlen + udp::HEADER_LEN + bth::HEADER_LEN + icrc::LEN
        {
            return None;
        }
        let u = &d[ip_hlen..];
        if usize::from(u16::from_be_bytes([u[4], u[5]])) != d.len() - ip_hlen {
            return None;
        }
        Some(TxHdr {
            ip_hlen,
            src,
            dst,
            tos,
            ident,
            dont_frag,
            sport: u16::from_be_bytes([u[0], u[1]]),
            dport: u16::from_be_bytes([u[2], u[3]]),
        })
    }
}

/// The header fields the kernel writes that the ICRC covers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct WireFields {
    /// Source address (the socket's).
    pub(crate) src: IpAddr,
    /// IPv4 identification (ignored for IPv6).
    pub(crate) ident: u16,
    /// UDP source port (the socket's).
    pub(crate) sport: u16,
}

impl WireFields {
    /// True when the engine's datagram already carries these values (DF is
    /// always set on the wire: the sockets use `IP_PMTUDISC_DO`).
    pub(crate) fn matches(&self, h: &TxHdr) -> bool {
        h.src == self.src
            && h.sport == self.sport
            && (h.ip_hlen != 20 || (h.ident == self.ident && h.dont_frag))
    }
}

/// The ICRC of datagram `d` (parsed as `h`) once the kernel has written
/// `wire` into its header, in wire byte order, carrying over whatever
/// mismatch the datagram's own ICRC has: a datagram damaged after the
/// engine computed its ICRC (a fault injector, a bad buffer) must not get
/// a valid one here ([`icrc::rebase`], which reads no payload byte).
pub(crate) fn icrc_for_wire(d: &[u8], h: &TxHdr, wire: &WireFields) -> [u8; 4] {
    let mut engine = [0u8; 4];
    engine.copy_from_slice(&d[d.len() - 4..]);
    let from = icrc::Rewritable {
        src: h.src,
        src_port: h.sport,
        ipv4_id: h.ident,
        dont_frag: h.dont_frag,
    };
    let to = icrc::Rewritable {
        src: wire.src,
        src_port: wire.sport,
        ipv4_id: wire.ident,
        dont_frag: true,
    };
    let v4 = h.ip_hlen == ipv4::HEADER_LEN;
    let covered = d.len() - icrc::LEN;
    icrc::to_wire(icrc::rebase(icrc::read(engine), covered, v4, &from, &to))
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
/// of UDP payload into `out` (exactly [`rebuilt_header_len`] bytes):
/// IPv4 with ID 0, DF, TTL 64 and a valid header checksum, or IPv6 with
/// flow label 0 and hop limit 64; UDP to port 4791 with checksum 0 (the
/// kernel verified the real one). Returns false when the lengths do not
/// fit the headers' fields or the families disagree.
pub(crate) fn rebuild(out: &mut [u8], h: &RxHdr, payload_len: usize) -> bool {
    let udp_len = udp::HEADER_LEN + payload_len;
    let Ok(udp_len16) = u16::try_from(udp_len) else {
        return false;
    };
    let at = match (h.src, h.dst) {
        (IpAddr::V4(s), IpAddr::V4(t)) => {
            let Ok(total) = u16::try_from(ipv4::HEADER_LEN + udp_len) else {
                return false;
            };
            let o = &mut out[..ipv4::HEADER_LEN];
            o[0] = 0x45;
            o[1] = h.tos;
            o[2..4].copy_from_slice(&total.to_be_bytes());
            o[4..6].fill(0);
            o[6] = 0x40;
            o[7] = 0;
            o[8] = 64;
            o[9] = 17;
            o[10..12].fill(0);
            o[12..16].copy_from_slice(&s.octets());
            o[16..20].copy_from_slice(&t.octets());
            let mut sum = 0u32;
            for w in o.chunks_exact(2) {
                sum += u32::from(u16::from_be_bytes([w[0], w[1]]));
            }
            while sum > 0xffff {
                sum = (sum & 0xffff) + (sum >> 16);
            }
            o[10..12].copy_from_slice(&(!(sum as u16)).to_be_bytes());
            ipv4::HEADER_LEN
        }
        (IpAddr::V6(s), IpAddr::V6(t)) => {
            let o = &mut out[..ipv6::HEADER_LEN];
            o[0] = 0x60 | (h.tos >> 4);
            o[1] = h.tos << 4;
            o[2] = 0;
            o[3] = 0;
            o[4..6].copy_from_slice(&udp_len16.to_be_bytes());
            o[6] = 17;
            o[7] = 64;
            o[8..24].copy_from_slice(&s.octets());
            o[24..40].copy_from_slice(&t.octets());
            ipv6::HEADER_LEN
        }
        _ => return false,
    };
    let u = &mut out[at..at + udp::HEADER_LEN];
    u[0..2].copy_from_slice(&h.sport.to_be_bytes());
    u[2..4].copy_from_slice(&ROCE_V2_PORT.to_be_bytes());
    u[4..6].copy_from_slice(&udp_len16.to_be_bytes());
    u[6..8].fill(0);
    true
}

/// Stores `ident` in a rebuilt IPv4 header and fixes its checksum.
pub(crate) fn set_ipv4_ident(head: &mut [u8], ident: u16) {
    head[4..6].copy_from_slice(&ident.to_be_bytes());
    head[10..12].fill(0);
    let mut sum = 0u32;
    for w in head[..ipv4::HEADER_LEN].chunks_exact(2) {
        sum += u32::from(u16::from_be_bytes([w[0], w[1]]));
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    head[10..12].copy_from_slice(&(!(sum as u16)).to_be_bytes());
}

/// Largest IPv4 identification a receiver looks for
/// ([`icrc::solve_ipv4_id`]): the segment numbers of a UDP GSO send (at
/// most 128 segments).
pub(crate) const MAX_SOLVED_ID: u16 = 127;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil;
    use roce_wire::{Ecn, RocePacket};

    #[test]
    fn parse_reads_the_fields() {
        let d = testutil::v4_frame("10.0.0.1", "10.0.0.2", 5, 33, Ecn::Ect1);
        let h = TxHdr::parse(&d).unwrap();
        assert_eq!(h.ip_hlen, 20);
        assert_eq!(h.dst, "10.0.0.2".parse::<IpAddr>().unwrap());
        assert_eq!((h.tos >> 2, h.tos & 3), (26, 1));
        assert_eq!((h.ident, h.dont_frag), (5, true));
        assert_eq!((h.sport, h.dport), (0xc005, ROCE_V2_PORT));
        let d6 = testutil::v6_frame("fd00::1", "fd00::2", 2, 10);
        let h6 = TxHdr::parse(&d6).unwrap();
        assert_eq!((h6.ip_hlen, h6.tos >> 2), (40, 26));
        for n in 0..d.len() {
            assert_eq!(TxHdr::parse(&d[..n]), None, "truncated at {n}");
        }
    }

    #[test]
    fn patched_icrc_matches_a_real_emit() {
        // Emit with ident 7 and sport 0xc007; recompute for ident 3,
        // sport 0xd000 and compare with a datagram emitted that way.
        let d = testutil::v4_frame("10.0.0.1", "10.0.0.2", 7, 40, Ecn::Ect0);
        let h = TxHdr::parse(&d).unwrap();
        let wire = WireFields {
            src: "10.0.0.9".parse().unwrap(),
            ident: 3,
            sport: 0xd000,
        };
        assert!(!wire.matches(&h));
        let mut e = d.clone();
        e[4..6].copy_from_slice(&3u16.to_be_bytes());
        e[12..16].copy_from_slice(&[10, 0, 0, 9]);
        e[20..22].copy_from_slice(&0xd000u16.to_be_bytes());
        let n = e.len();
        e[n - 4..].copy_from_slice(&icrc_for_wire(&d, &h, &wire));
        // Fix the IPv4 checksum so the packet parses.
        e[10..12].fill(0);
        let mut sum = 0u32;
        for w in e[..20].chunks_exact(2) {
            sum += u32::from(u16::from_be_bytes([w[0], w[1]]));
        }
        while sum > 0xffff {
            sum = (sum & 0xffff) + (sum >> 16);
        }
        e[10..12].copy_from_slice(&(!(sum as u16)).to_be_bytes());
        let p = RocePacket::parse_ip(&e).unwrap();
        assert!(p.check_icrc().is_ok());
        // Unchanged fields give the engine's own ICRC.
        let same = WireFields {
            src: h.src,
            ident: h.ident,
            sport: h.sport,
        };
        assert!(same.matches(&h));
        assert_eq!(icrc_for_wire(&d, &h, &same), d[d.len() - 4..]);
        let d6 = testutil::v6_frame("fd00::1", "fd00::2", 2, 10);
        let h6 = TxHdr::parse(&d6).unwrap();
        let same6 = WireFields {
            src: h6.src,
            ident: 0,
            sport: h6.sport,
        };
        assert_eq!(icrc_for_wire(&d6, &h6, &same6), d6[d6.len() - 4..]);
    }

    #[test]
    fn rebuilt_datagrams_parse() {
        for (src, dst) in [("10.0.0.1", "10.0.0.2"), ("fd00::1", "fd00::2")] {
            let d = if src.contains(':') {
                testutil::v6_frame(src, dst, 1, 20)
            } else {
                let mut d = testutil::v4_frame(src, dst, 1, 20, Ecn::Ce);
                // The sender used ID 0, as the kernel writes it.
                let h = TxHdr::parse(&d).unwrap();
                let w = WireFields {
                    src: h.src,
                    ident: 0,
                    sport: h.sport,
                };
                let c = icrc_for_wire(&d, &h, &w);
                let n = d.len();
                d[n - 4..].copy_from_slice(&c);
                d
            };
            let h = TxHdr::parse(&d).unwrap();
            let payload = &d[h.ip_hlen + 8..];
            let v6 = h.ip_hlen == 40;
            let hl = rebuilt_header_len(v6);
            let mut out = vec![0u8; hl + payload.len()];
            let rx = RxHdr {
                src: h.src,
                sport: h.sport,
                dst: h.dst,
                tos: h.tos,
            };
            assert!(rebuild(&mut out, &rx, payload.len()));
            out[hl..].copy_from_slice(payload);
            let p = RocePacket::parse_ip(&out).unwrap();
            assert_eq!((p.ip.src(), p.ip.dst()), (h.src, h.dst));
            assert_eq!(p.udp.src_port, h.sport);
            assert_eq!(p.ip.dscp(), 26);
            assert!(p.check_icrc().is_ok(), "{src}");
        }
    }
}
