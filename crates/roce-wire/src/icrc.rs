//! The Invariant CRC (IBTA Annex A17 §A17.4.4, docs/protocol.md §4).
//!
//! CRC-32 (IEEE 802.3, reflected, as zlib computes it) over:
//! 8 bytes of 0xFF standing in for the LRH; the IP header with its variant
//! fields set to ones (IPv4: TOS, TTL, header checksum; IPv6: traffic class,
//! flow label, hop limit); the UDP header with its checksum set to ones; the
//! BTH with byte 4 (FECN, BECN, reserved) set to ones; then the rest of the
//! packet up to and including the pad bytes. The value is sent after the pad
//! in little-endian byte order.

use core::net::IpAddr;

use crate::bth;
use crate::crc32::Code;
use crate::error::{Error, Layer, Result};
use crate::udp;

/// ICRC length on the wire.
pub const LEN: usize = 4;

/// Computes the ICRC of an IP datagram that carries RoCE v2: `covered` runs
/// from the first byte of the IP header to the last pad byte (the ICRC
/// itself excluded).
pub fn compute(covered: &[u8]) -> Result<u32> {
    compute_split(covered, &[])
}

/// [`compute`] over a datagram held in two pieces, `head` then `rest`
/// (its headers and its payload, say, held apart): the ICRC of
/// `head ++ rest`, where the concatenation runs from the IP header to the
/// last pad byte.
pub fn compute_split(head: &[u8], rest: &[u8]) -> Result<u32> {
    compute_with(Code::Fast, head, rest)
}

/// [`compute_split`], computing the CRC by `code` (see [`crate::crc32`]).
pub fn compute_with(code: Code, head: &[u8], rest: &[u8]) -> Result<u32> {
    let ip_len = ip_header_len(head.first().or(rest.first()).copied())?;
    let masked_len = ip_len + udp::HEADER_LEN + bth::HEADER_LEN;
    let total = head.len() + rest.len();
    if total < masked_len {
        return Err(Error::Truncated { layer: Layer::Bth });
    }
    // Every ICRC starts from the CRC of the LRH's stand-in.
    let mut h = crate::crc32::Crc32::continued(LRH_CRC, code);
    if total <= SMALL_MAX {
        // A small datagram (an ACK, a latency test's message): one pass
        // over one masked copy costs less than a pass per piece.
        let mut all = [0u8; SMALL_MAX];
        all[..head.len()].copy_from_slice(head);
        all[head.len()..total].copy_from_slice(rest);
        mask(&mut all[..masked_len], ip_len);
        h.update(&all[..total]);
        return Ok(h.finalize());
    }
    let mut hdr = [0u8; MASKED_MAX];
    let hdr = &mut hdr[..masked_len];
    let from_head = head.len().min(masked_len);
    hdr[..from_head].copy_from_slice(&head[..from_head]);
    hdr[from_head..].copy_from_slice(&rest[..masked_len - from_head]);
    mask(hdr, ip_len);
    h.update(hdr);
    h.update(&head[from_head..]);
    h.update(&rest[masked_len - from_head..]);
    Ok(h.finalize())
}

/// The IP and UDP header fields the ICRC covers and does not mask, for a
/// datagram held as its UDP payload alone (a UDP socket's, a same-host
/// ring's): the rest of the covered header follows from them and the
/// payload's length (IPv4 without options: version and IHL, total
/// length, protocol UDP; IPv6: payload length, next header UDP; UDP:
/// destination port 4791 and length), and the masked fields (IPv4 TOS,
/// TTL and header checksum; IPv6 traffic class, flow label and hop limit;
/// the UDP checksum) do not count (IBTA Annex A17 §A17.4.4,
/// docs/protocol.md §4).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct HeaderFields {
    /// IP source address.
    pub src: IpAddr,
    /// IP destination address (of the same family as `src`).
    pub dst: IpAddr,
    /// UDP source port.
    pub src_port: u16,
    /// IPv4 identification (ignored for IPv6).
    pub ipv4_id: u16,
    /// IPv4 don't-fragment flag (ignored for IPv6).
    pub dont_frag: bool,
}

