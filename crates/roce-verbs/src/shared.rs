//! The state one context shares between the application's handles and its
//! progress thread: the engine behind one lock, the I/O behind another, and
//! the bookkeeping that keeps registered memory alive while work requests
//! reference it.
//!
//! # Lock order
//!
//! `io` before `core` before a channel's or the event queue's lock. A
//! [`MrCore`] locks `core` when its last reference drops, so no `MrCore`
//! may be dropped while `core` is held: everything that releases them under
//! the lock moves them into a [`Graveyard`] that the caller drops after
//! unlocking.

use std::collections::{HashMap, VecDeque};
use std::hash::BuildHasherDefault;
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock, PoisonError, Weak};
use std::thread::Thread;
use std::time::Instant;

use roce_core::{
    AsyncEvent, CqId, Device, MemFault, MrKeys, Nanos, PdId, Qpn, RegionMemory, Sge, SrqId, Wc,
    WcOpcode, WcStatus,
};
use roce_io::{Backend, PacketBatch};
use rustc_hash::FxHasher;
use smallvec::SmallVec;

use crate::config::ProgressConfig;
use crate::cq::{ChannelInner, Completion, CqInner};
use crate::error::Error;
use crate::mr::MrCore;

/// Internal work request ids of receives carry this bit; sends do not.
pub(crate) const RECV_BIT: u64 = 1 << 63;

/// Memory-region references released under the core lock, to drop after it.
pub(crate) type Graveyard = Vec<Arc<MrCore>>;

/// The regions one work request keeps registered: nearly always one or
/// two, held without an allocation per post.
pub(crate) type Refs = SmallVec<[Arc<MrCore>; 2]>;

/// The bookkeeping maps' keys are engine-made integers (lkeys, QPNs, WR
/// ids), not attacker-chosen input: a fast non-keyed hash is enough.
type FastMap<K, V> = HashMap<K, V, BuildHasherDefault<FxHasher>>;

/// Where an owned buffer goes when the engine hands its region back.
pub(crate) type Home = Arc<Mutex<Option<Vec<u8>>>>;

/// Locks a mutex, carrying on after a panic elsewhere (the state behind
/// these locks stays consistent between statements).
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// One clock for every context of the process: contexts that share an
/// in-memory fabric compare each other's timestamps.
fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

/// Nanoseconds on the clock every context of the process gives its
/// engine and backend as `now` (the engine's time): for placing a fault
/// window or a device setting in that time (docs/debugging.md).
pub fn clock_nanos() -> Nanos {
    epoch().elapsed().as_nanos() as Nanos
}

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

/// A callback run each time an event is queued where a notifier was set
/// (a completion channel, the async event queue): one call per event,
/// under the queue's lock, so a count it keeps (an eventfd's) always
/// equals the events queued and not yet taken. It must not block or
/// call back into the context.
pub type Notifier = Box<dyn Fn() + Send + Sync>;

/// Where asynchronous events go instead of the context's queue, once set
/// ([`Context::set_event_sink`](crate::Context::set_event_sink)): called
/// once per event, in order, from the thread that raised it (possibly
/// under the engine's lock). It must not block or call back into the
/// context.
pub type EventSink = Box<dyn Fn(AsyncEvent) + Send + Sync>;

impl Shared {
    /// Puts GID `index` to use: the backend gets its address, if it does
    /// not have it yet (a UDP backend binds the RoCE port there). Called
    /// before a QP's or an AH's source GID is set, so that a GID nobody
    /// sends from holds no port. Takes the I/O lock (never under the
    /// core lock: the lock order is io, then core).
    pub(crate) fn use_gid(&self, index: u8) -> Result<(), Error> {
        let Some(&addr) = self.addrs.get(index as usize) else {
            return Err(Error::InvalidArgument("sgid_index"));
        };
        let mut io = lock(&self.io);
        if io.backend.local_addrs().contains(&addr) {
            return Ok(());
        }
        io.backend
            .add_local_addr(addr)
            .map_err(|e| Error::AddrUnavailable(addr, e.kind()))
    }

    /// Queues asynchronous events and wakes their waiters.
    pub(crate) fn queue_events(&self, events: impl IntoIterator<Item = AsyncEvent>) {
        if let Some(sink) = self.event_sink.get() {
            events.into_iter().for_each(sink);
            return;
        }
        let mut q = lock(&self.events);
        for e in events {
            q.push_back(e);
            if let Some(n) = self.event_notifier.get() {
                n();
            }
        }
        drop(q);
        self.events_cv.notify_all();
    }
}

/// A CQ armed to raise events on a channel.
#[derive(Debug)]
pub(crate) struct NotifyReg {
    pub(crate) cq: CqId,
    pub(crate) handle: Weak<CqInner>,
    pub(crate) channel: Weak<ChannelInner>,
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
    next_id: u64,
    /// Destroyed QPs' numbers still claimed host-wide (docs/host.md).
    pub(crate) retired: crate::owners::Retired,
}

