//! Completion queues, completions and completion channels.

use std::any::Any;
use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use roce_core::CqId;

use crate::completion::Completion;
use crate::context::Context;
use crate::error::CreateError;
use crate::error_objects::CqError;
use crate::progress;
use crate::state::{lock, ChannelQueue, CqHandle, Graveyard, Notifier, NotifyReg, Shared};

thread_local! {
    /// [`CompletionQueue::poll_one`]'s list, kept by each polling thread
    /// (taken out while in use, so no borrow spans a call).
    static ONE: Cell<Vec<Completion>> = const { Cell::new(Vec::new()) };
    /// The region references a poll releases, likewise kept: polling a
    /// completion does not allocate.
    static GRAVE: Cell<Graveyard> = const { Cell::new(Vec::new()) };
}

#[derive(Debug)]
pub(crate) struct CqInner {
    pub(crate) id: CqId,
    pub(crate) ctx: Context,
    channel: Option<CompletionChannel>,
    pub(crate) unacked: AtomicU64,
}

impl Drop for CqInner {
    fn drop(&mut self) {
        let shared = self.ctx.shared();
        let mut core = shared.core();
        core.notify.retain(|r| r.cq != self.id);
        // No QP uses it: each holds its CQs.
        let _ = core.dev.destroy_cq(self.id);
    }
}

/// A completion queue (`ibv_cq`). A cheap handle: clones refer to the same
/// CQ, which lives while a handle or a QP using it does.
#[derive(Clone, Debug)]
pub struct CompletionQueue {
    pub(crate) inner: Arc<CqInner>,
}

impl PartialEq for CompletionQueue {
    fn eq(&self, o: &CompletionQueue) -> bool {
        Arc::ptr_eq(&self.inner, &o.inner)
    }
}

impl Eq for CompletionQueue {}

impl Context {
    /// `ibv_create_cq`: a CQ of `cqe` entries, raising its events on
    /// `channel` when armed.
    pub fn create_cq(
        &self,
        cqe: usize,
        channel: Option<&CompletionChannel>,
    ) -> Result<CompletionQueue, CreateError> {
        CompletionQueue::create(self, cqe, channel)
    }

    /// `ibv_create_comp_channel`.
    pub fn create_comp_channel(&self) -> CompletionChannel {
        CompletionChannel::new(self)
    }
}

impl CompletionQueue {
    pub(crate) fn create(
        ctx: &Context,
        cqe: usize,
        channel: Option<&CompletionChannel>,
    ) -> Result<CompletionQueue, CreateError> {
        if cqe == 0 || cqe > 1 << 22 {
            return Err(CreateError::InvalidArgument("cqe must be in 1..=4194304"));
        }
        if let Some(ch) = channel {
            if !ch.ctx.same(ctx) {
                return Err(CreateError::WrongContext);
            }
        }
        let shared = ctx.shared();
        let mut core = shared.core();
        let id = core.dev.create_cq(cqe);
        let inner = Arc::new(CqInner {
            id,
            ctx: ctx.clone(),
            channel: channel.cloned(),
            unacked: AtomicU64::new(0),
        });
        if let Some(ch) = channel {
            let any: Arc<dyn Any + Send + Sync> = inner.clone();
            let handle: CqHandle = Arc::downgrade(&any);
            drop(any);
            core.notify.push(NotifyReg {
                cq: id,
                handle,
                channel: Arc::downgrade(&ch.queue),
            });
        }
        drop(core);
        Ok(CompletionQueue { inner })
    }

    fn shared(&self) -> &Arc<Shared> {
        self.inner.ctx.shared()
    }

    /// The engine's id of this CQ.
    pub fn id(&self) -> CqId {
        self.inner.id
    }

    /// The context.
    pub fn context(&self) -> &Context {
        &self.inner.ctx
    }

    /// The completion channel, if any.
    pub fn channel(&self) -> Option<&CompletionChannel> {
        self.inner.channel.as_ref()
    }

    /// `ibv_poll_cq`: appends up to `max` completions to `out` and returns
    /// how many. When the CQ is empty and inline progress is on, runs one
    /// progress step on this thread first (unless another thread is
    /// driving the I/O), so a polling loop is also the progress loop.
    pub fn poll(&self, out: &mut Vec<Completion>, max: usize) -> Result<usize, CqError> {
        let shared = self.shared();
        shared.sig.cq_polled();
        let mut n = self.poll_engine(out, max)?;
        if n == 0 && max > 0 && shared.cfg.inline_progress {
            shared.sig.polled_empty(shared.recent());
            match progress::inline_step(shared, progress::Driver::Poll) {
                // An idle step changed nothing (a completion another
                // thread made since the CQ was polled shows at the next
                // poll).
                Some(step) if !step.idle => n = self.poll_engine(out, max)?,
                _ => {
                    if shared.cfg.yield_when_idle {
                        std::thread::yield_now();
                    }
                    return Ok(0);
                }
            }
        }
        if n > 0 && shared.cfg.hand_over_on_completion {
            // It polled until this: it may now wait by other means. The
            // progress thread sees that at its next look; it is woken now
            // only while datagrams came when the program was away
            // (`schedule::hand_over_wakes`): a wake-up costs this thread
            // a context switch where CPUs are scarce, and the answer to a
            // request usually came with the completion (roce-core's ACK
            // deferral sends it first).
            shared.sig.handed_over_at_completion(shared.recent());
            if shared.sig.hand_over_view() {
                shared.unpark();
            }
        }
        Ok(n)
    }

