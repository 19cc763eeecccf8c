//! The engine and the I/O behind their two locks, and the bookkeeping
//! that keeps registered memory alive while work requests reference it
//! (the lock order is in the [parent module](super)).

use std::collections::{HashMap, VecDeque};
use std::hash::BuildHasherDefault;
use std::sync::{Arc, Mutex, Weak};

use roce_core::{
    CqId, Device, MemFault, MrKeys, Nanos, PdId, Qpn, RegionMemory, Sge, SrqId, Wc, WcOpcode,
    WcStatus,
};
use roce_io::{Backend, PacketBatch};
use rustc_hash::FxHasher;
use smallvec::SmallVec;

use super::events::{ChannelQueue, CqHandle};
use super::region::MrCore;
use super::{lock, Home};
use crate::completion::Completion;
use crate::error::PostError;
use crate::error_objects::CqError;

/// Internal work request ids of receives carry this bit; sends do not.
pub(crate) const RECV_BIT: u64 = 1 << 63;

/// Memory-region references released under the core lock, to drop after it.
pub(crate) type Graveyard = Vec<Arc<MrCore>>;

/// The regions one work request keeps registered: nearly always one or
/// two, held without an allocation per post.
pub(crate) type Refs = SmallVec<[Arc<MrCore>; 2]>;

/// The bookkeeping maps' keys are engine-made integers (lkeys, QPNs, WR
/// ids), not attacker-chosen input: a fast non-keyed hash is enough.
pub(crate) type FastMap<K, V> = HashMap<K, V, BuildHasherDefault<FxHasher>>;

/// An owned buffer registered by the engine for the duration of one work
/// request (the owned-buffer path): handed back with its completion.
#[derive(Debug)]
pub(crate) struct OwnedBuf {
    pub(crate) keys: MrKeys,
    pub(crate) home: Home,
}

/// A posted, not yet completed send work request.
#[derive(Debug)]
pub(crate) struct SendEntry {
    pub(crate) id: u64,
    pub(crate) wr_id: u64,
    pub(crate) refs: Refs,
    pub(crate) owned: Option<OwnedBuf>,
}

/// Who holds a posted receive.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RecvOwner {
    Qp(u32),
    Srq(SrqId),
}

/// A posted, not yet completed receive work request.
#[derive(Debug)]
pub(crate) struct RecvEntry {
    pub(crate) owner: RecvOwner,
    pub(crate) wr_id: u64,
    pub(crate) refs: Refs,
    pub(crate) owned: Option<OwnedBuf>,
}

/// A CQ armed to raise events on a channel.
#[derive(Debug)]
pub(crate) struct NotifyReg {
    pub(crate) cq: CqId,
    pub(crate) handle: CqHandle,
    pub(crate) channel: Weak<ChannelQueue>,
}

/// The engine and the bookkeeping that must change atomically with it.
#[derive(Debug)]
pub(crate) struct Core {
    pub(crate) dev: Device,
    /// Live memory regions by lkey (for resolving scatter/gather entries).
    pub(crate) mrs: FastMap<u32, Weak<MrCore>>,
    /// Outstanding send WRs per QP, in post order (the engine retires them
    /// in order, so a completion also retires every unsignaled WR before it).
    pub(crate) sends: FastMap<u32, VecDeque<SendEntry>>,
    /// Outstanding receive WRs by internal id.
    pub(crate) recvs: FastMap<u64, RecvEntry>,
    /// CQs attached to completion channels.
    pub(crate) notify: Vec<NotifyReg>,
    /// CM connections the application let go of (dropped, abandoned):
    /// their later events are not queued, as nobody will take them. An id
    /// leaves once the engine has forgotten its connection.
    pub(crate) cm_dropped: Vec<roce_core::cm::CmId>,
    /// [`ProgressConfig::copy_piece`](crate::ProgressConfig::copy_piece).
    pub(crate) copy_piece: Option<usize>,
    /// [`ProgressConfig::check_sges_at_post`](crate::ProgressConfig::check_sges_at_post).
    pub(crate) check_sges_at_post: bool,
    pub(super) next_id: u64,
    /// Destroyed QPs' numbers still claimed host-wide (docs/host.md).
    pub(crate) retired: super::owners::Retired,
}

