//! Posting: `ops.post_send` / `ops.post_recv` (what `verbs.h`'s inline
//! `ibv_post_send` / `ibv_post_recv` call) and the extended QP's
//! work-request builder (`ibv_wr_start` ... `ibv_wr_complete`).

use std::os::raw::{c_int, c_void};

use smallvec::SmallVec;

use roce_verbs::{Lkey, Payload, Qkey, Qpn, RecvWr, Rkey, SendFlags, SendOp, SendWr, Sge};

use crate::abi::consts::*;
use crate::abi::*;
use crate::ffi::{errno_of, Res};
use crate::pd::Ah;
use crate::qp::Qp;

/// The scatter/gather list of a C work request.
///
/// # Safety
/// `sg` must point to `n` entries (any when `n` is 0).
unsafe fn sgl(sg: *const ibv_sge, n: c_int) -> Res<Vec<Sge>> {
    if n < 0 || (n > 0 && sg.is_null()) {
        return Err(libc::EINVAL);
    }
    if n == 0 {
        return Ok(Vec::new());
    }
    // SAFETY: the caller's contract.
    let s = unsafe { std::slice::from_raw_parts(sg, n as usize) };
    Ok(s.iter()
        .map(|e| Sge {
            addr: e.addr,
            length: e.length,
            lkey: Lkey::new(e.lkey),
        })
        .collect())
}

/// Inline data: the bytes the SGEs point at, copied now (their lkeys
/// are not looked at, as with every provider).
///
/// # Safety
/// Each entry must describe readable memory of the program.
unsafe fn inline(sges: &[Sge]) -> Vec<u8> {
    let mut v = Vec::with_capacity(sges.iter().map(|s| s.length as usize).sum());
    for s in sges {
        if s.length > 0 {
            // SAFETY: the caller's contract.
            v.extend_from_slice(unsafe {
                std::slice::from_raw_parts(s.addr as *const u8, s.length as usize)
            });
        }
    }
    v
}

/// The engine's work request of a C one.
///
/// # Safety
/// `w` is the program's, with its pointers valid.
unsafe fn send_wr_of(q: &Qp, w: &ibv_send_wr) -> Res<SendWr> {
    // SAFETY: the caller's contract.
    let sges = unsafe { sgl(w.sg_list, w.num_sge)? };
    // SAFETY: reading the union member the opcode selects.
    let (rdma, atomic, ud) = unsafe { (w.wr.rdma, w.wr.atomic, w.wr.ud) };
    let op = match w.opcode {
        IBV_WR_SEND => SendOp::Send,
        IBV_WR_SEND_WITH_IMM => SendOp::SendWithImm(u32::from_be(w.imm_or_inv)),
        IBV_WR_SEND_WITH_INV => SendOp::SendWithInv(Rkey::new(w.imm_or_inv)),
        IBV_WR_RDMA_WRITE => SendOp::Write,
        IBV_WR_RDMA_WRITE_WITH_IMM => SendOp::WriteWithImm(u32::from_be(w.imm_or_inv)),
        IBV_WR_RDMA_READ => SendOp::Read,
        IBV_WR_ATOMIC_CMP_AND_SWP => SendOp::CompareSwap {
            compare: atomic.compare_add,
            swap: atomic.swap,
        },
        IBV_WR_ATOMIC_FETCH_AND_ADD => SendOp::FetchAdd {
            add: atomic.compare_add,
        },
        // Memory windows, local invalidate, TSO: not on this device.
        _ => return Err(libc::EINVAL),
    };
    let (remote_addr, rkey) = if op.is_atomic() {
        (atomic.remote_addr, atomic.rkey)
    } else if op.is_rdma() {
        (rdma.remote_addr, rdma.rkey)
    } else {
        (0, 0)
    };
    let payload = if w.send_flags & IBV_SEND_INLINE != 0 && !op.is_read_or_atomic() {
        // SAFETY: inline data is the program's readable memory.
        Payload::Inline(unsafe { inline(&sges) })
    } else {
        Payload::Sgl(sges)
    };
    let ud = if q.qp.qp_type() == roce_verbs::QpType::Ud {
        // SAFETY: the program's AH (an Ah: its first field) or NULL.
        let ah = unsafe { ud.ah.cast::<Ah>().as_ref() }.ok_or(libc::EINVAL)?;
        Some(ah.ah.ud_dest(
            Qpn::new(ud.remote_qpn & 0xff_ffff),
            Qkey::new(ud.remote_qkey),
        ))
    } else {
        None
    };
    Ok(SendWr {
        wr_id: w.wr_id,
        op,
        payload,
        // FENCE, SIGNALED, SOLICITED, INLINE have the engine's values.
        flags: SendFlags(w.send_flags & 0xf),
        remote_addr,
        rkey: Rkey::new(rkey),
        ud,
    })
}

/// The `n`th WR of a C list (`n` is within it: counted while walking it).
///
/// # Safety
/// `wr` is the program's list, at least `n + 1` long.
unsafe fn nth(mut wr: *mut ibv_send_wr, n: usize) -> *mut ibv_send_wr {
    for _ in 0..n {
        // SAFETY: the caller's contract.
        wr = unsafe { (*wr).next };
    }
    wr
}

