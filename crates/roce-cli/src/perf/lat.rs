//! Latency tests. SEND and WRITE are ping-pongs (the reported latency is
//! half the round trip, as perftest reports it); READ and FETCH_ADD are
//! round trips of one operation, reported whole.
//!
//! The ping-pongs run perftest's loop (`ib_send_lat`, `ib_write_lat`):
//! each side waits for its own SEND or WRITE to complete before it looks
//! for the peer's answer, so the peer's ACK is on the round trip as it is
//! for perftest, and the two report the same quantity (docs/tools.md).

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use roce_verbs::{Completion, RecvWr, Rkey, SendFlags, SendOp, SendWr};
use serde_json::{json, Value};

use super::control::{Control, PeerAlarm};
use super::error::PerfError;
use super::interrupts::Interrupts;
use super::messages::Test;
use super::progress::Progress;
use super::report::{self, LatResult};
use super::setup::Session;

/// The WR id of ping-pong receives.
const RECV_ID: u64 = 1 << 62;

/// Give up on the peer after this long without progress.
const STALL: Duration = Duration::from_secs(10);

/// The checks a busy-polling wait makes every 256 spins: it yields the
/// CPU, ends on Ctrl-C or when the peer reported an error, and gives up
/// after [`STALL`]. The clock starts at the first check: most waits end
/// before, and a clock read can be a system call (see Shared::recent).
struct Watchdog<'a> {
    alarm: &'a PeerAlarm,
    int: &'a Interrupts,
    spins: u32,
    start: Option<Instant>,
}

impl<'a> Watchdog<'a> {
    fn new(alarm: &'a PeerAlarm, int: &'a Interrupts) -> Watchdog<'a> {
        Watchdog {
            alarm,
            int,
            spins: 0,
            start: None,
        }
    }

    /// After an empty spin; `stalled` says what went wrong after STALL.
    fn spin(&mut self, stalled: impl FnOnce() -> String) -> Result<(), PerfError> {
        self.spins += 1;
        if !self.spins.is_multiple_of(256) {
            return Ok(());
        }
        std::thread::yield_now();
        if self.int.stopping() {
            return Err(PerfError::Interrupted("interrupted".into()));
        }
        self.alarm.check()?;
        if self.start.get_or_insert_with(Instant::now).elapsed() > STALL {
            return Err(PerfError::Failed(stalled()));
        }
        Ok(())
    }
}

/// Busy-polls the CQ for one completion (each empty poll also drives the
/// context's progress on this thread).
fn wait_one(s: &Session, alarm: &PeerAlarm) -> Result<Completion, PerfError> {
    let mut dog = Watchdog::new(alarm, &s.int);
    loop {
        if let Some(c) = s.cq.poll_one()? {
            check(&c)?;
            return Ok(c);
        }
        dog.spin(|| {
            let c = s.qps[0].counters();
            format!("no completion for 10 s: the peer stopped responding (QP counters: {c:?})")
        })?;
    }
}

/// Fails on an unsuccessful completion.
fn check(c: &Completion) -> Result<(), PerfError> {
    if c.is_success() {
        return Ok(());
    }
    Err(PerfError::Failed(format!(
        "work request failed: {} ({:?}){}",
        c.status.as_str(),
        c.status,
        super::report::hint(c.status)
    )))
}

/// Messages up to this size are read whole by every look of
/// [`wait_byte`], so that the copy it returns is the data to verify (one
/// read under the engine lock instead of two).
const SNAPSHOT_MAX: usize = 64;

/// Waits until the last byte of this side's target area `[off, off + len)`
/// holds `want`, counting the send completions its polls find off
/// `unreaped`. When `snap` holds `len` bytes (at most [`SNAPSHOT_MAX`]),
/// each look reads the whole area into it, so that on return it holds the
/// message that carried `want`.
fn wait_byte(
    s: &Session,
    alarm: &PeerAlarm,
    off: u64,
    snap: &mut [u8],
    want: u8,
    unreaped: &mut u64,
) -> Result<(), PerfError> {
    let mut dog = Watchdog::new(alarm, &s.int);
    let mut one = [0u8; 1];
    let (look_at, buf) = if snap.is_empty() {
        (off, &mut one[..])
    } else {
        (off + 1 - snap.len() as u64, snap)
    };
    loop {
        // Look at the memory first: a poll that comes after the WRITE
        // landed would send its held ACK alone instead of with our answer.
        s.mr.read(look_at, buf)?;
        if buf.last() == Some(&want) {
            return Ok(());
        }
        // An empty poll drives progress.
        if let Some(c) = s.cq.poll_one()? {
            check(&c)?;
            *unreaped = unreaped.saturating_sub(1);
        }
        dog.spin(|| "the peer's WRITE never arrived: the peer stopped responding".into())?;
    }
}

