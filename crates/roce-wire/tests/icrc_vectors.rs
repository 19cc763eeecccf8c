//! The two known-good frames of testdata/icrc.md (Scapy's UC SEND_ONLY and a
//! ConnectX-4 Lx CNP): parse, verify, re-emit byte-identical, and the ICRC's
//! sensitivity to every single-bit flip.

mod common;

use roce_wire::{icrc, Ecn, Error, IpRepr, Opcode, RocePacket, UdpChecksum};

#[test]
fn both_vectors_parse_verify_and_reemit() {
    let vectors = common::icrc_md_vectors();
    assert_eq!(vectors.len(), 2, "icrc.md holds two frames");
    for (name, frame) in &vectors {
        let p = RocePacket::parse_ethernet(frame).unwrap_or_else(|e| panic!("{name}: {e}"));
        p.check_icrc().unwrap_or_else(|e| panic!("{name}: {e}"));
        let repr = p.to_repr();
        let mut out = vec![0u8; repr.len()];
        assert_eq!(repr.emit(&mut out), Ok(frame.len()));
        assert_eq!(&out, frame, "{name}: re-emitted frame differs");
    }
}

#[test]
fn scapy_uc_send_only_fields() {
    let (_, frame) = &common::icrc_md_vectors()[0];
    let p = RocePacket::parse_ethernet(frame).unwrap();
    assert_eq!(p.bth.opcode, Opcode::from_u8(0x24).unwrap());
    assert_eq!(p.bth.dest_qp.value(), 0xd3);
    assert_eq!(p.bth.psn.value(), 0xcf1710);
    assert_eq!(p.payload.len(), 18);
    assert_eq!(p.bth.pad_count, 2);
    assert_eq!(p.udp.checksum, UdpChecksum::Compute);
    assert_eq!(p.ip.ecn(), Ecn::Ect1);
    // Wire bytes 78 f3 53 f3.
    assert_eq!(icrc::to_wire(p.icrc), [0x78, 0xf3, 0x53, 0xf3]);
    assert_eq!(icrc::display_value(p.icrc), 0x78f3_53f3);
}

#[test]
fn connectx_cnp_fields() {
    let (_, frame) = &common::icrc_md_vectors()[1];
    let p = RocePacket::parse_ethernet(frame).unwrap();
    assert_eq!(p.bth.opcode, Opcode::CNP);
    assert!(p.bth.becn);
    assert_eq!(p.bth.dest_qp.value(), 0x118);
    assert_eq!(p.ip.dscp(), 48);
    assert_eq!(p.udp.src_port, 0);
    assert_eq!(p.udp.checksum, UdpChecksum::Zero);
    assert!(p.payload.is_empty());
    assert_eq!(icrc::to_wire(p.icrc), [0x82, 0xfd, 0x00, 0x2a]);
    match p.ip {
        IpRepr::V4(v4) => assert_eq!(v4.ident, 0x718c),
        IpRepr::V6(_) => panic!("IPv4 expected"),
    }
}

/// Byte offsets (from the IP header) of the bits the ICRC masks, for IPv4:
/// TOS, TTL, IP checksum, UDP checksum, BTH byte 4.
fn masked_v4(byte: usize) -> bool {
    matches!(byte, 1 | 8 | 10 | 11 | 26 | 27 | 32)
}

#[test]
fn every_unmasked_bit_flip_breaks_the_icrc_and_masked_flips_do_not() {
    for (name, frame) in common::icrc_md_vectors() {
        let p = RocePacket::parse_ethernet(&frame).unwrap();
        let good = p.icrc;
        let covered = p.icrc_covered().to_vec();
        let ip_start = frame.len() - p.ip_len();
        let mut masked_seen = 0;
        for byte in 0..covered.len() {
            for bit in 0..8 {
                let mut c = covered.clone();
                c[byte] ^= 1 << bit;
                let crc = icrc::compute(&c);
                if masked_v4(byte) {
                    assert_eq!(
                        crc,
                        Ok(good),
                        "{name}: masked byte {byte} bit {bit} changed the ICRC"
                    );
                    masked_seen += 1;
                } else if byte == 0 && bit >= 4 {
                    // The version nibble decides the header layout itself.
                    continue;
                } else {
                    assert_ne!(
                        crc,
                        Ok(good),
                        "{name}: flip of byte {byte} bit {bit} undetected"
                    );
                    // And the full parse path rejects the frame one way or another.
                    let mut f = frame.clone();
                    f[ip_start + byte] ^= 1 << bit;
                    let rejected = match RocePacket::parse_ethernet(&f) {
                        Ok(q) => q.check_icrc().is_err(),
                        Err(_) => true,
                    };
                    assert!(
                        rejected,
                        "{name}: frame with byte {byte} bit {bit} flipped accepted"
                    );
                }
            }
        }
        assert_eq!(masked_seen, 7 * 8);
        // Flipping a bit of the ICRC itself is detected too.
        let mut f = frame.clone();
        let last = f.len() - 1;
        f[last] ^= 0x10;
        match RocePacket::parse_ethernet(&f) {
            Ok(q) => assert!(
                matches!(q.check_icrc(), Err(Error::BadIcrc { .. })),
                "{name}"
            ),
            // A non-zero UDP checksum covers the ICRC and catches it first.
            Err(e) => assert_eq!(e, Error::BadUdpChecksum, "{name}"),
        }
    }
}

#[test]
fn ttl_and_ecn_rewrites_by_a_router_keep_the_icrc() {
    // A switch marking CE and a router decrementing TTL (fixing the IPv4
    // checksum) leave the packet valid end to end.
    let (_, frame) = &common::icrc_md_vectors()[1];
    let p = RocePacket::parse_ethernet(frame).unwrap();
    let mut repr = p.to_repr();
    repr.ip.set_ecn(Ecn::Ce);
    if let IpRepr::V4(ref mut v4) = repr.ip {
        v4.ttl -= 1;
    }
    repr.bth.fecn = true;
    let mut out = vec![0u8; repr.len()];
    repr.emit(&mut out).unwrap();
    let q = RocePacket::parse_ethernet(&out).unwrap();
    assert_eq!(q.ip.ecn(), Ecn::Ce);
    assert_eq!(q.icrc, p.icrc);
    q.check_icrc().unwrap();
}
