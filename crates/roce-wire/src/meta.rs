//! What travels beside a datagram's bytes between the transport engine and
//! an I/O backend, so that no backend reads protocol bytes.
//!
//! [`Transmit`] goes with each outgoing datagram, as quinn-proto's
//! `poll_transmit` hands out a `Transmit { destination, ecn, segment_size,
//! src_ip, .. }` beside its bytes: a backend that hands the datagram to a
//! kernel socket sends the UDP payload ([`Transmit::header_len`] on) from
//! the source to the destination with the DSCP and ECN given, and moves
//! the ICRC to the header fields its kernel writes
//! ([`crate::icrc::rebase`] with [`Transmit::rewritable`]), without parsing
//! a header. [`RxMeta`] goes with each received one, from the backend to
//! the engine: one type on both sides of the boundary.

use core::net::{IpAddr, SocketAddr};

use crate::ip::{Ecn, PROTO_UDP};
use crate::ipv4::Ipv4Packet;
use crate::ipv6::Ipv6Packet;
use crate::udp::UdpPacket;
use crate::{bth, icrc, ipv4, ipv6, udp};

/// How to send one datagram, beside its bytes (an IP datagram: IPv4
/// without options or IPv6, then UDP, BTH, ..., ICRC; docs/protocol.md
/// §1).
///
/// The engine sends one datagram per `Transmit` (no `segment_size`: it
/// writes whole datagrams, each with its own headers, and a backend that
/// offers segmentation offload, UDP GSO, groups consecutive datagrams of
/// one source, destination, TOS and size itself).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Transmit {
    /// Length of the datagram in bytes.
    pub size: usize,
    /// IP source address and UDP source port (the QP's entropy port,
    /// docs/protocol.md §1).
    pub src: SocketAddr,
    /// IP destination address and UDP destination port (4791).
    pub destination: SocketAddr,
    /// DSCP (the six high bits of the TOS / traffic class).
    pub dscp: u8,
    /// ECN codepoint.
    pub ecn: Ecn,
    /// The IPv4 identification in the datagram (0 for IPv6; the engine
    /// writes 0, docs/protocol.md §4).
    pub ipv4_id: u16,
    /// The IPv4 don't-fragment flag (true for IPv6).
    pub dont_frag: bool,
    /// The BTH destination QP number (24 bits): which process of those
    /// sharing the destination address receives it (docs/host.md), told
    /// to a backend so that it never reads the BTH.
    pub dest_qpn: u32,
    /// For a CM MAD (to QP1, every process's): the listener (a REQ's or
    /// SIDR_REQ's service ID) or connection (the communication ID it
    /// names) it is for at the destination, which the engine knows
    /// without the backend reading the MAD; `None` for anything else.
    pub mad_owner: Option<Owner>,
}