/// The I/O side: the backend and its batches.
pub(crate) struct Io {
    pub(crate) backend: Box<dyn Backend + Send>,
    pub(crate) rx: PacketBatch,
    pub(crate) tx: PacketBatch,
    /// Polling steps since the clock was last read for one.
    pub(crate) stale_polls: u32,
    /// The engine's earliest timer when a step last looked.
    pub(crate) deadline: Option<Nanos>,
    /// What sharing the address with other processes needs
    /// (docs/host.md).
    pub(crate) owners: super::owners::Owners,
}

impl Core {
    pub(crate) fn next_send_id(&mut self) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        id
    }

    pub(crate) fn next_recv_id(&mut self) -> u64 {
        self.next_send_id() | RECV_BIT
    }

    /// A fresh virtual address for an owned region: page aligned and
    /// drawn from the device's CSPRNG anywhere in [2^32, 2^47) (35 bits a
    /// peer cannot guess; with an R_Key it names the region remotely).
    /// Regions of one context may overlap in this address space: every
    /// access goes through a key, which names one region.
    pub(crate) fn alloc_va(&mut self, len: usize) -> u64 {
        let pages = (len as u64).div_ceil(4096);
        let room = (1u64 << 35).saturating_sub(pages + (1 << 20)).max(1);
        (1u64 << 32) + (self.dev.random_u64() % room) * 4096
    }

    /// Registers an owned buffer in the engine; its bytes come back through
    /// `home` when the engine drops the region.
    pub(crate) fn register_owned(
        &mut self,
        pd: PdId,
        buf: Vec<u8>,
        access: roce_core::Access,
    ) -> Result<(MrKeys, u64, Home), (PostError, Vec<u8>)> {
        if !access.is_valid() {
            return Err((PostError::InvalidArgument("access rights"), buf));
        }
        let va = self.alloc_va(buf.len());
        let home: Home = Arc::new(Mutex::new(None));
        let mem = OwnedMem::new(buf, home.clone(), self.copy_piece);
        match self.dev.reg_mr(pd, va, Box::new(mem), access) {
            Ok(keys) => Ok((keys, va, home)),
            Err(_) => {
                // The engine dropped the memory: it went home.
                let buf = lock(&home).take().unwrap_or_default();
                Err((PostError::InvalidArgument("buffer not registrable"), buf))
            }
        }
    }

    /// Deregisters an owned region and returns its buffer.
    pub(crate) fn take_owned(&mut self, o: OwnedBuf) -> Option<Vec<u8>> {
        let mem = self.dev.dereg_mr(o.keys).ok()?;
        drop(mem);
        lock(&o.home).take()
    }

    /// Resolves the memory regions an SGL names, checking PD and bounds
    /// unless `check_sges_at_post` is off: then the regions found are
    /// kept and the rest is left to the engine's checks when the work
    /// request runs.
    pub(crate) fn resolve(&self, pd: PdId, sgl: &[Sge], refs: &mut Refs) -> Result<(), PostError> {
        for sge in sgl {
            let mr = self.mrs.get(&sge.lkey.value()).and_then(Weak::upgrade);
            if !self.check_sges_at_post {
                refs.extend(mr);
                continue;
            }
            let mr = mr.ok_or(PostError::UnknownLkey(sge.lkey))?;
            let (va, len) = (mr.va(), mr.len() as u64);
            let wrong_pd = mr.pd() != pd;
            let in_bounds = sge.addr >= va
                && sge
                    .addr
                    .checked_add(sge.length as u64)
                    .is_some_and(|end| end <= va + len);
            refs.push(mr);
            if wrong_pd {
                return Err(PostError::WrongPd);
            }
            if !in_bounds {
                return Err(PostError::SgeOutOfBounds(sge.lkey));
            }
        }
        Ok(())
    }

    /// Drops the bookkeeping of a QP that was destroyed or reset: the
    /// engine discarded its queues, so it no longer references their memory.
    pub(crate) fn forget_qp(&mut self, qpn: Qpn, grave: &mut Graveyard) {
        let q = qpn.value();
        let mut owned = Vec::new();
        if let Some(list) = self.sends.remove(&q) {
            for e in list {
                grave.extend(e.refs);
                owned.extend(e.owned);
            }
        }
        self.forget_recvs(RecvOwner::Qp(q), &mut owned, grave);
        for o in owned {
            drop(self.take_owned(o));
        }
    }

    /// Drops the bookkeeping of a destroyed SRQ's receives.
    pub(crate) fn forget_srq(&mut self, srq: SrqId, grave: &mut Graveyard) {
        let mut owned = Vec::new();
        self.forget_recvs(RecvOwner::Srq(srq), &mut owned, grave);
        for o in owned {
            drop(self.take_owned(o));
        }
    }

    fn forget_recvs(&mut self, owner: RecvOwner, owned: &mut Vec<OwnedBuf>, grave: &mut Graveyard) {
        let ids: Vec<u64> = self
            .recvs
            .iter()
            .filter(|(_, e)| e.owner == owner)
            .map(|(id, _)| *id)
            .collect();
        for id in ids {
            if let Some(e) = self.recvs.remove(&id) {
                grave.extend(e.refs);
                owned.extend(e.owned);
            }
        }
    }

    /// Polls up to `max` completions of `cq` into `out`, mapping internal
    /// ids back to the application's and releasing what each WR held.
    pub(crate) fn poll(
        &mut self,
        cq: CqId,
        max: usize,
        out: &mut Vec<Completion>,
        grave: &mut Graveyard,
    ) -> Result<usize, CqError> {
        const CHUNK: usize = 16;
        let mut wcs = [Wc::new(0, WcStatus::Success, WcOpcode::Send, Qpn::new(0)); CHUNK];
        let mut produced = 0;
        while produced < max {
            let want = (max - produced).min(CHUNK);
            let n = self
                .dev
                .poll_cq(cq, &mut wcs[..want])
                .map_err(|_| CqError::Overflow)?;
            for wc in &wcs[..n] {
                if let Some(c) = self.map(*wc, grave) {
                    out.push(c);
                    produced += 1;
                }
            }
            if n < want {
                break;
            }
        }
        Ok(produced)
    }

    fn map(&mut self, mut wc: Wc, grave: &mut Graveyard) -> Option<Completion> {
        let entry_owned;
        if wc.wr_id & RECV_BIT != 0 {
            let e = self.recvs.remove(&wc.wr_id)?;
            grave.extend(e.refs);
            wc.wr_id = e.wr_id;
            entry_owned = e.owned;
        } else {
            let list = self.sends.get_mut(&wc.qp_num.value())?;
            // Unsignaled WRs before this one retired silently, in order.
            let mut earlier = Vec::new();
            while list.front().is_some_and(|f| f.id < wc.wr_id) {
                if let Some(e) = list.pop_front() {
                    grave.extend(e.refs);
                    earlier.extend(e.owned);
                }
            }
            let hit = list.front().is_some_and(|f| f.id == wc.wr_id);
            let e = if hit { list.pop_front() } else { None };
            for o in earlier {
                drop(self.take_owned(o));
            }
            let e = e?;
            grave.extend(e.refs);
            wc.wr_id = e.wr_id;
            entry_owned = e.owned;
        }
        let buffer = entry_owned.and_then(|o| self.take_owned(o));
        Some(Completion { wc, buffer })
    }
}