/// CM events queued for the application at most (the engine bounds its
/// own queue, listeners' backlogs and pending requests' lifetimes).
pub(crate) const MAX_CM_EVENTS: usize = 4096;

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
    pub(crate) owners: crate::owners::Owners,
}

/// Everything a context's handles and its progress thread share.
pub(crate) struct Shared {
    pub(crate) core: Mutex<Core>,
    pub(crate) io: Mutex<Io>,
    pub(crate) cfg: ProgressConfig,
    pub(crate) addrs: Vec<IpAddr>,
    pub(crate) shutdown: AtomicBool,
    pub(crate) thread: OnceLock<Thread>,
    /// What the scheduling rules read (`schedule.rs`).
    pub(crate) sig: crate::schedule::Signals,
    /// The rules' tuning, from `cfg`.
    pub(crate) tuning: crate::schedule::Tuning,
    pub(crate) events: Mutex<VecDeque<AsyncEvent>>,
    pub(crate) events_cv: Condvar,
    /// Called once per event queued ([`Context::set_event_notifier`](crate::Context::set_event_notifier)).
    pub(crate) event_notifier: OnceLock<Notifier>,
    /// Takes the events instead of `events` ([`EventSink`]).
    pub(crate) event_sink: OnceLock<EventSink>,
    /// Connection manager events, taken by the handle they concern.
    pub(crate) cm_events: Mutex<VecDeque<roce_core::cm::CmEvent>>,
    pub(crate) cm_cv: Condvar,
    /// Where CM events go instead of `cm_events`, once set
    /// ([`Context::set_cm_sink`](crate::Context::set_cm_sink)).
    pub(crate) cm_sink: OnceLock<crate::cm_sink::CmSink>,
    /// Where the idle progress thread sleeps when the backend has a
    /// descriptor: it wakes on an arriving datagram.
    #[cfg(target_os = "linux")]
    pub(crate) sleeper: Option<roce_io::Sleeper>,
    /// The last reading of [`Shared::now`] (see [`Shared::recent`]).
    clock: AtomicU64,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared")
            .field("addrs", &self.addrs)
            .finish_non_exhaustive()
    }
}

impl Shared {
    pub(crate) fn new(
        dev: Device,
        backend: Box<dyn Backend + Send>,
        cfg: ProgressConfig,
    ) -> Shared {
        let addrs = dev.addrs().to_vec();
        let slot = 4096 + 256;
        #[cfg(target_os = "linux")]
        let sleeper = backend
            .wait_fd()
            .and_then(|fd| roce_io::Sleeper::new(fd).ok());
        Shared {
            core: Mutex::new(Core {
                dev,
                mrs: FastMap::default(),
                sends: FastMap::default(),
                recvs: FastMap::default(),
                notify: Vec::new(),
                cm_dropped: Vec::new(),
                copy_piece: cfg.copy_piece,
                check_sges_at_post: cfg.check_sges_at_post,
                next_id: 1,
                retired: Default::default(),
            }),
            io: Mutex::new(Io {
                backend,
                rx: PacketBatch::new(cfg.batch, slot),
                tx: PacketBatch::new(cfg.batch, slot),
                stale_polls: 0,
                deadline: None,
                owners: Default::default(),
            }),
            cfg,
            addrs,
            shutdown: AtomicBool::new(false),
            thread: OnceLock::new(),
            sig: crate::schedule::Signals::default(),
            tuning: crate::schedule::Tuning::new(&cfg),
            events: Mutex::new(VecDeque::new()),
            events_cv: Condvar::new(),
            event_notifier: OnceLock::new(),
            event_sink: OnceLock::new(),
            cm_events: Mutex::new(VecDeque::new()),
            cm_cv: Condvar::new(),
            cm_sink: OnceLock::new(),
            #[cfg(target_os = "linux")]
            sleeper,
            clock: AtomicU64::new(0),
        }
    }

    /// Nanoseconds on the process-wide monotonic clock.
    pub(crate) fn now(&self) -> Nanos {
        let t = epoch().elapsed().as_nanos() as Nanos;
        // Not a read-modify-write (a locked instruction on every reading):
        // a thread preempted between its reading and the store can leave
        // an older reading over a newer one, so `recent` may step back a
        // little; its users (polling steps' timers, the progress thread's
        // heuristics) then only act a little late.
        if t > self.clock.load(Ordering::Relaxed) {
            self.clock.store(t, Ordering::Relaxed);
        }
        t
    }

