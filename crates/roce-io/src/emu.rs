//! Telling an emulated CPU (QEMU's TCG) from a real one, where the fastest
//! code differs.

use std::sync::OnceLock;

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
/// slow and erratic emulator call there: 0.19 against 0.34-0.45 Gbit/s for
/// the same `roce perf write-bw` build in the lab VM). Every backend calls
/// it when it opens.
pub fn adapt_to_cpu() {
    static DONE: OnceLock<()> = OnceLock::new();
    DONE.get_or_init(|| {
        if emulated() {
            roce_wire::crc32::set_table_driven(true);
        }
    });
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
    }
}
