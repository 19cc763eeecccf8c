//! With `--json`, every failure is also a JSON object on stdout carrying
//! the exit status (it used to be text on stderr and an empty stdout), and
//! the ICRC counters of a `roce perf --json` report say who checked what.

mod common;

use std::process::Output;
use std::time::Duration;

use common::{roce, Guard};
use roce_testkit::port_args;
use serde_json::Value;

fn run(args: &[&str]) -> Output {
    run_with(args, &[])
}

fn run_with(args: &[&str], env: &[(&str, &str)]) -> Output {
    let child = roce()
        .args(args)
        .envs(env.iter().copied())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    Guard(Some(child)).wait(Duration::from_secs(30))
}

/// The last stdout line as JSON, checked against the exit status.
fn json_error(args: &[&str], code: i32) -> Value {
    let o = run(args);
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    assert_eq!(o.status.code(), Some(code), "{args:?}: {out}");
    let v: Value = serde_json::from_str(out.lines().last().unwrap_or(""))
        .unwrap_or_else(|e| panic!("{args:?}: not JSON ({e}): '{out}'"));
    assert_eq!(v["exit_status"], code, "{v}");
    assert!(v["error"].as_str().is_some_and(|e| !e.is_empty()), "{v}");
    // The text stays on stderr for people.
    assert!(!o.stderr.is_empty());
    v
}

#[test]
fn json_failures_are_json_on_stdout() {
    // Nothing listens on 127.0.0.1:9 (discard).
    let v = json_error(&["perf", "write-bw", "127.0.0.1", "-p", "9", "--json"], 1);
    assert!(v["error"].as_str().unwrap().contains("cannot reach"), "{v}");
    let v = json_error(
        &["perf", "write-bw", "--loopback", "-m", "1000", "--json"],
        1,
    );
    assert!(v["error"].as_str().unwrap().contains("MTU 1000"), "{v}");
    // A usage error, found by the argument parser.
    let v = json_error(&["perf", "write-bw", "--json", "--no-such-flag"], 2);
    assert!(
        v["error"].as_str().unwrap().contains("--no-such-flag"),
        "{v}"
    );
    let v = json_error(&["sim", "/nonexistent/x.toml", "--json"], 2);
    assert!(
        v["error"].as_str().unwrap().contains("/nonexistent/x.toml"),
        "{v}"
    );
    let v = json_error(&["inspect", "--json", "/nonexistent/x.pcap"], 2);
    assert_eq!(v["file"], "/nonexistent/x.pcap", "{v}");
    let v = json_error(&["devinfo", "-d", "no-such-if0", "--json"], 1);
    assert!(v["error"].as_str().unwrap().contains("no-such-if0"), "{v}");
}

/// `roce perf write-bw --loopback -n 50 --json` with `ROCE_SHM` as given:
/// the report's counters.
fn loopback_counters(shm: &str) -> Value {
    let (port, rport) = port_args();
    let o = run_with(
        &[
            "perf",
            "write-bw",
            "--loopback",
            "-n",
            "50",
            "-p",
            &port,
            "--roce-port",
            &rport,
            "--json",
        ],
        &[("ROCE_SHM", shm)],
    );
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    v["counters"].clone()
}

/// Over UDP on IPv4 the socket hides the IP ID the ICRC covers: the
/// engine checks the ICRCs assuming ID 0 (or a GSO segment's), and
/// `counters.icrc` says so in one place, every datagram accounted for as
/// verified.
#[test]
fn icrc_counters_say_who_checked() {
    let c = loopback_counters("0");
    let rx = c["device"]["rx_datagrams"].as_u64().unwrap();
    assert!(rx > 0);
    assert_eq!(c["icrc"]["verified"], rx, "{c}");
    assert_eq!(c["icrc"]["verified_assuming_ip_id"], rx, "{c}");
    assert_eq!(c["device"]["rx_icrc_assumed_ipv4_id"], rx, "{c}");
    assert_eq!(c["icrc"]["not_verified"], 0, "{c}");
    assert_eq!(c["icrc"]["same_host"], 0, "{c}");
    assert_eq!(c["icrc"]["failed"], 0, "{c}");
    assert_eq!(c["backend"]["udp_shm_tx_datagrams"], 0, "{c}");
}

/// With the same-host path (the default), the datagrams after the first
/// few come through shared memory with their headers exact (the IPv4 ID
/// known) and, as an engine pushed them untouched, marked intact: the
/// engine takes those on trust (docs/shm.md) and checks every other ICRC
/// without assuming an ID; none goes unaccounted.
#[test]
fn same_host_datagrams_are_verified_or_trusted_by_the_engine() {
    let c = loopback_counters("1");
    let rx = c["device"]["rx_datagrams"].as_u64().unwrap();
    let same_host = c["icrc"]["same_host"].as_u64().unwrap();
    assert!(same_host > 0, "{c}");
    assert_eq!(c["backend"]["udp_shm_rx_datagrams"], same_host, "{c}");
    let trusted = c["icrc"]["host_trusted"].as_u64().unwrap();
    assert!(trusted > 0 && trusted <= same_host, "{c}");
    assert_eq!(c["device"]["rx_icrc_host_trusted"], trusted, "{c}");
    assert_eq!(c["icrc"]["verified"].as_u64().unwrap() + trusted, rx, "{c}");
    let assumed = c["icrc"]["verified_assuming_ip_id"].as_u64().unwrap();
    assert!(rx - assumed >= same_host, "{c}");
    assert_eq!(c["icrc"]["not_verified"], 0, "{c}");
    assert!(
        c["backend"]["udp_shm_links_out"].as_u64().unwrap() >= 1,
        "{c}"
    );
}
