//! The traffic loops of `roce perf --perftest`, shaped like perftest's
//! `run_iter_*` functions so that the two ends agree on who posts what:
//! the BW requester (any number of QPs, `iters` messages on each, `depth`
//! in flight per QP), the SEND BW receiver, the bidirectional SEND loop,
//! and the three latency ping-pongs (SEND, WRITE, READ/atomic). With `-D`
//! every loop runs until its deadline instead of counting to `iters`.

use std::net::TcpStream;
use std::time::{Duration, Instant};

use roce_verbs::{Access, QpCaps, QpInitAttr, QpType, RecvWr, Rkey, SendOp, SendWr};

use super::error::PerfError;
use super::messages::Test;
use super::perftest_peer::PeerWatch;
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
/// After a timed WRITE ping-pong, how long the QP stays to acknowledge
/// the peer's last WRITE (the test has no closing round).
const LINGER: Duration = Duration::from_millis(500);

/// One data QP and its region: the peer's target at `[0, area)`, our
/// source at `[area, 2 area)` and, for SEND tests, a ring of receive
/// buffers of `ring_bytes` after them.
pub(crate) struct DataQp {
    pub(crate) mr: roce_verbs::MemoryRegion,
    pub(crate) cq: roce_verbs::CompletionQueue,
    pub(crate) qp: roce_verbs::QueuePair,
    pub(crate) area: u64,
    pub(crate) ring_bytes: u64,
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
        })
    }

    /// Receive buffers of `size` bytes the ring holds for `iters` messages.
    pub(crate) fn ring_slots(&self, size: u64, iters: u64) -> u64 {
        iters.min(MAX_RING).min(self.ring_bytes / size.max(1))
    }

    /// Posts the ring's receives for messages of `size`; their number.
    pub(crate) fn post_ring(&self, size: u64, iters: u64) -> Result<u64, PerfError> {
        let slots = self.ring_slots(size, iters);
        for j in 0..slots {
            self.repost(j, size)?;
        }
        Ok(slots)
    }

    fn repost(&self, slot: u64, size: u64) -> Result<(), PerfError> {
        let wr = RecvWr {
            wr_id: slot,
            sgl: vec![self.mr.sge(2 * self.area + slot * size, size as u32)],
        };
        self.qp
            .post_recv(wr)
            .map_err(|e| PerfError::Failed(format!("post_recv: {e}")))
    }

    fn poll(&self, comps: &mut Vec<roce_verbs::Completion>) -> Result<(), PerfError> {
        comps.clear();
        self.cq.poll(comps, 256)?;
        match comps.iter().find(|c| !c.is_success()) {
            Some(c) => Err(PerfError::Failed(report::failed(c))),
            None => Ok(()),
        }
    }
}

/// What one run of a traffic loop needs: the QPs, the peer's buffer for
/// each, the message size and count (per QP) and the send depth per QP.
pub(crate) struct Traffic<'a> {
    pub(crate) qps: &'a [DataQp],
    pub(crate) remotes: &'a [(u64, Rkey)],
    pub(crate) size: u64,
    /// Messages per QP (`u64::MAX` in a timed run).
    pub(crate) iters: u64,
    pub(crate) depth: u64,
    pub(crate) test: Test,
    /// The end of a timed run (`-D`).
    pub(crate) until: Option<Instant>,
    /// The TCP control connection, looked at while a loop waits for the
    /// peer ([`PeerWatch`]); `None` over rdma_cm.
    pub(crate) peer: Option<&'a TcpStream>,
    /// Progress lines ([`super::progress::interval`]).
    pub(crate) progress_every: Option<Duration>,
}

