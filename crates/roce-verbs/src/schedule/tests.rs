//! Each scheduling rule with a fake clock (nanoseconds from 0).

use std::time::Duration;

use super::waiter::WAITER_FRUITLESS;
use super::*;

const US: Nanos = 1_000;
const MS: Nanos = 1_000_000;

/// The drop-in's tuning: 1 ms `max_park`, 16 ms `poller_park`, 50 µs
/// spin, bursts of up to 32 posts within 20 µs.
fn tuning() -> Tuning {
    Tuning::new(&ProgressConfig {
        coalesce_posts: Duration::from_micros(20),
        ..ProgressConfig::default()
    })
}

fn view(now: Nanos, last_post: Nanos) -> PostView {
    PostView {
        now,
        last_post,
        waiting: 0,
        polled: false,
        last_inline: 0,
        wake_at: RUNNING,
    }
}

#[test]
fn tuning_bounds_its_intervals() {
    let t = Tuning::new(&ProgressConfig {
        max_park: Duration::ZERO,
        poller_park: Duration::ZERO,
        ..ProgressConfig::default()
    });
    assert_eq!((t.max_park, t.poller_park, t.min_park), (US, US, US));
    let t = tuning();
    assert_eq!(
        (t.max_park, t.min_park, t.poller_park),
        (MS, 10 * US, 16 * MS)
    );
    assert_eq!((t.coalesce, t.burst_max), (20 * US, 32));
    // Without inline progress nothing waits for a burst's end.
    let off = Tuning::new(&ProgressConfig {
        inline_progress: false,
        coalesce_posts: Duration::from_micros(20),
        ..ProgressConfig::default()
    });
    assert_eq!(off.coalesce, 0);
}

/// A burst of posts (perftest's bandwidth loops post one WR per call)
/// waits for its end: posts within the window with no poll between them
/// hold back their packets, up to half a batch, and the poll after the
/// burst (or the post that fills it) sends them.
#[test]
fn a_burst_of_posts_is_sent_at_its_end() {
    let t = tuning();
    // The first post of a run sends (nothing came just before it).
    assert_eq!(post(&t, view(100 * MS, 0)), Post::Send);
    // The next ones, 2 µs apart, wait: the application polled within
    // max_park, so nobody needs waking.
    let mut v = view(100 * MS + 2 * US, 100 * MS);
    v.last_inline = 100 * MS - 5 * US;
    for waiting in 0..t.burst_max {
        v.waiting = waiting;
        assert_eq!(post(&t, v), Post::Wait { wake: false }, "post {waiting}");
    }
    // Half a batch waiting: this one sends them all.
    v.waiting = t.burst_max;
    assert_eq!(post(&t, v), Post::Send);
    // A poll between two posts: a latency loop, not a burst.
    let mut v = view(100 * MS + 2 * US, 100 * MS);
    v.polled = true;
    assert_eq!(post(&t, v), Post::Send);
    // Past the window: a new burst starts with a send.
    assert_eq!(post(&t, view(100 * MS + 20 * US, 100 * MS)), Post::Send);
    // Off (no window): every post sends.
    let off = Tuning {
        coalesce: 0,
        ..tuning()
    };
    assert_eq!(post(&off, view(100 * MS + US, 100 * MS)), Post::Send);
}

/// A burst of a program that does not poll: the progress thread is woken
/// to send it, unless it looks within the window anyway.
#[test]
fn a_burst_nobody_polls_for_wakes_the_thread_unless_it_looks_soon() {
    let t = tuning();
    let now = 100 * MS + 2 * US;
    let mut v = view(now, 100 * MS);
    v.last_inline = 50 * MS;
    v.wake_at = now + MS;
    assert_eq!(post(&t, v), Post::Wait { wake: true });
    v.wake_at = now + 10 * US;
    assert_eq!(post(&t, v), Post::Wait { wake: false });
    v.wake_at = RUNNING;
    assert_eq!(post(&t, v), Post::Wait { wake: true }, "asleep on I/O");
}

