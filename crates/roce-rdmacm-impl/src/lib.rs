//! librdmacm: rdma-core's RDMA connection manager API (`<rdma/rdma_cma.h>`,
//! v44's symbols) over the engine's IB CM (`roce_verbs::Context::
//! cm_connect_nowait` and its siblings), so that programs connect by IP
//! address and port as they do over the kernel's rdma_cm.
//!
//! This crate is an rlib linked into the drop-in `libibverbs.so.1`
//! (crate `roce-ibverbs`), which exports its functions under
//! librdmacm's version nodes (`RDMACM_1.0` ...); the `librdmacm.so.1`
//! that programs load (crate `roce-rdmacm`) is a stub that defines those
//! version nodes and needs `libibverbs.so.1`, so the dynamic linker finds
//! each `rdma_*@RDMACM_1.x` there. glibc moved libpthread into libc the
//! same way. One library means one copy of the state: the contexts that
//! `id->verbs` points to are the contexts of the library's verbs, which
//! this crate reaches only through [`verbs::Verbs`], implemented by
//! `roce-ibverbs` (`docs/architecture.md`, "The drop-in libraries").
//! The C structures, the export boundary and the settings are
//! `roce-cabi`'s.
//!
//! The pieces:
//! * `channel`: event channels (an eventfd programs poll) and events;
//! * `id`: `rdma_cm_id`s, addresses, options, devices;
//! * `route`: an id's socket addresses and route;
//! * `contexts`: which context of the verbs library an id uses;
//! * `verbs`: the interface to the verbs library;
//! * `conn`: listen, connect, accept, reject, disconnect;
//! * `qp`: the QPs, CQs and endpoints librdmacm makes for a program;
//! * `dispatch`: the engine's CM events turned into `rdma_cm_event`s on
//!   the channel of the id they concern;
//! * `addrinfo`: `rdma_getaddrinfo`;
//! * `exit`: connections given up when the process exits, as the
//!   kernel does for a process's ids;
//! * `rsocket`: the rsocket API (`rsocket`, `rsend`, `riomap` ...) for
//!   stream sockets, over the calls above and the library's verbs
//!   (`docs/rsocket.md`).
//!
//! How an id finds a context (`docs/dropin.md`): binding to an address
//! opens (once per process) a context of the device that owns it, on
//! that address; resolving a destination takes the source address the
//! kernel's routing would use, and on loopback any loopback context of
//! the process (a new one moves along 127/8 if 127.0.0.1 is taken, so a
//! client and a server on one host each have their own). A listener
//! bound to the wildcard address listens on a context of every device.

#![deny(unsafe_op_in_unsafe_fn)]

#[macro_use]
extern crate cabi;

use cabi::{abi, config, eventfd, ffi};

mod addrinfo;
mod channel;
mod conn;
mod contexts;
mod dispatch;
mod exit;
mod id;
pub(crate) mod ports;
mod qp;
mod route;
mod rsocket;
pub mod verbs;

use std::net::SocketAddr;
use std::os::raw::c_void;
use std::sync::{Arc, Mutex, MutexGuard};

use roce_verbs::{CmId, ListenId};

pub(crate) use channel::Channel;

use crate::abi::*;
use crate::ffi::Res;
use crate::verbs::CmContext;

/// Locks a mutex, whatever a panicking holder left.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// librdmacm's return convention: 0, or -1 with `errno` set (what
/// rdma-core's `ERR()` returns).
pub(crate) use crate::ffi::rc;

/// Where an id is in its life (rdma_cm's states, reduced to what the
/// calls check).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum State {
    /// Created, or bound to an address.
    Idle,
    /// `rdma_resolve_addr` done.
    AddrResolved,
    /// `rdma_resolve_route` done.
    RouteResolved,
    /// `rdma_listen` done.
    Listening,
    /// A request received (the id of a CONNECT_REQUEST event).
    Requested,
    /// `rdma_connect` or `rdma_accept` sent, waiting for the peer.
    Connecting,
    /// ESTABLISHED delivered.
    Connected,
    /// DISCONNECTED, REJECTED or UNREACHABLE delivered (or disconnect
    /// called): the connection is over.
    Closed,
}

/// What librdmacm keeps beside the C view of an id.
pub(crate) struct IdState {
    pub(crate) state: State,
    /// Where its events go (the program's channel, or a private one for a
    /// synchronous id).
    pub(crate) channel: Arc<Channel>,
    /// The bound or resolved local address and port.
    pub(crate) local: Option<SocketAddr>,
    /// The destination (`rdma_resolve_addr`) or the requester.
    pub(crate) peer: Option<SocketAddr>,
    /// The engine's connection (or SIDR exchange).
    pub(crate) conn: Option<CmId>,
    /// What it listens on: a context and the engine's listener for each.
    pub(crate) listens: Vec<(*mut ibv_context, ListenId)>,
    /// The path record `route.path_rec` points to.
    pub(crate) path: Box<ibv_sa_path_rec>,
    /// What `rdma_create_qp` made for the program, to destroy with the QP.
    pub(crate) own_cqs: bool,
    pub(crate) own_pd: bool,
    /// `rdma_create_ep`/`rdma_get_request`: the QP attributes to create a
    /// QP with on each request (a passive endpoint's).
    pub(crate) ep_qp_attr: Option<ibv_qp_init_attr>,
    /// Set options.
    pub(crate) tos: u8,
    pub(crate) ack_timeout: u8,
    /// `RDMA_OPTION_ID_REUSEADDR` and `RDMA_OPTION_ID_AFONLY` ([`ports`]).
    pub(crate) reuse: bool,
    pub(crate) afonly: bool,
    /// The initiator depth and responder resources of the request or
    /// `rdma_accept`, for `rdma_init_qp_attr`.
    pub(crate) depths: (u8, u8),
}

