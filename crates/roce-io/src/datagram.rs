//! The little the backends and middleware read or rewrite in a raw IP
//! datagram: addresses, the ECN field, the bytes the ICRC covers. Every
//! function takes arbitrary bytes and returns `None` / `false` instead of
//! panicking on anything malformed.

use std::net::IpAddr;

use roce_wire::ipv4::Ipv4Packet;
use roce_wire::ipv6::Ipv6Packet;
use roce_wire::{bth, icrc, ipv4, ipv6, udp, Ecn};

/// Length of the IP header (IPv4 with its options, or the IPv6 fixed
/// header), if the datagram holds one.
pub(crate) fn ip_header_len(d: &[u8]) -> Option<usize> {
    match d.first()? >> 4 {
        4 => {
            let n = usize::from(d[0] & 0x0f) * 4;
            (n >= ipv4::HEADER_LEN && n <= d.len()).then_some(n)
        }
        6 => (d.len() >= ipv6::HEADER_LEN).then_some(ipv6::HEADER_LEN),
        _ => None,
    }
}

/// Source and destination addresses, if the datagram starts with an IPv4
/// or IPv6 header (an IPv4 header length field below 5 words, or beyond
/// the datagram, is malformed). Nothing else is checked.
pub(crate) fn addrs(d: &[u8]) -> Option<(IpAddr, IpAddr)> {
    ip_header_len(d)?;
    match d[0] >> 4 {
        4 => {
            let p = Ipv4Packet::new_checked(d).ok()?;
            Some((p.src().into(), p.dst().into()))
        }
        6 => {
            let p = Ipv6Packet::new_checked(d).ok()?;
            Some((p.src().into(), p.dst().into()))
        }
        _ => None,
    }
}

/// Destination address (see [`addrs`]).
pub(crate) fn dst_addr(d: &[u8]) -> Option<IpAddr> {
    addrs(d).map(|(_, dst)| dst)
}

/// ECN codepoint of an IPv4 or IPv6 datagram.
pub(crate) fn ecn(d: &[u8]) -> Option<Ecn> {
    ip_header_len(d)?;
    Some(match d[0] >> 4 {
        4 => Ecn::from_bits(d[1]),
        _ => Ecn::from_bits(d[1] >> 4),
    })
}

/// Marks an ECN-capable datagram Congestion Experienced (RFC 3168 §5). For
/// IPv4 the header checksum is updated incrementally (RFC 1624 eqn. 3), so a
/// header whose checksum was wrong stays wrong. The ICRC masks the TOS /
/// traffic class, so it stays valid. Returns true when the datagram was
/// ECT(0) or ECT(1) and is now CE.
pub(crate) fn mark_ce(d: &mut [u8]) -> bool {
    if !matches!(ecn(d), Some(Ecn::Ect0 | Ecn::Ect1)) {
        return false;
    }
    if d[0] >> 4 == 4 {
        let old = u16::from_be_bytes([d[0], d[1]]);
        d[1] |= 0b11;
        let new = u16::from_be_bytes([d[0], d[1]]);
        let hc = u16::from_be_bytes([d[10], d[11]]);
        let mut sum = u32::from(!hc) + u32::from(!old) + u32::from(new);
        while sum > 0xffff {
            sum = (sum & 0xffff) + (sum >> 16);
        }
        d[10..12].copy_from_slice(&(!(sum as u16)).to_be_bytes());
    } else {
        d[1] |= 0b11 << 4;
    }
    true
}

/// The bits a corruption may flip so that the ICRC is guaranteed to catch
/// it: every bit from the BTH to the last pad byte (after the UDP header,
/// before the ICRC) except BTH byte 4, which the ICRC masks. A CRC-32
/// detects every single-bit error in what it covers.
///
/// Returns `(start, masked, bits)`: the first covered byte, the masked
/// byte to skip, and the number of candidate bits. `None` when the datagram
/// is too short to hold an IP, UDP and BT header and an ICRC.
pub(crate) fn icrc_covered_bits(d: &[u8]) -> Option<(usize, usize, usize)> {
    covered_bits_from(d, ip_header_len(d)? + udp::HEADER_LEN)
}

