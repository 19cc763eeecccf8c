//! The header fields the kernel writes and the ICRC moved to them (from
//! the datagram's `Transmit`, no header is read).

use std::net::IpAddr;

use roce_wire::{icrc, Transmit};

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil;
    use roce_wire::{Ecn, RocePacket};

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
}
