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
//! What the control planes exchange around the loops (endpoints, sync
//! rounds, reports) is theirs: `bw.rs`/`lat.rs` for roce perf's exchange,
//! `perftest_session.rs` for perftest's.

use std::time::{Duration, Instant};

use roce_verbs::{
    Access, CompletionQueue, MemoryRegion, QpCaps, QpInitAttr, QpType, QueuePair, RecvWr, Rkey,
    SendOp, SendWr,
};

use super::error::PerfError;
use super::messages::Test;
use super::perftest_plan::Plan;
use super::progress::Progress;
use super::report::{self, BwResult};

/// Receive buffers per QP at most (as perftest's default rx depth).
const MAX_RING: u64 = 512;
/// Memory for one QP's receive ring at most, unless two messages need more.
const RING_BYTES: u64 = 16 << 20;
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
}

/// One QP and the part of a registered region it uses: the area the
/// peer writes, reads or adds to at `target`, this side's source (or
/// READ destination) at `source`, and for SEND tests a ring of receive
/// buffers of `ring_bytes` at `ring`. perftest's layout ([`DataQp`]) and
/// roce perf's (one region, a slot per QP: `setup.rs`) are both lanes.
#[derive(Clone, Copy)]
pub(crate) struct Lane<'a> {
    pub(crate) mr: &'a MemoryRegion,
    pub(crate) cq: &'a CompletionQueue,
    pub(crate) qp: &'a QueuePair,
    pub(crate) target: u64,
    pub(crate) source: u64,
    pub(crate) ring: u64,
    pub(crate) ring_bytes: u64,
    /// Receives the QP can hold at once (besides a few spare).
    pub(crate) slots: u64,
}

impl Lane<'_> {
    /// Receive buffers of `size` bytes the ring holds for `iters` messages.
    pub(crate) fn ring_slots(&self, size: u64, iters: u64) -> u64 {
        iters
            .min(self.slots)
            .min(MAX_RING)
            .min(self.ring_bytes / size.max(1))
    }

    /// Posts the ring's receives for messages of `size`; their number.
    pub(crate) fn post_ring(&self, size: u64, iters: u64) -> Result<u64, PerfError> {
        let slots = self.ring_slots(size, iters);
        for j in 0..slots {
            self.repost(j, size)?;
        }
        Ok(slots)
    }

    /// Posts ring buffer `slot` again (its WR id is the slot).
    pub(crate) fn repost(&self, slot: u64, size: u64) -> Result<(), PerfError> {
        let wr = RecvWr {
            wr_id: slot,
            sgl: vec![self.mr.sge(self.ring + slot * size, size as u32)],
        };
        self.qp.post_recv(wr).map_err(super::during("post_recv"))
    }

    /// Offset of ring buffer `slot` for messages of `size`.
    pub(crate) fn slot_at(&self, slot: u64, size: u64) -> u64 {
        self.ring + slot * size
    }

    /// Polls the CQ; fails on an unsuccessful completion.
    pub(crate) fn poll(&self, comps: &mut Vec<roce_verbs::Completion>) -> Result<(), PerfError> {
        comps.clear();
        self.cq.poll(comps, 256)?;
        match comps.iter().find(|c| !c.is_success()) {
            Some(c) => Err(PerfError::Failed(report::failed(c))),
            None => Ok(()),
        }
    }
}

/// One data QP of perftest's layout and its region: the peer's target
/// at `[0, area)`, our source at `[area, 2 area)` and, for SEND tests, a
/// ring of receive buffers of `ring_bytes` after them.
pub(crate) struct DataQp {
    pub(crate) mr: MemoryRegion,
    pub(crate) cq: CompletionQueue,
    pub(crate) qp: QueuePair,
    pub(crate) area: u64,
    pub(crate) ring_bytes: u64,
    /// Receives the QP holds at once.
    pub(crate) slots: u64,
}