/// The ICRC of a datagram given as its header fields `h` and its UDP
/// payload from the BTH to the last pad byte (`covered`, the ICRC
/// excluded), as [`compute`] gives it over the whole datagram, computed
/// by `code`. Only the covered header's bytes are written (on the stack,
/// with the masked fields already ones): no datagram is rebuilt.
pub fn compute_udp(code: Code, h: &HeaderFields, covered: &[u8]) -> Result<u32> {
    let udp_len = udp::HEADER_LEN + covered.len() + LEN;
    let mut hdr = [0xffu8; crate::ipv6::HEADER_LEN + udp::HEADER_LEN];
    let ip_len = match (h.src, h.dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            let total = u16::try_from(crate::ipv4::HEADER_LEN + udp_len)
                .map_err(|_| Error::InvalidField("IPv4 total length above 65535"))?;
            hdr[0] = 0x45;
            hdr[2..4].copy_from_slice(&total.to_be_bytes());
            hdr[4..6].copy_from_slice(&h.ipv4_id.to_be_bytes());
            hdr[6] = if h.dont_frag { 0x40 } else { 0 };
            hdr[7] = 0;
            hdr[9] = crate::ip::PROTO_UDP;
            hdr[12..16].copy_from_slice(&s.octets());
            hdr[16..20].copy_from_slice(&d.octets());
            crate::ipv4::HEADER_LEN
        }
        (IpAddr::V6(s), IpAddr::V6(d)) => {
            let plen = u16::try_from(udp_len)
                .map_err(|_| Error::InvalidField("IPv6 payload length above 65535"))?;
            hdr[0] = 0x6f;
            hdr[4..6].copy_from_slice(&plen.to_be_bytes());
            hdr[6] = crate::ip::PROTO_UDP;
            hdr[8..24].copy_from_slice(&s.octets());
            hdr[24..40].copy_from_slice(&d.octets());
            crate::ipv6::HEADER_LEN
        }
        _ => {
            return Err(Error::InvalidField(
                "IP source and destination of two families",
            ))
        }
    };
    let u = &mut hdr[ip_len..ip_len + udp::HEADER_LEN];
    u[0..2].copy_from_slice(&h.src_port.to_be_bytes());
    u[2..4].copy_from_slice(&udp::ROCE_V2_PORT.to_be_bytes());
    u[4..6].copy_from_slice(&(udp_len as u16).to_be_bytes());
    compute_with(code, &hdr[..ip_len + udp::HEADER_LEN], covered)
}

/// The CRC-32 of the 8 bytes of 0xFF that stand in for the LRH, where
/// every ICRC starts.
const LRH_CRC: u32 = 0x2144_df1c;

/// Covered lengths up to this are copied whole and run through the CRC
/// in one pass ([`compute_with`]).
const SMALL_MAX: usize = 128;

/// Most bytes the masked part of the covered data can have: the IPv6
/// header, UDP and the BTH.
const MASKED_MAX: usize = crate::ipv6::HEADER_LEN + udp::HEADER_LEN + bth::HEADER_LEN;

/// The IP header length the ICRC rules assume (no IPv4 options: RoCE v2
/// does not use them) for a datagram starting with byte `first`.
fn ip_header_len(first: Option<u8>) -> Result<usize> {
    match first.map(|b| b >> 4) {
        Some(4) => Ok(crate::ipv4::HEADER_LEN),
        Some(6) => Ok(crate::ipv6::HEADER_LEN),
        Some(v) => Err(Error::BadIpVersion { version: v }),
        None => Err(Error::Truncated { layer: Layer::Ipv4 }),
    }
}

/// Sets the variant fields of the IP, UDP and BTH headers (`hdr`, whose IP
/// header is `ip_len` bytes) to ones: the only copy of these rules.
fn mask(hdr: &mut [u8], ip_len: usize) {
    if ip_len == crate::ipv4::HEADER_LEN {
        hdr[1] = 0xff; // TOS (DSCP + ECN)
        hdr[8] = 0xff; // TTL
        hdr[10] = 0xff; // header checksum
        hdr[11] = 0xff;
    } else {
        hdr[0] |= 0x0f; // traffic class, high nibble
        hdr[1] = 0xff; // traffic class low nibble + flow label
        hdr[2] = 0xff;
        hdr[3] = 0xff;
        hdr[7] = 0xff; // hop limit
    }
    hdr[ip_len + 6] = 0xff; // UDP checksum
    hdr[ip_len + 7] = 0xff;
    hdr[ip_len + udp::HEADER_LEN + 4] = 0xff; // BTH FECN | BECN | reserved
}

