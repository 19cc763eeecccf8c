//! Memory regions: owned (safe) and raw (`unsafe`, zero-copy).
//!
//! A region's bytes live inside the engine (behind
//! [`roce_core::RegionMemory`]) for as long as it is registered, and it
//! stays registered until its [`MemoryRegion`] handle is gone *and* no
//! outstanding work request references it: each posted WR holds a
//! reference to the region's [`MrCore`], released when its completion is
//! polled (or its QP is destroyed or reset). The last reference
//! deregisters the region.

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

use roce_core::{Access, Lkey, MemFault, MrKeys, RegionMemory, Rkey, Sge};

use crate::error::{Error, RegMrError};
use crate::error_objects::RegionError;
use crate::pd::ProtectionDomain;
use crate::state::{lock, Home, MrCore, OwnedMem, Shared};

impl ProtectionDomain {
    /// `ibv_reg_mr` over an owned buffer: the buffer moves into the engine
    /// (no copy) until [`MemoryRegion::into_inner`] hands it back. On error
    /// the buffer is dropped.
    pub fn reg_mr(
        &self,
        buf: impl Into<Vec<u8>>,
        access: Access,
    ) -> Result<MemoryRegion, RegMrError> {
        let buf: Vec<u8> = buf.into();
        let home: Home = Arc::new(Mutex::new(None));
        let mem = OwnedMem::new(buf, home.clone(), self.shared().cfg.copy_piece);
        register(self, Box::new(mem), None, Some(home), access)
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
    ) -> Result<MemoryRegion, RegMrError> {
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
    ) -> Result<MemoryRegion, RegMrError> {
        if ptr.is_null() && len > 0 {
            return Err(RegMrError::InvalidArgument("null pointer"));
        }
        if (ptr as u64).checked_add(len as u64).is_none() || iova.checked_add(len as u64).is_none()
        {
            return Err(RegMrError::InvalidArgument(
                "region wraps the address space",
            ));
        }
        // SAFETY: the caller upholds the contract above, which is exactly
        // what `RawMem::new` requires.
        let mem = unsafe { RawMem::new(ptr, len, self.shared().cfg.copy_piece) };
        register(self, Box::new(mem), Some(iova), None, access)
    }
}

/// Where a peer finds a region: what it needs for RDMA READ, WRITE and
/// atomics.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RemoteMr {
    /// Virtual address of the first byte.
    pub addr: u64,
    /// Remote key.
    pub rkey: Rkey,
    /// Length in bytes.
    pub len: u64,
}

/// A registered memory region (`ibv_mr`).
///
/// Registered with [`ProtectionDomain::reg_mr`] (the buffer moves into the
/// engine; read and write it with [`read`](Self::read) and
/// [`write`](Self::write), get it back with [`into_inner`](Self::into_inner))
/// or with the `unsafe` [`ProtectionDomain::reg_mr_raw`] (zero-copy over
/// memory the caller keeps).
///
/// Dropping the handle deregisters the region once no outstanding work
/// request references it; until then the engine keeps it alive, so a WR
/// in flight never touches freed memory.
#[derive(Debug)]
pub struct MemoryRegion {
    core: Arc<MrCore>,
    pd: ProtectionDomain,
}

/// A handle that revokes a region ([`MemoryRegion::revoker`]): cheap to
/// clone, `Send + Sync`, and harmless once the region or its context is
/// gone. For a layer that learns that a region's memory is going away
/// (the drop-in libibverbs watches `munmap`).
#[derive(Clone, Debug)]
pub struct Revoker {
    keys: MrKeys,
    shared: Weak<Shared>,
}

impl Revoker {
    /// Every later local or remote access of the region fails (a local
    /// protection error, a remote access error to the peer) and the
    /// engine never touches its memory again. Takes the engine lock: not
    /// to be called while holding it.
    pub fn revoke(&self) {
        if let Some(shared) = self.shared.upgrade() {
            shared.core().dev.revoke_mr(self.keys);
        }
    }
}

impl MemoryRegion {
    /// A [`Revoker`] of this region.
    pub fn revoker(&self) -> Revoker {
        Revoker {
            keys: self.core.keys,
            shared: self.core.shared.clone(),
        }
    }

    /// Local key, for scatter/gather entries.
    pub fn lkey(&self) -> Lkey {
        self.core.keys.lkey
    }

    /// Remote key, for peers.
    pub fn rkey(&self) -> Rkey {
        self.core.keys.rkey
    }

    /// Virtual address of the first byte (the address of the memory for a
    /// raw region; an address chosen by the context for an owned one).
    pub fn addr(&self) -> u64 {
        self.core.va()
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.core.len()
    }

    /// True for an empty region.
    pub fn is_empty(&self) -> bool {
        self.core.len() == 0
    }

