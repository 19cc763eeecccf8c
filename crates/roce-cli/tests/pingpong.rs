//! `roce pingpong` end to end without a lab: our server against our client,
//! two processes on loopback (UDP backend, 127.0.0.1 and 127.0.0.2), every
//! transport with `-c`; and bad flags. The exchange format itself is checked
//! byte for byte against the lab captures by the unit tests of
//! `src/pingpong/wire.rs`; `exchange_bytes_match_the_capture` below checks
//! what the binary puts on the TCP connection.

mod common;

use std::io::{Read, Write};
use std::net::TcpListener;
use std::process::{Output, Stdio};
use std::time::{Duration, Instant};

use common::{roce, Guard};
use roce_testkit::port_args;

fn text(o: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// Runs our server and our client with `flags`; returns both outputs.
fn pair(transport: &str, flags: &[&str]) -> (Output, Output) {
    let (port, roce_port) = port_args();
    let common = [
        "pingpong",
        "--transport",
        transport,
        "-p",
        &port,
        "--roce-port",
        &roce_port,
        "--timeout",
        "30",
    ];
    let server = roce()
        .args(common)
        .args(flags)
        .args(["--bind", "127.0.0.1"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run roce");
    let server = Guard(Some(server));
    // The client retries while the server is not listening yet.
    let client = roce()
        .args(common)
        .args(flags)
        .args(["--bind", "127.0.0.2", "127.0.0.1"])
        .output()
        .expect("run roce");
    let server = server.wait(Duration::from_secs(60));
    (server, client)
}

fn check_run(transport: &str, flags: &[&str], iters: u64, size: u64, qps: usize) {
    let (server, client) = pair(transport, flags);
    for (who, o) in [("server", &server), ("client", &client)] {
        let (out, err) = text(o);
        assert_eq!(
            o.status.code(),
            Some(0),
            "{transport} {who} failed\nstdout:\n{out}\nstderr:\n{err}"
        );
        let local = out
            .lines()
            .filter(|l| l.starts_with("  local address:  LID 0x0000, QPN 0x"))
            .count();
        let remote = out
            .lines()
            .filter(|l| l.starts_with("  remote address: LID 0x0000, QPN 0x"))
            .count();
        assert_eq!((local, remote), (qps, qps), "{who}:\n{out}");
        let gid = if who == "server" {
            "127.0.0.1"
        } else {
            "127.0.0.2"
        };
        assert!(out.contains(&format!("GID ::ffff:{gid}")), "{out}");
        let bytes = format!("{} bytes in ", size * iters * 2);
        assert!(
            out.lines()
                .any(|l| l.starts_with(&bytes) && l.ends_with(" Mbit/sec")),
            "{who}:\n{out}"
        );
        let it = format!("{iters} iters in ");
        assert!(
            out.lines()
                .any(|l| l.starts_with(&it) && l.ends_with(" usec/iter")),
            "{who}:\n{out}"
        );
    }
    // Each side's remote lines are the other's local lines.
    let (so, _) = text(&server);
    let (co, _) = text(&client);
    let strip = |s: &str, kind: &str| -> Vec<String> {
        s.lines()
            .filter(|l| l.contains(kind))
            .map(|l| l.split("LID").nth(1).unwrap().replace(':', ","))
            .collect()
    };
    assert_eq!(strip(&so, "local address"), strip(&co, "remote address"));
    assert_eq!(strip(&co, "local address"), strip(&so, "remote address"));
}

#[test]
fn rc_with_validation() {
    check_run("rc", &["-n", "300", "-s", "4096", "-c"], 300, 4096, 1);
}

#[test]
fn rc_with_events_and_small_rx_depth() {
    check_run(
        "rc",
        &["-n", "200", "-s", "100", "-r", "4", "-e", "-c", "-m", "256"],
        200,
        100,
        1,
    );
}

#[test]
fn uc_with_validation() {
    check_run(
        "uc",
        &["-n", "300", "-s", "3000", "-m", "1024", "-c"],
        300,
        3000,
        1,
    );
}

#[test]
fn ud_with_validation() {
    // The UD local line has rdma-core's "PSN 0x...: GID".
    let (server, client) = pair("ud", &["-n", "300", "-s", "1024", "-c"]);
    for o in [&server, &client] {
        let (out, err) = text(o);
        assert_eq!(o.status.code(), Some(0), "stdout:\n{out}\nstderr:\n{err}");
        let local = out.lines().find(|l| l.contains("local address")).unwrap();
        assert!(local.contains(": GID ::ffff:127.0.0."), "{local}");
        assert!(out.contains("614400 bytes in "), "{out}");
    }
}

#[test]
fn ud_default_size_is_2048() {
    check_run("ud", &["-n", "50", "-c"], 50, 2048, 1);
}

#[test]
fn srq_with_validation() {
    check_run(
        "srq",
        &["-n", "400", "-s", "2048", "-q", "4", "-r", "64", "-c"],
        400,
        2048,
        4,
    );
}

#[test]
fn srq_default_sixteen_qps() {
    check_run("srq", &["-n", "100", "-s", "512", "-c", "-e"], 100, 512, 16);
}

/// What the client writes on the TCP connection: its 52-byte address
/// message, then "done\0" after reading the server's; compared with the
/// shape of rc_send_64B.pcap frames 6 and 10.
#[test]
fn exchange_bytes_match_the_capture() {
    let (port, roce_port) = port_args();
    let l = TcpListener::bind(format!("127.0.0.1:{port}")).unwrap();
    let client = roce()
        .args([
            "pingpong",
            "-p",
            &port,
            "--roce-port",
            &roce_port,
            "--timeout",
            "5",
        ])
        .args(["--bind", "127.0.0.2", "-g", "0", "127.0.0.1"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let client = Guard(Some(client));
    // Do not hang if the client never connects.
    l.set_nonblocking(true).unwrap();
    let end = Instant::now() + Duration::from_secs(20);
    let mut s = loop {
        match l.accept() {
            Ok((s, _)) => break s,
            Err(_) if Instant::now() < end => std::thread::sleep(Duration::from_millis(20)),
            Err(e) => panic!("the client did not connect: {e}"),
        }
    };
    s.set_nonblocking(false).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut msg = [0u8; 52];
    s.read_exact(&mut msg).unwrap();
    let line = std::str::from_utf8(&msg[..51]).unwrap();
    assert_eq!(msg[51], 0, "NUL-terminated");
    // "0000:QPN:PSN:GID" with the GID of ::ffff:127.0.0.2 as in the capture
    // ("00000000000000000000ffff0a4d000c" for 10.77.0.12).
    assert_eq!(&line[..5], "0000:");
    assert_eq!(&line[11..12], ":");
    assert_eq!(&line[18..19], ":");
    assert_eq!(&line[19..], "00000000000000000000ffff7f000002");
    assert!(line[5..11]
        .bytes()
        .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()));
    // Answer as rxe did in rc_send_64B.pcap frame 8 (a QP that will not
    // answer: the client then fails its SENDs, which is fine here).
    let server_msg = b"0000:000011:a179e0:00000000000000000000ffff7f000001\0";
    s.write_all(server_msg).unwrap();
    let mut done = [0u8; 5];
    s.read_exact(&mut done).unwrap();
    assert_eq!(&done, b"done\0");
    // Then the client closes the connection.
    let mut rest = Vec::new();
    s.read_to_end(&mut rest).unwrap();
    assert!(rest.is_empty());
    let o = client.wait(Duration::from_secs(60));
    let (out, _) = text(&o);
    assert!(
        out.contains(
            "  remote address: LID 0x0000, QPN 0x000011, PSN 0xa179e0, GID ::ffff:127.0.0.1"
        ),
        "{out}"
    );
    // Nobody answers the SENDs: not every iteration completed.
    assert_ne!(o.status.code(), Some(0));
}

fn bad(args: &[&str], want: &str) {
    let o = roce().arg("pingpong").args(args).output().unwrap();
    let (out, err) = text(&o);
    assert_eq!(o.status.code(), Some(2), "{args:?}: {out}{err}");
    assert!(out.is_empty(), "{out}");
    assert_eq!(err.lines().count(), 1, "one line: {err}");
    assert!(err.starts_with("roce pingpong: "), "{err}");
    assert!(err.contains(want), "{args:?}: {err}");
}

#[test]
fn bad_flags_give_one_line() {
    bad(&["-z"], "-z");
    bad(&["--transport", "xrc"], "xrc");
    bad(&["-s", "abc"], "abc");
    bad(&["-m", "1000"], "MTU 1000");
    bad(&["-n", "0"], "iterations");
    bad(&["-p", "70000"], "70000");
    bad(
        &["--transport", "ud", "-s", "4096", "-m", "1024"],
        "larger than port MTU",
    );
    bad(
        &["--transport", "srq", "-q", "32", "-r", "16"],
        "rx_depth 16 is too small for 32 QPs",
    );
    bad(&["-i", "2"], "port 2");
    bad(&["a", "b"], "b");
    // A GID index past the table is refused at start-up (as
    // ibv_rc_pingpong does), not once a client connects.
    // Without --bind, past every device's table; with it, past the
    // table of its device (lo's: 127.0.0.1 and, if it has one, ::1).
    bad(&["-g", "200"], "GID index 200 is not in the GID table");
    bad(
        &["-g", "2", "--bind", "127.0.0.1"],
        "GID index 2 is not in the GID table",
    );
}

#[test]
fn help_lists_the_tools_flags() {
    let o = roce().args(["pingpong", "--help"]).output().unwrap();
    assert_eq!(o.status.code(), Some(0));
    let (out, _) = text(&o);
    for f in [
        "--transport",
        "-p, --port",
        "-s, --size",
        "-m, --mtu",
        "-r, --rx-depth",
        "-n, --iters",
        "-g, --gid-idx",
        "-e, --events",
        "-c, --chk",
        "-q, --num-qp",
    ] {
        assert!(out.contains(f), "{f} missing:\n{out}");
    }
}

/// A GID index past the table ends the server at start-up, before any
/// client connects (it used to be reported only once one did).
#[test]
fn gid_index_out_of_range() {
    let (port, roce_port) = port_args();
    let server = roce()
        .args([
            "pingpong",
            "-p",
            &port,
            "--roce-port",
            &roce_port,
            "--bind",
            "127.0.0.1",
            "-g",
            "5",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let o = Guard(Some(server)).wait(Duration::from_secs(20));
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("GID index 5 is not in the GID table"), "{err}");
}

/// A client whose server is not there yet says it is waiting (as it
/// retries a refused connection until `--timeout`), then fails naming
/// the address.
#[test]
fn a_client_without_a_server_says_it_waits() {
    let (port, roce_port) = port_args();
    let o = roce()
        .args([
            "pingpong",
            "-p",
            &port,
            "--roce-port",
            &roce_port,
            "--timeout",
            "1",
            "127.0.0.1",
        ])
        .output()
        .unwrap();
    let (_, err) = text(&o);
    assert!(!o.status.success());
    assert!(
        err.contains(&format!(
            "no server at 127.0.0.1:{port} yet; trying again for"
        )),
        "{err}"
    );
    assert!(
        err.contains(&format!("Couldn't connect to 127.0.0.1:{port}")),
        "{err}"
    );
    assert_eq!(err.matches("no server at").count(), 1, "{err}");
}

/// A client whose address message puts its QP at a third host (GID
/// ::ffff:192.0.2.9, not its TCP address) is refused by the server before
/// any QP is connected to it: it could aim the server's traffic there.
#[test]
fn a_gid_at_another_host_is_refused() {
    let (port, roce_port) = port_args();
    let server = roce()
        .args(["pingpong", "-p", &port, "--roce-port", &roce_port])
        .args(["--bind", "127.0.0.1", "--timeout", "5"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let server = Guard(Some(server));
    let end = Instant::now() + Duration::from_secs(20);
    let mut s = loop {
        match std::net::TcpStream::connect(format!("127.0.0.1:{port}")) {
            Ok(s) => break s,
            Err(_) if Instant::now() < end => std::thread::sleep(Duration::from_millis(20)),
            Err(e) => panic!("the server does not listen: {e}"),
        }
    };
    s.write_all(b"0000:000011:a179e0:00000000000000000000ffffc0000209\0")
        .unwrap();
    let o = server.wait(Duration::from_secs(30));
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("192.0.2.9") && err.contains("not at the peer's address"),
        "{err}"
    );
}
