//! The send work request of the Rust API: the operation carries what it
//! needs, so a remote address and R_Key exist only on the operations that
//! address remote memory (IBTA Vol 1 §11.4.1.1, Post Send Request; the
//! operations are described in §9.4: SEND §9.4.1, RDMA WRITE §9.4.2,
//! RDMA READ §9.4.3, atomics §9.4.5). See docs/architecture.md, "The Rust
//! API of roce-verbs".
//!
//! A [`SendWr`] becomes the engine's C-shaped work request (with its
//! `remote_addr`/`rkey` fields on every WR) inside the crate, by moves
//! only: the scatter/gather list is not copied, and a post of one or two
//! SGEs allocates nothing.

use roce_core::{Payload, Rkey, SendFlags, Sge, UdDest};

use crate::mr::RemoteMr;

/// Remote memory a work request addresses: a virtual address in the
/// peer's region and that region's R_Key (the RETH's or AtomicETH's
/// VA and R_Key, IBTA Vol 1 §9.4.2–§9.4.5). Small and `Copy`.
///
/// ```
/// # use roce_verbs::{RemoteAddr, RemoteMr, Rkey};
/// let peer = RemoteMr { addr: 0x1000, rkey: Rkey::new(7), len: 4096 };
/// let at = peer.at(64);
/// assert_eq!(at, RemoteAddr::new(0x1040, Rkey::new(7)));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RemoteAddr {
    /// Virtual address in the peer's region.
    pub addr: u64,
    /// The region's remote key.
    pub rkey: Rkey,
}

impl RemoteAddr {
    /// `addr` in the region of `rkey`.
    pub const fn new(addr: u64, rkey: Rkey) -> RemoteAddr {
        RemoteAddr { addr, rkey }
    }

    /// The address `by` bytes further (wrapping, as the VA is the peer's to
    /// check: an address outside its region is a remote access error).
    pub const fn offset(self, by: u64) -> RemoteAddr {
        RemoteAddr {
            addr: self.addr.wrapping_add(by),
            rkey: self.rkey,
        }
    }
}

impl RemoteMr {
    /// The byte at `offset` into this region.
    pub const fn at(&self, offset: u64) -> RemoteAddr {
        RemoteAddr {
            addr: self.addr.wrapping_add(offset),
            rkey: self.rkey,
        }
    }
}

impl From<RemoteMr> for RemoteAddr {
    /// The region's first byte.
    fn from(r: RemoteMr) -> RemoteAddr {
        r.at(0)
    }
}

/// What a send work request does (`ibv_wr_opcode` with its operands).
/// Non-exhaustive: memory windows and local invalidation (IBTA Vol 1
/// §10.6.6, §10.6.5) may come.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum SendOp {
    /// SEND (IBTA Vol 1 §9.4.1): the payload lands in the responder's next
    /// receive.
    Send,
    /// SEND with immediate data (§9.4.1): as `Send`, and the responder's
    /// completion carries the 32-bit value.
    SendWithImm(u32),
    /// SEND with invalidate (§9.4.1, RC only): as `Send`, and the
    /// responder invalidates its region of this R_Key (§10.6.3.6).
    SendWithInv(Rkey),
    /// RDMA WRITE (§9.4.2): the payload is written at `remote`; the
    /// responder consumes no receive and sees no completion.
    Write {
        /// Where the data lands.
        remote: RemoteAddr,
    },
    /// RDMA WRITE with immediate (§9.4.2): as `Write`, and the responder
    /// consumes a receive whose completion carries `imm`.
    WriteWithImm {
        /// Where the data lands.
        remote: RemoteAddr,
        /// The immediate data.
        imm: u32,
    },
    /// RDMA READ (§9.4.3): the remote bytes at `remote` land in the local
    /// scatter list.
    Read {
        /// Where the data is read.
        remote: RemoteAddr,
    },
    /// 64-bit atomic compare and swap (§9.4.5): the 8 bytes at `remote`
    /// become `swap` if they equal `compare`; the original value lands in
    /// the local scatter list.
    CompareSwap {
        /// The 8-byte aligned target.
        remote: RemoteAddr,
        /// Value compared with remote memory.
        compare: u64,
        /// Value written when equal.
        swap: u64,
    },
    /// 64-bit atomic fetch and add (§9.4.5): `add` is added to the 8 bytes
    /// at `remote`; the original value lands in the local scatter list.
    FetchAdd {
        /// The 8-byte aligned target.
        remote: RemoteAddr,
        /// Value added.
        add: u64,
    },
}

