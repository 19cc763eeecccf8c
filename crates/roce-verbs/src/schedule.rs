//! The progress engine's scheduling rules as plain decisions: whose step
//! sends a post's packets, when a step wakes the progress thread, and
//! what the progress thread does between its steps (look whether an
//! application still polls, step, yield, or sleep, and how long). Each
//! rule takes the moment and the signals it reads as plain values and
//! returns what to do, so it is tested here with a fake clock; the
//! callers (`progress.rs`, `cq.rs`) read the signals ([`Signals`]),
//! run the steps and sleep.
//!
//! The rules and the measurements behind each are in the docs of
//! [`ProgressConfig`]'s fields and in docs/architecture.md ("Threads and locks of the progress engine").

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};

use roce_core::Nanos;

use crate::config::ProgressConfig;

/// `wake_at` while the progress thread is awake.
pub(crate) const RUNNING: u64 = u64::MAX;

/// Longest the progress thread sleeps on the backend's descriptor when
/// nothing is scheduled (an arriving datagram, a kick or a timer ends it
/// sooner).
pub(crate) const IDLE_ON_IO: Nanos = 100_000_000;

/// How many receives in a row while the application polls or posts end
/// the waking of the progress thread at its hand-overs, after a datagram
/// waited for the thread while the application was away
/// ([`Signals::received`]).
pub(crate) const AWAY_RECEIVES: u32 = 8;

/// What the scheduling rules read, written by application threads and
/// the progress thread without a lock (relaxed, but for the sleep
/// handshake): each is a hint whose exact count does not matter, only
/// its changing.
#[derive(Debug)]
pub(crate) struct Signals {
    /// When the parked progress thread wakes up by itself ([`RUNNING`]
    /// while it is awake).
    pub(crate) wake_at: AtomicU64,
    /// Last time an application thread polled an empty CQ and drove
    /// progress (0: it handed over, [`Signals::handed_over`]).
    pub(crate) last_inline: AtomicU64,
    /// Polls of empty CQs that drove progress.
    pub(crate) polls: AtomicU64,
    /// The progress thread is (about to be) asleep on the backend's
    /// descriptor.
    pub(crate) in_sleep: AtomicBool,
    /// Work was handed to the progress thread since it last looked.
    pub(crate) kicked: AtomicBool,
    /// The engine was locked for something that may give it a datagram
    /// to send or a timer to run since a step last looked for what to
    /// send: a polling step that receives nothing skips its transmit
    /// phase only while this is clear.
    pub(crate) touched: AtomicBool,
    /// When the last post of send work ended.
    pub(crate) last_post: AtomicU64,
    /// Calls to poll a CQ, and their count at the last post of send
    /// work: a post with a poll since the previous one does not belong
    /// to a burst.
    pub(crate) cq_polls: AtomicU64,
    pub(crate) cq_polls_at_post: AtomicU64,
    /// Posts whose packets wait for the end of their burst.
    pub(crate) posts_waiting: AtomicUsize,
    /// Application threads blocked for a completion event on the
    /// backend's descriptor ([`CompletionChannel::wait_io`](crate::CompletionChannel::wait_io)):
    /// while there is one, it takes what arrives ([`Waiter`]).
    pub(crate) waiters: AtomicUsize,
    /// Waits begun: unchanged between two looks of the progress thread
    /// while a thread waits, the same wait went on all along (idle).
    pub(crate) waits: AtomicU64,
    /// When a thread blocked on the descriptor wakes by itself for its
    /// engine timer ([`RUNNING`]: never, or it is awake): a timer another
    /// thread's step leaves before that is not the waiter's to run.
    pub(crate) waiter_until: AtomicU64,
    /// Waits of `wait_io` ended by an event the waiting thread's own
    /// step raised, and by one another thread raised.
    pub(crate) events_own_step: AtomicU64,
    pub(crate) events_woken: AtomicU64,
    /// Receives to come while the application polls before a hand-over
    /// stops waking the progress thread ([`Signals::received`]).
    pub(crate) away: AtomicU32,
    /// When the application last handed over after a poll that returned
    /// completions (0: its last hand-over was of another kind, or none).
    pub(crate) handed_at: AtomicU64,
    /// Calls of application threads into the engine (polls of a CQ and
    /// every lock of the engine that may change it: posts, but also
    /// creating objects or arming a CQ), and their count at the last
    /// hand-over after a poll. A hint: two threads calling at once may
    /// count one call.
    pub(crate) calls: AtomicU64,
    pub(crate) calls_at_hand_over: AtomicU64,
}