/// The covered header fields that a sender's network stack may write
/// differently from the engine that built the datagram: a UDP socket's
/// kernel writes its own source address and port and, for IPv4, its own
/// identification (UDP GSO numbers the segments of one send 0, 1, 2, ...)
/// and DF flag (docs/protocol.md §4).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Rewritable {
    /// IP source address.
    pub src: IpAddr,
    /// UDP source port.
    pub src_port: u16,
    /// IPv4 identification (ignored for IPv6).
    pub ipv4_id: u16,
    /// IPv4 don't-fragment flag (ignored for IPv6).
    pub dont_frag: bool,
}

impl Rewritable {
    /// The fields as they sit in the IP and UDP header (IPv4 when `v4`),
    /// at the offsets the ICRC sees them; other bytes zero.
    fn place(&self, v4: bool, out: &mut [u8; MASKED_MAX]) -> usize {
        match (self.src, v4) {
            (IpAddr::V4(a), true) => {
                out[4..6].copy_from_slice(&self.ipv4_id.to_be_bytes());
                out[6] = if self.dont_frag { 0x40 } else { 0 };
                out[12..16].copy_from_slice(&a.octets());
            }
            (IpAddr::V6(a), false) => out[8..24].copy_from_slice(&a.octets()),
            // A source of the other family: not this header's; leave zero
            // (the caller gets an ICRC that does not match).
            _ => {}
        }
        let at = if v4 {
            crate::ipv4::HEADER_LEN
        } else {
            crate::ipv6::HEADER_LEN
        };
        out[at..at + 2].copy_from_slice(&self.src_port.to_be_bytes());
        at + 2
    }
}

/// The ICRC of a datagram after its [`Rewritable`] fields change from
/// `from` to `to`, given its ICRC `icrc` before (as [`compute`] returns
/// it): `covered_len` is the number of bytes the ICRC covers (IP header to
/// the last pad byte) and `v4` its IP version. The datagram's bytes are not
/// read: the CRC is linear, so the change of ICRC is the CRC of the
/// change of header, shifted over the bytes that follow it. A datagram
/// whose ICRC did not match before (damaged after it was computed) keeps
/// its mismatch. Nanoseconds: a few dozen carry-less products in
/// software, independent of the datagram's length.
pub fn rebase(icrc: u32, covered_len: usize, v4: bool, from: &Rewritable, to: &Rewritable) -> u32 {
    if from == to {
        return icrc;
    }
    icrc ^ field_delta(covered_len, v4, from, to, x8n_mod)
}

/// The ICRC change when the [`Rewritable`] fields go from `from` to `to`,
/// with `shift(n)` giving x^(8n) mod P.
fn field_delta(
    covered_len: usize,
    v4: bool,
    from: &Rewritable,
    to: &Rewritable,
    shift: impl FnOnce(usize) -> u32,
) -> u32 {
    let (mut a, mut b) = ([0u8; MASKED_MAX], [0u8; MASKED_MAX]);
    let end = from.place(v4, &mut a);
    to.place(v4, &mut b);
    for (x, y) in a[..end].iter_mut().zip(b[..end].iter()) {
        *x ^= *y;
    }
    mul_mod(
        register_crc(&a[..end]),
        shift(covered_len.saturating_sub(end)),
    )
}

/// [`rebase`] for a sender that moves many ICRCs: it remembers the shifts
/// of the last few datagram lengths (the segments of a UDP GSO send share
/// one), so that a move costs a CRC over the changed header bytes and one
/// carry-less product. Owned by whoever sends (no shared state).
#[derive(Clone, Debug)]
pub struct Rebaser {
    /// (bytes after the changed header, x^(8 bytes) mod P), most recent
    /// first.
    shifts: [(usize, u32); 4],
    /// (covered length, the ICRC change of each IPv4 identification bit),
    /// most recent first: a move of the identification alone (a GSO
    /// segment's number) is then a few XORs.
    ids: [(usize, [u32; 16]); 4],
}

impl Default for Rebaser {
    fn default() -> Rebaser {
        Rebaser {
            shifts: [(usize::MAX, 0); 4],
            ids: [(usize::MAX, [0; 16]); 4],
        }
    }
}

impl Rebaser {
    /// As [`rebase`].
    pub fn rebase(
        &mut self,
        icrc: u32,
        covered_len: usize,
        v4: bool,
        from: &Rewritable,
        to: &Rewritable,
    ) -> u32 {
        if from == to {
            return icrc;
        }
        let id_only = Rewritable {
            ipv4_id: to.ipv4_id,
            ..*from
        } == *to;
        if v4 && id_only {
            let basis = self.id_basis(covered_len);
            let k = from.ipv4_id ^ to.ipv4_id;
            let mut d = 0;
            for (j, v) in basis.iter().enumerate() {
                d ^= v & 0u32.wrapping_sub(u32::from(k >> j) & 1);
            }
            return icrc ^ d;
        }
        icrc ^ field_delta(covered_len, v4, from, to, |n| self.shift(n))
    }