impl SendOp {
    /// The remote memory the operation addresses, if any.
    pub const fn remote(&self) -> Option<RemoteAddr> {
        match *self {
            SendOp::Send | SendOp::SendWithImm(_) | SendOp::SendWithInv(_) => None,
            SendOp::Write { remote }
            | SendOp::WriteWithImm { remote, .. }
            | SendOp::Read { remote }
            | SendOp::CompareSwap { remote, .. }
            | SendOp::FetchAdd { remote, .. } => Some(remote),
        }
    }

    /// True for RDMA READ and the atomics: the local list receives data.
    pub const fn is_read_or_atomic(&self) -> bool {
        matches!(
            self,
            SendOp::Read { .. } | SendOp::CompareSwap { .. } | SendOp::FetchAdd { .. }
        )
    }

    /// The engine's operation, remote address and key.
    pub(crate) const fn to_core(self) -> (roce_core::SendOp, u64, Rkey) {
        use roce_core::SendOp as C;
        let none = (0, Rkey::new(0));
        let (op, (addr, rkey)) = match self {
            SendOp::Send => (C::Send, none),
            SendOp::SendWithImm(i) => (C::SendWithImm(i), none),
            SendOp::SendWithInv(k) => (C::SendWithInv(k), none),
            SendOp::Write { remote } => (C::Write, (remote.addr, remote.rkey)),
            SendOp::WriteWithImm { remote, imm } => {
                (C::WriteWithImm(imm), (remote.addr, remote.rkey))
            }
            SendOp::Read { remote } => (C::Read, (remote.addr, remote.rkey)),
            SendOp::CompareSwap {
                remote,
                compare,
                swap,
            } => (C::CompareSwap { compare, swap }, (remote.addr, remote.rkey)),
            SendOp::FetchAdd { remote, add } => (C::FetchAdd { add }, (remote.addr, remote.rkey)),
        };
        (op, addr, rkey)
    }
}

/// A send work request (`ibv_send_wr`): the application's id, the
/// operation with its operands, the local data and the flags. A UD
/// destination is not part of it: UD sends take it where they are posted
/// ([`QueuePair::post_send_ud`](crate::QueuePair::post_send_ud),
/// [`QueuePair::post_send_ud_list`](crate::QueuePair::post_send_ud_list)).
///
/// The constructors make a signaled WR; the flag setters change that.
///
/// ```no_run
/// # fn f(qp: &roce_verbs::QueuePair, mr: &roce_verbs::MemoryRegion, peer: roce_verbs::RemoteMr)
/// # -> Result<(), roce_verbs::PostError> {
/// use roce_verbs::SendWr;
/// qp.post_send(SendWr::write(1, [mr.sge(0, 64)], peer.at(128)).unsignaled())?;
/// qp.post_send(SendWr::read(2, [mr.sge(64, 64)], peer.at(0)))?;
/// # Ok(()) }
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SendWr {
    /// Caller's identifier, returned in the completion.
    pub wr_id: u64,
    /// The operation and its operands.
    pub op: SendOp,
    /// Data to send or write, or where a READ or atomic result lands.
    pub payload: Payload,
    /// Flags ([`SendFlags::SIGNALED`] from the constructors).
    pub flags: SendFlags,
}