impl Traffic<'_> {
    fn total(&self) -> u64 {
        self.iters.saturating_mul(self.qps.len() as u64)
    }

    /// A timed run's deadline has passed.
    fn over(&self) -> bool {
        self.until.is_some_and(|u| Instant::now() >= u)
    }

    /// Room for this many time stamps.
    fn cap(&self) -> usize {
        self.total().min(1 << 20) as usize
    }

    fn send_wr(&self, q: usize, wr_id: u64) -> SendWr {
        let d = &self.qps[q];
        let local = d.mr.sge(d.area, self.size as u32);
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
fn requester(t: &Traffic<'_>, recv: bool) -> Result<BwResult, PerfError> {
    const SEND_BIT: u64 = 1 << 62;
    let (iters, n) = (t.iters, t.qps.len());
    let depth = t.depth.min(iters).max(1);
    let mut c = vec![Counts::default(); n];
    for (q, k) in t.qps.iter().zip(c.iter_mut()) {
        k.reposted = if recv { q.ring_slots(t.size, iters) } else { 0 };
    }
    let mut times: Vec<Instant> = Vec::with_capacity(t.cap());
    let mut comps = Vec::with_capacity(256);
    let start = Instant::now();
    let mut watch = PeerWatch::new(t.peer);
    let mut shown = Progress::new(
        None,
        t.until.is_none().then(|| t.total()),
        t.size,
        t.progress_every,
    );
    let mut finished = 0;
    while finished < n {
        let mut progress = false;
        finished = 0;
        // A timed run stops posting at its deadline and waits (a while)
        // for what is in flight.
        let over = t.over();
        if over && t.until.is_some_and(|u| Instant::now() > u + DRAIN) {
            break;
        }
        for (i, d) in t.qps.iter().enumerate() {
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
        watch.round(progress, false, || {
            let (s, r): (u64, u64) = c
                .iter()
                .map(|k| (k.sent, k.received))
                .fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1));
            format!("after {s} of {} messages sent ({r} received)", t.total())
        })?;
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
pub(crate) fn client_traffic(t: &Traffic<'_>) -> Result<BwResult, PerfError> {
    requester(t, false)
}

/// Both sides of a bidirectional SEND BW test: sends and receives.
pub(crate) fn send_duplex(t: &Traffic<'_>) -> Result<BwResult, PerfError> {
    requester(t, true)
}

/// The SEND BW server: counts `iters` receives on every QP (re-posting the
/// ring the caller posted until every message has one) and measures their
/// rate from the first arrival.
pub(crate) fn server_receive(t: &Traffic<'_>) -> Result<BwResult, PerfError> {
    let (iters, size) = (t.iters, t.size);
    let mut got = vec![0u64; t.qps.len()];
    let mut reposted: Vec<u64> = t.qps.iter().map(|q| q.ring_slots(size, iters)).collect();
    let mut comps = Vec::with_capacity(256);
    let mut times = Vec::with_capacity(t.cap());
    let mut start = None;
    let mut watch = PeerWatch::new(t.peer);
    while got.iter().any(|&g| g < iters) && !t.over() {
        let mut progress = false;
        for (i, d) in t.qps.iter().enumerate() {
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
        watch.round(progress, true, || {
            let total: u64 = got.iter().sum();
            format!("after {total} of the {} messages", t.total())
        })?;
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

/// Runs a latency test's traffic on the first QP (the server of a
/// READ/atomic test only waits); the statistics, or `None` where this side
/// measures nothing. SEND tests need the ring posted first.
pub(crate) fn run_lat(
    t: &Traffic<'_>,
    client: bool,
) -> Result<Option<report::LatResult>, PerfError> {
    let mut samples = match t.test {
        Test::SendLat => send_ping_pong(t, client)?,
        Test::WriteLat => write_ping_pong(t, client)?,
        _ if client => one_sided(t)?,
        _ => Vec::new(),
    };
    // perftest prints the iterations asked for (n sends make n - 1
    // intervals).
    let n = samples.len() as u64 + 1;
    Ok(
        report::LatResult::from_samples(t.size, &mut samples).map(|mut r| {
            r.iterations = if t.until.is_some() { n } else { t.iters };
            r
        }),
    )
}

/// perftest's WRITE latency loop: each side WRITEs `size` bytes whose
/// last byte is its write count into the peer's buffer, and waits until
/// its own buffer's last byte shows the peer's count. The server writes
/// first (perftest's condition `!(scnt < 1 && machine == SERVER)`): a side
/// that wrote early would see the peer's next count overwrite the one it
/// waits for. After each WRITE it polls until the WRITE completed, as
/// perftest does. Latency: half the time between consecutive writes. With
/// `-a` the sizes grow, so each size's count byte is one no earlier size
/// wrote.
pub(crate) fn write_ping_pong(t: &Traffic<'_>, client: bool) -> Result<Vec<f64>, PerfError> {
    let d = &t.qps[0];
    let (size, iters) = (t.size, t.iters);
    let mut stamps = Vec::with_capacity(t.cap());
    let mut comps = Vec::with_capacity(16);
    let mut watch = PeerWatch::new(t.peer);
    let last = size - 1;
    // Our WRITEs completed so far.
    let mut done = 0u64;
    // Waits until our buffer's count byte shows `want`, or with `None`
    // until all `posted` WRITEs completed; false when a timed run ended
    // first.
    let mut wait_for = |want: Option<u8>,
                        posted: u64,
                        comps: &mut Vec<roce_verbs::Completion>|
     -> Result<bool, PerfError> {
        let mut b = [0u8; 1];
        let mut spins = 0u32;
        loop {
            d.poll(comps)?;
            done += comps.len() as u64;
            if !comps.is_empty() {
                watch.progressed();
            }
            match want {
                Some(w) => {
                    d.mr.read(last, &mut b)?;
                    if b[0] == w {
                        return Ok(true);
                    }
                    if t.over() {
                        return Ok(false);
                    }
                }
                None if done == posted => return Ok(true),
                None => {}
            }
            spins = spins.wrapping_add(1);
            if spins.is_multiple_of(256) {
                // The peer's write is what this side waits for: a peer
                // that finished (or left) will not write again.
                watch.check(want.is_some(), || {
                    format!("after {posted} of the {iters} iterations")
                })?;
            }
        }
    };
    let mut posted = 0u64;
    while posted < iters {
        let n = posted + 1;
        // The client waits for the server's write n; the server, after
        // its first write, for the client's write n - 1.
        let want = if client {
            Some(n as u8)
        } else {
            (n > 1).then(|| (n - 1) as u8)
        };
        if let Some(w) = want {
            if !wait_for(Some(w), posted, &mut comps)? {
                break;
            }
        }
        if t.over() {
            break;
        }
        d.mr.write(d.area + last, &[n as u8])?;
        stamps.push(Instant::now());
        let (addr, rkey) = t.remotes[0];
        let wr = SendWr::rdma(
            n,
            SendOp::Write,
            vec![d.mr.sge(d.area, size as u32)],
            addr,
            rkey,
        );
        d.qp.post_send(wr).map_err(super::during("post_send"))?;
        posted = n;
        // perftest polls until the WRITE completed before it looks for
        // the peer's (the ACK is on the round trip).
        wait_for(None, posted, &mut comps)?;
    }
    // The server's last write is answered by the client's last one.
    if !client && t.until.is_none() {
        wait_for(Some(iters as u8), posted, &mut comps)?;
    }
    // Every WRITE acknowledged before the next size (or the exit: the
    // test has no closing round, so a process that left with its last
    // WRITE unsent would leave the peer waiting).
    wait_for(None, posted, &mut comps)?;
    if t.until.is_some() {
        // A timed run ends on each side's own clock: the peer may still
        // answer our last WRITE with one of its own, which must be
        // acknowledged (rxe's perftest waits for that completion forever)
        // before the process exits.
        std::thread::sleep(LINGER);
    }
    Ok(half_intervals(&stamps))
}

/// perftest's READ / atomic latency loop (client only): one operation at
/// a time; latency is each operation's completion time.
pub(crate) fn one_sided(t: &Traffic<'_>) -> Result<Vec<f64>, PerfError> {
    let d = &t.qps[0];
    let op = if t.test == Test::AtomicLat {
        SendOp::FetchAdd { add: 1 }
    } else {
        SendOp::Read
    };
    let (addr, rkey) = t.remotes[0];
    let mut samples = Vec::with_capacity(t.cap());
    let mut comps = Vec::with_capacity(4);
    let mut watch = PeerWatch::new(t.peer);
    for n in 0..t.iters {
        if t.over() {
            break;
        }
        let t0 = Instant::now();
        let wr = SendWr::rdma(n, op, vec![d.mr.sge(d.area, t.size as u32)], addr, rkey);
        d.qp.post_send(wr).map_err(super::during("post_send"))?;
        let mut spins = 0u32;
        loop {
            d.poll(&mut comps)?;
            if !comps.is_empty() {
                watch.progressed();
                break;
            }
            spins = spins.wrapping_add(1);
            if spins.is_multiple_of(256) {
                watch.check(false, || format!("after {n} of {} operations", t.iters))?;
            }
        }
        samples.push(t0.elapsed().as_secs_f64() * 1e6);
    }
    Ok(samples)
}

/// perftest's SEND latency loop: the client sends first, each side sends
/// after each receive (re-posting it); the latency of each iteration is
/// half the time between two consecutive sends of this side, as perftest
/// computes it (microseconds). The caller posted the ring.
pub(crate) fn send_ping_pong(t: &Traffic<'_>, client: bool) -> Result<Vec<f64>, PerfError> {
    const SEND_BIT: u64 = 1 << 62;
    let d = &t.qps[0];
    let (size, iters) = (t.size, t.iters);
    let mut stamps = Vec::with_capacity(t.cap());
    let mut comps = Vec::with_capacity(16);
    let mut reposted = d.ring_slots(size, iters);
    let (mut sent, mut received) = (0u64, 0u64);
    let mut watch = PeerWatch::new(t.peer);
    let mut spins = 0u32;
    // The peer's messages are what this side waits for: a peer that
    // finished (or left) sends no more.
    let mut idle = |watch: &mut PeerWatch<'_>, sent: u64, received: u64| {
        spins = spins.wrapping_add(1);
        if spins.is_multiple_of(256) {
            watch.check(true, || {
                format!("after {sent} sends and {received} receives of the {iters} iterations")
            })
        } else {
            Ok(())
        }
    };
    // Each SEND's id carries the size, so that the last SEND of the
    // previous size, whose completion may come late, is not taken for
    // one of this size's.
    let id = |n: u64| SEND_BIT | size << 32 | n;
    // This size's last SEND has completed.
    let mut completed = true;
    let mut take =
        |comps: &[roce_verbs::Completion], sent: u64, received: &mut u64, completed: &mut bool| {
            for c in comps {
                if c.wr_id & SEND_BIT != 0 {
                    *completed |= sent > 0 && c.wr_id == id(sent - 1);
                    continue;
                }
                *received += 1;
                if reposted < iters {
                    reposted += 1;
                    d.repost(c.wr_id, size)?;
                }
            }
            Ok::<(), PerfError>(())
        };
    while sent < iters && !t.over() {
        // The server (and the client after its first send) waits for the
        // peer's message before sending, and, as perftest (whose every
        // latency SEND is signaled), for its SEND's completion before
        // anything else.
        if completed && (client && sent == 0 || received > sent - u64::from(client)) {
            stamps.push(Instant::now());
            let wr = SendWr::send(id(sent), vec![d.mr.sge(d.area, size as u32)]);
            d.qp.post_send(wr).map_err(super::during("post_send"))?;
            sent += 1;
            completed = false;
            continue;
        }
        d.poll(&mut comps)?;
        take(&comps, sent, &mut received, &mut completed)?;
        if comps.is_empty() {
            idle(&mut watch, sent, received)?;
        } else {
            watch.progressed();
        }
    }
    // The client's last reply arrives after its last send. The server
    // does not wait for its last SEND's completion: the client may be
    // gone by then (its last ACK can be lost, and nobody would answer a
    // resend).
    while client && (received < iters || !completed) && !t.over() {
        d.poll(&mut comps)?;
        take(&comps, sent, &mut received, &mut completed)?;
        if comps.is_empty() {
            idle(&mut watch, sent, received)?;
        } else {
            watch.progressed();
        }
    }
    Ok(half_intervals(&stamps))
}

/// Half of each interval between consecutive time stamps, in µs.
fn half_intervals(stamps: &[Instant]) -> Vec<f64> {
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
