//! Completion queues (`ibv_cq` and `ibv_cq_ex` alike: every CQ is an
//! extended one, so `ibv_cq_ex_to_cq` and both ways of polling work on
//! any of them) and completion channels.

use std::cell::{Cell, UnsafeCell};
use std::os::raw::{c_int, c_void};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use roce_verbs::{ChannelWait, Completion, CqId, NetworkHdr, Wc, WcFlags};

use crate::abi::*;
use crate::context::{same_context, Context, Objects};
use crate::eventfd::{self, EventFd};
use crate::ffi::Raw;
use crate::ffi::{arg, errno_ret, minus_one, ptr_ret, verr, Res};
use crate::ffi::{count_neg, value_or, void};

/// The objects table's key of a CQ.
fn key(id: CqId) -> u32 {
    Objects::cq_key(id)
}

/// A completion channel: the C view first; `fd` is the program's number
/// of an eventfd counting the events queued (see [`EventFd`]).
#[repr(C)]
pub(crate) struct Channel {
    ibv: ibv_comp_channel,
    ch: roce_verbs::CompletionChannel,
    efd: Arc<EventFd>,
    ctx: *const Context,
    /// CQs using the channel (`EBUSY` on destroy).
    users: AtomicUsize,
}

/// A CQ: the C view first.
#[repr(C)]
pub(crate) struct Cq {
    pub(crate) ibv: ibv_cq_ex,
    pub(crate) cq: roce_verbs::CompletionQueue,
    channel: *const Channel,
    ctx: *const Context,
    /// QPs and SRQs using the CQ (`EBUSY` on destroy).
    pub(crate) users: AtomicUsize,
    /// The completion `ibv_start_poll`/`ibv_next_poll` made current, and
    /// when it was polled; owned by the poller between `start_poll` and
    /// `end_poll` (`polling` keeps a second one out, as a provider's lock
    /// would).
    cur: UnsafeCell<(ibv_wc, u64)>,
    polling: AtomicBool,
    /// Completions polled, by status (`roce exec --stats`).
    pub(crate) by_status: crate::debug::StatusCounts,
}

impl Cq {
    /// # Safety
    /// `p` must be NULL or a CQ this library created and not destroyed.
    pub(crate) unsafe fn from_ptr<'a>(p: *mut ibv_cq) -> Res<&'a Cq> {
        // SAFETY: `ibv` (whose prefix is `ibv_cq`) is the first field.
        unsafe { arg(p.cast::<Cq>()) }
    }

    /// The context the CQ belongs to.
    pub(crate) fn context(&self) -> &Context {
        // SAFETY: a CQ's context outlives it.
        unsafe { &*self.ctx }
    }

    pub(crate) fn ibv_cq(&self) -> *mut ibv_cq {
        (&self.ibv as *const ibv_cq_ex).cast_mut().cast()
    }
}

thread_local! {
    /// The poll list of this thread, reused by every `ibv_poll_cq`.
    static POLLED: Cell<Vec<Completion>> = const { Cell::new(Vec::new()) };
}

/// `CLOCK_MONOTONIC` in nanoseconds: completion timestamps.
fn now_ns() -> u64 {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: one live timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut t) };
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

/// `wc.sl` of a completion: for a UD receive, the RoCE packet type, as
/// RoCE NICs report it there (IBTA Annex A17.4.5.1 asks the completion
/// of a UD receive to say whether the frame was IPv4 or IPv6; the mlx5
/// CQE carries it in the SL bits, which rdma-core's mlx5 provider
/// returns as `sl`, and UCX's UD transport reads `sl & 7` to find the
/// destination address in the GRH area: 2 is IPv4, 1 IPv6, 0 an IB GRH
/// — the L3 header type of the ConnectX CQE). 0 (service level 0)
/// otherwise, as RoCE's SL is not on the wire.
pub(crate) fn sl_of(w: &Wc) -> u8 {
    match w.network_hdr {
        Some(NetworkHdr::Ipv4) => 2,
        Some(NetworkHdr::Ipv6) => 1,
        None => 0,
    }
}

