//! What happens after the QPs are connected in `roce perf --perftest`,
//! the same over TCP and over perftest's rdma_cm channel: the sync rounds
//! (a key-string exchange with QP 0's keys), the traffic per size, and the
//! report exchanges, in the order perftest 4.5's eight tools use them (as
//! captured between two perftest 4.5 peers with `-a`, `-q 4` and `-b`):
//!
//! * WRITE/READ/atomic BW: the client runs every size, then one round and
//!   the report (the last size's; the server prints it). With `-b`, per
//!   size: a round, the traffic, with `-a` another round, the report (each
//!   side prints the sum of both sides' figures);
//! * SEND BW: per size: receives posted, a round, the traffic (each side
//!   prints its own figures), with `-b` the report (and the sum), with
//!   `-a` another round;
//! * latency: one round before the first size; SEND latency posts its
//!   receives and has a round before every size.
//!
//! With `-D` the same sequence holds (one size; every loop runs to its
//! deadline; a timed bidirectional SEND test exchanges no report).
//!
//! The closing round (and ib_write_lat's lack of one) is the caller's.

use std::time::{Duration, Instant};

use roce_verbs::Rkey;

use super::args::PerfArgs;
use super::error::PerfError;
use super::lane::{DataQp, Lane};
use super::messages::Test;
use super::perftest_peer::PeerWatch;
use super::perftest_plan::{print_dest, Plan};
use super::perftest_wire::{report_msgs, report_value, Dest, VERSION};
use super::report::{self, BwResult, LatResult};
use super::traffic::{client_traffic, send_duplex, server_receive, Traffic};
use super::traffic_lat::{one_sided, send_ping_pong, write_ping_pong};

/// A perftest control channel: key-string rounds and 8-byte report
/// exchanges, client first.
pub(crate) trait Control {
    /// One key-string round; the peer's keys.
    fn keys(&mut self, mine: &Dest) -> Result<Dest, PerfError>;
    /// One 8-byte exchange of the report; the peer's 8 bytes.
    fn xchg8(&mut self, mine: &[u8]) -> Result<Vec<u8>, PerfError>;
    /// The TCP connection the traffic loops look at while they wait for
    /// the peer (`None` over rdma_cm).
    fn watch(&self) -> Option<std::net::TcpStream> {
        None
    }
}

/// The rows a run prints.
pub(crate) enum Rows {
    Bw(Vec<BwResult>),
    Lat(Vec<LatResult>),
}

/// The key rounds after the QPs are connected, the same over TCP and
/// over the rdma_cm channel: each QP's keys again (perftest's printing
/// pass) and one round with QP 0's keys after RTR, SEND tests doing that
/// single round first (captured with `-q 4`); then the keys are printed
/// (not with `--json`). Returns the peer's buffer for each QP.
pub(crate) fn confirm_keys(
    ctl: &mut impl Control,
    plan: &Plan,
    mine: &[Dest],
    rem: &[Dest],
    args: &PerfArgs,
) -> Result<Vec<(u64, Rkey)>, PerfError> {
    if plan.is_send {
        ctl.keys(&mine[0])?;
    }
    for d in mine {
        ctl.keys(d)?;
    }
    if !plan.is_send {
        ctl.keys(&mine[0])?;
    }
    if !args.json {
        for d in mine {
            print_dest(" local address", d, plan.test);
        }
        for d in rem {
            print_dest(" remote address", d, plan.test);
        }
    }
    Ok(rem.iter().map(|r| (r.vaddr, Rkey::new(r.rkey))).collect())
}

