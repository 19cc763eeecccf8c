//! The sans-IO RoCE v2 transport engine.
//!
//! [`Device`] owns protection domains, memory regions, completion queues,
//! shared receive queues and queue pairs, and runs the RC, UC and UD
//! transports over them (IBTA Vol 1 chapters 9–11, Annex A17). It does no
//! I/O and reads no clock: datagrams and time come in as arguments, packets
//! go out through caller-provided buffers, so the same engine runs over
//! real sockets, an in-memory fabric in tests, and the fabric simulator.
//! See [`device`] for the call order.
//!
//! Where it sits: `roce-wire` below it builds and parses the packets;
//! `roce-verbs` drives it over a `roce-io` backend with threads and a
//! clock, and `roce-sim` drives it in virtual time inside a simulated
//! fabric. The protocol rules it implements are summarised in the
//! repository's `docs/protocol.md`, and its place in the data path in
//! `docs/architecture.md`.
//!
//! # Example
//!
//! Two devices, an RC connection and one 10 KiB RDMA WRITE (three packets
//! at path MTU 4096), with the datagrams carried by hand and time passed in:
//!
//! ```
//! use roce_core::*;
//!
//! let all = Access::LOCAL_WRITE | Access::REMOTE_WRITE;
//! let mut hosts = Vec::new();
//! for addr in ["10.0.0.1", "10.0.0.2"] {
//!     let mut dev = Device::new(DeviceConfig::new(addr.parse().unwrap()));
//!     let pd = dev.alloc_pd();
//!     let cq = dev.create_cq(16);
//!     let mr = dev.reg_mr(pd, 0x1000, Box::new(vec![0u8; 16384]), all).unwrap();
//!     let init = QpInitAttr { qp_type: QpType::Rc, pd, send_cq: cq, recv_cq: cq,
//!                             srq: None, cap: QpCaps::default(), sq_sig_all: false };
//!     let qpn = dev.create_qp(init).unwrap();
//!     hosts.push((dev, pd, cq, mr, qpn));
//! }
//! // RESET -> INIT -> RTR -> RTS on both sides, each naming the other.
//! for i in 0..2 {
//!     let (peer_addr, peer_qpn) = (hosts[1 - i].0.addrs()[0], hosts[1 - i].4);
//!     let (dev, _, _, _, qpn) = &mut hosts[i];
//!     let mut a = QpAttr { qp_state: QpState::Init, port_num: 1, qp_access_flags: all,
//!                          ..QpAttr::default() };
//!     let mask = |from, to| QpAttrMask::required(QpType::Rc, from, to);
//!     dev.modify_qp(*qpn, &a, mask(QpState::Reset, QpState::Init)).unwrap();
//!     a.qp_state = QpState::Rtr;
//!     a.path_mtu = 4096;
//!     a.ah_attr = AddressVector { dest: peer_addr, ..AddressVector::default() };
//!     a.dest_qp_num = peer_qpn;
//!     (a.rq_psn, a.sq_psn) = (Psn::new(1), Psn::new(1));
//!     (a.max_dest_rd_atomic, a.max_rd_atomic) = (1, 1);
//!     (a.timeout, a.retry_cnt, a.rnr_retry, a.min_rnr_timer) = (14, 7, 7, 12);
//!     dev.modify_qp(*qpn, &a, mask(QpState::Init, QpState::Rtr)).unwrap();
//!     a.qp_state = QpState::Rts;
//!     dev.modify_qp(*qpn, &a, mask(QpState::Rtr, QpState::Rts)).unwrap();
//! }
//! let data: Vec<u8> = (0..10240u32).map(|i| i as u8).collect();
//! let rkey_b = hosts[1].3.rkey;
//! let (dev_a, pd_a, cq_a, mr_a, qpn_a) = &mut hosts[0];
//! dev_a.mr_write(*mr_a, *pd_a, 0x1000, &data).unwrap();
//! let sge = Sge { addr: 0x1000, length: 10240, lkey: mr_a.lkey };
//! dev_a.post_send(*qpn_a, SendWr::rdma(1, SendOp::Write, [sge], 0x1000, rkey_b)).unwrap();
//! let cq_a = *cq_a;
//!
//! // The caller's loop: drain each device's transmit side into the other.
//! let (mut buf, mut packets, now) = (vec![0u8; 4400], 0, 0);
//! loop {
//!     let mut moved = false;
//!     for i in 0..2 {
//!         while let Tx::Datagram(t) = hosts[i].0.poll_transmit(now, &mut buf) {
//!             hosts[1 - i].0.handle_datagram(now, &buf[..t.size], RxMeta::default());
//!             (moved, packets) = (true, packets + 1);
//!         }
//!     }
//!     if !moved { break; }
//! }
//! assert_eq!(packets, 4); // WRITE_FIRST, MIDDLE, LAST and one ACK
//! let mut wc = [Wc::new(0, WcStatus::Success, WcOpcode::Send, Qpn::new(0))];
//! assert_eq!(hosts[0].0.poll_cq(cq_a, &mut wc).unwrap(), 1);
//! assert_eq!((wc[0].wr_id, wc[0].status), (1, WcStatus::Success));
//! let mut got = vec![0u8; 10240];
//! let (dev_b, pd_b, _, mr_b, _) = &hosts[1];
//! dev_b.mr_read(*mr_b, *pd_b, 0x1000, &mut got).unwrap();
//! assert_eq!(got, data);
//! ```
#![forbid(unsafe_code)]

pub mod cc;
pub mod cm;
mod counters;
mod cq;
pub mod device;
pub(crate) mod ids;
mod mr;
pub mod qp;
mod sgl;
mod srq;
mod wc;
mod wr;

pub use cc::{CcAlgorithm, CcConfig, CcCounters, DcqcnParams, Mlx5Params};
pub use counters::{DeviceCounters, QpCounters};
pub use cq::{Cq, CqId, CqOverflow};
pub use device::{
    CmCounters, Device, DeviceConfig, IcrcCheck, OwnerChange, RxOutcome, Tx, VerbsError,
};
pub use mr::{Access, AccessError, MemFault, MrKeys, MrTable, PdId, RegionMemory};
pub use qp::state::{ModifyError, QpAttrMask, QpState, QpType};
pub use qp::{AckDelay, AddressVector, PostError, Qp, QpAttr, QpCaps, QpInitAttr};
pub use roce_wire::{Lkey, Msn, Owner, Psn, Qkey, Qpn, Rkey, RxHeader, RxMeta, Transmit};
pub use srq::{Srq, SrqId, MAX_SRQ_SGE};
pub use wc::{NetworkHdr, Wc, WcFlags, WcOpcode, WcStatus};
pub use wr::{Payload, RecvWr, SendFlags, SendOp, SendWr, Sge, SgeList, UdDest, SGL_INLINE};

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