/// The C form of a completion. `imm_data` is `__be32`: the engine keeps
/// the value the wire carries, so it goes to memory big-endian.
pub(crate) fn wc_of(c: &Completion) -> ibv_wc {
    let w = &c.wc;
    let imm_or_inv = if w.wc_flags.contains(WcFlags::WITH_INV) {
        w.invalidated_rkey.value()
    } else {
        w.imm_data.to_be()
    };
    ibv_wc {
        wr_id: w.wr_id,
        status: w.status as u32,
        opcode: w.opcode as u32,
        vendor_err: 0,
        byte_len: w.byte_len,
        imm_or_inv,
        qp_num: w.qp_num.value(),
        src_qp: w.src_qp.value(),
        wc_flags: w.wc_flags.0,
        pkey_index: 0,
        slid: 0,
        sl: sl_of(w),
        dlid_path_bits: 0,
    }
}

/// Polls up to `max` completions into `out`.
fn poll_into(cq: &Cq, max: usize, mut put: impl FnMut(usize, &Completion)) -> Res<usize> {
    let mut v = POLLED.take();
    v.clear();
    let r = cq.cq.poll(&mut v, max);
    for (i, c) in v.iter().enumerate() {
        crate::debug::count_status(&cq.by_status, c.wc.status as u32);
        put(i, c);
    }
    let n = v.len();
    v.clear();
    POLLED.set(v);
    match r {
        Ok(_) => Ok(n),
        Err(_) if n > 0 => Ok(n),
        Err(e) => Err(verr(e)),
    }
}

entry! {
    /// `ops.poll_cq` (the inline `ibv_poll_cq`): completions polled, or a
    /// negative value on error (an overflowed CQ).
    fn poll_cq(cq: *mut ibv_cq, n: c_int, wc: *mut ibv_wc) -> c_int {
        count_neg(|| {
            // SAFETY: the program's CQ.
            let q = unsafe { Cq::from_ptr(cq)? };
            if n <= 0 {
                return Ok(0);
            }
            if wc.is_null() {
                return Err(libc::EINVAL);
            }
            poll_into(q, n as usize, |i, c| {
                // SAFETY: the program's array holds `n` entries; i < n.
                unsafe { *wc.add(i) = wc_of(c) };
            })
        })
    }
}

entry! {
    /// `ops.req_notify_cq`.
    fn req_notify_cq(cq: *mut ibv_cq, solicited_only: c_int) -> c_int {
        errno_ret(|| {
            // SAFETY: the program's CQ.
            let q = unsafe { Cq::from_ptr(cq)? };
            q.cq.req_notify(solicited_only != 0).map_err(verr)
        })
    }
}

/// Installs the CQ entries of a context's ops tables.
pub(crate) fn install(v: &mut verbs_context) {
    v.context.ops.poll_cq = Some(poll_cq);
    v.context.ops.req_notify_cq = Some(req_notify_cq);
    v.create_cq_ex = Some(create_cq_ex);
}

// --- the extended poll interface -------------------------------------

/// # Safety
/// `p` must be a CQ of this library.
unsafe fn ex<'a>(p: *mut ibv_cq_ex) -> &'a Cq {
    // SAFETY: the caller's contract; `ibv` is the first field.
    unsafe { &*p.cast::<Cq>() }
}

fn load_one(q: &Cq) -> c_int {
    let mut got = None;
    match poll_into(q, 1, |_, c| got = Some(wc_of(c))) {
        Ok(_) => {}
        Err(e) => return e,
    }
    match got {
        None => libc::ENOENT,
        Some(w) => {
            // SAFETY: the poller owns `cur` between start and end (see Cq).
            let cur = unsafe { &mut *q.cur.get() };
            *cur = (w, now_ns());
            // SAFETY: the ibv view's status/wr_id are the poller's too.
            let v = unsafe { &mut *(q.ibv_cq() as *mut ibv_cq_ex) };
            v.status = w.status;
            v.wr_id = w.wr_id;
            0
        }
    }
}

