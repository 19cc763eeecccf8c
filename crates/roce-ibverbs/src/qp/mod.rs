//! Queue pairs: create (`ibv_create_qp`, `ibv_create_qp_ex`), modify,
//! query, destroy. Posting (`ops.post_send`, `ops.post_recv`, the
//! `ibv_wr_*` builder) is in `post`, over the work-request lists of
//! `crate::wr`.

use std::os::raw::{c_int, c_void};
use std::sync::atomic::Ordering;

use roce_verbs::{Access, Psn, Qkey, QpAttr, QpAttrMask, QpCaps, QpInitAttr, QpState, QpType, Qpn};

use crate::abi::consts::*;
use crate::abi::*;
use crate::context::{gid_of, mtu_enum, same_context, Context};
use crate::cq::Cq;
use crate::ffi::value_or;
use crate::ffi::Raw;
use crate::ffi::{arg, arg_mut, errno_ret, ptr_ret, verr, Res};
use crate::pd::{av_of, Pd};
use crate::srq::Srq;
use post::Builder;

mod post;

/// A QP: the C view first (an `ibv_qp_ex`, whose prefix is the `ibv_qp`).
#[repr(C)]
pub(crate) struct Qp {
    pub(crate) ibv: ibv_qp_ex,
    pub(crate) qp: roce_verbs::QueuePair,
    pub(crate) pd: *const Pd,
    pub(crate) send_cq: *const Cq,
    pub(crate) recv_cq: *const Cq,
    pub(crate) srq: *const Srq,
    pub(crate) cap: ibv_qp_cap,
    pub(crate) sq_sig_all: bool,
    /// The work request `ibv_wr_*` is building (see `post`).
    pub(crate) builder: std::cell::UnsafeCell<Builder>,
}

impl Qp {
    /// # Safety
    /// `p` must be NULL or a QP this library created and not destroyed.
    pub(crate) unsafe fn from_ptr<'a>(p: *mut ibv_qp) -> Res<&'a Qp> {
        // SAFETY: `ibv.qp_base` is at offset 0 of the repr(C) Qp.
        unsafe { arg(p.cast::<Qp>()) }
    }

    pub(crate) fn pd(&self) -> &Pd {
        // SAFETY: a QP's PD outlives it (dealloc refuses before).
        unsafe { &*self.pd }
    }
}

fn qp_type_of(t: u32) -> Res<QpType> {
    match t {
        IBV_QPT_RC => Ok(QpType::Rc),
        IBV_QPT_UC => Ok(QpType::Uc),
        IBV_QPT_UD => Ok(QpType::Ud),
        // XRC, raw packet, driver QPs: not on this device.
        _ => Err(libc::EOPNOTSUPP),
    }
}

fn caps_checked(cap: &ibv_qp_cap, srq: bool) -> Res<QpCaps> {
    let l = roce_verbs::LIMITS;
    let recv_wr = if srq { 0 } else { cap.max_recv_wr };
    if cap.max_send_wr > l.max_qp_wr
        || recv_wr > l.max_qp_wr
        || cap.max_send_sge > l.max_sge
        || cap.max_recv_sge > l.max_sge
        || cap.max_inline_data > l.max_inline_data
    {
        return Err(libc::EINVAL);
    }
    let max_send_sge = cap.max_send_sge.max(1);
    Ok(QpCaps {
        max_send_wr: cap.max_send_wr.max(1),
        max_recv_wr: recv_wr.max(1),
        max_send_sge,
        max_recv_sge: cap.max_recv_sge.max(1),
        // At least what the send queue's scatter list would take, as rxe
        // and mlx5 round it up (a WQE's SGE space holds inline data):
        // rdma_xclient posts 16 inline bytes on a QP created with 0.
        max_inline_data: cap
            .max_inline_data
            .max(max_send_sge.saturating_mul(16))
            .min(l.max_inline_data),
    })
}

