//! An open-addressing hash map in shared memory, from a 64-bit key (a
//! QPN, a service ID, a communication ID) to the slot that owns it
//! (docs/host.md, "Locking").
//!
//! An entry is two words: the key, and a state word (state bits, the
//! owner slot, and a sequence number bumped by every write of the entry).
//! Writers are serialised by the table's update lock; readers take no
//! lock and read an entry as a seqlock: state, key, state again, and use
//! the key only when both states are equal and say "used".
//!
//! Linear probing within a window of [`PROBE`] entries bounds every
//! operation, whatever another process wrote into the map. A removed
//! entry becomes a tombstone, and tombstones followed by an empty entry
//! become empty themselves (no used entry can lie beyond an empty one in
//! its probe sequence), so churn does not lengthen lookups for good.

use std::sync::atomic::{fence, AtomicU64, Ordering};

/// The longest probe sequence: an insert finding no free entry within it
/// fails (`Full`); a lookup gives up after it.
pub(super) const PROBE: usize = 256;

const USED: u64 = 1 << 63;
const TOMB: u64 = 1 << 62;
/// An insert in progress (its writer may have died: writers treat it as
/// free, readers skip it).
const BUSY: u64 = 1 << 61;
const STATE: u64 = USED | TOMB | BUSY;
const SEQ: u64 = 0xffff_ffff;

fn slot_of(v: u64) -> u16 {
    (v >> 32) as u16
}

fn next_seq(v: u64, n: u64) -> u64 {
    (v.wrapping_add(n)) & SEQ
}

/// Where a key is, or may go (the result of [`Map::probe`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Probe {
    /// The key is in entry `pos`, owned by `slot` (not checked: another
    /// process may have written any number there).
    Found { pos: usize, slot: u16 },
    /// The key is absent; entry `pos` may take it.
    Free { pos: usize },
    /// The key is absent and its window has no free entry.
    Full,
}

/// A map over `2 * entries` words of the file.
#[derive(Clone, Copy)]
pub(super) struct Map<'a> {
    words: &'a [AtomicU64],
    mask: usize,
}

