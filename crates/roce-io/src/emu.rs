//! Telling an emulated CPU (QEMU's TCG) from a real one, where the fastest
//! code differs.

use std::sync::OnceLock;

/// What [`adapt_to_cpu`] found: whether the CPU is [`emulated`] (unset
/// until it runs).
static ADAPTED: OnceLock<bool> = OnceLock::new();

/// The piece of a [`copy_payload`] on an emulated CPU: below every
/// threshold at which glibc's `memcpy` switches to `rep movsb` (2048 bytes
/// and up, by CPU).
pub const COPY_PIECE: usize = 1024;

/// True when the CPU is emulated by QEMU's TCG (CPUID's hypervisor leaf
/// says `TCGTCGTCGTCG`), as in the rxe lab's VMs; false on real CPUs and
/// under hardware virtualisation (KVM, Xen, Hyper-V...).
pub fn emulated() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::__cpuid;
        // SAFETY: CPUID exists on every x86-64 CPU and only reads
        // identification registers (a safe function from Rust 1.94 on).
        #[allow(unused_unsafe)]
        let (features, vendor) = unsafe { (__cpuid(1), __cpuid(0x4000_0000)) };
        // Leaf 0x4000_0000 means something only with the hypervisor bit.
        if features.ecx & (1 << 31) == 0 {
            return false;
        }
        let mut sig = [0u8; 12];
        sig[..4].copy_from_slice(&vendor.ebx.to_le_bytes());
        sig[4..8].copy_from_slice(&vendor.ecx.to_le_bytes());
        sig[8..].copy_from_slice(&vendor.edx.to_le_bytes());
        &sig == b"TCGTCGTCGTCG"
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// Chooses, once per process, the code that suits this CPU: on an
/// [`emulated`] one the ICRC's CRC-32 runs table-driven
/// ([`roce_wire::crc32::set_table_driven`]; the carry-less multiply is a
/// slow and erratic emulator call there), and payload copies go in pieces
/// ([`copy_piece`]). Every backend calls it when it opens. The measurements
/// behind the choice are in the repository's
/// `docs/notes/2026-12-01-emulated-cpu.md`.
pub fn adapt_to_cpu() {
    ADAPTED.get_or_init(|| {
        let emulated = emulated();
        if emulated {
            roce_wire::crc32::set_table_driven(true);
        }
        emulated
    });
}

/// The largest piece a copy of payload bytes should be made in: `usize::MAX`
/// on a real CPU, [`COPY_PIECE`] on an emulated one. There glibc's `memcpy`
/// moves a large block with `rep movsb`, which QEMU's TCG runs a byte at a
/// time, several times slower than the same copy in 1 KiB pieces.
pub fn copy_piece() -> usize {
    if ADAPTED.get() == Some(&true) {
        COPY_PIECE
    } else {
        usize::MAX
    }
}

/// Copies `src` into `dst` (as `copy_from_slice`), in pieces of
/// [`copy_piece`] bytes.
///
/// # Panics
///
/// If the lengths differ.
pub fn copy_payload(dst: &mut [u8], src: &[u8]) {
    assert_eq!(dst.len(), src.len(), "copy_payload: lengths differ");
    copy_in_pieces(dst, src, copy_piece());
}

fn copy_in_pieces(dst: &mut [u8], src: &[u8], piece: usize) {
    if src.len() <= piece {
        dst.copy_from_slice(src);
        return;
    }
    for (d, s) in dst.chunks_mut(piece).zip(src.chunks(piece)) {
        d.copy_from_slice(s);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn adapting_keeps_the_fast_crc_on_a_real_cpu() {
        adapt_to_cpu();
        // This machine's CPU decides; the check value holds either way.
        assert_eq!(roce_wire::crc32::table_driven(), emulated());
        let mut c = roce_wire::crc32::Crc32::new();
        c.update(b"123456789");
        assert_eq!(c.finalize(), 0xcbf4_3926);
        assert_eq!(copy_piece() == COPY_PIECE, emulated());
    }

    #[test]
    fn piecewise_copies_copy_every_byte() {
        let src: Vec<u8> = (0..5000u32).map(|i| (i * 7 + i / 251) as u8).collect();
        for len in [0, 1, COPY_PIECE - 1, COPY_PIECE, COPY_PIECE + 1, 5000] {
            let mut dst = vec![0u8; len];
            copy_payload(&mut dst, &src[..len]);
            assert_eq!(dst, &src[..len]);
        }
        // In pieces, as on an emulated CPU.
        for len in [COPY_PIECE + 1, 3 * COPY_PIECE, 5000] {
            let mut dst = vec![0u8; len];
            copy_in_pieces(&mut dst, &src[..len], COPY_PIECE);
            assert_eq!(dst, &src[..len]);
        }
    }
}
