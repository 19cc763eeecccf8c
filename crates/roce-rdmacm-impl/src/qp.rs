//! What librdmacm creates for a program: `rdma_create_qp(_ex)` (with its
//! CQs and completion channels when the program gives none, as
//! `rdma_verbs.h`'s helpers expect), `rdma_destroy_qp`,
//! `rdma_create_srq(_ex)`, `rdma_destroy_srq`, and the endpoints of
//! `rdma_create_ep` / `rdma_destroy_ep`.
//!
//! Everything goes through this library's own verbs, as a program's
//! calls would.

use std::os::raw::c_int;

use super::id::{bind, destroy};
use super::route::sockaddr_in;
use super::{rc, Id};
use crate::abi::consts::{IBV_QPT_RC, IBV_QPT_UC, IBV_QPT_UD};
use crate::abi::*;
use crate::ffi::{arg_mut, Res};
use crate::verbs::ibv_alloc_pd;
use crate::verbs::{
    ibv_create_comp_channel, ibv_create_cq, ibv_destroy_comp_channel, ibv_destroy_cq,
};
use crate::verbs::{ibv_create_qp, ibv_destroy_qp, ibv_modify_qp};
use crate::verbs::{ibv_create_srq, ibv_destroy_srq};

/// `IBV_ACCESS_LOCAL_WRITE | REMOTE_WRITE | REMOTE_READ | REMOTE_ATOMIC`.
const CONN_ACCESS: u32 = 0xf;

use crate::ffi::last_errno;
use crate::ffi::void;

/// The id's PD: `pd`, else the id's, else a new one the id owns.
fn pd_for(i: &Id, pd: *mut ibv_pd) -> Res<*mut ibv_pd> {
    // SAFETY: the id's C view.
    let c = unsafe { &mut *i.c() };
    if !pd.is_null() {
        if c.pd.is_null() {
            c.pd = pd;
        }
        return Ok(pd);
    }
    if !c.pd.is_null() {
        return Ok(c.pd);
    }
    // SAFETY: a context of this library.
    let p = unsafe { ibv_alloc_pd(c.verbs) };
    if p.is_null() {
        return Err(last_errno());
    }
    c.pd = p;
    i.st().own_pd = true;
    Ok(p)
}

/// A completion channel and a CQ of `size` entries on it.
fn cq_with_channel(
    verbs: *mut ibv_context,
    size: u32,
    owner: *mut rdma_cm_id,
) -> Res<(*mut ibv_comp_channel, *mut ibv_cq)> {
    // SAFETY: a context of this library.
    let ch = unsafe { ibv_create_comp_channel(verbs) };
    if ch.is_null() {
        return Err(last_errno());
    }
    // SAFETY: as above; the channel just made.
    let cq = unsafe { ibv_create_cq(verbs, size.max(1) as c_int, owner.cast(), ch, 0) };
    if cq.is_null() {
        let e = last_errno();
        // SAFETY: the channel just made, unused.
        unsafe { ibv_destroy_comp_channel(ch) };
        return Err(e);
    }
    Ok((ch, cq))
}

/// Destroys the CQs and channels `rdma_create_qp` made for the id.
fn destroy_own_cqs(i: &Id) {
    if !std::mem::take(&mut i.st().own_cqs) {
        return;
    }
    // SAFETY: the id's C view; the CQs and channels are the library's.
    let c = unsafe { &mut *i.c() };
    // SAFETY: CQs and channels this library made for the id, no QP left
    // on them.
    unsafe {
        if !c.recv_cq.is_null() {
            ibv_destroy_cq(c.recv_cq);
        }
        if !c.send_cq.is_null() && c.send_cq != c.recv_cq {
            ibv_destroy_cq(c.send_cq);
        }
        if !c.recv_cq_channel.is_null() {
            ibv_destroy_comp_channel(c.recv_cq_channel);
        }
        if !c.send_cq_channel.is_null() && c.send_cq_channel != c.recv_cq_channel {
            ibv_destroy_comp_channel(c.send_cq_channel);
        }
    }
    c.recv_cq = std::ptr::null_mut();
    c.send_cq = std::ptr::null_mut();
    c.recv_cq_channel = std::ptr::null_mut();
    c.send_cq_channel = std::ptr::null_mut();
}

