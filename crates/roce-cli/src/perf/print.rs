//! The output of `roce perf`: perftest's table, or one JSON object
//! with `--json`.

use serde_json::{json, Value};

use super::args::PerfArgs;
use super::interrupts::Interrupts;
use super::messages::Params;
use super::perftest_plan::print_dest;
use super::perftest_wire::{gid_of, Dest};
use super::{control, report};

/// A `--pcap` file that could not be written: the run worked, but the
/// capture asked for is incomplete.
pub(crate) fn pcap_problem(counters: &Value) -> Option<String> {
    let n = counters["backend"]["pcap_errors"].as_u64().unwrap_or(0);
    (n > 0).then(|| {
        format!("the pcap file could not be written ({n} write errors): the capture is incomplete")
    })
}

pub(crate) fn print_results(
    args: &PerfArgs,
    params: &Params,
    results: &[Value],
    counters: &Value,
    int: &Interrupts,
) {
    if args.json {
        let v = json!({"test": params.test.name(), "qps": params.qps, "mtu": params.mtu,
                       "bidirectional": params.bidir, "verified": params.verify,
                       "interrupted": int.here(),
                       "peer_interrupted": int.by_peer(), "results": results,
                       "counters": counters});
        println!("{v}");
        return;
    }
    println!("{}", report::RULE);
    println!("                    {}", params.test.title());
    println!(
        " Number of qps   : {:<10} Transport type : RoCE v2 ({})",
        params.qps,
        args.backend_name()
    );
    println!(
        " Connection type : RC         Mtu            : {}[B]",
        params.mtu
    );
    println!(
        " TX depth        : {:<10} Data verified  : {}",
        params.tx_depth,
        if params.verify { "yes" } else { "no" }
    );
    // perftest's address lines: what a mismatch (GID, QPN) shows in.
    for (what, side) in [(" local address", "local"), (" remote address", "remote")] {
        for e in counters["endpoints"][side].as_array().into_iter().flatten() {
            if let Ok(e) = control::Endpoint::from_json(e) {
                let d = Dest {
                    lid: 0,
                    out_reads: 1,
                    qpn: e.qpn,
                    psn: e.psn,
                    rkey: e.rkey,
                    vaddr: e.vaddr,
                    gid: gid_of(e.addr),
                    srqn: 0,
                };
                print_dest(what, &d, params.test);
            }
        }
    }
    println!("{}", report::RULE);
    if params.test.is_bw() {
        println!("{}", report::bw_header(args.gbits));
    } else {
        println!("{}", report::lat_header());
    }
    for r in results {
        if let Some(row) = r.get("row").and_then(Value::as_str) {
            let row = if args.gbits {
                r.get("row_gbits").and_then(Value::as_str).unwrap_or(row)
            } else {
                row
            };
            println!("{row}");
        }
    }
    println!("{}", report::RULE);
    for r in results {
        if let Some(note) = r.get("note").and_then(Value::as_str) {
            println!("{note}");
        }
    }
    if int.here() {
        println!(" (interrupted: partial results)");
    } else if int.by_peer() {
        println!(" (the peer was interrupted: partial results)");
    }
}