impl Default for Signals {
    fn default() -> Signals {
        Signals {
            wake_at: AtomicU64::new(RUNNING),
            last_inline: AtomicU64::new(0),
            polls: AtomicU64::new(0),
            in_sleep: AtomicBool::new(false),
            kicked: AtomicBool::new(false),
            touched: AtomicBool::new(true),
            last_post: AtomicU64::new(0),
            cq_polls: AtomicU64::new(0),
            cq_polls_at_post: AtomicU64::new(0),
            posts_waiting: AtomicUsize::new(0),
            waiters: AtomicUsize::new(0),
            waits: AtomicU64::new(0),
            waiter_until: AtomicU64::new(RUNNING),
            events_own_step: AtomicU64::new(0),
            events_woken: AtomicU64::new(0),
            away: AtomicU32::new(0),
            handed_at: AtomicU64::new(0),
            calls: AtomicU64::new(0),
            calls_at_hand_over: AtomicU64::new(0),
        }
    }
}

/// Adds one to a hint counter (not a locked increment: only its changing
/// matters).
fn bump(c: &AtomicU64) -> u64 {
    let v = c.load(Ordering::Relaxed).wrapping_add(1);
    c.store(v, Ordering::Relaxed);
    v
}

impl Signals {
    /// Whether an application thread waits on the backend's descriptor.
    pub(crate) fn waiting(&self) -> bool {
        self.waiters.load(Ordering::SeqCst) > 0
    }

    /// The count of waits begun while a thread waits on the backend's
    /// descriptor, `None` while none does.
    pub(crate) fn waits(&self) -> Option<u64> {
        self.waiting().then(|| self.waits.load(Ordering::Relaxed))
    }

