//! Bandwidth tests: WRITE, READ, SEND and FETCH_ADD streams with `tx_depth`
//! operations in flight per QP, CQ moderation (one signaled WR in
//! `MODERATION`), and per-size data verification.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use roce_verbs::{RecvWr, Rkey, SendFlags, SendOp, SendWr};
use serde_json::{json, Value};

use super::control::{expect_type, Control};
use super::error::PerfError;
use super::messages::Test;
use super::progress::Progress;
use super::report::{self, BwResult};
use super::setup::Session;

/// Bytes in flight per side across all QPs (the UDP backend's receive
/// buffer is 8 MiB).
const INFLIGHT_BUDGET: u64 = 4 << 20;
/// One signaled work request per this many (perftest's CQ moderation).
const MODERATION: u64 = 64;
/// Receive WR ids carry this bit.
const RECV: u64 = 1 << 63;
/// Verify one received message in this many.
const VERIFY_EVERY: u64 = 64;

fn op_for(test: Test) -> SendOp {
    match test {
        Test::WriteBw => SendOp::Write,
        Test::ReadBw => SendOp::Read,
        Test::SendBw => SendOp::Send,
        _ => SendOp::FetchAdd { add: 1 },
    }
}

/// What one side measured for one size.
struct Measured {
    ops: u64,
    per_qp: Vec<u64>,
    secs: f64,
    peak_bps: f64,
}

pub(super) fn run(s: &mut Session, ctl: &mut Control) -> Result<Vec<Value>, PerfError> {
    let mut out = Vec::new();
    for size in s.params.sizes.clone() {
        if !ctl.next_size(&format!("size {size}"), s.stopping())? {
            break;
        }
        prepare(s, size)?;
        ctl.barrier("go")?;
        let requester = s.is_client || s.params.bidir;
        let mine = drive(s, ctl, size, requester)?;
        let r = exchange(s, ctl, size, &mine)?;
        s.size_done(out.len(), &r);
        out.push(r);
    }
    Ok(out)
}

/// How long a side that stops waits for the peer to say how far it got.
const STOP_GRACE: Duration = Duration::from_secs(3);

/// Clears what this size will fill, and posts the receive ring.
fn prepare(s: &mut Session, size: u64) -> Result<(), PerfError> {
    let test = s.params.test;
    let requester = s.is_client || s.params.bidir;
    let target = !s.is_client || s.params.bidir;
    let zeros = vec![0u8; size as usize];
    // The ring is posted for the first size (every QP's); each receive is
    // reposted as it completes, so the next size finds it queued, and its
    // buffer is max_size long, so any size fits.
    let post_ring = target && test == Test::SendBw && !s.recvs_posted.swap(true, Ordering::Relaxed);
    for q in 0..s.qps.len() {
        let base = s.slot_off(q);
        if target && matches!(test, Test::WriteBw | Test::AtomicBw) {
            let n = if test == Test::AtomicBw {
                8
            } else {
                size as usize
            };
            s.mr.write(base, &zeros[..n])?;
        }
        if requester && matches!(test, Test::ReadBw | Test::AtomicBw) {
            s.mr.write(base + s.max_size, &zeros)?;
        }
        if post_ring {
            for j in 0..s.ring {
                let sge =
                    s.mr.sge(base + 2 * s.max_size + j * s.max_size, s.max_size as u32);
                let wr = RecvWr {
                    wr_id: RECV | (q as u64) << 40 | j,
                    sgl: vec![sge],
                };
                s.qps[q].post_recv(wr).map_err(super::during("post_recv"))?;
            }
        }
    }
    Ok(())
}

