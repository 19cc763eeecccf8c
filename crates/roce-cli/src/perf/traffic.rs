//! The traffic loops of `roce perf`, one set for every control plane
//! (roce perf's own JSON exchange, perftest's over TCP, perftest's over
//! rdma_cm), shaped like perftest's `run_iter_*` functions so that the
//! two ends agree on who posts what: the BW requester (any number of
//! QPs, `iters` messages on each, `depth` in flight per QP), the SEND BW
//! receiver, the bidirectional SEND loop here, and the three latency
//! loops (SEND and WRITE ping-pongs, READ/atomic round trips) in
//! [`super::traffic_lat`]. With `-D` every loop runs until its deadline
//! instead of counting to `iters`.
//!
//! A loop sees its control plane only through [`Watch`]: while it waits
//! it asks whether the peer failed, stalled, moved on or was stopped.
//! The session driver ([`super::session`]) runs them; what the control
//! planes exchange around them (endpoints, sync rounds, reports) is the
//! planes' ([`super::plane::ControlPlane`]).

use std::time::{Duration, Instant};

use roce_verbs::{RemoteAddr, Rkey, SendWr};

use super::error::PerfError;
use super::lane::{CqSet, Lane};
use super::messages::Test;
use super::progress::Progress;
use super::report::BwResult;
/// After a timed run, how long a requester waits for what it still has
/// in flight (a peer that stopped receiving never completes it).
const DRAIN: Duration = Duration::from_secs(2);

/// What a traffic loop asks of its control plane while it runs. The
/// loops call [`Watch::idle`] when a round completed nothing (the
/// latency loops every 256 empty spins), [`Watch::progressed`] when one
/// did.
pub(crate) trait Watch {
    /// Something completed (noted without reading the clock).
    fn progressed(&mut self);
    /// The checks of an idle round: `Ok(true)` to go on, `Ok(false)` when
    /// the run is being cut short (Ctrl-C here or at the peer: the loop
    /// ends and reports what it measured), an error when the peer failed,
    /// stalled or moved on. `look`: the loop waits for the peer's own
    /// messages (a peer that finished will send no more). `what` says how
    /// far this side got.
    fn idle(&mut self, look: bool, what: &dyn Fn() -> String) -> Result<bool, PerfError>;
    /// Whether to stop posting (Ctrl-C here or at the peer).
    fn stopping(&self) -> bool {
        false
    }
    /// A BW loop's sends are over: its count per QP (empty for a
    /// receiver), for a control plane that tells the peer at once.
    fn sent_all(&mut self, _per_qp: &[u64]) -> Result<(), PerfError> {
        Ok(())
    }
    /// How many messages the peer sent in all, once it said so.
    fn peer_sent(&mut self) -> Result<Option<u64>, PerfError> {
        Ok(None)
    }
}

/// What one run of a traffic loop needs: the QPs, the peer's buffer for
/// each, the message size and count (per QP) and the send depth per QP.
pub(crate) struct Traffic<'a> {
    pub(crate) lanes: &'a [Lane<'a>],
    pub(crate) remotes: &'a [(u64, Rkey)],
    pub(crate) size: u64,
    /// Messages per QP (`u64::MAX` in a timed run).
    pub(crate) iters: u64,
    pub(crate) depth: u64,
    /// One signaled send in this many in a BW loop (perftest's CQ
    /// moderation, `--cq-mod`): a completion then stands for every send of
    /// its QP before it. 1: every send signaled, so that a stalled run
    /// says exactly how many messages got through.
    pub(crate) cq_mod: u64,
    pub(crate) test: Test,
    /// The end of a timed run (`-D`).
    pub(crate) until: Option<Instant>,
    /// A timed run's length in seconds (`-D`), for the progress lines.
    pub(crate) duration: Option<f64>,
    /// Progress lines ([`super::progress::interval`]).
    pub(crate) progress_every: Option<Duration>,
    /// What the peer's messages hold (its pattern), when received
    /// messages are checked (each of a latency test, one in
    /// [`VERIFY_EVERY`] of a BW test).
    pub(crate) verify: Option<&'a [u8]>,
    /// The control plane says how many messages the peer sent
    /// ([`Watch::peer_sent`], roce perf's `done`): a timed run's
    /// receiver takes that many rather than stop at its own deadline.
    pub(crate) peer_says_sent: bool,
}