/// Runs the tests of `plan` on connected `qps` (the peer's buffers in
/// `remotes`), syncing through `ctl` with QP 0's keys `mine`.
pub(crate) fn run_session(
    ctl: &mut impl Control,
    plan: &Plan,
    qps: &[DataQp],
    remotes: &[(u64, Rkey)],
    mine: &Dest,
    client: bool,
) -> Result<Rows, PerfError> {
    let all = plan.sizes.len() > 1;
    let stream = ctl.watch();
    let watch = || PeerWatch::new(stream.as_ref());
    let lanes: Vec<Lane<'_>> = qps.iter().map(DataQp::lane).collect();
    // A timed run (-D) starts its clock as its traffic starts.
    let traffic = |size| Traffic {
        lanes: &lanes,
        remotes,
        size,
        iters: if plan.duration.is_some() {
            u64::MAX
        } else {
            plan.iters
        },
        depth: plan.tx_depth,
        // Every send signaled: a stalled run (the two sides given
        // different -n) says how many messages got through.
        cq_mod: 1,
        test: plan.test,
        progress_every: plan.progress_every,
        until: plan
            .duration
            .map(|d| Instant::now() + Duration::from_secs_f64(d)),
        duration: plan.duration,
        verify: None,
        peer_says_sent: false,
    };
    let mut rows = Vec::new();
    if plan.lat {
        let mut lat = Vec::new();
        for (k, &size) in plan.sizes.iter().enumerate() {
            if plan.is_send {
                lanes[0].post_ring(size, plan.iters)?;
            }
            if k == 0 || plan.is_send {
                ctl.keys(mine)?;
            }
            lat.extend(run_lat(&traffic(size), client, &mut watch())?);
        }
        return Ok(Rows::Lat(lat));
    }
    if plan.is_send {
        for &size in &plan.sizes {
            if plan.bidir || !client {
                for l in &lanes {
                    l.post_ring(size, plan.iters)?;
                }
            }
            ctl.keys(mine)?;
            let t = traffic(size);
            let mut row = if plan.bidir {
                send_duplex(&t, &mut watch())?
            } else if client {
                client_traffic(&t, &mut watch())?
            } else {
                server_receive(&t, &mut watch())?
            }
            .result(size);
            // Timed bidirectional SEND runs exchange no report (each side
            // prints its own figures), as perftest does.
            if plan.bidir && plan.duration.is_none() {
                let theirs = exchange_report(Some(&row), &t, ctl)?;
                row = sum(&row, &theirs);
            }
            if all {
                ctl.keys(mine)?;
            }
            rows.push(row);
        }
    } else if plan.bidir {
        for &size in &plan.sizes {
            ctl.keys(mine)?;
            let t = traffic(size);
            let row = client_traffic(&t, &mut watch())?.result(size);
            if all {
                ctl.keys(mine)?;
            }
            let theirs = exchange_report(Some(&row), &t, ctl)?;
            rows.push(sum(&row, &theirs));
        }
    } else if client {
        for &size in &plan.sizes {
            rows.push(client_traffic(&traffic(size), &mut watch())?.result(size));
        }
        ctl.keys(mine)?;
        exchange_report(rows.last(), &traffic(plan.max_size()), ctl)?;
    } else {
        // perftest's server waits, then prints the client's report.
        ctl.keys(mine)?;
        rows.push(exchange_report(None, &traffic(plan.max_size()), ctl)?);
    }
    Ok(Rows::Bw(rows))
}

/// Runs a latency test's traffic on the first QP (the server of a
/// READ/atomic test only waits); the statistics, or `None` where this side
/// measures nothing. SEND tests need the ring posted first.
fn run_lat(
    t: &Traffic<'_>,
    client: bool,
    watch: &mut PeerWatch<'_>,
) -> Result<Option<LatResult>, PerfError> {
    let mut samples = match t.test {
        Test::SendLat => send_ping_pong(t, client, watch)?,
        Test::WriteLat => write_ping_pong(t, client, watch)?,
        _ if client => one_sided(t, watch)?,
        _ => Vec::new(),
    };
    // perftest prints the iterations asked for (n sends make n - 1
    // intervals).
    let n = samples.len() as u64 + 1;
    Ok(LatResult::from_samples(t.size, &mut samples).map(|mut r| {
        r.iterations = if t.until.is_some() { n } else { t.iters };
        r
    }))
}