impl SendWr {
    /// A signaled `op` with the local scatter/gather list `sgl` (an
    /// array of SGEs is taken without an allocation).
    pub fn new(wr_id: u64, op: SendOp, sgl: impl IntoIterator<Item = Sge>) -> SendWr {
        SendWr {
            wr_id,
            op,
            payload: Payload::Sgl(sgl.into_iter().collect()),
            flags: SendFlags::SIGNALED,
        }
    }

    /// A SEND of `sgl`.
    pub fn send(wr_id: u64, sgl: impl IntoIterator<Item = Sge>) -> SendWr {
        SendWr::new(wr_id, SendOp::Send, sgl)
    }

    /// A SEND of `sgl` with immediate data `imm`.
    pub fn send_with_imm(wr_id: u64, sgl: impl IntoIterator<Item = Sge>, imm: u32) -> SendWr {
        SendWr::new(wr_id, SendOp::SendWithImm(imm), sgl)
    }

    /// A SEND of `sgl` that invalidates the responder's region of `rkey`.
    pub fn send_with_inv(wr_id: u64, sgl: impl IntoIterator<Item = Sge>, rkey: Rkey) -> SendWr {
        SendWr::new(wr_id, SendOp::SendWithInv(rkey), sgl)
    }

    /// An RDMA WRITE of `sgl` to `remote`.
    pub fn write(wr_id: u64, sgl: impl IntoIterator<Item = Sge>, remote: RemoteAddr) -> SendWr {
        SendWr::new(wr_id, SendOp::Write { remote }, sgl)
    }

    /// An RDMA WRITE of `sgl` to `remote` with immediate data `imm`.
    pub fn write_with_imm(
        wr_id: u64,
        sgl: impl IntoIterator<Item = Sge>,
        remote: RemoteAddr,
        imm: u32,
    ) -> SendWr {
        SendWr::new(wr_id, SendOp::WriteWithImm { remote, imm }, sgl)
    }

    /// An RDMA READ of the bytes at `remote` into `sgl`.
    pub fn read(wr_id: u64, sgl: impl IntoIterator<Item = Sge>, remote: RemoteAddr) -> SendWr {
        SendWr::new(wr_id, SendOp::Read { remote }, sgl)
    }

    /// An atomic compare and swap at `remote`; the original value lands in
    /// `sgl` (8 bytes).
    pub fn compare_swap(
        wr_id: u64,
        sgl: impl IntoIterator<Item = Sge>,
        remote: RemoteAddr,
        compare: u64,
        swap: u64,
    ) -> SendWr {
        let op = SendOp::CompareSwap {
            remote,
            compare,
            swap,
        };
        SendWr::new(wr_id, op, sgl)
    }

    /// An atomic fetch and add at `remote`; the original value lands in
    /// `sgl` (8 bytes).
    pub fn fetch_add(
        wr_id: u64,
        sgl: impl IntoIterator<Item = Sge>,
        remote: RemoteAddr,
        add: u64,
    ) -> SendWr {
        SendWr::new(wr_id, SendOp::FetchAdd { remote, add }, sgl)
    }

    /// The flags, replaced.
    pub fn with_flags(mut self, flags: SendFlags) -> SendWr {
        self.flags = flags;
        self
    }

    /// No completion on success (`IBV_SEND_SIGNALED` cleared); an error
    /// still completes.
    pub fn unsignaled(mut self) -> SendWr {
        self.flags = SendFlags(self.flags.0 & !SendFlags::SIGNALED.0);
        self
    }

    /// Waits for earlier READs and atomics of the QP first
    /// (`IBV_SEND_FENCE`).
    pub fn fenced(mut self) -> SendWr {
        self.flags = self.flags | SendFlags::FENCE;
        self
    }

    /// Sets the solicited-event bit (`IBV_SEND_SOLICITED`, IBTA Vol 1
    /// §9.2.3): wakes a responder armed for solicited events only.
    pub fn solicited(mut self) -> SendWr {
        self.flags = self.flags | SendFlags::SOLICITED;
        self
    }

