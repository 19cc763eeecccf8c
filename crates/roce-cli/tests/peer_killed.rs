//! Servers notice a client killed mid-run (Ctrl-C or SIGKILL): no
//! disconnect comes from a dead process here (the kernel's rdma_cm would
//! send one, outliving it), so the server gives up once the client has
//! been silent for 10 s, with a message saying so, and exits 1. It used
//! to wait for its --timeout of 60 s ("timed out waiting for a
//! completion"), or forever with --timeout 0.

mod common;

use std::process::{Child, Output};
use std::time::{Duration, Instant};

use common::{spawn, text};
use roce_testkit::port_args;

/// Starts `server`, then `client`; lets them run a while, kills the
/// client (SIGKILL) and returns the server's output and how long after
/// the kill it ended.
fn kill_client_mid_run(server: &[&str], client: &[&str]) -> (Output, Duration) {
    let server = spawn(server);
    std::thread::sleep(Duration::from_millis(500));
    let mut client = spawn(client);
    std::thread::sleep(Duration::from_millis(2000));
    let c: &mut Child = client.0.as_mut().unwrap();
    assert!(
        c.try_wait().unwrap().is_none(),
        "the client ended before it was killed"
    );
    c.kill().unwrap();
    let _ = c.wait();
    let killed = Instant::now();
    let out = server.wait(Duration::from_secs(40));
    (out, killed.elapsed())
}

#[test]
fn an_rping_server_notices_a_killed_client() {
    let (cm, rport) = port_args();
    let (s, took) = kill_client_mid_run(
        &["rping", "-s", "-p", &cm, "--roce-port", &rport],
        &[
            "rping",
            "-c",
            "-a",
            "127.0.0.1",
            "-C",
            "0",
            "-p",
            &cm,
            "--roce-port",
            &rport,
        ],
    );
    let (_, err) = text(&s);
    assert_eq!(s.status.code(), Some(1), "{err}");
    assert!(
        err.contains(
            "roce rping: the client sent nothing for 10 s and did not disconnect (killed, or unreachable): giving up"
        ),
        "{err}"
    );
    assert!(took < Duration::from_secs(15), "{took:?}");
}

#[test]
fn a_pingpong_server_notices_a_killed_client() {
    let (port, rport) = port_args();
    let flags = ["-n", "100000000", "-p", &port, "--roce-port", &rport];
    let (s, took) = kill_client_mid_run(
        &[&["pingpong"][..], &flags].concat(),
        &[&["pingpong"][..], &flags, &["127.0.0.1"]].concat(),
    );
    let (_, err) = text(&s);
    assert_eq!(s.status.code(), Some(1), "{err}");
    assert!(
        err.contains(
            "roce pingpong: no completion for 10 s: the client stopped answering (killed, or unreachable): giving up"
        ),
        "{err}"
    );
    assert!(took < Duration::from_secs(15), "{took:?}");
}

/// `--timeout` shorter than 10 s shortens the wait: the test of a killed
/// client takes 3 s.
#[test]
fn a_shorter_timeout_shortens_the_wait_for_a_killed_client() {
    let (cm, rport) = port_args();
    let t = ["--timeout", "3"];
    let (s, took) = kill_client_mid_run(
        &[&["rping", "-s", "-p", &cm, "--roce-port", &rport][..], &t].concat(),
        &[
            "rping",
            "-c",
            "-a",
            "127.0.0.1",
            "-C",
            "0",
            "-p",
            &cm,
            "--roce-port",
            &rport,
        ],
    );
    let (_, err) = text(&s);
    assert_eq!(s.status.code(), Some(1), "{err}");
    assert!(err.contains("the client sent nothing for 3 s"), "{err}");
    // Under the default 10 s it would take 10 s at least.
    assert!(took < Duration::from_secs(9), "{took:?}");
}
