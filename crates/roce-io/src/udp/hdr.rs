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
/// a valid one here. By the CRC's linearity the result is the engine's
/// ICRC moved by the difference the header change makes: the ICRC over
/// the new header, XOR the one over the datagram as it is, XOR the
/// engine's (equal to the new one exactly when the datagram is intact).
/// Two CRCs over the datagram; only datagrams whose header the kernel
/// writes differently from the engine's pay for it.
pub(crate) fn icrc_for_wire(d: &[u8], h: &TxHdr, wire: &WireFields) -> [u8; 4] {
    let at = h.ip_hlen + udp::HEADER_LEN;
    // TxHdr::parse checked that a BTH and an ICRC follow.
    let new = icrc_over(&d[..at], &d[at..], Some(wire)).unwrap_or([0; 4]);
    let own = icrc_over(&d[..at], &d[at..], None).unwrap_or([0; 4]);
    let mut engine = [0u8; 4];
    engine.copy_from_slice(&d[d.len() - 4..]);
    std::array::from_fn(|i| new[i] ^ own[i] ^ engine[i])
}

/// The ICRC (wire byte order) of the datagram made of the IP and UDP
/// headers `ip_udp` (28 or 48 bytes) followed by the UDP payload
/// `transport` (BTH ... ICRC; the ICRC bytes themselves are not read),
/// with `wire`'s source address, IPv4 ID (and DF) and source port patched
/// in first. Same rule as [`roce_wire::icrc::compute`], without copying
/// the payload. `None` when `transport` is shorter than a BTH and an ICRC.
pub(crate) fn icrc_over(
    ip_udp: &[u8],
    transport: &[u8],
    wire: Option<&WireFields>,
) -> Option<[u8; 4]> {
    const MAX: usize = ipv6::HEADER_LEN + udp::HEADER_LEN + bth::HEADER_LEN;
    if transport.len() < bth::HEADER_LEN + icrc::LEN {
        return None;
    }
    let ip_hlen = ip_udp.len().checked_sub(udp::HEADER_LEN)?;
    let masked = ip_udp.len() + bth::HEADER_LEN;
    let mut hdr = [0u8; MAX];
    let hdr = hdr.get_mut(..masked)?;
    hdr[..ip_udp.len()].copy_from_slice(ip_udp);
    hdr[ip_udp.len()..].copy_from_slice(&transport[..bth::HEADER_LEN]);
    match ip_hlen {
        20 => {
            if let Some(w) = wire {
                hdr[4..6].copy_from_slice(&w.ident.to_be_bytes());
                hdr[6] |= 0x40; // DF
                if let IpAddr::V4(src) = w.src {
                    hdr[12..16].copy_from_slice(&src.octets());
                }
            }
            hdr[1] = 0xff;
            hdr[8] = 0xff;
            hdr[10] = 0xff;
            hdr[11] = 0xff;
        }
        40 => {
            if let Some(IpAddr::V6(src)) = wire.map(|w| w.src) {
                hdr[8..24].copy_from_slice(&src.octets());
            }
            hdr[0] |= 0x0f;
            hdr[1] = 0xff;
            hdr[2] = 0xff;
            hdr[3] = 0xff;
            hdr[7] = 0xff;
        }
        _ => return None,
    }
    let u = ip_hlen;
    if let Some(w) = wire {
        hdr[u..u + 2].copy_from_slice(&w.sport.to_be_bytes());
    }
    hdr[u + 6] = 0xff;
    hdr[u + 7] = 0xff;
    hdr[u + udp::HEADER_LEN + 4] = 0xff;
    let mut crc = roce_wire::crc32::Crc32::new();
    crc.update(&[0xff; 8]);
    crc.update(hdr);
    crc.update(&transport[bth::HEADER_LEN..transport.len() - icrc::LEN]);
    Some(icrc::to_wire(crc.finalize()))
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

/// Largest IPv4 identification [`IdSolver`] looks for: the segment
/// numbers of a UDP GSO send (at most 128 segments).
pub(crate) const MAX_SOLVED_ID: u16 = 127;
const ID_BITS: usize = 7;

/// Finds which small IPv4 identification a datagram was sent with, from
/// its ICRC.
///
/// The CRC is linear: two datagrams of the same length that differ only
/// in the identification have ICRCs that differ by `L(id · x^(8r))`, with
/// `L` the CRC register without its initial value and final inversion and
/// `r` the number of covered bytes after the field. So with the ICRC
/// computed for ID 0, the difference to the received ICRC tells the ID —
/// if it is one of the few the solver tries (1..=127, where a UDP GSO
/// sender's segments land); a corrupted datagram matches one of them with
/// probability 127 / 2^32. The per-bit differences depend only on `r`,
/// so they are cached per datagram length.
#[derive(Debug, Default)]
pub(crate) struct IdSolver {
    cache: Vec<(usize, [u32; ID_BITS])>,
}

static ZEROS: [u8; 65_536] = [0; 65_536];

impl IdSolver {
    fn basis(&mut self, r: usize) -> [u32; ID_BITS] {
        if let Some((_, b)) = self.cache.iter().find(|(n, _)| *n == r) {
            return *b;
        }
        let mut b = [0u32; ID_BITS];
        for (j, v) in b.iter_mut().enumerate() {
            let id = (1u16 << j).to_be_bytes();
            // Register starts at 0 (state !0), so this is L(id · x^(8r)).
            let mut h = roce_wire::crc32::Crc32::with_initial(!0);
            h.update(&id);
            let mut left = r;
            while left > 0 {
                let n = left.min(ZEROS.len());
                h.update(&ZEROS[..n]);
                left -= n;
            }
            *v = !h.finalize();
        }
        if self.cache.len() >= 16 {
            self.cache.remove(0);
        }
        self.cache.push((r, b));
        b
    }

    /// The ICRC (wire bytes) of an IPv4 datagram whose UDP length is
    /// `udp_len` and whose ICRC is `icrc` while its identification is
    /// `from`, once the identification is `to` (both at most
    /// [`MAX_SOLVED_ID`]): the same linearity, run forwards. A GSO sender
    /// gets each segment's ICRC from the engine's for ID 0 with a few XORs
    /// instead of a second CRC over the datagram.
    pub(crate) fn move_id(&mut self, udp_len: usize, icrc: [u8; 4], from: u16, to: u16) -> [u8; 4] {
        debug_assert!(from <= MAX_SOLVED_ID && to <= MAX_SOLVED_ID);
        let r = 8 + ipv4::HEADER_LEN + udp_len - icrc::LEN - 14;
        let b = self.basis(r);
        let k = from ^ to;
        let mut d = 0;
        for (j, v) in b.iter().enumerate() {
            if k & (1 << j) != 0 {
                d ^= v;
            }
        }
        (u32::from_le_bytes(icrc) ^ d).to_le_bytes()
    }

    /// The identification in 1..=[`MAX_SOLVED_ID`] that turns `computed`
    /// (the ICRC for ID 0, wire bytes) into `received`, for an IPv4
    /// datagram whose UDP length is `udp_len`.
    pub(crate) fn solve(
        &mut self,
        udp_len: usize,
        computed: [u8; 4],
        received: [u8; 4],
    ) -> Option<u16> {
        let diff = u32::from_le_bytes(computed) ^ u32::from_le_bytes(received);
        if diff == 0 {
            return None;
        }
        // Covered: 8 (LRH stand-in) + 20 (IPv4) + udp_len - 4 (ICRC); the
        // field ends at byte 8 + 6.
        let r = 8 + ipv4::HEADER_LEN + udp_len - icrc::LEN - 14;
        let b = self.basis(r);
        (1..=MAX_SOLVED_ID).find(|k| {
            let mut d = 0;
            for (j, v) in b.iter().enumerate() {
                if k & (1 << j) != 0 {
                    d ^= v;
                }
            }
            d == diff
        })
    }
}

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

#[cfg(test)]
mod solver_tests {
    use super::*;
    use crate::testutil;
    use roce_wire::Ecn;

    #[test]
    fn solver_recovers_small_ids_and_rejects_corruption() {
        let mut solver = IdSolver::default();
        for len in [0, 1, 100, 1024, 4096] {
            let d = testutil::v4_frame("10.0.0.1", "10.0.0.2", 3, len, Ecn::Ect0);
            let h = TxHdr::parse(&d).unwrap();
            let udp_len = d.len() - 20;
            let w0 = WireFields {
                src: h.src,
                ident: 0,
                sport: h.sport,
            };
            let c0 = icrc_for_wire(&d, &h, &w0);
            for k in [1u16, 2, 5, 64, 127] {
                let wk = WireFields { ident: k, ..w0 };
                let ck = icrc_for_wire(&d, &h, &wk);
                assert_eq!(solver.solve(udp_len, c0, ck), Some(k), "len {len} id {k}");
            }
            // Forwards: the ICRC for ID k from the one for ID j.
            for (j, k) in [(0u16, 1u16), (0, 63), (5, 64), (127, 0)] {
                let cj = icrc_for_wire(&d, &h, &WireFields { ident: j, ..w0 });
                let ck = icrc_for_wire(&d, &h, &WireFields { ident: k, ..w0 });
                assert_eq!(
                    solver.move_id(udp_len, cj, j, k),
                    ck,
                    "len {len} {j} -> {k}"
                );
            }
            let far = WireFields {
                ident: 0x4321,
                ..w0
            };
            assert_eq!(solver.solve(udp_len, c0, icrc_for_wire(&d, &h, &far)), None);
            let mut bad = c0;
            bad[0] ^= 1;
            assert_eq!(solver.solve(udp_len, c0, bad), None);
            assert_eq!(solver.solve(udp_len, c0, c0), None);
        }
    }
}