    /// A wait for a completion event ended: by the waiting thread's own
    /// step (`own`) or by another thread's.
    pub(crate) fn wait_ended(&self, own: bool) {
        if own {
            self.events_own_step.fetch_add(1, Ordering::Relaxed);
        } else {
            self.events_woken.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// An application thread polls a CQ.
    pub(crate) fn cq_polled(&self) {
        bump(&self.cq_polls);
        self.called();
    }

    /// The CQ was empty: the thread drives a step itself at `now`.
    pub(crate) fn polled_empty(&self, now: Nanos) {
        self.last_inline.store(now, Ordering::Relaxed);
        bump(&self.polls);
    }

    /// The application waits by other means now (a thread about to
    /// block on a channel): the progress thread takes over at its next
    /// look.
    pub(crate) fn handed_over(&self) {
        self.handed_at.store(0, Ordering::Relaxed);
        self.last_inline.store(0, Ordering::Release);
    }

    /// A poll at `now` returned completions and the application may wait
    /// by other means now ([`ProgressConfig::hand_over_on_completion`]):
    /// [`handed_over`](Self::handed_over), noting when and the calls so
    /// far ([`received`](Self::received) reads them after `last_inline`).
    pub(crate) fn handed_over_at_completion(&self, now: Nanos) {
        self.calls_at_hand_over
            .store(self.calls.load(Ordering::Relaxed), Ordering::Relaxed);
        self.handed_at.store(now, Ordering::Relaxed);
        self.last_inline.store(0, Ordering::Release);
    }

    /// An application thread called into the engine (a post, a poll).
    pub(crate) fn called(&self) {
        bump(&self.calls);
    }

    /// A step received datagrams at `now`: the progress thread's
    /// (`by_thread`) or an application thread's. Datagrams that come
    /// while the application is away (it spins on memory a peer's WRITE
    /// fills, after its poll returned the ACK's completion: `ib_write_lat`
    /// against a peer that ACKs at once) wait for the progress thread,
    /// napping beside a program that polled ([`away_receive`]). From the
    /// first that waited, a hand-over after a poll wakes the thread
    /// ([`hand_over_wakes`]), until [`AWAY_RECEIVES`] receives in a row
    /// come while the application polls or posts (it takes them itself:
    /// no wake-up needed, and each would cost it a context switch where
    /// CPUs are scarce). Only hand-overs after a poll count
    /// ([`handed_over_at_completion`](Self::handed_over_at_completion)):
    /// there are none unless `hand_over_on_completion` is on.
    pub(crate) fn received(&self, t: &Tuning, by_thread: bool, now: Nanos) {
        let left = self.away.load(Ordering::Relaxed);
        // A thread blocked for a completion event is not away: it takes
        // what arrives itself (`Waiter`).
        let handed = by_thread && self.last_inline.load(Ordering::Acquire) == 0 && !self.waiting();
        let handed_at = self.handed_at.load(Ordering::Relaxed);
        let called =
            self.calls_at_hand_over.load(Ordering::Relaxed) != self.calls.load(Ordering::Relaxed);
        let next = if !handed || handed_at == 0 || called {
            left.saturating_sub(1)
        } else if away_receive(t, left, handed_at, now) {
            AWAY_RECEIVES
        } else {
            left
        };
        if next != left {
            self.away.store(next, Ordering::Relaxed);
        }
    }

    /// The application handed over ([`handed_over`](Self::handed_over)):
    /// whether to wake the progress thread now ([`hand_over_wakes`]).
    pub(crate) fn hand_over_view(&self) -> bool {
        hand_over_wakes(
            self.away.load(Ordering::Relaxed),
            self.in_sleep.load(Ordering::SeqCst),
        )
    }

    /// A post of send work at `now` is sent by [`post`]'s decision;
    /// returns the view of it.
    pub(crate) fn post_view(&self, now: Nanos) -> PostView {
        let polls = self.cq_polls.load(Ordering::Relaxed);
        let polled = polls != self.cq_polls_at_post.load(Ordering::Relaxed);
        self.cq_polls_at_post.store(polls, Ordering::Relaxed);
        PostView {
            now,
            last_post: self.last_post.load(Ordering::Relaxed),
            waiting: self.posts_waiting.load(Ordering::Relaxed),
            polled,
            last_inline: self.last_inline.load(Ordering::Relaxed),
            wake_at: self.wake_at.load(Ordering::Acquire),
        }
    }
}

/// The tuning the rules use, in nanoseconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Tuning {
    pub(crate) spin: Nanos,
    /// At least 1 µs.
    pub(crate) max_park: Nanos,
    /// The progress thread's first nap after work.
    pub(crate) min_park: Nanos,
    /// At least 1 µs.
    pub(crate) poller_park: Nanos,
    /// The burst window of [`ProgressConfig::coalesce_posts`] (0: off).
    pub(crate) coalesce: Nanos,
    /// Posts a burst holds back at most.
    pub(crate) burst_max: usize,
}

impl Tuning {
    pub(crate) fn new(cfg: &ProgressConfig) -> Tuning {
        let max_park = (cfg.max_park.as_nanos() as Nanos).max(1_000);
        Tuning {
            spin: cfg.spin.as_nanos() as Nanos,
            max_park,
            min_park: 10_000.min(max_park),
            poller_park: (cfg.poller_park.as_nanos() as Nanos).max(1_000),
            coalesce: if cfg.inline_progress {
                cfg.coalesce_posts.as_nanos() as Nanos
            } else {
                0
            },
            burst_max: cfg.batch / 2,
        }
    }