/// [`icrc_covered_bits`] of a datagram held as its UDP payload (BTH to
/// ICRC, without the IP and UDP header).
pub(crate) fn payload_covered_bits(p: &[u8]) -> Option<(usize, usize, usize)> {
    covered_bits_from(p, 0)
}

/// The candidate bits of `d` whose BTH starts at `start`.
fn covered_bits_from(d: &[u8], start: usize) -> Option<(usize, usize, usize)> {
    let end = d.len().checked_sub(icrc::LEN)?;
    if end < start + bth::HEADER_LEN {
        return None;
    }
    Some((start, start + 4, (end - start - 1) * 8))
}

/// Maps candidate bit `k < bits` of [`icrc_covered_bits`] to a byte index
/// and bit mask.
pub(crate) fn covered_bit(start: usize, masked: usize, k: usize) -> (usize, u8) {
    let mut byte = start + k / 8;
    if byte >= masked {
        byte += 1;
    }
    (byte, 1 << (k % 8))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil;

    #[test]
    fn reads_addresses_and_rejects_garbage() {
        let d = testutil::v4_frame("10.0.0.1", "10.0.0.2", 0, 16, Ecn::NotEct);
        assert_eq!(
            addrs(&d),
            Some(("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap()))
        );
        let d6 = testutil::v6_frame("fd00::1", "fd00::2", 0, 0);
        assert_eq!(dst_addr(&d6), Some("fd00::2".parse().unwrap()));
        for bad in [&[][..], &[0x45; 19], &[0x60; 39], &[0x15; 60], &[0x44; 20]] {
            assert_eq!(dst_addr(bad), None);
            assert_eq!(ip_header_len(bad), None);
            assert_eq!(icrc_covered_bits(bad), None);
        }
    }

    #[test]
    fn ce_marking_v4_keeps_checksum_and_icrc() {
        for ecn in [Ecn::Ect0, Ecn::Ect1] {
            let mut d = testutil::v4_frame("10.0.0.1", "10.0.0.2", 7, 32, ecn);
            assert!(mark_ce(&mut d));
            let p = roce_wire::RocePacket::parse_ip(&d).expect("IPv4 checksum still valid");
            assert_eq!(p.ip.ecn(), Ecn::Ce);
            assert!(p.check_icrc().is_ok());
        }
        let mut d = testutil::v4_frame("10.0.0.1", "10.0.0.2", 7, 32, Ecn::NotEct);
        let before = d.clone();
        assert!(!mark_ce(&mut d), "not-ECT is never marked");
        assert_eq!(d, before);
    }

    #[test]
    fn ce_marking_v6() {
        let mut d = testutil::v6_frame("fd00::1", "fd00::2", 3, 100);
        assert!(mark_ce(&mut d));
        let p = roce_wire::RocePacket::parse_ip(&d).unwrap();
        assert_eq!(p.ip.ecn(), Ecn::Ce);
        assert_eq!(p.ip.dscp(), 26, "DSCP untouched");
        assert!(p.check_icrc().is_ok());
    }

    #[test]
    fn every_covered_bit_breaks_the_icrc() {
        let d = testutil::v4_frame("10.0.0.1", "10.0.0.2", 1, 8, Ecn::NotEct);
        let (start, masked, bits) = icrc_covered_bits(&d).unwrap();
        assert_eq!(start, 28);
        assert_eq!(bits, (d.len() - 4 - 28 - 1) * 8);
        for k in 0..bits {
            let mut c = d.clone();
            let (byte, mask) = covered_bit(start, masked, k);
            assert_ne!(byte, masked);
            c[byte] ^= mask;
            if let Ok(p) = roce_wire::RocePacket::parse_ip(&c) {
                assert!(p.check_icrc().is_err(), "bit {k} went unnoticed");
            }
        }
    }
}
