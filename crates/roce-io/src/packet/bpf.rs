//! The classic BPF program that keeps a packet socket to RoCE v2 and MAC
//! control: accept EtherType 0x8808 (PAUSE / PFC), and IPv4 or IPv6 UDP to
//! port 4791 (IPv4 not a fragment after the first, IPv6 without extension
//! headers), each with or without one 802.1Q tag left in the frame (the
//! kernel usually strips the tag into metadata before taps see the frame).

use socket2::SockFilter;

// Opcodes (linux/filter.h).
const LD_H_ABS: u16 = 0x28; // BPF_LD | BPF_H | BPF_ABS
const LD_H_IND: u16 = 0x48; // BPF_LD | BPF_H | BPF_IND
const LD_B_IND: u16 = 0x50; // BPF_LD | BPF_B | BPF_IND
const LDX_IMM: u16 = 0x01; // BPF_LDX | BPF_W | BPF_IMM
const JEQ_K: u16 = 0x15; // BPF_JMP | BPF_JEQ | BPF_K
const JSET_K: u16 = 0x45; // BPF_JMP | BPF_JSET | BPF_K
const AND_K: u16 = 0x54; // BPF_ALU | BPF_AND | BPF_K
const LSH_K: u16 = 0x64; // BPF_ALU | BPF_LSH | BPF_K
const ADD_X: u16 = 0x0c; // BPF_ALU | BPF_ADD | BPF_X
const TAX: u16 = 0x07; // BPF_MISC | BPF_TAX
const RET_K: u16 = 0x06; // BPF_RET | BPF_K

/// Accept length: the whole frame.
const ACCEPT: u32 = 0x0004_0000;

/// The filter, ready for `SO_ATTACH_FILTER`.
pub(crate) fn roce_filter() -> Vec<SockFilter> {
    FILTER
        .iter()
        .map(|&(c, t, f, k)| SockFilter::new(c, t, f, k))
        .collect()
}

/// The program as (code, jt, jf, k); a jump goes to the next instruction
/// plus jt / jf.
const FILTER: [(u16, u8, u8, u32); 25] = [
    (LD_H_ABS, 0, 0, 12),          // 0: A = EtherType
    (JEQ_K, 21, 0, 0x8808),        // 1: MAC control -> 23 accept
    (LDX_IMM, 0, 0, 0),            // 2: X = 0
    (JEQ_K, 0, 2, 0x8100),         // 3: tagged -> 4, else 6
    (LDX_IMM, 0, 0, 4),            // 4: X = 4
    (LD_H_IND, 0, 0, 12),          // 5: A = inner EtherType
    (JEQ_K, 1, 0, 0x0800),         // 6: IPv4 -> 8
    (JEQ_K, 11, 16, 0x86dd),       // 7: IPv6 -> 19, else 24 reject
    (LD_B_IND, 0, 0, 14 + 9),      // 8: A = protocol
    (JEQ_K, 0, 14, 17),            // 9: UDP -> 10, else 24
    (LD_H_IND, 0, 0, 14 + 6),      // 10: A = flags | offset
    (JSET_K, 12, 0, 0x1fff),       // 11: later fragment -> 24
    (LD_B_IND, 0, 0, 14),          // 12: A = version | IHL
    (AND_K, 0, 0, 0x0f),           // 13
    (LSH_K, 0, 0, 2),              // 14: A = header length
    (ADD_X, 0, 0, 0),              // 15: A += tag offset
    (TAX, 0, 0, 0),                // 16: X = A
    (LD_H_IND, 0, 0, 14 + 2),      // 17: A = UDP destination port
    (JEQ_K, 4, 5, 4791),           // 18: -> 23 accept, else 24
    (LD_B_IND, 0, 0, 14 + 6),      // 19: A = next header
    (JEQ_K, 0, 3, 17),             // 20: UDP -> 21, else 24
    (LD_H_IND, 0, 0, 14 + 40 + 2), // 21: A = UDP destination port
    (JEQ_K, 0, 1, 4791),           // 22: -> 23 accept, else 24
    (RET_K, 0, 0, ACCEPT),         // 23: accept
    (RET_K, 0, 0, 0),              // 24: reject
];

/// Runs the program over `frame` (a test interpreter for the opcodes used
/// here; out-of-bounds loads reject, as in the kernel).
#[cfg(test)]
pub(crate) fn run(frame: &[u8]) -> bool {
    let (mut a, mut x, mut pc) = (0u32, 0u32, 0usize);
    let ld = |at: usize, n: usize| -> Option<u32> {
        let b = frame.get(at..at + n)?;
        Some(b.iter().fold(0, |v, &c| (v << 8) | u32::from(c)))
    };
    loop {
        let (code, jt, jf, k) = FILTER[pc];
        pc += 1;
        match code {
            LD_H_ABS => match ld(k as usize, 2) {
                Some(v) => a = v,
                None => return false,
            },
            LD_H_IND | LD_B_IND => {
                let n = if code == LD_H_IND { 2 } else { 1 };
                match ld((x + k) as usize, n) {
                    Some(v) => a = v,
                    None => return false,
                }
            }
            LDX_IMM => x = k,
            JEQ_K => pc += usize::from(if a == k { jt } else { jf }),
            JSET_K => pc += usize::from(if a & k != 0 { jt } else { jf }),
            AND_K => a &= k,
            LSH_K => a <<= k,
            ADD_X => a = a.wrapping_add(x),
            TAX => x = a,
            RET_K => return k != 0,
            _ => unreachable!("opcode {code:#x}"),
        }
    }
}
