//! Waking and putting to sleep a context's progress thread: its handle,
//! and the backend's descriptor it sleeps on. What decides when to wake
//! it is the scheduling rules' (`schedule.rs`); the flags they share with
//! this module are [`Signals`].

use std::sync::atomic::Ordering;
use std::sync::OnceLock;
use std::thread::Thread;

use crate::schedule::Signals;

/// The progress thread's handle and where it sleeps.
#[derive(Default)]
pub(crate) struct Waker {
    pub(crate) thread: OnceLock<Thread>,
    /// Where the idle progress thread sleeps when the backend has a
    /// descriptor: it wakes on an arriving datagram.
    #[cfg(target_os = "linux")]
    pub(crate) sleeper: Option<roce_io::Sleeper>,
}

impl Waker {
    /// Wakes the progress thread (cheap when it is awake: a later park
    /// returns at once; a system call only when it sleeps on the backend's
    /// descriptor).
    pub(crate) fn unpark(&self, sig: &Signals) {
        if let Some(t) = self.thread.get() {
            t.unpark();
        }
        // Paired with `sleep`: either the thread sees `kicked` or this
        // sees `in_sleep` (both sequentially consistent).
        sig.kicked.store(true, Ordering::SeqCst);
        #[cfg(target_os = "linux")]
        if sig.in_sleep.load(Ordering::SeqCst) {
            if let Some(s) = &self.sleeper {
                s.wake();
            }
        }
    }

    /// The backend gave a descriptor to sleep on.
    pub(crate) fn has_sleeper(&self) -> bool {
        #[cfg(target_os = "linux")]
        return self.sleeper.is_some();
        #[cfg(not(target_os = "linux"))]
        false
    }

    /// Sleeps the progress thread for at most `d`: on the backend's
    /// descriptor (an arriving datagram or [`unpark`](Self::unpark) ends
    /// it) when `on_io` and the backend has one, else parked.
    pub(crate) fn sleep(&self, sig: &Signals, d: std::time::Duration, on_io: bool) {
        #[cfg(target_os = "linux")]
        if let (true, Some(s)) = (on_io, &self.sleeper) {
            sig.in_sleep.store(true, Ordering::SeqCst);
            if !sig.kicked.swap(false, Ordering::SeqCst) {
                // An error (none expected from ppoll) only ends the nap.
                let _ = s.sleep(d);
            }
            sig.in_sleep.store(false, Ordering::SeqCst);
            return;
        }
        let _ = on_io;
        std::thread::park_timeout(d);
    }
}
