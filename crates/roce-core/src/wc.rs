//! Work completions (IBTA Vol 1 §11.4.2.1; values as rdma-core's
//! `ibv_wc_status` and `ibv_wc_opcode`).

use roce_wire::{Qpn, Rkey};

/// Completion status.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum WcStatus {
    /// The operation completed.
    Success = 0,
    /// A receive buffer was too small, or a message longer than allowed.
    LocLenErr = 1,
    /// Internal QP consistency error (e.g. a WR the QP cannot carry).
    LocQpOpErr = 2,
    /// A local memory key, bound or right was violated.
    LocProtErr = 4,
    /// Flushed: the QP was in the error state.
    WrFlushErr = 5,
    /// The responder's reply did not fit the request.
    BadRespErr = 7,
    /// Local access error on data the responder delivered.
    LocAccessErr = 8,
    /// The responder NAKed the request as invalid.
    RemInvReqErr = 9,
    /// The responder NAKed a key, bound or right violation.
    RemAccessErr = 10,
    /// The responder could not complete the operation.
    RemOpErr = 11,
    /// Transport retries exhausted (ACK timeout or sequence errors).
    RetryExcErr = 12,
    /// RNR retries exhausted.
    RnrRetryExcErr = 13,
    /// Fatal error.
    FatalErr = 19,
    /// Other error.
    GeneralErr = 21,
}

impl WcStatus {
    /// The `ibv_wc_status_str` text.
    pub const fn as_str(self) -> &'static str {
        match self {
            WcStatus::Success => "success",
            WcStatus::LocLenErr => "local length error",
            WcStatus::LocQpOpErr => "local QP operation error",
            WcStatus::LocProtErr => "local protection error",
            WcStatus::WrFlushErr => "Work Request Flushed Error",
            WcStatus::BadRespErr => "bad response error",
            WcStatus::LocAccessErr => "local access error",
            WcStatus::RemInvReqErr => "remote invalid request error",
            WcStatus::RemAccessErr => "remote access error",
            WcStatus::RemOpErr => "remote operation error",
            WcStatus::RetryExcErr => "transport retry counter exceeded",
            WcStatus::RnrRetryExcErr => "RNR retry counter exceeded",
            WcStatus::FatalErr => "fatal error",
            WcStatus::GeneralErr => "general error",
        }
    }
}

/// What completed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum WcOpcode {
    /// A SEND (requester side).
    Send = 0,
    /// An RDMA WRITE.
    RdmaWrite = 1,
    /// An RDMA READ.
    RdmaRead = 2,
    /// A compare and swap.
    CompSwap = 3,
    /// A fetch and add.
    FetchAdd = 4,
    /// A received SEND.
    Recv = 128,
    /// A received RDMA WRITE with immediate.
    RecvRdmaWithImm = 129,
}

/// Completion flags (values as `ibv_wc_flags`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct WcFlags(pub u32);

impl WcFlags {
    /// The first 40 bytes of the buffer hold a GRH (UD).
    pub const GRH: WcFlags = WcFlags(1);
    /// `imm_data` is valid.
    pub const WITH_IMM: WcFlags = WcFlags(2);
    /// `invalidated_rkey` is valid.
    pub const WITH_INV: WcFlags = WcFlags(8);

    /// True when every flag of `o` is set.
    pub const fn contains(self, o: WcFlags) -> bool {
        self.0 & o.0 == o.0
    }
}

impl std::ops::BitOr for WcFlags {
    type Output = WcFlags;
    fn bitor(self, o: WcFlags) -> WcFlags {
        WcFlags(self.0 | o.0)
    }
}

/// A work completion.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Wc {
    /// The work request's identifier.
    pub wr_id: u64,
    /// Status.
    pub status: WcStatus,
    /// Operation (meaningful on success; set on errors where known).
    pub opcode: WcOpcode,
    /// Bytes received (receives and READs).
    pub byte_len: u32,
    /// Immediate data (valid with [`WcFlags::WITH_IMM`]).
    pub imm_data: u32,
    /// Invalidated R_Key (valid with [`WcFlags::WITH_INV`]).
    pub invalidated_rkey: Rkey,
    /// The local QP.
    pub qp_num: Qpn,
    /// The remote QP (UD receives).
    pub src_qp: Qpn,
    /// Flags.
    pub wc_flags: WcFlags,
    /// The network header a UD receive arrived with (IPv4 or IPv6 for
    /// RoCE v2): the flag IBTA Annex A17.4.5.1 puts in the completion of
    /// a UD receive beside the GRH. `None` for everything else.
    pub network_hdr: Option<NetworkHdr>,
}

/// The network header of a RoCE v2 datagram (IBTA Annex A17.4.5.1: a
/// UD completion says whether the frame was IPv4 or IPv6, which tells
/// where in the 40-byte GRH area the addresses sit).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum NetworkHdr {
    /// IPv4: the IPv4 header in the last 20 bytes of the GRH area.
    Ipv4,
    /// IPv6: the IPv6 header fills the 40 bytes.
    Ipv6,
}

impl Wc {
    /// A completion with everything but the identity zeroed.
    pub fn new(wr_id: u64, status: WcStatus, opcode: WcOpcode, qp_num: Qpn) -> Wc {
        Wc {
            wr_id,
            status,
            opcode,
            byte_len: 0,
            imm_data: 0,
            invalidated_rkey: Rkey::new(0),
            qp_num,
            src_qp: Qpn::new(0),
            wc_flags: WcFlags::default(),
            network_hdr: None,
        }
    }
}