entry! {
    /// `ibv_start_poll`: 0 with the first completion loaded, `ENOENT` for
    /// none, or an errno value.
    fn start_poll(cq: *mut ibv_cq_ex, attr: *mut ibv_poll_cq_attr) -> c_int {
        errno_ret(|| {
            // SAFETY: the program's CQ.
            let q = unsafe { ex(cq) };
            // SAFETY: the program's attributes or NULL.
            if unsafe { attr.as_ref() }.is_some_and(|a| a.comp_mask != 0) {
                return Err(libc::EINVAL);
            }
            if q.polling.swap(true, Ordering::Acquire) {
                return Err(libc::EBUSY);
            }
            let r = load_one(q);
            if r != 0 {
                // No end_poll follows a failed start_poll.
                q.polling.store(false, Ordering::Release);
                return Err(r);
            }
            Ok(())
        })
    }
}

entry! {
    /// `ibv_next_poll`: as `start_poll`, for the next completion.
    fn next_poll(cq: *mut ibv_cq_ex) -> c_int {
        errno_ret(|| {
            // SAFETY: the program's CQ, between start_poll and end_poll.
            match load_one(unsafe { ex(cq) }) {
                0 => Ok(()),
                e => Err(e),
            }
        })
    }
}

entry! {
    /// `ibv_end_poll`.
    fn end_poll(cq: *mut ibv_cq_ex) {
        void(|| {
            // SAFETY: the program's CQ.
            unsafe { ex(cq) }.polling.store(false, Ordering::Release);
            Ok(())
        })
    }
}

/// A reader of the loaded completion (`ibv_wc_read_*`): 0 if its body
/// panics.
macro_rules! reader {
    ($name:ident -> $t:ty, |$w:ident, $ts:ident| $e:expr) => {
        entry! {
            fn $name(cq: *mut ibv_cq_ex) -> $t {
                value_or(0, || {
                    // SAFETY: the program's CQ, between start_poll and end_poll.
                    let (w, ts) = unsafe { &*ex(cq).cur.get() };
                    let ($w, $ts) = (w, *ts);
                    let _ = ($w, $ts);
                    $e
                })
            }
        }
    };
}

reader!(read_opcode -> u32, |w, ts| w.opcode);
reader!(read_vendor_err -> u32, |w, ts| w.vendor_err);
reader!(read_byte_len -> u32, |w, ts| w.byte_len);
reader!(read_imm_data -> u32, |w, ts| w.imm_or_inv);
reader!(read_qp_num -> u32, |w, ts| w.qp_num);
reader!(read_src_qp -> u32, |w, ts| w.src_qp);
reader!(read_wc_flags -> u32, |w, ts| w.wc_flags);
reader!(read_slid -> u32, |w, ts| w.slid as u32);
reader!(read_sl -> u8, |w, ts| w.sl);
reader!(read_dlid_path_bits -> u8, |w, ts| w.dlid_path_bits);
reader!(read_completion_ts -> u64, |w, ts| ts);
reader!(read_cvlan -> u16, |w, ts| 0);
reader!(read_flow_tag -> u32, |w, ts| 0);
reader!(read_wallclock_ns -> u64, |w, ts| ts);

