//! The application API of the RoCE v2 stack, shaped after libibverbs:
//! [`Context`], [`ProtectionDomain`], [`MemoryRegion`], [`CompletionQueue`]
//! (with [`CompletionChannel`]), [`QueuePair`], [`SharedReceiveQueue`] and
//! [`AddressHandle`], over the sans-IO engine of `roce-core`, driven by a
//! progress engine over any `roce-io` [`Backend`](roce_io::Backend).
//!
//! Where it sits: applications (and the `roce` command) use this crate;
//! it drives `roce-core`'s engine over a `roce-io` backend and owns the
//! threads, locks and clock the engine has none of. See
//! `docs/architecture.md` in the repository.
//!
//! Two contexts on an in-memory fabric, an RC connection and one SEND:
//!
//! ```
//! use roce_verbs::*;
//! use std::time::Duration;
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//!
//! let fabric = roce_io::Fabric::new();
//! let a = Context::open_fabric(&fabric, "10.0.0.1".parse()?)?;
//! let b = Context::open_fabric(&fabric, "10.0.0.2".parse()?)?;
//! let (pa, pb) = (a.alloc_pd(), b.alloc_pd());
//! let (ca, cb) = (a.create_cq(64, None)?, b.create_cq(64, None)?);
//! let qa = pa.create_qp(&QpInitAttr::new(QpType::Rc, &ca, &ca))?;
//! let qb = pb.create_qp(&QpInitAttr::new(QpType::Rc, &cb, &cb))?;
//! let (ea, eb) = (qa.endpoint(Psn::new(100)), qb.endpoint(Psn::new(200)));
//! qa.connect(ea.psn, &eb, &ConnectOptions::default())?;
//! qb.connect(eb.psn, &ea, &ConnectOptions::default())?;
//!
//! let rx = pb.reg_mr(vec![0u8; 64], Access::LOCAL_WRITE)?;
//! qb.post_recv(RecvWr::new(1, [rx.sge(0, 64)]))?;
//! qa.post_send_owned(SendWr::send(7, []), b"hello".to_vec())?;
//!
//! assert_eq!(ca.poll_until(1, Duration::from_secs(5))?[0].wr_id(), 7);
//! assert_eq!(cb.poll_until(1, Duration::from_secs(5))?[0].byte_len(), 5);
//! let mut got = [0u8; 5];
//! rx.read(0, &mut got)?;
//! assert_eq!(&got, b"hello");
//! # Ok(()) }
//! ```
//!
//! # Work requests and errors
//!
//! A [`SendWr`]'s operation ([`SendOp`]) carries its operands, so the
//! remote address and key ([`RemoteAddr`]) exist only on the RDMA
//! operations; a UD destination is given to
//! [`QueuePair::post_send_ud`]. Each kind of call has its own error type
//! ([`PostError`], [`CreateError`], [`ModifyQpError`], [`RegMrError`],
//! ...), and each converts into [`Error`] (docs/architecture.md, "The
//! Rust API of roce-verbs"):
//!
//! ```no_run
//! # use roce_verbs::*;
//! # fn f(qp: &QueuePair, mr: &MemoryRegion, peer: RemoteMr) -> Result<(), Error> {
//! qp.post_send(SendWr::write(1, [mr.sge(0, 64)], peer.at(128)).unsignaled())?;
//! match qp.post_send(SendWr::read(2, [mr.sge(64, 64)], peer.at(0))) {
//!     Err(PostError::QueueFull) => { /* poll, then post again */ }
//!     r => r?,
//! }
//! # Ok(()) }
//! ```
//!
//! # Threading model
//!
//! Each [`Context`] owns one engine (`roce_core::Device`) behind one
//! mutex, and its backend (with its receive and transmit batches) behind a
//! second one. A *progress step* takes the backend lock, receives a batch
//! and feeds it to the engine, runs due timers, drains
//! `poll_transmit` into a transmit batch and sends it, and raises
//! completion-channel and async events. The engine lock is held only
//! while the engine runs, never across backend I/O, and posting or
//! polling from application threads takes it only briefly.
//!
//! Two kinds of thread run steps:
//!
//! * **Application threads, inline** ([`ProgressConfig::inline_progress`],
//!   on by default). A post transmits at once on the posting thread, and
//!   [`CompletionQueue::poll`] on an empty CQ runs one step before giving
//!   up; both only `try_lock` the backend, so they never wait for another
//!   thread's step. A thread that busy-polls its CQ is therefore its own
//!   progress engine: a ping-pong has no thread hand-off at all, which is
//!   what minimizes latency.
//! * **One progress thread per context**, for everything nobody polls for:
//!   the passive side of RDMA WRITE / READ / atomics, ACKs, retransmission
//!   and RNR timers, and waking [`CompletionChannel::get_event`] and
//!   [`Context::get_async_event`] waiters. It loops while there is work,
//!   keeps polling for [`ProgressConfig::spin`] after the last work
//!   (yielding the CPU between rounds, so on two cores it does not starve
//!   the application), then parks until the engine's next timer or the
//!   backend's [`poll_at`](roce_io::Backend::poll_at), at most
//!   [`ProgressConfig::max_park`]. Posts unpark it when they cannot
//!   transmit inline; in-memory fabric endpoints opened with
//!   [`Context::open_fabric`] unpark the receiving context's thread when
//!   they send to it (a backend has no readiness notification, so other
//!   backends are noticed within `max_park`). While an application thread
//!   is polling inline, the progress thread stays parked and leaves the
//!   work to it instead of competing for the CPU.
//!
//! Time is a monotonic clock shared by every context of the process
//! (nanoseconds since the first context opened), so contexts on one
//! in-memory fabric agree on delivery times. The thread is named
//! `roce-progress`; it stops and is joined when the last handle of the
//! context (or of any object made from it) is dropped.
//!
//! # Memory safety at the RDMA boundary
//!
//! Registered memory is never exposed as a plain slice while the engine
//! may write it, and it stays alive until every work request that
//! references it has completed.
//!
//! * **Owned regions** ([`ProtectionDomain::reg_mr`]): the buffer moves
//!   into the engine. The application copies in and out with
//!   [`MemoryRegion::read`] / [`MemoryRegion::write`] under the engine
//!   lock and gets the buffer back with [`MemoryRegion::into_inner`].
//! * **Work requests keep regions alive.** Scatter/gather entries name
//!   regions by lkey; a post resolves each lkey to its region (refusing
//!   unknown keys, another PD, or entries out of bounds) and stores a
//!   reference to it with the WR, under an internal `wr_id` that is mapped
//!   back to the application's when the completion is polled. The
//!   reference is released when the completion is polled (for an
//!   unsignaled send, when a later completion of its QP is), or when its
//!   QP is destroyed or reset. A region is deregistered when its handle and
//!   all those references are gone, so dropping a [`MemoryRegion`] while a
//!   WR uses it is safe and the WR completes normally.
//! * **Raw regions** ([`ProtectionDomain::reg_mr_raw`], `unsafe`):
//!   zero-copy over memory the caller keeps, under the rule written on
//!   that function.
//! * **Owned-buffer work requests** ([`QueuePair::post_send_owned`],
//!   [`QueuePair::post_recv_owned`]): a `Vec<u8>` is registered for one WR
//!   and handed back in [`Completion::buffer`].
//!
//! `unsafe` in this crate is the raw-region path only: the `unsafe fn`
//! [`ProtectionDomain::reg_mr_raw`] (`pd.rs`), whose contract the caller
//! upholds, the raw region's copies (`mr.rs`), and the guarded copy they
//! go through with its fault handler ([`guard`]), each block with its
//! `SAFETY` argument.
#![deny(unsafe_op_in_unsafe_fn)]
#![deny(unsafe_code)]

