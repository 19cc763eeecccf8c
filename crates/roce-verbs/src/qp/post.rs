//! Posting work requests to a QP: sends (one, a list, UD, owned buffer)
//! and receives. Each refusal is a [`PostError`]; nothing was posted by
//! the call that returned it (a list says how many went in before).

use roce_core::{Access, Payload, Qkey, Qpn, RecvWr, SendFlags, Sge, UdDest};

use super::QueuePair;
use crate::error::{OwnedPostError, PostError, PostListError};
use crate::pd::AddressHandle;
use crate::progress;
use crate::recv::{post_recv, post_recv_owned};
use crate::state::{Core, OwnedBuf, RecvOwner, Refs, SendEntry};
use crate::wr::{SendBatch, SendWr};

impl QueuePair {
    /// `ibv_post_send`. Every scatter/gather entry must lie inside a live
    /// memory region of this QP's PD (an error here, or with
    /// [`ProgressConfig::check_sges_at_post`](crate::ProgressConfig::check_sges_at_post)
    /// off a completion with a local protection error); the regions stay
    /// registered until the WR completes (see the crate docs). Unsignaled
    /// WRs release their regions when a later signaled WR of the QP
    /// completes. A UD QP's sends go through
    /// [`post_send_ud`](Self::post_send_ud).
    pub fn post_send(&self, wr: SendWr) -> Result<(), PostError> {
        self.post_core_list(std::iter::once(wr.into_core(None)))
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
        self.post_core_list(wrs.into_iter().map(|w| w.into_core(None)))
    }

    /// A UD send through an address handle of this QP's PD, to
    /// `remote_qpn` with `qkey` (a value with the high bit set means the
    /// QP's own Q_Key, IBTA Vol 1 §10.2.5).
    pub fn post_send_ud(
        &self,
        wr: SendWr,
        ah: &AddressHandle,
        remote_qpn: Qpn,
        qkey: Qkey,
    ) -> Result<(), PostError> {
        if ah.pd() != self.pd() {
            return Err(PostError::WrongPd);
        }
        let dest = ah.ud_dest(remote_qpn, qkey);
        self.post_core_list(std::iter::once(wr.into_core(Some(dest))))
            .map_err(|e| e.error)
    }

    /// UD sends in a list, each with its destination (from
    /// [`AddressHandle::ud_dest`]), posted as
    /// [`post_send_list`](Self::post_send_list) posts. The caller vouches
    /// for the destinations' address handles (the drop-in libibverbs
    /// checks their context).
    pub fn post_send_ud_list(
        &self,
        wrs: impl IntoIterator<Item = (SendWr, UdDest)>,
    ) -> Result<(), PostListError> {
        self.post_core_list(wrs.into_iter().map(|(w, d)| w.into_core(Some(d))))
    }

    /// Posts a [`SendBatch`] in order under one lock, as
    /// [`post_send_list`](Self::post_send_list) posts a list, and leaves
    /// it empty (what was not posted is dropped).
    pub fn post_send_batch(&self, batch: &mut SendBatch) -> Result<(), PostListError> {
        // The drain empties the batch when dropped, posted or not.
        self.post_gathered(batch.drain())
    }

    /// Posts engine WRs in order under one lock (see `post_send_list`).
    fn post_core_list(
        &self,
        wrs: impl Iterator<Item = roce_core::SendWr>,
    ) -> Result<(), PostListError> {
        // The caller's iterator runs before the engine is locked: it may
        // touch the context (fill the region it posts from) or take time.
        let wrs: smallvec::SmallVec<[roce_core::SendWr; 8]> = wrs.collect();
        self.post_gathered(wrs.into_iter())
    }

    /// Posts WRs already gathered (nothing of the caller's runs while
    /// the engine is locked).
    fn post_gathered(
        &self,
        wrs: impl Iterator<Item = roce_core::SendWr>,
    ) -> Result<(), PostListError> {
        let shared = self.shared();
        let mut posted = 0;
        let mut refused = None;
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

    /// The owned-buffer send path: `buf` is registered for this one work
    /// request (local access only, invisible to peers) and comes back in
    /// [`Completion::buffer`](crate::Completion::buffer) when its
    /// completion is polled, whatever the status. The WR is always
    /// signaled; its payload becomes the whole buffer (the data to SEND or
    /// WRITE, or where a READ or atomic result lands). On error the buffer
    /// comes back in the error. Dropped, not returned, if the QP is
    /// destroyed or reset first.
    pub fn post_send_owned(&self, wr: SendWr, buf: Vec<u8>) -> Result<(), OwnedPostError> {
        let Ok(len) = u32::try_from(buf.len()) else {
            return Err(OwnedPostError {
                buffer: buf,
                error: PostError::InvalidArgument("buffer longer than 4 GiB - 1"),
            });
        };
        let mut wr = wr.into_core(None);
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
        mut wr: roce_core::SendWr,
        refs: &mut Refs,
        owned: Option<OwnedBuf>,
    ) -> Result<(), (PostError, Option<OwnedBuf>)> {
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
    pub fn post_recv(&self, wr: RecvWr) -> Result<(), PostError> {
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