fn create(
    ctx: *mut ibv_context,
    cqe: c_int,
    cq_context: *mut c_void,
    channel: *mut ibv_comp_channel,
    comp_vector: u32,
) -> Res<*mut ibv_cq_ex> {
    // SAFETY: the program's context.
    let c = unsafe { Context::from_ptr(ctx)? };
    // The kernel's create_cq: a vector the device does not have is EINVAL.
    if cqe <= 0 || comp_vector >= c.vctx.context.num_comp_vectors as u32 {
        return Err(libc::EINVAL);
    }
    // SAFETY: the program's channel or NULL (a Channel: its first field).
    let ch = unsafe { channel.cast::<Channel>().as_ref() };
    if let Some(h) = ch {
        same_context(&[ctx, h.ibv.context])?;
    }
    let cq = c
        .verbs
        .create_cq(cqe as usize, ch.map(|h| &h.ch))
        .map_err(verr)?;
    if let Some(h) = ch {
        h.users.fetch_add(1, Ordering::AcqRel);
    }
    // SAFETY: all-zero is a valid ibv_cq_ex (pointers NULL, fns None).
    let mut ibv: ibv_cq_ex = unsafe { std::mem::zeroed() };
    ibv.context = ctx;
    ibv.channel = channel;
    ibv.cq_context = cq_context;
    ibv.handle = key(cq.id());
    ibv.cqe = cqe;
    ibv.mutex = libc::PTHREAD_MUTEX_INITIALIZER;
    ibv.cond = libc::PTHREAD_COND_INITIALIZER;
    ibv.start_poll = Some(start_poll);
    ibv.next_poll = Some(next_poll);
    ibv.end_poll = Some(end_poll);
    ibv.read_opcode = Some(read_opcode);
    ibv.read_vendor_err = Some(read_vendor_err);
    ibv.read_byte_len = Some(read_byte_len);
    ibv.read_imm_data = Some(read_imm_data);
    ibv.read_qp_num = Some(read_qp_num);
    ibv.read_src_qp = Some(read_src_qp);
    ibv.read_wc_flags = Some(read_wc_flags);
    ibv.read_slid = Some(read_slid);
    ibv.read_sl = Some(read_sl);
    ibv.read_dlid_path_bits = Some(read_dlid_path_bits);
    ibv.read_completion_ts = Some(read_completion_ts);
    ibv.read_cvlan = Some(read_cvlan);
    ibv.read_flow_tag = Some(read_flow_tag);
    ibv.read_completion_wallclock_ns = Some(read_wallclock_ns);
    let id = cq.id();
    let b = Box::into_raw(Box::new(Cq {
        ibv,
        cq,
        channel: ch.map_or(std::ptr::null(), |h| h as *const Channel),
        ctx: c,
        users: AtomicUsize::new(0),
        cur: UnsafeCell::new((ibv_wc::default(), 0)),
        polling: AtomicBool::new(false),
        by_status: Default::default(),
    }));
    c.children.fetch_add(1, Ordering::Relaxed);
    c.objects
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .cqs
        .insert(key(id), Raw(b.cast()));
    Ok(b.cast())
}

export! {
    /// `ibv_create_cq`.
    fn ibv_create_cq(ctx: *mut ibv_context, cqe: c_int, cq_context: *mut c_void, channel: *mut ibv_comp_channel, comp_vector: c_int) -> *mut ibv_cq {
        ptr_ret(|| create(ctx, cqe, cq_context, channel, comp_vector as u32).map(|p| p.cast()))
    }
}

/// The wc_flags `ibv_create_cq_ex` can honour: every standard field but
/// the flow tag, the VLAN and tag matching.
const CQ_EX_FLAGS: u64 = 0x3ff | (1 << 10);

entry! {
    /// `verbs_context.create_cq_ex`.
    fn create_cq_ex(
        ctx: *mut ibv_context,
        attr: *mut ibv_cq_init_attr_ex,
    ) -> *mut ibv_cq_ex {
        ptr_ret(|| {
            // SAFETY: the program's attributes.
            let a = unsafe { arg(attr)? };
            if a.wc_flags & !CQ_EX_FLAGS != 0 || a.comp_mask & !0x3 != 0 {
                return Err(libc::EOPNOTSUPP);
            }
            create(ctx, a.cqe as c_int, a.cq_context, a.channel, a.comp_vector)
        })
    }
}