/// The measured loop of one side.
fn drive(
    s: &mut Session,
    ctl: &mut Control,
    size: u64,
    requester: bool,
) -> Result<Measured, PerfError> {
    let p = s.params.clone();
    let nq = s.qps.len();
    let receiver = p.test == Test::SendBw && (!s.is_client || p.bidir);
    let per_qp_target = if p.duration.is_some() {
        u64::MAX
    } else {
        p.iters
    };
    let mut posted = vec![0u64; nq];
    let mut done = vec![0u64; nq];
    let mut received = 0u64;
    let mut peer_ops: Option<u64> = None;
    let mut sent_done = false;
    let mut stop_seen = None;
    // (seconds since start, operations completed), when the count changes.
    let mut samples: Vec<(f64, u64)> = vec![(0.0, 0)];
    let op = op_for(p.test);
    // UDP has no flow control: keep what all QPs have in flight within what
    // the peer's receive socket buffers, or overflow drops start go-back-N.
    let depth = (p.tx_depth as u64).min((INFLIGHT_BUDGET / (size.max(1) * nq as u64)).max(2));
    let peer_pattern = s.peer_pattern(size as usize);
    let mut comps = Vec::with_capacity(256);
    let mut batch: Vec<SendWr> = Vec::with_capacity(depth as usize);
    let total = requester.then(|| per_qp_target.saturating_mul(nq as u64));
    let mut progress = Progress::new(p.duration, total, size, s.progress_every);
    let start = Instant::now();
    let deadline = p.duration.map(|d| start + Duration::from_secs_f64(d));
    let mut end_time = None;
    // The peer's messages are read below only until its `done`; a failure
    // it reports after that (a data check on its side) ends the loop here.
    let alarm = ctl.alarm();
    loop {
        alarm.check()?;
        let now = Instant::now();
        let stop_posting = s.stopping() || deadline.is_some_and(|d| now >= d);
        if requester && !stop_posting {
            for q in 0..nq {
                // What the window has room for goes out as one list (one
                // doorbell: a few system calls for a burst of messages).
                let mut next = posted[q];
                while next < per_qp_target && next - done[q] < depth {
                    let seq = next;
                    let local = s.mr.sge(
                        s.slot_off(q) + s.max_size,
                        if p.test.is_atomic() { 8 } else { size as u32 },
                    );
                    let r = &s.remote[q];
                    let mut wr = SendWr::rdma(
                        (q as u64) << 40 | seq,
                        op,
                        vec![local],
                        r.vaddr,
                        Rkey::new(r.rkey),
                    );
                    let last = seq + 1 == per_qp_target;
                    // Signal often enough that a full window always holds a
                    // signaled WR (else progress would never be seen).
                    let every = MODERATION.min(depth);
                    if !(last || seq % every == every - 1) {
                        wr.flags = SendFlags::default();
                    }
                    batch.push(wr);
                    next += 1;
                }
                if !batch.is_empty() {
                    let r = s.qps[q].post_send_list(batch.drain(..));
                    posted[q] = next;
                    if let Err((n, e)) = r {
                        return Err(PerfError::Failed(format!(
                            "post_send (WR {} of the list): {e}",
                            n + 1
                        )));
                    }
                }
            }
        }
        comps.clear();
        s.cq.poll(&mut comps, 256)?;
        for c in &comps {
            if !c.is_success() {
                return Err(PerfError::Failed(report::failed(c)));
            }
            if c.wr_id & RECV != 0 {
                let q = ((c.wr_id & !RECV) >> 40) as usize;
                let j = c.wr_id & 0xff_ffff_ffff;
                received += 1;
                let off = s.slot_off(q) + 2 * s.max_size + j * s.max_size;
                if p.verify && (received % VERIFY_EVERY == 1) {
                    let mut got = vec![0u8; size as usize];
                    s.mr.read(off, &mut got)?;
                    if got != peer_pattern {
                        return Err(PerfError::Failed(format!(
                            "received data differs from what was sent (message {received}, QP {q})"
                        )));
                    }
                }
                let sge = s.mr.sge(off, s.max_size as u32);
                s.qps[q]
                    .post_recv(RecvWr {
                        wr_id: c.wr_id,
                        sgl: vec![sge],
                    })
                    .map_err(super::during("post_recv"))?;
            } else {
                let q = (c.wr_id >> 40) as usize;
                done[q] = (c.wr_id & 0xff_ffff_ffff) + 1;
            }
        }
        let total_done: u64 = done.iter().sum();
        if requester && samples.last().is_none_or(|&(_, d)| d != total_done) {
            samples.push((start.elapsed().as_secs_f64(), total_done));
        }
        progress.tick(total_done);
        let own_finished = !requester
            || (0..nq)
                .all(|q| done[q] == posted[q] && (posted[q] >= per_qp_target || stop_posting));
        if own_finished && !sent_done {
            end_time.get_or_insert_with(|| start.elapsed().as_secs_f64());
            ctl.send(&json!({"type": "done", "ops": total_done, "per_qp": done}))?;
            sent_done = true;
        }
        if peer_ops.is_none() {
            // A passive side just waits; the others poll between CQ rounds.
            let msg = if sent_done && !receiver {
                ctl.recv_poll(Duration::from_millis(100))?
            } else {
                ctl.try_recv()?
            };
            if let Some(m) = msg {
                let m = expect_type(m, "done")?;
                peer_ops = Some(m.get("ops").and_then(Value::as_u64).unwrap_or(0));
            }
        }
        let receive_finished = !receiver || peer_ops.is_some_and(|n| received >= n);
        if sent_done && peer_ops.is_some() && receive_finished {
            break;
        }
        if s.stopping() && sent_done && peer_ops.is_none() {
            // Cut short: the peer was told (a `stop`) and should soon say
            // how far it got; meanwhile this side keeps serving it (a SEND
            // receiver keeps reposting, or the peer would wait on RNR
            // forever). Past the grace, it stops waiting.
            let t = *stop_seen.get_or_insert_with(std::time::Instant::now);
            if t.elapsed() > STOP_GRACE {
                break;
            }
        }
    }
    progress.finish();
    let secs = end_time.unwrap_or_else(|| start.elapsed().as_secs_f64());
    let ops: u64 = done.iter().sum();
    let peak_bps = peak_rate(&samples, secs / 20.0) * size as f64;
    Ok(Measured {
        ops,
        per_qp: done,
        secs,
        peak_bps,
    })
}

