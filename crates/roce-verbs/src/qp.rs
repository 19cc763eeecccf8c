//! Queue pairs: creation, modify/query, and posting work requests.

use std::sync::Arc;

use roce_core::{
    Access, Owner, Payload, QpAttr, QpAttrMask, QpCaps, QpCounters, QpState, QpType, Qpn, RecvWr,
    SendFlags, SendWr, Sge,
};

use crate::cq::CompletionQueue;
use crate::error::{Error, OwnedPostError, PostListError};
use crate::pd::{AddressHandle, ProtectionDomain};
use crate::progress;
use crate::recv::{post_recv, post_recv_owned};
use crate::srq::SharedReceiveQueue;
use crate::state::owners;
use crate::state::{lock, Core, Graveyard, OwnedBuf, RecvOwner, Refs, SendEntry, Shared};

/// Creation attributes of a QP (`ibv_qp_init_attr`).
///
/// ```no_run
/// # fn f(pd: &roce_verbs::ProtectionDomain, cq: &roce_verbs::CompletionQueue) -> Result<(), roce_verbs::Error> {
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
    pub fn create_qp(&self, attr: &QpInitAttr<'_>) -> Result<QueuePair, Error> {
        QueuePair::create(self, attr)
    }
}

impl QueuePair {
    pub(crate) fn create(pd: &ProtectionDomain, a: &QpInitAttr<'_>) -> Result<QueuePair, Error> {
        let ctx = pd.context();
        if !a.send_cq.context().same(ctx) || !a.recv_cq.context().same(ctx) {
            return Err(Error::WrongContext);
        }
        if let Some(s) = a.srq {
            if s.pd() != pd {
                return Err(Error::WrongPd);
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
    pub fn modify(&self, attr: &QpAttr, mask: QpAttrMask) -> Result<(), Error> {
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

    /// `ibv_post_send`. Every scatter/gather entry must lie inside a live
    /// memory region of this QP's PD (an error here, or with
    /// [`ProgressConfig::check_sges_at_post`](crate::ProgressConfig::check_sges_at_post)
    /// off a completion with a local protection error); the regions stay
    /// registered until the WR completes (see the crate docs). Unsignaled WRs release their
    /// regions when a later signaled WR of the QP completes.
    pub fn post_send(&self, wr: SendWr) -> Result<(), Error> {
        self.post_send_list(std::iter::once(wr))
            .map_err(|e| e.error)
    }

    /// `ibv_post_send` with a list: posts `wrs` in order under one lock
    /// and transmits once, so a burst of small messages leaves in a few
    /// system calls instead of one each. Stops at the first WR refused:
    /// [`PostListError`] says how many were posted before it (as
    /// `bad_wr`) and why it was refused; the WRs after it are not posted.
    pub fn post_send_list(
        &self,
        wrs: impl IntoIterator<Item = SendWr>,
    ) -> Result<(), PostListError> {
        let shared = self.shared();
        let mut posted = 0;
        let mut refused = None;
        // The caller's iterator runs before the engine is locked: it may
        // touch the context (fill the region it posts from) or take time.
        let wrs: smallvec::SmallVec<[SendWr; 8]> = wrs.into_iter().collect();
        // Region references a post did not keep are dropped unlocked.
        let mut refs = Refs::new();
        let mut unkept = Vec::new();
        {
            let mut core = shared.core();
            for wr in wrs {
                let r = self.post_send_locked(&mut core, wr, &mut refs, None);
                unkept.extend(refs.drain(..));
                if let Err((e, _)) = r {
                    refused = Some(e);
                    break;
                }
                posted += 1;
            }
        }
        drop(unkept);
        if posted > 0 {
            progress::kick_post(shared);
        }
        match refused {
            None => Ok(()),
            Some(error) => Err(PostListError { posted, error }),
        }
    }

    /// A UD send through an address handle: sets `wr.ud` to `ah`'s
    /// destination, `remote_qpn` and `qkey`, then posts.
    pub fn post_send_ud(
        &self,
        mut wr: SendWr,
        ah: &AddressHandle,
        remote_qpn: Qpn,
        qkey: roce_core::Qkey,
    ) -> Result<(), Error> {
        if ah.pd() != self.pd() {
            return Err(Error::WrongPd);
        }
        wr.ud = Some(ah.ud_dest(remote_qpn, qkey));
        self.post_send(wr)
    }

    /// The owned-buffer send path: `buf` is registered for this one work
    /// request (local access only, invisible to peers) and comes back in
    /// [`Completion::buffer`](crate::Completion::buffer) when its
    /// completion is polled, whatever the status. The WR is always
    /// signaled; its payload becomes the whole buffer (the data to SEND or
    /// WRITE, or where a READ or atomic result lands). On error the buffer
    /// comes back in the error. Dropped, not returned, if the QP is
    /// destroyed or reset first.
    pub fn post_send_owned(&self, mut wr: SendWr, buf: Vec<u8>) -> Result<(), OwnedPostError> {
        let Ok(len) = u32::try_from(buf.len()) else {
            return Err(OwnedPostError {
                buffer: buf,
                error: Error::InvalidArgument("buffer longer than 4 GiB - 1"),
            });
        };
        let shared = self.shared();
        let mut refs = Refs::new();
        let r = {
            let mut core = shared.core();
            match core.register_owned(self.pd().id(), buf, Access::LOCAL_WRITE) {
                Err((error, buffer)) => Err(OwnedPostError { buffer, error }),
                Ok((keys, va, home)) => {
                    wr.payload = Payload::Sgl(
                        [Sge {
                            addr: va,
                            length: len,
                            lkey: keys.lkey,
                        }]
                        .into_iter()
                        .collect(),
                    );
                    wr.flags = wr.flags | SendFlags::SIGNALED;
                    let owned = OwnedBuf { keys, home };
                    self.post_send_locked(&mut core, wr, &mut refs, Some(owned))
                        .map_err(|(error, owned)| OwnedPostError {
                            buffer: owned.and_then(|o| core.take_owned(o)).unwrap_or_default(),
                            error,
                        })
                }
            }
        };
        drop(refs);
        if r.is_ok() {
            progress::kick(shared);
        }
        r
    }

    fn post_send_locked(
        &self,
        core: &mut Core,
        mut wr: SendWr,
        refs: &mut Refs,
        owned: Option<OwnedBuf>,
    ) -> Result<(), (Error, Option<OwnedBuf>)> {
        if owned.is_none() {
            if let Payload::Sgl(sgl) = &wr.payload {
                if let Err(e) = core.resolve(self.pd().id(), sgl, refs) {
                    return Err((e, owned));
                }
            }
        }
        // Inline data is copied at post time: nothing to keep alive.
        let keep = !wr.flags.contains(SendFlags::INLINE);
        let id = core.next_send_id();
        let user = wr.wr_id;
        wr.wr_id = id;
        match core.dev.post_send(self.inner.qpn, wr) {
            Ok(()) => {
                let refs = if keep {
                    std::mem::take(refs)
                } else {
                    Refs::new()
                };
                core.sends
                    .entry(self.inner.qpn.value())
                    .or_default()
                    .push_back(SendEntry {
                        id,
                        wr_id: user,
                        refs,
                        owned,
                    });
                Ok(())
            }
            Err(e) => Err((e.into(), owned)),
        }
    }

    /// `ibv_post_recv`: the scatter/gather entries' regions stay
    /// registered until the receive completes.
    pub fn post_recv(&self, wr: RecvWr) -> Result<(), Error> {
        post_recv(
            self.shared(),
            RecvOwner::Qp(self.inner.qpn.value()),
            self.pd(),
            wr,
        )
    }

    /// The owned-buffer receive path: `buf` receives the message and comes
    /// back in [`Completion::buffer`](crate::Completion::buffer).
    pub fn post_recv_owned(&self, wr_id: u64, buf: Vec<u8>) -> Result<(), OwnedPostError> {
        post_recv_owned(
            self.shared(),
            RecvOwner::Qp(self.inner.qpn.value()),
            self.pd(),
            wr_id,
            buf,
        )
    }
}
