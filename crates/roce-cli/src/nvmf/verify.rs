//! The data pattern of `roce nvmf perf --verify`, in the manner of fio's
//! verify headers: every block a verified write leaves starts with its own
//! LBA and the run's seed (16 bytes, little-endian), and the rest of the
//! block is a stream drawn from both. A block read back is then either the
//! block expected, or it says what it holds instead: another LBA's data (a
//! write that landed in the wrong place), another seed's (stale data), or
//! neither (corruption).

use std::fmt;

/// Bytes of the header at the start of each block: LBA, then seed.
const HEADER: usize = 16;

/// The pattern of one run: blocks of `block` bytes, generation `seed`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Pattern {
    seed: u64,
    block: usize,
}

/// A block read back that is not the one expected.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Mismatch {
    /// The block's address.
    pub lba: u64,
    /// The first byte of the block that differs.
    pub offset: usize,
    /// The LBA its header names.
    pub found_lba: u64,
    /// The seed its header names.
    pub found_seed: u64,
}

impl fmt::Display for Mismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "LBA {}: byte {} differs; ", self.lba, self.offset)?;
        if self.offset >= HEADER {
            write!(f, "its header is right, its data is not")
        } else {
            write!(
                f,
                "its header names LBA {} seed {}",
                self.found_lba, self.found_seed
            )
        }
    }
}

/// splitmix64: the stream of a block, from its LBA and the seed.
fn next(s: &mut u64) -> u64 {
    *s = s.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *s;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

impl Pattern {
    /// The pattern of blocks of `block` bytes (at least 16) for `seed`.
    pub(crate) fn new(seed: u64, block: u32) -> Pattern {
        Pattern {
            seed,
            block: (block as usize).max(HEADER),
        }
    }

    /// One block's expected bytes into `out` (`block` bytes).
    fn block_into(&self, lba: u64, out: &mut [u8]) {
        out[..8].copy_from_slice(&lba.to_le_bytes());
        out[8..HEADER].copy_from_slice(&self.seed.to_le_bytes());
        let mut s = self.seed ^ lba.wrapping_mul(0xD6E8_FEB8_6659_FD93);
        for w in out[HEADER..].chunks_mut(8) {
            let v = next(&mut s).to_le_bytes();
            w.copy_from_slice(&v[..w.len()]);
        }
    }

    /// The data of a write of `blocks` blocks at `lba`.
    pub(crate) fn data(&self, lba: u64, blocks: u64) -> Vec<u8> {
        let mut v = vec![0u8; blocks as usize * self.block];
        for (i, b) in v.chunks_mut(self.block).enumerate() {
            self.block_into(lba + i as u64, b);
        }
        v
    }

    /// Checks the data of a read at `lba`, block by block: the blocks
    /// checked, and each one that differs pushed to `bad`.
    pub(crate) fn check(&self, lba: u64, data: &[u8], bad: &mut Vec<Mismatch>) -> u64 {
        let mut want = vec![0u8; self.block];
        let mut n = 0;
        for (i, got) in data.chunks(self.block).enumerate() {
            let at = lba + i as u64;
            self.block_into(at, &mut want);
            n += 1;
            if let Some(offset) = got.iter().zip(&want).position(|(a, b)| a != b) {
                let word = |r: core::ops::Range<usize>| {
                    got.get(r)
                        .and_then(|s| s.try_into().ok())
                        .map_or(0, u64::from_le_bytes)
                };
                bad.push(Mismatch {
                    lba: at,
                    offset,
                    found_lba: word(0..8),
                    found_seed: word(8..HEADER),
                });
            } else if got.len() < want.len() {
                bad.push(Mismatch {
                    lba: at,
                    offset: got.len(),
                    found_lba: at,
                    found_seed: self.seed,
                });
            }
        }
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_is_written_checks_clean() {
        let p = Pattern::new(7, 512);
        let d = p.data(40, 8);
        assert_eq!(d.len(), 4096);
        assert_eq!(&d[..16], &[40, 0, 0, 0, 0, 0, 0, 0, 7, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(&d[512..520], &41u64.to_le_bytes());
        let mut bad = Vec::new();
        assert_eq!(p.check(40, &d, &mut bad), 8);
        assert!(bad.is_empty(), "{bad:?}");
    }

    #[test]
    fn blocks_differ_by_lba_and_by_seed() {
        let p = Pattern::new(7, 512);
        assert_ne!(p.data(1, 1)[16..], p.data(2, 1)[16..]);
        assert_ne!(p.data(1, 1)[16..], Pattern::new(8, 512).data(1, 1)[16..]);
    }

    #[test]
    fn a_corrupt_byte_is_found_with_its_lba() {
        let p = Pattern::new(1, 4096);
        let mut d = p.data(10, 2);
        d[4096 + 100] ^= 0xff;
        let mut bad = Vec::new();
        assert_eq!(p.check(10, &d, &mut bad), 2);
        assert_eq!(
            bad,
            [Mismatch {
                lba: 11,
                offset: 100,
                found_lba: 11,
                found_seed: 1
            }]
        );
        assert_eq!(
            bad[0].to_string(),
            "LBA 11: byte 100 differs; its header is right, its data is not"
        );
    }

    #[test]
    fn misplaced_and_stale_blocks_say_what_they_hold() {
        let p = Pattern::new(3, 512);
        let mut bad = Vec::new();
        // LBA 6's data read at LBA 5; then seed 2's data at LBA 5.
        p.check(5, &p.data(6, 1), &mut bad);
        p.check(5, &Pattern::new(2, 512).data(5, 1), &mut bad);
        p.check(5, &[0u8; 512], &mut bad);
        assert_eq!(bad.len(), 3);
        assert_eq!(
            bad[0].to_string(),
            "LBA 5: byte 0 differs; its header names LBA 6 seed 3"
        );
        assert_eq!(
            (bad[1].offset, bad[1].found_lba, bad[1].found_seed),
            (8, 5, 2)
        );
        assert_eq!(
            bad[2].to_string(),
            "LBA 5: byte 0 differs; its header names LBA 0 seed 0"
        );
    }
}
