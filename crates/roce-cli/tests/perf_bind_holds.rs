//! A `roce perf` server given an explicit address with `ROCE_SHM=0`
//! holds it from its start (issue 32, item 6): its RoCE UDP port on that
//! address is bound before any client comes, so another stack on this
//! host started meanwhile (a drop-in client) finds the address taken and
//! moves off it, where the server used to open its device only when its
//! client came and fail if the address had been taken. The server still
//! serves its client. A server that shares its address (the default)
//! holds nothing: another server on the address does not stop it.
//!
//! Addresses 127.0.62.x are this file's own (RoCE on the standard UDP
//! port 4791, as a drop-in program uses); every wait is bounded and every
//! process ended by the test.

mod common;

use std::net::{Ipv4Addr, UdpSocket};
use std::process::Stdio;
use std::time::Duration;

use common::{roce, Guard};
use roce_testkit::{free_port, free_ports, text_of};

fn check(server_addr: Ipv4Addr, client_addr: &str, perftest: bool) {
    let tcp = free_port().to_string();
    let addr = server_addr.to_string();
    let mode: &[&str] = if perftest { &["--perftest"] } else { &[] };
    let mut cmd = roce();
    cmd.env("ROCE_SHM", "0")
        .args(["perf", "send-bw", "--bind", &addr, "-p", &tcp])
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
            .env("ROCE_SHM", "0")
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
            .env("ROCE_SHM", "0")
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

/// Sharing (the default): two `roce perf` servers given the same
/// `--bind` both start, and both serve their client on that address (the
/// server's GID in each client's report), data verified: neither holds
/// the address alone.
#[test]
fn a_sharing_server_with_bind_joins_its_address() {
    let addr = "127.0.62.5";
    let [tcp, rport, other_tcp] = free_ports().map(|p: u16| p.to_string());
    let spawn = |args: &[&str]| {
        let mut c = roce();
        c.args(args).stdout(Stdio::piped()).stderr(Stdio::piped());
        Guard::spawn(c)
    };
    let common = ["--bind", addr, "--roce-port", &rport, "-n", "200"];
    let s1 = spawn(&[&["perf", "send-bw", "-p", &tcp][..], &common].concat());
    let s2 = spawn(&[&["perf", "send-bw", "-p", &other_tcp][..], &common].concat());
    let (s1, s2) = (
        s1.listening(tcp.parse().unwrap()),
        s2.listening(other_tcp.parse().unwrap()),
    );
    let flags = ["--roce-port", &rport, "-n", "200"];
    let c1 = spawn(&[&["perf", "send-bw", addr, "-p", &tcp][..], &flags].concat());
    let c2 = spawn(&[&["perf", "send-bw", addr, "-p", &other_tcp][..], &flags].concat());
    let gid = "00:00:00:00:00:00:00:00:00:00:255:255:127:00:62:05";
    for c in [c1, c2] {
        let c = c.wait(Duration::from_secs(60));
        let t = text_of(&c);
        assert_eq!(c.status.code(), Some(0), "client: {t}");
        assert!(t.contains("Data verified  : yes"), "{t}");
        assert_eq!(
            t.lines()
                .filter(|l| l.trim() == format!("GID: {gid}"))
                .count(),
            1,
            "{t}"
        );
    }
    for s in [s1, s2] {
        let s = s.wait(Duration::from_secs(30));
        assert_eq!(s.status.code(), Some(0), "server: {}", text_of(&s));
    }
}

/// Sharing (the default): a second server given the same `--bind` and
/// the same control port fails at once, exit 1, naming the port, while
/// the first, whose listener holds the address from its start, still
/// serves its client.
#[test]
fn a_second_server_on_the_same_address_and_port_fails_at_once() {
    let addr = "127.0.62.6";
    let [tcp, rport] = free_ports().map(|p: u16| p.to_string());
    let spawn = |args: &[&str]| {
        let mut c = roce();
        c.args(args).stdout(Stdio::piped()).stderr(Stdio::piped());
        Guard::spawn(c)
    };
    let common = [
        "--bind",
        addr,
        "-p",
        &tcp,
        "--roce-port",
        &rport,
        "-n",
        "200",
    ];
    let first = spawn(&[&["perf", "send-bw"][..], &common].concat());
    let first = first.listening(tcp.parse().unwrap());
    let start = std::time::Instant::now();
    let second = spawn(&[&["perf", "send-bw"][..], &common].concat()).wait(Duration::from_secs(10));
    let text = text_of(&second);
    assert_eq!(second.status.code(), Some(1), "{text}");
    assert!(
        text.contains(&format!("cannot listen on port {tcp}")),
        "{text}"
    );
    assert!(start.elapsed() < Duration::from_secs(5), "{text}");
    let flags = ["-p", &tcp, "--roce-port", &rport, "-n", "200"];
    let c = spawn(&[&["perf", "send-bw", addr][..], &flags].concat()).wait(Duration::from_secs(60));
    assert_eq!(c.status.code(), Some(0), "client: {}", text_of(&c));
    let s = first.wait(Duration::from_secs(30));
    assert_eq!(s.status.code(), Some(0), "server: {}", text_of(&s));
}
