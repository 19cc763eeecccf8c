//! [`Stop`]: the token by which Ctrl-C cuts a command short.
//!
//! The commands that finish gracefully at Ctrl-C (the `roce rping`
//! client) get a `Stop` from the entry module (`main.rs`),
//! which alone registers it with the signal handler; the loops that
//! measure check the token they are handed, and no module keeps a
//! process-wide flag of its own.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// A request to stop, shared by clones: [`Stop::request`] on one is seen
/// by [`Stop::requested`] on all.
#[derive(Clone, Debug, Default)]
pub(crate) struct Stop(Arc<Inner>);

#[derive(Debug, Default)]
struct Inner {
    requested: AtomicBool,
}

impl Stop {
    /// A token nobody has asked to stop yet.
    pub(crate) fn new() -> Stop {
        Stop::default()
    }

    /// Asks every holder to stop (what Ctrl-C does).
    pub(crate) fn request(&self) {
        self.0.requested.store(true, Ordering::SeqCst);
    }

    /// Whether a stop was requested.
    pub(crate) fn requested(&self) -> bool {
        self.0.requested.load(Ordering::SeqCst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_is_seen_by_every_clone() {
        let stop = Stop::new();
        let other = stop.clone();
        assert!(!other.requested());
        other.request();
        assert!(stop.requested());
    }

    #[test]
    fn tokens_are_independent() {
        let a = Stop::new();
        let b = Stop::new();
        a.request();
        assert!(!b.requested());
    }
}