    /// The last reading of the clock by any thread of this context: for a
    /// busy-polling loop, which should not read the clock on every empty
    /// round. Reading it is a system call where the kernel's clock source
    /// has no vDSO path (an emulated CPU whose TSC the kernel distrusts,
    /// as in the lab VM).
    pub(crate) fn recent(&self) -> Nanos {
        self.clock.load(Ordering::Relaxed)
    }

    /// Locks the engine, marking it [`touched`](Shared::touched).
    pub(crate) fn core(&self) -> MutexGuard<'_, Core> {
        let core = lock(&self.core);
        // Under the lock: a step clears the mark under it too, so a change
        // made after the step looked is never left unmarked.
        self.sig.touched.store(true, Ordering::Relaxed);
        core
    }

    /// Locks the engine without marking it touched: only for what cannot
    /// give it anything to send or a timer to run (polling a CQ, reading
    /// or writing a region's bytes, reading a QP's state, attributes or
    /// counters) and for the progress step itself.
    pub(crate) fn core_quiet(&self) -> MutexGuard<'_, Core> {
        lock(&self.core)
    }

    /// Wakes the progress thread (cheap when it is awake: a later park
    /// returns at once; a system call only when it sleeps on the backend's
    /// descriptor).
    pub(crate) fn unpark(&self) {
        if let Some(t) = self.thread.get() {
            t.unpark();
        }
        // Paired with `sleep`: either the thread sees `kicked` or this
        // sees `in_sleep` (both sequentially consistent).
        self.sig.kicked.store(true, Ordering::SeqCst);
        #[cfg(target_os = "linux")]
        if self.sig.in_sleep.load(Ordering::SeqCst) {
            if let Some(s) = &self.sleeper {
                s.wake();
            }
        }
    }

    /// The backend gave a descriptor to sleep on.
    pub(crate) fn has_sleeper(&self) -> bool {
        #[cfg(target_os = "linux")]
        return self.sleeper.is_some();
        #[cfg(not(target_os = "linux"))]
        false
    }

    /// Sleeps the progress thread for at most `d`: on the backend's
    /// descriptor (an arriving datagram or [`unpark`](Self::unpark) ends
    /// it) when `on_io` and the backend has one, else parked.
    pub(crate) fn sleep(&self, d: std::time::Duration, on_io: bool) {
        #[cfg(target_os = "linux")]
        if let (true, Some(s)) = (on_io, &self.sleeper) {
            self.sig.in_sleep.store(true, Ordering::SeqCst);
            if !self.sig.kicked.swap(false, Ordering::SeqCst) {
                // An error (none expected from ppoll) only ends the nap.
                let _ = s.sleep(d);
            }
            self.sig.in_sleep.store(false, Ordering::SeqCst);
            return;
        }
        let _ = on_io;
        std::thread::park_timeout(d);
    }
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
    ) -> Result<(MrKeys, u64, Home), (Error, Vec<u8>)> {
        if !access.is_valid() {
            return Err((
                Error::Verbs(roce_core::VerbsError::Access(
                    roce_core::AccessError::NoPermission,
                )),
                buf,
            ));
        }
        let va = self.alloc_va(buf.len());
        let home: Home = Arc::new(Mutex::new(None));
        let mem = OwnedMem::new(buf, home.clone(), self.copy_piece);
        match self.dev.reg_mr(pd, va, Box::new(mem), access) {
            Ok(keys) => Ok((keys, va, home)),
            Err(e) => {
                // The engine dropped the memory: it went home.
                let buf = lock(&home).take().unwrap_or_default();
                Err((e.into(), buf))
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
    pub(crate) fn resolve(&self, pd: PdId, sgl: &[Sge], refs: &mut Refs) -> Result<(), Error> {
        for sge in sgl {
            let mr = self.mrs.get(&sge.lkey.value()).and_then(Weak::upgrade);
            if !self.check_sges_at_post {
                refs.extend(mr);
                continue;
            }
            let mr = mr.ok_or(Error::UnknownLkey(sge.lkey))?;
            let (va, len) = (mr.va(), mr.len() as u64);
            let wrong_pd = mr.pd() != pd;
            let in_bounds = sge.addr >= va
                && sge
                    .addr
                    .checked_add(sge.length as u64)
                    .is_some_and(|end| end <= va + len);
            refs.push(mr);
            if wrong_pd {
                return Err(Error::WrongPd);
            }
            if !in_bounds {
                return Err(Error::SgeOutOfBounds(sge.lkey));
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
    ) -> Result<usize, Error> {
        const CHUNK: usize = 16;
        let mut wcs = [Wc::new(0, WcStatus::Success, WcOpcode::Send, Qpn::new(0)); CHUNK];
        let mut produced = 0;
        while produced < max {
            let want = (max - produced).min(CHUNK);
            let n = self
                .dev
                .poll_cq(cq, &mut wcs[..want])
                .map_err(|_| Error::CqOverflow)?;
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