impl Traffic<'_> {
    pub(crate) fn total(&self) -> u64 {
        self.iters.saturating_mul(self.lanes.len() as u64)
    }

    /// A timed run's deadline has passed.
    pub(crate) fn over(&self) -> bool {
        self.until.is_some_and(|u| Instant::now() >= u)
    }

    /// Room for this many time stamps.
    pub(crate) fn cap(&self) -> usize {
        self.total().min(1 << 20) as usize
    }

    /// The bytes one operation moves (an atomic: 8).
    pub(crate) fn len(&self) -> u32 {
        if self.test.is_atomic() {
            8
        } else {
            self.size as u32
        }
    }

    fn send_wr(&self, q: usize, wr_id: u64) -> SendWr {
        let d = &self.lanes[q];
        let local = d.mr.sge(d.source, self.len());
        let (addr, rkey) = self.remotes[q];
        match self.test {
            Test::WriteBw => SendWr::write(wr_id, [local], RemoteAddr::new(addr, rkey)),
            Test::ReadBw => SendWr::read(wr_id, [local], RemoteAddr::new(addr, rkey)),
            Test::AtomicBw => SendWr::fetch_add(wr_id, [local], RemoteAddr::new(addr, rkey), 1),
            _ => SendWr::send(wr_id, [local]),
        }
    }
}

/// The WR ids of sends carry this bit (receives carry their ring slot).
const SEND_BIT: u64 = 1 << 62;
/// Check one received SEND in this many against the peer's pattern.
const VERIFY_EVERY: u64 = 64;

/// What a BW loop counted: per QP, and the time line of the total.
pub(crate) struct Counted {
    /// This side's operations (the receiver's: messages) per QP.
    pub(crate) per_qp: Vec<u64>,
    /// From the start to the last completion.
    pub(crate) secs: f64,
    /// The best rate (bytes per second) over any span of at least the
    /// window's messages (0 in a timed run, whose first completions come
    /// in bursts).
    pub(crate) peak_bps: f64,
}

impl Counted {
    pub(crate) fn ops(&self) -> u64 {
        self.per_qp.iter().sum()
    }

    /// The row of perftest's table.
    pub(crate) fn result(&self, size: u64) -> BwResult {
        BwResult::new(size, self.ops(), self.secs, self.peak_bps)
    }
}

/// Per-QP counters of a BW loop.
#[derive(Clone, Copy, Default)]
struct Counts {
    posted: u64,
    sent: u64,
    received: u64,
    reposted: u64,
}

/// Takes a received message: checks one in [`VERIFY_EVERY`] against the
/// peer's pattern, and re-posts its buffer while `reposted` is short of
/// `iters`.
fn took(
    t: &Traffic<'_>,
    d: &Lane<'_>,
    slot: u64,
    nth: u64,
    reposted: &mut u64,
) -> Result<(), PerfError> {
    if let Some(want) = t.verify.filter(|_| nth % VERIFY_EVERY == 1) {
        let mut got = vec![0u8; t.size as usize];
        d.mr.read(d.slot_at(slot, t.size), &mut got)?;
        if got != want {
            return Err(PerfError::Data(format!(
                "received data differs from what was sent (message {nth})"
            )));
        }
    }
    if *reposted < t.iters {
        *reposted += 1;
        d.repost(slot, t.size)?;
    }
    Ok(())
}

