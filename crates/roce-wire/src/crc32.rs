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
//! uses integer instructions only and costs the same in every build. The
//! choice is a [`Code`], given where a CRC is made ([`Crc32::with_code`]):
//! there is no process-wide switch. A device is told which to use in its
//! configuration (roce-core's `DeviceConfig::icrc_code`; roce-io's
//! `CpuTuning::detect` says which suits the CPU).

/// The table-driven code ([`Code::Table`]). Immutable: the tables are
/// computed at compile time.
static TABLE: crc::Crc<u32, crc::Table<16>> =
    crc::Crc::<u32, crc::Table<16>>::new(&crc::CRC_32_ISO_HDLC);

/// Which code computes a CRC-32. Both give the same values; only their
/// speed differs, and by CPU.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Code {
    /// crc32fast: the carry-less multiply where the CPU has one (the
    /// default; the fastest on real CPUs).
    #[default]
    Fast,
    /// Slicing-by-16 tables, integer instructions only: the faster one
    /// under an emulated CPU (QEMU's TCG).
    Table,
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
    /// A CRC-32 over nothing yet (the standard initial value), by
    /// [`Code::Fast`].
    pub fn new() -> Self {
        Self::with_initial(0)
    }

    /// A CRC-32 over nothing yet, by `code`.
    pub fn with_code(code: Code) -> Self {
        Self::make(0, code == Code::Table)
    }

    /// Continues a CRC-32 whose value so far (as [`finalize`](Self::finalize)
    /// returned it) is `crc`. `with_initial(!0)` starts the shift register
    /// at zero: a CRC without the initial complement, linear in its input.
    pub fn with_initial(crc: u32) -> Self {
        Self::make(crc, false)
    }

    /// [`with_initial`](Self::with_initial) by `code`.
    pub fn continued(crc: u32, code: Code) -> Self {
        Self::make(crc, code == Code::Table)
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
    fn the_code_is_chosen_per_hasher() {
        assert!(matches!(Crc32::with_code(Code::Table).0, Inner::Table(_)));
        assert!(matches!(Crc32::with_code(Code::Fast).0, Inner::Fast(_)));
        assert!(matches!(Crc32::new().0, Inner::Fast(_)));
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
