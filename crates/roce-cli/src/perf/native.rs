//! roce perf's own exchange as a [`ControlPlane`]: before every size a
//! barrier where both sides agree whether to go on (Ctrl-C here or at the
//! peer) and one before the traffic; during a BW loop each side's count
//! in a `done` as soon as its sends are over; after it the measurements
//! and the checks of the data (BW: [`super::native_report`]), or the
//! client's latency result. The messages are [`super::messages`].

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::control::{expect_type, Control, PeerAlarm};
use super::error::PerfError;
use super::interrupts::Interrupts;
use super::messages::endpoints_from_json;
use super::messages::{Params, Test};
use super::plane::{After, CheckPeer, ControlPlane, Endpoints, Measured, Run};
use super::traffic::Watch;

/// Give up on the peer after this long without progress.
const STALL: Duration = Duration::from_secs(10);
/// How long a side that stops waits for the peer to say how far it got.
const STOP_GRACE: Duration = Duration::from_secs(3);

/// One side of roce perf's exchange, once the QPs are connected.
pub(crate) struct NativePlane<'a> {
    pub(super) ctl: &'a mut Control,
    pub(super) params: Params,
    pub(super) client: bool,
    pub(super) int: Interrupts,
    /// The peer's error (or, for the server of a timed ping-pong, its
    /// result) as the control connection's reader thread notes it.
    alarm: PeerAlarm,
    /// The peer's `done` count of this size.
    pub(super) peer_ops: Option<u64>,
    /// This side's `done` went out.
    sent: bool,
}

impl<'a> NativePlane<'a> {
    pub(crate) fn new(ctl: &'a mut Control, params: &Params, client: bool) -> NativePlane<'a> {
        NativePlane {
            alarm: ctl.alarm(),
            int: ctl.interrupts().clone(),
            ctl,
            params: params.clone(),
            client,
            peer_ops: None,
            sent: false,
        }
    }

    /// Whether the run is being cut short, here or by the peer.
    pub(super) fn stopping(&self) -> bool {
        self.int.stopping()
    }

    /// Waits for the peer's `done` (a side with nothing of its own to
    /// run, or whose loop is over). A side that stops waits
    /// [`STOP_GRACE`] for it at most.
    pub(super) fn wait_peer(&mut self) -> Result<(), PerfError> {
        let mut stop_seen = None;
        while self.peer_ops.is_none() {
            self.alarm.check()?;
            if let Some(m) = self.ctl.recv_poll(Duration::from_millis(100))? {
                let m = expect_type(m, "done")?;
                self.peer_ops = Some(m.get("ops").and_then(Value::as_u64).unwrap_or(0));
            } else if self.int.stopping() {
                let t = *stop_seen.get_or_insert_with(Instant::now);
                if t.elapsed() > STOP_GRACE {
                    break;
                }
            }
        }
        Ok(())
    }

    /// Progress of `-a` on stderr, one line per size as it ends (the
    /// table comes at the end; 23 sizes of 5,000 iterations take about a
    /// minute, and a progress bar shows only on a terminal).
    pub(super) fn size_done(&self, k: usize, result: &Value) {
        let n = self.params.sizes.len();
        if n < 2 || !self.client {
            return;
        }
        let row = result.get("row").and_then(Value::as_str).unwrap_or("");
        // Not "roce perf: ...", which introduces errors.
        eprintln!("[size {} of {n} done] {}", k + 1, row.trim());
    }

    /// A READ or FETCH_ADD latency client's check of what its last
    /// operation brought back, then its `done` (how many, and whether
    /// it was cut short).
    fn one_sided_done(&mut self, run: &Run<'_>, size: u64, n: u64) -> Result<(), PerfError> {
        // An interrupted run may leave its last operation in flight.
        let interrupted = self.stopping();
        let lane = &run.lanes[0];
        if self.params.verify && n > 0 && !interrupted {
            let len = if run.test == Test::AtomicLat {
                8
            } else {
                size as usize
            };
            let mut got = vec![0u8; len];
            lane.mr.read(lane.source, &mut got)?;
            if run.test == Test::AtomicLat {
                let orig = u64::from_ne_bytes(got.try_into().unwrap_or([0; 8]));
                if orig != n - 1 {
                    return Err(PerfError::Data(format!(
                        "FETCH_ADD returned {orig} on its {n}th add (expected {})",
                        n - 1
                    )));
                }
            } else if run.data.as_ref().map(|d| &d.peer[..len]) != Some(&got[..]) {
                return Err(PerfError::Data(
                    "READ data differs from the peer's memory".into(),
                ));
            }
        }
        self.ctl
            .send(&json!({"type": "done", "ops": n, "interrupted": interrupted}))
    }

    /// The client sends its latency statistics; both sides return the
    /// row (`Null`: cut short before this size measured anything).
    /// `sends`: 1 for a ping-pong, whose samples are the intervals
    /// between sends.
    fn lat_result(
        &mut self,
        size: u64,
        mut samples: Vec<f64>,
        sends: u64,
    ) -> Result<Value, PerfError> {
        if !self.client {
            let m = if self.stopping() {
                self.ctl.expect_after_stop("result")?
            } else {
                self.ctl.expect("result")?
            };
            return Ok(m.get("result").cloned().unwrap_or(Value::Null));
        }
        // A ping-pong's n sends make n - 1 intervals.
        let r = super::report::LatResult::from_samples(size, &mut samples).map(|mut r| {
            r.iterations += sends;
            r
        });
        let Some(r) = r else {
            if self.stopping() {
                // No row for this size (the sizes before it keep theirs),
                // and the peer is told.
                self.ctl.send(&json!({"type": "result", "result": null}))?;
                return Ok(Value::Null);
            }
            return Err(PerfError::Failed("no iteration completed".into()));
        };
        let mut v = super::report::lat_json(&r);
        v["row"] = json!(super::report::lat_row(&r));
        self.ctl.send(&json!({"type": "result", "result": v}))?;
        Ok(v)
    }
}

impl ControlPlane for NativePlane<'_> {
    type Row = Value;
    type Watch<'w>
        = NativeWatch<'w>
    where
        Self: 'w;