    /// The first look at a polling application: every look comes after
    /// this long when `poller_park` is below `max_park`.
    fn first_look(&self) -> Nanos {
        self.max_park.min(self.poller_park)
    }
}

/// What a post of send work sees.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct PostView {
    pub(crate) now: Nanos,
    /// When the previous post ended.
    pub(crate) last_post: Nanos,
    /// Posts already waiting for the end of their burst.
    pub(crate) waiting: usize,
    /// The application polled a CQ since the previous post.
    pub(crate) polled: bool,
    pub(crate) last_inline: Nanos,
    pub(crate) wake_at: Nanos,
}

/// Who sends a post's packets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Post {
    /// This post: a step now (or the progress thread, if none can run).
    Send,
    /// The end of its burst: the application's next poll, a post that
    /// finds the burst full, or the progress thread within the window;
    /// `wake`: wake the progress thread now (no application polls, and
    /// it would not look within the window).
    Wait { wake: bool },
}

/// [`ProgressConfig::coalesce_posts`]: a post that follows the previous
/// one within the window, with no poll between them (a latency loop polls
/// after each post), joins its burst until the burst holds `burst_max`.
pub(crate) fn post(t: &Tuning, v: PostView) -> Post {
    let in_burst = t.coalesce > 0
        && v.now.saturating_sub(v.last_post) < t.coalesce
        && !v.polled
        && v.waiting < t.burst_max;
    if !in_burst {
        return Post::Send;
    }
    let polling = v.now.saturating_sub(v.last_inline) < t.max_park;
    Post::Wait {
        wake: !polling && v.wake_at > v.now.saturating_add(t.coalesce),
    }
}

/// Whether an application thread's step ends by waking the progress
/// thread: it left packets to send (`more`), or the engine's next timer
/// (`deadline`) comes before the thread would look by itself (`wake_at`)
/// and within `max_park` of `now`. A timer due within `max_park` of a
/// poll is the polling thread's: it comes back long before (a ping-pong's
/// deferred ACK would otherwise wake the progress thread every round trip,
/// a context switch the poller pays for on a busy CPU).
pub(crate) fn wake_after_step(
    t: &Tuning,
    poll: bool,
    more: bool,
    deadline: Option<Nanos>,
    wake_at: Nanos,
    now: Nanos,
) -> bool {
    let horizon = now.saturating_add(t.max_park);
    let polled_soon = poll && deadline.is_some_and(|d| d <= horizon);
    let early = deadline.is_some_and(|d| d < wake_at && d < horizon);
    more || (!polled_soon && early)
}

/// Whether the progress thread's receive at `now`, for an application
/// that handed over at `handed_at` after a poll and has not called into
/// the engine since (no post, no poll: [`Signals::received`] looks), shows
/// datagrams waiting for it while the application was away: once woken
/// for that (`away` left), every such receive; before, one at least
/// `spin` after the hand-over. A program that posts and polls on after
/// its completion, as a bandwidth loop does, is not away, whoever
/// receives its ACKs.
pub(crate) fn away_receive(t: &Tuning, away: u32, handed_at: Nanos, now: Nanos) -> bool {
    away > 0 || now.saturating_sub(handed_at) >= t.spin
}

/// Whether an application's hand-over after a poll wakes the progress
/// thread: while datagrams came when the application was away (`away`,
/// from [`Signals::received`]), unless it sleeps on the descriptor (it
/// wakes for the next datagram anyway). Also while it is awake: it may
/// have read the application's last poll and be about to nap (waking a
/// running thread only leaves it a token, and its next nap is skipped).
pub(crate) fn hand_over_wakes(away: u32, in_sleep: bool) -> bool {
    away > 0 && !in_sleep
}

