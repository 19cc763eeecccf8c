//! `roce inspect`'s smaller answers: messages counted once each even when
//! their first packet was lost, an empty file called empty, a `--qp`
//! filter that matches nothing says which QPs there are.

mod common;

use std::path::PathBuf;
use std::process::Output;
use std::time::Duration;

use common::{roce, Guard};
use serde_json::Value;

fn data(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../testdata/captures")
        .join(name)
}

fn inspect(args: &[&str]) -> Output {
    let c = roce()
        .arg("inspect")
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    Guard(Some(c)).wait(Duration::from_secs(20))
}

/// 200 WRITEs (ib_write_bw -n 200 with 3% loss): some first packets were
/// lost and came again as retransmissions; each message counts once
/// (it said write=194 or 195).
#[test]
fn messages_whose_first_packet_was_lost_still_count() {
    let f = data("rc_write_bw_loss3pct_nak.pcap");
    let o = inspect(&["--json", "--summary", f.to_str().unwrap()]);
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    let flows = v["summary"]["flows"].as_array().unwrap();
    let writes: Vec<u64> = flows
        .iter()
        .filter_map(|f| f["messages"]["write"].as_u64())
        .collect();
    assert_eq!(writes, [200], "{v}");
}

#[test]
fn an_empty_file_is_called_empty() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("empty.pcap");
    std::fs::write(&p, b"").unwrap();
    let o = inspect(&[p.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("is empty") && !err.contains("truncated"),
        "{err}"
    );
}

#[test]
fn a_qp_filter_that_matches_nothing_names_the_qps_there_are() {
    let f = data("rc_write_bw_loss3pct_nak.pcap");
    // The capture's QP is 0x27 (39); 27 is decimal, 0x1b.
    let o = inspect(&["--qp", "27", f.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert!(
        err.contains("QP 0x1b (27)") && err.contains("0x27"),
        "{err}"
    );
    let o = inspect(&["--qp", "0x27", "--summary", f.to_str().unwrap()]);
    assert!(
        o.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
}
