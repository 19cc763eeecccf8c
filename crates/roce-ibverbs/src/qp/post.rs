//! Posting: `ops.post_send` / `ops.post_recv` (what `verbs.h`'s inline
//! `ibv_post_send` / `ibv_post_recv` call) and the extended QP's
//! work-request builder (`ibv_wr_start` ... `ibv_wr_complete`).

use std::os::raw::{c_int, c_void};

use roce_verbs::{
    Lkey, Payload, Qkey, Qpn, RemoteAddr, Rkey, SendBatch, SendFlags, SendOp, SendWr, Sge, UdDest,
};

use super::Qp;
use crate::abi::consts::*;
use crate::abi::*;
use crate::ffi::{errno_ret, post_errno, posted, void, Res};
use crate::pd::Ah;
use crate::wr::{inline, nth, post_recv_list, sgl, Walk};

/// The typed work request of a C one, and its destination on a UD QP
/// (always there: a UD WR without an address handle is `EINVAL`).
///
/// # Safety
/// `w` is the program's, with its pointers valid.
unsafe fn send_wr_of(q: &Qp, w: &ibv_send_wr) -> Res<(SendWr, Option<UdDest>)> {
    // SAFETY: the caller's contract.
    let sges = unsafe { sgl(w.sg_list, w.num_sge, q.cap.max_send_sge)? };
    // SAFETY: reading the union member the opcode selects.
    let (rdma, atomic, ud) = unsafe { (w.wr.rdma, w.wr.atomic, w.wr.ud) };
    let rdma_at = RemoteAddr::new(rdma.remote_addr, Rkey::new(rdma.rkey));
    let atomic_at = RemoteAddr::new(atomic.remote_addr, Rkey::new(atomic.rkey));
    let op = match w.opcode {
        IBV_WR_SEND => SendOp::Send,
        IBV_WR_SEND_WITH_IMM => SendOp::SendWithImm(u32::from_be(w.imm_or_inv)),
        IBV_WR_SEND_WITH_INV => SendOp::SendWithInv(Rkey::new(w.imm_or_inv)),
        IBV_WR_RDMA_WRITE => SendOp::Write { remote: rdma_at },
        IBV_WR_RDMA_WRITE_WITH_IMM => SendOp::WriteWithImm {
            remote: rdma_at,
            imm: u32::from_be(w.imm_or_inv),
        },
        IBV_WR_RDMA_READ => SendOp::Read { remote: rdma_at },
        IBV_WR_ATOMIC_CMP_AND_SWP => SendOp::CompareSwap {
            remote: atomic_at,
            compare: atomic.compare_add,
            swap: atomic.swap,
        },
        IBV_WR_ATOMIC_FETCH_AND_ADD => SendOp::FetchAdd {
            remote: atomic_at,
            add: atomic.compare_add,
        },
        // Memory windows, local invalidate, TSO: not on this device.
        _ => return Err(libc::EINVAL),
    };
    let payload = if w.send_flags & IBV_SEND_INLINE != 0 && !op.is_read_or_atomic() {
        // More than the QP takes inline: EINVAL (as rxe) before a byte
        // is copied.
        let len: u64 = sges.iter().map(|s| u64::from(s.length)).sum();
        if len > u64::from(q.cap.max_inline_data) {
            return Err(libc::EINVAL);
        }
        // SAFETY: inline data is the program's memory.
        Payload::Inline(unsafe { inline(sges.iter().map(|s| (s.addr, s.length as usize)))? })
    } else {
        Payload::Sgl(sges)
    };
    let ud = if q.qp.qp_type() == roce_verbs::QpType::Ud {
        // SAFETY: the program's AH (an Ah: its first field) or NULL.
        let ah = unsafe { ud.ah.cast::<Ah>().as_ref() }.ok_or(libc::EINVAL)?;
        crate::context::same_context(&[ah.ibv.context, q.ibv.qp_base.context])?;
        Some(ah.ah.ud_dest(
            Qpn::new(ud.remote_qpn & 0xff_ffff),
            Qkey::new(ud.remote_qkey),
        ))
    } else {
        None
    };
    let wr = SendWr {
        wr_id: w.wr_id,
        op,
        payload,
        // FENCE, SIGNALED, SOLICITED, INLINE have the engine's values.
        flags: SendFlags(w.send_flags & 0xf),
    };
    Ok((wr, ud))
}