/// Whether a datagram queued on a fabric port wakes the progress thread:
/// not while an application polls (within `spin`: it takes the datagram
/// itself) nor while the thread is awake.
pub(crate) fn doorbell_wakes(t: &Tuning, now: Nanos, last_inline: Nanos, wake_at: Nanos) -> bool {
    let polling = now.saturating_sub(last_inline) < t.spin;
    !polling && wake_at != RUNNING
}

/// The progress thread's own state between its steps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ThreadRules {
    /// Its next nap when nothing drives the I/O (doubles up to
    /// `max_park`).
    park: Nanos,
    /// Its next look at a polling application (doubles up to
    /// `poller_park`).
    watch: Nanos,
    polls_seen: u64,
    last_work: Nanos,
    /// Its next look beside a waiting thread, and the count of waits at
    /// the last look ([`watch_beside`](Self::watch_beside)).
    beside: Nanos,
    waits_seen: u64,
    /// The engine timer its last step saw that no waiting thread would
    /// run ([`note_step`](Self::note_step)).
    due: Option<Nanos>,
}

/// What the progress thread does after a step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Rest {
    /// Step again now.
    Again,
    /// Yield the CPU, then step again.
    Yield,
    /// Sleep until `until`, on the backend's descriptor when `on_io`
    /// (after [`Backend::prepare_wait`](roce_io::Backend::prepare_wait):
    /// when something came meanwhile, step again instead), else parked.
    Sleep { until: Nanos, on_io: bool },
}

/// What a thread step did, as [`ThreadRules::rest`] reads it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Stepped {
    pub(crate) work: bool,
    pub(crate) more: bool,
    pub(crate) deadline: Option<Nanos>,
    /// An application thread held the I/O: no step ran.
    pub(crate) driven: bool,
    /// An application thread waits on the backend's descriptor
    /// ([`Signals::waiters`]): it takes what arrives.
    pub(crate) beside_waiter: bool,
    /// The application's hand-overs wake this thread
    /// ([`Signals::received`]): with a descriptor to sleep on, it sleeps
    /// there at once rather than spin for what comes next.
    pub(crate) woken_at_hand_over: bool,
}

impl ThreadRules {
    pub(crate) fn new(t: &Tuning, now: Nanos) -> ThreadRules {
        ThreadRules {
            park: t.min_park,
            watch: t.first_look(),
            polls_seen: 0,
            last_work: now,
            beside: 0,
            waits_seen: 0,
            due: None,
        }
    }

    /// At the top of the loop: while an application thread polls over and
    /// over (twice or more since the last look, the last within
    /// `max_park`), its steps receive, transmit and run the timers, and
    /// this thread only looks now and then whether the polling goes on:
    /// `Some(nap)` until the next look (unless work was handed over: a
    /// kick, which the caller checks). One that checks its CQ now and
    /// then (a passive side between waits) must not stall the receiving
    /// this thread does: `None`, step.
    pub(crate) fn watch(
        &mut self,
        t: &Tuning,
        now: Nanos,
        last_inline: Nanos,
        polls: u64,
    ) -> Option<Nanos> {
        let polling = now.saturating_sub(last_inline) < t.max_park
            && polls.wrapping_sub(self.polls_seen) >= 2;
        self.polls_seen = polls;
        polling.then_some(self.watch)
    }

