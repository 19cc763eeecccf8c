//! [`Stop`]: the token by which Ctrl-C cuts a command short.
//!
//! The commands that finish gracefully at Ctrl-C (`roce perf`, the
//! `roce rping` client) get a `Stop` from the entry module (`main.rs`),
//! which alone registers it with the signal handler; the loops that
//! measure check the token they are handed, and no module keeps a
//! process-wide flag of its own.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

/// Something to do at once when a stop is requested (on the signal
/// handler's thread).
type Hook = Box<dyn Fn() + Send>;

/// A request to stop, shared by clones: [`Stop::request`] on one is seen
/// by [`Stop::requested`] on all.
#[derive(Clone, Default)]
pub(crate) struct Stop(Arc<Inner>);

#[derive(Default)]
struct Inner {
    requested: AtomicBool,
    hooks: Mutex<Vec<Hook>>,
}

impl std::fmt::Debug for Stop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stop")
            .field("requested", &self.requested())
            .finish_non_exhaustive()
    }
}

impl Stop {
    /// A token nobody has asked to stop yet.
    pub(crate) fn new() -> Stop {
        Stop::default()
    }

    /// Asks every holder to stop (what Ctrl-C does), then runs the hooks
    /// ([`Stop::on_request`]).
    pub(crate) fn request(&self) {
        self.0.requested.store(true, Ordering::SeqCst);
        let hooks = self.0.hooks.lock().unwrap_or_else(PoisonError::into_inner);
        for h in hooks.iter() {
            h();
        }
    }

    /// Whether a stop was requested.
    pub(crate) fn requested(&self) -> bool {
        self.0.requested.load(Ordering::SeqCst)
    }

    /// Runs `hook` at each [`Stop::request`] from now on (`roce perf`
    /// tells its peers that it stops).
    pub(crate) fn on_request(&self, hook: impl Fn() + Send + 'static) {
        let mut hooks = self.0.hooks.lock().unwrap_or_else(PoisonError::into_inner);
        hooks.push(Box::new(hook));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    #[test]
    fn a_request_is_seen_by_every_clone_and_runs_the_hooks() {
        let stop = Stop::new();
        let other = stop.clone();
        let ran = Arc::new(AtomicUsize::new(0));
        let r = ran.clone();
        stop.on_request(move || {
            r.fetch_add(1, Ordering::SeqCst);
        });
        assert!(!other.requested());
        other.request();
        assert!(stop.requested());
        assert_eq!(ran.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn tokens_are_independent() {
        let a = Stop::new();
        let b = Stop::new();
        a.request();
        assert!(!b.requested());
    }
}
