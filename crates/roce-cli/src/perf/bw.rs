//! Bandwidth tests over roce perf's own exchange: WRITE, READ, SEND and
//! FETCH_ADD streams with `tx_depth` operations in flight per QP (within
//! what the peer's UDP receive buffer holds), run by the shared loops
//! ([`super::traffic`], perftest's `run_iter_bw` shape); this side's
//! count goes to the peer in a `done` as soon as its sends are over, then
//! both sides exchange measurements and verify the data per size.

use std::time::{Duration, Instant};

use roce_verbs::Rkey;
use serde_json::{json, Value};

use super::control::{expect_type, Control, PeerAlarm};
use super::error::PerfError;
use super::lat::NativeWatch;
use super::messages::Test;
use super::report::{self, BwResult};
use super::setup::Session;
use super::traffic::{client_traffic, send_duplex, server_receive, Counted, Traffic, Watch};

/// Bytes in flight per side across all QPs (the UDP backend's receive
/// buffer is 8 MiB).
const INFLIGHT_BUDGET: u64 = 4 << 20;
/// How long a side that stops waits for the peer to say how far it got.
const STOP_GRACE: Duration = Duration::from_secs(3);

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
        let mine = drive(s, ctl, size)?;
        let r = exchange(s, ctl, size, &mine)?;
        s.size_done(out.len(), &r);
        out.push(r);
    }
    Ok(out)
}

/// Messages per QP: `-n`, or in a timed run as many as the time allows.
fn iters(s: &Session) -> u64 {
    if s.params.duration.is_some() {
        u64::MAX
    } else {
        s.params.iters
    }
}

/// Clears what this size will fill, and posts the receive rings.
fn prepare(s: &mut Session, size: u64) -> Result<(), PerfError> {
    let test = s.params.test;
    let requester = s.is_client || s.params.bidir;
    let target = !s.is_client || s.params.bidir;
    let zeros = vec![0u8; size as usize];
    for q in 0..s.qps.len() {
        let lane = s.lane(q);
        if target && matches!(test, Test::WriteBw | Test::AtomicBw) {
            let n = if test == Test::AtomicBw {
                8
            } else {
                size as usize
            };
            s.mr.write(lane.target, &zeros[..n])?;
        }
        if requester && matches!(test, Test::ReadBw | Test::AtomicBw) {
            s.mr.write(lane.source, &zeros)?;
        }
        if target && test == Test::SendBw {
            lane.post_ring(size, iters(s))?;
        }
    }
    Ok(())
}

/// roce perf's exchange in a BW loop: [`NativeWatch`], plus the `done`
/// each side sends once its sends are over and reads from the peer.
struct BwWatch<'a> {
    native: NativeWatch<'a>,
    ctl: &'a mut Control,
    peer_ops: Option<u64>,
    sent: bool,
}

impl Watch for BwWatch<'_> {
    fn progressed(&mut self) {
        self.native.progressed();
    }

    fn idle(&mut self, look: bool, what: &dyn Fn() -> String) -> Result<bool, PerfError> {
        self.native.idle(look, what)
    }

    fn stopping(&self) -> bool {
        self.native.stopping()
    }

    fn sent_all(&mut self, per_qp: &[u64]) -> Result<(), PerfError> {
        if !std::mem::replace(&mut self.sent, true) {
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
                self.peer_ops = Some(m.get("ops").and_then(Value::as_u64).unwrap_or(0));
            }
        }
        Ok(self.peer_ops)
    }
}

impl BwWatch<'_> {
    /// Waits for the peer's `done` (a side with nothing of its own to
    /// run, or whose loop is over). A side that stops waits
    /// [`STOP_GRACE`] for it at most.
    fn wait_peer(&mut self, alarm: &PeerAlarm) -> Result<(), PerfError> {
        let mut stop_seen = None;
        while self.peer_ops.is_none() {
            alarm.check()?;
            if let Some(m) = self.ctl.recv_poll(Duration::from_millis(100))? {
                let m = expect_type(m, "done")?;
                self.peer_ops = Some(m.get("ops").and_then(Value::as_u64).unwrap_or(0));
            } else if self.native.stopping() {
                let t = *stop_seen.get_or_insert_with(Instant::now);
                if t.elapsed() > STOP_GRACE {
                    break;
                }
            }
        }
        Ok(())
    }
}

/// The measured loop of one side: the requester's (with `-b` both
/// sides'), the SEND receiver's, or none (the target of a one-sided
/// test, which only tells the peer it is done and waits for its `done`).
fn drive(s: &mut Session, ctl: &mut Control, size: u64) -> Result<Measured, PerfError> {
    let p = s.params.clone();
    let nq = s.qps.len();
    let requester = s.is_client || p.bidir;
    let receiver = p.test == Test::SendBw && (!s.is_client || p.bidir);
    let alarm = ctl.alarm();
    let peer = s.peer_pattern(size as usize);
    let lanes: Vec<_> = (0..nq).map(|q| s.lane(q)).collect();
    let remotes: Vec<(u64, Rkey)> = s
        .remote
        .iter()
        .map(|r| (r.vaddr, Rkey::new(r.rkey)))
        .collect();
    // UDP has no flow control: keep what all QPs have in flight within what
    // the peer's receive socket buffers, or overflow drops start go-back-N.
    let depth = u64::from(p.tx_depth).min((INFLIGHT_BUDGET / (size.max(1) * nq as u64)).max(2));
    let t = Traffic {
        lanes: &lanes,
        remotes: &remotes,
        size,
        iters: iters(s),
        depth,
        // One signaled send in 64 (perftest's default moderation is 100).
        cq_mod: 64,
        test: p.test,
        until: p
            .duration
            .map(|d| Instant::now() + Duration::from_secs_f64(d)),
        duration: p.duration,
        progress_every: s.progress_every,
        verify: p.verify.then_some(&peer[..]),
        peer_says_sent: true,
    };
    let mut watch = BwWatch {
        native: NativeWatch::new(&alarm, &s.int),
        ctl,
        peer_ops: None,
        sent: false,
    };
    let counted = if requester && receiver {
        send_duplex(&t, &mut watch)?
    } else if requester {
        client_traffic(&t, &mut watch)?
    } else if receiver {
        server_receive(&t, &mut watch)?
    } else {
        watch.sent_all(&vec![0; nq])?;
        Counted {
            per_qp: vec![0; nq],
            secs: 0.0,
            peak_bps: 0.0,
        }
    };
    watch.wait_peer(&alarm)?;
    Ok(Measured {
        ops: if requester { counted.ops() } else { 0 },
        per_qp: if requester {
            counted.per_qp
        } else {
            vec![0; nq]
        },
        secs: counted.secs,
        peak_bps: counted.peak_bps,
    })
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