impl Transmit {
    /// Reads the metadata of a datagram that comes without it (one built
    /// by hand, replayed from a capture, or just emitted): IPv4 without
    /// options and not a fragment, or IPv6, carrying UDP with at least a
    /// BTH and an ICRC, whose length fields agree with `d`. `None` for
    /// anything else (the IPv4 header checksum is not checked).
    pub fn of_datagram(d: &[u8]) -> Option<Transmit> {
        let (hl, src, dst, dscp, ecn, ipv4_id, dont_frag, total) = match d.first()? >> 4 {
            4 => {
                let p = Ipv4Packet::new_checked(d).ok()?;
                if p.ihl() != 5
                    || p.protocol() != PROTO_UDP
                    || p.more_frags()
                    || p.frag_offset() != 0
                {
                    return None;
                }
                let (src, dst) = (IpAddr::V4(p.src()), IpAddr::V4(p.dst()));
                let total = usize::from(p.total_len());
                (
                    ipv4::HEADER_LEN,
                    src,
                    dst,
                    p.dscp(),
                    p.ecn(),
                    p.ident(),
                    p.dont_frag(),
                    total,
                )
            }
            6 => {
                let p = Ipv6Packet::new_checked(d).ok()?;
                if p.next_header() != PROTO_UDP {
                    return None;
                }
                let (src, dst) = (IpAddr::V6(p.src()), IpAddr::V6(p.dst()));
                let tc = p.traffic_class();
                let total = ipv6::HEADER_LEN + usize::from(p.payload_len());
                (
                    ipv6::HEADER_LEN,
                    src,
                    dst,
                    tc >> 2,
                    Ecn::from_bits(tc),
                    0,
                    true,
                    total,
                )
            }
            _ => return None,
        };
        if total != d.len() || d.len() < hl + udp::HEADER_LEN + bth::HEADER_LEN + icrc::LEN {
            return None;
        }
        let u = UdpPacket::new_checked(&d[hl..]).ok()?;
        if usize::from(u.len()) != d.len() - hl {
            return None;
        }
        let bth_at = hl + udp::HEADER_LEN;
        let dest_qpn = bth::BthHeader::new_unchecked(&d[bth_at..bth_at + bth::HEADER_LEN])
            .dest_qp()
            .value();
        Some(Transmit {
            dest_qpn,
            mad_owner: None,
            size: d.len(),
            src: SocketAddr::new(src, u.src_port()),
            destination: SocketAddr::new(dst, u.dst_port()),
            dscp,
            ecn,
            ipv4_id,
            dont_frag,
        })
    }

    /// The process-level owner of the datagram at its destination: the
    /// MAD's listener or connection, else its destination QP.
    pub fn dest_owner(&self) -> Owner {
        self.mad_owner.unwrap_or(Owner::Qp(self.dest_qpn))
    }

    /// True for an IPv6 datagram.
    pub fn is_ipv6(&self) -> bool {
        self.destination.is_ipv6()
    }

    /// Length of the IP and UDP headers in front of the UDP payload (28
    /// for IPv4, 48 for IPv6).
    pub fn header_len(&self) -> usize {
        if self.is_ipv6() {
            ipv6::HEADER_LEN + udp::HEADER_LEN
        } else {
            ipv4::HEADER_LEN + udp::HEADER_LEN
        }
    }

    /// The TOS / traffic class byte: DSCP and ECN.
    pub fn tos(&self) -> u8 {
        (self.dscp << 2) | self.ecn.bits()
    }

    /// The header fields the ICRC covers that a sender's network stack may
    /// write differently (see [`icrc::rebase`]), as this datagram has them.
    pub fn rewritable(&self) -> icrc::Rewritable {
        icrc::Rewritable {
            src: self.src.ip(),
            src_port: self.src.port(),
            ipv4_id: self.ipv4_id,
            dont_frag: self.dont_frag,
        }
    }
}

/// The IP and UDP header of a datagram received as its UDP payload alone
/// (a UDP socket's, a same-host ring's), as the receiver knows it: what
/// the engine needs of the header it never sees, to check the ICRC over
/// it (the covered fields, docs/protocol.md §4) and to read its addresses
/// and ECN. The UDP destination port is 4791 and the lengths follow from
/// the payload; the IPv4 don't-fragment flag is taken as set, as every
/// RoCE v2 sender sets it (and the sockets of this stack do).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RxHeader {
    /// IP source address and UDP source port.
    pub src: SocketAddr,
    /// IP destination address (of the same family as `src`).
    pub dst: IpAddr,
    /// The TOS / traffic class byte: DSCP and ECN (0 when the receiver
    /// was not told). The ICRC masks it.
    pub tos: u8,
    /// The IPv4 identification, which the ICRC covers, when the receiver
    /// knows it (a ring's record of an engine's datagram); `None` when it
    /// cannot (a UDP socket never shows it): the engine then tries the
    /// values a sender writes (0, and the segment numbers of a UDP GSO
    /// send) as its ICRC policy says. Unused for IPv6, whose covered
    /// fields are all known.
    pub ipv4_id: Option<u16>,
}

