//! Work requests (IBTA Vol 1 §11.4.1, shaped after `ibv_send_wr` /
//! `ibv_recv_wr`).

use std::net::IpAddr;

use roce_wire::{Lkey, Qkey, Qpn, Rkey};
use smallvec::SmallVec;

use crate::qp::AddressVector;

/// A scatter/gather entry: `length` bytes at `addr` in the region of `lkey`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Sge {
    /// Virtual address inside the region.
    pub addr: u64,
    /// Length in bytes.
    pub length: u32,
    /// Local key of the region.
    pub lkey: Lkey,
}

/// A work request's scatter/gather list: up to [`SGL_INLINE`] entries
/// (nearly every work request) held without an allocation.
pub type SgeList = SmallVec<[Sge; SGL_INLINE]>;

/// The scatter/gather entries a [`SgeList`] holds inline.
pub const SGL_INLINE: usize = 2;

/// The operation of a send work request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SendOp {
    /// SEND.
    Send,
    /// SEND with immediate data.
    SendWithImm(u32),
    /// SEND with invalidate (RC): the responder invalidates this R_Key.
    SendWithInv(Rkey),
    /// RDMA WRITE.
    Write,
    /// RDMA WRITE with immediate (consumes a receive at the responder).
    WriteWithImm(u32),
    /// RDMA READ.
    Read,
    /// 64-bit compare and swap.
    CompareSwap {
        /// Value compared with remote memory.
        compare: u64,
        /// Value written when equal.
        swap: u64,
    },
    /// 64-bit fetch and add.
    FetchAdd {
        /// Value added.
        add: u64,
    },
}

impl SendOp {
    /// True for operations that need a remote address and key.
    pub const fn is_rdma(self) -> bool {
        !matches!(
            self,
            SendOp::Send | SendOp::SendWithImm(_) | SendOp::SendWithInv(_)
        )
    }
    /// True for RDMA READ and atomics (limited by `max_rd_atomic`).
    pub const fn is_read_or_atomic(self) -> bool {
        matches!(
            self,
            SendOp::Read | SendOp::CompareSwap { .. } | SendOp::FetchAdd { .. }
        )
    }
    /// True for atomics.
    pub const fn is_atomic(self) -> bool {
        matches!(self, SendOp::CompareSwap { .. } | SendOp::FetchAdd { .. })
    }
}

/// Send flags (values as `ibv_send_flags`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct SendFlags(pub u32);

impl SendFlags {
    /// Wait for earlier READs and atomics to complete first.
    pub const FENCE: SendFlags = SendFlags(1);
    /// Generate a completion on success.
    pub const SIGNALED: SendFlags = SendFlags(2);
    /// Set the solicited-event bit on the last packet.
    pub const SOLICITED: SendFlags = SendFlags(4);
    /// Copy the data at post time (the SGEs' memory may be reused at once).
    pub const INLINE: SendFlags = SendFlags(8);

    /// True when every flag of `o` is set.
    pub const fn contains(self, o: SendFlags) -> bool {
        self.0 & o.0 == o.0
    }
}

impl std::ops::BitOr for SendFlags {
    type Output = SendFlags;
    fn bitor(self, o: SendFlags) -> SendFlags {
        SendFlags(self.0 | o.0)
    }
}

/// Where a UD send goes: an address handle's address vector plus the
/// remote QP and its Q_Key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UdDest {
    /// The address vector: destination, source GID index, hop limit,
    /// traffic class and flow label of the packet.
    pub av: AddressVector,
    /// Destination QP.
    pub qpn: Qpn,
    /// Q_Key; a value with the high bit set means "use the QP's own".
    pub qkey: Qkey,
}

impl UdDest {
    /// To `addr` with the default address vector (GID index 0, hop limit 64).
    pub fn new(addr: IpAddr, qpn: Qpn, qkey: Qkey) -> UdDest {
        UdDest {
            av: AddressVector {
                dest: addr,
                ..AddressVector::default()
            },
            qpn,
            qkey,
        }
    }
}

/// The payload source of a send work request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Payload {
    /// Gathered from registered memory when each packet is sent.
    Sgl(SgeList),
    /// Copied at post time.
    Inline(Vec<u8>),
}

impl Payload {
    /// Total length in bytes.
    pub fn len(&self) -> u64 {
        match self {
            Payload::Sgl(s) => s.iter().map(|e| e.length as u64).sum(),
            Payload::Inline(v) => v.len() as u64,
        }
    }
    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A send work request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SendWr {
    /// Caller's identifier, returned in the completion.
    pub wr_id: u64,
    /// Operation.
    pub op: SendOp,
    /// Data to send (SEND/WRITE) or where READ/atomic results land.
    pub payload: Payload,
    /// Flags.
    pub flags: SendFlags,
    /// Remote address for RDMA operations.
    pub remote_addr: u64,
    /// Remote key for RDMA operations.
    pub rkey: Rkey,
    /// Destination for UD QPs.
    pub ud: Option<UdDest>,
}

impl SendWr {
    /// A signaled SEND of `sgl` (an array of SGEs is taken without an
    /// allocation).
    pub fn send(wr_id: u64, sgl: impl IntoIterator<Item = Sge>) -> SendWr {
        SendWr {
            wr_id,
            op: SendOp::Send,
            payload: Payload::Sgl(sgl.into_iter().collect()),
            flags: SendFlags::SIGNALED,
            remote_addr: 0,
            rkey: Rkey::new(0),
            ud: None,
        }
    }

    /// A signaled RDMA operation (`op`) between `sgl` and `remote_addr`/`rkey`.
    pub fn rdma(
        wr_id: u64,
        op: SendOp,
        sgl: impl IntoIterator<Item = Sge>,
        remote_addr: u64,
        rkey: Rkey,
    ) -> SendWr {
        SendWr {
            op,
            remote_addr,
            rkey,
            ..SendWr::send(wr_id, sgl)
        }
    }
}

/// A receive work request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecvWr {
    /// Caller's identifier.
    pub wr_id: u64,
    /// Where incoming data lands.
    pub sgl: SgeList,
}

impl RecvWr {
    /// A receive into `sgl` (an array of SGEs is taken without an
    /// allocation).
    pub fn new(wr_id: u64, sgl: impl IntoIterator<Item = Sge>) -> RecvWr {
        RecvWr {
            wr_id,
            sgl: sgl.into_iter().collect(),
        }
    }
}
