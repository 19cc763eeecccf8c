//! Posting receives, to a QP's queue or an SRQ's: the one path both
//! handles share.

use roce_core::{Access, QpState, Qpn, RecvWr, Sge};

use crate::error::{OwnedPostError, PostError};
use crate::pd::ProtectionDomain;
use crate::progress;
use crate::state::{OwnedBuf, RecvEntry, RecvOwner, Refs, Shared};

/// Posts a receive to a QP's or an SRQ's queue; region references the
/// post did not keep are left in `refs` for the caller to drop unlocked.
pub(crate) fn post_recv_locked(
    shared: &Shared,
    owner: RecvOwner,
    pd: &ProtectionDomain,
    mut wr: RecvWr,
    refs: &mut Refs,
    owned: Option<OwnedBuf>,
) -> Result<(), (PostError, Option<OwnedBuf>)> {
    let mut core = shared.core();
    if owned.is_none() {
        if let Err(e) = core.resolve(pd.id(), &wr.sgl, refs) {
            return Err((e, owned));
        }
    }
    let id = core.next_recv_id();
    let user = wr.wr_id;
    wr.wr_id = id;
    let (r, in_error) = match owner {
        RecvOwner::Qp(q) => {
            let qpn = Qpn::new(q);
            let r = core.dev.post_recv(qpn, wr);
            let err = core.dev.qp(qpn).is_some_and(|x| x.state() == QpState::Err);
            (r, err)
        }
        RecvOwner::Srq(s) => (core.dev.post_srq_recv(s, wr), false),
    };
    match r {
        Ok(()) => {
            core.recvs.insert(
                id,
                RecvEntry {
                    owner,
                    wr_id: user,
                    refs: std::mem::take(refs),
                    owned,
                },
            );
            drop(core);
            if in_error {
                // The receive completed (flushed) at once: raise its event.
                progress::kick(shared);
            }
            Ok(())
        }
        Err(e) => Err((e.into(), owned)),
    }
}

/// The receive of a QP or an SRQ into registered memory: the region
/// references a failed post took are dropped here, after the lock.
pub(crate) fn post_recv(
    shared: &Shared,
    owner: RecvOwner,
    pd: &ProtectionDomain,
    wr: RecvWr,
) -> Result<(), PostError> {
    let mut refs = Refs::new();
    let r = post_recv_locked(shared, owner, pd, wr, &mut refs, None).map_err(|(e, _)| e);
    drop(refs);
    r
}

/// The owned-buffer receive of a QP or an SRQ.
pub(crate) fn post_recv_owned(
    shared: &Shared,
    owner: RecvOwner,
    pd: &ProtectionDomain,
    wr_id: u64,
    buf: Vec<u8>,
) -> Result<(), OwnedPostError> {
    let Ok(len) = u32::try_from(buf.len()) else {
        return Err(OwnedPostError {
            buffer: buf,
            error: PostError::InvalidArgument("buffer longer than 4 GiB - 1"),
        });
    };
    let reg = shared
        .core()
        .register_owned(pd.id(), buf, Access::LOCAL_WRITE);
    let (keys, va, home) = reg.map_err(|(error, buffer)| OwnedPostError { buffer, error })?;
    let wr = RecvWr {
        wr_id,
        sgl: [Sge {
            addr: va,
            length: len,
            lkey: keys.lkey,
        }]
        .into_iter()
        .collect(),
    };
    let mut refs = Refs::new();
    let r = post_recv_locked(
        shared,
        owner,
        pd,
        wr,
        &mut refs,
        Some(OwnedBuf { keys, home }),
    );
    r.map_err(|(error, owned)| OwnedPostError {
        buffer: owned
            .and_then(|o| shared.core().take_owned(o))
            .unwrap_or_default(),
        error,
    })
}
