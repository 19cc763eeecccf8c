//! Contexts: the object behind a program's `ibv_context` pointer, and
//! what a context knows of itself.
//!
//! A context is one engine of this stack (a `roce_verbs::Context`, shared
//! with the process's other contexts on the same device and address:
//! `crate::engine`) opened on one address of the device, its GID 0.
//! The pieces, by concern:
//! * this file: the [`Context`] object, its table of objects by engine
//!   id ([`Objects`]), and the one-context rule of calls taking objects
//!   ([`same_context`]);
//! * `live`: the registry of open contexts, where librdmacm finds the
//!   one on an address and the exit summary finds them all;
//! * `gid`: GIDs and addresses, and the GID table of a context;
//! * `addr`: which address a context opens on (`ROCE_ADDR`, the
//!   device's first address, the walk along 127/8 on loopback), and
//!   the opening of its engine;
//! * `query`: the device, port, GID and P_Key queries;
//! * `events`: asynchronous events (`ibv_get_async_event`).
//!
//! Opening and closing (`ibv_open_device`, `ibv_close_device`), which
//! fill a context's ops tables from the object modules, are in
//! `crate::open`, above them all (`docs/architecture.md`, "Inside
//! libibverbs.so.1").

use std::collections::HashMap;
use std::mem::offset_of;
use std::net::IpAddr;
use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, Mutex};

use rdmacm_impl::verbs::CmContext;
use roce_verbs::{CqId, SrqId};

use crate::abi::*;
use crate::device::Device;
use crate::engine::{Engine, EventQueue, Resolved};
use crate::eventfd::EventFd;
use crate::ffi::{Raw, Res};

mod addr;
mod events;
mod gid;
mod live;
mod query;

pub(crate) use addr::{asked_addr, first_addr, open_engine, owns};
pub(crate) use events::route;
pub(crate) use gid::{addr_of, gid_err, gid_of, gid_table};
pub(crate) use live::{add as register, remove as unregister};
pub(crate) use live::{each_live, live};
pub(crate) use query::{install as install_queries, mtu_enum};

/// The objects of a context, by engine id: where asynchronous events
/// and completion channels find the C pointer of what they name.
#[derive(Default)]
pub(crate) struct Objects {
    pub(crate) qps: HashMap<u32, Raw>,
    pub(crate) cqs: HashMap<u32, Raw>,
    pub(crate) srqs: HashMap<u32, Raw>,
}

impl Objects {
    /// The table's key of a CQ.
    pub(crate) fn cq_key(id: CqId) -> u32 {
        id.0
    }

    /// The table's key of an SRQ.
    pub(crate) fn srq_key(id: SrqId) -> u32 {
        id.0
    }
}

/// One open context: the C view first (the program holds a pointer to
/// its `vctx.context`).
#[repr(C)]
pub(crate) struct Context {
    pub(crate) vctx: verbs_context,
    /// The engine's handle (`engine.verbs`).
    pub(crate) verbs: roce_verbs::Context,
    /// The engine this context shares with the process's other contexts
    /// of the device on its address ([`Engine`]).
    pub(crate) engine: Arc<Engine>,
    /// Asynchronous events of this context's objects, waiting for
    /// `ibv_get_async_event` (counted on `async_efd`).
    pub(crate) events: EventQueue,
    pub(crate) device: &'static Device,
    /// The context's address: GID index 0.
    pub(crate) local: IpAddr,
    /// The GID table ([`gid_table`]): `local` first.
    pub(crate) gids: Vec<IpAddr>,
    /// Active path MTU in bytes.
    pub(crate) mtu: u32,
    /// The eventfd behind `async_fd` (one count per queued event; the
    /// program sees its own number of it, see [`EventFd`]).
    pub(crate) async_efd: Arc<EventFd>,
    /// What `cmd_fd` is: a descriptor of the context's own that programs
    /// may `dup` (rdma-core's tests do, for `ibv_import_device`, which
    /// says `EOPNOTSUPP` here); it never carries anything, and is
    /// released with the context as `async_fd` is.
    pub(crate) cmd_fd: Arc<EventFd>,
    pub(crate) objects: Mutex<Objects>,
    /// PDs, CQs, channels and QPs still alive: `ibv_close_device` does
    /// not check (rdma-core does not either), but `ibv_dealloc_pd` does.
    pub(crate) children: AtomicUsize,
    /// What librdmacm keeps with the context and reads of it (crate
    /// `roce-rdmacm-impl`, reached through `crate::cm_side`): its
    /// connections, and whether its ids use the context (then it stays
    /// open for the process: a program's `ibv_close_device` only
    /// flushes it).
    pub(crate) cm: CmContext,
}

impl Context {
    /// Queues an event of one of its objects for the program.
    pub(crate) fn queue_event(&self, r: Resolved) {
        self.events
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push_back(r);
        self.async_efd.count();
    }

    /// The context behind a program's `ibv_context` pointer.
    ///
    /// # Safety
    /// `p` must be NULL or a context this library opened and not closed.
    pub(crate) unsafe fn from_ptr<'a>(p: *mut ibv_context) -> Res<&'a Context> {
        if p.is_null() {
            return Err(libc::EINVAL);
        }
        let off = offset_of!(Context, vctx) + offset_of!(verbs_context, context);
        // SAFETY: the context is the `vctx.context` field of a `Context`
        // this library allocated (the caller's contract).
        Ok(unsafe { &*(p.byte_sub(off) as *const Context) })
    }

    /// The `ibv_context` pointer programs see.
    pub(crate) fn ibv(&self) -> *mut ibv_context {
        &self.vctx.context as *const ibv_context as *mut ibv_context
    }
}

/// `EINVAL` unless objects belong to one context: the process's
/// contexts of a device share an engine ([`Engine`]), so the engine's
/// own checks cannot tell them apart; the kernel finds no object of
/// another context in a context's tables.
pub(crate) fn same_context(ctxs: &[*mut ibv_context]) -> Res<()> {
    match ctxs.split_first() {
        Some((first, rest)) if rest.iter().any(|c| c != first) => Err(libc::EINVAL),
        _ => Ok(()),
    }
}
