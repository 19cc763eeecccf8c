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

/// Copies `out.len()` bytes from byte `offset` of `sgl` into `out`.
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
        match mrs.check(
            sge.lkey.value(),
            pd,
            sge.addr + skip,
            n as u64,
            Access::NONE,
        ) {
            Ok(span) => {
                mrs.read(span, 0, &mut out[pos..pos + n]);
                true
            }
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

/// Copies `data` into `sgl` at byte `offset` (needs LOCAL_WRITE).
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
        match mrs.check(
            sge.lkey.value(),
            pd,
            sge.addr + skip,
            n as u64,
            Access::LOCAL_WRITE,
        ) {
            Ok(span) => {
                mrs.write(span, 0, &data[pos..pos + n]);
                true
            }
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
