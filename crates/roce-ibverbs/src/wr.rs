//! The program's work-request lists, read for posting: the WRs of a
//! `next`-linked list walked no further than the queue's depth
//! ([`Walk`]), their scatter/gather lists checked for count before a
//! single entry is read ([`sgl`]), inline data copied through the memory
//! guard ([`inline`]), and a receive list posted one WR at a time
//! ([`post_recv_list`], for QPs and SRQs alike). No queue type here: the
//! QP's posting (`qp::post`) and the SRQ's use these.

use std::os::raw::c_int;

use roce_verbs::{Lkey, RecvWr, Sge, SgeList};

use crate::abi::*;
use crate::ffi::{post_errno, Res};

/// Whether `n` scatter/gather entries fit a queue taking `max`: `EINVAL`
/// as rxe answers (a negative count included), checked before a single
/// entry is read.
pub(crate) fn sge_count(n: c_int, max: u32) -> Res<usize> {
    match u32::try_from(n) {
        Ok(k) if k <= max => Ok(k as usize),
        _ => Err(libc::EINVAL),
    }
}

/// The scatter/gather list of a C work request, of at most `max` entries
/// (the queue's limit: a larger `n` is `EINVAL` before the list is read).
///
/// # Safety
/// `sg` must point to `n` entries (any when `n` is 0) when `n <= max`.
pub(crate) unsafe fn sgl(sg: *const ibv_sge, n: c_int, max: u32) -> Res<SgeList> {
    let n = sge_count(n, max)?;
    if n > 0 && sg.is_null() {
        return Err(libc::EINVAL);
    }
    if n == 0 {
        return Ok(SgeList::new());
    }
    // SAFETY: the caller's contract.
    let s = unsafe { std::slice::from_raw_parts(sg, n) };
    Ok(s.iter()
        .map(|e| Sge {
            addr: e.addr,
            length: e.length,
            lkey: Lkey::new(e.lkey),
        })
        .collect())
}

/// Inline data: the bytes the buffers `(addr, len)` point at, copied now
/// (their lkeys are not looked at, as with every provider) through the
/// guarded copy: a buffer the program unmapped or protected is `EFAULT`,
/// not a signal (docs/dropin.md, "Registered memory").
///
/// # Safety
/// Each buffer must be memory of the program that is readable or faults.
pub(crate) unsafe fn inline(bufs: impl Iterator<Item = (u64, usize)> + Clone) -> Res<Vec<u8>> {
    let total = bufs.clone().try_fold(0usize, |t, (_, n)| t.checked_add(n));
    let mut v = vec![0u8; total.ok_or(libc::EINVAL)?];
    let mut at = 0;
    for (addr, n) in bufs.filter(|&(_, n)| n > 0) {
        // SAFETY: the caller's contract for the source; `v[at..at + n]`
        // is ours (the lengths sum to its size).
        unsafe { roce_verbs::guard::copy(addr as *const u8, v.as_mut_ptr().add(at), n) }
            .map_err(|_| libc::EFAULT)?;
        at += n;
    }
    Ok(v)
}

/// A C work request list: each WR's `next`.
pub(crate) trait Linked {
    fn next_wr(&self) -> *mut Self;
}
impl Linked for ibv_send_wr {
    fn next_wr(&self) -> *mut Self {
        self.next
    }
}
impl Linked for ibv_recv_wr {
    fn next_wr(&self) -> *mut Self {
        self.next
    }
}

/// A program's WR list, walked at most a queue's depth of WRs: no more
/// can be posted in one call, so a list that loops (`wr.next = &wr`) or
/// outruns the queue ends there, with `ENOMEM` at the first WR that did
/// not fit, as a provider whose queue is full answers.
pub(crate) struct Walk<T> {
    next: *mut T,
    left: usize,
}

impl<T: Linked> Walk<T> {
    pub(crate) fn new(head: *mut T, depth: usize) -> Walk<T> {
        Walk {
            next: head,
            left: depth,
        }
    }

    /// The next WR; `Ok(None)` at the list's end; `Err` with the WR
    /// beyond the depth.
    ///
    /// # Safety
    /// The list is the program's: each WR walked is readable.
    pub(crate) unsafe fn step(&mut self) -> Result<Option<*mut T>, *mut T> {
        if self.next.is_null() {
            return Ok(None);
        }
        if self.left == 0 {
            return Err(self.next);
        }
        self.left -= 1;
        let p = self.next;
        // SAFETY: the caller's contract; p is not NULL.
        self.next = unsafe { (*p).next_wr() };
        Ok(Some(p))
    }
}

