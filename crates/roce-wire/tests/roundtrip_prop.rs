//! Property tests: every opcode with random field values survives
//! emit → parse unchanged with a valid ICRC, over IPv4 and IPv6, tagged or
//! not; and no byte sequence can make the parsers panic.

use std::net::{Ipv4Addr, Ipv6Addr};

use proptest::prelude::*;
use roce_wire::*;

fn opcode() -> impl Strategy<Value = Opcode> {
    let all: Vec<Opcode> = Opcode::all().collect();
    proptest::sample::select(all)
}

fn payload_len(rule: PayloadRule) -> BoxedStrategy<usize> {
    match rule {
        PayloadRule::None => Just(0).boxed(),
        PayloadRule::Pmtu => {
            proptest::sample::select(vec![256usize, 512, 1024, 2048, 4096]).boxed()
        }
        PayloadRule::Last => (1usize..=4096).boxed(),
        PayloadRule::UpToPmtu => (0usize..=4096).boxed(),
        PayloadRule::Exactly(n) => Just(n).boxed(),
    }
}

fn ext_headers(op: Opcode) -> impl Strategy<Value = ExtHeaders> {
    let set = op.headers();
    (
        any::<(u32, u32, u8, u8)>(),
        any::<(u64, u32, u32)>(),
        any::<(u64, u32, u64, u64)>(),
        any::<(u8, u32, u64, u32, u32)>(),
    )
        .prop_map(move |(d, r, a, m)| {
            let has = |h| set.contains(h);
            ExtHeaders {
                deth: has(Headers::DETH).then(|| DethRepr {
                    qkey: Qkey::new(d.0),
                    src_qp: Qpn::new(d.1),
                }),
                feth: has(Headers::FETH).then_some(FethRepr {
                    placement_type: d.2 & 0x0f,
                    selectivity: d.3 & 3,
                }),
                reth: has(Headers::RETH).then(|| RethRepr {
                    va: r.0,
                    rkey: Rkey::new(r.1),
                    dma_len: r.2,
                }),
                atomic: has(Headers::ATOMIC_ETH).then(|| AtomicEthRepr {
                    va: a.0,
                    rkey: Rkey::new(a.1),
                    swap_add: a.2,
                    compare: a.3,
                }),
                aeth: has(Headers::AETH).then(|| AethRepr {
                    syndrome: Syndrome::from_byte(m.0),
                    msn: Msn::new(m.1),
                }),
                atomic_ack: has(Headers::ATOMIC_ACK_ETH).then_some(m.2),
                imm: has(Headers::IMM).then_some(m.3),
                ieth: has(Headers::IETH).then_some(Rkey::new(m.4)),
            }
        })
}

fn ip_repr() -> impl Strategy<Value = IpRepr> {
    prop_oneof![
        (
            any::<[u8; 4]>(),
            any::<[u8; 4]>(),
            0u8..64,
            0u8..4,
            any::<u16>(),
            any::<bool>(),
            any::<u8>()
        )
            .prop_map(|(s, d, dscp, ecn, ident, df, ttl)| IpRepr::V4(Ipv4Repr {
                src: Ipv4Addr::from(s),
                dst: Ipv4Addr::from(d),
                dscp,
                ecn: Ecn::from_bits(ecn),
                ident,
                dont_frag: df,
                ttl,
                payload_len: 0,
            })),
        (
            any::<[u8; 16]>(),
            any::<[u8; 16]>(),
            0u8..64,
            0u8..4,
            0u32..0x10_0000,
            any::<u8>()
        )
            .prop_map(|(s, d, dscp, ecn, flow, hop)| IpRepr::V6(Ipv6Repr {
                src: Ipv6Addr::from(s),
                dst: Ipv6Addr::from(d),
                dscp,
                ecn: Ecn::from_bits(ecn),
                flow_label: flow,
                hop_limit: hop,
                payload_len: 0,
            })),
    ]
}

