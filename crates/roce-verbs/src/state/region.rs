//! The registration a memory region's handle and the work requests that
//! reference it share (`mr.rs` has the handle).

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Weak;

use roce_core::{Access, MrKeys, PdId};

use super::{Home, Shared};

/// The registration a memory region and its outstanding work requests
/// share. Dropping the last reference deregisters the region (so it must
/// never be dropped under the core lock; see the [parent module](super)).
///
/// The PD, address, length and rights change only under the core lock
/// (a re-registration), and are read under it where they matter (the
/// SGE checks of a post): atomics only because the handle is shared.
#[derive(Debug)]
pub(crate) struct MrCore {
    pub(crate) keys: MrKeys,
    pub(crate) pd: AtomicU32,
    pub(crate) va: AtomicU64,
    pub(crate) len: AtomicU64,
    pub(crate) access: AtomicU32,
    pub(crate) shared: Weak<Shared>,
    /// Where the bytes of an owned region go on deregistration.
    pub(crate) home: Option<Home>,
    /// Deregistered explicitly (`into_inner` / `dereg`).
    pub(crate) released: AtomicBool,
}

impl MrCore {
    pub(crate) fn pd(&self) -> PdId {
        PdId(self.pd.load(Ordering::Relaxed))
    }

    pub(crate) fn va(&self) -> u64 {
        self.va.load(Ordering::Relaxed)
    }

    pub(crate) fn len(&self) -> usize {
        self.len.load(Ordering::Relaxed) as usize
    }

    pub(crate) fn access(&self) -> Access {
        Access(self.access.load(Ordering::Relaxed))
    }
}

impl Drop for MrCore {
    fn drop(&mut self) {
        if self.released.load(Ordering::Relaxed) {
            return;
        }
        // The context may be gone already, and the engine with it.
        if let Some(shared) = self.shared.upgrade() {
            let mut core = shared.core();
            core.mrs.remove(&self.keys.lkey.value());
            let mem = core.dev.dereg_mr(self.keys);
            drop(core);
            drop(mem);
        }
    }
}