/// Adds a converted WR to the call's batch, with its UD destination on a
/// UD QP.
fn push(batch: &mut SendBatch, (wr, dest): (SendWr, Option<UdDest>)) {
    match dest {
        Some(d) => batch.push_ud(wr, d),
        None => batch.push(wr),
    }
}

/// Posts the WRs converted so far (the first of them is the list's
/// head `wr`), then answers `e` at `at` if all went in, or the engine's
/// refusal at the first it took not.
///
/// # Safety
/// `wr` is the program's list, which `wrs` were converted from.
unsafe fn post_then(
    q: &Qp,
    wr: *mut ibv_send_wr,
    wrs: &mut SendBatch,
    e: c_int,
    at: *mut ibv_send_wr,
) -> Result<(), (c_int, *mut ibv_send_wr)> {
    match q.qp.post_send_batch(wrs) {
        Ok(()) => Err((e, at)),
        // SAFETY: n is below the WRs walked.
        Err(pe) => Err((post_errno(&pe.error), unsafe { nth(wr, pe.posted) })),
    }
}

entry! {
    /// `ops.post_send`. On error `*bad` is the first WR not posted; the
    /// ones before it are posted, as a provider posts them. The list is
    /// converted first into a [`SendBatch`] (no heap for up to eight WRs)
    /// and posted under one lock; at most `max_send_wr` WRs
    /// are walked (see [`Walk`]). Each WR becomes a typed
    /// [`SendWr`] (the remote address only on the operations that have
    /// one) by moves, with no heap for up to two SGEs.
    fn post_send(qp: *mut ibv_qp, wr: *mut ibv_send_wr, bad: *mut *mut ibv_send_wr) -> c_int {
        posted(bad, wr, || {
            // SAFETY: the program's QP.
            let q = unsafe { Qp::from_ptr(qp) }.map_err(|e| (e, wr))?;
            let mut wrs = SendBatch::new();
            let mut walk = Walk::new(wr, q.cap.max_send_wr as usize);
            loop {
                // SAFETY: the program's list.
                let cur = match unsafe { walk.step() } {
                    Ok(Some(p)) => p,
                    Ok(None) => break,
                    // SAFETY: as above.
                    Err(over) => return unsafe { post_then(q, wr, &mut wrs, libc::ENOMEM, over) },
                };
                // SAFETY: the program's WR.
                match unsafe { send_wr_of(q, &*cur) } {
                    Ok(s) => push(&mut wrs, s),
                    // SAFETY: as above.
                    Err(e) => return unsafe { post_then(q, wr, &mut wrs, e, cur) },
                }
            }
            // SAFETY: as above.
            q.qp.post_send_batch(&mut wrs)
                .map_err(|e| (post_errno(&e.error), unsafe { nth(wr, e.posted) }))
        })
    }
}

entry! {
    /// `ops.post_recv`.
    fn post_recv(qp: *mut ibv_qp, wr: *mut ibv_recv_wr, bad: *mut *mut ibv_recv_wr) -> c_int {
        posted(bad, wr, || {
            // SAFETY: the program's QP.
            let q = unsafe { Qp::from_ptr(qp) }.map_err(|e| (e, wr))?;
            if !q.srq.is_null() {
                // Its receives come from the SRQ.
                return Err((libc::EINVAL, wr));
            }
            let (depth, max_sge) = (q.cap.max_recv_wr, q.cap.max_recv_sge);
            // SAFETY: the program's list.
            unsafe { post_recv_list(wr, depth, max_sge, |r| q.qp.post_recv(r)) }
        })
    }
}

/// Installs the posting entries of a context's ops table.
pub(crate) fn install(v: &mut verbs_context) {
    v.context.ops.post_send = Some(post_send);
    v.context.ops.post_recv = Some(post_recv);
}

