//! The sans-IO RoCE v2 transport engine.
//!
//! [`Device`] owns protection domains, memory regions, completion queues,
//! shared receive queues and queue pairs, and runs the RC, UC and UD
//! transports over them (IBTA Vol 1 chapters 9–11, Annex A17). It does no
//! I/O and reads no clock: datagrams and time come in as arguments, packets
//! go out through caller-provided buffers, so the same engine runs over
//! real sockets, an in-memory fabric in tests, and the fabric simulator.
//! See [`device`] for the call order.
#![forbid(unsafe_code)]

pub mod cc;
pub mod cm;
mod counters;
mod cq;
pub mod device;
mod mr;
pub mod qp;
mod sgl;
mod srq;
mod wc;
mod wr;

pub use cc::{CcAlgorithm, CcConfig, CcCounters, DcqcnParams, Mlx5Params};
pub use counters::{DeviceCounters, QpCounters};
pub use cq::{Cq, CqId, CqOverflow};
pub use device::{CmCounters, Device, DeviceConfig, VerbsError};
pub use mr::{Access, AccessError, MrKeys, MrTable, PdId, RegionMemory};
pub use qp::state::{ModifyError, QpAttrMask, QpState, QpType};
pub use qp::{AckDelay, AddressVector, PostError, Qp, QpAttr, QpCaps, QpInitAttr};
pub use roce_wire::{Lkey, Msn, Psn, Qkey, Qpn, Rkey, RxMeta, Transmit};
pub use srq::{Srq, SrqId, MAX_SRQ_SGE};
pub use wc::{Wc, WcFlags, WcOpcode, WcStatus};
pub use wr::{Payload, RecvWr, SendFlags, SendOp, SendWr, Sge, UdDest};

/// Time in nanoseconds, from any fixed origin the caller chooses.
pub type Nanos = u64;

/// Asynchronous events (`ibv_event_type` subset).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AsyncEvent {
    /// A QP entered the error state.
    QpFatal(Qpn),
    /// A CQ overflowed.
    CqError(CqId),
    /// An SRQ dropped below its armed limit.
    SrqLimitReached(SrqId),
    /// A QP moved to SQD with `EN_SQD_ASYNC_NOTIFY` has drained its send
    /// queue: every message begun before is sent and acknowledged (IBTA
    /// Vol 1 §11.6.3, "Send Queue Drained"; `IBV_EVENT_SQ_DRAINED`).
    SqDrained(Qpn),
    /// A QP using an SRQ entered the error state and took its last
    /// receive from the SRQ: its receive side is flushed, and it may be
    /// destroyed without losing an SRQ receive (IBTA Vol 1 §11.6.3, "Last
    /// WQE Reached"; `IBV_EVENT_QP_LAST_WQE_REACHED`).
    QpLastWqeReached(Qpn),
    /// The device stopped working (`IBV_EVENT_DEVICE_FATAL`): raised by the
    /// verbs layer when the thread driving the engine ended in a panic.
    DeviceFatal,
}
