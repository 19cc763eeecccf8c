//! At process exit, what the kernel does for a process's rdma_cm ids
//! when it closes their file: every connection is given up, so that the
//! peers hear at once (a DREQ for an established connection, a REJ for
//! one being set up) instead of waiting out their timeouts. This runs on
//! `exit(3)` and on a return from `main`; a killed process (SIGKILL,
//! `_exit`) runs nothing, and its peers find out through their QPs'
//! retries or their own timeouts. A child made by `fork()` that exits
//! does nothing for its parent's connections (the kernel would not
//! either: the parent still holds them).

use std::panic::{catch_unwind, AssertUnwindSafe};

use crate::context::{live, Context};

extern "C" fn at_exit() {
    let _ = catch_unwind(AssertUnwindSafe(|| {
        for p in live() {
            // SAFETY: the live contexts of this library.
            let Ok(ctx) = (unsafe { Context::from_ptr(p) }) else {
                continue;
            };
            if ctx.pid != std::process::id() {
                continue;
            }
            let Some(table) = ctx.cm.get() else { continue };
            // Never wait at exit: a table held by a thread the exit froze
            // mid-call is skipped.
            let Ok(t) = table.try_lock() else { continue };
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
            if !conns.is_empty() {
                ctx.verbs.flush();
            }
        }
    }));
}

/// Run by the dynamic loader when the process exits (the ELF
/// `.fini_array` of this library).
#[used]
#[link_section = ".fini_array"]
static AT_EXIT: extern "C" fn() = at_exit;