// --- the work-request builder of ibv_qp_ex ------------------------------

/// The WRs between `ibv_wr_start` and `ibv_wr_complete`, and the first
/// error met (reported by `ibv_wr_complete`, as providers do).
#[derive(Default)]
pub(crate) struct Builder {
    wrs: Vec<SendWr>,
    /// Each WR's UD destination (`ibv_wr_set_ud_addr`), beside it.
    dests: Vec<Option<UdDest>>,
    error: Option<c_int>,
}

/// # Safety
/// `q` is a QP of this library, used by one thread between `wr_start`
/// and `wr_complete`/`wr_abort` (the verbs rule for the builder).
unsafe fn builder<'a>(q: *mut ibv_qp_ex) -> (&'a Qp, &'a mut Builder, &'a ibv_qp_ex) {
    // SAFETY: the caller's contract.
    let qp = unsafe { &*q.cast::<Qp>() };
    // SAFETY: as above: only the building thread touches the builder.
    (qp, unsafe { &mut *qp.builder.get() }, &qp.ibv)
}

/// Starts a new WR of `op` with the QP's current `wr_id` and `wr_flags`.
///
/// # Safety
/// As [`builder`].
unsafe fn begin(q: *mut ibv_qp_ex, op: SendOp) {
    // SAFETY: the caller's contract.
    let (qp, b, x) = unsafe { builder(q) };
    // No more WRs than the send queue holds (rxe: ENOSPC once it is full).
    if b.wrs.len() >= qp.cap.max_send_wr as usize {
        b.error.get_or_insert(libc::ENOSPC);
        return;
    }
    b.wrs.push(SendWr {
        wr_id: x.wr_id,
        op,
        payload: Payload::Sgl(Default::default()),
        flags: SendFlags(x.wr_flags & 0xf),
    });
    b.dests.push(None);
}

/// The WR being built, or the builder's error (`EINVAL`) if there is
/// none. Every setter reaches the WR through the one `&mut Builder` it
/// took from [`builder`], never through a second.
fn last(b: &mut Builder) -> Option<&mut SendWr> {
    if b.wrs.is_empty() {
        b.error.get_or_insert(libc::EINVAL);
    }
    b.wrs.last_mut()
}

entry! {
    /// `ibv_wr_start`.
    fn wr_start(q: *mut ibv_qp_ex) {
        void(|| {
            // SAFETY: the program's QP.
            let (_, b, _) = unsafe { builder(q) };
            b.wrs.clear();
            b.dests.clear();
            b.error = None;
            Ok(())
        })
    }
}

entry! {
    /// `ibv_wr_complete`: posts the WRs built, or the first error met.
    fn wr_complete(q: *mut ibv_qp_ex) -> c_int {
        errno_ret(|| {
            // SAFETY: the program's QP.
            let (qp, b, _) = unsafe { builder(q) };
            let wrs = std::mem::take(&mut b.wrs);
            let dests = std::mem::take(&mut b.dests);
            if let Some(e) = b.error.take() {
                return Err(e);
            }
            if qp.qp.qp_type() != roce_verbs::QpType::Ud {
                return qp.qp.post_send_list(wrs).map_err(|e| post_errno(&e.error));
            }
            // A UD WR without `ibv_wr_set_ud_addr`: those before it are
            // posted, then EINVAL (the engine's answer to a UD send
            // without a destination).
            let complete = dests.iter().all(Option::is_some);
            let pairs = wrs.into_iter().zip(dests).map_while(|(w, d)| Some((w, d?)));
            qp.qp.post_send_ud_list(pairs).map_err(|e| post_errno(&e.error))?;
            if complete {
                Ok(())
            } else {
                Err(libc::EINVAL)
            }
        })
    }
}

entry! {
    /// `ibv_wr_abort`.
    fn wr_abort(q: *mut ibv_qp_ex) {
        void(|| {
            // SAFETY: the program's QP.
            let (_, b, _) = unsafe { builder(q) };
            b.wrs.clear();
            b.dests.clear();
            b.error = None;
            Ok(())
        })
    }
}