/// The highest rate (operations per second) over any window of at least
/// `window` seconds: completions arrive in bursts, so shorter windows
/// would report the burst, not the bandwidth.
fn peak_rate(samples: &[(f64, u64)], window: f64) -> f64 {
    let mut best = 0.0f64;
    let mut lo = 0;
    for hi in 0..samples.len() {
        while lo + 1 < hi && samples[hi].0 - samples[lo + 1].0 >= window {
            lo += 1;
        }
        let dt = samples[hi].0 - samples[lo].0;
        if dt >= window && dt > 0.0 {
            best = best.max((samples[hi].1 - samples[lo].1) as f64 / dt);
        }
    }
    best
}

/// Verifies what the peer did to this side, exchanges measurements, and
/// builds the result row (both directions summed with -b).
fn exchange(
    s: &mut Session,
    ctl: &mut Control,
    size: u64,
    mine: &Measured,
) -> Result<Value, PerfError> {
    let p = &s.params;
    let target = !s.is_client || p.bidir;
    let requester = s.is_client || p.bidir;
    let mut problems = Vec::new();
    ctl.send(&json!({"type": "measured", "ops": mine.ops, "per_qp": mine.per_qp, "secs": mine.secs, "peak": mine.peak_bps}))?;
    let theirs = if s.stopping() {
        ctl.expect_after_stop("measured")?
    } else {
        ctl.expect("measured")?
    };
    let their_ops = theirs.get("ops").and_then(Value::as_u64).unwrap_or(0);
    let their_per_qp: Vec<u64> = theirs
        .get("per_qp")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_u64).collect())
        .unwrap_or_default();
    if p.verify && !s.stopping() {
        let n = size as usize;
        for q in 0..s.qps.len() {
            let base = s.slot_off(q);
            if target && p.test == Test::WriteBw && their_ops > 0 {
                let mut got = vec![0u8; n];
                s.mr.read(base, &mut got)?;
                if got != s.peer_pattern(n) {
                    problems.push(format!("WRITE data on QP {q} differs"));
                }
            }
            if target && p.test == Test::AtomicBw {
                let mut w = [0u8; 8];
                s.mr.read(base, &mut w)?;
                let want = their_per_qp.get(q).copied().unwrap_or(0);
                if u64::from_ne_bytes(w) != want {
                    problems.push(format!(
                        "FETCH_ADD counter on QP {q} is {} after {want} adds",
                        u64::from_ne_bytes(w)
                    ));
                }
            }
            if requester && p.test == Test::ReadBw && mine.ops > 0 {
                let mut got = vec![0u8; n];
                s.mr.read(base + s.max_size, &mut got)?;
                if got != s.peer_pattern(n) {
                    problems.push(format!("READ data on QP {q} differs"));
                }
            }
        }
    }
    ctl.send(&json!({"type": "verified", "problems": problems}))?;
    let peer_v = ctl.expect("verified")?;
    let mut all: Vec<String> = problems;
    if let Some(a) = peer_v.get("problems").and_then(Value::as_array) {
        all.extend(
            a.iter()
                .filter_map(Value::as_str)
                .map(|x| format!("peer: {x}")),
        );
    }
    if !all.is_empty() {
        return Err(PerfError::Failed(format!(
            "data verification failed: {}",
            all.join("; ")
        )));
    }
    // The requester's numbers (both sides' summed when bidirectional).
    let their_secs = theirs.get("secs").and_then(Value::as_f64).unwrap_or(0.0);
    let their_peak = theirs.get("peak").and_then(Value::as_f64).unwrap_or(0.0);
    let mut sides = Vec::new();
    if requester {
        sides.push((mine.ops, mine.secs, mine.peak_bps));
    }
    if p.bidir || !s.is_client {
        sides.push((their_ops, their_secs, their_peak));
    }
    let mut total = BwResult {
        bytes: size,
        iterations: 0,
        avg_bps: 0.0,
        peak_bps: 0.0,
        msg_rate: 0.0,
    };
    for (ops, secs, peak) in sides {
        let r = BwResult::new(size, ops, secs, peak);
        total.iterations = total.iterations.saturating_add(r.iterations);
        total.avg_bps += r.avg_bps;
        total.peak_bps += r.peak_bps;
        total.msg_rate += r.msg_rate;
    }
    let mut v = report::bw_json(&total);
    // Congestion control on this side's QPs (all zero without --cc).
    let cc: Vec<_> = s.qps.iter().map(|q| q.cc_counters()).collect();
    let (ce, sent, recvd) = cc.iter().fold((0, 0, 0), |a, c| {
        (a.0 + c.ce_received, a.1 + c.cnp_sent, a.2 + c.cnp_received)
    });
    let min_rate = cc.iter().map(|c| c.rate_bps).min().unwrap_or(0);
    v["cc"] = json!({"ce_received": ce, "cnp_sent": sent, "cnp_received": recvd, "min_rate_bps": min_rate});
    if ce + sent + recvd > 0 {
        v["note"] = json!(format!(
            " congestion control: {ce} CE-marked packets received, {sent} CNPs sent, {recvd} CNPs received, slowest QP now {:.2} Gb/s",
            min_rate as f64 / 1e9
        ));
    }
    v["row"] = json!(report::bw_row(&total, false));
    v["row_gbits"] = json!(report::bw_row(&total, true));
    Ok(v)
}
