//! Identifiers an off-path attacker cannot guess: QPNs, initial PSNs,
//! memory keys, CM IDs and transaction IDs all come from one ChaCha20
//! stream per device, seeded through [`DeviceConfig::seed`].
//!
//! RoCE has no authentication: a packet is the peer's if its addresses,
//! P_Key, QPN and PSN say so (IBTA Vol 1 §9.6, the BTH checks). What keeps
//! a blind attacker out is that the QPN (24 bits), the PSN window (24 bits)
//! and the R_Key (32 bits) cannot be predicted. The engine is sans-IO, so
//! it cannot read the operating system's randomness itself: the caller
//! passes a seed (roce-verbs fills it from `getrandom`; the simulator and
//! the seeded tests pass fixed seeds, which keeps them reproducible).
//!
//! [`DeviceConfig::seed`]: crate::DeviceConfig::seed

use std::collections::{BTreeSet, VecDeque};

use rand_chacha::ChaCha20Rng;
use rand_core::{RngCore, SeedableRng};
use roce_wire::Psn;

/// A device's source of unpredictable identifiers (a CSPRNG).
pub(crate) struct Ids {
    rng: ChaCha20Rng,
}

impl std::fmt::Debug for Ids {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The state is the secret: never printed.
        f.write_str("Ids(..)")
    }
}

impl Ids {
    pub(crate) fn new(seed: [u8; 32]) -> Ids {
        Ids {
            rng: ChaCha20Rng::from_seed(seed),
        }
    }

    pub(crate) fn u32(&mut self) -> u32 {
        self.rng.next_u32()
    }

    pub(crate) fn u64(&mut self) -> u64 {
        self.rng.next_u64()
    }

    /// A uniformly random 24-bit PSN (IBTA Vol 1 §9.7.1: the starting PSN
    /// is chosen by the requester; nothing requires it to be predictable).
    pub(crate) fn psn(&mut self) -> Psn {
        Psn::new(self.u32() & 0xff_ffff)
    }
}

/// A bounded set of recently retired values (QPNs, memory keys, CM IDs)
/// that must not be handed out again while an old holder may still use
/// them: the oldest entry leaves when a new one arrives at capacity.
#[derive(Debug)]
pub(crate) struct Quarantine<T: Ord + Copy> {
    order: VecDeque<T>,
    set: BTreeSet<T>,
    cap: usize,
}

impl<T: Ord + Copy> Quarantine<T> {
    pub(crate) fn new(cap: usize) -> Quarantine<T> {
        Quarantine {
            order: VecDeque::new(),
            set: BTreeSet::new(),
            cap: cap.max(1),
        }
    }

    pub(crate) fn retire(&mut self, v: T) {
        if !self.set.insert(v) {
            return;
        }
        self.order.push_back(v);
        while self.order.len() > self.cap {
            if let Some(old) = self.order.pop_front() {
                self.set.remove(&old);
            }
        }
    }

    pub(crate) fn contains(&self, v: &T) -> bool {
        self.set.contains(v)
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.order.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_stream_other_seed_other_stream() {
        let mut a = Ids::new([1; 32]);
        let mut b = Ids::new([1; 32]);
        let mut c = Ids::new([2; 32]);
        let xa: Vec<u32> = (0..8).map(|_| a.u32()).collect();
        let xb: Vec<u32> = (0..8).map(|_| b.u32()).collect();
        let xc: Vec<u32> = (0..8).map(|_| c.u32()).collect();
        assert_eq!(xa, xb);
        assert_ne!(xa, xc);
        assert!(a.psn().value() <= 0xff_ffff);
    }

    #[test]
    fn quarantine_is_bounded_and_forgets_the_oldest() {
        let mut q = Quarantine::new(3);
        for v in 0..5u32 {
            q.retire(v);
        }
        assert_eq!(q.len(), 3);
        assert!(!q.contains(&0) && !q.contains(&1));
        assert!(q.contains(&2) && q.contains(&4));
        q.retire(4);
        assert_eq!(q.len(), 3);
    }
}
