//! Asynchronous events (`ibv_get_async_event`): the engine's events
//! (`roce_verbs::AsyncEvent`) handed to the context owning the object
//! they name, as the C pointer the program holds, and counted on the
//! context's `async_fd` (an eventfd, `crate::eventfd`).

use std::os::raw::{c_int, c_void};
use std::sync::Weak;

use roce_verbs::AsyncEvent;

use super::{Context, Objects};
use crate::abi::consts::*;
use crate::abi::*;
use crate::engine::{Engine, Resolved};
use crate::ffi::{arg, arg_mut, minus_one, void, Raw};

fn event_of(c: &Context, e: AsyncEvent) -> Option<(u32, *mut c_void)> {
    let objs = c.objects.lock().unwrap_or_else(|p| p.into_inner());
    let qp = |q: roce_verbs::Qpn| objs.qps.get(&q.value()).map(|r| r.0);
    Some(match e {
        AsyncEvent::QpFatal(q) => (IBV_EVENT_QP_FATAL, qp(q)?),
        AsyncEvent::SqDrained(q) => (IBV_EVENT_SQ_DRAINED, qp(q)?),
        AsyncEvent::QpLastWqeReached(q) => (IBV_EVENT_QP_LAST_WQE_REACHED, qp(q)?),
        AsyncEvent::CqError(id) => (IBV_EVENT_CQ_ERR, objs.cqs.get(&Objects::cq_key(id))?.0),
        AsyncEvent::SrqLimitReached(id) => (
            IBV_EVENT_SRQ_LIMIT_REACHED,
            objs.srqs.get(&Objects::srq_key(id))?.0,
        ),
        AsyncEvent::DeviceFatal => (IBV_EVENT_DEVICE_FATAL, std::ptr::null_mut()),
    })
}

/// Hands an event to the context owning the object it names (every
/// context for a device error). An event of an object already destroyed
/// is dropped, as the kernel drops it with the object.
pub(crate) fn route(engine: &Weak<Engine>, ev: AsyncEvent) {
    let Some(e) = engine.upgrade() else { return };
    for Raw(p) in e.contexts().iter() {
        // SAFETY: a context on the list is alive (it leaves the list
        // under this lock before it is freed).
        let Ok(c) = (unsafe { Context::from_ptr(p.cast()) }) else {
            continue;
        };
        if let Some((ty, element)) = event_of(c, ev) {
            c.queue_event(Resolved(ty, element));
            if !matches!(ev, AsyncEvent::DeviceFatal) {
                return;
            }
        }
    }
}

export! {
    /// `ibv_get_async_event`: waits (unless `async_fd` is non-blocking)
    /// for the next event of an object still alive; `EBADF` when the
    /// program closed `async_fd`.
    fn ibv_get_async_event(ctx: *mut ibv_context, out: *mut ibv_async_event) -> c_int {
        minus_one(|| {
            // SAFETY: the program's pointers.
            let (c, out) = unsafe { (Context::from_ptr(ctx)?, arg_mut(out)?) };
            // EBADF once the program closed (or reused) its async_fd.
            c.async_efd.check()?;
            loop {
                // read(), as the kernel's: EINTR for a signal whose
                // handler has no SA_RESTART (see ibv_get_cq_event).
                c.async_efd.take()?;
                let next = c.events.lock().unwrap_or_else(|p| p.into_inner()).pop_front();
                if let Some(Resolved(ty, element)) = next {
                    out.element = element;
                    out.event_type = ty;
                    return Ok(0);
                }
            }
        })
    }
}

export! {
    /// `ibv_ack_async_event`: nothing to release (destroying an object
    /// does not wait for its events' acknowledgements).
    fn ibv_ack_async_event(event: *mut ibv_async_event) {
        // SAFETY: the program's pointer or NULL.
        void(|| unsafe { arg(event) }.map(|_| ()))
    }
}
