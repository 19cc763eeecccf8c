//! Completion queues (IBTA Vol 1 §11.2.8). A full CQ is an error, never a
//! silent loss: the completion that did not fit puts the CQ in error, and
//! every later poll reports it.

use std::collections::VecDeque;

use crate::wc::Wc;

/// A completion queue handle.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CqId(pub u32);

/// Polling an overflowed CQ.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CqOverflow;

/// What became of a completion given to a CQ.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Pushed {
    /// Queued.
    Queued,
    /// It did not fit: the CQ is now in error.
    Overflowed,
    /// The CQ was already in error.
    Lost,
}

/// A completion queue.
#[derive(Debug)]
pub struct Cq {
    entries: VecDeque<Wc>,
    capacity: usize,
    overflowed: bool,
    armed: Option<bool>,
    notified: bool,
}

impl Cq {
    /// A CQ holding `capacity` completions. The ring starts small and
    /// grows to the most completions ever pending at once (never past
    /// `capacity`): a large CQ that is drained often stays a few cache
    /// lines instead of cycling through `capacity` entries' worth of
    /// memory (64 K entries are 3 MiB).
    pub fn new(capacity: usize) -> Cq {
        Cq {
            entries: VecDeque::with_capacity(capacity.min(64)),
            capacity,
            overflowed: false,
            armed: None,
            notified: false,
        }
    }

    /// Adds a completion; when full the CQ goes into error and the
    /// completion is lost.
    pub(crate) fn push(&mut self, wc: Wc, solicited: bool) -> Pushed {
        if self.overflowed {
            return Pushed::Lost;
        }
        if self.entries.len() >= self.capacity {
            self.overflowed = true;
            return Pushed::Overflowed;
        }
        self.entries.push_back(wc);
        if let Some(solicited_only) = self.armed {
            if !solicited_only || solicited || wc.status != crate::wc::WcStatus::Success {
                self.armed = None;
                self.notified = true;
            }
        }
        Pushed::Queued
    }

    /// Moves up to `out.len()` completions into `out`.
    pub fn poll(&mut self, out: &mut [Wc]) -> Result<usize, CqOverflow> {
        if self.overflowed {
            return Err(CqOverflow);
        }
        let n = out.len().min(self.entries.len());
        for slot in out.iter_mut().take(n) {
            // `n` is bounded by the queue length.
            if let Some(wc) = self.entries.pop_front() {
                *slot = wc;
            }
        }
        Ok(n)
    }

    /// Completions waiting.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when none waits.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Capacity.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Changes the capacity (`ibv_resize_cq`), keeping the completions
    /// waiting. Refused, changing nothing, for 0 or for fewer entries
    /// than are waiting (as rxe refuses a size below its queue's count).
    /// The ring's memory follows a shrink.
    pub fn resize(&mut self, capacity: usize) -> Result<(), crate::VerbsError> {
        if capacity == 0 {
            return Err(crate::VerbsError::InvalidArgument("cqe of 0"));
        }
        if capacity < self.entries.len() {
            return Err(crate::VerbsError::InvalidArgument(
                "cqe below the completions waiting",
            ));
        }
        self.capacity = capacity;
        self.entries
            .shrink_to(capacity.min(64).max(self.entries.len()));
        Ok(())
    }

    /// True once a completion was lost for lack of room.
    pub fn is_overflowed(&self) -> bool {
        self.overflowed
    }

    /// Arms the completion event (`ibv_req_notify_cq`): the next completion
    /// (or the next solicited or error one) raises it. A solicited-only
    /// request does not narrow an arm for the next completion already in
    /// place (as rxe keeps `IB_CQ_NEXT_COMP`).
    pub fn req_notify(&mut self, solicited_only: bool) {
        let narrowed = self.armed.is_some_and(|s| !s);
        self.armed = Some(solicited_only && !narrowed);
    }

    /// Takes a raised completion event.
    pub fn take_notification(&mut self) -> bool {
        std::mem::take(&mut self.notified)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wc::{Wc, WcOpcode, WcStatus};
    use roce_wire::Qpn;

    fn wc() -> Wc {
        Wc::new(1, WcStatus::Success, WcOpcode::Send, Qpn::new(1))
    }

    fn fill(cq: &mut Cq, n: usize) {
        for _ in 0..n {
            assert_eq!(cq.push(wc(), false), Pushed::Queued);
        }
    }

    #[test]
    fn resize_grows_shrinks_and_keeps_what_waits() {
        let mut cq = Cq::new(2);
        fill(&mut cq, 2);
        // Full: growing makes room, and both completions are still there.
        cq.resize(4).unwrap();
        fill(&mut cq, 2);
        assert_eq!((cq.len(), cq.capacity()), (4, 4));
        // Below what waits, or 0: refused, nothing changed.
        assert!(cq.resize(3).is_err());
        assert!(cq.resize(0).is_err());
        assert_eq!((cq.len(), cq.capacity()), (4, 4));
        let mut out = [wc(); 3];
        assert_eq!(cq.poll(&mut out), Ok(3));
        // Exactly what waits is allowed; the next push overflows.
        cq.resize(1).unwrap();
        assert_eq!(cq.push(wc(), false), Pushed::Overflowed);
    }
}
