//! Protection domains, memory regions and address handles.

use std::net::IpAddr;
use std::os::raw::{c_int, c_void};
use std::sync::atomic::{AtomicUsize, Ordering};

use roce_verbs::{Access, AhAttr};

use crate::abi::*;
use crate::context::{addr_of, Context};
use crate::ffi::value_or;
use crate::ffi::{arg, arg_mut, errno_ret, ptr_ret, set_errno, verr, Res};

/// A protection domain: the C view first.
#[repr(C)]
pub(crate) struct Pd {
    pub(crate) ibv: ibv_pd,
    pub(crate) pd: roce_verbs::ProtectionDomain,
    /// MRs, QPs, SRQs and AHs of this PD still alive (`EBUSY` on dealloc).
    pub(crate) users: AtomicUsize,
}

impl Pd {
    /// # Safety
    /// `p` must be NULL or a PD this library allocated and not freed.
    pub(crate) unsafe fn from_ptr<'a>(p: *mut ibv_pd) -> Res<&'a Pd> {
        // SAFETY: `ibv` is the first field of the repr(C) Pd.
        unsafe { arg(p.cast::<Pd>()) }
    }

    /// The context the PD belongs to.
    pub(crate) fn ctx(&self) -> &Context {
        // SAFETY: a PD's context outlives it (the program must not close
        // a context with live objects; rdma-core has the same rule).
        unsafe {
            &*(self.ibv.context as *const u8)
                .cast::<Context>()
                .byte_sub(std::mem::offset_of!(verbs_context, context))
        }
    }
}

export! {
    /// `ibv_alloc_pd`.
    fn ibv_alloc_pd(ctx: *mut ibv_context) -> *mut ibv_pd {
        ptr_ret(|| {
            // SAFETY: the program's context.
            let c = unsafe { Context::from_ptr(ctx)? };
            let pd = c.verbs.alloc_pd();
            let handle = pd.id().0;
            c.children.fetch_add(1, Ordering::Relaxed);
            let b = Box::new(Pd {
                ibv: ibv_pd { context: ctx, handle },
                pd,
                users: AtomicUsize::new(0),
            });
            Ok(Box::into_raw(b).cast())
        })
    }
}

export! {
    /// `ibv_dealloc_pd`: `EBUSY` while objects of the PD are alive.
    fn ibv_dealloc_pd(pd: *mut ibv_pd) -> c_int {
        errno_ret(|| {
            // SAFETY: the program's PD.
            let p = unsafe { Pd::from_ptr(pd)? };
            if p.users.load(Ordering::Acquire) != 0 {
                return Err(libc::EBUSY);
            }
            p.ctx().children.fetch_sub(1, Ordering::Relaxed);
            // SAFETY: allocated by ibv_alloc_pd; the program gives it up.
            drop(unsafe { Box::from_raw(pd.cast::<Pd>()) });
            Ok(())
        })
    }
}

/// A memory region: the C view first.
#[repr(C)]
pub(crate) struct Mr {
    pub(crate) ibv: ibv_mr,
    mr: roce_verbs::MemoryRegion,
    pd: *const Pd,
}

/// What the kernel's pinning of the pages finds (`ib_umem_get` pins with
/// `FOLL_WRITE` when `ib_access_writable`: local write, remote write,
/// remote atomic or memory-window bind): `EFAULT` when a page of
/// `[addr, addr + len)` is unmapped, unreadable, or not writable while the
/// rights need writing. Also (re)installs the handler that turns a fault
/// of the engine's copies into an access error (`roce_verbs::guard`;
/// `docs/dropin.md`, "Errors and misuse"): a program that replaced it
/// since the last registration gets it back, chained to its own.
fn pinnable(addr: usize, len: usize, access: c_int) -> Res<()> {
    const WRITABLE: u32 = 0x1 | 0x2 | 0x8 | 0x10;
    let write = access as u32 & WRITABLE != 0;
    roce_verbs::guard::check_pages(addr, len, write).map_err(|_| libc::EFAULT)?;
    roce_verbs::guard::install_fault_handler().map_err(|e| e.raw_os_error().unwrap_or(libc::EFAULT))
}

