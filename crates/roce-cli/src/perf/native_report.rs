//! The end of one size of a BW test over roce perf's own exchange: each
//! side checks what the peer did to its memory, both exchange their
//! measurements (`measured`) and their checks (`verified`), and the row
//! is the requester's figures, both sides' summed with `-b`.

use serde_json::{json, Value};

use super::error::PerfError;
use super::messages::Test;
use super::native::NativePlane;
use super::plane::Run;
use super::report::{self, BwResult};
use super::traffic::Counted;

impl NativePlane<'_> {
    /// Verifies what the peer did to this side, exchanges measurements,
    /// and builds the result row (both directions summed with -b).
    pub(super) fn bw_result(
        &mut self,
        run: &Run<'_>,
        size: u64,
        counted: &Counted,
    ) -> Result<Value, PerfError> {
        let p = &self.params;
        let target = !self.client || p.bidir;
        let requester = self.client || p.bidir;
        // What this side sent (a receiver's count is the peer's to say).
        let (ops, per_qp) = if requester {
            (counted.ops(), counted.per_qp.clone())
        } else {
            (0, vec![0; run.lanes.len()])
        };
        let (secs, peak) = (counted.secs, counted.peak_bps);
        let mut problems = Vec::new();
        self.ctl.send(
            &json!({"type": "measured", "ops": ops, "per_qp": per_qp, "secs": secs, "peak": peak}),
        )?;
        let theirs = if self.stopping() {
            self.ctl.expect_after_stop("measured")?
        } else {
            self.ctl.expect("measured")?
        };
        let their_ops = theirs.get("ops").and_then(Value::as_u64).unwrap_or(0);
        let their_per_qp: Vec<u64> = theirs
            .get("per_qp")
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(Value::as_u64).collect())
            .unwrap_or_default();
        let p = &self.params;
        if p.verify && !self.stopping() {
            let n = size as usize;
            let peer = run.check(n).unwrap_or_default();
            for (q, lane) in run.lanes.iter().enumerate() {
                if target && p.test == Test::WriteBw && their_ops > 0 {
                    let mut got = vec![0u8; n];
                    lane.mr.read(lane.target, &mut got)?;
                    if got != peer {
                        problems.push(format!("WRITE data on QP {q} differs"));
                    }
                }
                if target && p.test == Test::AtomicBw {
                    let mut w = [0u8; 8];
                    lane.mr.read(lane.target, &mut w)?;
                    let want = their_per_qp.get(q).copied().unwrap_or(0);
                    if u64::from_ne_bytes(w) != want {
                        problems.push(format!(
                            "FETCH_ADD counter on QP {q} is {} after {want} adds",
                            u64::from_ne_bytes(w)
                        ));
                    }
                }
                if requester && p.test == Test::ReadBw && ops > 0 {
                    let mut got = vec![0u8; n];
                    lane.mr.read(lane.source, &mut got)?;
                    if got != peer {
                        problems.push(format!("READ data on QP {q} differs"));
                    }
                }
            }
        }
        self.ctl
            .send(&json!({"type": "verified", "problems": problems}))?;
        let peer_v = self.ctl.expect("verified")?;
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
            sides.push((ops, secs, peak));
        }
        if self.params.bidir || !self.client {
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
        let cc: Vec<_> = run.lanes.iter().map(|l| l.qp.cc_counters()).collect();
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
}
