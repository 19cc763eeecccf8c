//! Debian's perftest tools, unmodified, under `roce exec` (the drop-in
//! libibverbs.so.1), against this stack's own perftest-compatible
//! `roce perf`, in both roles: the tool as server and `roce perf TEST
//! --perftest HOST` as client; a plain `roce perf TEST` server (which
//! recognises a perftest client) and the tool as client. One host: both
//! sides share 127.0.0.1, as two processes share a NIC's port.
//!
//! `.ci/run` installs perftest and sets `ROCE_REQUIRE_RDMA_TOOLS`, so in
//! CI a missing program fails the test; elsewhere it is skipped.

mod common;

use std::process::{Command, Output};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use common::{lib_dir, roce, Guard};
use roce_testkit::free_port;

const LIMIT: Duration = Duration::from_secs(60);
const ITERS: &str = "200";

fn have(prog: &str) -> bool {
    common::have_tool(prog, "perftest")
}

/// `roce exec -- PROG ARGS` on the loopback device.
fn exec(prog: &str, args: &[&str]) -> Command {
    let mut c = roce();
    c.args(["exec", "--devices", "lo", "--", prog])
        .args(args)
        .env("ROCE_LIB_DIR", lib_dir())
        .env_remove("ROCE_ADDR")
        .env_remove("ROCE_ACK_DELAY");
    c
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Starts `server`, then `client` once the server listens on `port`;
/// both must exit 0 within the limit. Returns (server, client) output.
///
/// One pair at a time: every pair uses UDP port 4791 on 127.0.0.1, and
/// the perftest tools' timing is their own.
fn pair(server: Command, client: Command, port: &str) -> (String, String) {
    static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let end = Instant::now() + LIMIT;
    // Waited for in /proc: a probe connection would be taken for the
    // client by a perftest server.
    let s = Guard::spawn(server).listening(port.parse().unwrap());
    let c = Guard::spawn(client).wait(end.saturating_duration_since(Instant::now()));
    let (ct, c_ok) = (text(&c), c.status.success());
    let s = s.wait(if c_ok {
        end.saturating_duration_since(Instant::now())
    } else {
        Duration::from_secs(2)
    });
    let st = text(&s);
    assert!(
        s.status.success() && c_ok,
        "server {}, client {}\n--- server:\n{st}\n--- client:\n{ct}",
        s.status,
        c.status
    );
    (st, ct)
}

/// The first row of a results table (after its `#bytes` header), as
/// numbers: (bytes, iterations, figures...).
fn first_row(out: &str) -> Option<Vec<f64>> {
    let row = out
        .lines()
        .skip_while(|l| !l.trim_start().starts_with("#bytes"))
        .nth(1)?;
    row.split_whitespace()
        .map(|w| w.parse::<f64>().ok())
        .collect::<Option<Vec<f64>>>()
        .filter(|v| v.len() >= 4)
}

/// `out` has a results row of `size` bytes and ITERS iterations whose
/// bandwidth (BW average) or latency (t_min) is above zero.
fn assert_table(who: &str, out: &str, size: f64, bw: bool) {
    let r = first_row(out).unwrap_or_else(|| panic!("{who}: no results table in\n{out}"));
    assert_eq!(r[0], size, "{who}: message size in\n{out}");
    assert_eq!(
        r[1],
        ITERS.parse::<f64>().unwrap(),
        "{who}: iterations in\n{out}"
    );
    let figure = if bw { r[3] } else { r[2] };
    assert!(figure > 0.0, "{who}: no figure in {r:?}\n{out}");
}

/// perftest's complaints about the exchange, which it prints and then
/// exits 0 anyway (a closing round that did not match, say).
fn assert_clean(who: &str, out: &str) {
    for bad in ["Failed", "Couldn't", "couldn't", "Unable"] {
        assert!(!out.contains(bad), "{who}: {bad:?} in\n{out}");
    }
}

/// The address lines the perftest side printed (its own and its peer's)
/// show one GID, 127.0.0.1's, and two QPNs: both ends share the address,
/// as two processes share a NIC's port.
fn assert_one_gid(out: &str) {
    let gids: std::collections::BTreeSet<&str> = out
        .lines()
        .filter_map(|l| l.split("GID: ").nth(1))
        .map(str::trim)
        .collect();
    let lo = "00:00:00:00:00:00:00:00:00:00:255:255:127:00:00:01";
    assert_eq!(gids, [lo].into(), "GIDs in\n{out}");
    let qpns: std::collections::BTreeSet<&str> = out
        .lines()
        .filter_map(|l| l.split(" QPN ").nth(1)?.split_whitespace().next())
        .collect();
    assert_eq!(qpns.len(), 2, "QPNs {qpns:?} in\n{out}");
}

/// The perftest tool as server, `roce perf TEST --perftest` as client.
fn tool_serves(prog: &str, test: &str, size: f64, bw: bool) {
    if !have(prog) {
        return;
    }
    let port = free_port().to_string();
    let server = exec(
        prog,
        &["-d", "roce_lo", "-x", "0", "-p", &port, "-n", ITERS],
    );
    let mut client = roce();
    client.args([
        "perf",
        test,
        "--perftest",
        "-n",
        ITERS,
        "-p",
        &port,
        "127.0.0.1",
    ]);
    let (s, c) = pair(server, client, &port);
    assert_clean(prog, &s);
    assert_one_gid(&s);
    assert_table("roce perf client", &c, size, bw);
    assert!(c.contains("Peer version : 6.06"), "{c}");
    // perftest's BW server prints the client's figures; its latency
    // servers print nothing but ib_send_lat's own.
    if bw || prog == "ib_send_lat" {
        assert_table(prog, &s, size, bw);
    }
}

/// A plain `roce perf TEST` server, the perftest tool as client.
fn tool_connects(prog: &str, test: &str, size: f64, bw: bool) {
    if !have(prog) {
        return;
    }
    let port = free_port().to_string();
    let mut server = roce();
    server.args(["perf", test, "-n", ITERS, "-p", &port]);
    let client = exec(
        prog,
        &[
            "-d",
            "roce_lo",
            "-x",
            "0",
            "-p",
            &port,
            "-n",
            ITERS,
            "127.0.0.1",
        ],
    );
    let (s, c) = pair(server, client, &port);
    assert!(s.contains("the client speaks perftest's exchange"), "{s}");
    assert_clean(prog, &c);
    assert_one_gid(&c);
    assert_table(prog, &c, size, bw);
    // The server of a READ latency test is passive and prints no
    // figures, as perftest's.
    if bw || test == "send-lat" {
        assert_table("roce perf server", &s, size, bw);
    }
}

#[test]
fn ib_write_bw_server_roce_perf_client() {
    tool_serves("ib_write_bw", "write-bw", 65536.0, true);
}

#[test]
fn roce_perf_server_ib_write_bw_client() {
    tool_connects("ib_write_bw", "write-bw", 65536.0, true);
}

#[test]
fn ib_send_lat_server_roce_perf_client() {
    tool_serves("ib_send_lat", "send-lat", 2.0, false);
}

#[test]
fn roce_perf_server_ib_send_lat_client() {
    tool_connects("ib_send_lat", "send-lat", 2.0, false);
}

#[test]
fn ib_read_lat_server_roce_perf_client() {
    tool_serves("ib_read_lat", "read-lat", 2.0, false);
}

#[test]
fn roce_perf_server_ib_read_lat_client() {
    tool_connects("ib_read_lat", "read-lat", 2.0, false);
}

/// `roce perf --perftest` as the server too (not only recognising the
/// client): ib_write_bw as client.
#[test]
fn roce_perf_perftest_server_ib_write_bw_client() {
    if !have("ib_write_bw") {
        return;
    }
    let port = free_port().to_string();
    let mut server = roce();
    server.args(["perf", "write-bw", "--perftest", "-n", ITERS, "-p", &port]);
    let client = exec(
        "ib_write_bw",
        &[
            "-d",
            "roce_lo",
            "-x",
            "0",
            "-p",
            &port,
            "-n",
            ITERS,
            "127.0.0.1",
        ],
    );
    let (s, c) = pair(server, client, &port);
    assert_clean("ib_write_bw", &c);
    assert_table("ib_write_bw", &c, 65536.0, true);
    assert_table("roce perf server", &s, 65536.0, true);
}

/// perftest's habit `-d roce_lo -x 0` on both ends of one host, with
/// the perftest tool serving: the `roce perf --perftest` client, whose
/// GID 0 is the server's address, shares it (it once failed with "UDP
/// port 4791 on 127.0.0.1 is in use", and the server died in its
/// exchange).
#[test]
fn gid_index_0_on_both_ends_with_ib_write_bw_serving() {
    if !have("ib_write_bw") {
        return;
    }
    let port = free_port().to_string();
    let server = exec(
        "ib_write_bw",
        &["-d", "roce_lo", "-x", "0", "-F", "-p", &port, "-n", ITERS],
    );
    let mut client = roce();
    client.args([
        "perf",
        "write-bw",
        "--perftest",
        "-d",
        "roce_lo",
        "-x",
        "0",
        "-F",
        "-n",
        ITERS,
        "-p",
        &port,
        "127.0.0.1",
    ]);
    let (s, c) = pair(server, client, &port);
    assert_clean("ib_write_bw", &s);
    assert_one_gid(&s);
    assert!(!c.contains("using 127."), "{c}");
    assert_table("roce perf client", &c, 65536.0, true);
}
