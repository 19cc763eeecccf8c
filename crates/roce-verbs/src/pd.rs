//! Protection domains and address handles.

use std::net::IpAddr;
use std::sync::{Arc, Mutex};

use roce_core::{Access, AddressVector, PdId, Qkey, Qpn, UdDest};

use crate::context::Context;
use crate::error::Error;
use crate::mr::{self, MemoryRegion, RawMem};
use crate::qp::{QpInitAttr, QueuePair};
use crate::shared::{Home, OwnedMem, Shared};
use crate::srq::SharedReceiveQueue;

#[derive(Debug)]
struct PdInner {
    id: PdId,
    ctx: Context,
}

/// A protection domain (`ibv_pd`). A cheap handle; every object made from
/// it holds it.
#[derive(Clone, Debug)]
pub struct ProtectionDomain {
    inner: Arc<PdInner>,
}

impl PartialEq for ProtectionDomain {
    fn eq(&self, o: &ProtectionDomain) -> bool {
        Arc::ptr_eq(&self.inner, &o.inner)
    }
}

impl Eq for ProtectionDomain {}

impl ProtectionDomain {
    pub(crate) fn new(ctx: Context, id: PdId) -> ProtectionDomain {
        ProtectionDomain {
            inner: Arc::new(PdInner { id, ctx }),
        }
    }

    pub(crate) fn shared(&self) -> &Arc<Shared> {
        self.inner.ctx.shared()
    }

    /// The engine's id of this PD.
    pub fn id(&self) -> PdId {
        self.inner.id
    }

    /// The context.
    pub fn context(&self) -> &Context {
        &self.inner.ctx
    }

    /// `ibv_reg_mr` over an owned buffer: the buffer moves into the engine
    /// (no copy) until [`MemoryRegion::into_inner`] hands it back. On error
    /// the buffer is dropped.
    pub fn reg_mr(&self, buf: impl Into<Vec<u8>>, access: Access) -> Result<MemoryRegion, Error> {
        let buf: Vec<u8> = buf.into();
        let home: Home = Arc::new(Mutex::new(None));
        let mem = OwnedMem::new(buf, home.clone(), self.shared().cfg.copy_piece);
        mr::register(self, Box::new(mem), None, Some(home), access)
    }

    /// `ibv_reg_mr` over memory the caller keeps: zero-copy, the engine
    /// reads and writes `ptr..ptr + len` directly (at virtual address
    /// `ptr`).
    ///
    /// # Safety
    ///
    /// From this call until the region is deregistered — the returned
    /// [`MemoryRegion`] was dropped (or [`MemoryRegion::dereg`] returned
    /// `Ok`) *and* every work request that references it has completed
    /// and its completion was polled (or its QP was destroyed or reset; a
    /// receive posted on an SRQ belongs to the SRQ, not to the QP that
    /// began filling it, until it completes or the SRQ is destroyed), or
    /// the context was closed — the memory must:
    ///
    /// * stay allocated and valid for reads and writes of `len` bytes;
    /// * not be accessed by the application in a way that races with the
    ///   engine, which writes it (from the progress thread or any thread
    ///   that polls or posts) whenever a receive, READ or atomic result
    ///   lands, or a peer writes with the region's rkey, and reads it
    ///   whenever data is sent. In practice: no live `&`/`&mut` to it across
    ///   verbs calls; touch it only when no WR that writes it is
    ///   outstanding and no peer may write it.
    ///
    /// Every access of the engine goes through [`crate::guard::copy`]:
    /// with [`crate::guard::install_fault_handler`] in place, memory that
    /// is unmapped or protected despite the rule above makes the access
    /// fail (a local protection or remote access error, and the region is
    /// revoked) instead of raising `SIGSEGV`. Memory that was freed and
    /// mapped again for something else is still written: that remains a
    /// breach of this contract.
    pub unsafe fn reg_mr_raw(
        &self,
        ptr: *mut u8,
        len: usize,
        access: Access,
    ) -> Result<MemoryRegion, Error> {
        // SAFETY: the same contract.
        unsafe { self.reg_mr_raw_iova(ptr, len, ptr as u64, access) }
    }

