//! The progress engine: moves datagrams between the engine and the backend,
//! runs the engine's timers, and wakes completion channels and async event
//! waiters. See the crate docs for the threading model.

use std::sync::atomic::Ordering;
use std::sync::{Arc, OnceLock, TryLockError, Weak};
use std::time::Duration;

use roce_core::{Nanos, Tx};
use roce_io::{Backend, FabricPort, InPlace};

pub(crate) use crate::config::ProgressConfig;
use crate::schedule::{self, Post, Rest, Stepped, ThreadRules, RUNNING};
use crate::state::owners;
use crate::state::{hand_to_engine, lock, Io, Shared};

/// What one progress step did.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct StepOutcome {
    /// Something was received, sent or timed out.
    pub(crate) work: bool,
    /// The step stopped with packets still to send.
    pub(crate) more: bool,
    /// The earliest engine timer or backend event.
    pub(crate) deadline: Option<Nanos>,
    /// A polling step that received nothing and had nothing to look at:
    /// it left the engine as it was (no completion can have appeared).
    pub(crate) idle: bool,
}

fn min_opt(a: Option<Nanos>, b: Option<Nanos>) -> Option<Nanos> {
    match (a, b) {
        (Some(x), Some(y)) => Some(x.min(y)),
        (x, None) => x,
        (None, y) => y,
    }
}

/// Empty polling rounds that may reuse the last clock reading.
const STALE_POLLS: u32 = 8;

/// Who runs a progress step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Driver {
    /// The progress thread: receives, transmits, and asks the backend for
    /// its next event.
    Thread,
    /// An application thread polling a CQ: receives and transmits.
    Poll,
    /// An application thread that posted or changed something: transmits
    /// only (whatever has arrived is taken by the next poll).
    Post,
}

/// One round: receive (unless a [`Driver::Post`]), run the engine's
/// timers, transmit, raise events. The engine decides what leaves when
/// (ACK deferral is one of its timers, roce-core `qp/responder/ack.rs`):
/// a step only moves datagrams and honours `poll_timeout`. The progress
/// thread's deadline includes the backend's `poll_at` (which may take a
/// lock the peer contends for, so inline steps skip it).
pub(crate) fn step(shared: &Shared, io: &mut Io, driver: Driver) -> StepOutcome {
    let mut clock = Clock::start(shared, &mut io.stale_polls, driver);
    let mut out = StepOutcome::default();
    if driver != Driver::Post {
        let Received {
            got,
            due,
            deadline,
            raised,
        } = receive(shared, io, &mut clock);
        out.work = got;
        if got {
            // Who took them, for the hand-over rules.
            shared
                .sig
                .received(&shared.tuning, driver == Driver::Thread, clock.now);
        }
        raised.wake(shared);
        // A poll that took datagrams after which the engine has nothing
        // to send now (an ACK it defers, a response not yet due) returns
        // at once: the application sees what arrived without waiting for
        // a transmit phase that would find nothing. The engine's deadline
        // says when the next step must look.
        if driver == Driver::Poll && got && !due && io.tx.is_empty() {
            io.deadline = deadline;
            out.deadline = deadline;
            return out;
        }
    }
    let now = clock.now;
    // An empty poll with nothing to send, no timer due and the engine not
    // touched since the last step looked: the transmit phase would only
    // take the engine lock to find nothing. A busy-polling loop is mostly
    // these, and the sooner it gets back to its receive call the sooner it
    // sees the next datagram.
    if driver == Driver::Poll
        && !out.work
        && io.tx.is_empty()
        && io.deadline.is_none_or(|d| now < d)
        && !shared.sig.touched.load(Ordering::Relaxed)
    {
        out.deadline = io.deadline;
        out.idle = true;
        return out;
    }
    let tx = transmit(shared, io, now);
    out.work |= tx.work;
    out.more = tx.more;
    out.deadline = tx.deadline;
    io.deadline = tx.deadline;
    if !tx.drained {
        // Left with work (the rounds ran out, or the socket pushed back):
        // the next polling step must look again, not skip as idle.
        shared.sig.touched.store(true, Ordering::Relaxed);
    }
    if driver == Driver::Thread {
        out.deadline = min_opt(out.deadline, io.backend.poll_at());
    }
    if out.more {
        out.deadline = Some(now);
    }
    tx.raised.wake(shared);
    out
}