impl<'a> Map<'a> {
    /// The map whose entries fill `words` (a power of two of entries,
    /// two words each; the caller takes the range from `layout`).
    pub(super) fn new(words: &'a [AtomicU64]) -> Map<'a> {
        // The largest power of two of entries that fits: a mask that never
        // reaches past the words (and every access is bounds-checked).
        let entries = words.len() / 2;
        let p = match entries {
            0 => 1,
            n if n.is_power_of_two() => n,
            n => n.next_power_of_two() / 2,
        };
        Map { words, mask: p - 1 }
    }

    fn home(&self, key: u64) -> usize {
        // Fibonacci hashing: sequential or clustered keys spread out.
        (key.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 32) as usize & self.mask
    }

    fn key_word(&self, pos: usize) -> Option<&AtomicU64> {
        self.words.get(2 * pos)
    }

    fn state_word(&self, pos: usize) -> Option<&AtomicU64> {
        self.words.get(2 * pos + 1)
    }

    fn state(&self, pos: usize) -> u64 {
        self.state_word(pos)
            .map_or(0, |w| w.load(Ordering::Acquire))
    }

    /// The owner slot of `key`, without a lock. `None` when absent (or
    /// being written at this very moment).
    pub(super) fn get(&self, key: u64) -> Option<u16> {
        let home = self.home(key);
        for i in 0..PROBE {
            let pos = (home + i) & self.mask;
            let (Some(kw), Some(sw)) = (self.key_word(pos), self.state_word(pos)) else {
                return None;
            };
            let v1 = sw.load(Ordering::Acquire);
            if v1 & STATE == 0 {
                return None;
            }
            if v1 & STATE != USED {
                continue;
            }
            let k = kw.load(Ordering::Relaxed);
            fence(Ordering::Acquire);
            let v2 = sw.load(Ordering::Relaxed);
            if v1 == v2 && k == key {
                return Some(slot_of(v1));
            }
        }
        None
    }

    /// Where `key` is or may go. Call with the update lock held.
    pub(super) fn probe(&self, key: u64) -> Probe {
        let home = self.home(key);
        let mut free = None;
        for i in 0..PROBE {
            let pos = (home + i) & self.mask;
            let v = self.state(pos);
            match v & STATE {
                0 => {
                    return Probe::Free {
                        pos: free.unwrap_or(pos),
                    }
                }
                USED => {
                    if self.key_word(pos).map(|w| w.load(Ordering::Acquire)) == Some(key) {
                        return Probe::Found {
                            pos,
                            slot: slot_of(v),
                        };
                    }
                }
                _ => {
                    free.get_or_insert(pos);
                }
            }
        }
        free.map_or(Probe::Full, |pos| Probe::Free { pos })
    }

    /// Writes `key` owned by `slot` into the free entry `pos` (from
    /// [`Map::probe`]). Call with the update lock held.
    pub(super) fn insert_at(&self, pos: usize, key: u64, slot: u16) {
        let (Some(kw), Some(sw)) = (self.key_word(pos), self.state_word(pos)) else {
            return;
        };
        let v = sw.load(Ordering::Acquire);
        sw.store(BUSY | next_seq(v, 1), Ordering::Relaxed);
        fence(Ordering::Release);
        kw.store(key, Ordering::Relaxed);
        sw.store(
            USED | u64::from(slot) << 32 | next_seq(v, 2),
            Ordering::Release,
        );
    }

    /// Removes entry `pos`. Call with the update lock held.
    pub(super) fn remove_at(&self, pos: usize) {
        let Some(sw) = self.state_word(pos) else {
            return;
        };
        let v = sw.load(Ordering::Acquire);
        sw.store(TOMB | next_seq(v, 1), Ordering::Release);
        // Tombstones just before an empty entry end no probe sequence
        // that holds a key: make them empty, back to the first non-tomb.
        if self.state((pos + 1) & self.mask) & STATE != 0 {
            return;
        }
        let mut at = pos;
        for _ in 0..PROBE {
            let Some(w) = self.state_word(at) else { return };
            let v = w.load(Ordering::Acquire);
            if v & STATE != TOMB {
                return;
            }
            w.store(next_seq(v, 1), Ordering::Release);
            at = at.wrapping_sub(1) & self.mask;
        }
    }

    /// Removes every entry `pred` says of its owner slot (a dead slot's,
    /// or one naming no slot at all); how many. Scans the whole map: call
    /// with the update lock held, on the rare path.
    pub(super) fn remove_owned(&self, pred: impl Fn(u16) -> bool) -> usize {
        let mut n = 0;
        for pos in 0..=self.mask {
            let v = self.state(pos);
            if v & STATE == USED && pred(slot_of(v)) {
                self.remove_at(pos);
                n += 1;
            }
        }
        n
    }

    /// Used entries and the slots they name (diagnostics and tests).
    pub(super) fn count(&self, slot: u16) -> usize {
        (0..=self.mask)
            .filter(|&p| {
                let v = self.state(p);
                v & STATE == USED && slot_of(v) == slot
            })
            .count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(entries: usize) -> Vec<AtomicU64> {
        (0..2 * entries).map(|_| AtomicU64::new(0)).collect()
    }

    fn claim(m: &Map<'_>, key: u64, slot: u16) -> Result<(), Option<u16>> {
        match m.probe(key) {
            Probe::Found { slot, .. } => Err(Some(slot)),
            Probe::Free { pos } => {
                m.insert_at(pos, key, slot);
                Ok(())
            }
            Probe::Full => Err(None),
        }
    }

    fn release(m: &Map<'_>, key: u64) -> bool {
        match m.probe(key) {
            Probe::Found { pos, .. } => {
                m.remove_at(pos);
                true
            }
            _ => false,
        }
    }

    #[test]
    fn a_key_is_claimed_once_and_found_until_released() {
        let w = words(64);
        let m = Map::new(&w);
        assert_eq!(claim(&m, 0x12_3456, 3), Ok(()));
        assert_eq!(claim(&m, 0x12_3456, 4), Err(Some(3)));
        assert_eq!(m.get(0x12_3456), Some(3));
        assert_eq!(m.get(0x12_3457), None);
        assert!(release(&m, 0x12_3456));
        assert!(!release(&m, 0x12_3456));
        assert_eq!(m.get(0x12_3456), None);
        assert_eq!(claim(&m, 0x12_3456, 4), Ok(()));
        assert_eq!(m.get(0x12_3456), Some(4));
    }

    #[test]
    fn half_a_full_size_map_of_random_keys_fits_and_churn_leaves_it_clean() {
        let w = words(1 << 17);
        let m = Map::new(&w);
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut keys = Vec::new();
        while keys.len() < 1 << 16 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let k = x & 0xff_ffff;
            if claim(&m, k, (k % 256) as u16).is_ok() {
                keys.push(k);
            }
        }
        for &k in &keys {
            assert_eq!(m.get(k), Some((k % 256) as u16));
        }
        // Churn: release and claim again, many times over.
        for round in 0..4u64 {
            for &k in &keys {
                assert!(release(&m, k));
                assert_eq!(claim(&m, k, (round % 256) as u16), Ok(()));
            }
        }
        for &k in &keys {
            assert!(release(&m, k));
        }
        // Everything is empty again: no tombstone is left behind.
        assert!((0..1 << 17).all(|p| m.state(p) & STATE == 0));
    }

    #[test]
    fn a_full_window_is_full_and_a_dead_slots_entries_go() {
        let w = words(512);
        let m = Map::new(&w);
        // Every key below hashes somewhere in 512 entries; fill them all.
        let mut n = 0u64;
        let mut k = 0u64;
        while n < 512 {
            if claim(&m, k, (k % 2) as u16).is_ok() {
                n += 1;
            }
            k += 1;
        }
        assert_eq!(claim(&m, k, 0), Err(None), "full");
        assert_eq!(m.count(1) + m.count(0), 512);
        let gone = m.remove_owned(|s| s == 1);
        assert_eq!(m.count(1), 0);
        assert_eq!(m.count(0), 512 - gone);
        assert_eq!(claim(&m, k, 0), Ok(()));
    }

    #[test]
    fn garbage_in_the_words_never_panics_and_stays_bounded() {
        let w = words(256);
        let m = Map::new(&w);
        let mut x = 1u64;
        for round in 0..200 {
            for a in w.iter() {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                a.store(if round % 2 == 0 { x } else { x | USED }, Ordering::Relaxed);
            }
            for key in 0..64 {
                let _ = m.get(key);
                let _ = claim(&m, key, 1);
                let _ = release(&m, key ^ x);
            }
            let _ = m.remove_owned(|s| s >= 256);
        }
    }

    #[test]
    fn a_map_of_odd_words_stays_inside_them() {
        // Not a layout the table uses, but no index may escape the slice.
        let w = words(3);
        let m = Map::new(&w[..5]);
        for key in 0..100 {
            let _ = claim(&m, key, 1);
            let _ = m.get(key);
        }
    }
}