    /// Access rights.
    pub fn access(&self) -> Access {
        self.core.access()
    }

    /// True when registered with [`ProtectionDomain::reg_mr_raw`].
    pub fn is_raw(&self) -> bool {
        self.core.home.is_none()
    }

    /// The protection domain.
    pub fn pd(&self) -> &ProtectionDomain {
        &self.pd
    }

    /// A scatter/gather entry of `len` bytes at `offset`. Bounds are checked
    /// when a work request using it is posted.
    pub fn sge(&self, offset: u64, len: u32) -> Sge {
        Sge {
            addr: self.core.va().wrapping_add(offset),
            length: len,
            lkey: self.core.keys.lkey,
        }
    }

    /// A scatter/gather entry covering the whole region (at most 4 GiB − 1).
    pub fn sge_all(&self) -> Sge {
        self.sge(0, self.core.len().min(u32::MAX as usize) as u32)
    }

    /// What a peer needs to access this region remotely.
    pub fn remote(&self) -> RemoteMr {
        RemoteMr {
            addr: self.core.va(),
            rkey: self.core.keys.rkey,
            len: self.core.len() as u64,
        }
    }

    /// Copies `out.len()` bytes at `offset` out of the region, under the
    /// engine lock (so never torn by a packet being written, though a
    /// message may be half delivered).
    pub fn read(&self, offset: u64, out: &mut [u8]) -> Result<(), RegionError> {
        let va = self
            .core
            .va()
            .checked_add(offset)
            .ok_or(RegionError::OutOfBounds)?;
        let shared = self.pd.shared();
        let core = shared.core_quiet();
        core.dev
            .mr_read(self.core.keys, self.core.pd(), va, out)
            .map_err(RegionError::from)
    }

    /// Copies `data` into the region at `offset`, under the engine lock.
    pub fn write(&self, offset: u64, data: &[u8]) -> Result<(), RegionError> {
        let va = self
            .core
            .va()
            .checked_add(offset)
            .ok_or(RegionError::OutOfBounds)?;
        let shared = self.pd.shared();
        let mut core = shared.core_quiet();
        core.dev
            .mr_write(self.core.keys, self.core.pd(), va, data)
            .map_err(RegionError::from)
    }

    /// A copy of the whole region.
    pub fn to_vec(&self) -> Result<Vec<u8>, RegionError> {
        let mut v = vec![0u8; self.core.len()];
        self.read(0, &mut v)?;
        Ok(v)
    }

    /// `ibv_rereg_mr` without new memory: moves the region to `pd` (of
    /// the same context) and/or gives it `access`, keeping its keys (as
    /// the kernel does when it can, and rxe always). Work requests
    /// already posted keep referring to the region; the engine applies
    /// the new PD and rights to every access from now on. On an error
    /// nothing changed.
    pub fn rereg(
        &mut self,
        pd: Option<&ProtectionDomain>,
        access: Option<Access>,
    ) -> Result<(), RegMrError> {
        self.rereg_with(pd, access, None)
    }

    /// `ibv_rereg_mr` with `IBV_REREG_MR_CHANGE_TRANSLATION`: the region
    /// now covers `ptr..ptr + len`, seen at virtual address `iova`, with
    /// the same keys (and optionally a new PD and rights, as
    /// [`rereg`](Self::rereg)). A region that had been revoked is valid
    /// again. Only for a raw region (an owned one keeps its buffer).
    ///
    /// # Safety
    ///
    /// The new memory is under the contract of
    /// [`ProtectionDomain::reg_mr_raw`] from this call on. Once it
    /// returns `Ok` the engine never touches the old memory again (work
    /// requests still outstanding that named it use the new memory, at
    /// their offsets, or fail its bounds check).
    pub unsafe fn rereg_raw(
        &mut self,
        ptr: *mut u8,
        len: usize,
        iova: u64,
        pd: Option<&ProtectionDomain>,
        access: Option<Access>,
    ) -> Result<(), RegMrError> {
        if self.core.home.is_some() {
            return Err(RegMrError::InvalidArgument(
                "the memory of an owned region cannot be replaced",
            ));
        }
        if ptr.is_null() && len > 0 {
            return Err(RegMrError::InvalidArgument("null pointer"));
        }
        if (ptr as u64).checked_add(len as u64).is_none() || iova.checked_add(len as u64).is_none()
        {
            return Err(RegMrError::InvalidArgument(
                "region wraps the address space",
            ));
        }
        // SAFETY: the caller's contract is `reg_mr_raw`'s, which is what
        // `RawMem::new` requires.
        let mem = unsafe { RawMem::new(ptr, len, self.pd.shared().cfg.copy_piece) };
        self.rereg_with(pd, access, Some((iova, Box::new(mem))))
    }

