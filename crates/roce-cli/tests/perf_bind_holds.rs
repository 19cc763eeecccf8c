//! A `roce perf` server given an explicit address holds it from its start
//! (issue 32, item 6): its RoCE UDP port on that address is bound before
//! any client comes, so another stack on this host started meanwhile (a
//! drop-in client) finds the address taken and moves off it, where the
//! server used to open its device only when its client came and fail if
//! the address had been taken. The server still serves its client.
//!
//! Addresses 127.0.62.x are this file's own (RoCE on the standard UDP
//! port 4791, as a drop-in program uses); every wait is bounded and every
//! process ended by the test.

mod common;

use std::net::{Ipv4Addr, UdpSocket};
use std::process::Stdio;
use std::time::Duration;

use common::{roce, Guard};
use roce_testkit::{free_port, text_of};

fn check(server_addr: Ipv4Addr, client_addr: &str, perftest: bool) {
    let tcp = free_port().to_string();
    let addr = server_addr.to_string();
    let mode: &[&str] = if perftest { &["--perftest"] } else { &[] };
    let mut cmd = roce();
    cmd.args(["perf", "send-bw", "--bind", &addr, "-p", &tcp])
        .args(mode)
        .args(["-n", "200"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // Returns once 4791 is bound on the address: before any client.
    let server = Guard::spawn_roce_server(cmd, server_addr);

    // Another program opening the address finds it taken.
    let e = UdpSocket::bind((server_addr, 4791)).expect_err("the address was not held");
    assert_eq!(e.kind(), std::io::ErrorKind::AddrInUse);
    // A second server given the same address says so at once.
    let other = free_port().to_string();
    let second = Guard(Some(
        roce()
            .args(["perf", "send-bw", "--bind", &addr, "-p", &other])
            .args(mode)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    ))
    .wait(Duration::from_secs(10));
    let text = text_of(&second);
    assert_eq!(second.status.code(), Some(1), "{text}");
    assert!(text.contains("is taken"), "{text}");

    // And the server serves its client on the address it held.
    let c = Guard(Some(
        roce()
            .args(["perf", "send-bw", &addr, "--bind", client_addr, "-p", &tcp])
            .args(mode)
            .args(["-n", "200"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    ))
    .wait(Duration::from_secs(60));
    assert_eq!(c.status.code(), Some(0), "client: {}", text_of(&c));
    let s = server.wait(Duration::from_secs(30));
    assert_eq!(s.status.code(), Some(0), "server: {}", text_of(&s));
}

#[test]
fn a_perftest_server_with_bind_holds_its_address_from_the_start() {
    check(Ipv4Addr::new(127, 0, 62, 1), "127.0.62.2", true);
}

#[test]
fn a_native_server_with_bind_holds_its_address_from_the_start() {
    check(Ipv4Addr::new(127, 0, 62, 3), "127.0.62.4", false);
}