    /// `ibv_reg_mr_iova2`: [`reg_mr_raw`](Self::reg_mr_raw) with the
    /// region seen at virtual address `iova` (work requests and peers
    /// address its first byte as `iova`).
    ///
    /// # Safety
    /// As [`reg_mr_raw`](Self::reg_mr_raw).
    pub unsafe fn reg_mr_raw_iova(
        &self,
        ptr: *mut u8,
        len: usize,
        iova: u64,
        access: Access,
    ) -> Result<MemoryRegion, Error> {
        if ptr.is_null() && len > 0 {
            return Err(Error::InvalidArgument("null pointer"));
        }
        if (ptr as u64).checked_add(len as u64).is_none() || iova.checked_add(len as u64).is_none()
        {
            return Err(Error::InvalidArgument("region wraps the address space"));
        }
        // SAFETY: the caller upholds the contract above, which is exactly
        // what `RawMem::new` requires.
        let mem = unsafe { RawMem::new(ptr, len, self.shared().cfg.copy_piece) };
        mr::register(self, Box::new(mem), Some(iova), None, access)
    }

    /// `ibv_create_qp`: a QP in RESET.
    pub fn create_qp(&self, attr: &QpInitAttr<'_>) -> Result<QueuePair, Error> {
        QueuePair::create(self, attr)
    }

    /// `ibv_create_srq`: a shared receive queue of `max_wr` entries.
    pub fn create_srq(&self, max_wr: usize) -> Result<SharedReceiveQueue, Error> {
        SharedReceiveQueue::create(self, max_wr)
    }

    /// `ibv_create_ah`: an address handle for UD sends.
    pub fn create_ah(&self, attr: AhAttr) -> Result<AddressHandle, Error> {
        let local = self
            .context()
            .addrs()
            .get(attr.sgid_index as usize)
            .ok_or(Error::InvalidArgument("sgid_index"))?;
        if local.is_ipv4() != attr.dest.is_ipv4() {
            return Err(Error::InvalidArgument(
                "destination and source GID families differ",
            ));
        }
        self.shared().use_gid(attr.sgid_index)?;
        Ok(AddressHandle {
            attr,
            pd: self.clone(),
        })
    }
}

/// Attributes of an address handle (`ibv_ah_attr`, RoCE v2 subset).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AhAttr {
    /// The destination's address (its GID).
    pub dest: IpAddr,
    /// IPv4 TTL / IPv6 hop limit.
    pub hop_limit: u8,
    /// Traffic class (DSCP in the upper six bits).
    pub traffic_class: u8,
    /// Index of the local address to send from.
    pub sgid_index: u8,
}

impl AhAttr {
    /// To `dest`, hop limit 64, traffic class 0, GID index 0.
    pub fn new(dest: IpAddr) -> AhAttr {
        AhAttr {
            dest,
            hop_limit: 64,
            traffic_class: 0,
            sgid_index: 0,
        }
    }
}

/// An address handle (`ibv_ah`): where a UD send goes.
///
/// The engine's UD work requests carry only the destination address, QPN
/// and Q_Key; hop limit, traffic class and source GID come from the
/// sending QP's own address vector (a roce-core limitation).
#[derive(Clone, Debug)]
pub struct AddressHandle {
    attr: AhAttr,
    pd: ProtectionDomain,
}

impl AddressHandle {
    /// The attributes.
    pub fn attr(&self) -> AhAttr {
        self.attr
    }

    /// The protection domain.
    pub fn pd(&self) -> &ProtectionDomain {
        &self.pd
    }

    /// The UD destination of a send to `remote_qpn` with `qkey` (put it in
    /// [`SendWr::ud`](roce_core::SendWr::ud)).
    pub fn ud_dest(&self, remote_qpn: Qpn, qkey: Qkey) -> UdDest {
        let av = AddressVector {
            dest: self.attr.dest,
            sgid_index: self.attr.sgid_index,
            hop_limit: self.attr.hop_limit,
            traffic_class: self.attr.traffic_class,
            flow_label: 0,
        };
        UdDest {
            av,
            qpn: remote_qpn,
            qkey,
        }
    }
}