export! {
    /// `ibv_destroy_cq`: `EBUSY` while a QP or SRQ uses it.
    fn ibv_destroy_cq(cq: *mut ibv_cq) -> c_int {
        errno_ret(|| {
            // SAFETY: the program's CQ.
            let q = unsafe { Cq::from_ptr(cq)? };
            if q.users.load(Ordering::Acquire) != 0 {
                return Err(libc::EBUSY);
            }
            let c = q.context();
            crate::debug::cq_destroyed((&c.device.info.name(), c.local), q.cq.id().0, &q.by_status);
            c.objects.lock().unwrap_or_else(|p| p.into_inner()).cqs.remove(&key(q.cq.id()));
            c.children.fetch_sub(1, Ordering::Relaxed);
            // SAFETY: a CQ's channel outlives it (destroy refuses before).
            if let Some(h) = unsafe { q.channel.as_ref() } {
                h.users.fetch_sub(1, Ordering::AcqRel);
            }
            // SAFETY: allocated by create; the program gives it up.
            drop(unsafe { Box::from_raw(cq.cast::<Cq>()) });
            Ok(())
        })
    }
}

export! {
    /// `ibv_resize_cq`: the CQ holds `cqe` completions from now on, and
    /// `cq->cqe` says so (the engine's CQs hold exactly what is asked).
    /// `EINVAL` outside `1..=max_cqe` or below the completions waiting,
    /// as rxe refuses it; the CQ is then unchanged.
    fn ibv_resize_cq(cq: *mut ibv_cq, cqe: c_int) -> c_int {
        errno_ret(|| {
            // SAFETY: the program's CQ.
            let q = unsafe { Cq::from_ptr(cq)? };
            if cqe <= 0 || cqe as u32 > roce_verbs::LIMITS.max_cqe {
                return Err(libc::EINVAL);
            }
            q.cq.resize(cqe as usize).map_err(verr)?;
            // SAFETY: the program's CQ (checked above, not referenced
            // past here); `cqe` is the program's to read, ours to write.
            unsafe { (*cq).cqe = cqe };
            Ok(())
        })
    }
}

export! {
    /// `ibv_create_comp_channel`.
    fn ibv_create_comp_channel(ctx: *mut ibv_context) -> *mut ibv_comp_channel {
        ptr_ret(|| {
            // SAFETY: the program's context.
            let c = unsafe { Context::from_ptr(ctx)? };
            let efd = EventFd::new()?;
            let ch = c.verbs.create_comp_channel();
            ch.set_notifier(efd.counting());
            c.children.fetch_add(1, Ordering::Relaxed);
            let b = Box::new(Channel {
                ibv: ibv_comp_channel { context: ctx, fd: efd.shown(), refcnt: 0 },
                ch,
                efd,
                ctx: c,
                users: AtomicUsize::new(0),
            });
            Ok(Box::into_raw(b).cast())
        })
    }
}

export! {
    /// `ibv_destroy_comp_channel`: `EBUSY` while a CQ uses it. Closes
    /// `channel->fd` if it is still the channel's: a number the program
    /// closed (and may have reused) is left alone.
    fn ibv_destroy_comp_channel(ch: *mut ibv_comp_channel) -> c_int {
        errno_ret(|| {
            // SAFETY: the program's channel (a Channel: its first field).
            let h = unsafe { arg(ch.cast::<Channel>())? };
            if h.users.load(Ordering::Acquire) != 0 {
                return Err(libc::EBUSY);
            }
            // SAFETY: a channel's context outlives it.
            unsafe { &*h.ctx }.children.fetch_sub(1, Ordering::Relaxed);
            h.efd.release();
            // SAFETY: allocated by ibv_create_comp_channel.
            drop(unsafe { Box::from_raw(ch.cast::<Channel>()) });
            Ok(())
        })
    }
}

