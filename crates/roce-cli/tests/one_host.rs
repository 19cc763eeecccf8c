//! Both ends on one host with no `--bind` (issue 22, item 2; issue 32,
//! item 2): `roce perf write-bw` and `roce perf write-bw 127.0.0.1`,
//! `roce pingpong` and `roce pingpong 127.0.0.1`, `roce rping -s` and
//! `roce rping -c -a 127.0.0.1` as two processes each. Both ends open on
//! 127.0.0.1, as two processes share a NIC's port and as the drop-in
//! library does: they report the same GID, their QPNs differ, and nobody
//! moves. With `ROCE_SHM=0` each process holds its address alone: the
//! client takes a free address of 127.0.0.0/8 and says so. A stack that
//! does not share (here a plain UDP socket) holding 127.0.0.1 makes the
//! ends move to the next loopback address, and they still meet.

mod common;

use std::net::UdpSocket;
use std::process::Output;
use std::time::Duration;

use common::{roce, text, Guard};
use roce_testkit::{free_ports, port_args};

/// Runs `server` and, once it listens, `client`, both with `env`; both
/// bounded in time.
fn run_pair_with(server: &[&str], client: &[&str], env: &[(&str, &str)]) -> (Output, Output) {
    let spawn = |args: &[&str]| {
        let mut c = roce();
        c.args(args).envs(env.iter().copied());
        Guard::spawn(c)
    };
    let server = common::once_listening(spawn(server), server);
    let client = spawn(client).wait(Duration::from_secs(60));
    let server = server.wait(Duration::from_secs(30));
    (server, client)
}

fn run_pair(server: &[&str], client: &[&str]) -> (Output, Output) {
    run_pair_with(server, client, &[])
}

fn assert_ok(who: &str, o: &Output) {
    let (out, err) = text(o);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{who} failed\nstdout:\n{out}\nstderr:\n{err}"
    );
}

/// The client's one line about the address it took (`ROCE_SHM=0`).
fn assert_moved(client_err: &str, port: &str) {
    let want = format!("127.0.0.1:{port} is the server's (both ends on this host); using 127.0.0.");
    let lines: Vec<&str> = client_err.lines().filter(|l| l.contains(&want)).collect();
    assert_eq!(lines.len(), 1, "{client_err}");
}

/// Nobody said it moved.
fn assert_stayed(who: &str, err: &str) {
    assert!(!err.contains("using 127."), "{who}: {err}");
}

/// perftest's address lines of `roce perf`: (QPN, GID) of the local and
/// the remote end.
fn perf_ends(out: &str) -> [(String, String); 2] {
    let lines: Vec<&str> = out.lines().collect();
    let end = |what: &str| {
        let at = lines
            .iter()
            .position(|l| l.trim_start().starts_with(what))
            .unwrap_or_else(|| panic!("no {what} line: {out}"));
        let qpn = lines[at]
            .split("QPN ")
            .nth(1)
            .unwrap()
            .split(' ')
            .next()
            .unwrap();
        let gid = lines[at + 1].trim().strip_prefix("GID: ").unwrap();
        (qpn.to_string(), gid.to_string())
    };
    [end("local address"), end("remote address")]
}

/// `roce pingpong`'s address lines: (QPN, GID) of the local and remote end.
fn pingpong_ends(out: &str) -> [(String, String); 2] {
    let end = |what: &str| {
        let l = out
            .lines()
            .find(|l| l.trim_start().starts_with(what))
            .unwrap_or_else(|| panic!("no {what} line: {out}"));
        let qpn = l.split("QPN ").nth(1).unwrap().split(',').next().unwrap();
        let gid = l.split("GID ").nth(1).unwrap().trim();
        (qpn.to_string(), gid.to_string())
    };
    [end("local address"), end("remote address")]
}

const GID_127_0_0_1: &str = "00:00:00:00:00:00:00:00:00:00:255:255:127:00:00:01";

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
    assert_stayed("client", &err);
    assert_stayed("server", &text(&s).1);
    // Both ends on 127.0.0.1, one QP each.
    let [local, remote] = perf_ends(&out);
    assert_eq!(local.1, GID_127_0_0_1, "{out}");
    assert_eq!(remote.1, GID_127_0_0_1, "{out}");
    assert_ne!(local.0, remote.0, "{out}");
    // The server saw the same two ends, the other way round.
    let [s_local, s_remote] = perf_ends(&text(&s).0);
    assert_eq!((&s_local, &s_remote), (&remote, &local));
}