/// perftest's requester loop (`run_iter_bw`), or with `recv` both
/// directions of a SEND test at once (`run_iter_bi`): every QP posts
/// `iters` messages keeping `depth` in flight, one in `cq_mod`
/// signaled; with `recv` it also takes `iters` SENDs (in a timed run,
/// as many as the peer says it sent, [`Watch::peer_sent`]), re-posting
/// the ring (already posted by the caller). The peer is told this side's
/// count once its sends are done ([`Watch::sent_all`]). A timed or
/// stopped run stops posting and waits up to [`DRAIN`] for what is in
/// flight. Counts this side's messages.
fn requester(t: &Traffic<'_>, recv: bool, watch: &mut impl Watch) -> Result<Counted, PerfError> {
    let (iters, n) = (t.iters, t.lanes.len());
    let depth = t.depth.min(iters).max(1);
    // Often enough that a full window always holds a signaled send.
    let every = t.cq_mod.clamp(1, depth);
    let mut c = vec![Counts::default(); n];
    for (q, k) in t.lanes.iter().zip(c.iter_mut()) {
        k.reposted = if recv { q.ring_slots(t.size, iters) } else { 0 };
    }
    let mut line = vec![(0.0, 0u64)];
    let mut comps = Vec::with_capacity(256);
    let cqs = CqSet::new(t.lanes);
    let start = Instant::now();
    let mut shown = Progress::new(
        t.duration,
        t.until.is_none().then(|| t.total()),
        t.size,
        t.progress_every,
    );
    let (mut sent_all, mut received_all, mut peer_sent) = (false, 0u64, None);
    let mut drain_from: Option<Instant> = None;
    let mut end = 0.0;
    loop {
        let mut progress = false;
        let mut sending = 0;
        let over = t.over() || watch.stopping();
        if over && Instant::now() > *drain_from.get_or_insert_with(Instant::now) + DRAIN {
            break;
        }
        for (i, d) in t.lanes.iter().enumerate() {
            let k = &mut c[i];
            // What the window has room for goes out as one list (one
            // doorbell: a few system calls for a burst of messages).
            let room = if over {
                0
            } else {
                (iters.saturating_sub(k.posted)).min(depth.saturating_sub(k.posted - k.sent))
            };
            if room > 0 {
                let first = k.posted;
                let list = (first..first + room).map(|j| {
                    let mut wr = t.send_wr(i, SEND_BIT | j);
                    // The last of a list too, so that what is in flight
                    // always ends with a signaled send.
                    if !(j + 1 == iters || j + 1 == first + room || j % every == every - 1) {
                        wr.flags = roce_verbs::SendFlags::default();
                    }
                    wr
                });
                let r = d.qp.post_send_list(list);
                k.posted += room;
                r.map_err(|e| super::during("post_send")(e.error))?;
            }
        }
        progress |= cqs.poll(&mut comps, |i, cmp| {
            let k = &mut c[i];
            if cmp.wr_id() & SEND_BIT != 0 {
                // Sends complete in order: this one and all before it.
                k.sent = (cmp.wr_id() & !SEND_BIT) + 1;
            } else {
                k.received += 1;
                received_all += 1;
                took(t, &t.lanes[i], cmp.wr_id(), received_all, &mut k.reposted)?;
            }
            Ok(())
        })?;
        for k in &c {
            if !(k.sent == iters || over && k.sent == k.posted) {
                sending += 1;
            }
        }
        let total: u64 = c.iter().map(|k| k.sent).sum();
        if progress && line.last().is_some_and(|&(_, d)| d != total) {
            line.push((start.elapsed().as_secs_f64(), total));
        }
        if sending == 0 && !sent_all {
            sent_all = true;
            end = line.last().map_or(0.0, |&(s, _)| s);
            watch.sent_all(&c.iter().map(|k| k.sent).collect::<Vec<_>>())?;
        }
        if peer_sent.is_none() && recv {
            peer_sent = watch.peer_sent()?;
        }
        // Every QP's messages received (counted), or as many as the peer
        // said it sent, or, where the peer says nothing, none awaited
        // past a timed run's end.
        let received = !recv
            || if t.until.is_none() {
                c.iter().all(|k| k.received >= iters)
            } else {
                peer_sent.map_or(!t.peer_says_sent, |p| received_all >= p)
            };
        if sent_all && received {
            break;
        }
        shown.tick(total);
        if progress {
            watch.progressed();
        } else if !watch.idle(false, &|| {
            let (s, r): (u64, u64) = c
                .iter()
                .map(|k| (k.sent, k.received))
                .fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1));
            format!("after {s} of {} messages sent ({r} received)", t.total())
        })? {
            break;
        }
    }
    shown.finish();
    if !sent_all {
        end = line.last().map_or(0.0, |&(s, _)| s);
        watch.sent_all(&c.iter().map(|k| k.sent).collect::<Vec<_>>())?;
    }
    Ok(Counted {
        per_qp: c.iter().map(|k| k.sent).collect(),
        secs: if end > 0.0 { end } else { 1e-9 },
        peak_bps: if t.until.is_some() {
            0.0
        } else {
            peak(&line, depth * n as u64, t.size)
        },
    })
}

/// The BW client (and both sides of a bidirectional WRITE/READ/atomic
/// test).
pub(crate) fn client_traffic(
    t: &Traffic<'_>,
    watch: &mut impl Watch,
) -> Result<Counted, PerfError> {
    requester(t, false, watch)
}

/// Both sides of a bidirectional SEND BW test: sends and receives.
pub(crate) fn send_duplex(t: &Traffic<'_>, watch: &mut impl Watch) -> Result<Counted, PerfError> {
    requester(t, true, watch)
}