/// After an application thread's step: packets left always wake the
/// progress thread; a timer (a deferred ACK) within max_park of a poll
/// is the poller's; a later or non-polling step's timer wakes the thread
/// only if it comes before its own wake-up and within max_park.
#[test]
fn a_step_wakes_the_thread_for_what_it_cannot_do_itself() {
    let t = tuning();
    let now = 10 * MS;
    assert!(wake_after_step(&t, true, true, None, RUNNING, now));
    assert!(!wake_after_step(&t, true, false, None, now + 5 * MS, now));
    // The poller's deferred ACK, 200 µs out: the poller comes back first.
    assert!(!wake_after_step(
        &t,
        true,
        false,
        Some(now + 200 * US),
        now + 5 * MS,
        now
    ));
    // The same after a post: the thread must run it.
    assert!(wake_after_step(
        &t,
        false,
        false,
        Some(now + 200 * US),
        now + 5 * MS,
        now
    ));
    // ... unless it wakes before it anyway.
    assert!(!wake_after_step(
        &t,
        false,
        false,
        Some(now + 200 * US),
        now + 100 * US,
        now
    ));
    // A timer beyond max_park is the thread's next look's business.
    assert!(!wake_after_step(
        &t,
        false,
        false,
        Some(now + 2 * MS),
        now + 50 * MS,
        now
    ));
}

#[test]
fn a_doorbell_wakes_only_a_sleeping_thread_of_a_program_not_polling() {
    let t = tuning();
    let now = 10 * MS;
    assert!(doorbell_wakes(&t, now, now - MS, now + MS));
    assert!(!doorbell_wakes(&t, now, now - 10 * US, now + MS), "polling");
    assert!(!doorbell_wakes(&t, now, now - MS, RUNNING), "awake");
}

/// A program polling over and over: the thread looks at doubling
/// intervals from max_park up to poller_park; a single poll, or one
/// more than max_park ago, is not "polling"; a step resets the looks.
#[test]
fn the_thread_watches_a_poller_at_doubling_intervals() {
    let t = tuning();
    let mut r = ThreadRules::new(&t, 0);
    let mut now = 10 * MS;
    let mut polls = 10;
    let mut naps = Vec::new();
    for _ in 0..7 {
        polls += 5;
        let nap = r.watch(&t, now, now - 100 * US, polls).expect("polling");
        naps.push(nap / MS);
        r.watched(&t);
        now += nap;
    }
    assert_eq!(naps, [1, 2, 4, 8, 16, 16, 16]);
    // One poll since the last look: not a poller; the thread steps, and
    // its next look at a poller starts short again.
    assert_eq!(r.watch(&t, now, now - 100 * US, polls + 1), None);
    r.stepping(&t);
    assert_eq!(r.watch(&t, now, now - 100 * US, polls + 3), Some(MS));
    // Polls long ago: not polling now.
    assert_eq!(r.watch(&t, now, now - 2 * MS, polls + 9), None);
    // A poller_park below max_park: every look after poller_park.
    let short = Tuning {
        poller_park: 100 * US,
        ..t
    };
    let mut r = ThreadRules::new(&short, 0);
    assert_eq!(r.watch(&short, now, now - 10 * US, 2), Some(100 * US));
    r.watched(&short);
    assert_eq!(r.watch(&short, now, now - 10 * US, 4), Some(100 * US));
}

fn stepped(work: bool, deadline: Option<Nanos>) -> Stepped {
    Stepped {
        work,
        deadline,
        ..Stepped::default()
    }
}

