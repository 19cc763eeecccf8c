//! The registry of open contexts: where librdmacm finds the context on
//! an address (a process has one engine per address, which holds the
//! RoCE UDP port there; programs like perftest open a context
//! themselves and then use librdmacm on the same address), and where
//! the debugging aids find every context (`crate::debug`).

use std::sync::{Arc, Mutex};

use super::Context;
use crate::abi::ibv_context;
use crate::engine::{self, Engine};
use crate::ffi::Raw;

/// Every open context, in the order they opened.
static LIVE: Mutex<Vec<Raw>> = Mutex::new(Vec::new());

fn registry() -> std::sync::MutexGuard<'static, Vec<Raw>> {
    LIVE.lock().unwrap_or_else(|p| p.into_inner())
}

/// The open contexts.
pub(crate) fn live() -> Vec<*mut ibv_context> {
    registry().iter().map(|Raw(p)| p.cast()).collect()
}

/// A context opened (`crate::open`).
pub(crate) fn add(p: *mut ibv_context) {
    registry().push(Raw(p.cast()));
}

/// A context closing (`crate::open`).
pub(crate) fn remove(p: *mut ibv_context) {
    registry().retain(|Raw(q)| *q != p.cast());
}

/// Calls `f` with every open engine and each of its contexts (for the
/// summary at exit and `roce top`, `crate::debug`).
pub(crate) fn each_live(mut f: impl FnMut(&Engine, &Context)) {
    let all: Vec<Arc<Engine>> = engine::all();
    for e in &all {
        for Raw(p) in e.contexts().iter() {
            // SAFETY: a context on the list is alive (it leaves the list
            // under this lock before it is freed).
            if let Ok(c) = unsafe { Context::from_ptr(p.cast()) } {
                f(e, c);
            }
        }
    }
}
