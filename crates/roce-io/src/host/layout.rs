//! Where everything lives in the table's file, in 64-bit words, and the
//! header that says so (docs/host.md, "The file").
//!
//! Every word of the file is read and written as an `AtomicU64`: the
//! file is shared with other processes, and what they wrote is checked
//! before use, never trusted.

use std::sync::atomic::{AtomicU64, Ordering};

/// `RoCEhst1`: the first word of a table file.
pub(super) const MAGIC: u64 = u64::from_le_bytes(*b"RoCEhst1");
/// The layout's version; another is a foreign file.
pub(super) const VERSION: u64 = 1;

/// Slots: one per attached process.
pub(crate) const SLOTS: usize = 256;
/// Words per slot record.
pub(super) const SLOT_WORDS: usize = 16;
/// Entries of the QPN map (twice the QPNs it is sized for).
pub(super) const QPN_ENTRIES: usize = 1 << 17;
/// Entries of the listener (service ID) map.
pub(super) const LISTEN_ENTRIES: usize = 1 << 13;
/// Entries of the communication ID map.
pub(super) const COMM_ENTRIES: usize = 1 << 17;
/// Port-space records.
pub(crate) const PORT_RECORDS: usize = 4096;
/// Words per port-space record.
pub(super) const PORT_WORDS: usize = 8;

/// Header words.
pub(super) const HEADER_WORDS: usize = 16;
/// Header word indices.
pub(super) mod h {
    pub(in super::super) const MAGIC: usize = 0;
    pub(in super::super) const VERSION: usize = 1;
    pub(in super::super) const LEN: usize = 2;
    pub(in super::super) const SLOTS: usize = 3;
    pub(in super::super) const SLOT_WORDS: usize = 4;
    pub(in super::super) const QPN: usize = 5;
    pub(in super::super) const LISTEN: usize = 6;
    pub(in super::super) const COMM: usize = 7;
    pub(in super::super) const PORTS: usize = 8;
    pub(in super::super) const PORT_WORDS: usize = 9;
    /// Bumped after every update: a cache of lookups is stale when it
    /// changes.
    pub(in super::super) const GENERATION: usize = 10;
    pub(in super::super) const UID: usize = 11;
}

/// First word of the slot records.
pub(super) const SLOTS_AT: usize = HEADER_WORDS;
/// First word of the QPN map.
pub(super) const QPN_AT: usize = SLOTS_AT + SLOTS * SLOT_WORDS;
/// First word of the listener map.
pub(super) const LISTEN_AT: usize = QPN_AT + 2 * QPN_ENTRIES;
/// First word of the communication ID map.
pub(super) const COMM_AT: usize = LISTEN_AT + 2 * LISTEN_ENTRIES;
/// First word of the port-space records.
pub(super) const PORTS_AT: usize = COMM_AT + 2 * COMM_ENTRIES;
/// Words in use.
const USED_WORDS: usize = PORTS_AT + PORT_RECORDS * PORT_WORDS;
/// The file's length: the words, rounded up to whole 4 KiB pages.
pub(super) const FILE_LEN: usize = (USED_WORDS * 8).div_ceil(4096) * 4096;
/// Words in the file.
#[cfg(test)]
pub(super) const FILE_WORDS: usize = FILE_LEN / 8;

// The regions do not overlap and fit the file; masks need powers of two.
const _: () = {
    assert!(SLOTS_AT >= HEADER_WORDS);
    assert!(QPN_AT - SLOTS_AT == SLOTS * SLOT_WORDS);
    assert!(USED_WORDS * 8 <= FILE_LEN);
    assert!(FILE_LEN.is_multiple_of(4096));
    assert!(QPN_ENTRIES.is_power_of_two());
    assert!(LISTEN_ENTRIES.is_power_of_two());
    assert!(COMM_ENTRIES.is_power_of_two());
    assert!(SLOTS <= 1 << 16);
};

/// What the header must hold, word by word (the generation excepted).
fn expected(uid: u32) -> [(usize, u64); 11] {
    [
        (h::MAGIC, MAGIC),
        (h::VERSION, VERSION),
        (h::LEN, FILE_LEN as u64),
        (h::SLOTS, SLOTS as u64),
        (h::SLOT_WORDS, SLOT_WORDS as u64),
        (h::QPN, QPN_ENTRIES as u64),
        (h::LISTEN, LISTEN_ENTRIES as u64),
        (h::COMM, COMM_ENTRIES as u64),
        (h::PORTS, PORT_RECORDS as u64),
        (h::PORT_WORDS, PORT_WORDS as u64),
        (h::UID, u64::from(uid)),
    ]
}

/// What [`check_header`] found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Header {
    /// A table of this layout.
    Valid,
    /// All zero: a file just made (or whose maker died before writing
    /// the header); the caller, holding the update lock, initialises it.
    Fresh,
    /// Anything else: the word that is wrong.
    Invalid(&'static str),
}

/// Checks the header in `words` (the whole file).
pub(super) fn check_header(words: &[AtomicU64], uid: u32) -> Header {
    let Some(head) = words.get(..HEADER_WORDS) else {
        return Header::Invalid("file too short");
    };
    if head.iter().all(|w| w.load(Ordering::Acquire) == 0) {
        return Header::Fresh;
    }
    const NAMES: [&str; 12] = [
        "magic",
        "version",
        "length",
        "slot count",
        "slot size",
        "QPN map size",
        "listener map size",
        "comm ID map size",
        "port records",
        "port record size",
        "generation",
        "owner uid",
    ];
    for (i, v) in expected(uid) {
        if head[i].load(Ordering::Acquire) != v {
            return Header::Invalid(NAMES[i]);
        }
    }
    Header::Valid
}

/// Writes a fresh header; the magic last, so that a maker that dies
/// half-way leaves a file that is [`Header::Invalid`] or [`Header::Fresh`],
/// never valid with missing words. The caller holds the update lock.
pub(super) fn init_header(words: &[AtomicU64], uid: u32) {
    for (i, v) in expected(uid).into_iter().rev() {
        if let Some(w) = words.get(i) {
            w.store(v, Ordering::Release);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn zeroed(n: usize) -> Vec<AtomicU64> {
        (0..n).map(|_| AtomicU64::new(0)).collect()
    }

    #[test]
    fn a_header_is_fresh_valid_or_names_its_wrong_word() {
        let w = zeroed(HEADER_WORDS);
        assert_eq!(check_header(&w, 1000), Header::Fresh);
        init_header(&w, 1000);
        assert_eq!(check_header(&w, 1000), Header::Valid);
        assert_eq!(check_header(&w, 1001), Header::Invalid("owner uid"));
        w[h::GENERATION].store(77, Ordering::Relaxed);
        assert_eq!(check_header(&w, 1000), Header::Valid);
        w[h::QPN].store(1 << 20, Ordering::Relaxed);
        assert_eq!(check_header(&w, 1000), Header::Invalid("QPN map size"));
        w[h::MAGIC].store(1, Ordering::Relaxed);
        assert_eq!(check_header(&w, 1000), Header::Invalid("magic"));
        assert_eq!(
            check_header(&zeroed(3), 1000),
            Header::Invalid("file too short")
        );
    }
}
