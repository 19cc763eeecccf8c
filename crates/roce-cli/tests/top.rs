//! `roce top` (docs/debugging.md, "roce top") on unmodified
//! `ibv_rc_pingpong` pairs (Debian's ibverbs-utils) under `roce exec`:
//! it sees both processes and their QPs while they run, and nothing once
//! they are gone, whether they exited (the library removes its file) or
//! were killed (`roce top` removes the file of a dead process). Each test
//! has a directory of its own (`XDG_RUNTIME_DIR`), so that other
//! processes of the host are not in its snapshots.
//!
//! `.ci/run` installs ibverbs-utils and sets `ROCE_REQUIRE_RDMA_TOOLS`,
//! so in CI a missing program fails the test; elsewhere it is skipped.

mod common;

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::{lib_dir, roce, Guard};
use roce_testkit::free_port;
use serde_json::Value;

const LIMIT: Duration = Duration::from_secs(60);

fn have(prog: &str) -> bool {
    common::have_tool(prog, "ibverbs-utils")
}

/// `roce exec -- ibv_rc_pingpong ...` publishing into `dir`.
fn pingpong(dir: &Path, port: u16, iters: u32, server: Option<&str>) -> Command {
    let mut c = roce();
    c.args(["exec", "--no-device-files", "--devices", "lo", "--"])
        .args(["ibv_rc_pingpong", "-d", "roce_lo", "-g", "0", "-s", "64"])
        .args(["-n", &iters.to_string(), "-p", &port.to_string()])
        .args(server)
        .env("ROCE_LIB_DIR", lib_dir())
        .env("XDG_RUNTIME_DIR", dir)
        .env_remove("ROCE_TOP")
        .env_remove("ROCE_ADDR");
    c
}

/// `roce top --json` on `dir`: its processes.
fn top(dir: &Path) -> Vec<Value> {
    let o = roce()
        .args(["top", "--json"])
        .env("XDG_RUNTIME_DIR", dir)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["dir"], dir.display().to_string());
    v["processes"].as_array().unwrap().clone()
}

/// The published files in `dir`.
fn files(dir: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .contains("roce-top-")
        })
        .collect()
}

/// Two running processes and their connected QPs, with packets counted
/// and rates; after they are killed, none (their files removed by `roce
/// top`, as their processes are dead).
#[test]
fn top_sees_two_processes_and_their_qps() {
    if !have("ibv_rc_pingpong") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let server = Guard::spawn(pingpong(dir.path(), port, 100_000_000, None)).listening(port);
    let client = Guard::spawn(pingpong(dir.path(), port, 100_000_000, Some("127.0.0.1")));
    let pids = [
        server.0.as_ref().unwrap().id() as u64,
        client.0.as_ref().unwrap().id() as u64,
    ];
    let end = Instant::now() + LIMIT;
    let procs = loop {
        let p = top(dir.path());
        let busy = |v: &Value| {
            v["contexts"][0]["qps"][0]["tx_packets"].as_u64() > Some(0)
                && v["contexts"][0]["qps"][0]["rx_pps"].as_f64() > Some(0.0)
        };
        if p.len() == 2 && p.iter().all(busy) {
            break p;
        }
        assert!(Instant::now() < end, "roce top saw {p:#?}");
        std::thread::sleep(Duration::from_millis(200));
    };
    let mut seen: Vec<u64> = procs.iter().map(|p| p["pid"].as_u64().unwrap()).collect();
    seen.sort();
    let mut want = pids.to_vec();
    want.sort();
    assert_eq!(seen, want, "{procs:#?}");
    let qp = |i: usize| &procs[i]["contexts"][0]["qps"][0];
    for i in 0..2 {
        let p = &procs[i];
        assert_eq!(p["program"], "ibv_rc_pingpong");
        assert_eq!(p["contexts"][0]["device"], "roce_lo");
        assert_eq!(p["contexts"][0]["addr"], "127.0.0.1");
        let q = qp(i);
        assert_eq!(q["type"], "RC", "{q}");
        assert_eq!(q["state"], "RTS", "{q}");
        assert_eq!(q["peer"], "127.0.0.1", "{q}");
        assert_eq!(q["peer_qpn"], qp(1 - i)["qpn"], "{procs:#?}");
        assert!(q["rx_packets"].as_u64().unwrap() > 0, "{q}");
        assert!(p["contexts"][0]["cqs"][0]["completions"].as_u64().unwrap() > 0);
    }
    // The text view shows them too.
    let o = roce()
        .args(["top", "--once"])
        .env("XDG_RUNTIME_DIR", dir.path())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("2 processes"), "{text}");
    assert_eq!(text.matches("ibv_rc_pingpong").count(), 2, "{text}");
    assert!(text.contains(&format!("{:#x}", qp(0)["qpn"].as_u64().unwrap())));
    for f in files(dir.path()) {
        let m = std::fs::metadata(&f).unwrap();
        assert_eq!(m.mode() & 0o777, 0o600, "{}", f.display());
    }

    drop(client);
    drop(server);
    assert!(top(dir.path()).is_empty());
    assert_eq!(files(dir.path()), Vec::<PathBuf>::new());
}

/// A pair that runs to its end leaves no file: the library removes its
/// own at exit.
#[test]
fn the_files_go_when_the_processes_exit() {
    if !have("ibv_rc_pingpong") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let server = Guard::spawn(pingpong(dir.path(), port, 2000, None)).listening(port);
    let client = Guard::spawn(pingpong(dir.path(), port, 2000, Some("127.0.0.1"))).wait(LIMIT);
    let server = server.wait(LIMIT);
    assert!(
        client.status.success() && server.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&server.stderr),
        String::from_utf8_lossy(&client.stderr)
    );
    assert_eq!(files(dir.path()), Vec::<PathBuf>::new());
    assert!(top(dir.path()).is_empty());
}