impl RxHeader {
    /// The header of a datagram from `src` to `dst` with TOS `tos`, its
    /// IPv4 identification unknown.
    pub const fn new(src: SocketAddr, dst: IpAddr, tos: u8) -> RxHeader {
        RxHeader {
            src,
            dst,
            tos,
            ipv4_id: None,
        }
    }

    /// Sets [`ipv4_id`](Self::ipv4_id).
    pub const fn with_ipv4_id(mut self, id: Option<u16>) -> RxHeader {
        self.ipv4_id = id;
        self
    }

    /// The ECN codepoint (the TOS byte's two low bits).
    pub fn ecn(&self) -> Ecn {
        Ecn::from_bits(self.tos)
    }

    /// True when every header field the ICRC covers is known: IPv6, or
    /// IPv4 with its identification.
    pub fn exact(&self) -> bool {
        self.src.is_ipv6() || self.ipv4_id.is_some()
    }

    /// The IP header it stands for, as a repr (IPv4 identification 0 when
    /// unknown, DF set, TTL / hop limit 64, flow label 0, payload length
    /// 0: [`crate::RocePacket::parse_udp_payload`] sets it); `None` when
    /// the addresses are of two families.
    pub fn ip_repr(&self) -> Option<crate::IpRepr> {
        let (dscp, ecn) = (self.tos >> 2, self.ecn());
        match (self.src.ip(), self.dst) {
            (IpAddr::V4(src), IpAddr::V4(dst)) => Some(crate::IpRepr::V4(crate::Ipv4Repr {
                src,
                dst,
                dscp,
                ecn,
                ident: self.ipv4_id.unwrap_or(0),
                dont_frag: true,
                ttl: 64,
                payload_len: 0,
            })),
            (IpAddr::V6(src), IpAddr::V6(dst)) => Some(crate::IpRepr::V6(crate::Ipv6Repr {
                src,
                dst,
                dscp,
                ecn,
                flow_label: 0,
                hop_limit: 64,
                payload_len: 0,
            })),
            _ => None,
        }
    }
}

/// What a receiving backend knows about a datagram beside its bytes (and
/// beside its [`RxHeader`], for one received as its UDP payload).
///
/// Small and `Copy`; new fields may be added, so build one with
/// [`RxMeta::exact`] / [`RxMeta::inexact`] or the `with_*` setters.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct RxMeta {
    /// For a whole IP datagram: every header field the ICRC covers holds
    /// the value it had on the wire, so the datagram's ICRC is checked
    /// against exactly what was sent and a mismatch means damage: the
    /// engine checks it (docs/protocol.md §4). True (the default) for
    /// what a backend saw whole (a fabric, `AF_PACKET`, a capture); false
    /// for a datagram built by hand whose ICRC is not to be checked (a
    /// test's, a fuzzer's): the engine counts it unverified. A datagram
    /// received as its UDP payload says what it knows of its header in
    /// its [`RxHeader`] instead.
    pub header_exact: bool,
    /// Another process sharing this address received the datagram and
    /// handed it on (docs/host.md): if it is not this process's either,
    /// it is not handed on again.
    pub forwarded: bool,
    /// The datagram came from another engine of this host through memory
    /// only that engine's backend and this receiver's wrote (a same-host
    /// ring, docs/shm.md), its bytes as that engine made them: the ICRC
    /// in it was computed over them by the sender, and no wire lay
    /// between. A receiver's policy may take it without computing the
    /// ICRC again (roce-core's `DeviceConfig::icrc_trust_host`). False
    /// (the default) for anything else, and for a datagram a fault
    /// injector changed.
    pub host_intact: bool,
}

impl Default for RxMeta {
    fn default() -> RxMeta {
        RxMeta::exact()
    }
}

impl RxMeta {
    /// A datagram whose covered header fields are exact
    /// ([`header_exact`](Self::header_exact)).
    pub const fn exact() -> RxMeta {
        RxMeta {
            header_exact: true,
            forwarded: false,
            host_intact: false,
        }
    }

