//! At process exit, what the kernel does for a process's rdma_cm ids
//! when it closes their file: every connection is given up, so that the
//! peers hear at once (a DREQ for an established connection, a REJ for
//! one being set up) instead of waiting out their timeouts. This runs on
//! `exit(3)` and on a return from `main`; a killed process (SIGKILL,
//! `_exit`) runs nothing, and its peers find out through their QPs'
//! retries or their own timeouts. A child made by `fork()` that exits
//! does nothing for its parent's connections (the kernel would not
//! either: the parent still holds them).
//!
//! Before that, each context leaves the address it shares with other
//! processes (docs/host.md): a datagram the kernel handed to a process
//! that has stopped reading would be lost, a connection's last DREQ
//! among them.

use std::panic::{catch_unwind, AssertUnwindSafe};

use crate::verbs::{self, live};

extern "C" fn at_exit() {
    let _ = catch_unwind(AssertUnwindSafe(|| {
        for p in live() {
            // SAFETY: the live contexts of this library.
            let Ok(ctx) = (unsafe { verbs::context(p) }) else {
                continue;
            };
            if ctx.pid != std::process::id() {
                continue;
            }
            // First, no more of the other processes' datagrams come here,
            // and those that came are handed on (docs/host.md).
            ctx.verbs.leave_shared_address();
            let Some(table) = ctx.cm.get() else { continue };
            // Other threads still run during exit(3): the progress thread
            // may hold the table for a moment (taking a REP, whose RTU it
            // then sends), so wait a little for it, but never for long (a
            // thread blocked in the table would hold the exit).
            if let Some(t) = try_lock_for(table, std::time::Duration::from_millis(100)) {
                let conns = t.conn_ids();
                drop(t);
                crate::config::log!(
                    "librdmacm: exiting: {} connection(s) of {} given up",
                    conns.len(),
                    ctx.local
                );
                for c in &conns {
                    ctx.verbs.cm_release(*c);
                }
            }
            // Whatever the engine still has leaves, the table taken or
            // not: an RTU queued by the step that delivered ESTABLISHED,
            // the DREQs just made.
            ctx.verbs.flush();
        }
    }));
}

/// The lock, if it comes free within `limit` (tried every 1 ms).
fn try_lock_for<T>(
    m: &std::sync::Mutex<T>,
    limit: std::time::Duration,
) -> Option<std::sync::MutexGuard<'_, T>> {
    let end = std::time::Instant::now() + limit;
    loop {
        match m.try_lock() {
            Ok(g) => return Some(g),
            Err(std::sync::TryLockError::Poisoned(p)) => return Some(p.into_inner()),
            Err(std::sync::TryLockError::WouldBlock) if std::time::Instant::now() < end => {
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            Err(std::sync::TryLockError::WouldBlock) => return None,
        }
    }
}

/// Run by the dynamic loader when the process exits (the ELF
/// `.fini_array` of this library).
#[used]
#[link_section = ".fini_array"]
static AT_EXIT: extern "C" fn() = at_exit;