    /// As [`solve_ipv4_id`](fn@solve_ipv4_id), with the bases of recent
    /// lengths cached: a receiver of UDP GSO segments solves one per
    /// segment, and they share a length.
    pub fn solve_ipv4_id(
        &mut self,
        icrc_id0: u32,
        found: u32,
        covered_len: usize,
        max: u16,
    ) -> Option<u16> {
        let diff = icrc_id0 ^ found;
        if diff == 0 {
            return None;
        }
        let basis = self.id_basis(covered_len);
        (1..=max.min(127)).find(|&k| {
            let mut d = 0;
            for (j, v) in basis.iter().enumerate().take(7) {
                d ^= v & 0u32.wrapping_sub(u32::from(k >> j) & 1);
            }
            d == diff
        })
    }

    /// The ICRC change of each bit of the IPv4 identification in a
    /// datagram covering `covered_len` bytes.
    fn id_basis(&mut self, covered_len: usize) -> [u32; 16] {
        if let Some(i) = self.ids.iter().position(|&(n, _)| n == covered_len) {
            let hit = self.ids[i];
            self.ids.copy_within(0..i, 1);
            self.ids[0] = hit;
            return hit.1;
        }
        let shift = self.shift(covered_len.saturating_sub(6));
        let mut basis = [0u32; 16];
        for (j, v) in basis.iter_mut().enumerate() {
            let mut d = [0u8; 6];
            d[4..6].copy_from_slice(&(1u16 << j).to_be_bytes());
            *v = mul_mod(register_crc(&d), shift);
        }
        self.ids.copy_within(0..3, 1);
        self.ids[0] = (covered_len, basis);
        basis
    }

    /// x^(8 n) mod P, from the cache when it is there.
    fn shift(&mut self, n: usize) -> u32 {
        if let Some(i) = self.shifts.iter().position(|&(k, _)| k == n) {
            let hit = self.shifts[i];
            self.shifts.copy_within(0..i, 1);
            self.shifts[0] = hit;
            return hit.1;
        }
        let x = x8n_mod(n);
        self.shifts.copy_within(0..3, 1);
        self.shifts[0] = (n, x);
        x
    }
}

/// The largest IPv4 identification a receiver that cannot see it tries
/// ([`solve_ipv4_id`](fn@solve_ipv4_id)): the segment numbers of a UDP
/// GSO send (at most 128 segments).
pub const MAX_GSO_IPV4_ID: u16 = 127;

/// The IPv4 identification in `1..=max` (at most 127) with which a
/// datagram whose ICRC for identification 0 is `icrc_id0` has the ICRC
/// `found`, all else equal; `covered_len` as for [`rebase`]. A receiver
/// that cannot see the identification (a UDP socket) recovers those of a
/// UDP GSO sender's segments this way; a damaged datagram matches one of
/// them with probability `max / 2^32`.
pub fn solve_ipv4_id(icrc_id0: u32, found: u32, covered_len: usize, max: u16) -> Option<u16> {
    Rebaser::default().solve_ipv4_id(icrc_id0, found, covered_len, max)
}

/// The change of a CRC-32 when the covered data changes by `d` (from the
/// start of the IP header) followed by `after` unchanged bytes: the CRC
/// register over `d` started at zero, without the final complement,
/// times x^(8 after) modulo the polynomial.
#[cfg(test)]
fn delta(d: &[u8], after: usize) -> u32 {
    mul_mod(register_crc(d), x8n_mod(after))
}

/// The CRC register over `d` started at zero, without the final
/// complement: linear in `d`.
fn register_crc(d: &[u8]) -> u32 {
    let mut h = crate::crc32::Crc32::with_initial(!0);
    h.update(d);
    !h.finalize()
}

/// The CRC-32 polynomial, reflected.
const POLY: u32 = 0xedb8_8320;

/// `a * b` modulo the polynomial, in the CRC's reflected bit order.
fn mul_mod(a: u32, mut b: u32) -> u32 {
    let mut p = 0;
    // Without branches: the bits are data.
    for k in (0..32).rev() {
        p ^= b & 0u32.wrapping_sub((a >> k) & 1);
        b = (b >> 1) ^ (POLY & 0u32.wrapping_sub(b & 1));
    }
    p
}

