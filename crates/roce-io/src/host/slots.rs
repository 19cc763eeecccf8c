//! Slot records: one per attached process (docs/host.md, "The file").
//!
//! A record is [`SLOT_WORDS`] words: a state word (used, being written,
//! and a generation bumped by each write), the PID, its start time, and
//! an opaque name of at most [`NAME_MAX`] bytes (what the forwarder needs
//! to reach the process, e.g. the abstract socket name of its ring
//! endpoint). Written under the update lock, read without it as a
//! seqlock.

use std::fmt;
use std::sync::atomic::{fence, AtomicU64, Ordering};

use super::layout::{SLOTS, SLOTS_AT, SLOT_WORDS};

/// The longest slot name, in bytes.
pub const NAME_MAX: usize = 96;

const USED: u64 = 1 << 63;
const BUSY: u64 = 1 << 61;
const GEN: u64 = 0xffff_ffff;
const NAME_AT: usize = 4;
const _: () = assert!(NAME_MAX.is_multiple_of(8) && NAME_AT + NAME_MAX / 8 <= SLOT_WORDS);

/// A slot's name: at most [`NAME_MAX`] bytes, stored inline.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct SlotName {
    bytes: [u8; NAME_MAX],
    len: u8,
}

impl SlotName {
    /// The name's bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..usize::from(self.len).min(NAME_MAX)]
    }

    /// `None` when longer than [`NAME_MAX`].
    pub fn new(name: &[u8]) -> Option<SlotName> {
        let mut bytes = [0u8; NAME_MAX];
        bytes.get_mut(..name.len())?.copy_from_slice(name);
        Some(SlotName {
            bytes,
            len: name.len() as u8,
        })
    }
}

impl fmt::Debug for SlotName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", String::from_utf8_lossy(self.as_bytes()))
    }
}

/// An attached process, as its slot says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SlotInfo {
    /// The slot's index, below 256.
    pub slot: u16,
    /// Bumped every time the slot is taken or let go: with `slot`, it
    /// names one attachment (a cache keyed by both is never confused by
    /// a slot that was reused).
    pub generation: u32,
    /// The process.
    pub pid: u32,
    /// Its start time (`/proc/PID/stat` field 22), 0 when unknown: a
    /// reused PID has another.
    pub start_time: u64,
    /// What it attached with.
    pub name: SlotName,
}

fn record(words: &[AtomicU64], slot: u16) -> Option<&[AtomicU64]> {
    let i = usize::from(slot);
    if i >= SLOTS {
        return None;
    }
    words.get(SLOTS_AT + i * SLOT_WORDS..SLOTS_AT + (i + 1) * SLOT_WORDS)
}

/// The state word of `slot` (0 for an index out of range).
pub(super) fn state(words: &[AtomicU64], slot: u16) -> u64 {
    record(words, slot).map_or(0, |r| r[0].load(Ordering::Acquire))
}

/// Whether a state word says "used" (or "being written", by a writer
/// that may have died).
pub(super) fn taken(state: u64) -> bool {
    state & (USED | BUSY) != 0
}

/// Reads `slot` without a lock: `None` when free, out of range, being
/// written, or holding an impossible name length.
pub(super) fn read(words: &[AtomicU64], slot: u16) -> Option<SlotInfo> {
    let r = record(words, slot)?;
    for _ in 0..4 {
        let v1 = r[0].load(Ordering::Acquire);
        if v1 & (USED | BUSY) != USED {
            return None;
        }
        let pid = r[1].load(Ordering::Relaxed) as u32;
        let start_time = r[2].load(Ordering::Relaxed);
        let len = r[3].load(Ordering::Relaxed);
        let mut name = [0u64; NAME_MAX / 8];
        for (n, w) in name.iter_mut().zip(&r[NAME_AT..]) {
            *n = w.load(Ordering::Relaxed);
        }
        fence(Ordering::Acquire);
        if r[0].load(Ordering::Relaxed) != v1 {
            continue;
        }
        if len > NAME_MAX as u64 {
            return None;
        }
        let mut bytes = [0u8; NAME_MAX];
        for (chunk, n) in bytes.chunks_exact_mut(8).zip(name) {
            chunk.copy_from_slice(&n.to_le_bytes());
        }
        return Some(SlotInfo {
            slot,
            generation: (v1 & GEN) as u32,
            pid,
            start_time,
            name: SlotName {
                bytes,
                len: len as u8,
            },
        });
    }
    None
}

/// Fills `slot` for this process. Call with the update lock held; the
/// generation the slot now has.
pub(super) fn write(
    words: &[AtomicU64],
    slot: u16,
    pid: u32,
    start_time: u64,
    name: &SlotName,
) -> u32 {
    let Some(r) = record(words, slot) else {
        return 0;
    };
    let v = r[0].load(Ordering::Acquire);
    r[0].store(BUSY | (v.wrapping_add(1) & GEN), Ordering::Relaxed);
    fence(Ordering::Release);
    r[1].store(u64::from(pid), Ordering::Relaxed);
    r[2].store(start_time, Ordering::Relaxed);
    r[3].store(u64::from(name.len), Ordering::Relaxed);
    for (chunk, w) in name.bytes.chunks(8).zip(&r[NAME_AT..]) {
        let mut b = [0u8; 8];
        b[..chunk.len()].copy_from_slice(chunk);
        w.store(u64::from_le_bytes(b), Ordering::Relaxed);
    }
    let g = v.wrapping_add(2) & GEN;
    r[0].store(USED | g, Ordering::Release);
    g as u32
}

/// Lets `slot` go. Call with the update lock held, after its entries.
pub(super) fn free(words: &[AtomicU64], slot: u16) {
    if let Some(r) = record(words, slot) {
        let v = r[0].load(Ordering::Acquire);
        r[0].store(v.wrapping_add(1) & GEN, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::layout::FILE_WORDS;

    #[test]
    fn a_slot_reads_back_what_was_written_and_nothing_once_free() {
        let w: Vec<AtomicU64> = (0..SLOTS_AT + SLOTS * SLOT_WORDS)
            .map(|_| AtomicU64::new(0))
            .collect();
        assert!(FILE_WORDS >= w.len());
        assert_eq!(read(&w, 7), None);
        let name = SlotName::new(b"roce-v2-ring/127.0.0.1/4791/1234").unwrap();
        let g = write(&w, 7, 1234, 99, &name);
        let s = read(&w, 7).unwrap();
        assert_eq!(
            (s.slot, s.pid, s.start_time, s.generation),
            (7, 1234, 99, g)
        );
        assert_eq!(s.name.as_bytes(), b"roce-v2-ring/127.0.0.1/4791/1234");
        assert!(taken(state(&w, 7)));
        free(&w, 7);
        assert_eq!(read(&w, 7), None);
        assert!(!taken(state(&w, 7)));
        let g2 = write(&w, 7, 1, 2, &SlotName::new(&[b'x'; NAME_MAX]).unwrap());
        assert_ne!(g, g2, "a reused slot is another generation");
        assert_eq!(read(&w, 7).unwrap().name.as_bytes().len(), NAME_MAX);
        assert!(SlotName::new(&[0; NAME_MAX + 1]).is_none());
        // Out of range, an impossible length: nothing, no panic.
        assert_eq!(read(&w, 256), None);
        w[SLOTS_AT + 7 * SLOT_WORDS + 3].store(1000, Ordering::Relaxed);
        assert_eq!(read(&w, 7), None);
    }
}