/// One `rdma_cm_id`: the C view first (programs hold a pointer to it and
/// read its fields), then the library's state.
#[repr(C)]
pub(crate) struct Id {
    /// The C view: programs read and write its fields (`context`, and
    /// `rdma_verbs.h` reads `qp`, `pd`, the CQs ...), so Rust only
    /// reaches it through the raw pointer [`Id::c`].
    cview: std::cell::UnsafeCell<rdma_cm_id>,
    /// A synchronous id (created without a channel, or migrated to
    /// none): calls wait for their outcome. `rdma_migrate_id` changes
    /// it, as librdmacm's does.
    pub(crate) sync: std::sync::atomic::AtomicBool,
    pub(crate) st: Mutex<IdState>,
}

// SAFETY: the raw pointers in the C view and the state name objects
// owned by the program or this library, used under the rules of the
// verbs API (an object is not destroyed while another thread uses it);
// the state is behind a mutex.
unsafe impl Send for Id {}
// SAFETY: as above.
unsafe impl Sync for Id {}

impl Id {
    /// A new id (not yet in any table).
    pub(crate) fn new(
        verbs: *mut ibv_context,
        channel: Arc<Channel>,
        sync: bool,
        ps: u32,
        qp_type: u32,
        context: *mut c_void,
    ) -> Box<Id> {
        // SAFETY: all-zero is a valid rdma_cm_id (NULL pointers, zeros, and
        // zeroed socket addresses).
        let mut c: rdma_cm_id = unsafe { std::mem::zeroed() };
        c.verbs = verbs;
        c.channel = channel.ptr();
        c.context = context;
        c.ps = ps;
        c.qp_type = qp_type;
        if !verbs.is_null() {
            c.port_num = 1;
        }
        Box::new(Id {
            cview: std::cell::UnsafeCell::new(c),
            sync: sync.into(),
            st: Mutex::new(IdState {
                state: State::Idle,
                channel,
                local: None,
                peer: None,
                conn: None,
                listens: Vec::new(),
                path: Box::default(),
                own_cqs: false,
                own_pd: false,
                ep_qp_attr: None,
                tos: 0,
                ack_timeout: 0,
                reuse: false,
                afonly: false,
                depths: (0, 0),
            }),
        })
    }

    /// The id behind a program's pointer.
    ///
    /// # Safety
    /// `p` must be NULL or an id this library created and not destroyed.
    pub(crate) unsafe fn from_ptr<'a>(p: *mut rdma_cm_id) -> Res<&'a Id> {
        // SAFETY: `c` is the first field of the repr(C) Id.
        unsafe { crate::ffi::arg(p.cast::<Id>()) }
    }

    /// The C view (the pointer programs hold).
    pub(crate) fn c(&self) -> *mut rdma_cm_id {
        self.cview.get()
    }

    pub(crate) fn st(&self) -> MutexGuard<'_, IdState> {
        lock(&self.st)
    }

    /// Whether the id is synchronous (see [`Id::sync`]).
    pub(crate) fn is_sync(&self) -> bool {
        self.sync.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Acks the event a synchronous id holds for the program
    /// (`id->event`, which rdma-core acks at the id's next call), if any.
    pub(crate) fn ack_held(&self) {
        // SAFETY: the id's C view; a synchronous id's `event` is an event
        // this library handed out (a Box<Event>) or NULL.
        let held = std::mem::replace(unsafe { &mut (*self.c()).event }, std::ptr::null_mut());
        if !held.is_null() {
            // SAFETY: as above; taken out of the slot, freed once.
            drop(unsafe { Box::from_raw(held.cast::<channel::Event>()) });
        }
    }

    /// Hands `e` to the program as the event the id holds (`id->event`).
    pub(crate) fn hold(&self, e: Box<channel::Event>) {
        // SAFETY: the id's C view; the slot is empty (acked before).
        unsafe { (*self.c()).event = Box::into_raw(e).cast() };
    }

    /// The context the id is bound to, if any.
    pub(crate) fn ctx(&self) -> Res<&CmContext> {
        // SAFETY: `verbs` is NULL or a context of this library, kept open
        // for the process (see `id::context_for`); the program does not
        // write it.
        unsafe { verbs::context((*self.c()).verbs) }
    }
}

/// The C entry points of this crate, as `cabi::ffi::probe` checks them.
#[cfg(test)]
mod exports {
    use cabi::ffi::probe;

    /// Every C entry point, with its body made to panic, returns its
    /// convention's error value without unwinding into C.
    #[test]
    fn every_entry_point_turns_a_panic_into_its_error_value() {
        let (failed, probes) = probe::failures();
        assert!(failed.is_empty(), "{failed:#?}");
        assert!(probes > 60, "{probes} probes");
    }

    /// Every name the library exports under librdmacm's nodes (listed
    /// with the rest of `libibverbs.so.1`'s in `roce-ibverbs`'
    /// `symbols.txt`) is the `export!` of a function of this crate, and
    /// no C function is defined outside the macros but the `atexit`
    /// handler (which catches panics itself).
    #[test]
    fn every_export_goes_through_the_macro() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let symbols = std::fs::read_to_string(root.join("../roce-ibverbs/symbols.txt")).unwrap();
        let n = probe::check_exports(
            &symbols,
            |node| node.starts_with("RDMACM_"),
            &root.join("src"),
            &["exit.rs: at_exit"],
        );
        assert!(n.as_ref().is_ok_and(|&n| n > 60), "{n:?}");
    }
}
