//! Running the two halves: conservative synchronisation in windows.
//!
//! Every link between the halves is a host link, and nothing sent over a
//! link arrives sooner than the link's delay plus the serialization of
//! the smallest frame (a PFC frame). That minimum over the host links is
//! the *lookahead* `L`: an event at `t` in one half can only create events
//! at `t + L` or later in the other. So both halves may run every event of
//! a window `[start, start + L)` on their own, then swap what they sent
//! each other. The periodic tasks (sampling, watchdog, deadlock check) run
//! between windows at their exact instants (windows are cut there).
//!
//! The result does not depend on how the windows are run: each half
//! orders its queue by (time, sequence) with sequence numbers tagged by
//! the half that scheduled the event, so an event's place in the order is
//! fixed when it is made, not when it is delivered. The single-threaded
//! driver and the two-thread driver give identical results (a test holds
//! them to it).

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;

use crate::halves::{Half, HostHalf, Schedule, SwitchHalf};
use crate::sim::{Msg, Shared};
use crate::time::Ps;

/// Windows shorter than this are not worth a thread handover.
pub(crate) const MIN_PARALLEL_LOOKAHEAD: Ps = 100_000;

/// The next window: starts at the earliest pending instant (events of
/// either half, or a periodic task); `None` when the run is over.
fn next_start(peeks: [Option<Ps>; 2], sched: &Schedule, end: Ps) -> Option<Ps> {
    let start = peeks.into_iter().chain([sched.next()]).flatten().min()?;
    (start <= end).then_some(start)
}

/// The window's end (exclusive): one lookahead on, cut at the next task
/// and just past `end` (events at `end` itself run).
fn window_end(start: Ps, lookahead: Ps, sched: &Schedule, end: Ps) -> Ps {
    let t = start.saturating_add(lookahead).min(end.saturating_add(1));
    sched.next().map_or(t, |n| t.min(n))
}

fn swap_mail(from: &mut Shared, to: &mut Shared) {
    let mut out = std::mem::take(&mut from.out);
    to.deliver(&mut out);
    from.out = out;
}

/// Runs both halves on this thread. Returns the last instant simulated:
/// `end`, or when the last flow completed.
pub(crate) fn sequential(
    h: &mut HostHalf,
    s: &mut SwitchHalf,
    mut sched: Schedule,
    lookahead: Ps,
    end: Ps,
    mut progress: impl FnMut(f64),
) -> Ps {
    let mut windows: u64 = 0;
    loop {
        swap_mail(&mut h.sh, &mut s.sh);
        swap_mail(&mut s.sh, &mut h.sh);
        if h.all_done() {
            break;
        }
        let peeks = [h.sh.ev.peek_time(), s.sh.ev.peek_time()];
        let Some(start) = next_start(peeks, &sched, end) else {
            break;
        };
        if sched.next() == Some(start) {
            let due = sched.take_due(start);
            h.sh.now = start;
            s.sh.now = start;
            h.tasks(due);
            s.tasks(due);
            continue;
        }
        let t_end = window_end(start, lookahead, &sched, end);
        h.run_until(t_end);
        s.run_until(t_end);
        windows += 1;
        if windows & 0x3ff == 0 {
            progress(start as f64 / end.max(1) as f64);
        }
    }
    h.all_done_at.unwrap_or(end)
}

/// A two-party barrier that spins briefly, then yields. If the other
/// party panicked it panics too instead of waiting forever.
struct Barrier {
    arrived: AtomicUsize,
    generation: AtomicUsize,
    failed: AtomicBool,
}

impl Barrier {
    fn wait(&self) {
        let g = self.generation.load(Ordering::Acquire);
        if self.arrived.fetch_add(1, Ordering::AcqRel) == 1 {
            self.arrived.store(0, Ordering::Relaxed);
            self.generation.fetch_add(1, Ordering::Release);
            return;
        }
        let mut spins = 0u32;
        while self.generation.load(Ordering::Acquire) == g {
            assert!(
                !self.failed.load(Ordering::Relaxed),
                "the other half of the simulation panicked"
            );
            if spins < 4096 {
                std::hint::spin_loop();
                spins += 1;
            } else {
                std::thread::yield_now();
            }
        }
    }
}

/// Marks the barrier failed if its thread unwinds.
struct FailGuard<'a>(&'a Barrier);

impl Drop for FailGuard<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.failed.store(true, Ordering::Relaxed);
        }
    }
}

/// What the two threads share: one mailbox per half (messages to it), each
/// half's earliest pending instant, and whether every flow completed.
struct Link {
    mail: [Mutex<Vec<Msg>>; 2],
    peek: [AtomicU64; 2],
    all_done: AtomicBool,
    barrier: Barrier,
}

const NONE: u64 = u64::MAX;

/// One half's side of the two-thread loop: the same steps, in the same
/// order, as [`sequential`].
fn half_loop(
    me: usize,
    half: &mut dyn Half,
    link: &Link,
    mut sched: Schedule,
    lookahead: Ps,
    end: Ps,
    mut on_window: impl FnMut(Ps),
) {
    let _guard = FailGuard(&link.barrier);
    loop {
        {
            let mut m = link.mail[1 - me].lock().expect("mailbox");
            m.append(&mut half.sh().out);
        }
        link.barrier.wait();
        {
            let mut m = link.mail[me].lock().expect("mailbox");
            half.sh().deliver(&mut m);
        }
        let p = half.sh().ev.peek_time().unwrap_or(NONE);
        link.peek[me].store(p, Ordering::Relaxed);
        if half.all_done() {
            link.all_done.store(true, Ordering::Relaxed);
        }
        link.barrier.wait();
        if link.all_done.load(Ordering::Relaxed) {
            break;
        }
        let peeks = [0, 1].map(|i| match link.peek[i].load(Ordering::Relaxed) {
            NONE => None,
            t => Some(t),
        });
        let Some(start) = next_start(peeks, &sched, end) else {
            break;
        };
        if sched.next() == Some(start) {
            let due = sched.take_due(start);
            half.sh().now = start;
            half.tasks(due);
            continue;
        }
        let t_end = window_end(start, lookahead, &sched, end);
        half.run_until(t_end);
        on_window(start);
    }
}

/// Runs the switches on a second thread and the hosts on this one; the
/// result is [`sequential`]'s.
pub(crate) fn parallel(
    h: &mut HostHalf,
    s: &mut SwitchHalf,
    sched: Schedule,
    lookahead: Ps,
    end: Ps,
    mut progress: impl FnMut(f64),
) -> Ps {
    let link = Link {
        mail: [Mutex::new(Vec::new()), Mutex::new(Vec::new())],
        peek: [AtomicU64::new(NONE), AtomicU64::new(NONE)],
        all_done: AtomicBool::new(false),
        barrier: Barrier {
            arrived: AtomicUsize::new(0),
            generation: AtomicUsize::new(0),
            failed: AtomicBool::new(false),
        },
    };
    let s_sched = sched.clone();
    std::thread::scope(|scope| {
        let link = &link;
        scope.spawn(move || {
            half_loop(1, s, link, s_sched, lookahead, end, |_| {});
        });
        let mut windows: u64 = 0;
        half_loop(0, &mut *h, link, sched, lookahead, end, |start| {
            windows += 1;
            if windows & 0x3ff == 0 {
                progress(start as f64 / end.max(1) as f64);
            }
        });
    });
    // Messages still in the mailboxes were for instants past the end.
    h.all_done_at.unwrap_or(end)
}