    /// Copies the data at post time (`IBV_SEND_INLINE`): the local
    /// memory may be reused as soon as the post returns. Up to the QP's
    /// `max_inline_data`; not for READs and atomics.
    pub fn inline(mut self) -> SendWr {
        self.flags = self.flags | SendFlags::INLINE;
        self
    }

    /// The engine's work request, by moves only (no allocation).
    pub(crate) fn into_core(self, ud: Option<UdDest>) -> roce_core::SendWr {
        let (op, remote_addr, rkey) = self.op.to_core();
        roce_core::SendWr {
            wr_id: self.wr_id,
            op,
            payload: self.payload,
            flags: self.flags,
            remote_addr,
            rkey,
            ud,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use roce_core::Lkey;

    fn sge() -> Sge {
        Sge {
            addr: 0x40,
            length: 8,
            lkey: Lkey::new(3),
        }
    }

    #[test]
    fn each_operation_converts_with_its_remote_and_operands() {
        let r = RemoteAddr::new(0x1234, Rkey::new(0x99));
        use roce_core::SendOp as C;
        let cases = [
            (SendWr::send(1, [sge()]), C::Send, 0, 0),
            (
                SendWr::send_with_imm(1, [sge()], 5),
                C::SendWithImm(5),
                0,
                0,
            ),
            (
                SendWr::send_with_inv(1, [sge()], Rkey::new(4)),
                C::SendWithInv(Rkey::new(4)),
                0,
                0,
            ),
            (SendWr::write(1, [sge()], r), C::Write, 0x1234, 0x99),
            (
                SendWr::write_with_imm(1, [sge()], r, 6),
                C::WriteWithImm(6),
                0x1234,
                0x99,
            ),
            (SendWr::read(1, [sge()], r), C::Read, 0x1234, 0x99),
            (
                SendWr::compare_swap(1, [sge()], r, 7, 8),
                C::CompareSwap {
                    compare: 7,
                    swap: 8,
                },
                0x1234,
                0x99,
            ),
            (
                SendWr::fetch_add(1, [sge()], r, 9),
                C::FetchAdd { add: 9 },
                0x1234,
                0x99,
            ),
        ];
        for (wr, op, addr, rkey) in cases {
            assert_eq!(wr.op.remote().is_some(), addr != 0, "{op:?}");
            let c = wr.into_core(None);
            assert_eq!(c.op, op);
            assert_eq!((c.remote_addr, c.rkey.value()), (addr, rkey), "{op:?}");
            assert_eq!(c.payload, Payload::Sgl([sge()].into_iter().collect()));
            assert_eq!(c.flags, SendFlags::SIGNALED);
            assert_eq!((c.wr_id, c.ud), (1, None));
        }
    }

    #[test]
    fn flag_setters() {
        let w = SendWr::send(1, []).unsignaled();
        assert_eq!(w.flags, SendFlags(0));
        let w = SendWr::send(1, []).fenced().solicited().inline();
        assert_eq!(
            w.flags,
            SendFlags::SIGNALED | SendFlags::FENCE | SendFlags::SOLICITED | SendFlags::INLINE
        );
        assert_eq!(
            SendWr::send(1, []).with_flags(SendFlags::INLINE).flags,
            SendFlags::INLINE
        );
    }

    #[test]
    fn remote_of_a_region_and_offsets() {
        let m = RemoteMr {
            addr: 0x1000,
            rkey: Rkey::new(1),
            len: 64,
        };
        assert_eq!(m.at(8), RemoteAddr::new(0x1008, Rkey::new(1)));
        assert_eq!(RemoteAddr::from(m).offset(16), m.at(16));
    }

    #[test]
    fn conversion_keeps_the_sges_inline() {
        let c = SendWr::write(1, [sge(), sge()], RemoteAddr::new(0, Rkey::new(0))).into_core(None);
        let Payload::Sgl(s) = c.payload else {
            panic!("payload kind changed")
        };
        assert!(!s.spilled());
    }
}
