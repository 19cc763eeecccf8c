//! [`Context`]: one open device, its engine and its progress thread.

use std::net::IpAddr;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use roce_core::{AsyncEvent, Device, DeviceConfig, DeviceCounters};
use roce_io::{Backend, Fabric, FabricPort};

use crate::config::ProgressConfig;
use crate::error::Error;
use crate::progress::{self, Doorbell};
use crate::state::{lock, EventSink, Notifier, Shared};

#[derive(Debug)]
struct ContextInner {
    shared: Arc<Shared>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl Drop for ContextInner {
    fn drop(&mut self) {
        let mut thread = lock(&self.thread);
        if thread
            .as_ref()
            .is_some_and(|t| t.thread().id() == std::thread::current().id())
        {
            // The last handle went away inside the progress thread's own
            // step (a notifier or sink it ran held it). That
            // thread holds the I/O lock, so it can neither flush nor join
            // itself: it stops at its next look at `shutdown`, detached,
            // and what it owns (the shared state) goes with it.
            self.shared.shutdown.store(true, Ordering::Release);
            drop(thread.take());
            return;
        }
        drop(thread);
        // Other processes' datagrams queued here are handed on, and no
        // more come (docs/host.md).
        crate::progress::leave(&self.shared);
        // What the engine still has to send (a destroyed QP's last ACK).
        crate::progress::flush(&self.shared);
        self.shared.shutdown.store(true, Ordering::Release);
        self.shared.unpark();
        if let Some(t) = lock(&self.thread).take() {
            let _ = t.join();
        }
    }
}

/// An open RDMA device (`ibv_context`): the engine of one RoCE v2 device
/// over one backend, and the progress thread that drives it.
///
/// A cheap handle: clones refer to the same context. Every object made
/// from it holds it, and the progress thread stops (and is joined) when the
/// last handle or object is dropped.
#[derive(Clone, Debug)]
pub struct Context {
    inner: Arc<ContextInner>,
}

impl Context {
    /// Opens a device with `config` over `backend`, with the default
    /// [`ProgressConfig`].
    pub fn open(
        backend: impl Backend + Send + 'static,
        config: DeviceConfig,
    ) -> Result<Context, Error> {
        Context::open_with(backend, config, ProgressConfig::default())
    }

    /// Opens a device with an explicit progress configuration.
    pub fn open_with(
        backend: impl Backend + Send + 'static,
        config: DeviceConfig,
        progress: ProgressConfig,
    ) -> Result<Context, Error> {
        Context::start(Box::new(backend), config, progress, None)
    }

    /// Opens a device owning `addr` on an in-memory fabric.
    pub fn open_fabric(fabric: &Fabric, addr: IpAddr) -> Result<Context, Error> {
        Context::open_fabric_with(fabric, DeviceConfig::new(addr), |ep| ep)
    }

    /// Opens a device on an in-memory fabric, owning every address of
    /// `config`, with `wrap` stacking middleware (fault injection, capture)
    /// over the endpoint.
    pub fn open_fabric_with<B, F>(
        fabric: &Fabric,
        config: DeviceConfig,
        wrap: F,
    ) -> Result<Context, Error>
    where
        B: Backend + Send + 'static,
        F: FnOnce(FabricPort) -> B,
    {
        Context::open_fabric_tuned(fabric, config, ProgressConfig::default(), wrap)
    }

    /// [`Context::open_fabric_with`] with a progress configuration.
    pub(crate) fn open_fabric_tuned<B, F>(
        fabric: &Fabric,
        config: DeviceConfig,
        progress: ProgressConfig,
        wrap: F,
    ) -> Result<Context, Error>
    where
        B: Backend + Send + 'static,
        F: FnOnce(FabricPort) -> B,
    {
        let mut addrs = config.addrs.iter();
        let first = addrs
            .next()
            .ok_or(Error::InvalidArgument("no local address"))?;
        let mut port: FabricPort = fabric.endpoint(*first)?;
        for a in addrs {
            port.add_addr(*a)?;
        }
        // The port wakes this context's progress thread when a datagram is
        // queued for it (the context is made after the wrapping).
        let doorbell = Doorbell::default();
        progress::install_doorbell(&port, &doorbell);
        let backend = wrap(port);
        Context::start(Box::new(backend), config, progress, Some(doorbell))
    }

