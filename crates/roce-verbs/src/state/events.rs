//! Where events go: the asynchronous event queue, the CM event queue,
//! the sinks and notifiers an application sets instead, and the
//! completion channels' queues that armed CQs raise their events on.

use std::any::Any;
use std::collections::VecDeque;
use std::sync::{Condvar, Mutex, OnceLock, Weak};

use roce_core::cm::CmEvent;
use roce_core::AsyncEvent;

use super::lock;

/// A callback run each time an event is queued where a notifier was set
/// (a completion channel, the async event queue): one call per event,
/// under the queue's lock, so a count it keeps (an eventfd's) always
/// equals the events queued and not yet taken. It must not block or
/// call back into the context.
pub type Notifier = Box<dyn Fn() + Send + Sync>;

/// Where asynchronous events go instead of the context's queue, once set
/// ([`Context::set_event_sink`](crate::Context::set_event_sink)): called
/// once per event, in order, from the thread that raised it (possibly
/// under the engine's lock). It must not block or call back into the
/// context.
pub type EventSink = Box<dyn Fn(AsyncEvent) + Send + Sync>;

/// Where a context's CM events go
/// ([`Context::set_cm_sink`](crate::Context::set_cm_sink)): called once
/// per event, in order, with the engine locked. It must not block on
/// anything a context call can hold, nor call into the context.
pub type CmSink = Box<dyn Fn(CmEvent) + Send + Sync>;

/// CM events queued for the application at most (the engine bounds its
/// own queue, listeners' backlogs and pending requests' lifetimes).
pub(crate) const MAX_CM_EVENTS: usize = 4096;

/// A CQ handle as a channel queues it: the handle's own type lives with
/// the handle (`cq.rs`), which downcasts it back.
pub(crate) type CqHandle = Weak<dyn Any + Send + Sync>;

/// A completion channel's queue of CQs that raised their event.
pub(crate) struct ChannelQueue {
    pub(crate) queue: Mutex<VecDeque<CqHandle>>,
    pub(crate) cv: Condvar,
    /// [`CompletionChannel::set_notifier`](crate::CompletionChannel::set_notifier).
    pub(crate) notifier: OnceLock<Notifier>,
}

impl ChannelQueue {
    pub(crate) fn new() -> ChannelQueue {
        ChannelQueue {
            queue: Mutex::new(VecDeque::new()),
            cv: Condvar::new(),
            notifier: OnceLock::new(),
        }
    }

    /// Queues a CQ's event and runs the notifier, under the queue's lock.
    pub(crate) fn raise(&self, cq: CqHandle) {
        let mut q = lock(&self.queue);
        q.push_back(cq);
        if let Some(n) = self.notifier.get() {
            n();
        }
    }
}

impl std::fmt::Debug for ChannelQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChannelQueue")
            .field("queued", &lock(&self.queue).len())
            .field("notifier", &self.notifier.get().is_some())
            .finish()
    }
}

/// The event queues of one context and what takes their events instead.
#[derive(Default)]
pub(crate) struct Events {
    pub(crate) queue: Mutex<VecDeque<AsyncEvent>>,
    pub(crate) cv: Condvar,
    /// Called once per event queued ([`Context::set_event_notifier`](crate::Context::set_event_notifier)).
    pub(crate) notifier: OnceLock<Notifier>,
    /// Takes the events instead of `queue` ([`EventSink`]).
    pub(crate) sink: OnceLock<EventSink>,
    /// Connection manager events, taken by the handle they concern.
    pub(crate) cm: Mutex<VecDeque<CmEvent>>,
    pub(crate) cm_cv: Condvar,
    /// Where CM events go instead of `cm`, once set
    /// ([`Context::set_cm_sink`](crate::Context::set_cm_sink)).
    pub(crate) cm_sink: OnceLock<CmSink>,
}

impl Events {
    /// Queues asynchronous events and wakes their waiters.
    pub(crate) fn queue_events(&self, events: impl IntoIterator<Item = AsyncEvent>) {
        if let Some(sink) = self.sink.get() {
            events.into_iter().for_each(sink);
            return;
        }
        let mut q = lock(&self.queue);
        for e in events {
            q.push_back(e);
            if let Some(n) = self.notifier.get() {
                n();
            }
        }
        drop(q);
        self.cv.notify_all();
    }
}