    fn rereg_with(
        &mut self,
        pd: Option<&ProtectionDomain>,
        access: Option<Access>,
        translation: Option<(u64, Box<dyn RegionMemory>)>,
    ) -> Result<(), RegMrError> {
        if pd.is_some_and(|p| !p.context().same(self.pd.context())) {
            return Err(RegMrError::WrongContext);
        }
        let range = translation.as_ref().map(|(va, mem)| (*va, mem.len()));
        let shared = self.pd.shared().clone();
        let mut core = shared.core();
        let old = core
            .dev
            .rereg_mr(self.core.keys, pd.map(|p| p.id()), access, translation)?;
        // Under the core lock, as the post path reads them.
        if let Some(p) = pd {
            self.core.pd.store(p.id().0, Ordering::Relaxed);
        }
        if let Some(a) = access {
            self.core.access.store(a.0, Ordering::Relaxed);
        }
        if let Some((va, len)) = range {
            self.core.va.store(va, Ordering::Relaxed);
            self.core.len.store(len as u64, Ordering::Relaxed);
        }
        drop(core);
        drop(old);
        if let Some(p) = pd {
            self.pd = p.clone();
        }
        Ok(())
    }

    /// Deregisters an owned region and hands its buffer back. Refused
    /// (with the region returned) while a work request references it or
    /// for a raw region.
    pub fn into_inner(self) -> Result<Vec<u8>, DeregError> {
        let Some(home) = self.core.home.clone() else {
            return Err(DeregError {
                mr: self,
                error: Error::NotOwned,
            });
        };
        self.dereg_now()?;
        let buf = lock(&home).take().unwrap_or_default();
        Ok(buf)
    }

    /// Deregisters the region now (`ibv_dereg_mr`), refused (with the
    /// region returned) while a work request references it. For a raw
    /// region, the engine never touches the memory after this returns `Ok`.
    pub fn dereg(self) -> Result<(), DeregError> {
        self.dereg_now()
    }

    fn dereg_now(self) -> Result<(), DeregError> {
        let shared = self.pd.shared().clone();
        let mut core = shared.core();
        // References are only taken under the core lock, so the count
        // cannot grow while it is held.
        if Arc::strong_count(&self.core) != 1 {
            drop(core);
            return Err(DeregError {
                mr: self,
                error: Error::MrInUse,
            });
        }
        core.mrs.remove(&self.core.keys.lkey.value());
        let mem = core.dev.dereg_mr(self.core.keys);
        self.core.released.store(true, Ordering::Relaxed);
        drop(core);
        drop(mem);
        Ok(())
    }
}

/// Registers `mem` (owned when `home` is set, raw otherwise).
pub(crate) fn register(
    pd: &ProtectionDomain,
    mem: Box<dyn RegionMemory>,
    va: Option<u64>,
    home: Option<Home>,
    access: Access,
) -> Result<MemoryRegion, RegMrError> {
    let shared = pd.shared();
    let len = mem.len();
    let mut core = shared.core();
    let va = match va {
        Some(v) => v,
        None => core.alloc_va(len),
    };
    let keys = core.dev.reg_mr(pd.id(), va, mem, access)?;
    let mr = Arc::new(MrCore {
        keys,
        pd: AtomicU32::new(pd.id().0),
        va: AtomicU64::new(va),
        len: AtomicU64::new(len as u64),
        access: AtomicU32::new(access.0),
        shared: Arc::downgrade(shared),
        home,
        released: AtomicBool::new(false),
    });
    core.mrs.insert(keys.lkey.value(), Arc::downgrade(&mr));
    drop(core);
    Ok(MemoryRegion {
        core: mr,
        pd: pd.clone(),
    })
}

/// Raw application memory as region memory: copies through the pointer.
pub(crate) struct RawMem {
    ptr: *mut u8,
    len: usize,
    /// [`ProgressConfig::copy_piece`](crate::ProgressConfig::copy_piece).
    piece: Option<usize>,
}

impl RawMem {
    /// # Safety
    ///
    /// `ptr..ptr + len` must be valid for reads and writes for as long as
    /// the region is registered (the contract of
    /// [`ProtectionDomain::reg_mr_raw`]).
    pub(crate) unsafe fn new(ptr: *mut u8, len: usize, piece: Option<usize>) -> RawMem {
        RawMem { ptr, len, piece }
    }
}

// SAFETY: `RawMem` is only a pointer and a length; it is touched only
// inside the engine, under the engine lock, and the `reg_mr_raw` contract
// makes the memory valid from any thread while registered.
unsafe impl Send for RawMem {}

impl RegionMemory for RawMem {
    fn len(&self) -> usize {
        self.len
    }

