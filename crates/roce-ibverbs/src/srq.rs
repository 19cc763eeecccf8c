//! Shared receive queues.

use std::os::raw::{c_int, c_void};
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};

use roce_verbs::SrqId;

use crate::abi::consts::*;
use crate::abi::*;
use crate::context::{same_context, Objects};
use crate::ffi::posted;
use crate::ffi::Raw;
use crate::ffi::{arg, arg_mut, errno_ret, ptr_ret, verr, Res};
use crate::pd::Pd;
use crate::wr::post_recv_list;

/// The objects table's key of an SRQ.
fn key(id: SrqId) -> u32 {
    Objects::srq_key(id)
}

/// An SRQ: the C view first.
#[repr(C)]
pub(crate) struct Srq {
    ibv: ibv_srq,
    pub(crate) srq: roce_verbs::SharedReceiveQueue,
    pd: *const Pd,
    max_wr: u32,
    max_sge: u32,
    limit: AtomicU32,
    /// QPs using the SRQ (`EBUSY` on destroy).
    pub(crate) users: AtomicUsize,
}

impl Srq {
    /// The context it belongs to.
    pub(crate) fn context(&self) -> *mut ibv_context {
        self.ibv.context
    }

    /// # Safety
    /// `p` must be NULL or an SRQ this library created and not destroyed.
    unsafe fn from_ptr<'a>(p: *mut ibv_srq) -> Res<&'a Srq> {
        // SAFETY: `ibv` is the first field of the repr(C) Srq.
        unsafe { arg(p.cast::<Srq>()) }
    }
}

fn create(
    pd_ptr: *mut ibv_pd,
    srq_context: *mut c_void,
    attr: &mut ibv_srq_attr,
) -> Res<*mut ibv_srq> {
    // SAFETY: the program's PD.
    let pd = unsafe { Pd::from_ptr(pd_ptr)? };
    let l = roce_verbs::LIMITS;
    if attr.max_wr == 0 || attr.max_wr > l.max_srq_wr || attr.max_sge > l.max_srq_sge {
        return Err(libc::EINVAL);
    }
    let srq = pd.pd.create_srq(attr.max_wr as usize).map_err(verr)?;
    if attr.srq_limit > 0 {
        srq.set_limit(attr.srq_limit as usize).map_err(verr)?;
    }
    attr.max_sge = attr.max_sge.max(1);
    let id = srq.id();
    let b = Box::into_raw(Box::new(Srq {
        ibv: ibv_srq {
            context: pd.ibv.context,
            srq_context,
            pd: pd_ptr,
            handle: key(id),
            mutex: libc::PTHREAD_MUTEX_INITIALIZER,
            cond: libc::PTHREAD_COND_INITIALIZER,
            events_completed: 0,
        },
        srq,
        pd,
        max_wr: attr.max_wr,
        max_sge: attr.max_sge,
        limit: AtomicU32::new(attr.srq_limit),
        users: AtomicUsize::new(0),
    }));
    pd.users.fetch_add(1, Ordering::AcqRel);
    pd.ctx()
        .objects
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .srqs
        .insert(key(id), Raw(b.cast()));
    Ok(b.cast())
}

export! {
    /// `ibv_create_srq`.
    fn ibv_create_srq(pd: *mut ibv_pd, attr: *mut ibv_srq_init_attr) -> *mut ibv_srq {
        ptr_ret(|| {
            // SAFETY: the program's attributes.
            let a = unsafe { arg_mut(attr)? };
            create(pd, a.srq_context, &mut a.attr)
        })
    }
}

entry! {
    /// `verbs_context.create_srq_ex`: basic SRQs only (no XRC, no tag matching).
    fn create_srq_ex(
        ctx: *mut ibv_context,
        attr: *mut ibv_srq_init_attr_ex,
    ) -> *mut ibv_srq {
        ptr_ret(|| {
            // SAFETY: the program's attributes.
            let a = unsafe { arg_mut(attr)? };
            const TYPE: u32 = 1 << 0;
            const PD: u32 = 1 << 1;
            if a.comp_mask & !(TYPE | PD) != 0 || (a.comp_mask & TYPE != 0 && a.srq_type != 0) {
                return Err(libc::EOPNOTSUPP);
            }
            if a.comp_mask & PD == 0 {
                return Err(libc::EINVAL);
            }
            // SAFETY: the program's PD.
            same_context(&[ctx, unsafe { Pd::from_ptr(a.pd)? }.ibv.context])?;
            create(a.pd, a.srq_context, &mut a.attr)
        })
    }
}

