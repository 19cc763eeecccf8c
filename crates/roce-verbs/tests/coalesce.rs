//! Posts in a burst share their send calls (`ProgressConfig::
//! coalesce_posts`): a program that posts one work request per call in a
//! loop (perftest's bandwidth tests through the drop-in libibverbs) would
//! otherwise pay a system call per message. Whatever waits still leaves
//! when nobody polls.

mod common;

use std::io;
use std::net::IpAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use roce_core::Nanos;
use roce_io::{Backend, Fabric, PacketBatch};
use roce_verbs::*;

/// Counts the backend's send calls that carried datagrams.
struct CallCounter<B> {
    inner: B,
    calls: Arc<AtomicUsize>,
}

impl<B: Backend> Backend for CallCounter<B> {
    fn local_addrs(&self) -> &[IpAddr] {
        self.inner.local_addrs()
    }

    fn send(&mut self, now: Nanos, batch: &PacketBatch) -> io::Result<usize> {
        if !batch.is_empty() {
            self.calls.fetch_add(1, Ordering::Relaxed);
        }
        self.inner.send(now, batch)
    }

    fn recv(&mut self, now: Nanos, batch: &mut PacketBatch) -> io::Result<usize> {
        self.inner.recv(now, batch)
    }

    fn poll_at(&self) -> Option<Nanos> {
        self.inner.poll_at()
    }
}

/// A connected RC pair on a fresh fabric; B (the sender) coalesces posts
/// within `window` and counts its send calls.
fn pair(window: Duration) -> (Side, Side, Arc<AtomicUsize>) {
    let fabric = Fabric::new();
    let calls = Arc::new(AtomicUsize::new(0));
    let a = Context::open_fabric(&fabric, "10.0.0.1".parse().unwrap()).unwrap();
    let b_addr = "10.0.0.2".parse().unwrap();
    let cfg = ProgressConfig {
        coalesce_posts: window,
        ..ProgressConfig::default()
    };
    let counter = CallCounter {
        inner: fabric.endpoint(b_addr).unwrap(),
        calls: calls.clone(),
    };
    let b = Context::open_with(counter, DeviceConfig::new(b_addr), cfg).unwrap();
    let side = |ctx: Context| {
        let pd = ctx.alloc_pd();
        let cq = ctx.create_cq(256, None).unwrap();
        let qp = pd
            .create_qp(&QpInitAttr::new(QpType::Rc, &cq, &cq))
            .unwrap();
        Side { ctx, pd, cq, qp }
    };
    let (a, b) = (side(a), side(b));
    let (ea, eb) = (a.qp.endpoint(Psn::new(5)), b.qp.endpoint(Psn::new(600)));
    a.qp.connect(ea.psn, &eb, &ConnectOptions::default())
        .unwrap();
    b.qp.connect(eb.psn, &ea, &ConnectOptions::default())
        .unwrap();
    (a, b, calls)
}

const MESSAGES: u64 = 32;

/// The tests of this file count send calls, which depend on who holds
/// the I/O when a post comes: one at a time, so that another test's
/// threads do not take the CPUs from this one's.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Posts `n` 64-byte receives at `side`, the i-th at offset `i * step`
/// of `mr`.
fn post_recvs(side: &Side, mr: &MemoryRegion, n: u64, step: u64) {
    for i in 0..n {
        side.qp
            .post_recv(RecvWr {
                wr_id: i,
                sgl: vec![mr.sge(i * step, 64)].into(),
            })
            .unwrap();
    }
}