/// A step's reading of the clock: a polling step that finds nothing
/// needs no fresh time, so it reuses the last reading for up to
/// [`STALE_POLLS`] rounds (timers then run late by that many rounds) and
/// reads the clock when something arrives.
struct Clock {
    now: Nanos,
    fresh: bool,
}

impl Clock {
    fn start(shared: &Shared, stale_polls: &mut u32, driver: Driver) -> Clock {
        let fresh = driver != Driver::Poll || *stale_polls >= STALE_POLLS;
        if fresh {
            *stale_polls = 0;
            Clock {
                now: shared.now(),
                fresh,
            }
        } else {
            *stale_polls += 1;
            Clock {
                now: shared.recent(),
                fresh,
            }
        }
    }

    /// Something arrived: from here on the step needs the real time.
    fn refresh(&mut self, shared: &Shared, stale_polls: &mut u32) {
        if !self.fresh {
            self.fresh = true;
            *stale_polls = 0;
            self.now = shared.now();
        }
    }
}

/// What a step's receive phase did.
#[derive(Default)]
struct Received {
    /// Datagrams arrived.
    got: bool,
    /// After them, the engine has something to send now (or a timer due).
    due: bool,
    /// The engine's earliest timer after them.
    deadline: Option<Nanos>,
    raised: Raised,
}

/// Hands everything that has arrived to the engine (bounded, to keep
/// sending); then asks whether the engine has anything to send now, and
/// collects what the datagrams raised, under the same lock.
fn receive(shared: &Shared, io: &mut Io, clock: &mut Clock) -> Received {
    let mut r = Received::default();
    for _ in 0..4 {
        // Backend errors are counted by the backend; try again next round.
        let n: usize = io.backend.recv(clock.now, &mut io.rx).unwrap_or_default();
        if n == 0 {
            break;
        }
        r.got = true;
        clock.refresh(shared, &mut io.stale_polls);
        let mut core = shared.core_quiet();
        for i in 0..n {
            let outcome = hand_to_engine(&mut core.dev, clock.now, &io.rx, i, io.rx.meta(i));
            io.owners.note(i, outcome);
        }
        io.owners.take_changes(&mut core);
        if io.owners.pending() {
            // Another process's datagrams go to it (docs/host.md).
            drop(core);
            owners::hand_on(shared, io, clock.now);
            core = shared.core_quiet();
        }
        let last = n < io.rx.capacity();
        if last {
            r.deadline = core.dev.poll_timeout();
            r.due = core.dev.transmit_due(clock.now) || r.deadline.is_some_and(|d| d <= clock.now);
            r.raised.collect(&mut core, shared);
        }
        drop(core);
        if last {
            return r;
        }
    }
    // The rounds ran out with more to take: a full step follows.
    r.due = r.got;
    r
}

/// What a step's transmit phase did.
struct Transmitted {
    work: bool,
    /// Packets are left to send (rounds ran out, or back pressure).
    more: bool,
    /// The engine said it had nothing more to send.
    drained: bool,
    /// The engine's earliest timer after this phase.
    deadline: Option<Nanos>,
    raised: Raised,
}

