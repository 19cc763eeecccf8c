//! Simulated time: integer picoseconds, and the serialization arithmetic
//! of Ethernet links.

/// Simulated time or duration in picoseconds (`u64` covers 213 days).
pub type Ps = u64;

/// One nanosecond in picoseconds.
pub const NS: Ps = 1_000;
/// One microsecond in picoseconds.
pub const US: Ps = 1_000_000;
/// One millisecond in picoseconds.
pub const MS: Ps = 1_000_000_000;
/// One second in picoseconds.
pub const SEC: Ps = 1_000_000_000_000;

/// Ethernet header (14) + 802.1Q tag (4) + FCS (4) around an IP datagram.
pub const FRAME_OVERHEAD: u32 = 14 + 4 + 4;
/// Preamble, start-of-frame delimiter (8) and inter-frame gap (12).
pub const PREAMBLE_IFG: u32 = 20;
/// A MAC control (PFC) frame: the 64-byte minimum, FCS included.
pub const PFC_FRAME_LEN: u32 = 64;

/// Bytes of an IP datagram in the switch buffer (the Ethernet frame).
pub const fn frame_len(dgram_len: u32) -> u32 {
    dgram_len + FRAME_OVERHEAD
}

/// Bytes of line time an IP datagram takes: frame plus preamble and IFG.
pub const fn wire_len(dgram_len: u32) -> u32 {
    frame_len(dgram_len) + PREAMBLE_IFG
}

/// Time to serialize `bytes` at `rate_bps`, rounded up to the picosecond.
pub fn ser_time(bytes: u32, rate_bps: u64) -> Ps {
    (bytes as u128 * 8 * SEC as u128).div_ceil(rate_bps.max(1) as u128) as Ps
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_rate_serialization() {
        // A 1500-byte datagram: 1542 bytes of line time.
        assert_eq!(wire_len(1500), 1542);
        // 1542 B at 100 Gb/s = 123.36 ns.
        assert_eq!(ser_time(1542, 100_000_000_000), 123_360);
        // At 40 Gb/s = 308.4 ns; at 400 Gb/s = 30.84 ns.
        assert_eq!(ser_time(1542, 40_000_000_000), 308_400);
        assert_eq!(ser_time(1542, 400_000_000_000), 30_840);
        // A PFC frame at 100 G: 84 B = 6.72 ns.
        assert_eq!(
            ser_time(PFC_FRAME_LEN + PREAMBLE_IFG, 100_000_000_000),
            6_720
        );
        // Rounded up: 1 byte at 3 b/s.
        assert_eq!(ser_time(1, 3), 2_666_666_666_667);
    }
}
