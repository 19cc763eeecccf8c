//! Unmodified RDMA CM programs from Debian's `rdmacm-utils` and
//! `perftest` (with `-R`) over the drop-in libraries: each test starts a
//! server and a client the way a user would (`LD_LIBRARY_PATH` naming a
//! directory that holds `libibverbs.so.1` and `librdmacm.so.1`, as
//! `roce exec` does), and checks what they print and their exit status.
//!
//! Each test takes loopback addresses of its own (`127.77.N.1` for the
//! server, `127.77.N.2` for the client's contexts, through `ROCE_ADDR`),
//! so tests in parallel never meet. An rdma_cm client does not retry a
//! refused connection, so the client starts once the server's context
//! is open (`Guard::spawn_roce_server`).
//!
//! `.ci/run` installs the packages and sets `ROCE_REQUIRE_RDMA_TOOLS`, so
//! in CI a missing program fails the test; elsewhere it is skipped.

mod common;

use std::process::Command;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::Duration;

use common::have;
use roce_testkit::{text_of, Guard};

/// A pair of loopback addresses no other test of this binary uses.
fn addrs() -> (String, String) {
    static N: AtomicU8 = AtomicU8::new(1);
    let n = N.fetch_add(1, Ordering::Relaxed);
    let base = 64 + (std::process::id() % 128) as u8;
    (format!("127.{base}.{n}.1"), format!("127.{base}.{n}.2"))
}

fn command(prog: &str, args: &[&str], addr: &str) -> Command {
    let mut c = Command::new(prog);
    c.args(args)
        .env("LD_LIBRARY_PATH", common::dropin("rdmacm-dropin"))
        .env("ROCE_ADDR", addr)
        .env("ROCE_DEVICES", "lo");
    c
}

/// Runs `server` (its contexts on `s`) and then `client` (on `c`); both
/// must exit 0. Returns their output.
fn pair(server: (&str, &[&str]), client: (&str, &[&str]), s: &str, c: &str) -> (String, String) {
    let limit = Duration::from_secs(60);
    let srv = Guard::spawn_roce_server(command(server.0, server.1, s), s.parse().unwrap());
    let co = Guard::spawn(command(client.0, client.1, c)).wait(limit);
    let so = srv.wait(limit);
    let (st, ct) = (text_of(&so), text_of(&co));
    assert!(
        so.status.success() && co.status.success(),
        "server {:?} {:?}, client {:?} {:?}\nserver:\n{st}\nclient:\n{ct}",
        server,
        so.status,
        client,
        co.status
    );
    (st, ct)
}

#[test]
fn rping_pings_and_verifies() {
    if !have("rping") {
        return;
    }
    let (s, c) = addrs();
    let (st, ct) = pair(
        (
            "rping",
            &["-s", "-a", &s, "-p", "7174", "-v", "-V", "-C", "10"],
        ),
        (
            "rping",
            &["-c", "-a", &s, "-p", "7174", "-v", "-V", "-C", "10"],
        ),
        &s,
        &c,
    );
    assert!(ct.contains("ping data: rdma-ping-9: "), "{ct}");
    assert!(st.contains("server ping data: rdma-ping-9: "), "{st}");
}

/// Both ends on one address, as two processes of a host on a NIC's one
/// GID (docs/host.md): the client's REQ reaches the listener's process
/// and every later MAD the connection's, the pings are verified, and the
/// two logged the same address.
#[test]
fn rping_both_ends_on_one_address() {
    if !have("rping") {
        return;
    }
    let (s, _) = addrs();
    let log = |mut c: Command| {
        c.env("ROCE_LOG", "1");
        c
    };
    let srv = Guard::spawn_roce_server(
        log(command(
            "rping",
            &["-s", "-a", &s, "-p", "7175", "-v", "-V", "-C", "10"],
            &s,
        )),
        s.parse().unwrap(),
    );
    let limit = Duration::from_secs(60);
    let co = Guard::spawn(log(command(
        "rping",
        &["-c", "-a", &s, "-p", "7175", "-v", "-V", "-C", "10"],
        &s,
    )))
    .wait(limit);
    let so = srv.wait(limit);
    let (st, ct) = (text_of(&so), text_of(&co));
    assert!(
        so.status.success() && co.status.success(),
        "server:\n{st}\nclient:\n{ct}"
    );
    assert!(ct.contains("ping data: rdma-ping-9: "), "{ct}");
    assert!(st.contains("server ping data: rdma-ping-9: "), "{st}");
    let opened = format!("opened on {s}");
    assert!(
        st.contains(&opened) && ct.contains(&opened),
        "server:\n{st}\nclient:\n{ct}"
    );
}

/// 65,000-byte pings, verified by both sides (`-V`; not printed: the
/// output would fill the pipe before the test reads it).
#[test]
fn rping_large_messages() {
    if !have("rping") {
        return;
    }
    let (s, c) = addrs();
    let (st, _) = pair(
        ("rping", &["-s", "-a", &s, "-S", "65000", "-C", "5", "-V"]),
        ("rping", &["-c", "-a", &s, "-S", "65000", "-C", "5", "-V"]),
        &s,
        &c,
    );
    assert!(st.contains("server DISCONNECT EVENT"), "{st}");
}