    fn read(&self, offset: usize, out: &mut [u8]) -> Result<(), MemFault> {
        if offset
            .checked_add(out.len())
            .is_none_or(|end| end > self.len)
        {
            return Err(MemFault);
        }
        // SAFETY: `offset + out.len() <= len` (checked above) and the region
        // `ptr..ptr + len` is valid for reads while registered (reg_mr_raw
        // contract) or, if the program broke it by unmapping or protecting
        // the pages, faults, which the guarded copy turns into `MemFault`
        // (with the handler installed); `move_bytes` tolerates overlap.
        unsafe {
            move_bytes(
                self.ptr.add(offset),
                out.as_mut_ptr(),
                out.len(),
                self.piece,
            )
        }
    }

    fn write(&mut self, offset: usize, data: &[u8]) -> Result<(), MemFault> {
        if offset
            .checked_add(data.len())
            .is_none_or(|end| end > self.len)
        {
            return Err(MemFault);
        }
        // SAFETY: as in `read`: in bounds and valid for writes while
        // registered (or faulting, which is `MemFault`); `move_bytes`
        // tolerates overlap.
        unsafe { move_bytes(data.as_ptr(), self.ptr.add(offset), data.len(), self.piece) }
    }
}

/// A guarded `ptr::copy` ([`crate::guard::copy`]: overlap allowed, a
/// page that faults is [`MemFault`]) in pieces of at most `piece` bytes
/// ([`ProgressConfig::copy_piece`](crate::ProgressConfig::copy_piece);
/// `None`: one piece):
/// forwards when `dst` lies below `src`, backwards otherwise, so that no
/// piece overwrites source bytes a later piece still reads.
///
/// # Safety
///
/// As [`crate::guard::copy`]: `src` readable and `dst` writable for `len`
/// bytes, or faulting.
unsafe fn move_bytes(
    src: *const u8,
    dst: *mut u8,
    len: usize,
    piece: Option<usize>,
) -> Result<(), MemFault> {
    // SAFETY: the caller's contract.
    unsafe { move_in_pieces(src, dst, len, piece.unwrap_or(usize::MAX).max(1)) }
}

/// [`move_bytes`] with the piece size given.
///
/// # Safety
///
/// As [`move_bytes`].
unsafe fn move_in_pieces(
    src: *const u8,
    dst: *mut u8,
    len: usize,
    piece: usize,
) -> Result<(), MemFault> {
    if len <= piece {
        // SAFETY: the caller's contract.
        return unsafe { crate::guard::copy(src, dst, len) };
    }
    if (dst as usize) <= (src as usize) {
        let mut at = 0;
        while at < len {
            let n = piece.min(len - at);
            // SAFETY: at + n <= len, inside both ranges of the contract.
            unsafe { crate::guard::copy(src.add(at), dst.add(at), n) }?;
            at += n;
        }
    } else {
        let mut end = len;
        while end > 0 {
            let n = piece.min(end);
            let at = end - n;
            // SAFETY: at + n = end <= len, inside both ranges of the contract.
            unsafe { crate::guard::copy(src.add(at), dst.add(at), n) }?;
            end = at;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::move_in_pieces;

    /// Moves `len` bytes from `from` to `to` inside one buffer, in pieces.
    fn moved(from: usize, to: usize, len: usize, piece: usize) -> Vec<u8> {
        let mut buf: Vec<u8> = (0..64u8).collect();
        let p = buf.as_mut_ptr();
        // SAFETY: both ranges lie inside the 64-byte buffer.
        unsafe { move_in_pieces(p.add(from), p.add(to), len, piece) }.unwrap();
        buf
    }

    #[test]
    fn overlapping_moves_in_pieces_match_a_whole_move() {
        for (from, to, len) in [
            (0, 5, 40),
            (5, 0, 40),
            (10, 11, 50),
            (11, 10, 50),
            (0, 32, 32),
        ] {
            let mut want: Vec<u8> = (0..64u8).collect();
            want.copy_within(from..from + len, to);
            for piece in [1, 3, 7, 16, usize::MAX] {
                assert_eq!(
                    moved(from, to, len, piece),
                    want,
                    "{from}->{to} x{len} in {piece}"
                );
            }
        }
    }
}

/// A refused [`MemoryRegion::into_inner`] / [`MemoryRegion::dereg`]: the
/// region comes back unchanged with the reason.
#[derive(Debug)]
pub struct DeregError {
    /// The region, still registered.
    pub mr: MemoryRegion,
    /// Why: [`Error::MrInUse`] or [`Error::NotOwned`].
    pub error: Error,
}

impl fmt::Display for DeregError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "cannot deregister: {}", self.error)
    }
}

impl std::error::Error for DeregError {}