/// An owned buffer as the engine's region memory. When the engine drops the
/// region (deregistration), the buffer moves to `home` instead of being
/// freed, so it can be handed back without a copy.
pub(crate) struct OwnedMem {
    buf: Vec<u8>,
    home: Home,
    /// [`ProgressConfig::copy_piece`](crate::ProgressConfig::copy_piece).
    piece: Option<usize>,
}

impl OwnedMem {
    pub(crate) fn new(buf: Vec<u8>, home: Home, piece: Option<usize>) -> OwnedMem {
        OwnedMem { buf, home, piece }
    }
}

impl RegionMemory for OwnedMem {
    fn len(&self) -> usize {
        self.buf.len()
    }
    fn read(&self, offset: usize, out: &mut [u8]) -> Result<(), MemFault> {
        let src = offset
            .checked_add(out.len())
            .and_then(|end| self.buf.get(offset..end))
            .ok_or(MemFault)?;
        roce_io::copy_payload(out, src, self.piece);
        Ok(())
    }
    fn write(&mut self, offset: usize, data: &[u8]) -> Result<(), MemFault> {
        let dst = offset
            .checked_add(data.len())
            .and_then(|end| self.buf.get_mut(offset..end))
            .ok_or(MemFault)?;
        roce_io::copy_payload(dst, data, self.piece);
        Ok(())
    }
}

impl Drop for OwnedMem {
    fn drop(&mut self) {
        *lock(&self.home) = Some(std::mem::take(&mut self.buf));
    }
}
