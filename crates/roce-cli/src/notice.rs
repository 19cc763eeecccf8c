//! A line on stderr when a wait lasts: the CM retries a request for about
//! 17 s before "peer unreachable", and a tool silent that long looks hung.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Prints `msg` on stderr if it is still alive `after` its start; dropping
/// it (the wait ended) cancels the line.
pub(crate) struct SlowNotice {
    done: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl SlowNotice {
    pub(crate) fn start(after: Duration, msg: String) -> SlowNotice {
        let done = Arc::new(AtomicBool::new(false));
        let d = done.clone();
        let thread = std::thread::spawn(move || {
            let end = Instant::now() + after;
            while Instant::now() < end {
                std::thread::sleep(Duration::from_millis(50));
                if d.load(Ordering::SeqCst) {
                    return;
                }
            }
            eprintln!("{msg}");
        });
        SlowNotice {
            done,
            thread: Some(thread),
        }
    }
}

impl Drop for SlowNotice {
    fn drop(&mut self) {
        self.done.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
