//! The clock: one process-wide monotonic time for every context's engine
//! and backend, and the last reading a busy loop may use instead of
//! reading it again.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::Instant;

use roce_core::Nanos;

/// One clock for every context of the process: contexts that share an
/// in-memory fabric compare each other's timestamps.
fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

/// Nanoseconds on the clock every context of the process gives its
/// engine and backend as `now` (the engine's time): for placing a fault
/// window or a device setting in that time (docs/debugging.md).
pub fn clock_nanos() -> Nanos {
    epoch().elapsed().as_nanos() as Nanos
}

/// One context's view of the clock: the last reading any of its threads
/// made.
#[derive(Debug, Default)]
pub(crate) struct Clock {
    last: AtomicU64,
}

impl Clock {
    /// Nanoseconds on the process-wide monotonic clock.
    pub(crate) fn now(&self) -> Nanos {
        let t = epoch().elapsed().as_nanos() as Nanos;
        // Not a read-modify-write (a locked instruction on every reading):
        // a thread preempted between its reading and the store can leave
        // an older reading over a newer one, so `recent` may step back a
        // little; its users (polling steps' timers, the progress thread's
        // heuristics) then only act a little late.
        if t > self.last.load(Ordering::Relaxed) {
            self.last.store(t, Ordering::Relaxed);
        }
        t
    }

    /// The last reading of the clock by any thread of this context: for a
    /// busy-polling loop, which should not read the clock on every empty
    /// round. Reading it is a system call where the kernel's clock source
    /// has no vDSO path (an emulated CPU whose TSC the kernel distrusts,
    /// as in the lab VM).
    pub(crate) fn recent(&self) -> Nanos {
        self.last.load(Ordering::Relaxed)
    }
}