    /// The `endpoints` messages, the server's first: the client checks
    /// the server's before it answers.
    fn exchange(&mut self, mine: &Endpoints, check: CheckPeer<'_>) -> Result<Endpoints, PerfError> {
        let msg = json!({"type": "endpoints", "mtu": mine.mtu,
                         "qps": mine.qps.iter().map(|e| e.to_json()).collect::<Vec<_>>()});
        let received = |v: &Value| -> Result<Endpoints, PerfError> {
            let (qps, mtu) = endpoints_from_json(v)?;
            check(&qps)?;
            Ok(Endpoints { qps, mtu })
        };
        if self.client {
            let theirs = received(&self.ctl.expect("endpoints")?)?;
            self.ctl.send(&msg)?;
            Ok(theirs)
        } else {
            self.ctl.send(&msg)?;
            received(&self.ctl.expect("endpoints")?)
        }
    }

    /// The barrier before each size, where both sides agree whether to
    /// stop, then the one before its traffic.
    fn sync(&mut self, _k: usize, size: u64) -> Result<bool, PerfError> {
        if !self
            .ctl
            .next_size(&format!("size {size}"), self.stopping())?
        {
            return Ok(false);
        }
        self.peer_ops = None;
        self.sent = false;
        let t = self.params.test;
        // The server of a timed ping-pong answers until the client's
        // result comes.
        self.alarm = if self.params.duration.is_some()
            && !self.client
            && matches!(t, Test::SendLat | Test::WriteLat)
        {
            self.ctl.alarm().until_result()
        } else {
            self.ctl.alarm()
        };
        self.ctl.barrier("go")?;
        Ok(true)
    }

