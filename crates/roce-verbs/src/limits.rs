//! What a device of this stack supports, from the limits in the code:
//! the QPN space (24 bits, 0 and 1 reserved), memory keys (a 24-bit
//! index), the CQ and SRQ bounds of this crate, `max_inline_data`
//! (roce-core refuses more than 4096), messages up to 2^31 bytes,
//! [`QpCaps`](roce_core::QpCaps)' 16 SGEs, and 128 outstanding
//! READ/atomics each way (the engine's bound is the attribute's 255; 128
//! is rxe's, so that programs that take the peer's figure for their own,
//! as perftest does, connect to rxe; [`ConnectOptions`](crate::ConnectOptions)
//! asks for 16). `roce devinfo` prints them; the drop-in libibverbs
//! answers `ibv_query_device` with them.

/// Device limits (`ibv_device_attr`'s fields of the same names).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceLimits {
    /// Largest memory region.
    pub max_mr_size: u64,
    /// Largest message.
    pub max_msg_sz: u32,
    /// QPs per device.
    pub max_qp: u32,
    /// Work requests per queue.
    pub max_qp_wr: u32,
    /// SGEs per work request.
    pub max_sge: u32,
    /// CQs per device.
    pub max_cq: u32,
    /// Entries per CQ.
    pub max_cqe: u32,
    /// Memory regions per device.
    pub max_mr: u32,
    /// PDs per device.
    pub max_pd: u32,
    /// Address handles per device.
    pub max_ah: u32,
    /// Outstanding READ/atomics a QP accepts as responder.
    pub max_qp_rd_atom: u32,
    /// Outstanding READ/atomics a QP issues as requester.
    pub max_qp_init_rd_atom: u32,
    /// Receives per SRQ.
    pub max_srq_wr: u32,
    /// SGEs per SRQ receive.
    pub max_srq_sge: u32,
    /// Inline data per send.
    pub max_inline_data: u32,
}

/// The limits of every device of this stack.
pub const LIMITS: DeviceLimits = DeviceLimits {
    max_mr_size: u64::MAX,
    max_msg_sz: 1 << 31,
    max_qp: 0xff_ffff - 1,
    max_qp_wr: 1 << 20,
    max_sge: 16,
    max_cq: u32::MAX,
    max_cqe: 4 << 20,
    max_mr: (1 << 24) - 1,
    max_pd: u32::MAX,
    max_ah: u32::MAX,
    max_qp_rd_atom: 128,
    max_qp_init_rd_atom: 128,
    max_srq_wr: 1 << 20,
    max_srq_sge: roce_core::MAX_SRQ_SGE as u32,
    max_inline_data: 4096,
};