/// The builder's operations: each starts a WR (see [`begin`]).
macro_rules! builder_op {
    ($(#[$m:meta])* fn $name:ident($($a:ident: $t:ty),*) => $op:expr) => {
        entry! {
            $(#[$m])*
            fn $name(q: *mut ibv_qp_ex, $($a: $t),*) {
                void(|| {
                    // SAFETY: the program's QP, in a builder session.
                    unsafe { begin(q, $op) };
                    Ok(())
                })
            }
        }
    };
}

/// The remote memory of a builder operation (`rkey`, `addr` as C passes them).
fn at(addr: u64, rkey: u32) -> RemoteAddr {
    RemoteAddr::new(addr, Rkey::new(rkey))
}

builder_op!(
    /// `ibv_wr_send`.
    fn wr_send() => SendOp::Send
);
builder_op!(
    /// `ibv_wr_send_imm`.
    fn wr_send_imm(imm: u32) => SendOp::SendWithImm(u32::from_be(imm))
);
builder_op!(
    /// `ibv_wr_send_inv`.
    fn wr_send_inv(rkey: u32) => SendOp::SendWithInv(Rkey::new(rkey))
);
builder_op!(
    /// `ibv_wr_rdma_write`.
    fn wr_rdma_write(rkey: u32, addr: u64) => SendOp::Write { remote: at(addr, rkey) }
);
builder_op!(
    /// `ibv_wr_rdma_write_imm`.
    fn wr_rdma_write_imm(rkey: u32, addr: u64, imm: u32) =>
        SendOp::WriteWithImm { remote: at(addr, rkey), imm: u32::from_be(imm) }
);
builder_op!(
    /// `ibv_wr_rdma_read`.
    fn wr_rdma_read(rkey: u32, addr: u64) => SendOp::Read { remote: at(addr, rkey) }
);
builder_op!(
    /// `ibv_wr_atomic_cmp_swp`.
    fn wr_atomic_cmp_swp(rkey: u32, addr: u64, compare: u64, swap: u64) =>
        SendOp::CompareSwap { remote: at(addr, rkey), compare, swap }
);
builder_op!(
    /// `ibv_wr_atomic_fetch_add`.
    fn wr_atomic_fetch_add(rkey: u32, addr: u64, add: u64) =>
        SendOp::FetchAdd { remote: at(addr, rkey), add }
);

entry! {
    /// `ibv_wr_set_sge`.
    fn wr_set_sge(q: *mut ibv_qp_ex, lkey: u32, addr: u64, length: u32) {
        void(|| {
            // SAFETY: the program's QP, in a builder session.
            let (_, b, _) = unsafe { builder(q) };
            if let Some(w) = last(b) {
                w.payload = Payload::Sgl([Sge {
                    addr,
                    length,
                    lkey: Lkey::new(lkey),
                }].into_iter().collect());
            }
            Ok(())
        })
    }
}

entry! {
    /// `ibv_wr_set_sge_list`: a list longer than the QP's `max_send_sge`
    /// is `ENOSPC` (rxe's answer) from `ibv_wr_complete`, found before
    /// the list is read.
    fn wr_set_sge_list(q: *mut ibv_qp_ex, n: usize, list: *const ibv_sge) {
        void(|| {
            // SAFETY: the program's QP and list of `n` entries.
            unsafe {
                let (qp, b, _) = builder(q);
                let max = qp.cap.max_send_sge;
                if n > max as usize {
                    b.error.get_or_insert(libc::ENOSPC);
                    return Ok(());
                }
                match sgl(list, n as c_int, max) {
                    Ok(s) => {
                        if let Some(w) = last(b) {
                            w.payload = Payload::Sgl(s);
                        }
                    }
                    Err(e) => {
                        // No WR being built is EINVAL first, as before.
                        let _ = last(b);
                        b.error.get_or_insert(e);
                    }
                }
            }
            Ok(())
        })
    }
}

entry! {
    /// `ibv_wr_set_inline_data`.
    fn wr_set_inline_data(q: *mut ibv_qp_ex, addr: *mut c_void, length: usize) {
        void(|| {
            // SAFETY: the program's QP and buffer.
            unsafe { set_inline(q, &[ibv_data_buf { addr, length }]) };
            Ok(())
        })
    }
}

entry! {
    /// `ibv_wr_set_inline_data_list`.
    fn wr_set_inline_data_list(q: *mut ibv_qp_ex, n: usize, bufs: *const ibv_data_buf) {
        void(|| {
            if n > 0 && bufs.is_null() {
                return Err(libc::EINVAL);
            }
            // SAFETY: the program's QP and `n` buffers.
            unsafe { set_inline(q, std::slice::from_raw_parts(bufs, n)) };
            Ok(())
        })
    }
}

/// The inline payload of the WR being built: more than the QP takes
/// inline is `ENOSPC` from `ibv_wr_complete`, as rxe, found before
/// anything is copied.
///
/// # Safety
/// As [`builder`]; each buffer is the program's readable memory.
unsafe fn set_inline(q: *mut ibv_qp_ex, bufs: &[ibv_data_buf]) {
    // SAFETY: the caller's contract.
    let (qp, b, _) = unsafe { builder(q) };
    let max = qp.cap.max_inline_data as usize;
    if last(b).is_none() {
        return;
    }
    let total = bufs.iter().try_fold(0usize, |t, d| t.checked_add(d.length));
    if total.is_none_or(|t| t > max) {
        b.error.get_or_insert(libc::ENOSPC);
        return;
    }
    // SAFETY: the caller's contract (each buffer readable).
    match unsafe { inline(bufs.iter().map(|d| (d.addr as u64, d.length))) } {
        Ok(v) => {
            if let Some(w) = b.wrs.last_mut() {
                w.payload = Payload::Inline(v);
                w.flags = w.flags | SendFlags::INLINE;
            }
        }
        Err(e) => {
            b.error.get_or_insert(e);
        }
    }
}

entry! {
    /// `ibv_wr_set_ud_addr`.
    fn wr_set_ud_addr(q: *mut ibv_qp_ex, ah: *mut ibv_ah, qpn: u32, qkey: u32) {
        void(|| {
            // SAFETY: the program's QP and AH.
            unsafe {
                let (qp, b, _) = builder(q);
                let ah = ah.cast::<Ah>().as_ref();
                // An AH of another context: EINVAL, as for ibv_post_send.
                let ah = ah.filter(|a| a.ibv.context == qp.ibv.qp_base.context);
                let building = last(b).is_some();
                match ah {
                    Some(a) if building => {
                        if let Some(d) = b.dests.last_mut() {
                            *d = Some(a.ah.ud_dest(Qpn::new(qpn & 0xff_ffff), Qkey::new(qkey)));
                        }
                    }
                    Some(_) => {}
                    None => {
                        b.error.get_or_insert(libc::EINVAL);
                    }
                }
            }
            Ok(())
        })
    }
}

/// Fills the builder's entries of a new QP.
pub(crate) fn install_builder(x: &mut ibv_qp_ex) {
    x.wr_start = Some(wr_start);
    x.wr_complete = Some(wr_complete);
    x.wr_abort = Some(wr_abort);
    x.wr_send = Some(wr_send);
    x.wr_send_imm = Some(wr_send_imm);
    x.wr_send_inv = Some(wr_send_inv);
    x.wr_rdma_write = Some(wr_rdma_write);
    x.wr_rdma_write_imm = Some(wr_rdma_write_imm);
    x.wr_rdma_read = Some(wr_rdma_read);
    x.wr_atomic_cmp_swp = Some(wr_atomic_cmp_swp);
    x.wr_atomic_fetch_add = Some(wr_atomic_fetch_add);
    x.wr_set_sge = Some(wr_set_sge);
    x.wr_set_sge_list = Some(wr_set_sge_list);
    x.wr_set_inline_data = Some(wr_set_inline_data);
    x.wr_set_inline_data_list = Some(wr_set_inline_data_list);
    x.wr_set_ud_addr = Some(wr_set_ud_addr);
}