fn modify(qp: *mut ibv_qp, a: &mut ibv_qp_attr, mask: c_int) -> Res<()> {
    // SAFETY: a QP this library just made; a live attribute structure.
    match unsafe { ibv_modify_qp(qp, a, mask) } {
        0 => Ok(()),
        e => Err(e),
    }
}

/// Brings a new QP to the state rdma_cm leaves it in: RC/UC in INIT
/// (receives may be posted before the connection), UD in RTS with
/// rdma_cm's Q_Key.
fn init_qp(qp: *mut ibv_qp, qp_type: u32) -> Res<()> {
    let mut a = ibv_qp_attr {
        qp_state: 1, // INIT
        pkey_index: 0,
        port_num: 1,
        ..Default::default()
    };
    // STATE | PKEY_INDEX | PORT
    let base = 1 | (1 << 4) | (1 << 5);
    if qp_type == IBV_QPT_UD {
        a.qkey = RDMA_UDP_QKEY;
        modify(qp, &mut a, base | (1 << 6))?; // QKEY
        a.qp_state = 2; // RTR
        modify(qp, &mut a, 1)?;
        a.qp_state = 3; // RTS
        a.sq_psn = 0;
        modify(qp, &mut a, 1 | (1 << 16)) // SQ_PSN
    } else {
        a.qp_access_flags = CONN_ACCESS;
        modify(qp, &mut a, base | (1 << 3)) // ACCESS_FLAGS
    }
}

/// `rdma_create_qp` on a live id.
pub(crate) fn create_qp(i: &Id, pd: *mut ibv_pd, attr: &mut ibv_qp_init_attr) -> Res<()> {
    let ctx = i.ctx()?;
    // SAFETY: the id's C view.
    let c = unsafe { &mut *i.c() };
    if !c.qp.is_null() {
        return Err(libc::EINVAL);
    }
    if !matches!(attr.qp_type, IBV_QPT_RC | IBV_QPT_UC | IBV_QPT_UD) {
        return Err(libc::EOPNOTSUPP);
    }
    let pd = pd_for(i, pd)?;
    if attr.srq.is_null() {
        // An SRQ made on the id (`rdma_create_srq`) serves its QP.
        attr.srq = c.srq;
    }
    let mut made = false;
    if attr.send_cq.is_null() || attr.recv_cq.is_null() {
        if !c.recv_cq.is_null() || !c.send_cq.is_null() {
            return Err(libc::EINVAL);
        }
        let (rch, rcq) = cq_with_channel(ctx.ibv(), attr.cap.max_recv_wr, i.c())?;
        c.recv_cq_channel = rch;
        c.recv_cq = rcq;
        match cq_with_channel(ctx.ibv(), attr.cap.max_send_wr, i.c()) {
            Ok((sch, scq)) => {
                c.send_cq_channel = sch;
                c.send_cq = scq;
            }
            Err(e) => {
                i.st().own_cqs = true;
                destroy_own_cqs(i);
                return Err(e);
            }
        }
        i.st().own_cqs = true;
        made = true;
        if attr.send_cq.is_null() {
            attr.send_cq = c.send_cq;
        }
        if attr.recv_cq.is_null() {
            attr.recv_cq = c.recv_cq;
        }
    }
    // SAFETY: the id's PD and the program's (or our) attributes.
    let qp = unsafe { ibv_create_qp(pd, attr) };
    if qp.is_null() {
        let e = last_errno();
        if made {
            destroy_own_cqs(i);
        }
        return Err(e);
    }
    if let Err(e) = init_qp(qp, attr.qp_type) {
        // SAFETY: the QP just made.
        unsafe { ibv_destroy_qp(qp) };
        if made {
            destroy_own_cqs(i);
        }
        return Err(e);
    }
    c.qp = qp;
    c.qp_type = attr.qp_type;
    if c.srq.is_null() {
        c.srq = attr.srq;
    }
    Ok(())
}

