//! A `roce perf` server and a perftest-mode client given different `-n`:
//! perftest's exchange does not carry `-n`, so each side counts to its
//! own, and the one that expects more waited for messages the other never
//! sends (send-bw, send-lat and write-lat hung; others ended without a
//! table). Now the side still waiting sees the peer move on (its closing
//! round, or its exit, on the control connection) and fails at once, or
//! after 10 s without a completion, naming `-n`; the other side, if it
//! was left waiting for the closing round, says its peer stopped.

mod common;

use std::process::Output;
use std::time::Duration;

use common::{spawn, text};
use roce_testkit::port_args;

/// `roce perf TEST -n SERVER_N` and `roce perf TEST 127.0.0.1
/// --perftest -n CLIENT_N`; (server, client).
fn pair(test: &str, server_n: &str, client_n: &str) -> (Output, Output) {
    let (port, rport) = port_args();
    let p = ["-p", &port, "--roce-port", &rport];
    let server = spawn(&[&["perf", test, "-n", server_n][..], &p].concat());
    let server = server.listening(port.parse().unwrap());
    let client = spawn(
        &[
            &["perf", test, "127.0.0.1", "--perftest", "-n", client_n][..],
            &p,
        ]
        .concat(),
    )
    .wait(Duration::from_secs(40));
    (server.wait(Duration::from_secs(40)), client)
}

const HINT: &str = "do the two sides have different -n? perftest's exchange does not carry it: \
                    give both sides the same -n";

/// write-lat, the server counting to more: the client ends with its table
/// of 100 and closes; the server, waiting for a 101st write, fails.
#[test]
fn write_lat_server_expecting_more_fails_naming_n() {
    let (s, c) = pair("write-lat", "200", "100");
    let (cout, cerr) = text(&c);
    assert_eq!(c.status.code(), Some(0), "{cerr}");
    assert!(cout.contains(" 2       100 "), "{cout}");
    let (_, serr) = text(&s);
    assert_eq!(s.status.code(), Some(1), "{serr}");
    assert!(
        serr.contains("roce perf: the peer closed the connection after ")
            && serr.contains(" of the 200 iterations this side expects: ")
            && serr.contains(HINT),
        "{serr}"
    );
}

/// send-bw, the server counting to more: the client's closing round
/// arrives while the server waits for message 101.
#[test]
fn send_bw_server_expecting_more_fails_naming_n() {
    let (s, c) = pair("send-bw", "200", "100");
    let (_, serr) = text(&s);
    assert_eq!(s.status.code(), Some(1), "{serr}");
    assert!(
        serr.contains(&format!(
            "roce perf: the peer finished its run after 100 of the 200 messages this side expects: {HINT}"
        )),
        "{serr}"
    );
    let (_, cerr) = text(&c);
    assert_eq!(c.status.code(), Some(1), "{cerr}");
    assert!(
        cerr.contains("the peer closed the connection (it stopped: see its output)"),
        "{cerr}"
    );
}

/// send-bw, the client sending more: the server posts no receive after
/// its 100th, nothing completes on the client for 10 s.
#[test]
fn send_bw_client_sending_more_fails_naming_n() {
    let (s, c) = pair("send-bw", "100", "200");
    let (_, cerr) = text(&c);
    assert_eq!(c.status.code(), Some(1), "{cerr}");
    assert!(
        cerr.contains("roce perf: no completion for 10 s after 100 of 200 messages sent")
            && cerr.contains(HINT),
        "{cerr}"
    );
    let (_, serr) = text(&s);
    assert_eq!(s.status.code(), Some(1), "{serr}");
    assert!(serr.contains("the peer closed the connection"), "{serr}");
}

/// read-lat: the server measures nothing (as perftest's) and says where
/// the table is instead of ending silently.
#[test]
fn a_read_lat_server_says_the_table_is_the_clients() {
    let (s, c) = pair("read-lat", "100", "100");
    assert_eq!(c.status.code(), Some(0), "{}", text(&c).1);
    let (sout, serr) = text(&s);
    assert_eq!(s.status.code(), Some(0), "{serr}");
    assert!(
        sout.contains(
            " RDMA_Read Latency Test: the client measures every operation; its table is on its side"
        ),
        "{sout}"
    );
}