/// After work the thread steps again at once; a timer due now is a
/// yield; for `spin` after its last work, a yield too (more may come),
/// then it sleeps.
#[test]
fn work_steps_again_and_the_spin_yields_before_a_sleep() {
    let t = tuning();
    let mut r = ThreadRules::new(&t, 0);
    let now = 10 * MS;
    assert_eq!(r.rest(&t, now, stepped(true, None), 0, true), Rest::Again);
    let more = Stepped {
        more: true,
        ..Stepped::default()
    };
    assert_eq!(r.rest(&t, now, more, 0, true), Rest::Again);
    assert_eq!(
        r.rest(&t, now + US, stepped(false, Some(now)), 0, true),
        Rest::Yield
    );
    assert_eq!(
        r.rest(&t, now + 20 * US, stepped(false, None), 0, true),
        Rest::Yield
    );
    // Past the spin: asleep on the descriptor, bounded by the next timer.
    let at = now + 60 * US;
    assert_eq!(
        r.rest(&t, at, stepped(false, None), 0, true),
        Rest::Sleep {
            until: at + IDLE_ON_IO,
            on_io: true
        }
    );
    assert_eq!(
        r.rest(&t, at, stepped(false, Some(at + 3 * MS)), 0, true),
        Rest::Sleep {
            until: at + 3 * MS,
            on_io: true
        }
    );
}

/// Without a descriptor to sleep on, the thread naps from `min_park`,
/// doubling up to `max_park`; work resets the nap.
#[test]
fn without_a_descriptor_the_naps_double_to_max_park() {
    let t = tuning();
    let mut r = ThreadRules::new(&t, 0);
    let mut now = 10 * MS;
    let mut naps = Vec::new();
    for _ in 0..9 {
        let Rest::Sleep { until, on_io } = r.rest(&t, now, stepped(false, None), 0, false) else {
            panic!("a sleep")
        };
        assert!(!on_io);
        naps.push((until - now) / US);
        r.slept(&t);
        now = until;
    }
    assert_eq!(naps, [10, 20, 40, 80, 160, 320, 640, 1000, 1000]);
    assert_eq!(r.rest(&t, now, stepped(true, None), 0, false), Rest::Again);
    let Rest::Sleep { until, .. } = r.rest(&t, now + MS, stepped(false, None), 0, false) else {
        panic!("a sleep")
    };
    assert_eq!(until - (now + MS), 10 * US, "back to min_park");
}

/// While an application drives the I/O (it held the lock, or polled
/// within max_park) the thread leaves the CPU to it: no sleep on the
/// descriptor (it stays readable until the poller takes the datagram),
/// a nap of its park, or of max_park, bounded by the next timer.
#[test]
fn while_an_application_drives_the_thread_naps_off_the_descriptor() {
    let t = tuning();
    let mut r = ThreadRules::new(&t, 0);
    let now = 10 * MS;
    let driven = Stepped {
        driven: true,
        ..Stepped::default()
    };
    assert_eq!(
        r.rest(&t, now, driven, 0, true),
        Rest::Sleep {
            until: now + t.min_park,
            on_io: false
        }
    );
    // Polled 300 µs ago: still polling; no spin either.
    assert_eq!(
        r.rest(&t, now, stepped(false, None), now - 300 * US, true),
        Rest::Sleep {
            until: now + MS,
            on_io: false
        }
    );
    assert_eq!(
        r.rest(
            &t,
            now,
            stepped(false, Some(now + 200 * US)),
            now - 300 * US,
            true
        ),
        Rest::Sleep {
            until: now + 200 * US,
            on_io: false
        }
    );
}

#[test]
fn the_signals_feed_the_rules() {
    let s = Signals::default();
    assert_eq!(s.wake_at.load(Ordering::Relaxed), RUNNING);
    assert!(s.touched.load(Ordering::Relaxed), "the first step looks");
    s.cq_polled();
    let v = s.post_view(5);
    assert!(v.polled, "a poll since the last post");
    assert!(!s.post_view(6).polled, "none since");
    s.polled_empty(42);
    assert_eq!(s.last_inline.load(Ordering::Relaxed), 42);
    assert_eq!(s.polls.load(Ordering::Relaxed), 1);
    s.handed_over_at_completion(50);
    assert_eq!(s.last_inline.load(Ordering::Relaxed), 0);
    assert_eq!(s.handed_at.load(Ordering::Relaxed), 50);
    s.handed_over();
    assert_eq!(s.handed_at.load(Ordering::Relaxed), 0, "not after a poll");
}

