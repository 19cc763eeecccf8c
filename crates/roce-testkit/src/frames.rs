//! RoCE v2 packets built by hand, as the tests forge, replay and alter
//! them: the headers a RoCE v2 sender over IPv4 writes by default, a
//! [`FrameRepr`] of them, its bytes (ICRC included), and a datagram
//! re-emitted after its reprs were edited.
//!
//! The defaults are what roce-core sends over IPv4: DSCP 0, Not-ECT,
//! identification 0, Don't Fragment, TTL 64, UDP destination port 4791
//! and UDP checksum zero. [`FrameRepr::emit`] fills in the lengths, the
//! BTH pad count and the ICRC.
//!
//! ```
//! use roce_testkit::frames;
//! use roce_wire::{BthRepr, ExtHeaders, Opcode, Psn, Qpn, RocePacket};
//!
//! let bth = BthRepr::new(Opcode::RC_SEND_ONLY, Qpn::new(0x11), Psn::new(7));
//! let src = [10, 0, 0, 1].into();
//! let dst = [10, 0, 0, 2].into();
//! let d = frames::datagram_v4(src, dst, 0xc000, bth, ExtHeaders::default(), b"hi");
//! let p = RocePacket::parse_ip(&d).unwrap();
//! assert_eq!(p.payload, b"hi");
//! assert!(p.check_icrc().is_ok());
//!
//! // The same packet one PSN later (the ICRC is recomputed).
//! let next = frames::rewrite(&d, |r| r.bth.psn = r.bth.psn.next());
//! assert_eq!(RocePacket::parse_ip(&next).unwrap().bth.psn, Psn::new(8));
//! ```

use std::net::Ipv4Addr;

use roce_wire::{
    BthRepr, Ecn, ExtHeaders, FrameRepr, IpRepr, Ipv4Repr, RocePacket, UdpChecksum, UdpRepr,
    ROCE_V2_PORT,
};

/// An IPv4 header from `src` to `dst` as a RoCE v2 sender writes it: DSCP
/// 0, Not-ECT, identification 0, Don't Fragment, TTL 64. Its payload
/// length is 0: [`FrameRepr::emit`] sets it. Change a field with struct
/// update syntax: `Ipv4Repr { ecn: Ecn::Ce, ..ipv4(src, dst) }`.
pub fn ipv4(src: Ipv4Addr, dst: Ipv4Addr) -> Ipv4Repr {
    Ipv4Repr {
        src,
        dst,
        dscp: 0,
        ecn: Ecn::NotEct,
        ident: 0,
        dont_frag: true,
        ttl: 64,
        payload_len: 0,
    }
}

/// A UDP header from `src_port` to the RoCE v2 port (4791), with checksum
/// zero, as RoCE v2 senders send over IPv4.
pub fn udp(src_port: u16) -> UdpRepr {
    UdpRepr {
        src_port,
        dst_port: ROCE_V2_PORT,
        checksum: UdpChecksum::Zero,
    }
}

/// A RoCE v2 packet over IPv4 with no Ethernet header: [`ipv4`]`(src,
/// dst)`, [`udp`]`(src_port)`, then `bth`, `ext` and `payload`. Change
/// its IPv4 header with [`ipv4_mut`] before emitting it.
pub fn frame_v4<'a>(
    src: Ipv4Addr,
    dst: Ipv4Addr,
    src_port: u16,
    bth: BthRepr,
    ext: ExtHeaders,
    payload: &'a [u8],
) -> FrameRepr<'a> {
    FrameRepr {
        eth: None,
        ip: IpRepr::V4(ipv4(src, dst)),
        udp: udp(src_port),
        bth,
        ext,
        payload,
    }
}

/// The IPv4 header of `repr`, to change in place. Panics when `repr` is
/// an IPv6 packet.
pub fn ipv4_mut<'r>(repr: &'r mut FrameRepr<'_>) -> &'r mut Ipv4Repr {
    match &mut repr.ip {
        IpRepr::V4(ip) => ip,
        IpRepr::V6(ip) => panic!("an IPv6 packet ({} > {})", ip.src, ip.dst),
    }
}

/// The bytes of `repr` (from its Ethernet header when it has one, else
/// from its IP header), ICRC included, exactly as long as emitted; or why
/// it cannot be emitted (such as a payload length its opcode forbids).
pub fn try_emit(repr: &FrameRepr<'_>) -> roce_wire::Result<Vec<u8>> {
    let mut buf = vec![0u8; repr.len()];
    let n = repr.emit(&mut buf)?;
    buf.truncate(n);
    Ok(buf)
}

/// The bytes of `repr`, as [`try_emit`]; panics when it cannot be emitted.
pub fn emit(repr: &FrameRepr<'_>) -> Vec<u8> {
    try_emit(repr).unwrap_or_else(|e| panic!("cannot emit {repr:?}: {e}"))
}

