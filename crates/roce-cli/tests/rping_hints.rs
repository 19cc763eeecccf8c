//! `roce rping -c` with no server says so within a few seconds, in one
//! line naming what to run (it was silent for the 17 s the CM retries
//! before "peer unreachable").

mod common;

use std::time::{Duration, Instant};

use common::{roce, Guard};
use roce_testkit::free_port;

/// With the default `--timeout`, a client whose server is missing fails
/// within the 4 s it gives the CM, with the hint, in one line.
#[test]
fn a_client_without_a_server_fails_within_seconds() {
    let rport = free_port().to_string();
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
        .args(["--roce-port", &rport])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let o = Guard(Some(c)).wait(Duration::from_secs(30));
    let took = start.elapsed();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert_eq!(
        err.trim_end(),
        "roce rping: connect to 127.0.0.1:19999: no answer in 4 s (is a server running \
         there: roce rping -s -a 127.0.0.1, or rping -s?)",
    );
    assert!(took < Duration::from_secs(8), "{took:?}");
}

/// `--timeout 0` keeps trying (until interrupted), saying so once.
#[test]
fn a_client_told_to_wait_forever_says_it_is_still_trying() {
    let rport = free_port().to_string();
    let c = roce()
        .args(["rping", "-c", "-a", "127.0.0.1", "-p", "19996"])
        .args([
            "--bind",
            "127.0.0.2",
            "--roce-port",
            &rport,
            "--timeout",
            "0",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut g = Guard(Some(c));
    std::thread::sleep(Duration::from_secs(4));
    let child = g.0.as_mut().unwrap();
    assert!(child.try_wait().unwrap().is_none(), "it gave up");
    let _ = child.kill();
    let o = g.wait(Duration::from_secs(10));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("no answer yet from 127.0.0.1 port 19996") && err.contains("still trying"),
        "{err}"
    );
}

/// The same for `roce udaddy -s` (SIDR through the CM).
#[test]
fn a_udaddy_client_without_a_server_says_so_early() {
    let rport = free_port().to_string();
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
    let rport = free_port().to_string();
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
