//! `roce inspect` reads `tcpdump -i lo` captures as Wireshark does: the
//! unfinished UDP checksums of loopback are ignored (they made every frame
//! `MALFORMED bad UDP checksum`, exit 1) and GSO batches are split into
//! their RoCE packets where every packet's ICRC confirms the split.

mod common;

use std::path::PathBuf;
use std::time::Duration;

use common::{roce, Guard};
use serde_json::Value;

fn capture() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../testdata/captures/lo_tcpdump_write_bw_64KiB_gso.pcap")
}

fn inspect(args: &[&str], file: &std::path::Path) -> (Option<i32>, String) {
    let c = roce()
        .arg("inspect")
        .args(args)
        .arg(file)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let o = Guard(Some(c)).wait(Duration::from_secs(20));
    (
        o.status.code(),
        String::from_utf8_lossy(&o.stdout).into_owned(),
    )
}

#[test]
fn a_loopback_capture_reads_as_wireshark_reads_it() {
    let (code, out) = inspect(&[], &capture());
    assert_eq!(code, Some(0), "{out}");
    assert!(!out.contains("MALFORMED"), "{out}");
    // 64 WRITE packets, PSNs consecutive, every ICRC valid, and the ACK.
    let writes: Vec<&str> = out.lines().filter(|l| l.contains("RDMA_WRITE_")).collect();
    assert_eq!(writes.len(), 64, "{out}");
    assert!(writes.iter().all(|l| l.ends_with("icrc=ok")), "{out}");
    assert_eq!(
        out.lines()
            .filter(|l| l.contains("RDMA_WRITE_MIDDLE"))
            .count(),
        62
    );
    assert!(
        out.contains("GSO batch of 64522 bytes: 62 RoCE packets"),
        "{out}"
    );
    assert!(out.contains("ACKNOWLEDGE"), "{out}");

    let (code, out) = inspect(&["--json", "--summary"], &capture());
    assert_eq!(code, Some(0), "{out}");
    let v: Value = serde_json::from_str(out.lines().last().unwrap()).unwrap();
    let s = &v["summary"];
    assert_eq!(s["roce_packets"], 65, "{s}");
    assert_eq!(s["malformed"], 0, "{s}");
    assert_eq!(s["icrc_failures"], 0, "{s}");
    assert_eq!(s["gso_batches"], 2, "{s}");
    assert_eq!(s["gso_packets"], 64, "{s}");
    assert_eq!(s["udp_checksum_ignored"], 3, "{s}");
}

/// A batch whose packets do not all verify is not split: one byte changed
/// in the middle of the 62-packet batch leaves it one bad frame (exit 1),
/// the other batch still split.
#[test]
fn a_batch_is_split_only_when_every_icrc_confirms_it() {
    let mut b = std::fs::read(capture()).unwrap();
    // Frame 2 (the big batch) starts after the 24-byte file header, frame
    // 1's 16-byte record header and its 2138 bytes.
    let at = 24 + 16 + 2138 + 16 + 14 + 20 + 8 + 30_000;
    b[at] ^= 0x40;
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("corrupt.pcap");
    std::fs::write(&p, &b).unwrap();
    let (code, out) = inspect(&["--json", "--summary"], &p);
    assert_eq!(code, Some(1), "{out}");
    let v: Value = serde_json::from_str(out.lines().last().unwrap()).unwrap();
    let s = &v["summary"];
    assert_eq!(s["gso_batches"], 1, "{s}");
    assert_eq!(s["gso_packets"], 2, "{s}");
    assert_eq!(
        s["malformed"].as_u64().unwrap() + s["icrc_failures"].as_u64().unwrap(),
        1,
        "{s}"
    );
}