    pub(crate) fn start(
        backend: Box<dyn Backend + Send>,
        mut config: DeviceConfig,
        progress: ProgressConfig,
        doorbell: Option<Doorbell>,
    ) -> Result<Context, Error> {
        // QPNs, keys, PSNs, CM IDs and region addresses must not be
        // guessable: the engine's CSPRNG is seeded from the OS unless the
        // caller chose a seed (reproducible tests).
        if config.seed.is_none() {
            config.seed = Some(crate::random::os_seed()?);
        }
        if config.addrs.is_empty() {
            return Err(Error::InvalidArgument("no local address"));
        }
        if progress.batch == 0 {
            return Err(Error::InvalidArgument("progress batch of 0"));
        }
        let shared = Arc::new(Shared::new(Device::new(config), backend, progress));
        if let Some(d) = doorbell {
            let _ = d.set(Arc::downgrade(&shared));
        }
        let s = shared.clone();
        let handle = std::thread::Builder::new()
            .name("roce-progress".into())
            .spawn(move || {
                let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    progress::run(s.clone())
                }));
                if r.is_err() {
                    // Nothing drives the device any more: say so, as a
                    // device would (the panic itself went to stderr).
                    s.queue_events([AsyncEvent::DeviceFatal]);
                }
            })
            .map_err(|_| Error::ThreadSpawn)?;
        let _ = shared.waker.thread.set(handle.thread().clone());
        Ok(Context {
            inner: Arc::new(ContextInner {
                shared,
                thread: Mutex::new(Some(handle)),
            }),
        })
    }

    pub(crate) fn shared(&self) -> &Arc<Shared> {
        &self.inner.shared
    }

    pub(crate) fn same(&self, o: &Context) -> bool {
        Arc::ptr_eq(&self.inner, &o.inner)
    }

    /// Local addresses (the GID table; index = GID index).
    pub fn addrs(&self) -> &[IpAddr] {
        &self.inner.shared.addrs
    }

    /// Sets the callback run once per asynchronous event queued (see
    /// [`Notifier`]). Only the first call takes effect; false for a later one.
    pub fn set_event_notifier(&self, notifier: Notifier) -> bool {
        self.shared().events.notifier.set(notifier).is_ok()
    }

    /// Sends every later asynchronous event to `sink` instead of the
    /// queue [`get_async_event`](Self::get_async_event) reads (for a layer
    /// that hands each event to the owner of the object it names: the
    /// drop-in libibverbs, whose contexts of one device share an engine).
    /// Only the first call takes effect; false for a later one.
    pub fn set_event_sink(&self, sink: EventSink) -> bool {
        self.shared().events.sink.set(sink).is_ok()
    }

    /// `ibv_get_async_event`: the next asynchronous event (QP fatal, CQ
    /// overflow, SRQ limit), waiting up to `timeout` (`None`: forever).
    pub fn get_async_event(&self, timeout: Option<Duration>) -> Option<AsyncEvent> {
        let shared = self.shared();
        let end = timeout.map(|t| Instant::now() + t);
        let mut q = lock(&shared.events.queue);
        loop {
            if let Some(e) = q.pop_front() {
                return Some(e);
            }
            q = match end {
                None => shared
                    .events
                    .cv
                    .wait(q)
                    .unwrap_or_else(std::sync::PoisonError::into_inner),
                Some(end) => {
                    let left = end.checked_duration_since(Instant::now())?;
                    shared
                        .events
                        .cv
                        .wait_timeout(q, left)
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .0
                }
            };
        }
    }

    /// Sends now what the engine has queued (the last ACK of a QP just
    /// destroyed, say), without waiting for the progress thread: for a
    /// program about to exit, which may end the process before that
    /// thread runs again.
    pub fn flush(&self) {
        crate::progress::flush(self.shared());
    }

    /// For a process about to exit with this context open: stops taking
    /// datagrams for the other processes that share its address, and
    /// hands on those it already took (docs/host.md), so that none is
    /// lost in a process that stops reading. The context keeps working:
    /// its own datagrams reach it through the others. Closing the
    /// context does the same.
    pub fn leave_shared_address(&self) {
        crate::progress::leave(self.shared());
    }

    /// Device counters of the engine.
    pub fn counters(&self) -> DeviceCounters {
        *self.shared().core_quiet().dev.counters()
    }

    /// Counters of the connection manager (REQs dropped by a full
    /// backlog, pending requests timed out, ...).
    pub fn cm_counters(&self) -> roce_core::CmCounters {
        self.shared().core_quiet().dev.cm_counters()
    }

    /// Counters of the backend (and its middleware).
    pub fn backend_counters(&self) -> Vec<(&'static str, u64)> {
        lock(&self.shared().io).backend.counters()
    }
}