/// Posts MESSAGES one-packet SENDs of B's region, one per call, then takes
/// every receive at A and checks each message's bytes; returns B's send
/// calls up to the last receive.
fn burst(window: Duration) -> usize {
    let (a, b, calls) = pair(window);
    let ma =
        a.pd.reg_mr(vec![0u8; 64 * 32], Access::LOCAL_WRITE)
            .unwrap();
    let mb = b.pd.reg_mr(pattern(64 * 32, 9), Access::NONE).unwrap();
    post_recvs(&a, &ma, MESSAGES, 64);
    // B's progress thread keeps stepping for a while after the last
    // traffic (its spin) and would hold the I/O when the posts come:
    // let it go to sleep first.
    std::thread::sleep(Duration::from_millis(20));
    let before = calls.load(Ordering::Relaxed);
    for i in 0..MESSAGES {
        b.qp.post_send(SendWr::send(i, [mb.sge(i * 64, 64)]))
            .unwrap();
    }
    // B polls (its sends' completions): that ends the burst.
    let sent = b.cq.poll_until(MESSAGES as usize, WAIT).unwrap();
    assert_eq!(sent.len(), MESSAGES as usize, "B's sends did not complete");
    assert!(sent.iter().all(|c| c.is_success()), "{sent:?}");
    let got = a.cq.poll_until(MESSAGES as usize, WAIT).unwrap();
    assert_eq!(got.len(), MESSAGES as usize, "A got {} messages", got.len());
    assert_eq!(ma.to_vec().unwrap(), pattern(64 * 32, 9), "bytes differ");
    calls.load(Ordering::Relaxed) - before
}

/// With coalescing, a burst of 32 one-WR posts leaves in a few send
/// calls; without, each post sends on its own.
#[test]
fn a_burst_of_posts_shares_its_send_calls() {
    let _serial = serial();
    // (Now and then the progress thread holds the I/O when a post comes,
    // and sends two posts' packets together.)
    let each = burst(Duration::ZERO);
    assert!(
        each >= MESSAGES as usize / 2,
        "{each} send calls without coalescing"
    );
    // A long window: every post after the first finds the previous one
    // recent, so only the batch limit (32 waiting) and B's poll send.
    let shared = burst(Duration::from_secs(1));
    assert!(
        shared <= 4,
        "{shared} send calls for {MESSAGES} coalesced posts"
    );
}

/// Posts that wait for their burst's end still leave when the program
/// never polls: the progress thread sends them within the window.
#[test]
fn coalesced_posts_leave_without_a_poll() {
    let _serial = serial();
    let window = Duration::from_millis(5);
    let (a, b, _calls) = pair(window);
    let ma = a.pd.reg_mr(vec![0u8; 64], Access::LOCAL_WRITE).unwrap();
    let mb = b.pd.reg_mr(pattern(64, 3), Access::NONE).unwrap();
    post_recvs(&a, &ma, 3, 0);
    let start = Instant::now();
    for i in 0..3 {
        b.qp.post_send(SendWr::send(i, [mb.sge(0, 64)])).unwrap();
    }
    // Only A polls.
    let got = a.cq.poll_until(3, WAIT).unwrap();
    assert_eq!(got.len(), 3, "the coalesced posts never left");
    assert!(
        got.iter().all(|c| c.is_success() && c.byte_len() == 64),
        "{got:?}"
    );
    assert!(start.elapsed() < WAIT, "took {:?}", start.elapsed());
}

/// A program that polls between its bursts sends each burst itself, at
/// its next poll or when the burst is full: the progress thread is not
/// woken for the posts (a wake-up per burst cost perftest's `ib_send_bw`
/// a context switch each on a shared CPU). Were it woken, it would send
/// what had waited so far at each wake-up, cutting the burst into pieces.
#[test]
fn a_polling_programs_burst_leaves_at_its_poll() {
    let _serial = serial();
    // Shorter than the progress thread's park (1 ms), so the old rule
    // woke it for the burst's second post.
    let window = Duration::from_micros(500);
    let (a, b, calls) = pair(window);
    let n = 8usize;
    let ma = a.pd.reg_mr(vec![0u8; 64 * n], Access::LOCAL_WRITE).unwrap();
    let mb = b.pd.reg_mr(pattern(64 * n, 4), Access::NONE).unwrap();
    post_recvs(&a, &ma, n as u64, 64);
    let mut fewest = usize::MAX;
    // A post can come late on a loaded machine (ending its burst early):
    // the best of a few bursts.
    for round in 0..4u64 {
        if round > 0 {
            post_recvs(&a, &ma, n as u64, 64);
        }
        // B is a polling program: an empty poll just before the burst.
        assert!(b.cq.poll_one().unwrap().is_none());
        let before = calls.load(Ordering::Relaxed);
        for i in 0..n as u64 {
            b.qp.post_send(SendWr::send(i, [mb.sge(i * 64, 64)]))
                .unwrap();
            // Well within the window, and time enough for a woken
            // progress thread to send what waits.
            std::thread::sleep(Duration::from_micros(20));
        }
        let sent = b.cq.poll_until(n, WAIT).unwrap();
        assert_eq!(sent.len(), n, "B's sends did not complete");
        assert!(sent.iter().all(|c| c.is_success()), "{sent:?}");
        let got = a.cq.poll_until(n, WAIT).unwrap();
        assert_eq!(got.len(), n, "A got {} messages", got.len());
        assert_eq!(ma.to_vec().unwrap(), pattern(64 * n, 4), "bytes differ");
        fewest = fewest.min(calls.load(Ordering::Relaxed) - before);
    }
    assert!(fewest <= 3, "{fewest} send calls for a burst of {n}");
}

