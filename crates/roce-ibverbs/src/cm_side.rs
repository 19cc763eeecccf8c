//! The verbs side of librdmacm (`rdmacm_impl::verbs::Verbs`): what the
//! RDMA CM code of crate `roce-rdmacm-impl`, linked into this library,
//! may do with contexts, QPs and CQs of this library, and nothing more
//! (`docs/architecture.md`, "The drop-in libraries").
//!
//! It is handed to librdmacm when the library is loaded (an ELF
//! constructor, [`LINK`]), before any function of the program can run:
//! the `rdma_*` functions this library exports under librdmacm's
//! version nodes then reach the same contexts as the `ibv_*` ones.

use std::net::IpAddr;

use rdmacm_impl::verbs::{Calls, CmContext, Verbs};

use crate::abi::*;
use crate::context::{self, Context};
use crate::cq::Cq;
use crate::device::{self, Device};
use crate::ffi::Res;
use crate::qp::Qp;

/// This library, as librdmacm's verbs side.
struct Side;

/// The verbs calls librdmacm makes: this library's exports.
static CALLS: Calls = Calls {
    alloc_pd: crate::pd::ibv_alloc_pd,
    dealloc_pd: crate::pd::ibv_dealloc_pd,
    create_comp_channel: crate::cq::ibv_create_comp_channel,
    destroy_comp_channel: crate::cq::ibv_destroy_comp_channel,
    create_cq: crate::cq::ibv_create_cq,
    destroy_cq: crate::cq::ibv_destroy_cq,
    get_cq_event: crate::cq::ibv_get_cq_event,
    ack_cq_events: crate::cq::ibv_ack_cq_events,
    create_qp: crate::qp::ibv_create_qp,
    modify_qp: crate::qp::ibv_modify_qp,
    destroy_qp: crate::qp::ibv_destroy_qp,
    create_srq: crate::srq::ibv_create_srq,
    destroy_srq: crate::srq::ibv_destroy_srq,
    reg_mr: crate::pd::ibv_reg_mr,
    dereg_mr: crate::pd::ibv_dereg_mr,
};

/// The listed device the engine describes as `info`.
fn device_of(info: &roce_verbs::Device) -> Res<&'static Device> {
    let name = info.name();
    device::current()?
        .into_iter()
        .find(|d| d.info.name() == name)
        .ok_or(libc::ENODEV)
}

impl Verbs for Side {
    fn contexts(&self) -> Vec<*mut ibv_context> {
        context::live()
    }

    unsafe fn context<'a>(&self, p: *mut ibv_context) -> Res<&'a CmContext> {
        // SAFETY: the caller's contract (a context of this library).
        unsafe { Context::from_ptr(p) }.map(|c| &c.cm)
    }

    fn devices(&self) -> Res<Vec<&'static roce_verbs::Device>> {
        Ok(device::current()?.into_iter().map(|d| &d.info).collect())
    }

    fn owns(&self, dev: &roce_verbs::Device, a: IpAddr) -> bool {
        device_of(dev).is_ok_and(|d| context::owns(d, a))
    }

    fn open(&self, dev: &roce_verbs::Device, at: Option<IpAddr>) -> Res<*mut ibv_context> {
        crate::open::new_context(device_of(dev)?, at)
    }

    unsafe fn qp<'a>(&self, qp: *mut ibv_qp) -> Res<&'a roce_verbs::QueuePair> {
        // SAFETY: the caller's contract (a QP of this library).
        unsafe { Qp::from_ptr(qp) }.map(|q| &q.qp)
    }

    unsafe fn cq<'a>(&self, cq: *mut ibv_cq) -> Res<&'a roce_verbs::CompletionQueue> {
        // SAFETY: the caller's contract (a CQ of this library).
        unsafe { Cq::from_ptr(cq) }.map(|c| &c.cq)
    }

    fn calls(&self) -> &Calls {
        &CALLS
    }
}

/// Gives librdmacm this library as its verbs side (cannot fail nor
/// panic: it sets a `OnceLock`).
extern "C" fn link_cm() {
    rdmacm_impl::verbs::link(&Side);
}

/// Runs [`link_cm`] when the dynamic linker loads the library, as a C
/// library's `__attribute__((constructor))` does (rdma-core's provider
/// libraries register themselves with libibverbs that way).
#[used]
#[link_section = ".init_array"]
static LINK: extern "C" fn() = link_cm;