/// x^(2^k) modulo the polynomial, for k in 0..32.
const X2K: [u32; 32] = {
    let mut t = [0u32; 32];
    let mut p = 1u32 << 30; // x^1
    let mut k = 0;
    while k < 32 {
        t[k] = p;
        // p := p * p (mul_mod, written out for a const context).
        let (a, mut b, mut m, mut q) = (p, p, 1u32 << 31, 0u32);
        while m != 0 {
            if a & m != 0 {
                q ^= b;
            }
            m >>= 1;
            b = if b & 1 != 0 { (b >> 1) ^ POLY } else { b >> 1 };
        }
        p = q;
        k += 1;
    }
    t
};

/// x^(8n) modulo the polynomial.
fn x8n_mod(n: usize) -> u32 {
    let mut p = 1u32 << 31; // x^0
    let mut k = 3; // x^(8n) = x^(n * 2^3)
    let mut n = n as u64;
    while n != 0 {
        if n & 1 != 0 {
            p = mul_mod(X2K[k & 31], p);
        }
        n >>= 1;
        k += 1;
    }
    p
}

/// Computes the ICRC of a whole IP datagram carrying RoCE v2 (from its IP
/// header to its ICRC, as [`crate::FrameRepr::emit_with_icrc`] leaves it
/// without one) by `code` and writes it into the datagram's last four
/// bytes. A UDP checksum in the datagram is not updated (the engine
/// sends none).
pub fn fill(code: Code, datagram: &mut [u8]) -> Result<()> {
    let end = datagram
        .len()
        .checked_sub(LEN)
        .ok_or(Error::Truncated { layer: Layer::Icrc })?;
    let crc = compute_with(code, &datagram[..end], &[])?;
    datagram[end..].copy_from_slice(&to_wire(crc));
    Ok(())
}

/// [`fill`] for a datagram held as its UDP payload (BTH to ICRC) beside
/// its header fields `h`, as [`compute_udp`] takes them.
pub fn fill_udp(code: Code, h: &HeaderFields, payload: &mut [u8]) -> Result<()> {
    let end = payload
        .len()
        .checked_sub(LEN)
        .ok_or(Error::Truncated { layer: Layer::Icrc })?;
    let crc = compute_udp(code, h, &payload[..end])?;
    payload[end..].copy_from_slice(&to_wire(crc));
    Ok(())
}

/// The ICRC as found at the end of a packet (little-endian on the wire).
pub fn read(icrc_bytes: [u8; LEN]) -> u32 {
    u32::from_le_bytes(icrc_bytes)
}

/// The ICRC's wire bytes.
pub fn to_wire(icrc: u32) -> [u8; LEN] {
    icrc.to_le_bytes()
}

