//! What librdmacm needs of the verbs library it is part of, and no more
//! (`docs/architecture.md`, "The drop-in libraries"): the one interface
//! between this crate and `roce-ibverbs`, which implements [`Verbs`] and
//! [`link`]s it when `libibverbs.so.1` is loaded.
//!
//! Through it librdmacm finds and opens contexts (an `rdma_cm_id`'s
//! `verbs` is a context of the verbs library the program calls: one
//! state), reads what it needs of one ([`CmContext`], kept by the verbs
//! side with each context), reaches the engine's QP and CQ behind a
//! program's `ibv_qp` / `ibv_cq` (to connect a QP through the engine's
//! CM, and for rsockets' own posting and polling), and makes the verbs
//! calls rdma-core's librdmacm makes on a program's behalf ([`Calls`]:
//! the verbs library's own exported functions, so each goes through its
//! boundary and trace as the program's calls do).

use std::net::IpAddr;
use std::os::raw::{c_int, c_void};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use crate::abi::*;
use crate::dispatch::Table;
use crate::ffi::{set_errno, Res};

/// The verbs side, as librdmacm uses it.
pub trait Verbs: Sync {
    /// The open contexts, in the order they opened.
    fn contexts(&self) -> Vec<*mut ibv_context>;

    /// What librdmacm keeps and sees of a context.
    ///
    /// # Safety
    /// `p` must be NULL or a context of the verbs library, not closed
    /// for `'a` (librdmacm keeps the contexts it uses open: [`CmContext::pin`]).
    unsafe fn context<'a>(&self, p: *mut ibv_context) -> Res<&'a CmContext>;

    /// The devices listed (`ROCE_DEVICES`), as the engine describes them.
    fn devices(&self) -> Res<Vec<&'static roce_verbs::Device>>;

    /// Whether `a` is an address of `dev` (on loopback: any loopback
    /// address).
    fn owns(&self, dev: &roce_verbs::Device, a: IpAddr) -> bool;

    /// Opens a context of `dev` on `at`, or where `ibv_open_device`
    /// would: on the engine the process already has there, if any.
    fn open(&self, dev: &roce_verbs::Device, at: Option<IpAddr>) -> Res<*mut ibv_context>;

    /// The engine's QP behind a QP of the verbs library.
    ///
    /// # Safety
    /// `qp` must be NULL or a QP of the verbs library, alive for `'a`.
    unsafe fn qp<'a>(&self, qp: *mut ibv_qp) -> Res<&'a roce_verbs::QueuePair>;

    /// The engine's CQ behind a CQ of the verbs library.
    ///
    /// # Safety
    /// `cq` must be NULL or a CQ of the verbs library, alive for `'a`.
    unsafe fn cq<'a>(&self, cq: *mut ibv_cq) -> Res<&'a roce_verbs::CompletionQueue>;

    /// The verbs calls librdmacm makes for a program.
    fn calls(&self) -> &Calls;
}

/// The exported verbs functions librdmacm calls, each field the
/// function of its name with `ibv_` before it (`<infiniband/verbs.h>`
/// signatures).
pub struct Calls {
    /// `ibv_alloc_pd`.
    pub alloc_pd: unsafe extern "C" fn(*mut ibv_context) -> *mut ibv_pd,
    /// `ibv_dealloc_pd`.
    pub dealloc_pd: unsafe extern "C" fn(*mut ibv_pd) -> c_int,
    /// `ibv_create_comp_channel`.
    pub create_comp_channel: unsafe extern "C" fn(*mut ibv_context) -> *mut ibv_comp_channel,
    /// `ibv_destroy_comp_channel`.
    pub destroy_comp_channel: unsafe extern "C" fn(*mut ibv_comp_channel) -> c_int,
    /// `ibv_create_cq`.
    pub create_cq: unsafe extern "C" fn(
        *mut ibv_context,
        c_int,
        *mut c_void,
        *mut ibv_comp_channel,
        c_int,
    ) -> *mut ibv_cq,
    /// `ibv_destroy_cq`.
    pub destroy_cq: unsafe extern "C" fn(*mut ibv_cq) -> c_int,
    /// `ibv_get_cq_event`.
    pub get_cq_event:
        unsafe extern "C" fn(*mut ibv_comp_channel, *mut *mut ibv_cq, *mut *mut c_void) -> c_int,
    /// `ibv_ack_cq_events`.
    pub ack_cq_events: unsafe extern "C" fn(*mut ibv_cq, u32),
    /// `ibv_create_qp`.
    pub create_qp: unsafe extern "C" fn(*mut ibv_pd, *mut ibv_qp_init_attr) -> *mut ibv_qp,
    /// `ibv_modify_qp`.
    pub modify_qp: unsafe extern "C" fn(*mut ibv_qp, *mut ibv_qp_attr, c_int) -> c_int,
    /// `ibv_destroy_qp`.
    pub destroy_qp: unsafe extern "C" fn(*mut ibv_qp) -> c_int,
    /// `ibv_create_srq`.
    pub create_srq: unsafe extern "C" fn(*mut ibv_pd, *mut ibv_srq_init_attr) -> *mut ibv_srq,
    /// `ibv_destroy_srq`.
    pub destroy_srq: unsafe extern "C" fn(*mut ibv_srq) -> c_int,
    /// `ibv_reg_mr`.
    pub reg_mr: unsafe extern "C" fn(*mut ibv_pd, *mut c_void, usize, c_int) -> *mut ibv_mr,
    /// `ibv_dereg_mr`.
    pub dereg_mr: unsafe extern "C" fn(*mut ibv_mr) -> c_int,
}

