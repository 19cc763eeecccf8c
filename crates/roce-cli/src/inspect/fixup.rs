//! What `tcpdump -i lo` records differs from what goes on a wire, in two
//! ways `roce inspect` undoes, as Wireshark reads such captures:
//!
//! * the UDP checksum: loopback leaves it unfinished (checksum offload,
//!   CHECKSUM_PARTIAL: the field holds the pseudo-header sum only), so it
//!   never verifies. Wireshark does not check UDP checksums by default;
//!   neither does inspect (the ICRC covers the RoCE packet anyway): such a
//!   frame is decoded with its checksum ignored, and counted.
//! * GSO: a UDP GSO send (`UDP_SEGMENT`) is seen on lo as one datagram
//!   holding several RoCE packets back to back (all of one segment size but
//!   the last). The datagram is split where the segments are consecutive
//!   packets of one QP (same destination QP, PSNs one apart) and only when
//!   every segment's ICRC confirms the split (IPv4 segments carry the IP
//!   IDs the kernel gives them: the batch's ID plus the segment's index).

use roce_wire::{Error as WireError, Frame};

/// The link layer of a capture record's payload.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Link {
    Ethernet,
    Ip,
    Cooked(u16),
}

/// Parses a frame of `link`.
pub(crate) fn parse(link: Link, b: &[u8]) -> roce_wire::Result<Frame<'_>> {
    match link {
        Link::Ethernet => Frame::parse_ethernet(b),
        Link::Ip => Frame::parse_ip(b),
        Link::Cooked(protocol) => Frame::parse_with_ethertype(protocol, b),
    }
}

/// Where the IP header starts in a frame of `link`.
fn ip_offset(link: Link, b: &[u8]) -> Option<usize> {
    match link {
        Link::Ip | Link::Cooked(_) => Some(0),
        Link::Ethernet => {
            let mut at = 12;
            loop {
                let ty = u16::from_be_bytes([*b.get(at)?, *b.get(at + 1)?]);
                match ty {
                    0x8100 | 0x88a8 => at += 4,
                    _ => return Some(at + 2),
                }
            }
        }
    }
}

/// (IP header length, whether IPv4) of the IP packet at `ip`, UDP only.
fn ip_udp(ip: &[u8]) -> Option<(usize, bool)> {
    match ip.first()? >> 4 {
        4 => {
            let hl = usize::from(ip[0] & 0x0f) * 4;
            (ip.len() >= hl + 8 && *ip.get(9)? == 17).then_some((hl, true))
        }
        6 => (ip.len() >= 48 && ip[6] == 17).then_some((40, false)),
        _ => None,
    }
}

/// A copy of the frame with its UDP checksum set to 0 ("none"), if the
/// frame is UDP over IP.
pub(crate) fn without_udp_checksum(link: Link, b: &[u8]) -> Option<Vec<u8>> {
    let at = ip_offset(link, b)?;
    let (hl, _) = ip_udp(b.get(at..)?)?;
    let mut v = b.to_vec();
    v[at + hl + 6] = 0;
    v[at + hl + 7] = 0;
    Some(v)
}

/// Whether a parse failed on the UDP checksum alone.
pub(crate) fn bad_udp_checksum(r: &roce_wire::Result<Frame<'_>>) -> bool {
    matches!(r, Err(WireError::BadUdpChecksum))
}

/// The IPv4 header checksum of `h` (its checksum field zeroed first).
fn ipv4_checksum(h: &mut [u8]) {
    h[10] = 0;
    h[11] = 0;
    let mut sum: u32 = h
        .chunks(2)
        .map(|c| u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)])))
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    let c = !(sum as u16);
    h[10..12].copy_from_slice(&c.to_be_bytes());
}

/// A frame like `b` (link and IP/UDP headers) carrying `seg` as its UDP
/// payload: lengths set, UDP checksum 0, IPv4 ID `id`.
fn segment_frame(b: &[u8], at: usize, hl: usize, v4: bool, seg: &[u8], id: u16) -> Vec<u8> {
    let mut f = Vec::with_capacity(at + hl + 8 + seg.len());
    f.extend_from_slice(&b[..at + hl + 8]);
    f.extend_from_slice(seg);
    let udp_len = (8 + seg.len()) as u16;
    if v4 {
        let total = (hl + 8 + seg.len()) as u16;
        f[at + 2..at + 4].copy_from_slice(&total.to_be_bytes());
        f[at + 4..at + 6].copy_from_slice(&id.to_be_bytes());
        ipv4_checksum(&mut f[at..at + hl]);
    } else {
        f[at + 4..at + 6].copy_from_slice(&udp_len.to_be_bytes());
    }
    f[at + hl + 4..at + hl + 6].copy_from_slice(&udp_len.to_be_bytes());
    f[at + hl + 6] = 0;
    f[at + hl + 7] = 0;
    f
}

/// Whether `f` parses as a RoCE packet whose ICRC verifies.
fn icrc_ok(link: Link, f: &[u8]) -> bool {
    matches!(parse(link, f), Ok(Frame::Roce(p)) if p.computed_icrc() == p.icrc)
}

/// The RoCE packets of a GSO batch, each a frame of its own, when `b` is
/// one (see the module's documentation); `None` leaves `b` as it is.
pub(crate) fn split_gso(link: Link, b: &[u8]) -> Option<Vec<Vec<u8>>> {
    let at = ip_offset(link, b)?;
    let ip = b.get(at..)?;
    let (hl, v4) = ip_udp(ip)?;
    let udp = &ip[hl..];
    let udp_len = usize::from(u16::from_be_bytes([udp[4], udp[5]]));
    let pl = udp.get(8..udp_len)?;
    // BTH: destination QP in bytes 5..8, PSN in 9..12; a segment is at
    // least a BTH and an ICRC.
    const MIN: usize = 16;
    if pl.len() < 2 * MIN {
        return None;
    }
    let qp = &pl[5..8];
    let psn = |s: &[u8]| u32::from_be_bytes([0, s[9], s[10], s[11]]);
    let next = (psn(pl) + 1) & 0xff_ffff;
    let base_id = if v4 {
        u16::from_be_bytes([ip[4], ip[5]])
    } else {
        0
    };
    let mut size = MIN;
    while size + MIN <= pl.len() {
        let s = &pl[size..];
        if &s[5..8] == qp && psn(s) == next {
            if let Some(frames) = try_split(link, b, at, hl, v4, pl, size, base_id) {
                return Some(frames);
            }
        }
        size += 4; // RoCE packets are 4-byte multiples.
    }
    None
}

/// The frames of `pl` cut into segments of `size` (the last shorter),
/// if every segment's ICRC verifies.
#[allow(clippy::too_many_arguments)]
fn try_split(
    link: Link,
    b: &[u8],
    at: usize,
    hl: usize,
    v4: bool,
    pl: &[u8],
    size: usize,
    base_id: u16,
) -> Option<Vec<Vec<u8>>> {
    let mut out = Vec::new();
    for (k, seg) in pl.chunks(size).enumerate() {
        if seg.len() < 16 {
            return None;
        }
        // The kernel's ID for segment k, then the batch's own.
        let ids = [base_id.wrapping_add(k as u16), base_id];
        let f = ids
            .iter()
            .map(|&id| segment_frame(b, at, hl, v4, seg, id))
            .find(|f| icrc_ok(link, f))?;
        out.push(f);
    }
    (out.len() > 1).then_some(out)
}