/// Runs due timers, then drains the engine's packets into the backend in
/// up to `tx_batches_per_step` batches, collecting events as it goes.
fn transmit(shared: &Shared, io: &mut Io, now: Nanos) -> Transmitted {
    let rounds = shared.cfg.tx_batches_per_step.max(1);
    let mut t = Transmitted {
        work: false,
        more: false,
        drained: false,
        deadline: None,
        raised: Raised::default(),
    };
    for round in 0..rounds {
        let mut core = shared.core_quiet();
        if round == 0 {
            // From here on this step sees every change made so far.
            shared.sig.touched.store(false, Ordering::Relaxed);
            shared.sig.posts_waiting.store(0, Ordering::Relaxed);
            if core.dev.poll_timeout().is_some_and(|d| d <= now) {
                core.dev.handle_timeout(now);
                t.work = true;
            }
        }
        let Io { tx, backend, .. } = &mut *io;
        // Built straight into the backend's own buffer (a same-host ring,
        // docs/shm.md) while nothing waits in the batch: no copy from the
        // batch into the ring. `stop`: the engine had no more.
        let mut in_place = 0;
        let mut stop = None;
        while tx.is_empty() && in_place < tx.capacity() {
            let mut end = Tx::Idle;
            let r = backend.transmit_in_place(now, &mut |buf, here| match core
                .dev
                .poll_transmit_icrc_if(now, buf, |t| !here(t))
            {
                (Tx::Datagram(t), icrc) => Some((t, icrc)),
                (e, _) => {
                    end = e;
                    None
                }
            });
            match r {
                InPlace::Taken => in_place += 1,
                InPlace::Nothing => {
                    stop = Some(end);
                    break;
                }
                InPlace::Unavailable => break,
            }
        }
        if let Some(end) = stop {
            t.drained = end == Tx::Idle;
        } else if in_place < tx.capacity() {
            let mut ended = Tx::Idle;
            while !tx.is_full() {
                // The ICRC is computed only where the backend needs it
                // (not for a same-host ring's reader, docs/shm.md).
                let pushed = tx.push_transmit_icrc_with(|buf| {
                    match core
                        .dev
                        .poll_transmit_icrc_if(now, buf, |t| backend.needs_icrc(now, t))
                    {
                        (Tx::Datagram(t), icrc) => Some((t, icrc)),
                        (end, _) => {
                            ended = end;
                            None
                        }
                    }
                });
                if !pushed {
                    // At an end of batch (an answer before the ACK it
                    // released) what the engine still has goes in the
                    // next round's send call; at idle it has nothing
                    // more.
                    t.drained = ended == Tx::Idle;
                    break;
                }
            }
        }
        t.raised.collect(&mut core, shared);
        t.deadline = core.dev.poll_timeout();
        io.owners.take_changes(&mut core);
        drop(core);
        // Claims first: an answer to what goes out may come at once.
        owners::apply(io, &shared.addrs);
        if io.tx.is_empty() && in_place == 0 {
            break;
        }
        t.work = true;
        // Also what was built in place goes now (an empty batch will do).
        let taken = io.backend.send(now, &io.tx).unwrap_or(0);
        io.tx.drain_front(taken);
        if !io.tx.is_empty() {
            // Back pressure: offer the rest next time.
            t.more = true;
            break;
        }
        if t.drained {
            break;
        }
        t.more = round + 1 == rounds;
    }
    t
}

/// Completion channels to wake and events to queue, gathered under the
/// engine lock and delivered after it.
#[derive(Default)]
struct Raised {
    channels: Vec<Arc<crate::state::ChannelQueue>>,
    events: Vec<roce_core::AsyncEvent>,
    cm_queued: bool,
}

impl Raised {
    fn collect(&mut self, core: &mut crate::state::Core, shared: &Shared) {
        collect_events(core, &mut self.channels, &mut self.events);
        self.cm_queued |= collect_cm_events(core, shared);
    }

    fn wake(self, shared: &Shared) {
        for ch in self.channels {
            ch.cv.notify_all();
        }
        if !self.events.is_empty() {
            shared.queue_events(self.events);
        }
        if self.cm_queued {
            shared.events.cm_cv.notify_all();
        }
    }
}

/// Queues the engine's CM events, but those of connections the application
/// let go of; true when it queued any. Under the engine lock, so that an
/// application letting go of a connection (also under it) either finds
/// its events queued, to remove them, or has them filtered here.
pub(crate) fn collect_cm_events(core: &mut crate::state::Core, shared: &Shared) -> bool {
    let crate::state::Core {
        dev, cm_dropped, ..
    } = core;
    let mut queued = false;
    while let Some(e) = dev.poll_cm_event() {
        if let Some(sink) = shared.events.cm_sink.get() {
            sink(e);
            continue;
        }
        if !cm_dropped.contains(&e.id()) {
            let mut q = lock(&shared.events.cm);
            if q.len() >= crate::state::MAX_CM_EVENTS {
                // Nobody takes them: requests the engine has since
                // dropped (timed out) go first; past that, new events
                // are lost rather than queued without bound.
                q.retain(|e| !e.is_request() || dev.cm_state(e.id()).is_some());
            }
            if q.len() < crate::state::MAX_CM_EVENTS {
                q.push_back(e);
                queued = true;
            }
        }
    }
    if !cm_dropped.is_empty() {
        cm_dropped.retain(|id| dev.cm_state(*id).is_some());
    }
    queued
}