/// The whole IPv4 datagram (IP header to ICRC) of [`frame_v4`]`(src, dst,
/// src_port, bth, ext, payload)`. Panics when the payload length is not
/// one the opcode allows.
pub fn datagram_v4(
    src: Ipv4Addr,
    dst: Ipv4Addr,
    src_port: u16,
    bth: BthRepr,
    ext: ExtHeaders,
    payload: &[u8],
) -> Vec<u8> {
    emit(&frame_v4(src, dst, src_port, bth, ext, payload))
}

/// `dgram`, a RoCE v2 IP datagram, re-emitted after `edit` changed its
/// reprs: the lengths, pad count and ICRC are recomputed, the rest is as
/// it was. Panics when `dgram` is not a RoCE v2 datagram or the edited
/// reprs cannot be emitted.
pub fn rewrite(dgram: &[u8], edit: impl FnOnce(&mut FrameRepr<'_>)) -> Vec<u8> {
    let p = RocePacket::parse_ip(dgram).expect("a RoCE datagram");
    let mut repr = p.to_repr();
    edit(&mut repr);
    emit(&repr)
}

#[cfg(test)]
mod tests {
    use super::*;
    use roce_wire::{
        DethRepr, EthernetRepr, Ipv6Repr, MacAddr, Opcode, Pkey, Psn, Qkey, Qpn, RethRepr, Rkey,
    };

    const A: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
    const B: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);
    /// IPv4 header 20 bytes, UDP 8: where the BTH starts.
    const BTH: usize = 28;

    fn write_only(payload: &[u8]) -> Vec<u8> {
        let mut bth = BthRepr::new(Opcode::RC_WRITE_ONLY, Qpn::new(0x12_3456), Psn::new(0x42));
        bth.ack_req = true;
        let ext = ExtHeaders {
            reth: Some(RethRepr {
                va: 0x1000,
                rkey: Rkey::new(0xabcd),
                dma_len: payload.len() as u32,
            }),
            ..ExtHeaders::default()
        };
        datagram_v4(A, B, 0xc123, bth, ext, payload)
    }

    #[test]
    fn a_datagram_parses_back_to_its_fields_with_a_valid_icrc() {
        let d = write_only(&[0x5a; 5]);
        // 20 IPv4 + 8 UDP + 12 BTH + 16 RETH + 5 payload + 3 pad + 4 ICRC.
        assert_eq!(d.len(), 68);
        let p = RocePacket::parse_ip(&d).unwrap();
        assert!(p.check_icrc().is_ok());
        assert_eq!(p.ip_len(), d.len());
        assert_eq!(p.eth, None);
        assert_eq!(
            p.ip,
            IpRepr::V4(Ipv4Repr {
                payload_len: 48,
                ..ipv4(A, B)
            })
        );
        assert_eq!(p.udp, udp(0xc123));
        assert_eq!(p.bth.opcode, Opcode::RC_WRITE_ONLY);
        assert_eq!(p.bth.dest_qp, Qpn::new(0x12_3456));
        assert_eq!(p.bth.psn, Psn::new(0x42));
        assert!(p.bth.ack_req);
        assert_eq!(p.bth.pad_count, 3);
        let reth = p.ext.reth.unwrap();
        assert_eq!(
            (reth.va, reth.rkey, reth.dma_len),
            (0x1000, Rkey::new(0xabcd), 5)
        );
        assert_eq!(p.payload, &[0x5a; 5]);
    }

    #[test]
    fn the_default_headers_are_on_the_wire() {
        let d = write_only(&[]);
        assert_eq!(d[0], 0x45, "IPv4, no options");
        assert_eq!(d[1], 0, "DSCP 0, Not-ECT");
        assert_eq!(&d[2..4], &(d.len() as u16).to_be_bytes(), "total length");
        assert_eq!(&d[4..6], &[0, 0], "identification 0");
        assert_eq!(&d[6..8], &[0x40, 0], "DF, not a fragment");
        assert_eq!(d[8], 64, "TTL");
        assert_eq!(d[9], 17, "UDP");
        assert_eq!(&d[12..16], &A.octets());
        assert_eq!(&d[16..20], &B.octets());
        assert_eq!(&d[20..22], &0xc123u16.to_be_bytes(), "UDP source port");
        assert_eq!(&d[22..24], &ROCE_V2_PORT.to_be_bytes());
        assert_eq!(
            &d[24..26],
            &(d.len() as u16 - 20).to_be_bytes(),
            "UDP length"
        );
        assert_eq!(&d[26..28], &[0, 0], "UDP checksum zero");
        assert_eq!(d[BTH], Opcode::RC_WRITE_ONLY.value());
    }

    #[test]
    fn emit_includes_the_ethernet_header_and_try_emit_reports_a_bad_length() {
        let bth = BthRepr::new(Opcode::UD_SEND_ONLY, Qpn::new(1), Psn::new(0));
        let ext = ExtHeaders {
            deth: Some(DethRepr {
                qkey: Qkey::new(0x1111_1111),
                src_qp: Qpn::new(2),
            }),
            ..ExtHeaders::default()
        };
        let mut f = frame_v4(A, B, 0xc000, bth, ext, &[1, 2, 3, 4]);
        let ip = emit(&f);
        f.eth = Some(EthernetRepr {
            dst: MacAddr([2, 0, 0, 0, 0, 2]),
            src: MacAddr([2, 0, 0, 0, 0, 1]),
            vlan: None,
            ethertype: 0,
        });
        let frame = emit(&f);
        assert_eq!(frame.len(), 14 + ip.len());
        assert_eq!(&frame[12..14], &[0x08, 0x00], "EtherType IPv4");
        assert_eq!(&frame[14..], &ip[..], "the same datagram after the MACs");
        let p = RocePacket::parse_ethernet(&frame).unwrap();
        assert!(p.check_icrc().is_ok());
        assert_eq!(
            (p.udp, p.bth, p.ext, p.payload),
            (f.udp, f.bth, f.ext, f.payload)
        );
        assert_eq!(emit(&p.to_repr()), frame);

        // An ACK carries no payload.
        let ack = frame_v4(
            A,
            B,
            0xc000,
            BthRepr::new(Opcode::RC_ACK, Qpn::new(1), Psn::new(0)),
            ExtHeaders::default(),
            &[0; 4],
        );
        assert!(matches!(
            try_emit(&ack),
            Err(roce_wire::Error::BadPayloadLength { .. })
        ));
    }

    #[test]
    fn ipv4_mut_changes_the_header_that_is_emitted() {
        let bth = BthRepr::new(Opcode::RC_SEND_ONLY, Qpn::new(1), Psn::new(0));
        let mut f = frame_v4(A, B, 0xc000, bth, ExtHeaders::default(), &[]);
        ipv4_mut(&mut f).ident = 0x1234;
        ipv4_mut(&mut f).ecn = Ecn::Ce;
        let d = emit(&f);
        assert_eq!(&d[4..6], &[0x12, 0x34]);
        assert_eq!(d[1], 3, "DSCP 0, CE");
        assert!(RocePacket::parse_ip(&d).unwrap().check_icrc().is_ok());
    }

    #[test]
    #[should_panic(expected = "an IPv6 packet")]
    fn ipv4_mut_refuses_an_ipv6_packet() {
        let bth = BthRepr::new(Opcode::RC_SEND_ONLY, Qpn::new(1), Psn::new(0));
        let mut f = frame_v4(A, B, 0xc000, bth, ExtHeaders::default(), &[]);
        f.ip = IpRepr::V6(Ipv6Repr {
            src: "fd00::1".parse().unwrap(),
            dst: "fd00::2".parse().unwrap(),
            dscp: 0,
            ecn: Ecn::NotEct,
            flow_label: 0,
            hop_limit: 64,
            payload_len: 0,
        });
        ipv4_mut(&mut f);
    }

    #[test]
    fn rewrite_changes_exactly_the_edited_field_and_the_icrc() {
        let d = write_only(&[0x5a; 8]);
        assert_eq!(rewrite(&d, |_| {}), d, "no edit, the same bytes");

        let e = rewrite(&d, |r| r.bth.psn = Psn::new(0xab_cdef));
        assert_eq!(e.len(), d.len());
        let icrc = d.len() - 4;
        let changed: Vec<usize> = (0..d.len()).filter(|&i| d[i] != e[i]).collect();
        assert!(changed
            .iter()
            .all(|&i| (BTH + 9..BTH + 12).contains(&i) || i >= icrc));
        assert_eq!(&e[BTH + 9..BTH + 12], &[0xab, 0xcd, 0xef], "the PSN");
        assert_ne!(&e[icrc..], &d[icrc..], "a new ICRC");
        let p = RocePacket::parse_ip(&e).unwrap();
        assert!(p.check_icrc().is_ok());
        assert_eq!(p.bth.psn, Psn::new(0xab_cdef));

        let e = rewrite(&d, |r| r.bth.pkey = Pkey(0x8001));
        let changed: Vec<usize> = (0..icrc).filter(|&i| d[i] != e[i]).collect();
        assert_eq!(changed, vec![BTH + 2, BTH + 3], "the P_Key only");
        assert!(RocePacket::parse_ip(&e).unwrap().check_icrc().is_ok());
    }

    #[test]
    fn rewrite_recomputes_the_lengths_of_a_new_payload() {
        let d = write_only(&[0x5a; 8]);
        let e = rewrite(&d, |r| {
            r.payload = &[1, 2, 3];
            r.ext.reth.as_mut().unwrap().dma_len = 3;
        });
        assert_eq!(e.len(), d.len() - 4, "5 bytes fewer, one more pad byte");
        let p = RocePacket::parse_ip(&e).unwrap();
        assert!(p.check_icrc().is_ok());
        assert_eq!(p.payload, &[1, 2, 3]);
        assert_eq!(p.bth.pad_count, 1);
        assert_eq!(p.ip.payload_len(), e.len() - 20);
    }
}
