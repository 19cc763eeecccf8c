//! The state one context shares between the application's handles and its
//! progress thread, split by concern:
//!
//! - [`engine`]: the engine behind one lock ([`Core`]), the I/O behind
//!   another ([`Io`]), and the bookkeeping that keeps registered memory
//!   alive while work requests reference it;
//! - [`region`]: a memory region's registration ([`MrCore`]);
//! - [`events`]: the event queues, sinks and notifiers, and the completion
//!   channels' queues;
//! - [`wake`]: the progress thread's handle and where it sleeps, with the
//!   flags the scheduling rules read (`schedule.rs`'s `Signals`);
//! - [`clock`]: the process-wide clock;
//! - [`owners`]: one device address shared by several processes.
//!
//! This module sits below every handle module (`context`, `pd`, `cq`,
//! `qp`, `srq`, `mr`, `cm`) and the progress engine (`progress`): it
//! imports none of them.
//!
//! # Lock order
//!
//! `io` before `core` before a channel's or the event queue's lock. A
//! [`MrCore`] locks `core` when its last reference drops, so no `MrCore`
//! may be dropped while `core` is held: everything that releases them under
//! the lock moves them into a [`Graveyard`] that the caller drops after
//! unlocking.

mod clock;
mod engine;
mod events;
pub(crate) mod owners;
mod region;
mod wake;

use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use roce_core::{AsyncEvent, Device, Nanos};
use roce_io::{Backend, PacketBatch};

pub use clock::clock_nanos;
pub(crate) use engine::{
    Core, FastMap, Graveyard, Io, NotifyReg, OwnedBuf, OwnedMem, RecvEntry, RecvOwner, Refs,
    SendEntry,
};
pub(crate) use events::{ChannelQueue, CqHandle, Events, MAX_CM_EVENTS};
pub use events::{CmSink, EventSink, Notifier};
pub(crate) use region::MrCore;

use crate::config::ProgressConfig;
use crate::schedule::{Signals, Tuning};

/// Locks a mutex, carrying on after a panic elsewhere (the state behind
/// these locks stays consistent between statements).
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Where an owned buffer goes when the engine hands its region back.
pub(crate) type Home = Arc<Mutex<Option<Vec<u8>>>>;

/// Hands the `i`-th received datagram of `rx` to the engine, with `meta`:
/// a UDP payload with its header ([`Device::handle_udp`]), or a whole IP
/// datagram ([`Device::handle_datagram`]).
///
/// [`Device::handle_udp`]: roce_core::Device::handle_udp
/// [`Device::handle_datagram`]: roce_core::Device::handle_datagram
pub(crate) fn hand_to_engine(
    dev: &mut roce_core::Device,
    now: Nanos,
    rx: &PacketBatch,
    i: usize,
    meta: roce_core::RxMeta,
) -> roce_core::RxOutcome {
    match rx.header(i) {
        Some(h) => dev.handle_udp(now, h, rx.get(i), meta),
        None => dev.handle_datagram(now, rx.get(i), meta),
    }
}

/// Everything a context's handles and its progress thread share.
pub(crate) struct Shared {
    /// The engine and its bookkeeping.
    pub(crate) core: Mutex<Core>,
    /// The backend and its batches.
    pub(crate) io: Mutex<Io>,
    pub(crate) cfg: ProgressConfig,
    pub(crate) addrs: Vec<IpAddr>,
    pub(crate) shutdown: AtomicBool,
    /// The progress thread and where it sleeps.
    pub(crate) waker: wake::Waker,
    /// What the scheduling rules read (`schedule.rs`).
    pub(crate) sig: Signals,
    /// The rules' tuning, from `cfg`.
    pub(crate) tuning: Tuning,
    /// Asynchronous and CM events, and what takes them.
    pub(crate) events: Events,
    /// The last reading of [`Shared::now`] (see [`Shared::recent`]).
    clock: clock::Clock,
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
            waker: wake::Waker {
                thread: Default::default(),
                #[cfg(target_os = "linux")]
                sleeper,
            },
            sig: Signals::default(),
            tuning: Tuning::new(&cfg),
            events: Events::default(),
            clock: clock::Clock::default(),
        }
    }

    /// Nanoseconds on the process-wide monotonic clock.
    pub(crate) fn now(&self) -> Nanos {
        self.clock.now()
    }

    /// The last reading of the clock by any thread of this context
    /// ([`clock::Clock::recent`]).
    pub(crate) fn recent(&self) -> Nanos {
        self.clock.recent()
    }

    /// Locks the engine, marking it touched (`Signals::touched`).
    pub(crate) fn core(&self) -> MutexGuard<'_, Core> {
        let core = lock(&self.core);
        // Under the lock: a step clears the mark under it too, so a change
        // made after the step looked is never left unmarked.
        self.sig.touched.store(true, Ordering::Relaxed);
        self.sig.called();
        core
    }

    /// Locks the engine without marking it touched: only for what cannot
    /// give it anything to send or a timer to run (polling a CQ, reading
    /// or writing a region's bytes, reading a QP's state, attributes or
    /// counters) and for the progress step itself.
    pub(crate) fn core_quiet(&self) -> MutexGuard<'_, Core> {
        lock(&self.core)
    }

    /// Wakes the progress thread ([`wake::Waker::unpark`]).
    pub(crate) fn unpark(&self) {
        self.waker.unpark(&self.sig);
    }

    /// The backend gave a descriptor to sleep on.
    pub(crate) fn has_sleeper(&self) -> bool {
        self.waker.has_sleeper()
    }

    /// Sleeps the progress thread for at most `d` ([`wake::Waker::sleep`]).
    pub(crate) fn sleep(&self, d: std::time::Duration, on_io: bool) {
        self.waker.sleep(&self.sig, d, on_io);
    }

    /// Queues asynchronous events and wakes their waiters.
    pub(crate) fn queue_events(&self, events: impl IntoIterator<Item = AsyncEvent>) {
        self.events.queue_events(events);
    }

    /// Puts GID `index` to use: the backend gets its address, if it does
    /// not have it yet (a UDP backend binds the RoCE port there). Called
    /// before a QP's or an AH's source GID is set, so that a GID nobody
    /// sends from holds no port. Takes the I/O lock (never under the
    /// core lock: the lock order is io, then core).
    pub(crate) fn use_gid(&self, index: u8) -> Result<(), GidError> {
        let Some(&addr) = self.addrs.get(index as usize) else {
            return Err(GidError::NoSuchIndex);
        };
        let mut io = lock(&self.io);
        if io.backend.local_addrs().contains(&addr) {
            return Ok(());
        }
        io.backend
            .add_local_addr(addr)
            .map_err(|e| GidError::Unavailable(addr, e.kind()))
    }
}

/// Why a GID could not be put to use ([`Shared::use_gid`]).
#[derive(Clone, Copy, Debug)]
pub(crate) enum GidError {
    /// The table has no GID at this index.
    NoSuchIndex,
    /// The backend refused the address.
    Unavailable(std::net::IpAddr, std::io::ErrorKind),
}

impl From<GidError> for crate::error::CreateError {
    fn from(e: GidError) -> Self {
        match e {
            GidError::NoSuchIndex => Self::InvalidArgument("sgid_index"),
            GidError::Unavailable(a, k) => Self::AddrUnavailable(a, k),
        }
    }
}

impl From<GidError> for crate::error::ModifyQpError {
    fn from(e: GidError) -> Self {
        match e {
            GidError::NoSuchIndex => Self::InvalidArgument("sgid_index"),
            GidError::Unavailable(a, k) => Self::AddrUnavailable(a, k),
        }
    }
}