    /// Polls one completion. Does not allocate: the one-element list is
    /// the calling thread's, kept from call to call.
    pub fn poll_one(&self) -> Result<Option<Completion>, CqError> {
        let mut v = ONE.take();
        v.clear();
        let r = self.poll(&mut v, 1);
        let c = v.pop();
        ONE.set(v);
        r.map(|_| c)
    }

    /// Polls until `n` completions arrived or `timeout` passed; returns
    /// what arrived. Busy-polls (with inline progress): for tests and
    /// simple programs.
    pub fn poll_until(&self, n: usize, timeout: Duration) -> Result<Vec<Completion>, CqError> {
        let mut out = Vec::with_capacity(n);
        let end = Instant::now() + timeout;
        while out.len() < n {
            let want = n - out.len();
            if self.poll(&mut out, want)? == 0 {
                if Instant::now() >= end {
                    break;
                }
                std::thread::yield_now();
            }
        }
        Ok(out)
    }

    fn poll_engine(&self, out: &mut Vec<Completion>, max: usize) -> Result<usize, CqError> {
        let mut grave = GRAVE.take();
        let r = {
            let mut core = self.shared().core_quiet();
            core.poll(self.inner.id, max, out, &mut grave)
        };
        // Region references released after the lock (the last one
        // deregisters, which takes the lock); the list is kept.
        grave.clear();
        GRAVE.set(grave);
        r
    }

    /// `ibv_req_notify_cq`: the next completion (or, with
    /// `solicited_only`, the next solicited or error completion) raises an
    /// event on the CQ's channel.
    pub fn req_notify(&self, solicited_only: bool) -> Result<(), CqError> {
        let shared = self.shared();
        let mut core = shared.core();
        let cq = core.dev.cq(self.inner.id).ok_or(CqError::NoSuchCq)?;
        cq.req_notify(solicited_only);
        Ok(())
    }

    /// `ibv_resize_cq`: the CQ holds `cqe` completions from now on (the
    /// completions waiting stay). Refused, changing nothing, outside
    /// `1..=4194304` or below the number of completions waiting (as the
    /// kernel's rxe refuses it: `EINVAL`).
    pub fn resize(&self, cqe: usize) -> Result<(), CqError> {
        if cqe == 0 || cqe > 1 << 22 {
            return Err(CqError::SizeOutOfRange);
        }
        let shared = self.shared();
        let mut core = shared.core();
        core.dev.resize_cq(self.inner.id, cqe)?;
        Ok(())
    }

    /// `ibv_ack_cq_events`: acknowledges `n` events got from the channel.
    pub fn ack_events(&self, n: u64) {
        let _ = self
            .inner
            .unacked
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |u| {
                Some(u.saturating_sub(n))
            });
    }

    /// Events got from the channel and not yet acknowledged.
    pub fn unacked_events(&self) -> u64 {
        self.inner.unacked.load(Ordering::Relaxed)
    }
}

/// A completion channel (`ibv_comp_channel`): where armed CQs raise their
/// events, for a thread to block on instead of polling.
#[derive(Clone, Debug)]
pub struct CompletionChannel {
    pub(crate) queue: Arc<ChannelQueue>,
    pub(crate) ctx: Context,
}

impl CompletionChannel {
    pub(crate) fn new(ctx: &Context) -> CompletionChannel {
        CompletionChannel {
            queue: Arc::new(ChannelQueue::new()),
            ctx: ctx.clone(),
        }
    }

    /// Sets the callback run once per event queued on this channel (for a
    /// file descriptor a program can poll: an eventfd it writes to). Only
    /// the first call takes effect; false for a later one.
    pub fn set_notifier(&self, notifier: Notifier) -> bool {
        self.queue.notifier.set(notifier).is_ok()
    }

    /// `ibv_get_cq_event`: blocks until an armed CQ of this channel raises
    /// its event (or `timeout` passes; `None` waits forever) and returns
    /// the CQ. Re-arm it with [`CompletionQueue::req_notify`] and
    /// acknowledge with [`CompletionQueue::ack_events`].
    pub fn get_event(&self, timeout: Option<Duration>) -> Option<CompletionQueue> {
        let shared = self.ctx.shared();
        // Nobody polls while this thread sleeps: let the progress thread
        // take doorbells again.
        shared.sig.handed_over();
        shared.unpark();
        let end = timeout.map(|t| Instant::now() + t);
        let mut q = lock(&self.queue.queue);
        loop {
            while let Some(w) = q.pop_front() {
                let inner = w.upgrade().and_then(|a| a.downcast::<CqInner>().ok());
                if let Some(inner) = inner {
                    inner.unacked.fetch_add(1, Ordering::Relaxed);
                    return Some(CompletionQueue { inner });
                }
            }
            q = match end {
                None => self
                    .queue
                    .cv
                    .wait(q)
                    .unwrap_or_else(std::sync::PoisonError::into_inner),
                Some(end) => {
                    let left = end.checked_duration_since(Instant::now())?;
                    self.queue
                        .cv
                        .wait_timeout(q, left)
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .0
                }
            };
        }
    }
}