fn collect_events(
    core: &mut crate::state::Core,
    channels: &mut Vec<Arc<crate::state::ChannelQueue>>,
    events: &mut Vec<roce_core::AsyncEvent>,
) {
    let crate::state::Core { dev, notify, .. } = core;
    for reg in notify.iter() {
        let fired = dev.cq(reg.cq).is_some_and(|c| c.take_notification());
        if fired {
            if let Some(ch) = reg.channel.upgrade() {
                ch.raise(reg.handle.clone());
                channels.push(ch);
            }
        }
    }
    while let Some(e) = dev.poll_event() {
        events.push(e);
    }
}

/// Runs a step on the calling (application) thread if no other thread is
/// driving the I/O, then makes sure the progress thread will see any new
/// timer. Returns what the step did, `None` when it could not run.
pub(crate) fn inline_step(shared: &Shared, driver: Driver) -> Option<StepOutcome> {
    let out = match shared.io.try_lock() {
        Ok(mut io) => step(shared, &mut io, driver),
        Err(TryLockError::WouldBlock) => return None,
        Err(TryLockError::Poisoned(p)) => step(shared, &mut p.into_inner(), driver),
    };
    // The rules of when a step wakes the progress thread:
    // `schedule::wake_after_step`.
    let wake_at = shared.sig.wake_at.load(Ordering::Acquire);
    let waiter_until = shared.sig.waiter_until.load(Ordering::Acquire);
    if schedule::wake_after_step(
        &shared.tuning,
        driver == Driver::Poll,
        out.more,
        out.deadline,
        wake_at,
        shared.recent(),
    ) || (shared.sig.waiting()
        && schedule::timer_beside_waiter_wakes(out.deadline, waiter_until, wake_at))
    {
        shared.unpark();
    }
    Some(out)
}

/// After a post: transmit now (inline) or have the progress thread do it.
/// The inline step only transmits: whatever has arrived is taken by the
/// next poll (or the progress thread), and the post is not held up by a
/// receive call that usually finds nothing.
pub(crate) fn kick(shared: &Shared) {
    if !(shared.cfg.inline_progress && inline_step(shared, Driver::Post).is_some()) {
        shared.unpark();
    }
}

/// After a post of send work: [`kick`], unless the post is part of a burst
/// ([`ProgressConfig::coalesce_posts`]): then its packets wait for the
/// burst's end. Who sends them: a program that polled a CQ within
/// `max_park` polls again soon (perftest's bandwidth loops post a burst,
/// then poll), and its poll's step sends the burst; should it stop
/// polling, the progress thread finds it gone at its next look (within
/// `poller_park`) and sends them. Otherwise the progress thread is woken,
/// if it would not look within the window anyway. (Waking it for every
/// burst of a polling program cost `ib_send_bw` a context switch per
/// burst on a shared CPU: 0.55 -> 0.75 Mpps, docs/dropin.md.)
pub(crate) fn kick_post(shared: &Shared) {
    if shared.tuning.coalesce == 0 {
        return kick(shared);
    }
    let now = shared.now();
    match schedule::post(&shared.tuning, shared.sig.post_view(now)) {
        Post::Wait { wake } => {
            let waiting = shared.sig.posts_waiting.load(Ordering::Relaxed);
            shared
                .sig
                .posts_waiting
                .store(waiting + 1, Ordering::Relaxed);
            shared.sig.last_post.store(now, Ordering::Relaxed);
            if wake {
                shared.unpark();
            }
        }
        Post::Send => {
            kick(shared);
            // The burst window runs from the end of this post's own send.
            shared.sig.last_post.store(shared.now(), Ordering::Relaxed);
        }
    }
}