    fn watch(&mut self) -> NativeWatch<'_> {
        NativeWatch {
            alarm: &self.alarm,
            int: &self.int,
            ctl: &mut *self.ctl,
            peer_ops: &mut self.peer_ops,
            sent: &mut self.sent,
            since: None,
            progressed: false,
        }
    }

    /// The passive side busy-polls its CQ, which runs the context's
    /// progress on this thread: each READ or atomic is served as it
    /// arrives, instead of waking the progress thread per request (a
    /// context switch on the round trip, ~100 us under an emulated CPU).
    /// It ends at the client's `done`, and checks the FETCH_ADD counter.
    fn serve(&mut self, run: &Run<'_>, _size: u64) -> Result<(), PerfError> {
        let lane = &run.lanes[0];
        let mut spins = 0u32;
        loop {
            let _ = lane.cq.poll_one()?;
            if let Some(m) = self.ctl.try_recv()? {
                let ops = m.get("ops").and_then(Value::as_u64).unwrap_or(0);
                let interrupted = m
                    .get("interrupted")
                    .and_then(Value::as_bool)
                    .unwrap_or(false);
                if self.params.verify && run.test == Test::AtomicLat && !interrupted {
                    let mut w = [0u8; 8];
                    lane.mr.read(lane.target, &mut w)?;
                    if u64::from_ne_bytes(w) != ops {
                        return Err(PerfError::Data(format!(
                            "the FETCH_ADD counter is {} after {ops} adds",
                            u64::from_ne_bytes(w)
                        )));
                    }
                }
                return Ok(());
            }
            spins = spins.wrapping_add(1);
            if spins.is_multiple_of(256) {
                std::thread::yield_now();
                if self.stopping() {
                    return Ok(());
                }
            }
        }
    }

    fn report(
        &mut self,
        run: &Run<'_>,
        k: usize,
        size: u64,
        mine: Measured,
    ) -> Result<After<Value>, PerfError> {
        let row = match mine {
            Measured::Bw(counted) => {
                self.wait_peer()?;
                self.bw_result(run, size, &counted)?
            }
            Measured::Lat(samples) => {
                let pong = matches!(run.test, Test::SendLat | Test::WriteLat);
                if self.client && !pong {
                    self.one_sided_done(run, size, samples.len() as u64)?;
                }
                let r = self.lat_result(size, samples, u64::from(pong))?;
                if r.is_null() {
                    return Ok(After::End);
                }
                r
            }
        };
        self.size_done(k, &row);
        Ok(After::Row(row))
    }
}

/// roce perf's exchange as a traffic loop sees it: the peer's error (or,
/// for the server of a timed ping-pong, its result) as the control
/// connection's reader thread notes it, Ctrl-C here or at the peer, and
/// a stall of [`STALL`]; a BW loop's `done`, sent once its sends are over
/// and read from the peer. Each idle check yields the CPU. The clock
/// starts at the first check: most waits end before.
pub(crate) struct NativeWatch<'a> {
    alarm: &'a PeerAlarm,
    int: &'a Interrupts,
    ctl: &'a mut Control,
    peer_ops: &'a mut Option<u64>,
    sent: &'a mut bool,
    since: Option<Instant>,
    progressed: bool,
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

    fn sent_all(&mut self, per_qp: &[u64]) -> Result<(), PerfError> {
        if !std::mem::replace(self.sent, true) {
            let ops: u64 = per_qp.iter().sum();
            self.ctl
                .send(&json!({"type": "done", "ops": ops, "per_qp": per_qp}))?;
        }
        Ok(())
    }

    fn peer_sent(&mut self) -> Result<Option<u64>, PerfError> {
        if self.peer_ops.is_none() {
            if let Some(m) = self.ctl.try_recv()? {
                let m = expect_type(m, "done")?;
                *self.peer_ops = Some(m.get("ops").and_then(Value::as_u64).unwrap_or(0));
            }
        }
        Ok(*self.peer_ops)
    }
}
