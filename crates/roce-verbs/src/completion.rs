//! [`Completion`]: a work completion as the application sees it.

use roce_core::{NetworkHdr, Qpn, Rkey, Wc, WcFlags, WcOpcode, WcStatus};

/// A work completion as the application sees it: the engine's [`Wc`] with
/// the application's `wr_id`, plus the buffer of an owned-buffer work
/// request ([`QueuePair::post_send_owned`](crate::QueuePair::post_send_owned),
/// [`QueuePair::post_recv_owned`](crate::QueuePair::post_recv_owned)),
/// handed back whatever the status.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Completion {
    /// The completion.
    pub wc: Wc,
    /// The owned buffer of the work request, if it had one.
    pub buffer: Option<Vec<u8>>,
}

impl Completion {
    /// True when the work request succeeded.
    pub fn is_success(&self) -> bool {
        self.wc.status == WcStatus::Success
    }

    /// The application's id of the work request.
    pub fn wr_id(&self) -> u64 {
        self.wc.wr_id
    }

    /// How the work request ended.
    pub fn status(&self) -> WcStatus {
        self.wc.status
    }

    /// What the work request was.
    pub fn opcode(&self) -> WcOpcode {
        self.wc.opcode
    }

    /// Bytes received (a receive, an RDMA READ or atomic result).
    pub fn byte_len(&self) -> u32 {
        self.wc.byte_len
    }

    /// The immediate data (valid with [`WcFlags::WITH_IMM`]).
    pub fn imm_data(&self) -> u32 {
        self.wc.imm_data
    }

    /// The R_Key a receive with [`WcFlags::WITH_INV`] invalidated.
    pub fn invalidated_rkey(&self) -> Rkey {
        self.wc.invalidated_rkey
    }

    /// The local QP the work request belongs to.
    pub fn qp_num(&self) -> Qpn {
        self.wc.qp_num
    }

    /// The sending QP of a UD receive.
    pub fn src_qp(&self) -> Qpn {
        self.wc.src_qp
    }

    /// Immediate data present, invalidation, a GRH.
    pub fn wc_flags(&self) -> WcFlags {
        self.wc.wc_flags
    }

    /// The network header of a UD receive (its GRH), when it had one.
    pub fn network_hdr(&self) -> Option<NetworkHdr> {
        self.wc.network_hdr
    }

    /// Takes the owned buffer out.
    pub fn take_buffer(&mut self) -> Option<Vec<u8>> {
        self.buffer.take()
    }
}