/// Sends everything the engine has to send now, whoever else is driving
/// the I/O (it waits for the I/O lock): for the context's last moments,
/// and for tests that need the wire to have seen a change.
pub(crate) fn flush(shared: &Shared) {
    let mut io = lock(&shared.io);
    // A step stops short of what is due only when its rounds run out or
    // the backend pushes back (`more`; an end of batch only ends a
    // round). Steps follow until the engine is idle (without input its
    // output is finite: windows, credits) or the backend pushes back,
    // leaving datagrams queued, which later steps offer again.
    while step(shared, &mut io, Driver::Post).more && io.tx.is_empty() {}
}

/// Leaves the addresses this context shares with other processes
/// (`Backend::leave`, docs/host.md): the kernel hands their datagrams to
/// the others from now on, and what this context's backend had already
/// taken goes through the engine once more, to be handed on. For a
/// context about to close, or a process about to exit.
pub(crate) fn leave(shared: &Shared) {
    let mut io = lock(&shared.io);
    if !io.backend.leave() {
        return;
    }
    // Bounded: a flood that keeps the queue full is not waited out.
    for _ in 0..16 {
        let out = step(shared, &mut io, Driver::Thread);
        if !out.work && !out.more {
            break;
        }
    }
}

/// The progress thread's loop; returns when the context shuts down. What
/// it does between its steps is `schedule::ThreadRules`'.
pub(crate) fn run(shared: Arc<Shared>) {
    let t = shared.tuning;
    let mut rules = ThreadRules::new(&t, shared.now());
    while !shared.shutdown.load(Ordering::Acquire) {
        let now = shared.now();
        let last_inline = shared.sig.last_inline.load(Ordering::Relaxed);
        let polls = shared.sig.polls.load(Ordering::Relaxed);
        let waits = shared.sig.waits();
        if let Some(nap) = rules.watch_beside(&t, now, last_inline, polls, waits) {
            // An application polls, or waits on the descriptor: its steps
            // do the work; this thread only looks again later, unless
            // work was handed to it.
            if !shared.sig.kicked.swap(false, Ordering::SeqCst) {
                shared.sig.wake_at.store(now + nap, Ordering::Release);
                if !shared.shutdown.load(Ordering::Acquire) {
                    shared.sleep(Duration::from_nanos(nap), false);
                }
                shared.sig.wake_at.store(RUNNING, Ordering::Release);
                rules.watched(&t);
                continue;
            }
        }
        rules.stepping(&t);
        let stepped = match shared.io.try_lock() {
            Ok(mut io) => thread_step(&shared, &mut io),
            // An application thread is driving progress right now: it
            // takes what arrives, so nap rather than sleep on the
            // descriptor, which stays readable until it has.
            Err(TryLockError::WouldBlock) => Stepped {
                driven: true,
                ..Stepped::default()
            },
            Err(TryLockError::Poisoned(p)) => thread_step(&shared, &mut p.into_inner()),
        };
        let stepped = Stepped {
            beside_waiter: shared.sig.waiting(),
            woken_at_hand_over: shared.sig.away.load(Ordering::Relaxed) > 0,
            ..stepped
        };
        rules.note_step(
            stepped.deadline,
            shared.sig.waiter_until.load(Ordering::Acquire),
        );
        let now = shared.now();
        let last_inline = shared.sig.last_inline.load(Ordering::Relaxed);
        match rules.rest(&t, now, stepped, last_inline, shared.has_sleeper()) {
            Rest::Again => continue,
            Rest::Yield => {
                std::thread::yield_now();
                continue;
            }
            Rest::Sleep { until, on_io } => {
                // Before sleeping on the descriptor, the backend makes
                // sure it will turn readable (the same-host path asks its
                // peers for a doorbell); something that came meanwhile
                // is taken first.
                if on_io && wait_prepared(&shared, now) {
                    continue;
                }
                shared.sig.wake_at.store(until, Ordering::Release);
                if !shared.shutdown.load(Ordering::Acquire) {
                    shared.sleep(Duration::from_nanos(until.saturating_sub(now)), on_io);
                }
                shared.sig.wake_at.store(RUNNING, Ordering::Release);
                rules.slept(&t);
            }
        }
    }
    // The last handle may have gone inside this thread's own step (a
    // completion channel it was waking held it), with no flush behind
    // it: what the engine still has to send (a destroyed QP's last ACK)
    // leaves now.
    flush(&shared);
}

