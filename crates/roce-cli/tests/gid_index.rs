//! GID indexes as an rdma-core user expects them (issue 22, item 4):
//! `perf -x` and `pingpong -g` index the GID table `roce devinfo` prints;
//! an index past it ends the tool at start-up, before any peer connects;
//! GIDs of two IP families (an IPv6 GID against an IPv4 peer) are named
//! at the exchange, with the index to use, instead of a LOC_QP_OP_ERR.

mod common;

use std::net::UdpSocket;
use std::process::Output;
use std::time::Duration;

use common::{roce, spawn, text, Guard};
use roce_testkit::port_args;
use serde_json::Value;

fn run_pair(server: &[&str], client: &[&str]) -> (Output, Output) {
    run_pair_with(server, client, &[])
}

/// As [`run_pair`], both with `env`.
fn run_pair_with(server: &[&str], client: &[&str], env: &[(&str, &str)]) -> (Output, Output) {
    let spawn = |args: &[&str]| {
        let mut c = roce();
        c.args(args).envs(env.iter().copied());
        Guard::spawn(c)
    };
    let server = common::once_listening(spawn(server), server);
    let client = spawn(client).wait(Duration::from_secs(30));
    let server = server.wait(Duration::from_secs(30));
    (server, client)
}

/// lo's GID table as `roce devinfo` prints it.
fn lo_gids() -> Vec<String> {
    let o = roce()
        .args(["devinfo", "--json", "-d", "lo"])
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    v["devices"][0]["gids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["gid"].as_str().unwrap().to_string())
        .collect()
}

/// Whether lo has ::1 as its GID 1 (not in a container without IPv6).
fn lo_has_ipv6() -> bool {
    UdpSocket::bind(("::1", 0)).is_ok() && lo_gids().get(1).map(String::as_str) == Some("::1")
}

#[test]
fn perf_refuses_an_index_past_the_table_at_start_up() {
    let (port, rport) = port_args();
    for extra in [&[][..], &["--bind", "127.0.0.1"][..]] {
        // A server: it would otherwise wait for a client.
        let o = spawn(
            &[
                &[
                    "perf",
                    "write-bw",
                    "-x",
                    "200",
                    "-p",
                    &port,
                    "--roce-port",
                    &rport,
                ][..],
                extra,
            ]
            .concat(),
        )
        .wait(Duration::from_secs(10));
        let (_, err) = text(&o);
        assert_eq!(o.status.code(), Some(1), "{extra:?}: {err}");
        assert!(
            err.contains("GID index 200 is not in the GID table"),
            "{err}"
        );
        assert_eq!(err.lines().count(), 1, "{err}");
    }
    // A client, before it connects (nothing listens on this port).
    let o = roce()
        .args([
            "perf",
            "write-bw",
            "127.0.0.1",
            "-x",
            "2",
            "--bind",
            "127.0.0.1",
        ])
        .args(["-p", &port, "--roce-port", &rport])
        .output()
        .unwrap();
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("GID index 2 is not in the GID table of roce_lo"),
        "{err}"
    );
}

/// `-x 1 --bind 127.0.0.1` picks ::1: against an IPv4 server, the client
/// says which family each end has and which index to use.
#[test]
fn perf_names_a_family_mismatch() {
    if !lo_has_ipv6() {
        eprintln!("skipped: lo has no IPv6 GID");
        return;
    }
    let (port, rport) = port_args();
    let common = ["-n", "100", "-p", &port, "--roce-port", &rport];
    let (s, c) = run_pair(
        &[&["perf", "write-bw", "--bind", "127.0.0.1"][..], &common].concat(),
        &[
            &[
                "perf",
                "write-bw",
                "127.0.0.1",
                "-x",
                "1",
                "--bind",
                "127.0.0.1",
            ][..],
            &common,
        ]
        .concat(),
    );
    let (_, cerr) = text(&c);
    assert_eq!(c.status.code(), Some(1), "{cerr}");
    assert!(
        cerr.contains(
            "the client's GID (index 1) is ::1 (IPv6) but the server's is ::ffff:127.0.0.1 (IPv4)"
        ) && cerr.contains("use -x 0 on the client (GID[0] of roce_lo is ::ffff:127.0.0.1)"),
        "{cerr}"
    );
    assert!(!cerr.contains("LocQpOpErr"), "{cerr}");
    let (_, serr) = text(&s);
    assert_eq!(s.status.code(), Some(1), "{serr}");
    assert!(
        serr.contains("peer: the client's GID (index 1) is ::1"),
        "{serr}"
    );

    // The other way round: the server's -x 1, a plain client.
    let (port, rport) = port_args();
    let common = ["-n", "100", "-p", &port, "--roce-port", &rport];
    let (_, c) = run_pair(
        &[
            &["perf", "write-bw", "--bind", "127.0.0.1", "-x", "1"][..],
            &common,
        ]
        .concat(),
        &[&["perf", "write-bw", "127.0.0.1"][..], &common].concat(),
    );
    let (_, cerr) = text(&c);
    assert_eq!(c.status.code(), Some(1), "{cerr}");
    assert!(
        cerr.contains("but the server's is ::1 (IPv6)")
            && cerr.contains("give the server a GID index with an IPv4 GID"),
        "{cerr}"
    );
}

