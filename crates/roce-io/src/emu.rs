//! Code choices that suit the CPU: under an emulated CPU (QEMU's TCG, as in
//! the rxe lab's VMs) the fastest code differs from a real CPU's. A
//! [`CpuTuning`] says which to use; it is an option of whatever is being
//! built (`UdpConfig::cpu`, roce-core's `DeviceConfig::icrc_code`,
//! roce-verbs' `ProgressConfig::copy_piece`), never a process-wide switch.
//! [`CpuTuning::detect`] probes the CPU for a program that wants the
//! automatic choice (the `roce` tool does).

use roce_wire::crc32::Code;

/// The piece of a [`copy_payload`] on an emulated CPU: below every
/// threshold at which glibc's `memcpy` switches to `rep movsb` (2048 bytes
/// and up, by CPU).
pub const COPY_PIECE: usize = 1024;

/// The code choices that suit a CPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct CpuTuning {
    /// The CRC-32 code for ICRCs: on an emulated CPU the table-driven one
    /// (the carry-less multiply is a slow and erratic emulator call there:
    /// one build of `roce perf write-bw` ran at 0.19 Gbit/s in the lab VM,
    /// the same source with the table at 0.27-0.39).
    pub icrc_code: Code,
    /// The largest piece a payload copy is made in ([`copy_payload`]),
    /// `None` for whole copies: on an emulated CPU [`COPY_PIECE`]. There
    /// glibc's `memcpy` moves a large block with `rep movsb`, which QEMU's
    /// TCG runs a byte at a time: 64 KiB took 141 µs in one call and 23 µs
    /// in 1 KiB pieces in the lab VM (1.9 and 2.1 µs natively).
    pub copy_piece: Option<usize>,
}

impl Default for CpuTuning {
    /// [`CpuTuning::NATIVE`].
    fn default() -> CpuTuning {
        CpuTuning::NATIVE
    }
}

impl CpuTuning {
    /// For a real CPU: crc32fast, whole copies.
    pub const NATIVE: CpuTuning = CpuTuning {
        icrc_code: Code::Fast,
        copy_piece: None,
    };

    /// For QEMU's TCG: the table-driven CRC, copies in [`COPY_PIECE`]s.
    pub const EMULATED: CpuTuning = CpuTuning {
        icrc_code: Code::Table,
        copy_piece: Some(COPY_PIECE),
    };

    /// [`EMULATED`](Self::EMULATED) when [`emulated`] says so, else
    /// [`NATIVE`](Self::NATIVE). Probes the CPU on every call (two CPUID
    /// instructions): call it where a device is configured, and keep the
    /// result.
    pub fn detect() -> CpuTuning {
        if emulated() {
            CpuTuning::EMULATED
        } else {
            CpuTuning::NATIVE
        }
    }
}

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

/// Copies `src` into `dst` (as `copy_from_slice`), in pieces of at most
/// `piece` bytes (`None`: in one; see [`CpuTuning::copy_piece`]).
///
/// # Panics
///
/// If the lengths differ.
pub fn copy_payload(dst: &mut [u8], src: &[u8], piece: Option<usize>) {
    assert_eq!(dst.len(), src.len(), "copy_payload: lengths differ");
    match piece {
        Some(p) if p > 0 && src.len() > p => {
            for (d, s) in dst.chunks_mut(p).zip(src.chunks(p)) {
                d.copy_from_slice(s);
            }
        }
        _ => dst.copy_from_slice(src),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn piecewise_copies_copy_every_byte() {
        let src: Vec<u8> = (0..5000u32).map(|i| (i * 7 + i / 251) as u8).collect();
        for piece in [None, Some(COPY_PIECE), Some(1), Some(0)] {
            for len in [
                0,
                1,
                COPY_PIECE - 1,
                COPY_PIECE,
                COPY_PIECE + 1,
                3 * COPY_PIECE,
                5000,
            ] {
                let mut dst = vec![0u8; len];
                copy_payload(&mut dst, &src[..len], piece);
                assert_eq!(dst, &src[..len], "{piece:?} {len}");
            }
        }
    }
}
