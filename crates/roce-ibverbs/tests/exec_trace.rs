//! `roce exec --trace` as the library sees it (`ROCE_TRACE`,
//! docs/debugging.md, "Tracing"), on an unmodified `ibv_rc_pingpong`
//! pair (Debian's ibverbs-utils) on 127.0.0.1. A missing program is a
//! printed skip (a failure in CI, `ROCE_REQUIRE_RDMA_TOOLS`).

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use common::{free_port, have, listening};
use roce_testkit::Guard;
use serde_json::Value;

const LIMIT: Duration = Duration::from_secs(60);

fn command(prog: &str, args: &[String], trace: &Path) -> Command {
    let mut c = Command::new(prog);
    c.args(args)
        .env("LD_LIBRARY_PATH", common::dropin("exec-trace-dropin"))
        .env_remove("ROCE_ADDR")
        .env_remove("ROCE_PCAP")
        .env_remove("ROCE_FAULTS")
        .env_remove("ROCE_STATS")
        .env("ROCE_TRACE", trace)
        .env("ROCE_DEVICES", "lo");
    c
}

fn tmp(name: &str) -> PathBuf {
    let d = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("exec-trace");
    std::fs::create_dir_all(&d).unwrap();
    let p = d.join(name);
    let _ = std::fs::remove_file(&p);
    p
}

/// Every line of a trace, each one JSON.
fn lines(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap();
    assert!(text.ends_with('\n'), "{}: a cut line", path.display());
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect()
}

fn calls<'a>(trace: &'a [Value], name: &str) -> Vec<&'a Value> {
    trace.iter().filter(|l| l["call"] == name).collect()
}