/// `pingpong -g N` is entry N of `roce devinfo`'s table (its --help used
/// to say 0 and 1 both held the IPv4 GID, as rxe's table does): on lo,
/// -g 1 is ::1, and against an IPv4 client both ends say so.
#[test]
fn pingpong_indexes_devinfos_table_and_names_a_family_mismatch() {
    let help = roce().args(["pingpong", "--help"]).output().unwrap();
    let (h, _) = text(&help);
    let h = h.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(
        h.contains("entry N of the GID table `roce devinfo` prints"),
        "{h}"
    );
    assert!(!h.contains("0 and 1 both hold"), "{h}");
    if !lo_has_ipv6() {
        eprintln!("skipped the run: lo has no IPv6 GID");
        return;
    }
    let gids = lo_gids();
    let (port, rport) = port_args();
    let common = [
        "-n",
        "10",
        "-p",
        &port,
        "--roce-port",
        &rport,
        "--timeout",
        "10",
    ];
    let (s, c) = run_pair(
        &[&["pingpong", "--bind", "127.0.0.1", "-g", "1"][..], &common].concat(),
        &[
            &["pingpong", "--bind", "127.0.0.2"][..],
            &common,
            &["127.0.0.1"],
        ]
        .concat(),
    );
    let (sout, serr) = text(&s);
    assert_eq!(s.status.code(), Some(1), "{serr}");
    assert!(sout.contains(&format!("GID {}", gids[1])), "{sout}");
    assert!(
        serr.contains(
            "the server's GID (index 1) is ::1 (IPv6) but the client's is ::ffff:127.0.0.2 (IPv4)"
        ) && serr.contains("use -g 0 on the server"),
        "{serr}"
    );
    let (_, cerr) = text(&c);
    assert_eq!(c.status.code(), Some(1), "{cerr}");
    assert!(cerr.contains("but the server's is ::1 (IPv6)"), "{cerr}");
}

fn assert_ok(who: &str, o: &Output) {
    let (out, err) = text(o);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{who} failed\nstdout:\n{out}\nstderr:\n{err}"
    );
}

/// Both ends on one host given `-x 0` (GID 0 of lo: 127.0.0.1), or the
/// client only: both open on 127.0.0.1, as two processes share a NIC's
/// port, and say nothing of a move (both ends once failed with "UDP port
/// ... is in use"). With `ROCE_SHM=0`, where each process holds its
/// address alone, the server, whose client uses that address too, takes
/// a free loopback address as it does with no index, and says why, not
/// "another RoCE stack on this host".
#[test]
fn perf_with_gid_index_0_on_both_ends_of_one_host() {
    for (server_x, moved) in [
        (
            &["-x", "0"][..],
            "roce perf: GID 0 is 127.0.0.1, which the client uses too (both ends on this host); using 127.0.0.",
        ),
        (
            &[][..],
            "roce perf: the client uses 127.0.0.1 too (both ends on this host); using 127.0.0.",
        ),
    ] {
        for shm in ["1", "0"] {
            let (port, rport) = port_args();
            let common = ["-n", "100", "-p", &port, "--roce-port", &rport];
            let (s, c) = run_pair_with(
                &[&["perf", "write-bw"][..], server_x, &common].concat(),
                &[&["perf", "write-bw", "127.0.0.1", "-x", "0"][..], &common].concat(),
                &[("ROCE_SHM", shm)],
            );
            assert_ok("server", &s);
            assert_ok("client", &c);
            let (_, serr) = text(&s);
            let (cout, cerr) = text(&c);
            assert!(cout.contains("Data verified  : yes"), "{cout}");
            assert!(cout.contains(" 65536      100 "), "{cout}");
            let gid_lines = cout.lines().filter(|l| l.contains(" GID: ")).count();
            let on_lo = cout
                .lines()
                .filter(|l| l.ends_with("GID: 00:00:00:00:00:00:00:00:00:00:255:255:127:00:00:01"))
                .count();
            assert_eq!(gid_lines, 2, "{cout}");
            if shm == "1" {
                assert!(!serr.contains("using 127.") && !cerr.contains("using 127."));
                assert_eq!(on_lo, 2, "both ends on 127.0.0.1: {cout}");
            } else {
                assert!(serr.contains(moved), "{server_x:?}: {serr}");
                assert!(!serr.contains("another RoCE stack"), "{serr}");
                assert_eq!(on_lo, 1, "one end moved: {cout}");
            }
        }
    }
}

/// The same with `pingpong -g 0` on both ends: one address for both.
#[test]
fn pingpong_with_gid_index_0_on_both_ends_of_one_host() {
    let (port, rport) = port_args();
    let common = ["-n", "50", "-g", "0", "-p", &port, "--roce-port", &rport];
    let (s, c) = run_pair(
        &[&["pingpong"][..], &common].concat(),
        &[&["pingpong"][..], &common, &["127.0.0.1"]].concat(),
    );
    assert_ok("server", &s);
    assert_ok("client", &c);
    let (_, serr) = text(&s);
    assert!(!serr.contains("using 127."), "{serr}");
    let (cout, _) = text(&c);
    assert!(cout.contains("50 iters in"), "{cout}");
    let on_lo = cout
        .lines()
        .filter(|l| l.contains(" address:") && l.ends_with("GID ::ffff:127.0.0.1"))
        .count();
    assert_eq!(on_lo, 2, "{cout}");
}

/// perftest's habit `-d roce_lo -x 0` on both ends of one host: both
/// share 127.0.0.1 on `lo`, and run.
#[test]
fn perf_with_dev_roce_lo_on_both_ends_of_one_host() {
    let (port, rport) = port_args();
    let common = [
        "-d",
        "roce_lo",
        "-x",
        "0",
        "-F",
        "-n",
        "100",
        "-p",
        &port,
        "--roce-port",
        &rport,
    ];
    let (s, c) = run_pair(
        &[&["perf", "write-bw"][..], &common].concat(),
        &[&["perf", "write-bw", "127.0.0.1"][..], &common].concat(),
    );
    assert_ok("server", &s);
    assert_ok("client", &c);
    let (cout, cerr) = text(&c);
    assert!(!cerr.contains("is not an address of lo"), "{cerr}");
    assert!(cout.contains(" 65536      100 "), "{cout}");
}
