//! The Invariant CRC (IBTA Annex A17 §A17.4.4, docs/protocol.md §4).
//!
//! CRC-32 (IEEE 802.3, reflected, as zlib computes it) over:
//! 8 bytes of 0xFF standing in for the LRH; the IP header with its variant
//! fields set to ones (IPv4: TOS, TTL, header checksum; IPv6: traffic class,
//! flow label, hop limit); the UDP header with its checksum set to ones; the
//! BTH with byte 4 (FECN, BECN, reserved) set to ones; then the rest of the
//! packet up to and including the pad bytes. The value is sent after the pad
//! in little-endian byte order.

use crate::bth;
use crate::error::{Error, Layer, Result};
use crate::udp;

/// ICRC length on the wire.
pub const LEN: usize = 4;

/// Computes the ICRC of an IP datagram that carries RoCE v2: `covered` runs
/// from the first byte of the IP header to the last pad byte (the ICRC
/// itself excluded).
pub fn compute(covered: &[u8]) -> Result<u32> {
    let ip_len = match covered.first().map(|b| b >> 4) {
        Some(4) => crate::ipv4::HEADER_LEN,
        Some(6) => crate::ipv6::HEADER_LEN,
        Some(v) => return Err(Error::BadIpVersion { version: v }),
        None => return Err(Error::Truncated { layer: Layer::Ipv4 }),
    };
    let masked_len = ip_len + udp::HEADER_LEN + bth::HEADER_LEN;
    if covered.len() < masked_len {
        return Err(Error::Truncated { layer: Layer::Bth });
    }
    let mut hdr = [0u8; crate::ipv6::HEADER_LEN + udp::HEADER_LEN + bth::HEADER_LEN];
    let hdr = &mut hdr[..masked_len];
    hdr.copy_from_slice(&covered[..masked_len]);
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
    let mut h = crate::crc32::Crc32::new();
    h.update(&[0xff; 8]);
    h.update(hdr);
    h.update(&covered[masked_len..]);
    Ok(h.finalize())
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
