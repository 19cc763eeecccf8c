//! The rules of an application thread blocked for a completion event on
//! the backend's descriptor ([`CompletionChannel::wait_io`](crate::CompletionChannel::wait_io)),
//! and of the other threads beside it: what the waiter does after each
//! of its steps, which timers another thread's step hands to the
//! progress thread, and when the wait's end wakes it.

use roce_core::Nanos;

use super::{Tuning, RUNNING};

/// Whether an application thread's step that left the engine's next
/// timer at `deadline` wakes the progress thread beside a thread blocked
/// on the descriptor (which wakes by itself at `waiter_until` and knows
/// only the timers of its own steps): the timer comes before both the
/// waiter and the progress thread (`wake_at`) would look.
pub(crate) fn timer_beside_waiter_wakes(
    deadline: Option<Nanos>,
    waiter_until: Nanos,
    wake_at: Nanos,
) -> bool {
    deadline.is_some_and(|d| d < waiter_until && d < wake_at)
}

/// Whether a thread ending its wait on the backend's descriptor wakes
/// the progress thread: when the thread's nap ends later than a look at
/// a poller would (it grew beside an idle wait), the I/O is its again now.
pub(crate) fn waiter_left_wakes(t: &Tuning, now: Nanos, wake_at: Nanos) -> bool {
    wake_at != RUNNING && wake_at > now.saturating_add(t.poller_park)
}

/// Consecutive steps of a [`Waiter`] that find nothing before it hands
/// the I/O back to the progress thread: the descriptor woke it for
/// nothing it can take, and a wait must never turn into a spin.
pub(crate) const WAITER_FRUITLESS: u32 = 16;

/// What an application thread blocked for a completion event does after
/// each of its own steps ([`CompletionChannel::wait_io`](crate::CompletionChannel::wait_io)).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Waiter {
    fruitless: u32,
}

/// A [`Waiter`]'s next move.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum WaitNext {
    /// Step again now.
    Step,
    /// Block on the event and the backend's descriptor until `until`
    /// (the engine's next timer; `None`: none).
    Sleep { until: Option<Nanos> },
    /// Hand the I/O to the progress thread and wait on the event alone.
    HandOver,
}

impl Waiter {
    /// After a step that did `work` (received, sent, or ran a timer) and
    /// left packets to send (`more`), before blocking: `ready` when the
    /// backend has something already ([`Backend::prepare_wait`](roce_io::Backend::prepare_wait)),
    /// `deadline` the engine's next timer, which this thread runs: the
    /// progress thread does not step beside it.
    pub(crate) fn next(
        &mut self,
        work: bool,
        more: bool,
        ready: bool,
        deadline: Option<Nanos>,
    ) -> WaitNext {
        self.fruitless = if work { 0 } else { self.fruitless + 1 };
        if self.fruitless > WAITER_FRUITLESS {
            return WaitNext::HandOver;
        }
        if more || ready {
            return WaitNext::Step;
        }
        WaitNext::Sleep { until: deadline }
    }
}