    /// A datagram with a covered header field the backend had to guess.
    pub const fn inexact() -> RxMeta {
        RxMeta {
            header_exact: false,
            forwarded: false,
            host_intact: false,
        }
    }

    /// Sets [`header_exact`](Self::header_exact).
    pub const fn with_header_exact(mut self, yes: bool) -> RxMeta {
        self.header_exact = yes;
        self
    }

    /// Sets [`forwarded`](Self::forwarded).
    pub const fn with_forwarded(mut self, yes: bool) -> RxMeta {
        self.forwarded = yes;
        self
    }

    /// Sets [`host_intact`](Self::host_intact).
    pub const fn with_host_intact(mut self, yes: bool) -> RxMeta {
        self.host_intact = yes;
        self
    }
}

/// An identifier that names the one process, of those sharing a device's
/// address on a host, that a received datagram belongs to (docs/host.md):
/// a data packet's destination QP, a CM REQ's or SIDR REQ's service ID, or
/// the local communication ID that any other CM MAD names (IBTA Vol 1
/// §12.6). The engine says which one a datagram names when it has no such
/// object itself; a backend looks its owner up without reading the
/// datagram.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Owner {
    /// A QP number (24 bits), never 1 (QP1 is every process's).
    Qp(u32),
    /// A service ID a CM listener holds.
    Service(u64),
    /// A local communication ID of a CM connection.
    CommId(u32),
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        BthRepr, ExtHeaders, FrameRepr, IpRepr, Ipv4Repr, Ipv6Repr, Opcode, Psn, Qpn, RocePacket,
    };
    use crate::{UdpChecksum, UdpRepr};

    fn emit(ip: IpRepr) -> std::vec::Vec<u8> {
        let repr = FrameRepr {
            eth: None,
            ip,
            udp: UdpRepr {
                src_port: 0xc123,
                dst_port: crate::ROCE_V2_PORT,
                checksum: UdpChecksum::Zero,
            },
            bth: BthRepr::new(Opcode::RC_SEND_ONLY, Qpn::new(0x12_3456), Psn::new(1)),
            ext: ExtHeaders::default(),
            payload: b"hello",
        };
        let mut buf = std::vec![0u8; repr.len()];
        let n = repr.emit(&mut buf).unwrap();
        buf.truncate(n);
        buf
    }

    /// The ICRC computed from a payload's header fields equals the one
    /// computed over the whole datagram roce-wire emitted, whatever the
    /// masked fields (TOS, TTL; traffic class, flow label, hop limit), and
    /// follows the covered ones (the IPv4 identification).
    #[test]
    fn the_icrc_from_header_fields_is_the_whole_datagrams() {
        use crate::crc32::Code;
        let mut ips = std::vec::Vec::new();
        for (dscp, ecn, ttl, ident) in [
            (0, Ecn::NotEct, 64, 0),
            (46, Ecn::Ce, 1, 0),
            (26, Ecn::Ect0, 255, 1),
            (63, Ecn::Ect1, 17, 127),
            (10, Ecn::Ce, 64, 0x4321),
        ] {
            ips.push(IpRepr::V4(Ipv4Repr {
                src: "10.0.0.1".parse().unwrap(),
                dst: "10.0.0.2".parse().unwrap(),
                dscp,
                ecn,
                ident,
                dont_frag: true,
                ttl,
                payload_len: 0,
            }));
        }
        for (dscp, ecn, flow_label, hop_limit) in [
            (0, Ecn::NotEct, 0, 64),
            (46, Ecn::Ce, 0xabcde, 1),
            (26, Ecn::Ect0, 1, 255),
        ] {
            ips.push(IpRepr::V6(Ipv6Repr {
                src: "fd00::1".parse().unwrap(),
                dst: "fd00::2".parse().unwrap(),
                dscp,
                ecn,
                flow_label,
                hop_limit,
                payload_len: 0,
            }));
        }
        for ip in ips {
            let d = emit(ip);
            let t = Transmit::of_datagram(&d).unwrap();
            let payload = &d[t.header_len()..d.len() - icrc::LEN];
            let whole = icrc::compute(&d[..d.len() - icrc::LEN]).unwrap();
            let mut wire = [0u8; 4];
            wire.copy_from_slice(&d[d.len() - icrc::LEN..]);
            assert_eq!(whole, icrc::read(wire));
            let fields = icrc::HeaderFields {
                src: t.src.ip(),
                dst: t.destination.ip(),
                src_port: t.src.port(),
                ipv4_id: t.ipv4_id,
                dont_frag: t.dont_frag,
            };
            for code in [Code::Fast, Code::Table] {
                let got = icrc::compute_udp(code, &fields, payload).unwrap();
                assert_eq!(got, whole, "{ip:?} {code:?}");
            }
            // Parsed from its UDP payload with a header that knows none of
            // the masked fields (TOS, TTL, flow label left at defaults),
            // the packet's ICRC still checks.
            let h = RxHeader::new(t.src, t.destination.ip(), 0).with_ipv4_id(Some(t.ipv4_id));
            let p = RocePacket::parse_udp_payload(
                h.ip_repr().unwrap(),
                t.src.port(),
                &d[t.header_len()..],
            )
            .unwrap();
            assert!(p.check_icrc().is_ok(), "{ip:?}");
            assert_eq!(p.ip_len(), d.len());
            // A covered field the header gets wrong breaks it.
            if t.is_ipv6() {
                let moved = SocketAddr::new(t.src.ip(), t.src.port() ^ 1);
                let bad = RocePacket::parse_udp_payload(
                    RxHeader::new(moved, t.destination.ip(), 0)
                        .ip_repr()
                        .unwrap(),
                    moved.port(),
                    &d[t.header_len()..],
                )
                .unwrap();
                assert!(bad.check_icrc().is_err());
            } else {
                let other = h.with_ipv4_id(Some(t.ipv4_id ^ 0x100));
                let bad = RocePacket::parse_udp_payload(
                    other.ip_repr().unwrap(),
                    t.src.port(),
                    &d[t.header_len()..],
                )
                .unwrap();
                assert!(bad.check_icrc().is_err());
            }
        }
    }

    #[test]
    fn reads_what_emit_wrote() {
        let d = emit(IpRepr::V4(Ipv4Repr {
            src: "10.0.0.1".parse().unwrap(),
            dst: "10.0.0.2".parse().unwrap(),
            dscp: 26,
            ecn: Ecn::Ect0,
            ident: 9,
            dont_frag: true,
            ttl: 64,
            payload_len: 0,
        }));
        let t = Transmit::of_datagram(&d).unwrap();
        assert_eq!(t.size, d.len());
        assert_eq!(t.src, "10.0.0.1:49443".parse().unwrap());
        assert_eq!(t.destination, "10.0.0.2:4791".parse().unwrap());
        assert_eq!((t.dscp, t.ecn, t.tos()), (26, Ecn::Ect0, 26 << 2 | 2));
        assert_eq!((t.ipv4_id, t.dont_frag, t.header_len()), (9, true, 28));
        assert_eq!(t.dest_qpn, 0x12_3456);
        for n in 0..d.len() {
            assert_eq!(Transmit::of_datagram(&d[..n]), None, "truncated at {n}");
        }
        let d6 = emit(IpRepr::V6(Ipv6Repr {
            src: "fd00::1".parse().unwrap(),
            dst: "fd00::2".parse().unwrap(),
            dscp: 10,
            ecn: Ecn::Ce,
            flow_label: 7,
            hop_limit: 64,
            payload_len: 0,
        }));
        let t6 = Transmit::of_datagram(&d6).unwrap();
        assert!(t6.is_ipv6());
        assert_eq!((t6.dscp, t6.ecn, t6.header_len()), (10, Ecn::Ce, 48));
        assert_eq!(t6.dest_qpn, 0x12_3456);
    }
}