/// A trace of `ibv_rc_pingpong` names every call it makes, in order,
/// decoded: the QP's three transitions by state name, the WRs by opcode,
/// the memory's access by flag name, each completion with its status
/// name, and the objects destroyed; the empty polls are counted.
#[test]
fn a_pingpong_trace_names_every_call() {
    if !have("ibv_rc_pingpong") {
        return;
    }
    const ITERS: usize = 20;
    let (st, ct) = (tmp("server.jsonl"), tmp("client.jsonl"));
    let port = free_port();
    let args: Vec<String> = ["-d", "roce_lo", "-g", "0", "-s", "1024", "-n"]
        .iter()
        .map(|s| s.to_string())
        .chain([ITERS.to_string(), "-p".into(), port.to_string()])
        .collect();
    let server = Guard::spawn(command("ibv_rc_pingpong", &args, &st));
    let end = Instant::now() + LIMIT;
    while !listening(port) {
        assert!(Instant::now() < end, "the server did not listen");
        std::thread::sleep(Duration::from_millis(10));
    }
    let mut ca = args.clone();
    ca.push("127.0.0.1".into());
    let client = Guard::spawn(command("ibv_rc_pingpong", &ca, &ct)).wait(LIMIT);
    let server: Output = server.wait(LIMIT);
    assert!(
        client.status.success() && server.status.success(),
        "server:\n{}\nclient:\n{}",
        roce_testkit::text_of(&server),
        roce_testkit::text_of(&client)
    );
    for path in [&st, &ct] {
        let t = lines(path);
        let what = path.display();
        assert_eq!(t[0]["event"], "start", "{what}");
        assert_eq!(t.last().unwrap()["event"], "exit", "{what}");
        let order: Vec<&str> = t.iter().filter_map(|l| l["call"].as_str()).collect();
        for name in [
            "ibv_get_device_list",
            "ibv_open_device",
            "ibv_alloc_pd",
            "ibv_reg_mr",
            "ibv_create_cq",
            "ibv_create_qp",
            "ibv_modify_qp",
            "ibv_post_recv",
            "ibv_post_send",
            "ibv_poll_cq",
            "ibv_destroy_qp",
            "ibv_destroy_cq",
            "ibv_dereg_mr",
            "ibv_dealloc_pd",
            "ibv_close_device",
            "ibv_free_device_list",
        ] {
            assert!(order.contains(&name), "{what}: no {name} in {order:?}");
        }
        let at = |n: &str| order.iter().position(|c| *c == n).unwrap();
        assert!(at("ibv_get_device_list") < at("ibv_open_device"));
        assert!(at("ibv_create_qp") < at("ibv_modify_qp"));
        assert!(at("ibv_destroy_qp") < at("ibv_dealloc_pd"));
        assert!(at("ibv_close_device") < at("ibv_free_device_list"));

        // Every call succeeded, and says so.
        for l in t.iter().filter(|l| l.get("call").is_some()) {
            assert!(l.get("errno").is_none(), "{what}: {l}");
            assert!(l["t"].as_f64().unwrap() > 1e9, "{l}");
        }
        let mr = calls(&t, "ibv_reg_mr");
        assert_eq!(mr[0]["args"]["access"], "LOCAL_WRITE", "{what}");
        assert!(mr[0]["ret"]["lkey"].is_string(), "{what}: {}", mr[0]);

        let qp = calls(&t, "ibv_create_qp");
        assert_eq!(qp[0]["args"]["attr"]["qp_type"], "RC", "{what}");
        let qpn = qp[0]["ret"]["qp_num"].as_u64().unwrap();
        let states: Vec<&str> = calls(&t, "ibv_modify_qp")
            .iter()
            .map(|l| {
                assert_eq!(l["args"]["qp"]["qp_num"], qpn, "{l}");
                assert!(l["args"]["mask"].as_str().unwrap().contains("STATE"), "{l}");
                l["args"]["attr"]["qp_state"].as_str().unwrap()
            })
            .collect();
        assert_eq!(states, ["INIT", "RTR", "RTS"], "{what}");
        let rtr = &calls(&t, "ibv_modify_qp")[1]["args"]["attr"];
        assert_eq!(rtr["ah_attr"]["dgid"], "127.0.0.1", "{what}: {rtr}");
        assert_eq!(rtr["path_mtu"], 1024, "{what}: {rtr}");

        let sends = calls(&t, "ibv_post_send");
        assert_eq!(sends.len(), ITERS, "{what}");
        for s in &sends {
            assert_eq!(s["args"]["wr"][0]["opcode"], "SEND", "{s}");
            assert_eq!(s["args"]["wr"][0]["send_flags"], "SIGNALED", "{s}");
            assert_eq!(s["args"]["wr"][0]["sg_list"][0]["length"], 1024, "{s}");
        }
        let recvs: usize = calls(&t, "ibv_post_recv")
            .iter()
            .map(|l| l["args"]["wr"].as_array().unwrap().len())
            .sum();
        assert!(recvs >= ITERS, "{what}: {recvs} receives posted");

        // Every completion, by status and opcode name; no empty poll
        // written, but counted.
        let polls = calls(&t, "ibv_poll_cq");
        let wcs: Vec<&Value> = polls
            .iter()
            .flat_map(|l| l["wc"].as_array().unwrap())
            .collect();
        assert_eq!(wcs.len(), 2 * ITERS, "{what}");
        assert!(wcs.iter().all(|w| w["status"] == "SUCCESS"), "{what}");
        assert_eq!(wcs.iter().filter(|w| w["opcode"] == "SEND").count(), ITERS);
        assert_eq!(wcs.iter().filter(|w| w["opcode"] == "RECV").count(), ITERS);
        assert!(polls.iter().all(|l| l["ret"].as_u64().unwrap() > 0));
        let counted: u64 = polls.iter().filter_map(|l| l["empty_polls"].as_u64()).sum();
        let total = t.last().unwrap()["empty_polls"].as_u64().unwrap();
        assert!(counted <= total, "{what}: {counted} > {total}");

        // One thread: the lines in time order.
        let ts: Vec<f64> = t.iter().map(|l| l["t"].as_f64().unwrap()).collect();
        assert!(ts.windows(2).all(|w| w[0] <= w[1]), "{what}: out of order");
    }
}

/// A trace file that cannot be made is said once; the program runs.
#[test]
fn an_unwritable_trace_is_said_once() {
    if !have("ibv_devinfo") {
        return;
    }
    let bad = Path::new("/nonexistent-dir/trace.jsonl");
    let o = Guard::spawn(command("ibv_devinfo", &["-v".into()], bad)).wait(LIMIT);
    assert!(o.status.success(), "{}", roce_testkit::text_of(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(err.matches("no trace").count(), 1, "{err}");
    assert!(String::from_utf8_lossy(&o.stdout).contains("roce_lo"));
}