/// The `n`th WR of a C list (`n` is within it: counted while walking it).
///
/// # Safety
/// `wr` is the program's list, at least `n + 1` long.
pub(crate) unsafe fn nth(mut wr: *mut ibv_send_wr, n: usize) -> *mut ibv_send_wr {
    for _ in 0..n {
        // SAFETY: the caller's contract.
        wr = unsafe { (*wr).next };
    }
    wr
}

/// Posts a receive list one WR at a time through `post`: at most `depth`
/// WRs (the queue's; see [`Walk`]) of at most `max_sge` entries each. On
/// error, the errno value and the first WR not posted.
///
/// # Safety
/// `wr` is the program's NULL-terminated list.
pub(crate) unsafe fn post_recv_list(
    wr: *mut ibv_recv_wr,
    depth: u32,
    max_sge: u32,
    post: impl Fn(RecvWr) -> Result<(), roce_verbs::PostError>,
) -> Result<(), (c_int, *mut ibv_recv_wr)> {
    let mut walk = Walk::new(wr, depth as usize);
    loop {
        // SAFETY: the caller's contract.
        let cur = match unsafe { walk.step() } {
            Ok(Some(p)) => p,
            Ok(None) => return Ok(()),
            Err(over) => return Err((libc::ENOMEM, over)),
        };
        // SAFETY: the program's WR.
        let w = unsafe { &*cur };
        // SAFETY: the program's list of `num_sge` entries.
        let sg = unsafe { sgl(w.sg_list, w.num_sge, max_sge) }.map_err(|e| (e, cur))?;
        post(RecvWr {
            wr_id: w.wr_id,
            sgl: sg,
        })
        .map_err(|e| (post_errno(&e), cur))?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn recv_wr(id: u64) -> ibv_recv_wr {
        ibv_recv_wr {
            wr_id: id,
            next: std::ptr::null_mut(),
            sg_list: std::ptr::null_mut(),
            num_sge: 0,
        }
    }

    #[test]
    fn sge_counts_are_checked_before_reading() {
        assert_eq!(sge_count(0, 1), Ok(0));
        assert_eq!(sge_count(1, 1), Ok(1));
        assert_eq!(sge_count(2, 1), Err(libc::EINVAL));
        assert_eq!(sge_count(-1, 16), Err(libc::EINVAL));
        assert_eq!(sge_count(1 << 30, 16), Err(libc::EINVAL));
        // A count past the limit never reaches the (NULL) list.
        // SAFETY: nothing is read: the count is refused first.
        assert_eq!(
            unsafe { sgl(std::ptr::null(), 1 << 30, 16) }.err(),
            Some(libc::EINVAL)
        );
    }

    #[test]
    fn a_looping_list_ends_at_the_depth() {
        let mut w = recv_wr(1);
        let p: *mut ibv_recv_wr = &mut w;
        // SAFETY: `w` is live; the list is written through `p` only.
        unsafe { (*p).next = p };
        let mut walk = Walk::new(p, 4);
        for _ in 0..4 {
            // SAFETY: `w` is live and links to itself.
            assert_eq!(unsafe { walk.step() }, Ok(Some(p)));
        }
        // SAFETY: as above.
        assert_eq!(unsafe { walk.step() }, Err(p));
    }

    #[test]
    fn a_list_ends_at_null_or_past_the_depth() {
        let mut ws: Vec<ibv_recv_wr> = (0..3).map(recv_wr).collect();
        let base = ws.as_mut_ptr();
        for i in 0..2 {
            // SAFETY: i + 1 < 3: within `ws`, written through `base` only.
            unsafe { (*base.add(i)).next = base.add(i + 1) };
        }
        let mut walk = Walk::new(base, 3);
        for i in 0..3 {
            // SAFETY: `ws` is live and NULL-terminated.
            assert_eq!(unsafe { walk.step() }, Ok(Some(unsafe { base.add(i) })));
        }
        // SAFETY: as above.
        assert_eq!(unsafe { walk.step() }, Ok(None));
        // One shorter queue: the third WR is the first that does not fit.
        let mut walk = Walk::new(base, 2);
        // SAFETY: as above.
        unsafe {
            assert!(walk.step().is_ok_and(|p| p.is_some()));
            assert!(walk.step().is_ok_and(|p| p.is_some()));
            assert_eq!(walk.step(), Err(base.add(2)));
        }
        // An empty list.
        // SAFETY: nothing is read.
        assert_eq!(
            unsafe { Walk::<ibv_recv_wr>::new(std::ptr::null_mut(), 0).step() },
            Ok(None)
        );
    }
}
