//! Shared receive queues (IBTA Vol 1 §10.2.9) with the limit event.

use std::collections::VecDeque;

use crate::mr::PdId;
use crate::wr::RecvWr;

/// A shared receive queue handle.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SrqId(pub u32);

/// Most scatter/gather entries of an SRQ receive (`max_srq_sge`).
pub const MAX_SRQ_SGE: usize = 16;

/// A shared receive queue.
#[derive(Debug)]
pub struct Srq {
    pub(crate) pd: PdId,
    queue: VecDeque<RecvWr>,
    max_wr: usize,
    limit: usize,
    limit_fired: bool,
}

impl Srq {
    /// An SRQ of `max_wr` entries in `pd`.
    pub fn new(pd: PdId, max_wr: usize) -> Srq {
        Srq {
            pd,
            queue: VecDeque::new(),
            max_wr,
            limit: 0,
            limit_fired: false,
        }
    }

    /// Posts a receive; false when full.
    pub(crate) fn post(&mut self, wr: RecvWr) -> bool {
        if self.queue.len() >= self.max_wr {
            return false;
        }
        self.queue.push_back(wr);
        true
    }

    /// Puts a receive back at the head (a UC message that broke).
    pub(crate) fn push_front(&mut self, wr: RecvWr) {
        self.queue.push_front(wr);
    }

    /// Takes the next receive.
    pub(crate) fn take(&mut self) -> Option<RecvWr> {
        self.queue.pop_front()
    }

    /// Arms the limit event: it fires once when fewer than `limit`
    /// receives remain (`ibv_modify_srq` with `IBV_SRQ_LIMIT`); 0 disarms.
    pub fn set_limit(&mut self, limit: usize) {
        self.limit = limit;
        self.limit_fired = false;
    }

    /// True (once) when the armed limit was crossed; disarms it.
    pub(crate) fn check_limit(&mut self) -> bool {
        if self.limit > 0 && !self.limit_fired && self.queue.len() < self.limit {
            self.limit_fired = true;
            self.limit = 0;
            return true;
        }
        false
    }

    /// Entries it holds at most.
    pub fn max_wr(&self) -> usize {
        self.max_wr
    }

    /// Receives posted and not yet consumed.
    pub fn len(&self) -> usize {
        self.queue.len()
    }

    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }

    /// The protection domain.
    pub fn pd(&self) -> PdId {
        self.pd
    }
}