pub(super) fn run(s: &mut Session, ctl: &mut Control) -> Result<Vec<Value>, PerfError> {
    let mut out = Vec::new();
    for size in s.params.sizes.clone() {
        if !ctl.next_size(&format!("size {size}"), s.stopping())? {
            break;
        }
        let samples = match s.params.test {
            Test::SendLat => ping_pong(s, ctl, size, false)?,
            Test::WriteLat => ping_pong(s, ctl, size, true)?,
            _ => one_sided(s, ctl, size)?,
        };
        let r = results(s, ctl, size, samples)?;
        if r.is_null() {
            break;
        }
        s.size_done(out.len(), &r);
        out.push(r);
    }
    Ok(out)
}

/// SEND or WRITE ping-pong; the client measures.
fn ping_pong(
    s: &mut Session,
    ctl: &mut Control,
    size: u64,
    write: bool,
) -> Result<Vec<f64>, PerfError> {
    let p = s.params.clone();
    // The server of a timed run answers until the client's result comes
    // (it used to wait for a message that never came, 10 s, STALL).
    let alarm = if p.duration.is_some() && !s.is_client {
        ctl.alarm().until_result()
    } else {
        ctl.alarm()
    };
    let qp = s.qps[0].clone();
    let base = s.slot_off(0);
    let r = s.remote[0];
    let n = size as usize;
    // The message: this side's pattern, last byte = iteration tag.
    let mut msg = s.own_pattern(n);
    let peer = s.peer_pattern(n);
    let recv_off = base + 2 * s.max_size;
    // max_size long: the two receives still queued when a size ends serve
    // the next, larger one of `-a`.
    let post_recv = |s: &Session| -> Result<(), PerfError> {
        let sge = s.mr.sge(recv_off, s.max_size as u32);
        qp.post_recv(RecvWr {
            wr_id: RECV_ID,
            sgl: vec![sge],
        })
        .map_err(|e| PerfError::Failed(format!("post_recv: {e}")))
    };
    if !write {
        if !s.recvs_posted.swap(true, Ordering::Relaxed) {
            post_recv(s)?;
            post_recv(s)?;
        }
    } else {
        s.mr.write(base, &vec![0u8; n])?;
    }
    ctl.barrier("go")?;
    let iters = if p.duration.is_some() {
        u64::MAX
    } else {
        p.iters
    };
    let deadline = p
        .duration
        .map(|d| Instant::now() + Duration::from_secs_f64(d));
    let mut progress = Progress::new(
        p.duration,
        s.is_client.then_some(iters),
        size,
        s.progress_every,
    );
    let mut samples = Vec::with_capacity(p.iters.min(1 << 24) as usize);
    let mut i = 0u64;
    let mut pending_recv = 0u64;
    // Signaled sends whose completion has not been polled yet.
    let mut unreaped = 0u64;
    let inline = n <= 256 && !write;
    // What arrived, for the data check (one buffer for the whole run); a
    // small WRITE is copied into it by the look that sees it arrive.
    let mut got = vec![0u8; n];
    let snapshot = p.verify && write && n <= SNAPSHOT_MAX;
    while i < iters && !s.stopping() && deadline.is_none_or(|d| Instant::now() < d || !s.is_client)
    {
        let tag = (i % 255) as u8 + 1;
        let send = |s: &Session, msg: &mut Vec<u8>| -> Result<(), PerfError> {
            if let Some(last) = msg.last_mut() {
                *last = tag;
            }
            s.mr.write(base + s.max_size, msg)?;
            let sge = s.mr.sge(base + s.max_size, n as u32);
            let mut wr = if write {
                SendWr::rdma(i, SendOp::Write, vec![sge], r.vaddr, Rkey::new(r.rkey))
            } else {
                SendWr::send(i, vec![sge])
            };
            wr.flags = SendFlags::SIGNALED
                | if inline {
                    SendFlags::INLINE
                } else {
                    SendFlags::default()
                };
            qp.post_send(wr)
                .map_err(|e| PerfError::Failed(format!("post_send: {e}")))
        };
        // Waits for the peer's message (a WRITE of up to SNAPSHOT_MAX
        // bytes is copied into `got` as it is seen).
        let receive = |s: &Session, got: &mut [u8], pending_recv: &mut u64, unreaped: &mut u64| {
            if write {
                let snap = if snapshot {
                    &mut got[..n]
                } else {
                    &mut got[..0]
                };
                wait_byte(s, &alarm, base + n as u64 - 1, snap, tag, unreaped)?;
            } else {
                while *pending_recv == 0 {
                    if wait_one(s, &alarm)?.wr_id == RECV_ID {
                        *pending_recv += 1;
                    } else {
                        *unreaped = unreaped.saturating_sub(1);
                    }
                }
                *pending_recv -= 1;
                post_recv(s)?;
            }
            Ok::<(), PerfError>(())
        };
        // The message that arrived is the peer's pattern with this
        // iteration's tag (read here unless `receive` copied it already;
        // the peer sends nothing more into it until this side answers).
        let verified = |s: &Session, got: &mut [u8]| -> Result<(), PerfError> {
            if !p.verify {
                return Ok(());
            }
            if !snapshot {
                s.mr.read(if write { base } else { recv_off }, &mut got[..n])?;
            }
            if got[..n - 1] != peer[..n - 1] || got[n - 1] != tag {
                return Err(PerfError::Failed(format!(
                    "iteration {i}: the data received differs from what was sent"
                )));
            }
            Ok(())
        };
        // perftest polls its send CQ after each post until the completion
        // (every send of its latency tests is signaled); a receive
        // completion seen meanwhile is kept for `receive`.
        let completed = |s: &Session, pending_recv: &mut u64, unreaped: &mut u64| {
            while *unreaped > 0 {
                if wait_one(s, &alarm)?.wr_id == RECV_ID {
                    *pending_recv += 1;
                } else {
                    *unreaped -= 1;
                }
            }
            Ok::<(), PerfError>(())
        };
        let t0 = Instant::now();
        if s.is_client {
            send(s, &mut msg)?;
            unreaped += 1;
            let answered = completed(s, &mut pending_recv, &mut unreaped)
                .and_then(|()| receive(s, &mut got, &mut pending_recv, &mut unreaped));
            match answered {
                Ok(()) => samples.push(t0.elapsed().as_secs_f64() * 1e6 / 2.0),
                // Ctrl-C while waiting: report what was measured.
                Err(_) if s.stopping() => break,
                Err(e) => return Err(e),
            }
            verified(s, &mut got)?;
        } else {
            match receive(s, &mut got, &mut pending_recv, &mut unreaped) {
                Ok(()) => {}
                // The client stopped (duration over or interrupted).
                Err(_) if p.duration.is_some() || s.stopping() => break,
                Err(e) => return Err(e),
            }
            // Checked before answering: the answer lets the peer send the
            // next message into the same place.
            verified(s, &mut got)?;
            send(s, &mut msg)?;
            unreaped += 1;
            // Not after the last answer: the client may be gone by the
            // time it is acknowledged (its last ACK, sent as its QP is
            // destroyed, can be lost, and nobody would answer a resend).
            if i + 1 == iters {
                break;
            }
            match completed(s, &mut pending_recv, &mut unreaped) {
                Ok(()) => {}
                Err(_) if p.duration.is_some() || s.stopping() => break,
                Err(e) => return Err(e),
            }
        }
        progress.tick(i);
        i += 1;
    }
    progress.finish();
    Ok(samples)
}

