//! Opening and closing contexts: `ibv_open_device`, `ibv_close_device`,
//! and [`new_context`], which librdmacm calls to open a context on the
//! address an id binds to.
//!
//! A new context gets its ops tables (`verbs_context`: the entries
//! `verbs.h`'s inline functions call) from the modules of the objects
//! they work on (`cq`, `qp` and its posting, `srq`, the context's
//! queries); this module sits above all of them, so that none of them
//! needs to know the others (`docs/architecture.md`, "Inside
//! libibverbs.so.1").

use std::mem::offset_of;
use std::net::IpAddr;
use std::os::raw::{c_int, c_void};
use std::sync::atomic::AtomicUsize;
use std::sync::Mutex;

use rdmacm_impl::verbs::CmContext;

use crate::abi::consts::VERBS_ABI_IS_EXTENDED;
use crate::abi::*;
use crate::config::log;
use crate::context::{self, Context, Objects};
use crate::cq::Cq;
use crate::debug;
use crate::device::{self, Device};
use crate::engine::{Engine, EventQueue};
use crate::eventfd::EventFd;
use crate::ffi::{errno_ret, ptr_ret, Res};
use crate::qp::Qp;

/// Opens a context of `dev` on `at` (librdmacm binding an address), or
/// where `ibv_open_device` would: on the engine this process already
/// has there, if any.
pub(crate) fn new_context(dev: &'static Device, at: Option<IpAddr>) -> Res<*mut ibv_context> {
    debug::watch(seen);
    let asked = context::asked_addr(dev, at)?;
    // The engine and the posting paths copy program memory through the
    // guard (docs/dropin.md, "Registered memory"): its handler goes in
    // with the first context (and is checked again at each registration).
    roce_verbs::guard::install_fault_handler()
        .map_err(|e| e.raw_os_error().unwrap_or(libc::EIO))?;
    let engine = Engine::get(
        dev,
        asked,
        context::first_addr(dev),
        || context::open_engine(dev, asked),
        context::route,
    )?;
    let (verbs, local) = (engine.verbs.clone(), engine.local);
    let efd = EventFd::new()?;
    let cmd_fd = EventFd::new()?;
    let mtu = if dev.info.interface().loopback {
        4096
    } else {
        dev.info.active_mtu()
    };
    // SAFETY: an all-zero verbs_context is valid (NULL pointers, None
    // function pointers, zero integers); the fields that matter are set
    // below.
    let mut vctx: verbs_context = unsafe { std::mem::zeroed() };
    context::install_queries(&mut vctx);
    crate::cq::install(&mut vctx);
    crate::qp::install(&mut vctx);
    crate::srq::install(&mut vctx);
    vctx.sz = size_of::<verbs_context>();
    let c = &mut vctx.context;
    c.device = &dev.ibv as *const ibv_device as *mut ibv_device;
    c.cmd_fd = cmd_fd.shown();
    c.async_fd = efd.shown();
    c.num_comp_vectors = 1;
    c.mutex = libc::PTHREAD_MUTEX_INITIALIZER;
    c.abi_compat = VERBS_ABI_IS_EXTENDED as *mut c_void;
    let verbs_of_cm = verbs.clone();
    let ctx = Box::new(Context {
        vctx,
        verbs,
        engine,
        events: EventQueue::default(),
        device: dev,
        local,
        gids: context::gid_table(dev, local),
        mtu,
        async_efd: efd,
        cmd_fd,
        objects: Mutex::new(Objects::default()),
        children: AtomicUsize::new(0),
        cm: CmContext::new(verbs_of_cm, local, mtu),
    });
    let ctx = Box::leak(ctx);
    let p = ctx.ibv();
    ctx.cm.attach(p);
    ctx.engine.join(p);
    context::register(p);
    Ok(p)
}

export! {
    /// `ibv_open_device`.
    fn ibv_open_device(dev: *mut ibv_device) -> *mut ibv_context {
        ptr_ret(|| new_context(device::from_ptr(dev)?, None))
    }
}

export! {
    /// `ibv_close_device`: stops the engine. Objects the program did not
    /// destroy go with it (their memory is not freed: a pointer the
    /// program still holds stays readable).
    fn ibv_close_device(ctx: *mut ibv_context) -> c_int {
        errno_ret(|| {
            // SAFETY: the program passes a context it opened.
            let c = unsafe { Context::from_ptr(ctx)? };
            if c.cm.pinned() {
                // librdmacm's ids use it (see `pinned`).
                c.verbs.flush();
                return Ok(());
            }
            context::unregister(ctx);
            let off = offset_of!(Context, vctx) + offset_of!(verbs_context, context);
            // SAFETY: as from_ptr; the program gives up the context here.
            let c = unsafe { Box::from_raw(ctx.byte_sub(off) as *mut Context) };
            log!("closing {} on {}", c.device.info.name(), c.local);
            c.engine.leave(ctx);
            // The program's async_fd, if still ours (see EventFd).
            c.async_efd.release();
            c.cmd_fd.release();
            // The last ACKs of destroyed QPs leave before the program,
            // which usually exits next, can end the process.
            c.verbs.flush();
            drop(c);
            Ok(())
        })
    }
}

/// Every live context with its QPs and CQs, as the debugging aids see
/// them (`debug::Seen`: the summary at exit, `roce top`).
fn seen(f: &mut dyn FnMut(&debug::Seen<'_>)) {
    context::each_live(|_, c| {
        let objs = c.objects.lock().unwrap_or_else(|p| p.into_inner());
        let qps = objs
            .qps
            .values()
            // SAFETY: a QP on its context's table is alive (it leaves the
            // table before it is freed, under this lock).
            .filter_map(|r| unsafe { Qp::from_ptr(r.0.cast()) }.ok())
            .map(|q| &q.qp)
            .collect();
        let cqs = objs
            .cqs
            .values()
            // SAFETY: as for the QPs.
            .filter_map(|r| unsafe { Cq::from_ptr(r.0.cast()) }.ok())
            .map(|q| (q.cq.id().0, &q.by_status))
            .collect();
        let name = c.device.info.name();
        f(&debug::Seen {
            verbs: &c.verbs,
            device: &name,
            local: c.local,
            key: c as *const Context as usize,
            qps,
            cqs,
        });
    });
}