/// The access flags the engine understands; the optional ones
/// (relaxed ordering and the like) are accepted and have no effect.
/// On-demand paging is `EOPNOTSUPP`, as the kernel answers for a device
/// whose `odp_caps` are empty (`ib_check_mr_access`).
fn access_of(flags: c_int) -> Res<Access> {
    let f = flags as u32;
    const MW_BIND: u32 = 1 << 4;
    const ZERO_BASED: u32 = 1 << 5;
    const ON_DEMAND: u32 = 1 << 6;
    const HUGETLB: u32 = 1 << 7;
    const OPTIONAL: u32 = 0x3ff << 20;
    if f & ON_DEMAND != 0 {
        return Err(libc::EOPNOTSUPP);
    }
    let known = 0xf | MW_BIND | ZERO_BASED | HUGETLB | OPTIONAL;
    if f & !known != 0 {
        return Err(libc::EINVAL);
    }
    let a = Access(f & 0xf);
    if !a.is_valid() {
        // Remote write or atomic without local write (IBTA Vol 1 §10.6.3.1).
        return Err(libc::EINVAL);
    }
    Ok(a)
}

fn reg(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    len: usize,
    iova: u64,
    access: c_int,
) -> Res<*mut ibv_mr> {
    // SAFETY: the program's PD.
    let p = unsafe { Pd::from_ptr(pd)? };
    let a = access_of(access)?;
    let iova = if access as u32 & (1 << 5) != 0 {
        0
    } else {
        iova
    };
    if addr.is_null() && len > 0 {
        // Nothing is mapped at page 0: the kernel's pinning says EFAULT.
        return Err(libc::EFAULT);
    }
    pinnable(addr as usize, len, access)?;
    // SAFETY: the memory is the program's, mapped with the rights the
    // access needs (checked above), and by registering it the program
    // hands it to the engine under verbs' rules; the engine's copies are
    // guarded (docs/dropin.md: what happens if it is unmapped or
    // protected while registered).
    let mr = unsafe { p.pd.reg_mr_raw_iova(addr.cast(), len, iova, a) }.map_err(verr)?;
    p.users.fetch_add(1, Ordering::AcqRel);
    let revoker = mr.revoker();
    let b = Box::new(Mr {
        ibv: ibv_mr {
            context: p.ibv.context,
            pd,
            addr,
            length: len,
            handle: mr.lkey().value(),
            lkey: mr.lkey().value(),
            rkey: mr.rkey().value(),
        },
        mr,
        pd: p,
    });
    let ptr = Box::into_raw(b);
    crate::unmap::watch(addr as usize, len, ptr as usize, revoker);
    Ok(ptr.cast())
}

export! {
    /// `ibv_reg_mr` (the exported form, for constant flags).
    fn ibv_reg_mr(pd: *mut ibv_pd, addr: *mut c_void, len: usize, access: c_int) -> *mut ibv_mr {
        ptr_ret(|| reg(pd, addr, len, addr as u64, access))
    }
}

export! {
    /// `ibv_reg_mr_iova`.
    fn ibv_reg_mr_iova(pd: *mut ibv_pd, addr: *mut c_void, len: usize, iova: u64, access: c_int) -> *mut ibv_mr {
        ptr_ret(|| reg(pd, addr, len, iova, access))
    }
}

export! {
    /// `ibv_reg_mr_iova2` (what `verbs.h`'s `ibv_reg_mr` calls for
    /// non-constant flags).
    fn ibv_reg_mr_iova2(pd: *mut ibv_pd, addr: *mut c_void, len: usize, iova: u64, access: u32) -> *mut ibv_mr {
        ptr_ret(|| reg(pd, addr, len, iova, access as c_int))
    }
}

