//! Queue pairs: creation, modify/query; posting is in `post`.

use std::sync::Arc;

use roce_core::{Owner, QpAttr, QpAttrMask, QpCaps, QpCounters, QpState, QpType, Qpn};

use crate::cq::CompletionQueue;
use crate::error::{CreateError, Error, ModifyQpError};
use crate::pd::ProtectionDomain;
use crate::progress;
use crate::srq::SharedReceiveQueue;
use crate::state::owners;
use crate::state::{lock, Graveyard, Shared};

mod post;

/// Creation attributes of a QP (`ibv_qp_init_attr`).
///
/// ```no_run
/// # fn f(pd: &roce_verbs::ProtectionDomain, cq: &roce_verbs::CompletionQueue) -> Result<(), roce_verbs::CreateError> {
/// use roce_verbs::{QpInitAttr, QpType};
/// let qp = pd.create_qp(&QpInitAttr::new(QpType::Rc, cq, cq))?;
/// # Ok(()) }
/// ```
#[derive(Clone, Copy, Debug)]
pub struct QpInitAttr<'a> {
    /// Transport.
    pub qp_type: QpType,
    /// CQ of send completions.
    pub send_cq: &'a CompletionQueue,
    /// CQ of receive completions.
    pub recv_cq: &'a CompletionQueue,
    /// Shared receive queue instead of the QP's own.
    pub srq: Option<&'a SharedReceiveQueue>,
    /// Queue sizes.
    pub cap: QpCaps,
    /// Every send WR completes, signaled or not.
    pub sq_sig_all: bool,
}

impl<'a> QpInitAttr<'a> {
    /// A QP of `qp_type` with default sizes and its own receive queue.
    pub fn new(
        qp_type: QpType,
        send_cq: &'a CompletionQueue,
        recv_cq: &'a CompletionQueue,
    ) -> QpInitAttr<'a> {
        QpInitAttr {
            qp_type,
            send_cq,
            recv_cq,
            srq: None,
            cap: QpCaps::default(),
            sq_sig_all: false,
        }
    }

    /// Receives come from `srq`.
    pub fn srq(mut self, srq: &'a SharedReceiveQueue) -> QpInitAttr<'a> {
        self.srq = Some(srq);
        self
    }

    /// Queue sizes.
    pub fn cap(mut self, cap: QpCaps) -> QpInitAttr<'a> {
        self.cap = cap;
        self
    }

    /// Signal every send WR.
    pub fn sq_sig_all(mut self, yes: bool) -> QpInitAttr<'a> {
        self.sq_sig_all = yes;
        self
    }
}

#[derive(Debug)]
struct QpInner {
    qpn: Qpn,
    qp_type: QpType,
    pd: ProtectionDomain,
    send_cq: CompletionQueue,
    recv_cq: CompletionQueue,
    srq: Option<SharedReceiveQueue>,
}

impl Drop for QpInner {
    fn drop(&mut self) {
        let shared = self.pd.shared();
        let mut grave = Graveyard::new();
        let mut core = shared.core();
        let _ = core.dev.destroy_qp(self.qpn);
        core.forget_qp(self.qpn, &mut grave);
        owners::retire_qpn(&mut core, self.qpn.value());
        drop(core);
        drop(grave);
        // A deferred ACK the engine kept as the QP's last packet.
        progress::kick(shared);
    }
}

/// A queue pair (`ibv_qp`). A cheap handle (clones refer to the same QP),
/// `Send + Sync`: any thread may post. The QP is destroyed when the last
/// handle drops; it holds its PD, CQs and SRQ.
#[derive(Clone, Debug)]
pub struct QueuePair {
    inner: Arc<QpInner>,
}

impl ProtectionDomain {
    /// `ibv_create_qp`: a QP in RESET.
    pub fn create_qp(&self, attr: &QpInitAttr<'_>) -> Result<QueuePair, CreateError> {
        QueuePair::create(self, attr)
    }
}