entry! {
    fn get_srq_num(srq: *mut ibv_srq, num: *mut u32) -> c_int {
        errno_ret(|| {
            // SAFETY: the program's pointers.
            let (s, n) = unsafe { (Srq::from_ptr(srq)?, arg_mut(num)?) };
            *n = key(s.srq.id());
            Ok(())
        })
    }
}

entry! {
    /// `ops.post_srq_recv`.
    fn post_srq_recv(srq: *mut ibv_srq, wr: *mut ibv_recv_wr, bad: *mut *mut ibv_recv_wr) -> c_int {
        posted(bad, wr, || {
            // SAFETY: the program's SRQ.
            let s = unsafe { Srq::from_ptr(srq) }.map_err(|e| (e, wr))?;
            // SAFETY: the program's list (at most max_wr WRs of max_sge entries).
            unsafe { post_recv_list(wr, s.max_wr, s.max_sge, |r| s.srq.post_recv(r)) }
        })
    }
}

/// Installs the SRQ entries of a context's ops tables.
pub(crate) fn install(v: &mut verbs_context) {
    v.context.ops.post_srq_recv = Some(post_srq_recv);
    v.create_srq_ex = Some(create_srq_ex);
    v.get_srq_num = Some(get_srq_num);
}

export! {
    /// `ibv_modify_srq`: the limit can be armed; the size is fixed.
    fn ibv_modify_srq(srq: *mut ibv_srq, attr: *mut ibv_srq_attr, mask: c_int) -> c_int {
        errno_ret(|| {
            // SAFETY: the program's pointers.
            let (s, a) = unsafe { (Srq::from_ptr(srq)?, arg(attr)?) };
            if mask & !(IBV_SRQ_MAX_WR | IBV_SRQ_LIMIT) != 0 {
                return Err(libc::EINVAL);
            }
            if mask & IBV_SRQ_MAX_WR != 0 {
                return Err(libc::EOPNOTSUPP);
            }
            if mask & IBV_SRQ_LIMIT != 0 {
                if a.srq_limit > s.max_wr {
                    return Err(libc::EINVAL);
                }
                s.srq.set_limit(a.srq_limit as usize).map_err(verr)?;
                s.limit.store(a.srq_limit, Ordering::Relaxed);
            }
            Ok(())
        })
    }
}

export! {
    /// `ibv_query_srq`.
    fn ibv_query_srq(srq: *mut ibv_srq, attr: *mut ibv_srq_attr) -> c_int {
        errno_ret(|| {
            // SAFETY: the program's pointers.
            let (s, a) = unsafe { (Srq::from_ptr(srq)?, arg_mut(attr)?) };
            *a = ibv_srq_attr { max_wr: s.max_wr, max_sge: s.max_sge, srq_limit: s.limit.load(Ordering::Relaxed) };
            Ok(())
        })
    }
}

export! {
    /// `ibv_destroy_srq`: `EBUSY` while a QP uses it.
    fn ibv_destroy_srq(srq: *mut ibv_srq) -> c_int {
        errno_ret(|| {
            // SAFETY: the program's SRQ.
            let s = unsafe { Srq::from_ptr(srq)? };
            if s.users.load(Ordering::Acquire) != 0 {
                return Err(libc::EBUSY);
            }
            // SAFETY: the PD outlives its SRQs.
            let pd = unsafe { &*s.pd };
            pd.ctx().objects.lock().unwrap_or_else(|p| p.into_inner()).srqs.remove(&key(s.srq.id()));
            pd.users.fetch_sub(1, Ordering::AcqRel);
            // SAFETY: allocated by create; the program gives it up.
            drop(unsafe { Box::from_raw(srq.cast::<Srq>()) });
            Ok(())
        })
    }
}
