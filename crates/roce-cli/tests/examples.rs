//! The examples run: a generated capture reads back clean, and the
//! bandwidth plot is drawn from a real `roce perf -a` run.

use std::process::Command;
use std::time::Duration;

use roce_testkit::free_port;
use roce_testkit::{example, run_bounded, text};

#[test]
fn gen_capture_writes_a_capture_inspect_accepts() {
    let dir = tempfile::tempdir().unwrap();
    let pcap = dir.path().join("gen.pcap");
    let mut c = Command::new(example("gen_capture"));
    c.arg(&pcap).arg("200");
    let o = run_bounded(c, Duration::from_secs(60));
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}{err}");
    let mut i = Command::new(env!("CARGO_BIN_EXE_roce"));
    i.args(["inspect", "--summary"]).arg(&pcap);
    let o = run_bounded(i, Duration::from_secs(60));
    let (out, err) = text(&o);
    assert_eq!(o.status.code(), Some(0), "{out}{err}");
    assert!(out.contains("icrc"), "{out}");
}

#[test]
fn perf_plot_draws_a_curve() {
    let dir = tempfile::tempdir().unwrap();
    let svg = dir.path().join("bw.svg");
    let port = free_port().to_string();
    let mut c = Command::new(example("perf_plot"));
    c.args([
        "--roce",
        env!("CARGO_BIN_EXE_roce"),
        "--qps",
        "1",
        "--iters",
        "20",
    ])
    .arg("--out")
    .arg(&svg)
    .args(["--", "--roce-port", &port]);
    let o = run_bounded(c, Duration::from_secs(240));
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}{err}");
    let drawn = std::fs::read_to_string(&svg).unwrap();
    assert!(
        drawn.starts_with("<svg"),
        "{}",
        &drawn[..drawn.len().min(200)]
    );
    assert!(drawn.contains("<polyline"), "no curve in the plot");
}
