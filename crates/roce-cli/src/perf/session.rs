//! The one session driver of `roce perf`: a run's sizes in order, each
//! with its buffers made ready, the plane's sync, the traffic loop
//! perftest's tools run in that role ([`super::traffic`],
//! [`super::traffic_lat`]) and the plane's report; then the plane's
//! closing report. The control plane is any [`ControlPlane`] (roce
//! perf's own exchange, perftest's over TCP or rdma_cm); the QPs are
//! already connected.

use std::time::{Duration, Instant};

use super::error::PerfError;
use super::messages::Test;
use super::plane::{After, ControlPlane, Measured, Run};
use super::traffic::{client_traffic, send_duplex, server_receive, Counted, Traffic, Watch};
use super::traffic_lat::{one_sided, send_ping_pong, write_ping_pong};

/// Runs every size of `run` over `plane`; the rows this side prints.
pub(crate) fn run<P: ControlPlane>(plane: &mut P, run: &Run<'_>) -> Result<Vec<P::Row>, PerfError> {
    let mut rows = Vec::new();
    for (k, &size) in run.sizes.iter().enumerate() {
        let after = if run.test.is_bw() {
            bw_size(plane, run, k, size)?
        } else {
            lat_size(plane, run, k, size)?
        };
        match after {
            After::Row(r) => rows.push(r),
            After::Nothing => {}
            After::End => break,
        }
    }
    plane.finish(run, &mut rows)?;
    Ok(rows)
}

/// One loop's parameters; a timed run's clock starts here.
fn traffic<'a>(run: &'a Run<'a>, size: u64, depth: u64, cq_mod: u64) -> Traffic<'a> {
    Traffic {
        lanes: run.lanes,
        remotes: run.remotes,
        size,
        iters: run.per_size(),
        depth,
        cq_mod,
        test: run.test,
        until: run
            .duration
            .map(|d| Instant::now() + Duration::from_secs_f64(d)),
        duration: run.duration,
        progress_every: run.progress_every,
        verify: None,
        peer_says_sent: false,
    }
}

/// One size of a BW test: the requester's loop (with `-b` both sides'),
/// the SEND receiver's, or none (the target of a one-sided test, which
/// only says it is done).
fn bw_size<P: ControlPlane>(
    plane: &mut P,
    run: &Run<'_>,
    k: usize,
    size: u64,
) -> Result<After<P::Row>, PerfError> {
    let test = run.test;
    let requester = run.client || run.bidir;
    let target = !run.client || run.bidir;
    let receiver = test == Test::SendBw && target;
    let nq = run.lanes.len();
    if run.data.is_some() {
        // What this size fills starts from zeros (the checks read it).
        let zeros = vec![0u8; size as usize];
        for lane in run.lanes {
            if target && matches!(test, Test::WriteBw | Test::AtomicBw) {
                let n = if test == Test::AtomicBw {
                    8
                } else {
                    zeros.len()
                };
                lane.mr.write(lane.target, &zeros[..n])?;
            }
            if requester && matches!(test, Test::ReadBw | Test::AtomicBw) {
                lane.mr.write(lane.source, &zeros)?;
            }
        }
    }
    if receiver {
        for lane in run.lanes {
            lane.post_ring(size, run.per_size())?;
        }
    }
    if !plane.sync(k, size)? {
        return Ok(After::End);
    }
    // Within what the peer's receive buffer holds, if the plane says so.
    let depth = match run.inflight_budget {
        Some(b) => run.tx_depth.min((b / (size.max(1) * nq as u64)).max(2)),
        None => run.tx_depth,
    };
    let mut t = traffic(run, size, depth, run.cq_mod);
    t.verify = run.check(size as usize);
    t.peer_says_sent = run.peer_says_sent;
    let mut watch = plane.watch();
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
    drop(watch);
    plane.report(run, k, size, Measured::Bw(counted))
}

/// One size of a latency test on the first QP: a SEND or WRITE
/// ping-pong, or READ/atomic round trips that the client measures while
/// the server serves.
fn lat_size<P: ControlPlane>(
    plane: &mut P,
    run: &Run<'_>,
    k: usize,
    size: u64,
) -> Result<After<P::Row>, PerfError> {
    let lane = &run.lanes[0];
    let n = size as usize;
    if let Some(d) = &run.data {
        // This side's message is its pattern; the peer's lands on zeros.
        lane.mr.write(lane.source, &d.own[..n])?;
        if run.test == Test::WriteLat {
            lane.mr.write(lane.target, &vec![0u8; n])?;
        }
    }
    if run.test == Test::SendLat {
        lane.post_ring(size, run.per_size())?;
    }
    if !plane.sync(k, size)? {
        return Ok(After::End);
    }
    let mut t = traffic(run, size, 1, 1);
    let samples = match run.test {
        Test::SendLat | Test::WriteLat => {
            t.verify = run.check(n);
            let mut watch = plane.watch();
            if run.test == Test::WriteLat {
                write_ping_pong(&t, run.client, &mut watch)?
            } else {
                send_ping_pong(&t, run.client, &mut watch)?
            }
        }
        _ if run.client => one_sided(&t, &mut plane.watch())?,
        _ => {
            plane.serve(run, size)?;
            Vec::new()
        }
    };
    plane.report(run, k, size, Measured::Lat(samples))
}