fn eth_repr() -> impl Strategy<Value = Option<EthernetRepr>> {
    proptest::option::of((
        any::<[u8; 6]>(),
        any::<[u8; 6]>(),
        proptest::option::of((0u8..8, any::<bool>(), 0u16..4096)),
    ))
    .prop_map(|o| {
        o.map(|(d, s, tag)| EthernetRepr {
            dst: MacAddr(d),
            src: MacAddr(s),
            vlan: tag.map(|(pcp, dei, vid)| VlanTag { pcp, dei, vid }),
            ethertype: 0,
        })
    })
}

/// A random packet: its reprs plus its payload bytes.
fn packet() -> impl Strategy<Value = (FrameRepr<'static>, Vec<u8>)> {
    opcode().prop_flat_map(|op| {
        (
            eth_repr(),
            ip_repr(),
            (any::<u16>(), any::<bool>()),
            any::<(bool, bool, u16, bool, bool, u32, bool, u32)>(),
            ext_headers(op),
            payload_len(op.payload()).prop_flat_map(|n| proptest::collection::vec(any::<u8>(), n)),
        )
            .prop_map(move |(eth, ip, (sport, csum), b, ext, payload)| {
                let bth = BthRepr {
                    opcode: op,
                    solicited: b.0,
                    mig_req: b.1,
                    pad_count: 0,
                    pkey: Pkey(b.2),
                    fecn: b.3,
                    becn: b.4,
                    dest_qp: Qpn::new(b.5),
                    ack_req: b.6,
                    psn: Psn::new(b.7),
                };
                let udp = UdpRepr {
                    src_port: sport,
                    dst_port: ROCE_V2_PORT,
                    checksum: if csum {
                        UdpChecksum::Compute
                    } else {
                        UdpChecksum::Zero
                    },
                };
                (
                    FrameRepr {
                        eth,
                        ip,
                        udp,
                        bth,
                        ext,
                        payload: &[],
                    },
                    payload,
                )
            })
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn emit_then_parse_is_identity((repr, payload) in packet()) {
        let repr = FrameRepr { payload: &payload, ..repr };
        let mut buf = vec![0u8; repr.len()];
        let n = repr.emit(&mut buf).unwrap();
        prop_assert_eq!(n, buf.len());
        let parsed = match repr.eth {
            Some(_) => RocePacket::parse_ethernet(&buf),
            None => RocePacket::parse_ip(&buf),
        }.unwrap();
        prop_assert!(parsed.check_icrc().is_ok());
        // What emit derives: IP payload length, PadCnt, EtherType.
        let mut want = repr;
        want.ip.set_payload_len(repr.ip_len() - repr.ip.header_len());
        want.bth.pad_count = repr.pad_len() as u8;
        if let Some(e) = want.eth.as_mut() { e.ethertype = repr.ip.ethertype(); }
        prop_assert_eq!(parsed.to_repr(), want);
        // And the classifier agrees.
        if repr.eth.is_some() {
            prop_assert!(matches!(Frame::parse_ethernet(&buf), Ok(Frame::Roce(_))));
        }
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
        if let Ok(p) = RocePacket::parse_ethernet(&bytes) { let _ = p.check_icrc(); }
        if let Ok(p) = RocePacket::parse_ip(&bytes) { let _ = p.check_icrc(); }
        let _ = Frame::parse_ethernet(&bytes);
        let _ = Frame::parse_with_ethertype(0x8808, &bytes);
        let _ = MacControl::parse(&bytes);
        let _ = icrc::compute(&bytes);
    }

    #[test]
    fn mutated_packets_never_panic(
        (repr, payload) in packet(),
        flips in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8),
        cut in any::<prop::sample::Index>(),
    ) {
        let repr = FrameRepr { payload: &payload, ..repr };
        let mut buf = vec![0u8; repr.len()];
        repr.emit(&mut buf).unwrap();
        for (i, v) in flips { let i = i.index(buf.len()); buf[i] ^= v; }
        let cut = cut.index(buf.len() + 1);
        for b in [&buf[..], &buf[..cut]] {
            if let Ok(p) = RocePacket::parse_ethernet(b) { let _ = p.check_icrc(); }
            if let Ok(p) = RocePacket::parse_ip(b) { let _ = p.check_icrc(); }
        }
    }
}
