//! The engines of this process: one per device and address, shared by
//! every context opened there (`docs/dropin.md`, "Devices and
//! addresses"). As on a NIC, two `ibv_open_device` calls of one device
//! give two contexts with the same GID table, whose QPs reach each other
//! through GID 0; objects stay the context's own (the checks are the
//! library's, `same_context`), and an asynchronous event goes to the
//! context that owns the object it names.

use std::collections::VecDeque;
use std::net::IpAddr;
use std::os::raw::c_void;
use std::sync::{Arc, Mutex, Weak};

use roce_verbs::AsyncEvent;

use crate::abi::ibv_context;
use crate::device::Device;
use crate::ffi::{Raw, Res};

/// An engine and the contexts opened on it.
pub(crate) struct Engine {
    pub(crate) verbs: roce_verbs::Context,
    device: &'static Device,
    pub(crate) local: IpAddr,
    /// Opened where `ibv_open_device` opens when no address is asked for
    /// (`ROCE_ADDR` or librdmacm's bind): later such opens share it, even
    /// when it moved along 127/8.
    by_default: bool,
    /// The contexts on it, for events (a context leaves before it is
    /// freed, under this lock).
    contexts: Mutex<Vec<Raw>>,
}

/// The open engines (process-wide, as a device's contexts are).
static ENGINES: Mutex<Vec<Arc<Engine>>> = Mutex::new(Vec::new());

fn engines() -> std::sync::MutexGuard<'static, Vec<Arc<Engine>>> {
    ENGINES.lock().unwrap_or_else(|p| p.into_inner())
}

/// An asynchronous event resolved for the program: its type and element.
pub(crate) struct Resolved(pub(crate) u32, pub(crate) *mut c_void);
// SAFETY: the element is a pointer the program holds; it is only handed
// back to the program.
unsafe impl Send for Resolved {}

/// The events waiting for one context (`ibv_get_async_event`).
pub(crate) type EventQueue = Mutex<VecDeque<Resolved>>;

impl Engine {
    /// The engine of `dev` on `asked`, or with no address asked, on the
    /// device's `default` address or where an earlier default open went
    /// (along 127/8): shared if this process has it, else opened by
    /// `open`. The engine's asynchronous events go to `route`, which
    /// hands each to the context that owns its object.
    pub(crate) fn get(
        dev: &'static Device,
        asked: Option<IpAddr>,
        default: Option<IpAddr>,
        open: impl FnOnce() -> Res<(roce_verbs::Context, IpAddr)>,
        route: fn(&Weak<Engine>, AsyncEvent),
    ) -> Res<Arc<Engine>> {
        let mut all = engines();
        let same = |e: &&Arc<Engine>| {
            std::ptr::eq(e.device, dev)
                && match asked {
                    Some(a) => e.local == a,
                    None => e.by_default || Some(e.local) == default,
                }
        };
        if let Some(e) = all.iter().find(same) {
            return Ok(e.clone());
        }
        let (verbs, local) = open()?;
        let e = Arc::new(Engine {
            verbs,
            device: dev,
            local,
            by_default: asked.is_none(),
            contexts: Mutex::new(Vec::new()),
        });
        let weak = Arc::downgrade(&e);
        e.verbs.set_event_sink(Box::new(move |ev| route(&weak, ev)));
        all.push(e.clone());
        Ok(e)
    }

    /// The contexts on it.
    pub(crate) fn contexts(&self) -> std::sync::MutexGuard<'_, Vec<Raw>> {
        self.contexts.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A context opened on it.
    pub(crate) fn join(&self, ctx: *mut ibv_context) {
        self.contexts().push(Raw(ctx.cast()));
    }

    /// A context closing: it gets no more events; the last one takes the
    /// engine out of the process's table (it stops when its last object
    /// goes) and says (`ROCE_LOG`) what its backend counted, such as the
    /// datagrams it forwarded to other processes of a shared address, and
    /// how completion events reached the threads that waited for them.
    pub(crate) fn leave(self: &Arc<Self>, ctx: *mut ibv_context) {
        let mut c = self.contexts();
        c.retain(|Raw(p)| *p != ctx.cast());
        if c.is_empty() {
            drop(c);
            // With how completion events reached threads blocked in
            // ibv_get_cq_event (roce_verbs::WaitCounters).
            let w = self.verbs.wait_counters();
            let mut counted = self.verbs.backend_counters();
            counted.push(("cq_events_own_step", w.events_own_step));
            counted.push(("cq_events_woken", w.events_woken));
            crate::config::log!(
                "{} on {} closed: {}",
                self.device.info.name(),
                self.local,
                counted
                    .iter()
                    .filter(|(_, v)| *v != 0)
                    .map(|(k, v)| format!("{k} {v}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            );
            crate::debug::engine_closed(counted);
            engines().retain(|e| !Arc::ptr_eq(e, self));
        }
    }
}

/// The open engines.
pub(crate) fn all() -> Vec<Arc<Engine>> {
    engines().clone()
}
