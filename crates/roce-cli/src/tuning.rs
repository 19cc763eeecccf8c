//! The code choices for this machine's CPU ([`roce_io::CpuTuning`]),
//! detected for every device the tool opens and passed to roce-verbs'
//! [`OpenOptions::cpu`](roce_verbs::OpenOptions::cpu) (the libraries keep
//! no process-wide switch): under QEMU's emulated CPU the table-driven
//! ICRC and payload copies in pieces, as the lab's VMs need; elsewhere the
//! defaults. `roce devinfo` shows the choice.

use roce_io::CpuTuning;

/// What this CPU wants (detected once per call: a `cpuid` instruction).
pub(crate) fn cpu() -> CpuTuning {
    CpuTuning::detect()
}