export! {
    /// `ibv_get_cq_event`: waits (unless the channel's fd is
    /// non-blocking: then `EAGAIN`) for an armed CQ's event; `EBADF`
    /// when the program closed the channel's fd, `EINTR` when a signal
    /// handler without `SA_RESTART` interrupted the wait.
    fn ibv_get_cq_event(ch: *mut ibv_comp_channel, cq_out: *mut *mut ibv_cq, ctx_out: *mut *mut c_void) -> c_int {
        minus_one(|| {
            // SAFETY: the program's channel.
            let h = unsafe { arg(ch.cast::<Channel>())? };
            if cq_out.is_null() || ctx_out.is_null() {
                return Err(libc::EINVAL);
            }
            // SAFETY: a channel's context outlives it.
            let c = unsafe { &*h.ctx };
            h.efd.check()?;
            // Whether a count was taken for the next event.
            let mut counted = false;
            loop {
                // The count and the queue change together (the notifier
                // runs under the queue's lock): an event taken here has
                // its count on the eventfd already. A count left with no
                // event (a destroyed CQ's) is dropped.
                if let Some(q) = h.ch.take_event() {
                    if !counted {
                        h.efd.take()?;
                    }
                    counted = false;
                    let objs = c.objects.lock().unwrap_or_else(|p| p.into_inner());
                    let Some(&Raw(p)) = objs.cqs.get(&key(q.id())) else { continue };
                    let cq = p.cast::<Cq>();
                    // SAFETY: a live CQ of the table; out pointers checked.
                    unsafe {
                        *cq_out = (*cq).ibv_cq();
                        *ctx_out = (*cq).ibv.cq_context;
                    }
                    return Ok(0);
                }
                // A blocking wait takes the context's datagrams on this
                // thread meanwhile (`wait_io`): woken by the one that
                // completes the CQ, it raises the event itself, with no
                // progress thread between (docs/performance.md,
                // "Completion events"). A signal ends it as it ends the
                // kernel's read of the channel: EINTR after a handler
                // installed without SA_RESTART (qperf's SIGALRM ends its
                // tests that way), not after one with it.
                if h.efd.blocking() {
                    match h.ch.wait_io(h.efd.own_fd()) {
                        ChannelWait::Interrupted if eventfd::interrupt_ends_wait() => {
                            return Err(libc::EINTR)
                        }
                        ChannelWait::Interrupted => continue,
                        ChannelWait::Event | ChannelWait::HandedOver => {}
                    }
                } else {
                    h.ch.hand_over();
                }
                // Waits in read() (at once after an event): the count.
                h.efd.take()?;
                counted = true;
            }
        })
    }
}

export! {
    /// `ibv_ack_cq_events`.
    fn ibv_ack_cq_events(cq: *mut ibv_cq, n: u32) {
        void(|| {
            // SAFETY: the program's CQ.
            unsafe { Cq::from_ptr(cq) }?.cq.ack_events(n as u64);
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use roce_verbs::{Qpn, WcOpcode, WcStatus};

    fn ud_recv(hdr: Option<NetworkHdr>) -> Completion {
        let mut wc = Wc::new(7, WcStatus::Success, WcOpcode::Recv, Qpn::new(5));
        wc.wc_flags = WcFlags::GRH;
        wc.network_hdr = hdr;
        Completion { wc, buffer: None }
    }

    /// A UD receive's `sl` is its RoCE packet type (what UCX's UD
    /// transport reads as `sl & 7`); everything else has SL 0. Both
    /// `ibv_poll_cq` and the extended CQ's `read_sl` give `wc_of`'s.
    #[test]
    fn sl_is_the_network_header_type_of_ud_receives() {
        assert_eq!(wc_of(&ud_recv(Some(NetworkHdr::Ipv4))).sl, 2);
        assert_eq!(wc_of(&ud_recv(Some(NetworkHdr::Ipv6))).sl, 1);
        assert_eq!(wc_of(&ud_recv(None)).sl, 0);
        let send = Wc::new(1, WcStatus::Success, WcOpcode::Send, Qpn::new(5));
        let c = Completion {
            wc: send,
            buffer: None,
        };
        assert_eq!(wc_of(&c).sl, 0);
        assert_eq!(wc_of(&ud_recv(Some(NetworkHdr::Ipv4))).wc_flags, 1);
    }
}
