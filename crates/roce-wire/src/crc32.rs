//! The CRC-32 the ICRC is made of (IEEE 802.3 polynomial, reflected, as
//! zlib computes it; IBTA Annex A17 §A17.4.4), with a choice of code.
//!
//! [`Crc32`] runs crc32fast, which uses the CPU's carry-less multiply
//! (PCLMULQDQ) where it has one, much faster than a table on a real x86
//! CPU. Under an emulated CPU the carry-less multiply is a call into the
//! emulator whose cost changed from one build of the same code to the next
//! (figures in the repository's `docs/notes/2026-12-01-emulated-cpu.md`):
//! QEMU's TCG runs the helper with legacy SSE
//! instructions, which the host CPU makes slow when the emulated program's
//! AVX2 code (glibc's `memcpy`) has left the upper halves of its vector
//! registers dirty. A table-driven CRC (the `crc` crate's slicing-by-16 tables)
//! uses integer instructions only and costs the same in every build. A program
//! that knows it runs emulated switches to it with [`set_table_driven`]
//! (roce-io does, when CPUID names QEMU's TCG).

use core::sync::atomic::{AtomicBool, Ordering};

static TABLE_DRIVEN: AtomicBool = AtomicBool::new(false);

/// The table-driven code, for [`set_table_driven`].
static TABLE: crc::Crc<u32, crc::Table<16>> =
    crc::Crc::<u32, crc::Table<16>>::new(&crc::CRC_32_ISO_HDLC);

/// Makes every [`Crc32`] created afterwards (in the whole process) use the
/// table-driven code (`true`) or crc32fast (`false`, the default). Both give
/// the same values; only their speed differs.
pub fn set_table_driven(yes: bool) {
    TABLE_DRIVEN.store(yes, Ordering::Relaxed);
}

/// True when new [`Crc32`]s use the table-driven code.
pub fn table_driven() -> bool {
    TABLE_DRIVEN.load(Ordering::Relaxed)
}

/// A running CRC-32 over byte runs; `update` in pieces gives the same value
/// as one call over the concatenation.
#[derive(Clone)]
pub struct Crc32(Inner);

#[derive(Clone)]
enum Inner {
    Fast(crc32fast::Hasher),
    Table(crc::Digest<'static, u32, crc::Table<16>>),
}

impl Default for Crc32 {
    fn default() -> Self {
        Self::new()
    }
}

impl Crc32 {
    /// A CRC-32 over nothing yet (the standard initial value).
    pub fn new() -> Self {
        Self::with_initial(0)
    }

    /// Continues a CRC-32 whose value so far (as [`finalize`](Self::finalize)
    /// returned it) is `crc`. `with_initial(!0)` starts the shift register
    /// at zero: a CRC without the initial complement, linear in its input.
    pub fn with_initial(crc: u32) -> Self {
        Self::make(crc, table_driven())
    }

    fn make(crc: u32, table: bool) -> Self {
        if table {
            // crc reflects a custom initial value (as it does the
            // algorithm's init) for a reflected CRC: pre-reverse it so that
            // the register starts at !crc, crc32fast's start.
            Crc32(Inner::Table(
                TABLE.digest_with_initial((!crc).reverse_bits()),
            ))
        } else {
            Crc32(Inner::Fast(crc32fast::Hasher::new_with_initial(crc)))
        }
    }

    /// Adds `bytes`.
    pub fn update(&mut self, bytes: &[u8]) {
        match &mut self.0 {
            Inner::Fast(h) => h.update(bytes),
            Inner::Table(d) => d.update(bytes),
        }
    }

    /// The CRC-32 of everything added (after the final complement).
    pub fn finalize(self) -> u32 {
        match self.0 {
            Inner::Fast(h) => h.finalize(),
            Inner::Table(d) => d.finalize(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn crc_of(pieces: &[&[u8]], initial: u32, table: bool) -> u32 {
        let mut c = Crc32::make(initial, table);
        for p in pieces {
            c.update(p);
        }
        c.finalize()
    }

    #[test]
    fn both_codes_give_the_standard_check_value() {
        // CRC-32/ISO-HDLC's check value over "123456789".
        assert_eq!(crc_of(&[b"123456789"], 0, false), 0xcbf4_3926);
        assert_eq!(crc_of(&[b"123456789"], 0, true), 0xcbf4_3926);
        assert_eq!(crc_of(&[b""], 0, true), 0);
    }

    #[test]
    fn the_switch_chooses_the_code_of_new_hashers() {
        set_table_driven(true);
        let t = Crc32::new();
        set_table_driven(false);
        let f = Crc32::new();
        assert!(matches!(t.0, Inner::Table(_)));
        assert!(matches!(f.0, Inner::Fast(_)));
    }

    proptest! {
        #[test]
        fn the_table_matches_crc32fast(
            a in proptest::collection::vec(any::<u8>(), 0..600),
            b in proptest::collection::vec(any::<u8>(), 0..5000),
            initial in any::<u32>(),
        ) {
            let fast = crc_of(&[&a, &b], initial, false);
            prop_assert_eq!(crc_of(&[&a, &b], initial, true), fast);
            // Split anywhere, continued from the first part's value.
            let first = crc_of(&[&a], initial, true);
            prop_assert_eq!(crc_of(&[&b], first, true), fast);
            // The zero-register start the ICRC's IPv4-ID solver relies on.
            prop_assert_eq!(crc_of(&[&b], !0, true), crc_of(&[&b], !0, false));
        }
    }
}