/// READ or FETCH_ADD round trips; the server is passive.
fn one_sided(s: &mut Session, ctl: &mut Control, size: u64) -> Result<Vec<f64>, PerfError> {
    let p = s.params.clone();
    let alarm = ctl.alarm();
    let base = s.slot_off(0);
    let r = s.remote[0];
    ctl.barrier("go")?;
    let mut samples = Vec::new();
    if s.is_client {
        let qp = s.qps[0].clone();
        let deadline = p
            .duration
            .map(|d| Instant::now() + Duration::from_secs_f64(d));
        let iters = if p.duration.is_some() {
            u64::MAX
        } else {
            p.iters
        };
        let mut progress = Progress::new(p.duration, Some(iters), size, s.progress_every);
        let mut i = 0;
        let len = if p.test == Test::AtomicLat {
            8
        } else {
            size as u32
        };
        while i < iters && !s.stopping() && deadline.is_none_or(|d| Instant::now() < d) {
            let sge = s.mr.sge(base + s.max_size, len);
            let op = if p.test == Test::AtomicLat {
                SendOp::FetchAdd { add: 1 }
            } else {
                SendOp::Read
            };
            let wr = SendWr::rdma(i, op, vec![sge], r.vaddr, Rkey::new(r.rkey));
            let t0 = Instant::now();
            qp.post_send(wr).map_err(super::during("post_send"))?;
            match wait_one(s, &alarm) {
                Ok(_) => samples.push(t0.elapsed().as_secs_f64() * 1e6),
                Err(_) if s.stopping() => break,
                Err(e) => return Err(e),
            }
            progress.tick(i);
            i += 1;
        }
        progress.finish();
        // An interrupted run may leave its last operation in flight.
        let interrupted = s.stopping();
        if p.verify && !samples.is_empty() && !interrupted {
            let mut got = vec![0u8; len as usize];
            s.mr.read(base + s.max_size, &mut got)?;
            if p.test == Test::AtomicLat {
                let orig = u64::from_ne_bytes(got.try_into().unwrap_or([0; 8]));
                if orig != i - 1 {
                    return Err(PerfError::Failed(format!(
                        "FETCH_ADD returned {orig} on its {i}th add (expected {})",
                        i - 1
                    )));
                }
            } else if got != s.peer_pattern(len as usize) {
                return Err(PerfError::Data(
                    "READ data differs from the peer's memory".into(),
                ));
            }
        }
        ctl.send(&json!({"type": "done", "ops": i, "interrupted": interrupted}))?;
    } else {
        // The passive side busy-polls its CQ, which runs the context's
        // progress on this thread: each READ or atomic is served as it
        // arrives, instead of waking the progress thread per request (a
        // context switch on the round trip, ~100 us under an emulated CPU).
        let mut spins = 0u32;
        loop {
            let _ = s.cq.poll_one()?;
            if let Some(m) = ctl.try_recv()? {
                let ops = m.get("ops").and_then(Value::as_u64).unwrap_or(0);
                let interrupted = m
                    .get("interrupted")
                    .and_then(Value::as_bool)
                    .unwrap_or(false);
                if p.verify && p.test == Test::AtomicLat && !interrupted {
                    let mut w = [0u8; 8];
                    s.mr.read(base, &mut w)?;
                    if u64::from_ne_bytes(w) != ops {
                        return Err(PerfError::Failed(format!(
                            "the FETCH_ADD counter is {} after {ops} adds",
                            u64::from_ne_bytes(w)
                        )));
                    }
                }
                break;
            }
            spins = spins.wrapping_add(1);
            if spins.is_multiple_of(256) {
                std::thread::yield_now();
                if s.stopping() {
                    break;
                }
            }
        }
    }
    Ok(samples)
}

/// The client sends its statistics; both sides return the row.
fn results(
    s: &mut Session,
    ctl: &mut Control,
    size: u64,
    mut samples: Vec<f64>,
) -> Result<Value, PerfError> {
    if s.is_client {
        let Some(r) = LatResult::from_samples(size, &mut samples) else {
            if s.stopping() {
                // Cut short before this size measured anything: no row
                // (the sizes before it keep theirs), and the peer is told.
                ctl.send(&json!({"type": "result", "result": null}))?;
                return Ok(Value::Null);
            }
            return Err(PerfError::Failed("no iteration completed".into()));
        };
        let mut v = report::lat_json(&r);
        v["row"] = json!(report::lat_row(&r));
        ctl.send(&json!({"type": "result", "result": v}))?;
        Ok(v)
    } else {
        let m = if s.stopping() {
            ctl.expect_after_stop("result")?
        } else {
            ctl.expect("result")?
        };
        Ok(m.get("result").cloned().unwrap_or(Value::Null))
    }
}
