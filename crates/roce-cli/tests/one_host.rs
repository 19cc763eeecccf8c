//! Both ends on one host with no `--bind` (issue 22, item 2): `roce perf
//! write-bw` and `roce perf write-bw 127.0.0.1`, `roce pingpong` and
//! `roce pingpong 127.0.0.1`, `roce rping -s` and `roce rping -c -a
//! 127.0.0.1` as two processes each. The server keeps the address the
//! client dials; the client, which would use the same one, takes a free
//! address of 127.0.0.0/8 and says so; a server whose address another
//! stack holds moves too, and its client follows.

mod common;

use std::net::UdpSocket;
use std::process::Output;
use std::time::Duration;

use common::{spawn, text};
use roce_testkit::port_args;

/// Runs `server` and, once it listens, `client`; both bounded in time.
fn run_pair(server: &[&str], client: &[&str]) -> (Output, Output) {
    let server = spawn(server);
    std::thread::sleep(Duration::from_millis(400));
    let client = spawn(client).wait(Duration::from_secs(60));
    let server = server.wait(Duration::from_secs(30));
    (server, client)
}

fn assert_ok(who: &str, o: &Output) {
    let (out, err) = text(o);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{who} failed\nstdout:\n{out}\nstderr:\n{err}"
    );
}

/// The client's one line about the address it took.
fn assert_moved(client_err: &str, port: &str) {
    let want = format!("127.0.0.1:{port} is the server's (both ends on this host); using 127.0.0.");
    let lines: Vec<&str> = client_err.lines().filter(|l| l.contains(&want)).collect();
    assert_eq!(lines.len(), 1, "{client_err}");
}

#[test]
fn perf_without_bind() {
    let (port, rport) = port_args();
    let flags = ["-n", "300", "-p", &port, "--roce-port", &rport];
    let (s, c) = run_pair(
        &[&["perf", "write-bw"][..], &flags].concat(),
        &[&["perf", "write-bw", "127.0.0.1"][..], &flags].concat(),
    );
    assert_ok("server", &s);
    assert_ok("client", &c);
    let (out, err) = text(&c);
    assert!(out.contains("Data verified  : yes"), "{out}");
    assert!(out.contains(" 65536      300 "), "{out}");
    assert_moved(&err, &rport);
    // The server kept the address the client dialled: 127.0.0.1.
    assert!(
        out.contains("GID: 00:00:00:00:00:00:00:00:00:00:255:255:127:00:00:01"),
        "{out}"
    );
}

/// Another stack holds the server's 127.0.0.1 port: the server takes a
/// free loopback address (not the client's), tells the client in the
/// endpoints, and the client, whose check of the server's address allows
/// one loopback address for another, follows.
#[test]
fn perf_server_moves_off_a_taken_address() {
    let (port, rport) = port_args();
    let _other = UdpSocket::bind(("127.0.0.1", rport.parse::<u16>().unwrap())).unwrap();
    let flags = ["-n", "300", "-p", &port, "--roce-port", &rport];
    let (s, c) = run_pair(
        &[&["perf", "write-bw"][..], &flags].concat(),
        &[&["perf", "write-bw", "127.0.0.1"][..], &flags].concat(),
    );
    assert_ok("server", &s);
    assert_ok("client", &c);
    let (_, serr) = text(&s);
    assert!(
        serr.contains(&format!("127.0.0.1:{rport} is taken; using 127.0.0.")),
        "{serr}"
    );
    let (out, _) = text(&c);
    assert!(out.contains("Data verified  : yes"), "{out}");
}

#[test]
fn pingpong_without_bind() {
    let (port, rport) = port_args();
    let flags = ["-n", "200", "-c", "-p", &port, "--roce-port", &rport];
    let (s, c) = run_pair(
        &[&["pingpong"][..], &flags].concat(),
        &[&["pingpong"][..], &flags, &["127.0.0.1"]].concat(),
    );
    assert_ok("server", &s);
    assert_ok("client", &c);
    let (cout, cerr) = text(&c);
    assert_moved(&cerr, &rport);
    assert!(cout.contains("200 iters in"), "{cout}");
    assert!(cout.contains("remote address: LID 0x0000"), "{cout}");
    assert!(cout.contains("GID ::ffff:127.0.0.1"), "{cout}");
    let (sout, _) = text(&s);
    assert!(sout.contains("200 iters in"), "{sout}");
}

