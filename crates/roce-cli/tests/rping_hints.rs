//! `roce rping -c` with no server says so within 2 s (it was silent for
//! the 17 s the CM retries before "peer unreachable").

mod common;

use std::time::{Duration, Instant};

use common::{roce, Guard};

#[test]
fn a_client_without_a_server_says_so_early() {
    let rport = (46_000 + std::process::id() % 1000).to_string();
    let start = Instant::now();
    let c = roce()
        .args([
            "rping",
            "-c",
            "-a",
            "127.0.0.1",
            "-p",
            "19999",
            "--bind",
            "127.0.0.2",
        ])
        .args(["--roce-port", &rport, "--timeout", "4"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let o = Guard(Some(c)).wait(Duration::from_secs(30));
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    let lines: Vec<&str> = err.lines().collect();
    assert!(
        lines.len() == 2 && lines[0].contains("no answer yet from 127.0.0.1 port 19999"),
        "{err}"
    );
    assert!(lines[0].contains("rping -s"), "{err}");
    assert!(start.elapsed() < Duration::from_secs(10));
}

/// The same for `roce udaddy -s` (SIDR through the CM).
#[test]
fn a_udaddy_client_without_a_server_says_so_early() {
    let rport = (47_000 + std::process::id() % 1000).to_string();
    let start = Instant::now();
    let c = roce()
        .args([
            "udaddy",
            "-s",
            "127.0.0.1",
            "--port",
            "19998",
            "-b",
            "127.0.0.2",
        ])
        .args(["--roce-port", &rport, "--timeout", "4"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let o = Guard(Some(c)).wait(Duration::from_secs(30));
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    let lines: Vec<&str> = err.lines().collect();
    assert!(
        lines.len() == 2 && lines[0].contains("no answer yet from 127.0.0.1 port 19998"),
        "{err}"
    );
    assert!(start.elapsed() < Duration::from_secs(10));
}

/// And for `roce perf --perftest -R` (perftest's rdma_cm mode), whose
/// client meets no server: the notice within 2 s, the error at the CM's
/// ~17 s.
#[test]
fn a_perftest_rdma_cm_client_without_a_server_says_so_early() {
    let rport = (47_500 + std::process::id() % 400).to_string();
    let c = roce()
        .args([
            "perf",
            "write-bw",
            "127.0.0.1",
            "--perftest",
            "-R",
            "--bind",
            "127.0.0.2",
        ])
        .args(["-p", "19997", "--roce-port", &rport])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let o = Guard(Some(c)).wait(Duration::from_secs(40));
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    let lines: Vec<&str> = err.lines().collect();
    assert!(
        lines.len() == 2
            && lines[0].contains("no answer yet from 127.0.0.1 port 19997 over rdma_cm"),
        "{err}"
    );
}