#[allow(clippy::too_many_arguments)]
fn create(
    pd_ptr: *mut ibv_pd,
    qp_context: *mut c_void,
    send_cq: *mut ibv_cq,
    recv_cq: *mut ibv_cq,
    srq: *mut ibv_srq,
    cap: &mut ibv_qp_cap,
    qp_type: u32,
    sq_sig_all: c_int,
) -> Res<*mut ibv_qp> {
    // SAFETY: the program's PD, CQs and SRQ (or NULL).
    let (pd, scq, rcq) = unsafe {
        (
            Pd::from_ptr(pd_ptr)?,
            Cq::from_ptr(send_cq)?,
            Cq::from_ptr(recv_cq)?,
        )
    };
    // SAFETY: as above.
    let s = unsafe { srq.cast::<Srq>().as_ref() };
    let mut ctxs = vec![pd.ibv.context, scq.ibv.context, rcq.ibv.context];
    ctxs.extend(s.map(|s| s.context()));
    same_context(&ctxs)?;
    let t = qp_type_of(qp_type)?;
    let caps = caps_checked(cap, s.is_some())?;
    let mut init = QpInitAttr::new(t, &scq.cq, &rcq.cq)
        .cap(caps)
        .sq_sig_all(sq_sig_all != 0);
    if let Some(s) = s {
        init = init.srq(&s.srq);
    }
    let qp = pd.pd.create_qp(&init).map_err(verr)?;
    // What the QP got, as the kernel reports it back.
    cap.max_send_wr = caps.max_send_wr;
    cap.max_recv_wr = if s.is_some() { 0 } else { caps.max_recv_wr };
    cap.max_send_sge = caps.max_send_sge;
    cap.max_recv_sge = caps.max_recv_sge;
    cap.max_inline_data = caps.max_inline_data;
    let ctx = pd.ctx();
    // SAFETY: all-zero is a valid ibv_qp_ex (NULLs, Nones, zeros).
    let mut ibv: ibv_qp_ex = unsafe { std::mem::zeroed() };
    let b = &mut ibv.qp_base;
    b.context = ctx.ibv();
    b.qp_context = qp_context;
    b.pd = pd_ptr;
    b.send_cq = send_cq;
    b.recv_cq = recv_cq;
    b.srq = srq;
    b.handle = qp.qpn().value();
    b.qp_num = qp.qpn().value();
    b.state = 0;
    b.qp_type = qp_type;
    b.mutex = libc::PTHREAD_MUTEX_INITIALIZER;
    b.cond = libc::PTHREAD_COND_INITIALIZER;
    post::install_builder(&mut ibv);
    let qpn = qp.qpn().value();
    crate::debug::qp_created(qpn);
    let q = Box::into_raw(Box::new(Qp {
        ibv,
        qp,
        pd,
        send_cq: scq,
        recv_cq: rcq,
        srq: s.map_or(std::ptr::null(), |s| s as *const Srq),
        cap: *cap,
        sq_sig_all: sq_sig_all != 0,
        builder: Default::default(),
    }));
    pd.users.fetch_add(1, Ordering::AcqRel);
    scq.users.fetch_add(1, Ordering::AcqRel);
    rcq.users.fetch_add(1, Ordering::AcqRel);
    if let Some(s) = s {
        s.users.fetch_add(1, Ordering::AcqRel);
    }
    ctx.objects
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .qps
        .insert(qpn, Raw(q.cast()));
    Ok(q.cast())
}

export! {
    /// `ibv_create_qp`: `attr->cap` is updated with what the QP got.
    fn ibv_create_qp(pd: *mut ibv_pd, attr: *mut ibv_qp_init_attr) -> *mut ibv_qp {
        ptr_ret(|| {
            // SAFETY: the program's attributes.
            let a = unsafe { arg_mut(attr)? };
            create(pd, a.qp_context, a.send_cq, a.recv_cq, a.srq, &mut a.cap, a.qp_type, a.sq_sig_all)
        })
    }
}

/// `comp_mask` bits of `ibv_qp_init_attr_ex` this device takes: PD,
/// create_flags (none of which it has) and send_ops_flags.
const QP_INIT_ATTR_PD: u32 = 1 << 0;
const QP_INIT_ATTR_CREATE_FLAGS: u32 = 1 << 2;
const QP_INIT_ATTR_SEND_OPS_FLAGS: u32 = 1 << 6;

/// The `ibv_wr_*` operations the builder implements (`send_ops_flags`).
const SEND_OPS: u64 = 0x7f | (1 << 8); // WRITE(_IMM), SEND(_IMM), READ, CAS, FAA, SEND_INV

entry! {
    /// `verbs_context.create_qp_ex`.
    fn create_qp_ex(
        ctx: *mut ibv_context,
        attr: *mut ibv_qp_init_attr_ex,
    ) -> *mut ibv_qp {
        ptr_ret(|| {
            // SAFETY: the program's attributes.
            let a = unsafe { arg_mut(attr)? };
            // A field counts only when comp_mask names it; a creation flag is
            // EOPNOTSUPP, as rxe answers.
            let known = QP_INIT_ATTR_PD | QP_INIT_ATTR_CREATE_FLAGS | QP_INIT_ATTR_SEND_OPS_FLAGS;
            if a.comp_mask & !known != 0
                || (a.comp_mask & QP_INIT_ATTR_CREATE_FLAGS != 0 && a.create_flags != 0)
            {
                return Err(libc::EOPNOTSUPP);
            }
            if a.comp_mask & QP_INIT_ATTR_PD == 0 {
                return Err(libc::EINVAL);
            }
            // SAFETY: the program's PD.
            same_context(&[ctx, unsafe { Pd::from_ptr(a.pd)? }.ibv.context])?;
            if a.comp_mask & QP_INIT_ATTR_SEND_OPS_FLAGS != 0 && a.send_ops_flags & !SEND_OPS != 0 {
                return Err(libc::EOPNOTSUPP);
            }
            create(
                a.pd,
                a.qp_context,
                a.send_cq,
                a.recv_cq,
                a.srq,
                &mut a.cap,
                a.qp_type,
                a.sq_sig_all,
            )
        })
    }
}