/// A step of the progress thread, as its rules read it.
fn thread_step(shared: &Shared, io: &mut Io) -> Stepped {
    let out = step(shared, io, Driver::Thread);
    Stepped {
        work: out.work,
        more: out.more,
        deadline: out.deadline,
        ..Stepped::default()
    }
}

/// [`Backend::prepare_wait`](roce_io::Backend::prepare_wait) under the
/// I/O lock; true when there is something to receive already, or another
/// thread holds the I/O (then this one must not sleep on the descriptor).
fn wait_prepared(shared: &Shared, now: Nanos) -> bool {
    match shared.io.try_lock() {
        Ok(mut io) => io.backend.prepare_wait(now),
        Err(TryLockError::WouldBlock) => true,
        Err(TryLockError::Poisoned(p)) => p.into_inner().backend.prepare_wait(now),
    }
}

/// The context a fabric port's waker wakes, filled in once the context
/// exists.
pub(crate) type Doorbell = Arc<OnceLock<Weak<Shared>>>;

/// Wakes a context's progress thread when its fabric port has a datagram
/// queued ([`FabricPort::set_waker`]), so an idle context reacts at once
/// instead of at its next poll; not while an application thread polls
/// (it takes the datagram itself) or the thread is awake.
pub(crate) fn install_doorbell(port: &FabricPort, doorbell: &Doorbell) {
    let doorbell = doorbell.clone();
    port.set_waker(move || {
        let Some(s) = doorbell.get().and_then(Weak::upgrade) else {
            return;
        };
        let (now, last_inline) = (s.now(), s.sig.last_inline.load(Ordering::Relaxed));
        if schedule::doorbell_wakes(
            &s.tuning,
            now,
            last_inline,
            s.sig.wake_at.load(Ordering::Acquire),
        ) {
            s.unpark();
        }
    });
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use roce_core::{DeviceConfig, Psn};

    use super::*;
    use crate::{Access, ConnectOptions, Context, QpInitAttr, QpType, RecvWr, SendWr};

    /// An empty polling step skips its transmit phase, but not after a
    /// post whose own inline step could not run (another thread was in a
    /// step): the next polling step sends what it queued.
    #[test]
    fn an_empty_poll_is_idle_until_the_engine_is_touched() {
        let p = pair(QpType::Rc, 4, 64);
        p.qa.post_recv(RecvWr {
            wr_id: 9,
            sgl: [p.ma.sge(0, 64)].into_iter().collect(),
        })
        .unwrap();
        let shared = p.b.shared().clone();
        let mut io = lock(&shared.io);
        // After one full look (this one, or the progress thread's before
        // this thread took the I/O), polls have nothing to look at...
        step(&shared, &mut io, Driver::Poll);
        let empty = step(&shared, &mut io, Driver::Poll);
        assert!(empty.idle && !empty.work, "{empty:?}");
        // ... until something locks the engine.
        drop(shared.core());
        let touched = step(&shared, &mut io, Driver::Poll);
        assert!(!touched.idle, "{touched:?}");
        assert!(step(&shared, &mut io, Driver::Poll).idle);
        // This thread holds B's I/O: the post's own step cannot run.
        p.qb.post_send(SendWr::send(1, [p.mb.sge(0, 16)])).unwrap();
        let sent = step(&shared, &mut io, Driver::Poll);
        assert!(!sent.idle && sent.work, "{sent:?}");
        assert!(io.tx.is_empty());
        let after = step(&shared, &mut io, Driver::Poll);
        assert!(after.idle, "{after:?}");
        drop(io);
        let got = p.cq_a.poll_until(1, Duration::from_secs(5)).unwrap();
        assert_eq!(got.len(), 1, "A received nothing");
        assert_eq!((got[0].wr_id(), got[0].byte_len()), (9, 16), "{:?}", got[0]);
    }

    /// Panics with `what` once `limit` has passed since it was made.
    struct Deadline(std::time::Instant);

    impl Deadline {
        fn after(limit: Duration) -> Deadline {
            Deadline(std::time::Instant::now() + limit)
        }

        fn check(&self, what: &str) {
            assert!(std::time::Instant::now() < self.0, "{what}");
        }
    }

    /// Two contexts on a fresh fabric with a QP of `qp_type` each,
    /// connected; B's progress thread naps long (the test drives B's
    /// steps) and B runs `rounds` transmit rounds per step.
    struct Pair {
        _a: Context,
        b: Context,
        qa: crate::QueuePair,
        qb: crate::QueuePair,
        cq_a: crate::CompletionQueue,
        ma: crate::MemoryRegion,
        mb: crate::MemoryRegion,
    }

    fn pair(qp_type: QpType, rounds: usize, len: usize) -> Pair {
        let fabric = roce_io::Fabric::new();
        let a = Context::open_fabric(&fabric, "10.0.0.1".parse().unwrap()).unwrap();
        let cfg = ProgressConfig {
            max_park: Duration::from_secs(2),
            poller_park: Duration::from_secs(2),
            tx_batches_per_step: rounds,
            ..ProgressConfig::default()
        };
        let b_addr = "10.0.0.2".parse().unwrap();
        let b = Context::open_with(
            fabric.endpoint(b_addr).unwrap(),
            DeviceConfig::new(b_addr),
            cfg,
        )
        .unwrap();
        let access = Access(Access::LOCAL_WRITE.0 | Access::REMOTE_WRITE.0);
        let side = |ctx: &Context| {
            let pd = ctx.alloc_pd();
            let cq = ctx.create_cq(64, None).unwrap();
            let qp = pd.create_qp(&QpInitAttr::new(qp_type, &cq, &cq)).unwrap();
            let mr = pd.reg_mr(vec![3u8; len], access).unwrap();
            (cq, qp, mr)
        };
        let ((cq_a, qa, ma), (_cq_b, qb, mb)) = (side(&a), side(&b));
        let (ea, eb) = (qa.endpoint(Psn::new(10)), qb.endpoint(Psn::new(20)));
        qa.connect(ea.psn, &eb, &ConnectOptions::default()).unwrap();
        qb.connect(eb.psn, &ea, &ConnectOptions::default()).unwrap();
        Pair {
            _a: a,
            b,
            qa,
            qb,
            cq_a,
            ma,
            mb,
        }
    }

    /// A step that runs out of transmit rounds with packets still to go
    /// leaves the next polling step a full one: a UC WRITE (no ACKs come
    /// back to wake anything) longer than one step's rounds keeps going.
    #[test]
    fn a_poll_after_a_step_that_ran_out_of_rounds_keeps_sending() {
        // 8 MiB at the default MTU: more packets than 4 rounds of 64.
        let p = pair(QpType::Uc, 4, 8 << 20);
        let want: Vec<u8> = (0..8u32 << 20).map(|i| (i % 251) as u8).collect();
        p.mb.write(0, &want).unwrap();
        let shared = p.b.shared().clone();
        let mut io = lock(&shared.io);
        step(&shared, &mut io, Driver::Poll);
        let r = p.ma.remote();
        let wr = SendWr::write(1, [p.mb.sge_all()], r.at(0));
        // This thread holds B's I/O: the post leaves the sending to steps.
        p.qb.post_send(wr).unwrap();
        let first = step(&shared, &mut io, Driver::Post);
        assert!(first.more && first.work, "{first:?}");
        let next = step(&shared, &mut io, Driver::Poll);
        assert!(!next.idle && next.work, "{next:?}");
        drop(io);
        // The whole message arrives (B's own polls drive the rest).
        let deadline = Deadline::after(Duration::from_secs(10));
        while p.ma.to_vec().unwrap() != want {
            let _ = p.qb.send_cq().poll_one();
            deadline.check("the WRITE stalled");
        }
    }
}