#[test]
fn pingpong_server_moves_off_a_taken_address() {
    let (port, rport) = port_args();
    let _other = UdpSocket::bind(("127.0.0.1", rport.parse::<u16>().unwrap())).unwrap();
    let flags = ["-n", "100", "-c", "-p", &port, "--roce-port", &rport];
    let (s, c) = run_pair(
        &[&["pingpong"][..], &flags].concat(),
        &[&["pingpong"][..], &flags, &["127.0.0.1"]].concat(),
    );
    assert_ok("server", &s);
    assert_ok("client", &c);
    let (_, serr) = text(&s);
    assert!(
        serr.contains(&format!("127.0.0.1:{rport} is taken; using 127.0.0.")),
        "{serr}"
    );
}

#[test]
fn rping_without_bind() {
    let (cm_port, rport) = port_args();
    let (s, c) = run_pair(
        &["rping", "-s", "-v", "-p", &cm_port, "--roce-port", &rport],
        &[
            "rping",
            "-c",
            "-a",
            "127.0.0.1",
            "-C",
            "4",
            "-v",
            "-V",
            "-p",
            &cm_port,
            "--roce-port",
            &rport,
        ],
    );
    assert_ok("client", &c);
    assert_ok("server", &s);
    let (cout, cerr) = text(&c);
    assert_moved(&cerr, &rport);
    assert_eq!(cout.matches("ping data: rdma-ping-").count(), 4, "{cout}");
    let (sout, serr) = text(&s);
    assert!(sout.contains("(4 pings served)"), "{sout}");
    assert!(serr.contains("listening on 127.0.0.1"), "{serr}");
}

/// Several pairs started at once on one RoCE port, none with `--bind`:
/// every client picks the same free loopback address before any of them
/// binds it, so the bind itself must be the probe: a side that finds its
/// address taken by then moves on to the next one and says so, and every
/// pair completes (they failed with "UDP port ... is in use").
#[test]
fn perf_pairs_started_at_once_each_get_an_address() {
    const PAIRS: usize = 6;
    let all: Vec<(String, String)> = (0..PAIRS).map(|_| port_args()).collect();
    let rport = all[0].1.clone();
    let flags = |tcp: &str| -> Vec<String> {
        ["-n", "200", "-p", tcp, "--roce-port", &rport]
            .iter()
            .map(|s| s.to_string())
            .collect()
    };
    let servers: Vec<_> = all
        .iter()
        .map(|(tcp, _)| {
            let f = flags(tcp);
            let f: Vec<&str> = f.iter().map(String::as_str).collect();
            spawn(&[&["perf", "write-bw"][..], &f].concat())
        })
        .collect();
    std::thread::sleep(Duration::from_millis(500));
    let clients: Vec<_> = all
        .iter()
        .map(|(tcp, _)| {
            let f = flags(tcp);
            let f: Vec<&str> = f.iter().map(String::as_str).collect();
            spawn(&[&["perf", "write-bw", "127.0.0.1"][..], &f].concat())
        })
        .collect();
    let clients: Vec<Output> = clients
        .into_iter()
        .map(|c| c.wait(Duration::from_secs(60)))
        .collect();
    let servers: Vec<Output> = servers
        .into_iter()
        .map(|s| s.wait(Duration::from_secs(30)))
        .collect();
    for (i, (c, s)) in clients.iter().zip(&servers).enumerate() {
        assert_ok(&format!("client {i}"), c);
        assert_ok(&format!("server {i}"), s);
        let (out, _) = text(c);
        assert!(out.contains("Data verified  : yes"), "{out}");
        assert!(out.contains(" 65536      200 "), "{out}");
    }
}
