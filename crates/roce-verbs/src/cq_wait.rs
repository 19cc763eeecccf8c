//! A thread blocked for a completion event that takes the context's
//! arriving datagrams itself ([`CompletionChannel::wait_io`]): one
//! wake-up per event where the progress thread would add its own (it
//! wakes for the datagram, makes the completion, and wakes the waiting
//! thread). The scheduling rules of the waiter and of the progress
//! thread beside it are `schedule::Waiter` and
//! `schedule::ThreadRules::watch_beside`; docs/performance.md
//! ("Completion events") has the chain of wake-ups before and after.

use std::os::fd::BorrowedFd;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::cq::{CompletionChannel, CompletionQueue, CqInner};
use crate::schedule::{self, RUNNING};
use crate::state::{lock, Shared};

/// How [`CompletionChannel::wait_io`] ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChannelWait {
    /// An event is queued on the channel ([`CompletionChannel::take_event`]
    /// takes it), or the descriptor waited on with the backend's turned
    /// readable.
    Event,
    /// A signal handler ran.
    Interrupted,
    /// This context cannot wait so (its backend has no descriptor, or
    /// inline progress is off), or the backend's descriptor woke the
    /// thread over and over with nothing to take: the progress thread
    /// has the I/O back, and the caller waits by other means.
    HandedOver,
}

/// Counts a thread in [`CompletionChannel::wait_io`] while it lives.
struct Waiting<'a>(&'a Shared);

impl<'a> Waiting<'a> {
    fn enter(shared: &'a Shared) -> Waiting<'a> {
        shared.sig.waits.fetch_add(1, Ordering::Relaxed);
        shared.sig.waiters.fetch_add(1, Ordering::SeqCst);
        Waiting(shared)
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        let s = self.0;
        s.sig.waiters.fetch_sub(1, Ordering::SeqCst);
        // After a long wait the progress thread naps long: the I/O is
        // its again now (`schedule::waiter_left_wakes`).
        let wake_at = s.sig.wake_at.load(Ordering::Acquire);
        if schedule::waiter_left_wakes(&s.tuning, s.recent(), wake_at) {
            s.unpark();
        }
    }
}

impl CompletionChannel {
    fn shared(&self) -> &Arc<Shared> {
        self.ctx.shared()
    }

    /// Takes the next event queued on this channel, without waiting (and
    /// without handing progress to the progress thread, as
    /// [`get_event`](Self::get_event) does): the armed CQ that raised it.
    pub fn take_event(&self) -> Option<CompletionQueue> {
        let mut q = lock(&self.queue.queue);
        while let Some(w) = q.pop_front() {
            let inner = w.upgrade().and_then(|a| a.downcast::<CqInner>().ok());
            if let Some(inner) = inner {
                inner.unacked.fetch_add(1, Ordering::Relaxed);
                return Some(CompletionQueue { inner });
            }
        }
        None
    }

    /// The calling thread is about to wait by means of its own (the
    /// notifier's descriptor): the progress thread takes the I/O.
    pub fn hand_over(&self) {
        let shared = self.shared();
        shared.sig.handed_over();
        shared.unpark();
    }

    /// Blocks until an event is queued on this channel or `event` (the
    /// descriptor its notifier counts on) is readable, taking the
    /// context's arriving datagrams and running its timers on this
    /// thread meanwhile: woken by a datagram, it steps the engine itself,
    /// and returns at once when the step raised the event. The progress
    /// thread keeps off the backend's descriptor while a thread waits so
    /// (it would wake for the same datagram) and steps only when work is
    /// handed to it (another thread's post). Takes nothing from `event`.
    pub fn wait_io(&self, event: BorrowedFd<'_>) -> ChannelWait {
        #[cfg(target_os = "linux")]
        return self.wait_linux(event);
        #[cfg(not(target_os = "linux"))]
        {
            let _ = event;
            self.hand_over();
            ChannelWait::HandedOver
        }
    }

    #[cfg(target_os = "linux")]
    fn wait_linux(&self, event: BorrowedFd<'_>) -> ChannelWait {
        use crate::progress::{step, Driver};
        use crate::schedule::{WaitNext, Waiter};
        use roce_io::Either;

        let shared = self.shared();
        let Some(sleeper) = shared
            .waker
            .sleeper
            .as_ref()
            .filter(|_| shared.cfg.inline_progress)
        else {
            self.hand_over();
            return ChannelWait::HandedOver;
        };
        let _waiting = Waiting::enter(shared);
        // Nobody polls while this thread waits.
        shared.sig.handed_over();
        if shared.sig.in_sleep.load(Ordering::SeqCst) {
            // The progress thread sleeps on the descriptor: it leaves it
            // to this thread at its next look.
            shared.unpark();
        }
        let mut rules = Waiter::default();
        loop {
            let (next, now) = {
                let mut io = lock(&shared.io);
                let out = step(shared, &mut io, Driver::Thread);
                if !lock(&self.queue.queue).is_empty() {
                    shared.sig.wait_ended(true);
                    return ChannelWait::Event;
                }
                let now = shared.now();
                // Before blocking, the backend makes sure its descriptor
                // will turn readable (the same-host path asks its peers
                // for a doorbell), as before the progress thread's sleep.
                let ready = !out.more && io.backend.prepare_wait(now);
                let next = rules.next(out.work, out.more, ready, out.deadline);
                (next, now)
            };
            match next {
                WaitNext::Step => continue,
                WaitNext::HandOver => {
                    self.hand_over();
                    return ChannelWait::HandedOver;
                }
                WaitNext::Sleep { until } => {
                    let timeout =
                        until.map(|u| std::time::Duration::from_nanos(u.saturating_sub(now)));
                    // Timers other threads' steps leave before this one's
                    // are the progress thread's (`timer_beside_waiter_wakes`).
                    let sig = &shared.sig;
                    sig.waiter_until
                        .store(until.unwrap_or(RUNNING), Ordering::Release);
                    let woke = sleeper.wait_with(event, timeout);
                    sig.waiter_until.store(RUNNING, Ordering::Release);
                    match woke {
                        Ok(Either::Other) => {
                            shared.sig.wait_ended(false);
                            return ChannelWait::Event;
                        }
                        Ok(Either::Interrupted) => return ChannelWait::Interrupted,
                        Ok(Either::Readable | Either::Timeout) => {}
                        Err(_) => {
                            self.hand_over();
                            return ChannelWait::HandedOver;
                        }
                    }
                }
            }
        }
    }
}

/// How the completion events of [`CompletionChannel::wait_io`] reached
/// their waiting threads.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WaitCounters {
    /// Waits ended by an event the waiting thread's own step raised (one
    /// wake-up: the datagram's).
    pub events_own_step: u64,
    /// Waits ended by an event another thread raised (the progress
    /// thread, or another application thread's step).
    pub events_woken: u64,
}

impl crate::Context {
    /// How completion events reached threads blocked in
    /// [`CompletionChannel::wait_io`].
    pub fn wait_counters(&self) -> WaitCounters {
        let sig = &self.shared().sig;
        WaitCounters {
            events_own_step: sig.events_own_step.load(Ordering::Relaxed),
            events_woken: sig.events_woken.load(Ordering::Relaxed),
        }
    }
}