impl DataQp {
    /// A QP with room for the plan's largest message.
    pub(crate) fn create(ctx: &roce_verbs::Context, p: &Plan) -> Result<DataQp, PerfError> {
        let max = p.max_size();
        let ring_bytes = if p.is_send {
            (p.iters.min(MAX_RING) * max).min(RING_BYTES).max(2 * max)
        } else {
            0
        };
        let slots = if p.is_send { MAX_RING.min(p.iters) } else { 0 };
        let area = max.max(4096);
        let pd = ctx.alloc_pd();
        let access = Access::LOCAL_WRITE
            | Access::REMOTE_WRITE
            | Access::REMOTE_READ
            | Access::REMOTE_ATOMIC;
        let mr = pd
            .reg_mr(vec![0u8; (2 * area + ring_bytes) as usize], access)
            .map_err(super::during("cannot register memory"))?;
        let cq = ctx.create_cq((p.tx_depth + slots) as usize * 2 + 64, None)?;
        let cap = QpCaps {
            max_send_wr: p.tx_depth as u32 + 16,
            max_recv_wr: slots as u32 + 16,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 256,
        };
        let qp = pd
            .create_qp(&QpInitAttr::new(QpType::Rc, &cq, &cq).cap(cap))
            .map_err(super::during("cannot create a QP"))?;
        Ok(DataQp {
            mr,
            cq,
            qp,
            area,
            ring_bytes,
            slots,
        })
    }

    /// This QP as a traffic loop uses it.
    pub(crate) fn lane(&self) -> Lane<'_> {
        Lane {
            mr: &self.mr,
            cq: &self.cq,
            qp: &self.qp,
            target: 0,
            source: self.area,
            ring: 2 * self.area,
            ring_bytes: self.ring_bytes,
            slots: self.slots,
        }
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
    pub(crate) test: Test,
    /// The end of a timed run (`-D`).
    pub(crate) until: Option<Instant>,
    /// A timed run's length in seconds (`-D`), for the progress lines.
    pub(crate) duration: Option<f64>,
    /// Progress lines ([`super::progress::interval`]).
    pub(crate) progress_every: Option<Duration>,
    /// What the peer's messages hold (its pattern), when each received
    /// message of a latency test is checked.
    pub(crate) verify: Option<&'a [u8]>,
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
            Test::WriteBw => SendWr::rdma(wr_id, SendOp::Write, vec![local], addr, rkey),
            Test::ReadBw => SendWr::rdma(wr_id, SendOp::Read, vec![local], addr, rkey),
            Test::AtomicBw => {
                SendWr::rdma(wr_id, SendOp::FetchAdd { add: 1 }, vec![local], addr, rkey)
            }
            _ => SendWr::send(wr_id, vec![local]),
        }
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