/// What librdmacm keeps with each context of the verbs library, and
/// reads of it: made by the verbs side when the context opens.
pub struct CmContext {
    ptr: *mut ibv_context,
    /// The engine's handle (the context's).
    pub verbs: roce_verbs::Context,
    /// The context's address: its GID 0.
    pub local: IpAddr,
    /// Its active path MTU in bytes.
    pub mtu: u32,
    /// The process that opened it: a child made by `fork()` inherits the
    /// memory but not the engine's thread, and must not act for it.
    pub pid: u32,
    /// The map of this context's connections (`dispatch`), made when
    /// librdmacm first uses the context.
    pub(crate) cm: OnceLock<Arc<Mutex<Table>>>,
    /// librdmacm's ids use it: it stays open for the process.
    pinned: AtomicBool,
}

// SAFETY: `ptr` is the address of the context this belongs to, kept open
// while librdmacm uses it; the rest is Send and Sync.
unsafe impl Send for CmContext {}
// SAFETY: as above.
unsafe impl Sync for CmContext {}

impl CmContext {
    /// librdmacm's part of a context opened by the verbs side on `local`
    /// (its `ibv_context` pointer is given by [`CmContext::attach`]).
    pub fn new(verbs: roce_verbs::Context, local: IpAddr, mtu: u32) -> CmContext {
        CmContext {
            ptr: std::ptr::null_mut(),
            verbs,
            local,
            mtu,
            pid: std::process::id(),
            cm: OnceLock::new(),
            pinned: AtomicBool::new(false),
        }
    }

    /// The context's `ibv_context` pointer, once it has its place.
    pub fn attach(&mut self, p: *mut ibv_context) {
        self.ptr = p;
    }

    /// The `ibv_context` pointer programs see.
    pub fn ibv(&self) -> *mut ibv_context {
        self.ptr
    }

    /// Keeps the context open for the process: librdmacm's ids and the
    /// objects made on them point into it.
    pub fn pin(&self) {
        self.pinned.store(true, Ordering::Release);
    }

    /// The map of the context's connections, made (and the engine's CM
    /// events sent to it) the first time.
    pub(crate) fn table(&self) -> Arc<Mutex<Table>> {
        self.cm
            .get_or_init(|| {
                let t = Arc::new(Mutex::new(Table::new(self.ibv())));
                let sink = t.clone();
                self.verbs
                    .set_cm_sink(Box::new(move |e| crate::lock(&sink).handle(e)));
                t
            })
            .clone()
    }

    /// Whether librdmacm uses the context (the verbs side's
    /// `ibv_close_device` then only flushes it).
    pub fn pinned(&self) -> bool {
        self.pinned.load(Ordering::Acquire)
    }
}

static SIDE: OnceLock<&'static dyn Verbs> = OnceLock::new();

/// Gives librdmacm its verbs side (once; `roce-ibverbs` does it when the
/// library is loaded).
pub fn link(v: &'static dyn Verbs) {
    let _ = SIDE.set(v);
}

/// The verbs side, or `ENODEV` in a program without it (this crate's
/// own unit tests).
pub(crate) fn side() -> Res<&'static dyn Verbs> {
    SIDE.get().copied().ok_or(libc::ENODEV)
}