/// With `ROCE_SHM=0` each process holds its address alone: the client
/// moves off its server's and says so.
#[test]
fn perf_without_bind_and_without_sharing() {
    let (port, rport) = port_args();
    let flags = ["-n", "300", "-p", &port, "--roce-port", &rport];
    let (s, c) = run_pair_with(
        &[&["perf", "write-bw"][..], &flags].concat(),
        &[&["perf", "write-bw", "127.0.0.1"][..], &flags].concat(),
        &[("ROCE_SHM", "0")],
    );
    assert_ok("server", &s);
    assert_ok("client", &c);
    let (out, err) = text(&c);
    assert!(out.contains("Data verified  : yes"), "{out}");
    assert_moved(&err, &rport);
    // The server kept the address the client dialled: 127.0.0.1.
    let [local, remote] = perf_ends(&out);
    assert_eq!(remote.1, GID_127_0_0_1, "{out}");
    assert_ne!(local.1, GID_127_0_0_1, "{out}");
    assert!(
        local
            .1
            .starts_with("00:00:00:00:00:00:00:00:00:00:255:255:127:"),
        "{out}"
    );
}

/// A stack that does not share holds the server's 127.0.0.1 port: the
/// ends, which chose the address themselves, take the next loopback
/// address (as the drop-in does), say so, and meet there.
#[test]
fn perf_moves_off_an_address_a_non_sharing_stack_holds() {
    let (port, rport) = port_args();
    let _other = UdpSocket::bind(("127.0.0.1", rport.parse::<u16>().unwrap())).unwrap();
    let flags = ["-n", "300", "-p", &port, "--roce-port", &rport];
    let (s, c) = run_pair(
        &[&["perf", "write-bw"][..], &flags].concat(),
        &[&["perf", "write-bw", "127.0.0.1"][..], &flags].concat(),
    );
    assert_ok("server", &s);
    assert_ok("client", &c);
    let said = format!(
        "127.0.0.1:{rport} is taken (by a RoCE stack that does not share it); using 127.0.0."
    );
    let (_, serr) = text(&s);
    assert!(serr.contains(&said), "{serr}");
    let (out, _) = text(&c);
    assert!(out.contains("Data verified  : yes"), "{out}");
    let [local, remote] = perf_ends(&out);
    assert_eq!(local.1, remote.1, "{out}");
    assert_ne!(local.1, GID_127_0_0_1, "{out}");
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
    assert_stayed("client", &cerr);
    assert!(cout.contains("200 iters in"), "{cout}");
    let [local, remote] = pingpong_ends(&cout);
    assert_eq!(local.1, "::ffff:127.0.0.1", "{cout}");
    assert_eq!(remote.1, "::ffff:127.0.0.1", "{cout}");
    assert_ne!(local.0, remote.0, "{cout}");
    let (sout, serr) = text(&s);
    assert_stayed("server", &serr);
    assert!(sout.contains("200 iters in"), "{sout}");
    assert_eq!(pingpong_ends(&sout), [remote, local], "{sout}");
}

#[test]
fn pingpong_moves_off_an_address_a_non_sharing_stack_holds() {
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
        serr.contains(&format!(
            "127.0.0.1:{rport} is taken (by a RoCE stack that does not share it); using 127.0.0."
        )),
        "{serr}"
    );
    let (cout, _) = text(&c);
    let [local, remote] = pingpong_ends(&cout);
    assert_eq!(local.1, remote.1, "{cout}");
    assert_ne!(local.1, "::ffff:127.0.0.1", "{cout}");
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
    assert_stayed("client", &cerr);
    assert_eq!(cout.matches("ping data: rdma-ping-").count(), 4, "{cout}");
    let (sout, serr) = text(&s);
    assert!(sout.contains("(4 pings served)"), "{sout}");
    assert!(serr.contains("listening on 127.0.0.1"), "{serr}");
}

/// Several pairs started at once on one RoCE port, none with `--bind`:
/// all twelve processes share 127.0.0.1 and every pair completes (they
/// once failed with "UDP port ... is in use").
#[test]
fn perf_pairs_started_at_once_share_one_address() {
    const PAIRS: usize = 6;
    let ports: [u16; PAIRS + 1] = free_ports();
    let rport = ports[PAIRS].to_string();
    let all: Vec<String> = ports[..PAIRS].iter().map(u16::to_string).collect();
    let flags = |tcp: &str| -> Vec<String> {
        ["-n", "200", "-p", tcp, "--roce-port", &rport]
            .iter()
            .map(|s| s.to_string())
            .collect()
    };
    // All started before any is waited for: their devices open at once.
    let started: Vec<_> = all
        .iter()
        .map(|tcp| {
            let f = flags(tcp);
            let f: Vec<&str> = f.iter().map(String::as_str).collect();
            common::spawn(&[&["perf", "write-bw"][..], &f].concat())
        })
        .collect();
    let servers: Vec<_> = started
        .into_iter()
        .zip(&all)
        .map(|(s, tcp)| s.listening(tcp.parse().unwrap()))
        .collect();
    let clients: Vec<_> = all
        .iter()
        .map(|tcp| {
            let f = flags(tcp);
            let f: Vec<&str> = f.iter().map(String::as_str).collect();
            common::spawn(&[&["perf", "write-bw", "127.0.0.1"][..], &f].concat())
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
        let [local, remote] = perf_ends(&out);
        assert_eq!(
            (local.1.as_str(), remote.1.as_str()),
            (GID_127_0_0_1, GID_127_0_0_1)
        );
    }
}
