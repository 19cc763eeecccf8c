//! Shared receive queues.

use std::sync::Arc;

use roce_core::{RecvWr, SrqId};

use crate::error::{CreateError, OwnedPostError, PostError};
use crate::error_objects::SrqLimitError;
use crate::pd::ProtectionDomain;
use crate::recv::{post_recv, post_recv_owned};
use crate::state::{Graveyard, RecvOwner};

#[derive(Debug)]
struct SrqInner {
    id: SrqId,
    pd: ProtectionDomain,
}

impl Drop for SrqInner {
    /// `ibv_destroy_srq`: the last handle is gone (QPs using the SRQ hold
    /// it, so none is left); the receives still posted are discarded and
    /// their regions released.
    fn drop(&mut self) {
        let shared = self.pd.shared();
        let mut grave = Graveyard::new();
        let mut core = shared.core();
        let _ = core.dev.destroy_srq(self.id);
        core.forget_srq(self.id, &mut grave);
        drop(core);
        drop(grave);
    }
}

/// A shared receive queue (`ibv_srq`): receives that any QP created with it
/// consumes. A cheap handle; QPs using it hold it. It is destroyed when the
/// last handle (and so the last QP using it) is gone, and the receives
/// still posted are discarded without completions.
#[derive(Clone, Debug)]
pub struct SharedReceiveQueue {
    inner: Arc<SrqInner>,
}

impl ProtectionDomain {
    /// `ibv_create_srq`: a shared receive queue of `max_wr` entries.
    pub fn create_srq(&self, max_wr: usize) -> Result<SharedReceiveQueue, CreateError> {
        SharedReceiveQueue::create(self, max_wr)
    }
}

impl SharedReceiveQueue {
    pub(crate) fn create(
        pd: &ProtectionDomain,
        max_wr: usize,
    ) -> Result<SharedReceiveQueue, CreateError> {
        if max_wr == 0 || max_wr > 1 << 20 {
            return Err(CreateError::InvalidArgument(
                "max_wr must be in 1..=1048576",
            ));
        }
        let id = pd.shared().core().dev.create_srq(pd.id(), max_wr);
        Ok(SharedReceiveQueue {
            inner: Arc::new(SrqInner { id, pd: pd.clone() }),
        })
    }

    /// The engine's id of this SRQ.
    pub fn id(&self) -> SrqId {
        self.inner.id
    }

    /// The protection domain.
    pub fn pd(&self) -> &ProtectionDomain {
        &self.inner.pd
    }

    /// `ibv_post_srq_recv`.
    pub fn post_recv(&self, wr: RecvWr) -> Result<(), PostError> {
        post_recv(
            self.inner.pd.shared(),
            RecvOwner::Srq(self.inner.id),
            &self.inner.pd,
            wr,
        )
    }

    /// An owned-buffer receive (see
    /// [`QueuePair::post_recv_owned`](crate::QueuePair::post_recv_owned)).
    pub fn post_recv_owned(&self, wr_id: u64, buf: Vec<u8>) -> Result<(), OwnedPostError> {
        post_recv_owned(
            self.inner.pd.shared(),
            RecvOwner::Srq(self.inner.id),
            &self.inner.pd,
            wr_id,
            buf,
        )
    }

    /// `ibv_modify_srq` with `IBV_SRQ_LIMIT`: an
    /// [`AsyncEvent::SrqLimitReached`](roce_core::AsyncEvent::SrqLimitReached)
    /// fires once when fewer than `limit` receives remain; 0 disarms.
    pub fn set_limit(&self, limit: usize) -> Result<(), SrqLimitError> {
        let shared = self.inner.pd.shared();
        let mut core = shared.core();
        let srq = core
            .dev
            .srq(self.inner.id)
            .ok_or(SrqLimitError::NoSuchSrq)?;
        // As ibv_modify_srq: a limit above the SRQ's size is EINVAL.
        if limit > srq.max_wr() {
            return Err(SrqLimitError::AboveMaxWr {
                max_wr: srq.max_wr(),
            });
        }
        srq.set_limit(limit);
        Ok(())
    }

    /// Receives posted and not yet consumed.
    pub fn len(&self) -> usize {
        let shared = self.inner.pd.shared();
        let mut core = shared.core();
        core.dev.srq(self.inner.id).map_or(0, |s| s.len())
    }

    /// True when no receive is posted.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
