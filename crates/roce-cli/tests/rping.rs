//! `roce rping` end to end without a lab: our server and our client as two
//! processes on loopback (UDP backend), connected through the IB CM; a
//! refused connection; bad flags. Interop with librdmacm's rping over rxe
//! is `interop/run.sh` (the README's Interoperability table).

mod common;

use std::process::{Output, Stdio};
use std::time::Duration;

use common::{roce, Guard};
use roce_testkit::free_port;

fn out(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn err(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn client_and_server_ping_over_rdma_cm() {
    let rp = free_port().to_string();
    let server = Guard(Some(
        roce()
            .args(["rping", "-s", "-a", "127.0.0.1", "-p", "7174", "-v"])
            .args(["--roce-port", &rp, "--timeout", "20"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    ));
    std::thread::sleep(Duration::from_millis(300));
    let c = roce()
        .args(["rping", "-c", "-a", "127.0.0.1", "--bind", "127.0.0.2"])
        .args(["-C", "5", "-S", "100", "-v", "-V", "--roce-port", &rp])
        .args(["--timeout", "20"])
        .output()
        .unwrap();
    assert_eq!(c.status.code(), Some(0), "client: {}", err(&c));
    let lines: Vec<String> = out(&c).lines().map(String::from).collect();
    assert_eq!(lines.len(), 5, "{lines:?}");
    // rping's text: "rdma-ping-N: " then letters from 'A' + N, to 99 bytes.
    assert_eq!(
        lines[1],
        format!(
            "ping data: rdma-ping-1: {}",
            (b'B'..=b'z')
                .chain(b'A'..)
                .take(99 - "rdma-ping-1: ".len())
                .map(char::from)
                .collect::<String>()
        )
    );
    let s = server.wait(Duration::from_secs(20));
    assert_eq!(s.status.code(), Some(0), "server: {}", err(&s));
    let so = out(&s);
    assert_eq!(
        so.matches("server ping data: rdma-ping-").count(),
        5,
        "{so}"
    );
    assert!(
        so.contains("server DISCONNECT EVENT... (5 pings served)"),
        "{so}"
    );
}

#[test]
fn no_listener_is_refused_and_bad_flags_exit_2() {
    let rp = free_port().to_string();
    // A server on another port answers the REQ with a REJ (no listener).
    let _server = Guard(Some(
        roce()
            .args(["rping", "-s", "-a", "127.0.0.3", "-p", "7000"])
            .args(["--roce-port", &rp, "--timeout", "20"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    ));
    std::thread::sleep(Duration::from_millis(300));
    let c = roce()
        .args(["rping", "-c", "-a", "127.0.0.3", "--bind", "127.0.0.4"])
        .args([
            "-p",
            "7001",
            "-C",
            "1",
            "--roce-port",
            &rp,
            "--timeout",
            "20",
        ])
        .output()
        .unwrap();
    assert_eq!(c.status.code(), Some(1));
    let e = err(&c);
    assert_eq!(e.lines().count(), 1, "{e}");
    assert!(
        e.contains("connection refused (no listener on that port)"),
        "{e}"
    );

    for bad in [
        vec!["rping", "-a", "127.0.0.1"],
        vec!["rping", "-c", "-s", "-a", "127.0.0.1"],
        vec!["rping", "-c", "-a", "127.0.0.1", "-S", "8"],
    ] {
        let o = roce().args(&bad).output().unwrap();
        assert_eq!(o.status.code(), Some(2), "{bad:?}: {}", err(&o));
    }
    // The server needs a concrete address.
    let o = roce()
        .args(["rping", "-s", "-a", "0.0.0.0"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert!(err(&o).contains("give the RoCE device's address"));
}
