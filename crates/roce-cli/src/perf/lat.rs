//! Latency tests over roce perf's own exchange: the sizes, the data
//! each side's message holds and the check of what arrives, the report;
//! the loops are the shared ones ([`super::traffic_lat`], perftest's
//! shape). SEND and WRITE are ping-pongs (the reported latency is half
//! the round trip, as perftest reports it); READ and FETCH_ADD are round
//! trips of one operation, reported whole, while the server only serves.

use std::time::{Duration, Instant};

use roce_verbs::Rkey;
use serde_json::{json, Value};

use super::control::{Control, PeerAlarm};
use super::error::PerfError;
use super::interrupts::Interrupts;
use super::messages::Test;
use super::report::{self, LatResult};
use super::setup::Session;
use super::traffic::{Traffic, Watch};
use super::traffic_lat::{self, send_ping_pong, write_ping_pong};

/// Give up on the peer after this long without progress.
const STALL: Duration = Duration::from_secs(10);

/// roce perf's exchange as a traffic loop sees it: the peer's error (or,
/// for the server of a timed test, its result) as the control
/// connection's reader thread notes it, Ctrl-C here or at the peer, and
/// a stall of [`STALL`]. Each idle check yields the CPU. The clock
/// starts at the first check: most waits end before.
pub(super) struct NativeWatch<'a> {
    alarm: &'a PeerAlarm,
    int: &'a Interrupts,
    since: Option<Instant>,
    progressed: bool,
}

impl<'a> NativeWatch<'a> {
    pub(super) fn new(alarm: &'a PeerAlarm, int: &'a Interrupts) -> NativeWatch<'a> {
        NativeWatch {
            alarm,
            int,
            since: None,
            progressed: false,
        }
    }
}

impl Watch for NativeWatch<'_> {
    fn progressed(&mut self) {
        self.progressed = true;
    }

    fn idle(&mut self, _look: bool, what: &dyn Fn() -> String) -> Result<bool, PerfError> {
        std::thread::yield_now();
        if self.int.stopping() {
            return Ok(false);
        }
        match self.alarm.check() {
            // The client of a timed test sent its result: its loop is over.
            Err(PerfError::PeerFinished) => return Ok(false),
            r => r?,
        }
        let now = Instant::now();
        if std::mem::take(&mut self.progressed) {
            self.since = Some(now);
        }
        if now - *self.since.get_or_insert(now) > STALL {
            return Err(PerfError::Failed(format!(
                "no completion for {} s {}: the peer stopped responding",
                STALL.as_secs(),
                what()
            )));
        }
        Ok(true)
    }

    fn stopping(&self) -> bool {
        self.int.stopping()
    }
}

pub(super) fn run(s: &mut Session, ctl: &mut Control) -> Result<Vec<Value>, PerfError> {
    let mut out = Vec::new();
    for size in s.params.sizes.clone() {
        if !ctl.next_size(&format!("size {size}"), s.stopping())? {
            break;
        }
        let (samples, sends) = match s.params.test {
            Test::SendLat | Test::WriteLat => (ping_pong(s, ctl, size)?, 1),
            _ => (one_sided(s, ctl, size)?, 0),
        };
        let r = results(s, ctl, size, samples, sends)?;
        if r.is_null() {
            break;
        }
        s.size_done(out.len(), &r);
        out.push(r);
    }
    Ok(out)
}

/// The loop of one side of a run: `iters` (or `-D`) from now, on QP 0.
fn traffic<'a>(
    s: &Session,
    lanes: &'a [super::lane::Lane<'a>],
    remotes: &'a [(u64, Rkey)],
    size: u64,
    verify: Option<&'a [u8]>,
) -> Traffic<'a> {
    let p = &s.params;
    Traffic {
        lanes,
        remotes,
        size,
        iters: if p.duration.is_some() {
            u64::MAX
        } else {
            p.iters
        },
        depth: 1,
        cq_mod: 1,
        test: p.test,
        until: p
            .duration
            .map(|d| Instant::now() + Duration::from_secs_f64(d)),
        duration: p.duration,
        progress_every: s.progress_every,
        verify,
        peer_says_sent: false,
    }
}

/// SEND or WRITE ping-pong; the client measures. Each side's message is
/// its pattern (a WRITE's last byte is the count the loop writes), checked
/// on arrival unless `--no-verify`.
fn ping_pong(s: &mut Session, ctl: &mut Control, size: u64) -> Result<Vec<f64>, PerfError> {
    let p = s.params.clone();
    // The server of a timed run answers until the client's result comes.
    let alarm = if p.duration.is_some() && !s.is_client {
        ctl.alarm().until_result()
    } else {
        ctl.alarm()
    };
    let lane = s.lane(0);
    let n = size as usize;
    s.mr.write(lane.source, &s.own_pattern(n))?;
    if p.test == Test::WriteLat {
        s.mr.write(lane.target, &vec![0u8; n])?;
    } else {
        let iters = if p.duration.is_some() {
            u64::MAX
        } else {
            p.iters
        };
        lane.post_ring(size, iters)?;
    }
    let peer = s.peer_pattern(n);
    let r = s.remote[0];
    let (lanes, remotes) = ([lane], [(r.vaddr, Rkey::new(r.rkey))]);
    ctl.barrier("go")?;
    let t = traffic(s, &lanes, &remotes, size, p.verify.then_some(&peer[..]));
    let mut watch = NativeWatch::new(&alarm, &s.int);
    if p.test == Test::WriteLat {
        write_ping_pong(&t, s.is_client, &mut watch)
    } else {
        send_ping_pong(&t, s.is_client, &mut watch)
    }
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
        let lanes = [s.lane(0)];
        let remotes = [(r.vaddr, Rkey::new(r.rkey))];
        let t = traffic(s, &lanes, &remotes, size, None);
        samples = traffic_lat::one_sided(&t, &mut NativeWatch::new(&alarm, &s.int))?;
        let i = samples.len() as u64;
        let len = t.len();
        // An interrupted run may leave its last operation in flight.
        let interrupted = s.stopping();
        if p.verify && !samples.is_empty() && !interrupted {
            let mut got = vec![0u8; len as usize];
            s.mr.read(base + s.max_size, &mut got)?;
            if p.test == Test::AtomicLat {
                let orig = u64::from_ne_bytes(got.try_into().unwrap_or([0; 8]));
                if orig != i - 1 {
                    return Err(PerfError::Data(format!(
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
            let _ = s.cqs[0].poll_one()?;
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
                        return Err(PerfError::Data(format!(
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

/// The client sends its statistics; both sides return the row. `sends`:
/// 1 for a ping-pong, whose samples are the intervals between sends.
fn results(
    s: &mut Session,
    ctl: &mut Control,
    size: u64,
    mut samples: Vec<f64>,
    sends: u64,
) -> Result<Value, PerfError> {
    if s.is_client {
        // A ping-pong's n sends make n - 1 intervals.
        let r = LatResult::from_samples(size, &mut samples).map(|mut r| {
            r.iterations += sends;
            r
        });
        let Some(r) = r else {
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
