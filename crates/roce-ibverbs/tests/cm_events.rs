//! What an rdma_cm program sees when a connection fails, over the drop-in
//! libraries, as the kernel's librdmacm reports it: a port nobody listens
//! on (REJECTED, status 8), a listener destroyed with requests waiting
//! (REJECTED, status 28), a peer that does not answer (UNREACHABLE,
//! -ETIMEDOUT), a peer process that exits with its connection up
//! (DISCONNECTED), a destination without a route (`rdma_resolve_addr`
//! fails with ENETUNREACH). `tests/c/cm_events.c`, built against
//! rdma-core's header and libraries as any program is, runs each case.
//!
//! Needs a C compiler and `librdmacm-dev` (`.ci/run` installs it and sets
//! `ROCE_REQUIRE_C_HEADERS`; elsewhere a missing header is a skip).

mod common;

use std::path::PathBuf;
use std::process::{Command, Output};
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::{Duration, Instant};

use roce_testkit::{text_of, Guard};

/// `tests/c/cm_events.c`, built once.
fn program() -> Option<PathBuf> {
    common::c_program("cm_events", "rdma/rdma_cma.h")
}

/// A loopback address block of this test's own: 127.B.N.x.
fn block() -> String {
    static N: AtomicU8 = AtomicU8::new(1);
    let n = N.fetch_add(1, Ordering::Relaxed);
    format!("127.{}.{n}", 20 + std::process::id() % 40)
}

fn run(exe: &PathBuf, addr: &str, args: &[&str]) -> Command {
    let mut c = Command::new(exe);
    c.args(args)
        .env("LD_LIBRARY_PATH", common::dropin("cm-events-dropin"))
        .env("ROCE_ADDR", addr)
        .env("ROCE_DEVICES", "lo");
    c
}

/// Runs a client to its end (at most `limit`).
fn client(exe: &PathBuf, addr: &str, args: &[&str], limit: Duration) -> Output {
    Guard::spawn(run(exe, addr, args)).wait(limit)
}

/// Starts a server on `addr` and returns once it listens.
fn server(exe: &PathBuf, addr: &str, args: &[&str]) -> Guard {
    Guard::spawn_roce_server(run(exe, addr, args), addr.parse().unwrap())
}

/// The "EVENT <name> <status>" line a run printed.
fn event(o: &Output) -> String {
    let t = text_of(o);
    assert!(o.status.success(), "{:?}\n{t}", o.status);
    t.lines()
        .find(|l| l.starts_with("EVENT ") || l.starts_with("ERRNO "))
        .unwrap_or_else(|| panic!("no outcome in\n{t}"))
        .to_string()
}

#[test]
fn a_port_nobody_listens_on_is_rejected_with_status_8() {
    let Some(exe) = program() else { return };
    let b = block();
    let (s, c) = (format!("{b}.1"), format!("{b}.2"));
    let _server = server(&exe, &s, &["serve", &s, "7001"]);
    let o = client(&exe, &c, &["connect", &s, "7002"], Duration::from_secs(30));
    assert_eq!(event(&o), "EVENT RDMA_CM_EVENT_REJECTED 8");
}

#[test]
fn a_destroyed_listener_rejects_the_requests_it_had() {
    let Some(exe) = program() else { return };
    let b = block();
    let (s, c) = (format!("{b}.1"), format!("{b}.2"));
    let srv = server(&exe, &s, &["drop_listener", &s, "7003", "20"]);
    let o = client(&exe, &c, &["connect", &s, "7003"], Duration::from_secs(30));
    assert_eq!(event(&o), "EVENT RDMA_CM_EVENT_REJECTED 28");
    let so = srv.wait(Duration::from_secs(10));
    let t = text_of(&so);
    assert!(t.contains("QUEUED") && t.contains("DESTROYED"), "{t}");
}

#[test]
fn a_silent_peer_is_unreachable() {
    let Some(exe) = program() else { return };
    let b = block();
    // Nobody owns {b}.1: the REQ is resent until the CM gives up.
    let (s, c) = (format!("{b}.1"), format!("{b}.2"));
    let t = Instant::now();
    let o = client(&exe, &c, &["connect", &s, "7004"], Duration::from_secs(60));
    assert_eq!(event(&o), "EVENT RDMA_CM_EVENT_UNREACHABLE -110");
    // Every retry ran: 15 resends a second or so apart.
    assert!(t.elapsed() > Duration::from_secs(10), "{:?}", t.elapsed());
}

#[test]
fn a_peer_that_exits_connected_disconnects() {
    let Some(exe) = program() else { return };
    let b = block();
    let (s, c) = (format!("{b}.1"), format!("{b}.2"));
    let srv = server(&exe, &s, &["serve", &s, "7005"]);
    let o = client(
        &exe,
        &c,
        &["connect_exit", &s, "7005"],
        Duration::from_secs(30),
    );
    assert_eq!(event(&o), "EVENT RDMA_CM_EVENT_ESTABLISHED 0");
    let so = srv.wait(Duration::from_secs(30));
    assert_eq!(event(&so), "EVENT RDMA_CM_EVENT_DISCONNECTED 0");
}

/// In a network namespace with no route (needs root and `ip netns`).
#[test]
fn a_destination_without_a_route_fails_resolution() {
    let Some(exe) = program() else { return };
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: not root");
        return;
    }
    let ns = format!("roce-cmev-{}", std::process::id());
    let ok = Command::new("ip").args(["netns", "add", &ns]).status();
    if !ok.is_ok_and(|s| s.success()) {
        eprintln!("skipped: ip netns unavailable");
        return;
    }
    let o = Command::new("ip")
        .args(["netns", "exec", &ns])
        .arg(&exe)
        .args(["noroute", "192.0.2.1"])
        .env("LD_LIBRARY_PATH", common::dropin("cm-events-dropin"))
        .output()
        .unwrap();
    let _ = Command::new("ip").args(["netns", "del", &ns]).status();
    assert_eq!(event(&o), format!("ERRNO {}", libc::ENETUNREACH));
}