export! {
    /// `rdma_create_qp`.
    fn rdma_create_qp(id: *mut rdma_cm_id, pd: *mut ibv_pd, attr: *mut ibv_qp_init_attr) -> c_int {
        rc(|| {
            // SAFETY: the program's id and attributes.
            let (i, a) = unsafe { (Id::from_ptr(id)?, arg_mut(attr)?) };
            create_qp(i, pd, a)
        })
    }
}

export! {
    /// `rdma_create_qp_ex`: the attributes of `ibv_qp_init_attr_ex` that
    /// `rdma_create_qp` takes (its PD when the mask names one).
    fn rdma_create_qp_ex(id: *mut rdma_cm_id, attr: *mut ibv_qp_init_attr_ex) -> c_int {
        rc(|| {
            // SAFETY: the program's id and attributes.
            let (i, a) = unsafe { (Id::from_ptr(id)?, arg_mut(attr)?) };
            if a.create_flags != 0 || a.comp_mask & !0x1 != 0 {
                return Err(libc::EOPNOTSUPP);
            }
            let pd = if a.comp_mask & 1 != 0 { a.pd } else { std::ptr::null_mut() };
            let mut b = ibv_qp_init_attr {
                qp_context: a.qp_context,
                send_cq: a.send_cq,
                recv_cq: a.recv_cq,
                srq: a.srq,
                cap: a.cap,
                qp_type: a.qp_type,
                sq_sig_all: a.sq_sig_all,
            };
            create_qp(i, pd, &mut b)?;
            a.cap = b.cap;
            a.send_cq = b.send_cq;
            a.recv_cq = b.recv_cq;
            Ok(())
        })
    }
}

/// `rdma_destroy_qp` on a live id.
fn destroy_qp(i: &Id) {
    // SAFETY: the id's C view.
    let c = unsafe { &mut *i.c() };
    if !c.qp.is_null() {
        // SAFETY: the id's QP.
        unsafe { ibv_destroy_qp(c.qp) };
        c.qp = std::ptr::null_mut();
    }
    destroy_own_cqs(i);
}

export! {
    /// `rdma_destroy_qp`: the QP, and the CQs and channels
    /// `rdma_create_qp` made for it.
    fn rdma_destroy_qp(id: *mut rdma_cm_id) {
        void(|| {
            // SAFETY: the program's id.
            destroy_qp(unsafe { Id::from_ptr(id) }?);
            Ok(())
        })
    }
}

export! {
    /// `rdma_create_srq`.
    fn rdma_create_srq(id: *mut rdma_cm_id, pd: *mut ibv_pd, attr: *mut ibv_srq_init_attr) -> c_int {
        rc(|| {
            // SAFETY: the program's id and attributes.
            let (i, a) = unsafe { (Id::from_ptr(id)?, arg_mut(attr)?) };
            i.ctx()?;
            let pd = pd_for(i, pd)?;
            // SAFETY: the PD and the program's attributes.
            let srq = unsafe { ibv_create_srq(pd, a) };
            if srq.is_null() {
                return Err(last_errno());
            }
            // SAFETY: the id's C view.
            unsafe { (*i.c()).srq = srq };
            Ok(())
        })
    }
}

export! {
    /// `rdma_create_srq_ex`: basic SRQs only (no XRC on this device).
    fn rdma_create_srq_ex(id: *mut rdma_cm_id, attr: *mut ibv_srq_init_attr_ex) -> c_int {
        rc(|| {
            // SAFETY: the program's id and attributes.
            let (_, a) = unsafe { (Id::from_ptr(id)?, arg_mut(attr)?) };
            // IBV_SRQ_INIT_ATTR_TYPE with a non-basic type, or XRC fields.
            if a.comp_mask & !0x3 != 0 || (a.comp_mask & 0x1 != 0 && a.srq_type != 0) {
                return Err(libc::EOPNOTSUPP);
            }
            let pd = if a.comp_mask & 0x2 != 0 { a.pd } else { std::ptr::null_mut() };
            let mut b = ibv_srq_init_attr { srq_context: a.srq_context, attr: a.attr };
            // SAFETY: forwarded to the basic call with the same objects.
            match unsafe { rdma_create_srq(id, pd, &mut b) } {
                0 => Ok(()),
                _ => Err(last_errno()),
            }
        })
    }
}