/// `ops.post_send`. On error `*bad` is the first WR not posted. The
/// list is converted first (no heap for up to eight WRs, as
/// `post_send_list` keeps them) and posted under one lock.
unsafe extern "C" fn post_send(
    qp: *mut ibv_qp,
    wr: *mut ibv_send_wr,
    bad: *mut *mut ibv_send_wr,
) -> c_int {
    let r = std::panic::catch_unwind(|| {
        // SAFETY: the program's QP.
        let q = unsafe { Qp::from_ptr(qp) }.map_err(|e| (e, wr))?;
        let mut wrs: SmallVec<[SendWr; 8]> = SmallVec::new();
        let mut cur = wr;
        // SAFETY: the program's list, NULL-terminated.
        while let Some(w) = unsafe { cur.as_ref() } {
            // SAFETY: the program's WR.
            match unsafe { send_wr_of(q, w) } {
                Ok(s) => wrs.push(s),
                Err(e) => {
                    // Post the ones before, as a provider would have.
                    return match q.qp.post_send_list(wrs) {
                        Ok(()) => Err((e, cur)),
                        // SAFETY: n is below the WRs walked.
                        Err((n, pe)) => Err((errno_of(&pe), unsafe { nth(wr, n) })),
                    };
                }
            }
            cur = w.next;
        }
        // SAFETY: as above.
        q.qp.post_send_list(wrs)
            .map_err(|(n, e)| (errno_of(&e), unsafe { nth(wr, n) }))
    });
    match r {
        Ok(Ok(())) => 0,
        Ok(Err((e, at))) => {
            if !bad.is_null() {
                // SAFETY: the program's out pointer.
                unsafe { *bad = at };
            }
            e
        }
        Err(_) => libc::EIO,
    }
}

/// Posts a receive list one WR at a time through `post`.
///
/// # Safety
/// `wr` is the program's NULL-terminated list.
pub(crate) unsafe fn post_recv_list(
    wr: *mut ibv_recv_wr,
    bad: *mut *mut ibv_recv_wr,
    post: impl Fn(RecvWr) -> Result<(), roce_verbs::Error>,
) -> c_int {
    let mut cur = wr;
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        // SAFETY: the caller's contract.
        while let Some(w) = unsafe { cur.as_ref() } {
            // SAFETY: the program's WR.
            let sg = unsafe { sgl(w.sg_list, w.num_sge) }?;
            post(RecvWr {
                wr_id: w.wr_id,
                sgl: sg,
            })
            .map_err(|e| errno_of(&e))?;
            cur = w.next;
        }
        Ok::<(), c_int>(())
    }));
    let e = match r {
        Ok(Ok(())) => return 0,
        Ok(Err(e)) => e,
        Err(_) => libc::EIO,
    };
    if !bad.is_null() {
        // SAFETY: the program's out pointer.
        unsafe { *bad = cur };
    }
    e
}