mod cm;
mod cm_sink;
mod completion;
mod config;
mod connect;
mod context;
mod cq;
mod cq_wait;
mod device;
mod error;
mod error_objects;
mod error_ops;
// Guarded copies of program memory: assembly, a signal handler, and
// `process_vm_writev` (issue 33).
#[allow(unsafe_code)]
pub mod guard;
pub mod loopback;
// Raw regions: pointers into the application's memory (see the crate docs).
mod limits;
#[allow(unsafe_code)]
mod mr;
// `reg_mr_raw`, the unsafe entry to raw regions.
#[allow(unsafe_code)]
mod pd;
mod progress;
mod qp;
mod random;
mod recv;
mod schedule;
mod srq;
mod state;
mod wr;

pub use cm::{CmAccepting, CmConnection, CmError, CmListener, CmRequest, UdCmRequest};
pub use cm_sink::{CmSink, PortSpace};
pub use completion::Completion;
pub use config::ProgressConfig;
pub use connect::{ConnectOptions, QpEndpoint};
pub use context::Context;
pub use cq::{CompletionChannel, CompletionQueue};
pub use cq_wait::{ChannelWait, WaitCounters};
pub use device::{node_guid, BackendKind, Device, OpenError, OpenOptions, Wrap};
pub use error::{
    CreateError, Error, ModifyQpError, OwnedPostError, PostError, PostListError, RegMrError,
};
pub use error_objects::{CqError, RegionError, SrqLimitError};
pub use limits::{DeviceLimits, LIMITS};
pub use loopback::free_loopback_v4;
pub use mr::{DeregError, MemoryRegion, RemoteMr, Revoker};
pub use pd::{AddressHandle, AhAttr, ProtectionDomain};
pub use qp::{QpInitAttr, QueuePair};
pub use random::{os_seed, random_psn, random_u64};
pub use roce_core::cm::{CmEvent, CmId, CmState, ConnParam, ConnRequest, ListenId, UdRequest};
pub use srq::SharedReceiveQueue;
pub use state::{clock_nanos, EventSink, Notifier};
pub use wr::{RemoteAddr, SendBatch, SendOp, SendWr};

// The protocol's vocabulary, named one by one (docs/architecture.md, "The
// Rust API of roce-verbs"): the crates `roce_core` and `roce_io` are not
// re-exported. The engine's C-shaped `SendWr`/`SendOp` are not either:
// the send work request of this API is `wr::SendWr`.
pub use roce_core::{
    Access, AckDelay, AddressVector, AsyncEvent, CqId, DeviceConfig, DeviceCounters, IcrcCheck,
    Lkey, ModifyError, Nanos, NetworkHdr, Payload, PdId, Psn, Qkey, QpAttr, QpAttrMask, QpCaps,
    QpCounters, QpState, QpType, Qpn, RecvWr, Rkey, SendFlags, Sge, SgeList, SrqId, UdDest, Wc,
    WcFlags, WcOpcode, WcStatus,
};