/// Beside an application thread blocked for a completion event on the
/// descriptor, the progress thread neither steps nor sleeps on it: it
/// looks again after a nap that doubles up to poller_park, and a step
/// it was kicked to run ends in a nap off the descriptor, with no spin,
/// bounded by the next timer.
#[test]
fn beside_a_waiter_the_thread_keeps_off_the_descriptor() {
    let t = tuning();
    let mut r = ThreadRules::new(&t, 0);
    let now = 10 * MS;
    // Nobody polls (the waiter handed over): without a waiter, a step.
    assert_eq!(r.watch_beside(&t, now, 0, 0, None), None);
    // Waits that end and begin between looks: looks as at a poller.
    assert_eq!(r.watch_beside(&t, now, 0, 0, Some(1)), Some(t.max_park));
    r.watched(&t);
    assert_eq!(r.watch_beside(&t, now, 0, 0, Some(2)), Some(2 * t.max_park));
    for _ in 0..10 {
        r.watched(&t);
    }
    assert_eq!(r.watch_beside(&t, now, 0, 0, Some(3)), Some(t.poller_park));
    // One wait from look to look (idle): the nap doubles up to IDLE_ON_IO.
    let mut nap = t.poller_park;
    for _ in 0..10 {
        nap = (nap * 2).min(IDLE_ON_IO);
        assert_eq!(r.watch_beside(&t, now, 0, 0, Some(3)), Some(nap));
    }
    assert_eq!(nap, IDLE_ON_IO);
    // Its end wakes the thread; in a ping-pong (naps of a poller's) not.
    assert!(waiter_left_wakes(&t, now, now + IDLE_ON_IO));
    assert!(!waiter_left_wakes(&t, now, now + t.poller_park));
    assert!(!waiter_left_wakes(&t, now, RUNNING));
    // The waiter left: the thread steps again, and its looks start short.
    assert_eq!(r.watch_beside(&t, now, 0, 0, None), None);
    r.stepping(&t);
    assert_eq!(r.watch_beside(&t, now, 0, 0, Some(3)), Some(t.max_park));
    // A kicked step right after work: no spin, no sleep on the descriptor.
    let beside = |deadline| Stepped {
        deadline,
        beside_waiter: true,
        ..Stepped::default()
    };
    let mut r = ThreadRules::new(&t, now);
    assert_eq!(
        r.rest(&t, now + US, beside(None), 0, true),
        Rest::Sleep {
            until: now + US + t.max_park,
            on_io: false
        }
    );
    assert_eq!(
        r.rest(&t, now + US, beside(Some(now + 300 * US)), 0, true),
        Rest::Sleep {
            until: now + 300 * US,
            on_io: false
        }
    );
    // Without the waiter the same step spins, then sleeps on the descriptor.
    assert_eq!(
        r.rest(&t, now + US, stepped(false, None), 0, true),
        Rest::Yield
    );
}

/// The waiting thread steps while there is something to take, blocks
/// until the engine's next timer otherwise, and hands the I/O back after
/// WAITER_FRUITLESS steps in a row that found nothing (a descriptor that
/// stays readable must not make the wait a spin).
#[test]
fn a_waiter_steps_sleeps_until_the_timer_or_hands_over() {
    let mut w = Waiter::default();
    assert_eq!(w.next(true, true, false, None), WaitNext::Step);
    assert_eq!(w.next(true, false, true, None), WaitNext::Step);
    assert_eq!(
        w.next(false, false, false, Some(7 * MS)),
        WaitNext::Sleep {
            until: Some(7 * MS)
        }
    );
    assert_eq!(
        w.next(true, false, false, None),
        WaitNext::Sleep { until: None }
    );
    for _ in 0..WAITER_FRUITLESS {
        assert_ne!(w.next(false, false, true, None), WaitNext::HandOver);
    }
    assert_eq!(w.next(false, false, true, None), WaitNext::HandOver);
    // Work resets the count.
    let mut w = Waiter::default();
    for i in 0..3 * WAITER_FRUITLESS {
        let work = i % WAITER_FRUITLESS == 0;
        assert_ne!(w.next(work, false, true, None), WaitNext::HandOver);
    }
}

