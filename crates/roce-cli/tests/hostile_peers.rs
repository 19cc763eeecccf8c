//! The pingpong and perftest control channels against hostile peers
//! (issue 18): a flood of garbage, a peer that says nothing. Each server
//! ends with an error, at once or at its timeout, never holding memory or
//! waiting forever. (roce perf's own channel: perf_hostile.rs.)

mod common;

use std::io::Write;
use std::net::TcpStream;
use std::process::{Child, Stdio};
use std::time::Duration;

use common::{roce, Guard};
use roce_testkit::free_ports;

#[allow(clippy::zombie_processes)] // the Guard waits for it
fn start(args: &[&str], port: u16) -> (Child, TcpStream) {
    let mut child = roce()
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    match roce_testkit::connect_when_listening(&mut child, port) {
        Ok(s) => (child, s),
        Err(status) => panic!("the server ended ({status}) before listening"),
    }
}

fn flood(mut s: TcpStream, first: &[u8]) {
    let _ = s.write_all(first);
    let chunk = vec![b'x'; 1 << 20];
    for _ in 0..64 {
        if s.write_all(&chunk).is_err() {
            return;
        }
    }
}

#[test]
fn pingpong_server_against_garbage_and_silence() {
    let [p, r] = free_ports();
    let args = |p: u16, r: u16| {
        [
            "pingpong".to_string(),
            "--bind".into(),
            "127.0.0.1".into(),
            "-p".into(),
            p.to_string(),
            "--roce-port".into(),
            r.to_string(),
            "--timeout".into(),
            "3".into(),
        ]
    };
    let a = args(p, r);
    let a: Vec<&str> = a.iter().map(String::as_str).collect();
    let (c, s) = start(&a, p);
    let t = std::thread::spawn(move || flood(s, b""));
    let o = Guard(Some(c)).wait(Duration::from_secs(20));
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("malformed address message"), "{err}");
    t.join().unwrap();

    let [p, r] = free_ports();
    let a = args(p, r);
    let a: Vec<&str> = a.iter().map(String::as_str).collect();
    let (c, s) = start(&a, p);
    let o = Guard(Some(c)).wait(Duration::from_secs(20));
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("timed out"), "{err}");
    drop(s);
}

#[test]
fn perftest_server_against_garbage_and_silence() {
    for first in [&b"6.06\0\0\0\0\0\0\0\0\0\0\0\0"[..], &b"~~~"[..]] {
        let [p, r] = free_ports();
        let (ps, rs) = (p.to_string(), r.to_string());
        // A plain server, which recognises perftest by its version string.
        let (c, s) = start(
            &[
                "perf",
                "write-bw",
                "--bind",
                "127.0.0.1",
                "-p",
                &ps,
                "--roce-port",
                &rs,
            ],
            p,
        );
        let first = first.to_vec();
        let t = std::thread::spawn(move || flood(s, &first));
        let o = Guard(Some(c)).wait(Duration::from_secs(15));
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{err}");
        assert!(
            err.contains("key string")
                || err.contains("neither roce perf's exchange nor perftest's"),
            "{err}"
        );
        t.join().unwrap();
    }
    // Silence: dropped after 10 s.
    let [p, r] = free_ports();
    let (ps, rs) = (p.to_string(), r.to_string());
    let (c, s) = start(
        &[
            "perf",
            "write-bw",
            "--perftest",
            "--bind",
            "127.0.0.1",
            "-p",
            &ps,
            "--roce-port",
            &rs,
        ],
        p,
    );
    let o = Guard(Some(c)).wait(Duration::from_secs(20));
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("sent nothing"), "{err}");
    drop(s);
}