export! {
    /// `ibv_dereg_mr`.
    fn ibv_dereg_mr(mr: *mut ibv_mr) -> c_int {
        errno_ret(|| {
            if mr.is_null() {
                return Err(libc::EINVAL);
            }
            crate::unmap::forget(mr as usize);
            // SAFETY: allocated by reg; the program gives it up.
            let m = unsafe { Box::from_raw(mr.cast::<Mr>()) };
            // SAFETY: the PD outlives its MRs (dealloc_pd refuses before).
            unsafe { &*m.pd }.users.fetch_sub(1, Ordering::AcqRel);
            if let Err(e) = m.mr.dereg() {
                // Still referenced by work in flight: the region goes when
                // that work completes; the program's handle is gone now.
                drop(e);
            }
            Ok(())
        })
    }
}

/// `enum ibv_rereg_mr_flags`.
const REREG_TRANSLATION: c_int = 1;
const REREG_PD: c_int = 2;
const REREG_ACCESS: c_int = 4;
/// `enum ibv_rereg_mr_err_code`: an input error libibverbs itself finds
/// (the region is unchanged), and an error of the command (the kernel's
/// answer; here, too, the region is left as it was).
const REREG_ERR_INPUT: c_int = -1;
const REREG_ERR_CMD: c_int = -4;

/// The command part of `ibv_rereg_mr`: what the kernel checks, then the
/// engine's re-registration, then the C view.
fn rereg_cmd(
    m: &mut Mr,
    flags: c_int,
    pd: *mut ibv_pd,
    addr: *mut c_void,
    len: usize,
    access: c_int,
) -> Res<()> {
    if flags == 0 {
        return Err(libc::EINVAL);
    }
    let new_pd = if flags & REREG_PD != 0 {
        // SAFETY: the program's PD (NULL: EINVAL).
        let p = unsafe { Pd::from_ptr(pd)? };
        if p.ibv.context != m.ibv.context {
            return Err(libc::EINVAL);
        }
        Some(p)
    } else {
        None
    };
    let rights = if flags & REREG_ACCESS != 0 {
        Some(access_of(access)?)
    } else {
        None
    };
    if flags & REREG_TRANSLATION != 0 {
        // The rights the region will have decide whether it must be
        // writable.
        let need = if flags & REREG_ACCESS != 0 {
            access
        } else {
            m.mr.access().0 as c_int
        };
        pinnable(addr as usize, len, need)?;
        // The iova is the address, as rdma-core's providers pass it.
        // SAFETY: mapped with the rights needed (checked above); by re-registering it the
        // program hands the memory to the engine under verbs' rules, as
        // for ibv_reg_mr, and gets the old memory back.
        unsafe {
            m.mr.rereg_raw(addr.cast(), len, addr as u64, new_pd.map(|p| &p.pd), rights)
        }
        .map_err(verr)?;
        m.ibv.addr = addr;
        m.ibv.length = len;
        crate::unmap::moved(addr as usize, len, m as *mut Mr as usize, m.mr.revoker());
    } else {
        m.mr.rereg(new_pd.map(|p| &p.pd), rights).map_err(verr)?;
    }
    if let Some(p) = new_pd {
        p.users.fetch_add(1, Ordering::AcqRel);
        // SAFETY: the PD outlives its MRs (dealloc_pd refuses before).
        unsafe { &*m.pd }.users.fetch_sub(1, Ordering::AcqRel);
        m.pd = p;
        m.ibv.pd = pd;
    }
    Ok(())
}