/// The ICRC as Wireshark and `roce inspect` print it: the four wire bytes
/// read as one big-endian number.
pub fn display_value(icrc: u32) -> u32 {
    icrc.swap_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crc32::Crc32;

    /// An IPv4 (or IPv6) RoCE datagram without its ICRC: headers, BTH and
    /// `n` payload bytes.
    fn datagram(v4: bool, n: usize) -> std::vec::Vec<u8> {
        let ip = if v4 { 20 } else { 40 };
        let mut d: std::vec::Vec<u8> = (0..ip + 8 + 12 + n).map(|i| (i * 37 + 11) as u8).collect();
        d[0] = if v4 { 0x45 } else { 0x60 };
        d
    }

    fn set(d: &mut [u8], v4: bool, f: &Rewritable) {
        let mut p = [0u8; MASKED_MAX];
        let end = f.place(v4, &mut p);
        let mask: &[usize] = if v4 {
            &[4, 5, 12, 13, 14, 15, 20, 21]
        } else {
            &[
                8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 40, 41,
            ]
        };
        for &i in mask {
            d[i] = p[i];
        }
        if v4 {
            d[6] = (d[6] & !0x40) | (p[6] & 0x40);
        }
        assert!(end <= d.len());
    }

    #[test]
    fn the_lrh_crc_is_that_of_eight_ones_bytes() {
        let mut h = Crc32::new();
        h.update(&[0xff; 8]);
        assert_eq!(h.finalize(), LRH_CRC);
    }

    /// The one-pass path for small datagrams and the piecewise one agree
    /// with a CRC over the masked datagram, whatever the length, the IP
    /// version, the code and where the datagram is split.
    #[test]
    fn small_and_large_datagrams_give_the_masked_crc() {
        for v4 in [true, false] {
            let ip = if v4 { 20 } else { 40 };
            for n in (0..SMALL_MAX + 40).chain([1000, 4096]) {
                let d = datagram(v4, n);
                let mut masked = d.clone();
                mask(&mut masked[..ip + 8 + 12], ip);
                let mut want = Crc32::new();
                want.update(&[0xff; 8]);
                want.update(&masked);
                let want = want.finalize();
                for code in [Code::Fast, Code::Table] {
                    for split in [0, 1, ip + 3, d.len() / 2, d.len()] {
                        let (head, rest) = d.split_at(split.min(d.len()));
                        let got = compute_with(code, head, rest).unwrap();
                        assert_eq!(got, want, "v4 {v4} n {n} {code:?} split {split}");
                    }
                }
            }
        }
    }

    #[test]
    fn zero_shifts_match_a_crc_over_zeros() {
        for n in [0usize, 1, 7, 100, 4096, 70_000] {
            let mut h = Crc32::with_initial(!0);
            h.update(&[0x5a, 0x11]);
            h.update(&std::vec![0u8; n]);
            assert_eq!(!h.finalize(), delta(&[0x5a, 0x11], n), "{n}");
        }
    }

    #[test]
    fn rebased_icrcs_equal_recomputed_ones() {
        let mut rebaser = Rebaser::default();
        for v4 in [true, false] {
            for n in [0usize, 1, 33, 1024, 4096] {
                let mut d = datagram(v4, n);
                let src: IpAddr = if v4 {
                    "10.0.0.1".parse().unwrap()
                } else {
                    "fd00::1".parse().unwrap()
                };
                let other: IpAddr = if v4 {
                    "10.0.0.9".parse().unwrap()
                } else {
                    "fd00::9".parse().unwrap()
                };
                let from = Rewritable {
                    src,
                    src_port: 0xc001,
                    ipv4_id: 7,
                    dont_frag: true,
                };
                set(&mut d, v4, &from);
                let before = compute(&d).unwrap();
                for to in [
                    Rewritable { ipv4_id: 0, ..from },
                    Rewritable {
                        ipv4_id: 3,
                        src_port: 4791,
                        ..from
                    },
                    Rewritable {
                        src: other,
                        dont_frag: false,
                        ..from
                    },
                ] {
                    let mut e = d.clone();
                    set(&mut e, v4, &to);
                    let want = compute(&e).unwrap();
                    assert_eq!(
                        rebase(before, d.len(), v4, &from, &to),
                        want,
                        "{v4} {n} {to:?}"
                    );
                    for _ in 0..3 {
                        // Cached shifts and ID bases give the same.
                        let got = rebaser.rebase(before, d.len(), v4, &from, &to);
                        assert_eq!(got, want, "{v4} {n} {to:?}");
                        let bad = rebaser.rebase(before ^ 1, d.len(), v4, &from, &to);
                        assert_eq!(bad, want ^ 1);
                    }
                    // A damaged datagram keeps its mismatch.
                    let bad = rebase(before ^ 1, d.len(), v4, &from, &to);
                    assert_eq!(bad, want ^ 1);
                }
                // The split form agrees with the whole.
                for cut in [0, 5, 28, 48, d.len()] {
                    let cut = cut.min(d.len());
                    assert_eq!(compute_split(&d[..cut], &d[cut..]).unwrap(), before);
                }
            }
        }
    }

    #[test]
    fn small_ipv4_ids_are_recovered() {
        for n in [0usize, 100, 4096] {
            let mut d = datagram(true, n);
            let f0 = Rewritable {
                src: "10.0.0.1".parse().unwrap(),
                src_port: 0xc000,
                ipv4_id: 0,
                dont_frag: true,
            };
            set(&mut d, true, &f0);
            let c0 = compute(&d).unwrap();
            for k in [1u16, 2, 64, 127] {
                let mut e = d.clone();
                set(&mut e, true, &Rewritable { ipv4_id: k, ..f0 });
                let ck = compute(&e).unwrap();
                assert_eq!(solve_ipv4_id(c0, ck, d.len(), 127), Some(k));
            }
            let mut e = d.clone();
            set(
                &mut e,
                true,
                &Rewritable {
                    ipv4_id: 0x4321,
                    ..f0
                },
            );
            assert_eq!(solve_ipv4_id(c0, compute(&e).unwrap(), d.len(), 127), None);
            assert_eq!(solve_ipv4_id(c0, c0 ^ 1, d.len(), 127), None);
            assert_eq!(solve_ipv4_id(c0, c0, d.len(), 127), None);
        }
    }
}