/// Installs the QP entries of a context's ops tables.
pub(crate) fn install(v: &mut verbs_context) {
    v.create_qp_ex = Some(create_qp_ex);
    post::install(v);
}

export! {
    /// `ibv_qp_to_qp_ex`: every QP of this library is an extended one.
    fn ibv_qp_to_qp_ex(qp: *mut ibv_qp) -> *mut ibv_qp_ex {
        value_or(std::ptr::null_mut(), || qp.cast())
    }
}

fn state_of(s: u32) -> Res<QpState> {
    QpState::ALL.get(s as usize).copied().ok_or(libc::EINVAL)
}

/// The engine's attributes of a C modify request (only the fields the
/// mask names are read).
fn attr_of(a: &ibv_qp_attr, mask: QpAttrMask) -> Res<QpAttr> {
    let mut r = QpAttr::default();
    if mask.contains(QpAttrMask::STATE) {
        r.qp_state = state_of(a.qp_state)?;
    }
    if mask.contains(QpAttrMask::CUR_STATE) {
        r.cur_qp_state = state_of(a.cur_qp_state)?;
    }
    if mask.contains(QpAttrMask::PATH_MTU) {
        r.path_mtu = roce_core::qp::mtu_from_enum(a.path_mtu as u8).ok_or(libc::EINVAL)?;
    }
    r.qkey = Qkey::new(a.qkey);
    r.rq_psn = Psn::new(a.rq_psn & 0xff_ffff);
    r.sq_psn = Psn::new(a.sq_psn & 0xff_ffff);
    r.dest_qp_num = Qpn::new(a.dest_qp_num & 0xff_ffff);
    if mask.contains(QpAttrMask::ACCESS_FLAGS) {
        if a.qp_access_flags & !0x1f != 0 {
            return Err(libc::EINVAL);
        }
        r.qp_access_flags = Access(a.qp_access_flags & 0xf);
    }
    r.pkey_index = a.pkey_index;
    r.port_num = a.port_num;
    if mask.contains(QpAttrMask::AV) {
        r.ah_attr = av_of(&a.ah_attr)?;
    }
    r.timeout = a.timeout;
    r.retry_cnt = a.retry_cnt;
    r.rnr_retry = a.rnr_retry;
    r.min_rnr_timer = a.min_rnr_timer;
    r.max_rd_atomic = a.max_rd_atomic;
    r.max_dest_rd_atomic = a.max_dest_rd_atomic;
    Ok(r)
}

export! {
    /// `ibv_modify_qp`: the transition and its mask are checked as the
    /// kernel checks them (IBTA Vol 1 §11.2.1.3, the state table of
    /// `QpAttrMask::required`).
    fn ibv_modify_qp(qp: *mut ibv_qp, attr: *mut ibv_qp_attr, mask: c_int) -> c_int {
        errno_ret(|| {
            // SAFETY: the program's QP and attributes.
            let (q, a) = unsafe { (Qp::from_ptr(qp)?, arg(attr)?) };
            crate::trace::note("ibv_modify_qp", |s| crate::trace::qp_attr(s, a, mask as u32));
            let m = QpAttrMask(mask as u32);
            if m.contains(QpAttrMask::ALT_PATH) || m.contains(QpAttrMask::PATH_MIG_STATE) {
                // No alternate path on this device (no APM).
                return Err(libc::EINVAL);
            }
            // One port: the kernel's modify_qp checks both port numbers.
            if m.contains(QpAttrMask::PORT) && a.port_num != 1 {
                return Err(libc::EINVAL);
            }
            if m.contains(QpAttrMask::AV) && a.ah_attr.port_num != 1 {
                return Err(libc::EINVAL);
            }
            // Read/atomic depths beyond what ibv_query_device reports
            // (rxe_qp_chk_attr: EINVAL).
            let l = roce_verbs::LIMITS;
            if (m.contains(QpAttrMask::MAX_QP_RD_ATOMIC) && u32::from(a.max_rd_atomic) > l.max_qp_init_rd_atom)
                || (m.contains(QpAttrMask::MAX_DEST_RD_ATOMIC)
                    && u32::from(a.max_dest_rd_atomic) > l.max_qp_rd_atom)
            {
                return Err(libc::EINVAL);
            }
            if m.contains(QpAttrMask::PKEY_INDEX) && a.pkey_index != 0 {
                return Err(libc::EINVAL);
            }
            if m.contains(QpAttrMask::AV) && a.ah_attr.grh.sgid_index as usize >= q.pd().ctx().gids.len() {
                return Err(libc::EINVAL);
            }
            let r = attr_of(a, m)?;
            q.qp.modify(&r, m).map_err(crate::context::gid_err)?;
            if m.contains(QpAttrMask::DEST_QPN) {
                crate::debug::qp_connected(q.qp.qpn().value(), r.dest_qp_num.value());
            }
            let state = q.qp.state() as u32;
            // SAFETY: the program's QP; `state` is a plain field it reads.
            unsafe { (*qp).state = state };
            Ok(())
        })
    }
}