/// `rdma_destroy_srq` on a live id.
fn destroy_srq(i: &Id) {
    // SAFETY: the id's C view.
    let c = unsafe { &mut *i.c() };
    if !c.srq.is_null() {
        // SAFETY: the id's SRQ, made by rdma_create_srq.
        unsafe { ibv_destroy_srq(c.srq) };
        c.srq = std::ptr::null_mut();
    }
}

export! {
    /// `rdma_destroy_srq`.
    fn rdma_destroy_srq(id: *mut rdma_cm_id) {
        void(|| {
            // SAFETY: the program's id.
            destroy_srq(unsafe { Id::from_ptr(id) }?);
            Ok(())
        })
    }
}

export! {
    /// `rdma_create_ep`: a synchronous id from `rdma_getaddrinfo`'s
    /// answer: passive (bound, ready for `rdma_listen`; requests get a
    /// QP of `attr`) or active (address and route resolved, with a QP
    /// of `attr` when given).
    fn rdma_create_ep(out: *mut *mut rdma_cm_id, res: *mut rdma_addrinfo, pd: *mut ibv_pd, attr: *mut ibv_qp_init_attr) -> c_int {
        rc(|| {
            // SAFETY: the program's out pointer and address information.
            let (out, r) = unsafe { (arg_mut(out)?, arg_mut(res)?) };
            let space = if r.ai_port_space == 0 {
                if r.ai_qp_type == IBV_QPT_UD as c_int { ps::UDP } else { ps::TCP }
            } else {
                r.ai_port_space as u32
            };
            let mut idp: *mut rdma_cm_id = std::ptr::null_mut();
            // SAFETY: a new synchronous id.
            if unsafe { super::id::rdma_create_id(std::ptr::null_mut(), &mut idp, std::ptr::null_mut(), space) } != 0 {
                return Err(last_errno());
            }
            let made = (|| {
                // SAFETY: the id just made.
                let i = unsafe { Id::from_ptr(idp)? };
                if r.ai_qp_type != 0 {
                    // SAFETY: the id's C view, not yet the program's.
                    unsafe { (*i.c()).qp_type = r.ai_qp_type as u32 };
                }
                if r.ai_flags & rai::PASSIVE != 0 {
                    // SAFETY: the program's source address.
                    bind(i, unsafe { sockaddr_in(r.ai_src_addr)? })?;
                    // SAFETY: the id's C view.
                    unsafe { (*i.c()).pd = pd };
                    // SAFETY: the program's attributes (or NULL).
                    i.st().ep_qp_attr = unsafe { attr.as_ref() }.copied().map(|mut a| {
                        a.qp_type = r.ai_qp_type as u32;
                        a
                    });
                    return Ok(());
                }
                // SAFETY: the id and the program's addresses.
                let ret = unsafe {
                    super::id::rdma_resolve_addr(idp, r.ai_src_addr, r.ai_dst_addr, 2000)
                };
                if ret != 0 {
                    return Err(last_errno());
                }
                // SAFETY: the id.
                if unsafe { super::id::rdma_resolve_route(idp, 2000) } != 0 {
                    return Err(last_errno());
                }
                i.ack_held();
                // SAFETY: the program's attributes (or NULL).
                if let Some(a) = unsafe { attr.as_mut() } {
                    a.qp_type = r.ai_qp_type as u32;
                    create_qp(i, pd, a)?;
                }
                Ok(())
            })();
            if let Err(e) = made {
                let _ = destroy(idp);
                return Err(e);
            }
            *out = idp;
            Ok(())
        })
    }
}

export! {
    /// `rdma_destroy_ep`: the QP (and what `rdma_create_qp` made), the
    /// SRQ, the id, and the PD if the library allocated it.
    fn rdma_destroy_ep(id: *mut rdma_cm_id) {
        void(|| {
            // SAFETY: the program's id.
            let i = unsafe { Id::from_ptr(id) }?;
            destroy_qp(i);
            destroy_srq(i);
            destroy(id)
        })
    }
}