    /// [`watch`](Self::watch), and beside an application thread blocked
    /// for a completion event on the backend's descriptor (`waits`: the
    /// count of waits begun, `None` while no thread waits): that thread
    /// takes what arrives and runs the timers due while it waits
    /// ([`Waiter`]), so this one neither steps nor sleeps on the
    /// descriptor (both would wake for the same datagram): it looks
    /// again after the nap, unless work was handed to it (a kick: a
    /// post's timer earlier than the nap's end, or a post that could not
    /// send its packets itself). While waits end and begin (a ping-pong)
    /// it looks as at a poller; while one wait goes on from look to look
    /// (an idle program) the nap doubles up to [`IDLE_ON_IO`], and the
    /// wait's end wakes it ([`waiter_left_wakes`]).
    pub(crate) fn watch_beside(
        &mut self,
        t: &Tuning,
        now: Nanos,
        last_inline: Nanos,
        polls: u64,
        waits: Option<u64>,
    ) -> Option<Nanos> {
        let polling = self.watch(t, now, last_inline, polls);
        let Some(waits) = waits else {
            self.beside = 0;
            return polling;
        };
        let idle = self.beside > 0 && waits == self.waits_seen;
        self.waits_seen = waits;
        self.beside = if idle {
            (self.beside * 2).min(IDLE_ON_IO.max(t.poller_park))
        } else {
            self.watch
        };
        // A timer the waiter does not know of (another thread's post left
        // it while the waiter slept) is this thread's: step when it is due.
        match self.due {
            Some(d) if d <= now => None,
            Some(d) => Some(self.beside.min(d - now)),
            None => Some(self.beside),
        }
    }

    /// After this thread's step, which left the engine's next timer at
    /// `deadline`: a timer before `waiter_until` (when a waiting thread
    /// wakes by itself) is this thread's to run, beside the waiter too.
    pub(crate) fn note_step(&mut self, deadline: Option<Nanos>, waiter_until: Nanos) {
        self.due = deadline.filter(|&d| d < waiter_until);
    }

    /// The look of [`watch`](Self::watch) slept: the next comes twice as
    /// late, up to `poller_park` (waking costs the polling thread a
    /// context switch on a busy CPU).
    pub(crate) fn watched(&mut self, t: &Tuning) {
        self.watch = (self.watch * 2).min(t.poller_park);
    }

    /// The thread steps: the next look at a poller starts short again.
    pub(crate) fn stepping(&mut self, t: &Tuning) {
        self.watch = t.first_look();
    }

    /// After a step at `now`: work means step again at once; a due timer
    /// a yield; otherwise, within `spin` of the last work and with no
    /// application driving, a yield, then sleep: until the next timer,
    /// bounded by `max_park` while an application drives (it takes what
    /// arrives; posts and doorbells wake this thread sooner when needed),
    /// on the backend's descriptor (`has_sleeper`) for up to
    /// [`IDLE_ON_IO`] when none does, else a nap that doubles from
    /// `min_park` to `max_park`.
    pub(crate) fn rest(
        &mut self,
        t: &Tuning,
        now: Nanos,
        s: Stepped,
        last_inline: Nanos,
        has_sleeper: bool,
    ) -> Rest {
        if s.work || s.more {
            self.last_work = now;
            self.park = t.min_park;
            return Rest::Again;
        }
        if s.deadline.is_some_and(|d| d <= now) {
            return Rest::Yield;
        }
        // An application thread that polled within the last max_park is
        // taken to be still polling (one round of its loop can take longer
        // than the spin, e.g. under an emulated CPU where every system
        // call is slow).
        let inline_active =
            s.driven || s.beside_waiter || now.saturating_sub(last_inline) < t.max_park;
        let spin = !(s.woken_at_hand_over && has_sleeper);
        if !inline_active && spin && now.saturating_sub(self.last_work) < t.spin {
            return Rest::Yield;
        }
        let on_io = !inline_active && has_sleeper;
        let nap = if s.driven {
            self.park
        } else if on_io {
            IDLE_ON_IO.max(t.max_park)
        } else if inline_active {
            t.max_park
        } else {
            self.park
        };
        let until = match s.deadline {
            Some(d) => d.min(now + nap),
            None => now + nap,
        };
        Rest::Sleep { until, on_io }
    }

    /// A sleep of [`rest`](Self::rest) ended: the next nap is longer.
    pub(crate) fn slept(&mut self, t: &Tuning) {
        self.park = (self.park * 2).min(t.max_park);
    }
}

mod waiter;
pub(crate) use waiter::{timer_beside_waiter_wakes, waiter_left_wakes, WaitNext, Waiter};

#[cfg(test)]
mod tests;