#[test]
fn the_waiter_signals() {
    let s = Signals::default();
    assert!(!s.waiting());
    s.waiters.fetch_add(1, Ordering::SeqCst);
    assert!(s.waiting());
    s.wait_ended(true);
    s.wait_ended(false);
    s.wait_ended(false);
    assert_eq!(s.events_own_step.load(Ordering::Relaxed), 1);
    assert_eq!(s.events_woken.load(Ordering::Relaxed), 2);
}

/// A timer another thread's step leaves while a thread waits on the
/// descriptor, before the waiter would wake by itself, wakes the progress
/// thread, which then steps when it is due; the waiter's own timers stay
/// the waiter's.
#[test]
fn a_timer_the_waiter_does_not_know_is_the_threads() {
    let t = tuning();
    let now = 10 * MS;
    // The waiter sleeps until now + 5 ms; the progress thread until + 16 ms.
    let (waiter_until, wake_at) = (now + 5 * MS, now + 16 * MS);
    assert!(timer_beside_waiter_wakes(
        Some(now + 2 * MS),
        waiter_until,
        wake_at
    ));
    assert!(!timer_beside_waiter_wakes(
        Some(now + 6 * MS),
        waiter_until,
        wake_at
    ));
    assert!(!timer_beside_waiter_wakes(
        Some(now + 2 * MS),
        waiter_until,
        now + MS
    ));
    assert!(!timer_beside_waiter_wakes(None, RUNNING, wake_at));
    assert!(timer_beside_waiter_wakes(
        Some(now + 2 * MS),
        RUNNING,
        wake_at
    ));
    // Kicked, the thread stepped and saw the timer at now + 2 ms: beside
    // the waiter its naps end there, and then it steps.
    let mut r = ThreadRules::new(&t, now);
    r.note_step(Some(now + 2 * MS), waiter_until);
    assert_eq!(
        r.watch_beside(&t, now + 1_500 * US, 0, 0, Some(1)),
        Some(500 * US)
    );
    assert_eq!(r.watch_beside(&t, now + 2 * MS, 0, 0, Some(1)), None);
    // A timer after the waiter's own wake is the waiter's (it steps by
    // then): it does not make this thread step.
    r.note_step(Some(now + 6 * MS), waiter_until);
    assert_eq!(
        r.watch_beside(&t, now + 6 * MS, 0, 0, Some(2)),
        Some(t.max_park)
    );
    // Nobody waits: every timer is this thread's.
    r.note_step(Some(now + 7 * MS), RUNNING);
    assert_eq!(r.watch_beside(&t, now + 8 * MS, 0, 0, Some(3)), None);
}