/// A bidirectional row: this side's size and iterations, both sides'
/// rates added (perftest's `print_full_bw_report`).
fn sum(mine: &BwResult, theirs: &BwResult) -> BwResult {
    BwResult {
        peak_bps: mine.peak_bps + theirs.peak_bps,
        avg_bps: mine.avg_bps + theirs.avg_bps,
        msg_rate: mine.msg_rate + theirs.msg_rate,
        ..mine.clone()
    }
}

/// The report exchange: five 8-byte values each way (ours: `mine`, or
/// zeros with `t`'s size and iterations); returns the peer's.
pub(crate) fn exchange_report(
    mine: Option<&BwResult>,
    t: &Traffic<'_>,
    ctl: &mut impl Control,
) -> Result<BwResult, PerfError> {
    let msgs = match mine {
        Some(r) => report_msgs(
            r.bytes,
            r.iterations,
            r.peak_bps / 1_048_576.0,
            r.avg_bps / 1_048_576.0,
            r.msg_rate / 1e6,
        ),
        None => report_msgs(t.size, t.iters.min(u64::from(u32::MAX)), 0.0, 0.0, 0.0),
    };
    let mut got = [0u64; 5];
    for (g, m) in got.iter_mut().zip(msgs.iter()) {
        let b = ctl.xchg8(m)?;
        *g = report_value(&b);
    }
    Ok(report_from(got))
}

/// A peer's report (five big-endian u64s: size, iterations, then peak,
/// average MB/s and Mpps as f64 bits).
pub(crate) fn report_from(got: [u64; 5]) -> BwResult {
    BwResult {
        bytes: got[0],
        iterations: got[1],
        peak_bps: f64::from_bits(got[2]) * 1_048_576.0,
        avg_bps: f64::from_bits(got[3]) * 1_048_576.0,
        msg_rate: f64::from_bits(got[4]) * 1e6,
    }
}

/// perftest's result block: the title, then the BW or latency table; or
/// with `--json` one JSON object.
pub(crate) fn print_rows(plan: &Plan, mtu: u32, their_version: &str, rows: &Rows, args: &PerfArgs) {
    if args.json {
        let results: Vec<serde_json::Value> = match rows {
            Rows::Bw(r) => r.iter().map(report::bw_json).collect(),
            Rows::Lat(r) => r.iter().map(report::lat_json).collect(),
        };
        let v = serde_json::json!({
            "test": plan.test.name(),
            "exchange": "perftest",
            "peer_version": their_version,
            "mtu": mtu,
            "qps": plan.qps,
            "bidirectional": plan.bidir,
            "duration_sec": plan.duration,
            "results": results,
        });
        println!("{v}");
        return;
    }
    // The server of a READ/atomic latency test measures nothing (as
    // perftest's): it says where the table is rather than end silently.
    if matches!(rows, Rows::Lat(r) if r.is_empty()) {
        println!("{}", report::RULE);
        println!(
            " {}: the client measures every operation; its table is on its side",
            plan.test.title()
        );
        println!("{}", report::RULE);
        return;
    }
    let gbits = args.gbits;
    let bidir = if plan.bidir { " (bidirectional)" } else { "" };
    println!("{}", report::RULE);
    println!(
        "                    {}{bidir} (perftest 4.5 exchange, version string {VERSION})",
        plan.test.title()
    );
    println!(
        " Mtu             : {mtu}[B]     Peer version : {their_version}     Number of qps : {}",
        plan.qps
    );
    println!("{}", report::RULE);
    match rows {
        Rows::Bw(rows) => {
            println!("{}", report::bw_header(gbits));
            for r in rows {
                println!("{}", report::bw_row(r, gbits));
            }
        }
        Rows::Lat(rows) => {
            println!("{}", report::lat_header());
            for r in rows {
                println!("{}", report::lat_row(r));
            }
        }
    }
    println!("{}", report::RULE);
}