/// `ops.post_recv`.
unsafe extern "C" fn post_recv(
    qp: *mut ibv_qp,
    wr: *mut ibv_recv_wr,
    bad: *mut *mut ibv_recv_wr,
) -> c_int {
    // SAFETY: the program's QP.
    let Ok(q) = (unsafe { Qp::from_ptr(qp) }) else {
        return libc::EINVAL;
    };
    if !q.srq.is_null() {
        // Its receives come from the SRQ.
        return libc::EINVAL;
    }
    // SAFETY: the program's list.
    unsafe { post_recv_list(wr, bad, |r| q.qp.post_recv(r)) }
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
unsafe fn begin(q: *mut ibv_qp_ex, op: SendOp, remote_addr: u64, rkey: u32) {
    // SAFETY: the caller's contract.
    let (_, b, x) = unsafe { builder(q) };
    b.wrs.push(SendWr {
        wr_id: x.wr_id,
        op,
        payload: Payload::Sgl(Vec::new()),
        flags: SendFlags(x.wr_flags & 0xf),
        remote_addr,
        rkey: Rkey::new(rkey),
        ud: None,
    });
}

/// The WR being built, or the builder's error if there is none.
///
/// # Safety
/// As [`builder`].
unsafe fn last<'a>(q: *mut ibv_qp_ex) -> Option<&'a mut SendWr> {
    // SAFETY: the caller's contract.
    let (_, b, _) = unsafe { builder(q) };
    if b.wrs.is_empty() {
        b.error.get_or_insert(libc::EINVAL);
    }
    b.wrs.last_mut()
}

unsafe extern "C" fn wr_start(q: *mut ibv_qp_ex) {
    // SAFETY: the program's QP.
    let (_, b, _) = unsafe { builder(q) };
    b.wrs.clear();
    b.error = None;
}

unsafe extern "C" fn wr_complete(q: *mut ibv_qp_ex) -> c_int {
    // SAFETY: the program's QP.
    let (qp, b, _) = unsafe { builder(q) };
    let wrs = std::mem::take(&mut b.wrs);
    if let Some(e) = b.error.take() {
        return e;
    }
    match qp.qp.post_send_list(wrs) {
        Ok(()) => 0,
        Err((_, e)) => errno_of(&e),
    }
}

unsafe extern "C" fn wr_abort(q: *mut ibv_qp_ex) {
    // SAFETY: the program's QP.
    let (_, b, _) = unsafe { builder(q) };
    b.wrs.clear();
    b.error = None;
}

unsafe extern "C" fn wr_send(q: *mut ibv_qp_ex) {
    // SAFETY: the program's QP, in a builder session.
    unsafe { begin(q, SendOp::Send, 0, 0) }
}
unsafe extern "C" fn wr_send_imm(q: *mut ibv_qp_ex, imm: u32) {
    // SAFETY: as wr_send.
    unsafe { begin(q, SendOp::SendWithImm(u32::from_be(imm)), 0, 0) }
}
unsafe extern "C" fn wr_send_inv(q: *mut ibv_qp_ex, rkey: u32) {
    // SAFETY: as wr_send.
    unsafe { begin(q, SendOp::SendWithInv(Rkey::new(rkey)), 0, 0) }
}
unsafe extern "C" fn wr_rdma_write(q: *mut ibv_qp_ex, rkey: u32, addr: u64) {
    // SAFETY: as wr_send.
    unsafe { begin(q, SendOp::Write, addr, rkey) }
}
unsafe extern "C" fn wr_rdma_write_imm(q: *mut ibv_qp_ex, rkey: u32, addr: u64, imm: u32) {
    // SAFETY: as wr_send.
    unsafe { begin(q, SendOp::WriteWithImm(u32::from_be(imm)), addr, rkey) }
}
unsafe extern "C" fn wr_rdma_read(q: *mut ibv_qp_ex, rkey: u32, addr: u64) {
    // SAFETY: as wr_send.
    unsafe { begin(q, SendOp::Read, addr, rkey) }
}
unsafe extern "C" fn wr_atomic_cmp_swp(
    q: *mut ibv_qp_ex,
    rkey: u32,
    addr: u64,
    compare: u64,
    swap: u64,
) {
    // SAFETY: as wr_send.
    unsafe { begin(q, SendOp::CompareSwap { compare, swap }, addr, rkey) }
}
unsafe extern "C" fn wr_atomic_fetch_add(q: *mut ibv_qp_ex, rkey: u32, addr: u64, add: u64) {
    // SAFETY: as wr_send.
    unsafe { begin(q, SendOp::FetchAdd { add }, addr, rkey) }
}

unsafe extern "C" fn wr_set_sge(q: *mut ibv_qp_ex, lkey: u32, addr: u64, length: u32) {
    // SAFETY: the program's QP, in a builder session.
    if let Some(w) = unsafe { last(q) } {
        w.payload = Payload::Sgl(vec![Sge {
            addr,
            length,
            lkey: Lkey::new(lkey),
        }]);
    }
}

unsafe extern "C" fn wr_set_sge_list(q: *mut ibv_qp_ex, n: usize, list: *const ibv_sge) {
    // SAFETY: the program's QP and list of `n` entries.
    unsafe {
        let (_, b, _) = builder(q);
        match (sgl(list, n as c_int), last(q)) {
            (Ok(s), Some(w)) => w.payload = Payload::Sgl(s),
            (Err(e), _) => {
                b.error.get_or_insert(e);
            }
            _ => {}
        }
    }
}

unsafe extern "C" fn wr_set_inline_data(q: *mut ibv_qp_ex, addr: *mut c_void, length: usize) {
    let one = ibv_data_buf { addr, length };
    // SAFETY: forwarded.
    unsafe { wr_set_inline_data_list(q, 1, &one) }
}

unsafe extern "C" fn wr_set_inline_data_list(
    q: *mut ibv_qp_ex,
    n: usize,
    bufs: *const ibv_data_buf,
) {
    // SAFETY: the program's QP and `n` buffers of readable memory.
    unsafe {
        let Some(w) = last(q) else { return };
        let mut v = Vec::new();
        for i in 0..n {
            let d = &*bufs.add(i);
            if d.length > 0 {
                v.extend_from_slice(std::slice::from_raw_parts(d.addr as *const u8, d.length));
            }
        }
        w.payload = Payload::Inline(v);
        w.flags = w.flags | SendFlags::INLINE;
    }
}

unsafe extern "C" fn wr_set_ud_addr(q: *mut ibv_qp_ex, ah: *mut ibv_ah, qpn: u32, qkey: u32) {
    // SAFETY: the program's QP and AH.
    unsafe {
        let (_, b, _) = builder(q);
        match (ah.cast::<Ah>().as_ref(), last(q)) {
            (Some(a), Some(w)) => {
                w.ud = Some(a.ah.ud_dest(Qpn::new(qpn & 0xff_ffff), Qkey::new(qkey)))
            }
            (None, _) => {
                b.error.get_or_insert(libc::EINVAL);
            }
            _ => {}
        }
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