/// A context of the verbs library (see [`Verbs::context`]).
///
/// # Safety
/// As [`Verbs::context`].
pub(crate) unsafe fn context<'a>(p: *mut ibv_context) -> Res<&'a CmContext> {
    // SAFETY: the caller's contract.
    unsafe { side()?.context(p) }
}

/// The open contexts.
pub(crate) fn live() -> Vec<*mut ibv_context> {
    side().map(|s| s.contexts()).unwrap_or_default()
}

/// The engine's QP behind a program's QP.
///
/// # Safety
/// As [`Verbs::qp`].
pub(crate) unsafe fn engine_qp<'a>(qp: *mut ibv_qp) -> Res<&'a roce_verbs::QueuePair> {
    // SAFETY: the caller's contract.
    unsafe { side()?.qp(qp) }
}

/// The engine's CQ behind a program's CQ.
///
/// # Safety
/// As [`Verbs::cq`].
pub(crate) unsafe fn engine_cq<'a>(cq: *mut ibv_cq) -> Res<&'a roce_verbs::CompletionQueue> {
    // SAFETY: the caller's contract.
    unsafe { side()?.cq(cq) }
}

/// The verbs calls as librdmacm's code makes them: each with the C
/// signature and error value of the verbs function of the same name
/// (NULL or -1 with `errno` `ENODEV` without a verbs side).
macro_rules! calls {
    ($($name:ident => $field:ident ($($a:ident: $t:ty),*) -> $r:ty, $err:expr;)*) => {$(
        #[doc = concat!("`", stringify!($name), "` of the verbs library.")]
        ///
        /// # Safety
        /// As the verbs call's: the arguments are the program's objects.
        pub(crate) unsafe fn $name($($a: $t),*) -> $r {
            match side() {
                // SAFETY: the caller's contract, forwarded.
                Ok(s) => unsafe { (s.calls().$field)($($a),*) },
                Err(e) => {
                    set_errno(e);
                    $err
                }
            }
        }
    )*};
}

calls! {
    ibv_alloc_pd => alloc_pd(ctx: *mut ibv_context) -> *mut ibv_pd, std::ptr::null_mut();
    ibv_dealloc_pd => dealloc_pd(pd: *mut ibv_pd) -> c_int, libc::ENODEV;
    ibv_create_comp_channel => create_comp_channel(ctx: *mut ibv_context) -> *mut ibv_comp_channel, std::ptr::null_mut();
    ibv_destroy_comp_channel => destroy_comp_channel(ch: *mut ibv_comp_channel) -> c_int, libc::ENODEV;
    ibv_create_cq => create_cq(ctx: *mut ibv_context, cqe: c_int, user: *mut c_void, ch: *mut ibv_comp_channel, vector: c_int) -> *mut ibv_cq, std::ptr::null_mut();
    ibv_destroy_cq => destroy_cq(cq: *mut ibv_cq) -> c_int, libc::ENODEV;
    ibv_get_cq_event => get_cq_event(ch: *mut ibv_comp_channel, cq: *mut *mut ibv_cq, user: *mut *mut c_void) -> c_int, -1;
    ibv_ack_cq_events => ack_cq_events(cq: *mut ibv_cq, n: u32) -> (), ();
    ibv_create_qp => create_qp(pd: *mut ibv_pd, attr: *mut ibv_qp_init_attr) -> *mut ibv_qp, std::ptr::null_mut();
    ibv_modify_qp => modify_qp(qp: *mut ibv_qp, attr: *mut ibv_qp_attr, mask: c_int) -> c_int, libc::ENODEV;
    ibv_destroy_qp => destroy_qp(qp: *mut ibv_qp) -> c_int, libc::ENODEV;
    ibv_create_srq => create_srq(pd: *mut ibv_pd, attr: *mut ibv_srq_init_attr) -> *mut ibv_srq, std::ptr::null_mut();
    ibv_destroy_srq => destroy_srq(srq: *mut ibv_srq) -> c_int, libc::ENODEV;
    ibv_reg_mr => reg_mr(pd: *mut ibv_pd, addr: *mut c_void, len: usize, access: c_int) -> *mut ibv_mr, std::ptr::null_mut();
    ibv_dereg_mr => dereg_mr(mr: *mut ibv_mr) -> c_int, libc::ENODEV;
}
