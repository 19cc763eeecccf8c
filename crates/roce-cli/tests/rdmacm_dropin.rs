//! librdmacm's tools (Debian's `rdmacm-utils`, perftest with `-R`),
//! unmodified, under `roce exec` (the drop-in libibverbs.so.1 and
//! librdmacm.so.1), against this stack's own `roce rping`, `roce
//! udaddy` and `roce perf --perftest -R`, in both roles. Each test takes
//! loopback addresses of its own: the server's on 127.X.Y.1, the
//! client's on 127.X.Y.2.
//!
//! `.ci/run` installs the packages and sets `ROCE_REQUIRE_RDMA_TOOLS`, so
//! in CI a missing program fails the test; elsewhere it is skipped.

mod common;

use std::process::Command;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::Duration;

use common::{lib_dir, roce, Guard};
use roce_testkit::text_of;

const LIMIT: Duration = Duration::from_secs(60);

fn have(prog: &str) -> bool {
    common::have_tool(prog, "rdmacm-utils perftest")
}

/// A pair of loopback addresses (server, client) of this test's own.
fn addrs() -> (String, String) {
    static N: AtomicU8 = AtomicU8::new(1);
    let n = N.fetch_add(1, Ordering::Relaxed);
    let base = 200 + (std::process::id() % 50) as u8;
    (format!("127.{base}.{n}.1"), format!("127.{base}.{n}.2"))
}

/// `roce exec --addr ADDR -- PROG ARGS` on the loopback device.
fn exec(addr: &str, prog: &str, args: &[&str]) -> Command {
    let mut c = roce();
    c.args(["exec", "--devices", "lo", "--addr", addr, "--", prog])
        .args(args)
        .env("ROCE_LIB_DIR", lib_dir());
    c
}

fn ours(args: &[&str]) -> Command {
    let mut c = roce();
    c.args(args);
    c
}

/// Starts `server` (its device on `addr`), then `client` once the
/// server's device is open; both must exit 0. Returns (server, client)
/// output.
fn pair(server: Command, client: Command, addr: &str) -> (String, String) {
    let s = Guard::spawn_roce_server(server, addr.parse().unwrap());
    let c = Guard::spawn(client).wait(LIMIT);
    let c_ok = c.status.success();
    let s = s.wait(if c_ok { LIMIT } else { Duration::from_secs(2) });
    let (st, ct) = (text_of(&s), text_of(&c));
    assert!(
        s.status.success() && c_ok,
        "server {}, client {}\n--- server:\n{st}\n--- client:\n{ct}",
        s.status,
        c.status
    );
    (st, ct)
}

#[test]
fn rping_serves_roce_rping() {
    if !have("rping") {
        return;
    }
    let (a, b) = addrs();
    let (st, ct) = pair(
        exec(&a, "rping", &["-s", "-a", &a, "-v", "-C", "5"]),
        ours(&["rping", "-c", "-a", &a, "--bind", &b, "-C", "5", "-V", "-v"]),
        &a,
    );
    assert!(st.contains("server ping data: rdma-ping-4"), "{st}");
    assert!(ct.contains("rdma-ping-4"), "{ct}");
}

#[test]
fn roce_rping_serves_rping() {
    if !have("rping") {
        return;
    }
    let (a, b) = addrs();
    let (_, ct) = pair(
        ours(&["rping", "-s", "-a", &a, "--timeout", "30"]),
        exec(&b, "rping", &["-c", "-a", &a, "-v", "-V", "-C", "5"]),
        &a,
    );
    assert!(ct.contains("ping data: rdma-ping-4"), "{ct}");
}

#[test]
fn udaddy_serves_roce_udaddy() {
    if !have("udaddy") {
        return;
    }
    let (a, b) = addrs();
    let (st, _) = pair(
        exec(&a, "udaddy", &["-b", &a]),
        ours(&["udaddy", "-s", &a, "--bind", &b]),
        &a,
    );
    assert!(st.contains("return status 0"), "{st}");
}

#[test]
fn roce_udaddy_serves_udaddy() {
    if !have("udaddy") {
        return;
    }
    let (a, b) = addrs();
    let (_, ct) = pair(
        ours(&["udaddy", "-b", &a]),
        exec(&b, "udaddy", &["-s", &a]),
        &a,
    );
    assert!(ct.contains("return status 0"), "{ct}");
}

#[test]
fn ib_write_bw_rdma_cm_against_roce_perf_both_roles() {
    if !have("ib_write_bw") {
        return;
    }
    for tool_serves in [true, false] {
        let (a, b) = addrs();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port()
            .to_string();
        // roce perf in rdma_cm mode, its RoCE address first in `tail`.
        let perf = |tail: &[&str]| {
            let head = [
                "perf",
                "write-bw",
                "--perftest",
                "-R",
                "-n",
                "200",
                "-p",
                &port,
                "--bind",
            ];
            ours(&[&head[..], tail].concat())
        };
        let (server, client) = if tool_serves {
            (
                exec(&a, "ib_write_bw", &["-R", "-p", &port, "-n", "200"]),
                perf(&[&b, &a]),
            )
        } else {
            (
                perf(&[&a]),
                exec(&b, "ib_write_bw", &["-R", "-p", &port, "-n", "200", &a]),
            )
        };
        let (st, ct) = pair(server, client, &a);
        let tool = if tool_serves { &st } else { &ct };
        assert!(tool.contains("#bytes"), "no results table:\n{tool}");
    }
}

/// Ctrl-C on a `roce rping` client that pings without end: it stops,
/// disconnects (exit 130), and Linux's rping server, which has no limit
/// on a silent peer, hears the disconnect and ends.
#[test]
fn ctrl_c_on_roce_rping_disconnects_rping() {
    if !have("rping") {
        return;
    }
    let (a, b) = addrs();
    let server = Guard::spawn_roce_server(exec(&a, "rping", &["-s", "-a", &a]), a.parse().unwrap());
    let client = Guard::spawn(ours(&["rping", "-c", "-a", &a, "--bind", &b, "-C", "0"]));
    std::thread::sleep(Duration::from_millis(800));
    let pid = client.0.as_ref().unwrap().id().to_string();
    let sent = Command::new("kill").args(["-INT", &pid]).status().unwrap();
    assert!(sent.success());
    let c = client.wait(LIMIT);
    let (_, cerr) = roce_testkit::text(&c);
    assert_eq!(c.status.code(), Some(130), "{cerr}");
    assert!(cerr.contains("interrupted"), "{cerr}");
    let s = server.wait(Duration::from_secs(10));
    assert!(s.status.success(), "{}", text_of(&s));
    assert!(text_of(&s).contains("DISCONNECT"), "{}", text_of(&s));
}