/// The SEND BW server: counts `iters` receives on every QP (in a timed
/// run, until its end or as many as the peer says it sent), re-posting
/// the ring the caller posted until every message has one, and measures
/// their rate from the first arrival.
pub(crate) fn server_receive(
    t: &Traffic<'_>,
    watch: &mut impl Watch,
) -> Result<Counted, PerfError> {
    let (iters, size) = (t.iters, t.size);
    let mut got = vec![0u64; t.lanes.len()];
    let mut reposted: Vec<u64> = t.lanes.iter().map(|q| q.ring_slots(size, iters)).collect();
    let mut comps = Vec::with_capacity(256);
    let cqs = CqSet::new(t.lanes);
    let mut line = vec![(0.0, 0u64)];
    let mut start = None;
    let mut total = 0u64;
    let mut peer_sent = None;
    let until = t.until.filter(|_| !t.peer_says_sent);
    loop {
        if got.iter().all(|&g| g >= iters) || until.is_some_and(|u| Instant::now() >= u) {
            break;
        }
        if peer_sent.is_none() {
            peer_sent = watch.peer_sent()?;
        }
        if peer_sent.is_some_and(|p| total >= p) {
            break;
        }
        let progress = cqs.poll(&mut comps, |i, c| {
            got[i] += 1;
            total += 1;
            took(t, &t.lanes[i], c.wr_id(), total, &mut reposted[i])
        })?;
        if progress {
            let now = Instant::now();
            let s = *start.get_or_insert(now);
            line.push((now.duration_since(s).as_secs_f64(), total));
            watch.progressed();
        } else if !watch.idle(true, &|| {
            format!("after {total} of the {} messages", t.total())
        })? {
            break;
        }
    }
    watch.sent_all(&[])?;
    let secs = line.last().map_or(0.0, |&(s, _)| s);
    Ok(Counted {
        per_qp: got,
        secs: if secs > 0.0 { secs } else { 1e-9 },
        peak_bps: peak(&line, 64, size),
    })
}

/// Half of each interval between consecutive time stamps, in µs.
pub(crate) fn half_intervals(stamps: &[Instant]) -> Vec<f64> {
    stamps
        .windows(2)
        .map(|w| w[1].duration_since(w[0]).as_secs_f64() * 1e6 / 2.0)
        .collect()
}

/// The best rate (bytes per second) over any span of the time line
/// (seconds, messages so far) that holds at least `window` messages, the
/// whole run included: completions arrive in bursts, so shorter spans
/// would report the burst, not the bandwidth.
fn peak(line: &[(f64, u64)], window: u64, size: u64) -> f64 {
    let rate = |a: (f64, u64), b: (f64, u64)| {
        let dt = b.0 - a.0;
        if dt > 0.0 {
            (b.1 - a.1) as f64 * size as f64 / dt
        } else {
            0.0
        }
    };
    let (Some(&first), Some(&last)) = (line.first(), line.last()) else {
        return 0.0;
    };
    let mut best = rate(first, last);
    let mut lo = 0;
    for hi in 0..line.len() {
        while lo + 1 < hi && line[hi].1 - line[lo + 1].1 >= window {
            lo += 1;
        }
        if line[hi].1 - line[lo].1 >= window {
            best = best.max(rate(line[lo], line[hi]));
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The peak is the best span of at least `window` messages, never
    /// below the whole run's average, and a burst shorter than the
    /// window does not count.
    #[test]
    fn peak_spans_a_window_of_messages() {
        // 100 messages a second for 10 s, with a burst of 50 in 0.01 s.
        let mut line: Vec<(f64, u64)> = (0..=10).map(|s| (s as f64, s * 100)).collect();
        line.insert(6, (5.01, 550));
        let size = 1000;
        let avg = 1000.0 * 100.0;
        let p = peak(&line, 200, size);
        assert!(p >= avg, "{p}");
        // The burst alone (50 messages) is shorter than the window.
        assert!(p < 50.0 * 1000.0 / 0.01, "{p}");
        // Windows wider than the run: the average.
        assert_eq!(peak(&line, 10_000, size), avg);
        assert_eq!(peak(&[], 1, size), 0.0);
        assert_eq!(peak(&[(0.0, 0)], 1, size), 0.0);
    }

    /// Half of each interval between consecutive stamps, in µs.
    #[test]
    fn latency_is_half_the_interval_between_sends() {
        let t0 = Instant::now();
        let stamps = [
            t0,
            t0 + Duration::from_micros(4),
            t0 + Duration::from_micros(10),
        ];
        let h = half_intervals(&stamps);
        assert_eq!(h.len(), 2);
        assert!(
            (h[0] - 2.0).abs() < 1e-6 && (h[1] - 3.0).abs() < 1e-6,
            "{h:?}"
        );
    }
}