export! {
    /// `ibv_rereg_mr`: a new PD, new rights and/or new memory for a
    /// region, which keeps its lkey and rkey (as rxe and most kernel
    /// drivers keep them). 0, or an `enum ibv_rereg_mr_err_code` with
    /// `errno` set: `IBV_REREG_MR_ERR_INPUT` for what libibverbs checks,
    /// `IBV_REREG_MR_ERR_CMD` for what the kernel refuses (no flag,
    /// invalid rights, a PD of another context, unmapped memory:
    /// `EFAULT`). On any error the region is as it was.
    fn ibv_rereg_mr(mr: *mut ibv_mr, flags: c_int, pd: *mut ibv_pd, addr: *mut c_void, len: usize, access: c_int) -> c_int {
        value_or(REREG_ERR_CMD, || {
            let mut code = REREG_ERR_INPUT;
            let e = errno_ret(|| {
                // SAFETY: the program's region (an Mr: its first field).
                let m = unsafe { arg_mut(mr.cast::<Mr>())? };
                let supported = REREG_TRANSLATION | REREG_PD | REREG_ACCESS;
                if flags & !supported != 0
                    || (flags & REREG_TRANSLATION != 0 && (len == 0 || addr.is_null()))
                    || (access != 0 && flags & REREG_ACCESS == 0)
                {
                    return Err(libc::EINVAL);
                }
                code = REREG_ERR_CMD;
                rereg_cmd(m, flags, pd, addr, len, access)
            });
            if e == 0 {
                return 0;
            }
            set_errno(e);
            code
        })
    }
}

/// An address handle: the C view first.
#[repr(C)]
pub(crate) struct Ah {
    pub(crate) ibv: ibv_ah,
    pub(crate) ah: roce_verbs::AddressHandle,
    pd: *const Pd,
}

/// The engine's address vector of a C `ibv_ah_attr`. RoCE needs the GRH
/// (`is_global`): without it there is no IP address to send to.
pub(crate) fn av_of(a: &ibv_ah_attr) -> Res<roce_verbs::AddressVector> {
    if a.is_global == 0 {
        return Err(libc::EINVAL);
    }
    let dest: IpAddr = addr_of(&a.grh.dgid);
    if dest.is_unspecified() {
        return Err(libc::EINVAL);
    }
    Ok(roce_verbs::AddressVector {
        dest,
        sgid_index: a.grh.sgid_index,
        hop_limit: a.grh.hop_limit,
        traffic_class: a.grh.traffic_class,
        flow_label: a.grh.flow_label & 0xf_ffff,
    })
}

export! {
    /// `ibv_create_ah`.
    fn ibv_create_ah(pd: *mut ibv_pd, attr: *mut ibv_ah_attr) -> *mut ibv_ah {
        ptr_ret(|| {
            // SAFETY: the program's pointers.
            let (p, a) = unsafe { (Pd::from_ptr(pd)?, arg(attr)?) };
            let av = av_of(a)?;
            if av.sgid_index as usize >= p.ctx().gids.len() {
                return Err(libc::EINVAL);
            }
            let mut attr = AhAttr::new(av.dest);
            attr.hop_limit = av.hop_limit;
            attr.traffic_class = av.traffic_class;
            attr.sgid_index = av.sgid_index;
            let ah = p.pd.create_ah(attr).map_err(crate::context::gid_err)?;
            p.users.fetch_add(1, Ordering::AcqRel);
            let b = Box::new(Ah { ibv: ibv_ah { context: p.ibv.context, pd, handle: 0 }, ah, pd: p });
            Ok(Box::into_raw(b).cast())
        })
    }
}

export! {
    /// `ibv_destroy_ah`.
    fn ibv_destroy_ah(ah: *mut ibv_ah) -> c_int {
        errno_ret(|| {
            if ah.is_null() {
                return Err(libc::EINVAL);
            }
            // SAFETY: allocated by ibv_create_ah; the program gives it up.
            let a = unsafe { Box::from_raw(ah.cast::<Ah>()) };
            // SAFETY: the PD outlives its AHs.
            unsafe { &*a.pd }.users.fetch_sub(1, Ordering::AcqRel);
            Ok(())
        })
    }
}