export! {
    /// `ibv_query_qp`: every attribute, whatever the mask asks.
    fn ibv_query_qp(qp: *mut ibv_qp, attr: *mut ibv_qp_attr, _mask: c_int, init: *mut ibv_qp_init_attr) -> c_int {
        errno_ret(|| {
            // SAFETY: the program's QP and output structures.
            let (q, out, init) = unsafe { (Qp::from_ptr(qp)?, arg_mut(attr)?, arg_mut(init)?) };
            let a = q.qp.query().map_err(verr)?;
            *out = ibv_qp_attr::default();
            out.qp_state = a.qp_state as u32;
            out.cur_qp_state = a.cur_qp_state as u32;
            out.path_mtu = mtu_enum(a.path_mtu);
            out.qkey = a.qkey.value();
            out.rq_psn = a.rq_psn.value();
            out.sq_psn = a.sq_psn.value();
            out.dest_qp_num = a.dest_qp_num.value();
            out.qp_access_flags = a.qp_access_flags.0;
            out.cap = q.cap;
            out.ah_attr = ibv_ah_attr {
                grh: ibv_global_route {
                    dgid: gid_of(a.ah_attr.dest),
                    flow_label: a.ah_attr.flow_label,
                    sgid_index: a.ah_attr.sgid_index,
                    hop_limit: a.ah_attr.hop_limit,
                    traffic_class: a.ah_attr.traffic_class,
                },
                is_global: 1,
                port_num: 1,
                ..Default::default()
            };
            out.pkey_index = a.pkey_index;
            out.max_rd_atomic = a.max_rd_atomic;
            out.max_dest_rd_atomic = a.max_dest_rd_atomic;
            out.min_rnr_timer = a.min_rnr_timer;
            out.port_num = 1;
            out.timeout = a.timeout;
            out.retry_cnt = a.retry_cnt;
            out.rnr_retry = a.rnr_retry;
            init.qp_context = q.ibv.qp_base.qp_context;
            init.send_cq = q.ibv.qp_base.send_cq;
            init.recv_cq = q.ibv.qp_base.recv_cq;
            init.srq = q.ibv.qp_base.srq;
            init.cap = q.cap;
            init.qp_type = q.ibv.qp_base.qp_type;
            init.sq_sig_all = q.sq_sig_all as c_int;
            Ok(())
        })
    }
}

export! {
    /// `ibv_destroy_qp`.
    fn ibv_destroy_qp(qp: *mut ibv_qp) -> c_int {
        errno_ret(|| {
            // SAFETY: the program's QP.
            let q = unsafe { Qp::from_ptr(qp)? };
            crate::config::log!("QP {:#08x} destroyed: {:?}", q.qp.qpn().value(), q.qp.counters());
            let ctx: &Context = q.pd().ctx();
            crate::debug::qp_destroyed((&ctx.device.info.name(), ctx.local), &q.qp);
            ctx.objects.lock().unwrap_or_else(|p| p.into_inner()).qps.remove(&q.qp.qpn().value());
            q.pd().users.fetch_sub(1, Ordering::AcqRel);
            // SAFETY: the CQs and SRQ outlive the QP (their destroy refuses
            // while it lives).
            unsafe {
                (*q.send_cq).users.fetch_sub(1, Ordering::AcqRel);
                (*q.recv_cq).users.fetch_sub(1, Ordering::AcqRel);
                if let Some(s) = q.srq.as_ref() {
                    s.users.fetch_sub(1, Ordering::AcqRel);
                }
            }
            // SAFETY: allocated by create; the program gives it up.
            drop(unsafe { Box::from_raw(qp.cast::<Qp>()) });
            Ok(())
        })
    }
}
