//! `roce nvmf` between two "hosts": two network namespaces joined by a
//! veth pair (made and removed by the test). The target serves a
//! namespace in one; from the other the host checks written data, reads
//! the discovery log and runs `perf` with reads and writes.
//!
//! Needs root and `ip netns`; skips with a printed reason otherwise.

mod common;

use std::process::Command;
use std::time::Duration;

use common::{roce, text, Guard};
use roce_testkit::netns::VethPair;

/// `ip netns exec NS roce ARGS`.
fn in_ns(ns: &str, args: &[&str]) -> Command {
    let mut c = Command::new("ip");
    c.args(["netns", "exec", ns])
        .arg(roce().get_program())
        .args(args);
    c
}

#[test]
fn host_and_target_in_two_namespaces() {
    let lab = match VethPair::new("nv", 95, 1) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("skipped: {e}");
            return;
        }
    };
    let _target = Guard::spawn(in_ns(
        &lab.a,
        &[
            "nvmf",
            "target",
            "--bind",
            &lab.ip_a,
            "--mem",
            "4096",
            "--block-size",
            "4096",
        ],
    ));
    std::thread::sleep(Duration::from_millis(700));
    let run = |args: &[&str]| {
        let mut all = vec!["nvmf"];
        all.extend_from_slice(args);
        all.extend_from_slice(&[&lab.ip_a, "--bind", &lab.ip_b]);
        Guard::spawn(in_ns(&lab.b, &all)).wait(Duration::from_secs(60))
    };
    let c = run(&["check", "--blocks", "512"]);
    let (o, e) = text(&c);
    assert_eq!(c.status.code(), Some(0), "check: {o}{e}");
    assert!(
        o.contains("512 blocks of 4096 bytes written and read back identical"),
        "{o}"
    );
    let d = run(&["discover"]);
    let (o, e) = text(&d);
    assert_eq!(d.status.code(), Some(0), "discover: {o}{e}");
    assert!(o.contains(&format!("traddr:  {}", lab.ip_a)), "{o}");
    for rw in ["randread", "randwrite"] {
        let p = run(&[
            "perf", "--rw", rw, "--time", "1", "--qd", "8", "--queues", "2", "--bs", "16384",
            "--json",
        ]);
        let (o, e) = text(&p);
        assert_eq!(p.status.code(), Some(0), "perf {rw}: {o}{e}");
        let v: serde_json::Value = serde_json::from_str(o.trim()).unwrap();
        assert_eq!(v["errors"], 0, "{o}");
        assert!(v["ios"].as_u64().unwrap() > 0, "{o}");
        assert_eq!(v["queues"], 2, "{o}");
    }
}