/// The other side of the rule above: a program that polled, posts a burst
/// and then stops polling still has it sent, by the progress thread at its
/// next look.
#[test]
fn a_burst_after_the_last_poll_still_leaves() {
    let _serial = serial();
    let window = Duration::from_micros(500);
    let (a, b, _calls) = pair(window);
    let ma = a.pd.reg_mr(vec![0u8; 64], Access::LOCAL_WRITE).unwrap();
    let mb = b.pd.reg_mr(pattern(64, 8), Access::NONE).unwrap();
    post_recvs(&a, &ma, 3, 0);
    assert!(b.cq.poll_one().unwrap().is_none());
    for i in 0..3 {
        b.qp.post_send(SendWr::send(i, [mb.sge(0, 64)])).unwrap();
    }
    // B never polls again; only A does.
    let got = a.cq.poll_until(3, WAIT).unwrap();
    assert_eq!(got.len(), 3, "the burst never left");
    assert!(
        got.iter().all(|c| c.is_success() && c.byte_len() == 64),
        "{got:?}"
    );
    assert_eq!(ma.to_vec().unwrap(), pattern(64, 8));
}

/// A post with a poll of a CQ since the previous one is not part of a
/// burst, however soon it comes: a latency loop (post, poll until the
/// answer, post again) whose round trip is shorter than the window sends
/// each post at once instead of at its next poll.
#[test]
fn a_post_after_a_poll_leaves_at_once() {
    let _serial = serial();
    let (a, b, calls) = pair(Duration::from_secs(1));
    let n = 6u64;
    let ma = a.pd.reg_mr(vec![0u8; 64], Access::LOCAL_WRITE).unwrap();
    let mb = b.pd.reg_mr(pattern(64, 5), Access::NONE).unwrap();
    // A post finds the I/O taken now and then (the progress thread's
    // step, on a loaded machine) and leaves it to that thread: the best
    // of a few rounds. Held back as part of a burst, every post but a
    // round's first would wait for the next poll.
    let mut best = 0;
    for _round in 0..4 {
        post_recvs(&a, &ma, n, 0);
        let (mut at_once, mut completed) = (0, 0);
        for i in 0..n {
            // A poll between posts, as a latency loop's.
            completed += usize::from(b.cq.poll_one().unwrap().is_some());
            let before = calls.load(Ordering::Relaxed);
            b.qp.post_send(SendWr::send(i, [mb.sge(0, 64)])).unwrap();
            at_once += usize::from(calls.load(Ordering::Relaxed) > before);
        }
        best = best.max(at_once);
        let got = a.cq.poll_until(n as usize, WAIT).unwrap();
        assert_eq!(got.len(), n as usize);
        assert!(
            got.iter().all(|c| c.is_success() && c.byte_len() == 64),
            "{got:?}"
        );
        let rest = n as usize - completed;
        assert_eq!(b.cq.poll_until(rest, WAIT).unwrap().len(), rest);
    }
    assert!(best >= n as usize - 1, "{best} of {n} posts sent at once");
}
