//! The same-host path leaves the sender's ICRC out (docs/shm.md, "What
//! the receiver trusts"): `roce perf` over it still verifies every byte,
//! counts what went without an ICRC (and what was built straight into the
//! ring), and a capture taken at the receiver shows every frame with a
//! valid ICRC, computed when it was recorded.

mod common;

use std::time::Duration;

use common::{json_of, spawn, text};
use roce_testkit::port_args;
use serde_json::Value;

/// Longest any one `roce` run of these tests may take.
const LIMIT: Duration = Duration::from_secs(60);

fn counter(v: &Value, group: &str, name: &str) -> u64 {
    v["counters"][group][name]
        .as_u64()
        .unwrap_or_else(|| panic!("no {group}.{name}: {v}"))
}

/// An odd message size (three packets, the last not a multiple of 4) on
/// `--loopback`: the data arrives intact, the sender left the ICRC of
/// what went into the ring out, and the receiver failed none.
#[test]
fn loopback_writes_go_without_the_senders_icrc_and_arrive_intact() {
    let (port, rport) = port_args();
    let o = spawn(&[
        "perf",
        "write-bw",
        "--loopback",
        "-s",
        "9001",
        "-n",
        "300",
        "--json",
        "-p",
        &port,
        "--roce-port",
        &rport,
    ])
    .wait(LIMIT);
    let v = json_of(&o);
    assert_eq!(v["verified"], true, "{v}");
    let deferred = counter(&v, "device", "tx_icrc_deferred");
    assert!(deferred >= 900, "3 packets a message: {deferred}");
    assert!(counter(&v, "backend", "udp_shm_tx_no_icrc") >= deferred);
    assert_eq!(counter(&v, "device", "rx_bad_icrc"), 0);
    assert_eq!(counter(&v, "backend", "udp_shm_tx_no_icrc_dropped"), 0);
    // Building in the ring is off by default (UdpConfig::shm_build_in_place).
    assert_eq!(counter(&v, "backend", "udp_shm_tx_in_place"), 0);
}

/// A server that records (`--pcap`) and a client that does not: the
/// client leaves its ICRCs out, the server's capture shows each of its
/// WRITE packets with a valid one.
#[test]
fn a_capture_at_the_receiver_shows_valid_icrcs() {
    let dir = tempfile::tempdir().unwrap();
    let pcap = dir.path().join("server.pcap");
    let (port, rport) = port_args();
    let common = ["-s", "9001", "-n", "40", "-p", &port, "--roce-port", &rport];
    let pcap_s = pcap.to_str().unwrap();
    let server = spawn(
        &[
            &["perf", "write-bw", "--bind", "127.0.0.1", "--pcap", pcap_s][..],
            &common[..],
        ]
        .concat(),
    )
    .listening(port.parse().unwrap());
    let client = spawn(
        &[
            &[
                "perf",
                "write-bw",
                "127.0.0.1",
                "--bind",
                "127.0.0.2",
                "--json",
            ][..],
            &common[..],
        ]
        .concat(),
    )
    .wait(LIMIT);
    let s = server.wait(LIMIT);
    assert_eq!(s.status.code(), Some(0), "{}", text(&s).1);
    let v = json_of(&client);
    assert_eq!(v["verified"], true, "{v}");
    assert!(counter(&v, "device", "tx_icrc_deferred") > 0, "{v}");
    let o = spawn(&["inspect", "--json", "--summary", pcap_s]).wait(LIMIT);
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(0), "{out}");
    let s: Value = serde_json::from_str(out.lines().last().unwrap()).unwrap();
    let s = &s["summary"];
    assert!(s["roce_packets"].as_u64().unwrap() >= 120, "{s}");
    assert_eq!(s["malformed"], 0, "{s}");
    assert_eq!(s["icrc_failures"], 0, "{s}");
    let o = spawn(&["inspect", pcap_s]).wait(LIMIT);
    let out = String::from_utf8_lossy(&o.stdout);
    let writes: Vec<&str> = out.lines().filter(|l| l.contains("RDMA_WRITE_")).collect();
    assert!(writes.len() >= 120, "{out}");
    assert!(writes.iter().all(|l| l.ends_with("icrc=ok")), "{out}");
}