/// perftest's requester loop (`run_iter_bw`), or with `recv` both
/// directions of a SEND test at once (`run_iter_bi`): every QP posts
/// `iters` messages keeping `depth` in flight; with `recv` it also takes
/// `iters` SENDs, re-posting the ring (already posted by the caller).
/// The result counts this side's messages on all QPs.
fn requester(t: &Traffic<'_>, recv: bool, watch: &mut impl Watch) -> Result<BwResult, PerfError> {
    const SEND_BIT: u64 = 1 << 62;
    let (iters, n) = (t.iters, t.lanes.len());
    let depth = t.depth.min(iters).max(1);
    let mut c = vec![Counts::default(); n];
    for (q, k) in t.lanes.iter().zip(c.iter_mut()) {
        k.reposted = if recv { q.ring_slots(t.size, iters) } else { 0 };
    }
    let mut times: Vec<Instant> = Vec::with_capacity(t.cap());
    let mut comps = Vec::with_capacity(256);
    let start = Instant::now();
    let mut shown = Progress::new(
        None,
        t.until.is_none().then(|| t.total()),
        t.size,
        t.progress_every,
    );
    let mut finished = 0;
    let mut drain_from: Option<Instant> = None;
    while finished < n {
        let mut progress = false;
        finished = 0;
        // A timed run stops posting at its deadline and waits (a while)
        // for what is in flight.
        let over = t.over() || watch.stopping();
        if over && Instant::now() > *drain_from.get_or_insert_with(Instant::now) + DRAIN {
            break;
        }
        for (i, d) in t.lanes.iter().enumerate() {
            let k = &mut c[i];
            // What the window has room for goes out as one list.
            let room = if over {
                0
            } else {
                (iters.saturating_sub(k.posted)).min(depth.saturating_sub(k.posted - k.sent))
            };
            if room > 0 {
                let first = k.posted;
                let list = (first..first + room).map(|j| t.send_wr(i, SEND_BIT | j));
                let r = d.qp.post_send_list(list);
                k.posted += room;
                r.map_err(|(_, e)| super::during("post_send")(e))?;
            }
            d.poll(&mut comps)?;
            let now = Instant::now();
            for cmp in &comps {
                progress = true;
                if cmp.wr_id & SEND_BIT != 0 {
                    k.sent += 1;
                    times.push(now);
                } else {
                    k.received += 1;
                    if k.reposted < iters {
                        k.reposted += 1;
                        d.repost(cmp.wr_id, t.size)?;
                    }
                }
            }
            if (k.sent == iters && (!recv || k.received == iters)) || (over && k.sent == k.posted) {
                finished += 1;
            }
        }
        shown.tick(times.len() as u64);
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
    let secs = times
        .last()
        .map_or(1e-9, |l| l.duration_since(start).as_secs_f64());
    // A timed run reports no peak (perftest prints 0; ours shows the
    // average): its first completions arrive in bursts.
    let best = if t.until.is_some() {
        0.0
    } else {
        peak(&times, start, depth * n as u64, t.size)
    };
    Ok(BwResult::new(t.size, times.len() as u64, secs, best))
}

/// The BW client (and both sides of a bidirectional WRITE/READ/atomic
/// test).
pub(crate) fn client_traffic(
    t: &Traffic<'_>,
    watch: &mut impl Watch,
) -> Result<BwResult, PerfError> {
    requester(t, false, watch)
}

/// Both sides of a bidirectional SEND BW test: sends and receives.
pub(crate) fn send_duplex(t: &Traffic<'_>, watch: &mut impl Watch) -> Result<BwResult, PerfError> {
    requester(t, true, watch)
}

/// The SEND BW server: counts `iters` receives on every QP (re-posting the
/// ring the caller posted until every message has one) and measures their
/// rate from the first arrival.
pub(crate) fn server_receive(
    t: &Traffic<'_>,
    watch: &mut impl Watch,
) -> Result<BwResult, PerfError> {
    let (iters, size) = (t.iters, t.size);
    let mut got = vec![0u64; t.lanes.len()];
    let mut reposted: Vec<u64> = t.lanes.iter().map(|q| q.ring_slots(size, iters)).collect();
    let mut comps = Vec::with_capacity(256);
    let mut times = Vec::with_capacity(t.cap());
    let mut start = None;
    while got.iter().any(|&g| g < iters) && !t.over() {
        let mut progress = false;
        for (i, d) in t.lanes.iter().enumerate() {
            d.poll(&mut comps)?;
            let now = Instant::now();
            for c in &comps {
                progress = true;
                start.get_or_insert(now);
                got[i] += 1;
                times.push(now);
                if reposted[i] < iters {
                    reposted[i] += 1;
                    d.repost(c.wr_id, size)?;
                }
            }
        }
        if progress {
            watch.progressed();
        } else if !watch.idle(true, &|| {
            let total: u64 = got.iter().sum();
            format!("after {total} of the {} messages", t.total())
        })? {
            break;
        }
    }
    let start = start.unwrap_or_else(Instant::now);
    let secs = times
        .last()
        .map_or(1e-9, |t| t.duration_since(start).as_secs_f64());
    Ok(BwResult::new(
        size,
        times.len() as u64,
        secs,
        peak(&times, start, 64, size),
    ))
}

/// Half of each interval between consecutive time stamps, in µs.
pub(crate) fn half_intervals(stamps: &[Instant]) -> Vec<f64> {
    stamps
        .windows(2)
        .map(|w| w[1].duration_since(w[0]).as_secs_f64() * 1e6 / 2.0)
        .collect()
}

/// Best rate over `depth` consecutive completions.
fn peak(times: &[Instant], start: Instant, depth: u64, size: u64) -> f64 {
    let d = (depth as usize).max(1);
    let mut best = 0.0f64;
    for i in 0..times.len() {
        let (t0, n) = if i >= d {
            (times[i - d], d)
        } else {
            (start, i + 1)
        };
        let dt = times[i].duration_since(t0).as_secs_f64();
        if dt > 0.0 {
            best = best.max((n as u64 * size) as f64 / dt);
        }
    }
    best
}