/// A hand-over after a poll wakes the progress thread only after
/// datagrams waited for it while the application was away (no call since,
/// spin or more after the hand-over), and not while it sleeps on the
/// descriptor; the waking stops after AWAY_RECEIVES receives in a row
/// while the application polls or posts. Other hand-overs (a thread about
/// to block on a channel) never start it.
#[test]
fn a_hand_over_wakes_the_thread_after_datagrams_waited_for_it() {
    let t = tuning();
    // The pure rules.
    assert!(hand_over_wakes(1, false));
    assert!(!hand_over_wakes(0, false), "nothing waited");
    assert!(!hand_over_wakes(1, true), "asleep on the descriptor");
    let at = 10 * MS;
    assert!(!away_receive(&t, 0, at, at + 49 * US), "back soon");
    assert!(away_receive(&t, 0, at, at + 50 * US));
    assert!(away_receive(&t, 1, at, at), "woken for it");

    let s = Signals::default();
    let away = |s: &Signals| s.away.load(Ordering::Relaxed);
    assert!(!s.hand_over_view(), "a fresh context: no wake-up");
    // Before any poll, and after a hand-over that is not a poll's.
    s.received(&t, true, MS);
    s.handed_over();
    s.received(&t, true, 2 * MS);
    assert_eq!(away(&s), 0, "not a poll's hand-over");
    // The application polls and takes what arrives: still none.
    s.polled_empty(2 * MS);
    s.received(&t, false, 2 * MS);
    s.received(&t, true, 2 * MS);
    assert!(!s.hand_over_view());
    // A bandwidth loop: the thread receives just after a hand-over, or
    // long after it while the program posts.
    s.handed_over_at_completion(3 * MS);
    s.received(&t, true, 3 * MS + 10 * US);
    assert!(!s.hand_over_view(), "the program was not away long");
    s.called();
    s.received(&t, true, 3 * MS + 500 * US);
    assert!(!s.hand_over_view(), "the program posted since");
    s.handed_over_at_completion(4 * MS);
    // One blocked for a completion event takes what arrives itself.
    s.waiters.store(1, Ordering::SeqCst);
    s.received(&t, true, 5 * MS);
    assert!(!s.hand_over_view(), "a waiter is not away");
    s.waiters.store(0, Ordering::SeqCst);
    // A datagram waited for the thread while the application was away.
    s.received(&t, true, 5 * MS);
    assert_eq!(away(&s), AWAY_RECEIVES);
    assert!(s.hand_over_view());
    // Woken at once from now on (awake or napping), the thread's
    // receives before the next call keep the mark...
    s.wake_at.store(RUNNING, Ordering::Relaxed);
    assert!(s.hand_over_view(), "awake, it may be about to nap");
    s.handed_over_at_completion(6 * MS);
    s.received(&t, true, 6 * MS + US);
    assert_eq!(away(&s), AWAY_RECEIVES);
    // ... and receives once the program calls again wear it off, the
    // thread's too.
    s.called();
    for left in (1..AWAY_RECEIVES).rev() {
        s.received(&t, left % 2 == 0, 7 * MS);
        assert_eq!(away(&s), left);
        assert!(s.hand_over_view());
    }
    s.received(&t, false, 7 * MS);
    assert!(!s.hand_over_view(), "the application takes its datagrams");
    s.in_sleep.store(true, Ordering::Relaxed);
    s.away.store(1, Ordering::Relaxed);
    assert!(!s.hand_over_view(), "asleep on the descriptor");
}

/// While hand-overs wake it, the thread sleeps on the descriptor at once
/// after a step instead of spinning; without a descriptor it spins as
/// before (its nap would not end for an arriving datagram).
#[test]
fn woken_at_hand_overs_the_thread_sleeps_on_the_descriptor_at_once() {
    let t = tuning();
    let now = 10 * MS;
    let woken = Stepped {
        woken_at_hand_over: true,
        ..stepped(false, None)
    };
    let mut r = ThreadRules::new(&t, now - US);
    assert_eq!(r.rest(&t, now, stepped(false, None), 0, true), Rest::Yield);
    let mut r2 = ThreadRules::new(&t, now - US);
    assert_eq!(
        r2.rest(&t, now, woken, 0, true),
        Rest::Sleep {
            until: now + IDLE_ON_IO.max(t.max_park),
            on_io: true
        }
    );
    let mut r3 = ThreadRules::new(&t, now - US);
    assert_eq!(
        r3.rest(&t, now, woken, 0, false),
        Rest::Yield,
        "no descriptor"
    );
}