impl QueuePair {
    pub(crate) fn create(
        pd: &ProtectionDomain,
        a: &QpInitAttr<'_>,
    ) -> Result<QueuePair, CreateError> {
        let ctx = pd.context();
        if !a.send_cq.context().same(ctx) || !a.recv_cq.context().same(ctx) {
            return Err(CreateError::WrongContext);
        }
        if let Some(s) = a.srq {
            if s.pd() != pd {
                return Err(CreateError::WrongPd);
            }
        }
        let init = roce_core::QpInitAttr {
            qp_type: a.qp_type,
            pd: pd.id(),
            send_cq: a.send_cq.id(),
            recv_cq: a.recv_cq.id(),
            srq: a.srq.map(|s| s.id()),
            cap: a.cap,
            sq_sig_all: a.sq_sig_all,
        };
        let shared = pd.shared();
        // The QPN is claimed host-wide before the QP exists (docs/host.md):
        // the I/O side first, as the progress steps lock them.
        let mut io = lock(&shared.io);
        let mut core = shared.core();
        owners::settle(&mut io, &mut core, &shared.addrs);
        let qpn = core.dev.create_qp_with(init, |q| {
            owners::claim(&mut *io.backend, &shared.addrs, Owner::Qp(q.value()))
        })?;
        drop(core);
        drop(io);
        Ok(QueuePair {
            inner: Arc::new(QpInner {
                qpn,
                qp_type: a.qp_type,
                pd: pd.clone(),
                send_cq: a.send_cq.clone(),
                recv_cq: a.recv_cq.clone(),
                srq: a.srq.cloned(),
            }),
        })
    }

    fn shared(&self) -> &Arc<Shared> {
        self.inner.pd.shared()
    }

    /// QP number.
    pub fn qpn(&self) -> Qpn {
        self.inner.qpn
    }

    /// Transport.
    pub fn qp_type(&self) -> QpType {
        self.inner.qp_type
    }

    /// The protection domain.
    pub fn pd(&self) -> &ProtectionDomain {
        &self.inner.pd
    }

    /// The send CQ.
    pub fn send_cq(&self) -> &CompletionQueue {
        &self.inner.send_cq
    }

    /// The receive CQ.
    pub fn recv_cq(&self) -> &CompletionQueue {
        &self.inner.recv_cq
    }

    /// The shared receive queue, if any.
    pub fn srq(&self) -> Option<&SharedReceiveQueue> {
        self.inner.srq.as_ref()
    }

    /// `ibv_modify_qp`: the transition and mask are checked against the
    /// IBTA table. Moving to RESET discards the queues without completions
    /// (their buffers' references are released).
    pub fn modify(&self, attr: &QpAttr, mask: QpAttrMask) -> Result<(), ModifyQpError> {
        let shared = self.shared();
        if mask.contains(QpAttrMask::AV) {
            shared.use_gid(attr.ah_attr.sgid_index)?;
        }
        let mut grave = Graveyard::new();
        let r = {
            let mut core = shared.core();
            let r = core.dev.modify_qp(self.inner.qpn, attr, mask);
            if r.is_ok() && core.dev.qp(self.inner.qpn).map(|q| q.state()) == Some(QpState::Reset) {
                core.forget_qp(self.inner.qpn, &mut grave);
            }
            r
        };
        drop(grave);
        r?;
        progress::kick(shared);
        Ok(())
    }

    /// `ibv_query_qp`: the current attributes (`qp_state` is the state).
    pub fn query(&self) -> Result<QpAttr, Error> {
        let core = self.shared().core_quiet();
        let qp = core
            .dev
            .qp(self.inner.qpn)
            .ok_or(Error::Verbs(roce_core::VerbsError::NotFound))?;
        let mut a = *qp.attr();
        a.qp_state = qp.state();
        a.cur_qp_state = qp.state();
        Ok(a)
    }

    /// The current state.
    pub fn state(&self) -> QpState {
        self.shared()
            .core_quiet()
            .dev
            .qp(self.inner.qpn)
            .map_or(QpState::Err, |q| q.state())
    }

    /// Counters of this QP.
    pub fn counters(&self) -> QpCounters {
        self.shared()
            .core_quiet()
            .dev
            .qp_counters(self.inner.qpn)
            .unwrap_or_default()
    }

    /// Congestion-control counters and state (DCQCN rate, CE marks seen,
    /// CNPs sent and received).
    pub fn cc_counters(&self) -> roce_core::cc::CcCounters {
        self.shared()
            .core_quiet()
            .dev
            .qp_cc_counters(self.inner.qpn)
            .unwrap_or_default()
    }
}