#[test]
fn ucmatose_four_connections() {
    if !have("ucmatose") {
        return;
    }
    let (s, c) = addrs();
    let (st, ct) = pair(
        ("ucmatose", &["-b", &s, "-c", "4", "-C", "20"]),
        ("ucmatose", &["-s", &s, "-c", "4", "-C", "20"]),
        &s,
        &c,
    );
    for out in [&st, &ct] {
        assert!(out.contains("data transfers complete"), "{out}");
        assert!(out.contains("return status 0"), "{out}");
    }
}

#[test]
fn udaddy_two_connections() {
    if !have("udaddy") {
        return;
    }
    let (s, c) = addrs();
    let (st, ct) = pair(
        ("udaddy", &["-b", &s, "-c", "2", "-C", "10"]),
        ("udaddy", &["-s", &s, "-c", "2", "-C", "10"]),
        &s,
        &c,
    );
    for out in [&st, &ct] {
        assert!(out.contains("data transfers complete"), "{out}");
        assert!(out.contains("return status 0"), "{out}");
    }
}

#[test]
fn rdma_server_and_client() {
    if !have("rdma_server") {
        return;
    }
    let (s, c) = addrs();
    let (st, ct) = pair(
        ("rdma_server", &["-s", &s, "-p", "7471"]),
        ("rdma_client", &["-s", &s, "-p", "7471"]),
        &s,
        &c,
    );
    assert!(st.contains("rdma_server: end 0"), "{st}");
    assert!(ct.contains("rdma_client: end 0"), "{ct}");
}

#[test]
fn rdma_xserver_and_xclient_over_rc() {
    if !have("rdma_xserver") {
        return;
    }
    let (s, c) = addrs();
    // The server binds the wildcard address: it listens on its loopback
    // context (ROCE_ADDR).
    let (st, ct) = pair(
        ("rdma_xserver", &["-p", "7472", "-c", "r"]),
        ("rdma_xclient", &["-s", &s, "-p", "7472", "-c", "r"]),
        &s,
        &c,
    );
    assert!(st.contains("rdma_xserver: end 0"), "{st}");
    assert!(ct.contains("rdma_xclient: end 0"), "{ct}");
}

/// perftest over rdma_cm (`-R`): the connection and its exchange go
/// through librdmacm. Each tool with a few iterations.
#[test]
fn perftest_tools_with_rdma_cm() {
    if !have("ib_write_bw") {
        return;
    }
    for tool in [
        "ib_write_bw",
        "ib_read_bw",
        "ib_send_bw",
        "ib_atomic_bw",
        "ib_write_lat",
        "ib_read_lat",
        "ib_send_lat",
        "ib_atomic_lat",
    ] {
        let (s, c) = addrs();
        let port = common::free_port().to_string();
        let a = ["-R", "-p", &port, "-n", "50"];
        let mut ca = a.to_vec();
        ca.push(&s);
        let (_, ct) = pair((tool, &a), (tool, &ca), &s, &c);
        assert!(ct.contains("#bytes"), "{tool}: no results table\n{ct}");
    }
}

/// `rping -q`: both sides create and modify their QPs themselves
/// (`rdma_init_qp_attr` for INIT, RTR and RTS, `rdma_establish`).
#[test]
fn rping_with_program_managed_qps() {
    if !have("rping") {
        return;
    }
    let (s, c) = addrs();
    let (st, ct) = pair(
        ("rping", &["-s", "-q", "-a", &s, "-v", "-C", "5"]),
        ("rping", &["-c", "-q", "-a", &s, "-v", "-V", "-C", "5"]),
        &s,
        &c,
    );
    assert!(ct.contains("ping data: rdma-ping-4: "), "{ct}");
    assert!(st.contains("server ping data: rdma-ping-4: "), "{st}");
}

/// `cmtime`: 50 connections set up and torn down with program-managed
/// QPs; its server runs until killed, so only the client must finish.
#[test]
fn cmtime_fifty_connections() {
    if !have("cmtime") {
        return;
    }
    let (s, c) = addrs();
    let srv = Guard::spawn_roce_server(
        command("cmtime", &["-b", &s, "-c", "50"], &s),
        s.parse().unwrap(),
    );
    let co =
        Guard::spawn(command("cmtime", &["-s", &s, "-c", "50"], &c)).wait(Duration::from_secs(60));
    let ct = text_of(&co);
    assert!(co.status.success(), "{:?}\n{ct}", co.status);
    // Its table: one row per step, each with a total above zero for the
    // steps that cross the network.
    for step in ["connect", "disconnect"] {
        let row = ct
            .lines()
            .find(|l| l.trim_start().starts_with(step) && l.contains(':'))
            .unwrap_or_else(|| panic!("no {step} row in\n{ct}"));
        let total: f64 = row
            .split(':')
            .nth(1)
            .and_then(|r| r.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("{row}"));
        assert!(total > 0.0, "{row}");
    }
    drop(srv);
}
