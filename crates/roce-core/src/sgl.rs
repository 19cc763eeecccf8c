//! Moving message bytes between packets and scatter/gather lists.

use crate::mr::{Access, AccessError, MrTable, PdId};
use crate::wr::Sge;

/// A scatter failure.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ScatterError {
    /// The data does not fit in the list.
    TooLong,
    /// An entry's key, bounds or rights are wrong.
    Access(AccessError),
}

/// Walks the list from byte `offset`, calling `f(sge, skip_in_sge, data_pos, n)`
/// for each piece of a `len`-byte range. Returns false if the list is
/// shorter than `offset + len`.
fn walk(
    sgl: &[Sge],
    offset: u64,
    len: usize,
    mut f: impl FnMut(&Sge, u64, usize, usize) -> bool,
) -> bool {
    let mut skip = offset;
    let mut done = 0usize;
    for sge in sgl {
        if done == len {
            break;
        }
        let l = sge.length as u64;
        if skip >= l {
            skip -= l;
            continue;
        }
        let n = ((l - skip) as usize).min(len - done);
        if !f(sge, skip, done, n) {
            return false;
        }
        done += n;
        skip = 0;
    }
    done == len
}

/// Copies `out.len()` bytes from byte `offset` of `sgl` into `out`. An
/// entry whose memory faults fails as one with a bad key would
/// ([`AccessError::Fault`]): the requester completes the WR with a local
/// protection error (IBTA Vol 1 §11.6.2, `IBV_WC_LOC_PROT_ERR`).
pub(crate) fn gather(
    mrs: &MrTable,
    pd: PdId,
    sgl: &[Sge],
    offset: u64,
    out: &mut [u8],
) -> Result<(), AccessError> {
    let mut err = None;
    let len = out.len();
    let complete = walk(sgl, offset, len, |sge, skip, pos, n| {
        match mrs
            .check(
                sge.lkey.value(),
                pd,
                sge.addr + skip,
                n as u64,
                Access::NONE,
            )
            .and_then(|span| mrs.read(span, 0, &mut out[pos..pos + n]))
        {
            Ok(()) => true,
            Err(e) => {
                err = Some(e);
                false
            }
        }
    });
    match (complete, err) {
        (true, _) => Ok(()),
        (false, Some(e)) => Err(e),
        (false, None) => Err(AccessError::OutOfBounds),
    }
}

/// Copies `data` into `sgl` at byte `offset` (needs LOCAL_WRITE). Memory
/// that faults is an access error ([`AccessError::Fault`]), which the
/// responder reports as for a bad L_Key: a local protection error on the
/// receive and a NAK to the requester.
pub(crate) fn scatter(
    mrs: &mut MrTable,
    pd: PdId,
    sgl: &[Sge],
    offset: u64,
    data: &[u8],
) -> Result<(), ScatterError> {
    let total: u64 = sgl.iter().map(|s| s.length as u64).sum();
    if offset + data.len() as u64 > total {
        return Err(ScatterError::TooLong);
    }
    let mut err = None;
    walk(sgl, offset, data.len(), |sge, skip, pos, n| {
        match mrs
            .check(
                sge.lkey.value(),
                pd,
                sge.addr + skip,
                n as u64,
                Access::LOCAL_WRITE,
            )
            .and_then(|span| mrs.write(span, 0, &data[pos..pos + n]))
        {
            Ok(()) => true,
            Err(e) => {
                err = Some(e);
                false
            }
        }
    });
    match err {
        Some(e) => Err(ScatterError::Access(e)),
        None => Ok(()),
    }
}
