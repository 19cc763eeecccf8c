//! `roce perf` end to end: every test over the in-memory fabric and over
//! UDP on loopback, with data verification, and the failure cases (bad
//! flags, unknown or unreachable peer, a port held by a stack that does
//! not share, peer killed, Ctrl-C); `--loopback` on one shared address.

mod common;

use std::net::UdpSocket;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use roce_testkit::port_args;
use serde_json::Value;

fn roce(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_roce"))
        .args(args)
        .output()
        .expect("run roce")
}

fn json_run(args: &[&str]) -> Value {
    common::json_of(&roce(args))
}

/// The data check can fail: told to expect another pattern from the peer
/// (`--verify-salt`, a test-only flag), every test that compares payloads
/// ends with exit status 1 and says the data differs, and it does so at
/// once rather than after a stall (the side that finds it tells the other).
#[test]
fn a_payload_other_than_the_peers_fails_the_run() {
    for test in [
        "write-lat",
        "send-lat",
        "read-lat",
        "write-bw",
        "read-bw",
        "send-bw",
    ] {
        let (port, _) = port_args();
        let t0 = std::time::Instant::now();
        let o = roce(&[
            "perf",
            test,
            "--loopback",
            "--backend",
            "fabric",
            "-n",
            "50",
            "-p",
            &port,
            "--verify-salt",
            "5",
        ]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{test}: {err}");
        assert!(err.contains("differs"), "{test}: {err}");
        // Ended by the check, not by waiting for the failed side to answer.
        assert!(
            !err.contains("retry counter") && !err.contains("stopped responding"),
            "{test}: {err}"
        );
        assert_eq!(err.trim().lines().count(), 1, "{test}: one line: {err}");
        assert!(
            t0.elapsed() < std::time::Duration::from_secs(5),
            "{test} took {:?}: {err}",
            t0.elapsed()
        );
    }
}

#[test]
fn every_test_over_the_fabric_with_verification() {
    for test in [
        "write-bw",
        "read-bw",
        "send-bw",
        "atomic-bw",
        "write-lat",
        "read-lat",
        "send-lat",
        "atomic-lat",
    ] {
        let (port, _) = port_args();
        let v = json_run(&[
            "perf",
            test,
            "--loopback",
            "--backend",
            "fabric",
            "-n",
            "300",
            "-p",
            &port,
            "--json",
        ]);
        assert_eq!(v["test"], test);
        assert_eq!(v["verified"], true);
        let r = &v["results"][0];
        assert_eq!(r["iterations"], 300, "{test}: {v}");
        if test.ends_with("bw") {
            assert!(r["bw_avg_mb_per_sec"].as_f64().unwrap() > 0.0, "{v}");
            assert!(
                r["bw_peak_mb_per_sec"].as_f64().unwrap()
                    >= r["bw_avg_mb_per_sec"].as_f64().unwrap() * 0.999
            );
        } else {
            let typ = r["t_typical_usec"].as_f64().unwrap();
            assert!(typ > 0.0 && typ <= r["t_max_usec"].as_f64().unwrap(), "{v}");
            assert!(r["t_min_usec"].as_f64().unwrap() <= typ);
        }
        let expect_bytes = if test.starts_with("atomic") {
            8
        } else if test.ends_with("bw") {
            65536
        } else {
            2
        };
        assert_eq!(r["bytes"], expect_bytes, "{test}");
    }
}

#[test]
fn all_sizes_many_qps_and_bidirectional() {
    let (port, _) = port_args();
    let v = json_run(&[
        "perf",
        "write-bw",
        "--loopback",
        "--backend",
        "fabric",
        "-a",
        "-n",
        "4",
        "-p",
        &port,
        "--json",
    ]);
    let sizes: Vec<u64> = v["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["bytes"].as_u64().unwrap())
        .collect();
    assert_eq!(
        sizes,
        (1..=23).map(|k| 1u64 << k).collect::<Vec<_>>(),
        "2 bytes to 8 MiB"
    );
    for test in ["send-bw", "read-bw", "write-bw"] {
        let (port, _) = port_args();
        let v = json_run(&[
            "perf",
            test,
            "--loopback",
            "--backend",
            "fabric",
            "-q",
            "4",
            "-b",
            "-n",
            "200",
            "-s",
            "4096",
            "-p",
            &port,
            "--json",
        ]);
        // Both directions, 4 QPs each: 2 × 4 × 200 operations.
        assert_eq!(v["results"][0]["iterations"], 1600, "{test}: {v}");
    }
}

#[test]
fn udp_loopback_bandwidth_and_latency() {
    for test in ["write-bw", "send-bw", "read-lat", "send-lat"] {
        let (port, roce_port) = port_args();
        let v = json_run(&[
            "perf",
            test,
            "--loopback",
            "-n",
            "300",
            "-p",
            &port,
            "--roce-port",
            &roce_port,
            "--json",
        ]);
        assert_eq!(v["verified"], true, "{v}");
        assert_eq!(v["results"][0]["iterations"], 300, "{test}: {v}");
        // This side's counters: what the engine sent is what the UDP
        // backend carried, on the wire or (the peer being on this host,
        // once it took the ring) through shared memory, and the client's
        // QP carried it.
        let c = &v["counters"];
        let sent = c["device"]["tx_datagrams"].as_u64().unwrap_or(0);
        assert!(sent >= 300, "{test}: {c}");
        let by = |k: &str| c["backend"][k].as_u64().unwrap_or(0);
        assert_eq!(
            by("udp_tx_datagrams") + by("udp_shm_tx_datagrams"),
            sent,
            "{test}: {c}"
        );
        assert!(
            by("udp_shm_tx_datagrams") > 0,
            "{test}: the same-host path: {c}"
        );
        assert_eq!(c["device"]["rx_bad_icrc"], 0, "{test}: {c}");
        assert_eq!(
            c["qps"][0]["tx_packets"], sent,
            "{test}: one QP sends all: {c}"
        );
    }
}

#[test]
fn text_output_has_the_perftest_tables() {
    let (port, _) = port_args();
    let o = roce(&[
        "perf",
        "write-bw",
        "--loopback",
        "--backend",
        "fabric",
        "-n",
        "100",
        "-p",
        &port,
        "--report_gbits",
    ]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(0), "{out}");
    assert!(
        out.contains(
            " #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]"
        ),
        "{out}"
    );
    let row = out
        .lines()
        .find(|l| l.starts_with(" 65536"))
        .expect("a result row");
    assert_eq!(row.split_whitespace().nth(1), Some("100"));
    let (port, _) = port_args();
    let o = roce(&[
        "perf",
        "send-lat",
        "--loopback",
        "--backend",
        "fabric",
        "-n",
        "100",
        "-p",
        &port,
    ]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec]"), "{out}");
}

fn one_line_failure(o: &Output) -> String {
    let err = String::from_utf8_lossy(&o.stderr).to_string();
    assert_ne!(o.status.code(), Some(0), "expected a failure");
    assert!(!err.contains("panicked"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
    err
}

#[test]
fn bad_flags_unknown_and_unreachable_peers() {
    let err = one_line_failure(&roce(&["perf", "write-bw", "--loopback", "-m", "1000"]));
    assert!(err.contains("MTU 1000"), "{err}");
    let err = one_line_failure(&roce(&["perf", "write-lat", "--loopback", "-q", "2"]));
    assert!(err.contains("one QP"), "{err}");
    let err = one_line_failure(&roce(&["perf", "atomic-bw", "--loopback", "-s", "64"]));
    assert!(err.contains("8 bytes"), "{err}");
    let o = roce(&["perf", "no-such-test"]);
    assert_eq!(o.status.code(), Some(2), "usage errors exit 2");
    let err = one_line_failure(&roce(&[
        "perf",
        "write-bw",
        "no.such.host.invalid",
        "-n",
        "10",
    ]));
    assert!(err.contains("unknown address"), "{err}");
    // Nothing listens on this port.
    let (port, _) = port_args();
    let start = Instant::now();
    let err = one_line_failure(&roce(&[
        "perf",
        "write-bw",
        "127.0.0.1",
        "-p",
        &port,
        "-n",
        "10",
    ]));
    assert!(err.contains("cannot reach"), "{err}");
    assert!(start.elapsed() < Duration::from_secs(5));
}

/// `roce perf write-bw --loopback --json` with `env`: the report.
fn loopback_json(env: &[(&str, &str)], busy: Option<&str>) -> Value {
    let (port, rport) = port_args();
    let _busy = busy.map(|a| UdpSocket::bind(format!("{a}:{rport}")).unwrap());
    let o = Command::new(env!("CARGO_BIN_EXE_roce"))
        .args(["perf", "write-bw", "--loopback", "-n", "100", "--json"])
        .args(["-p", &port, "--roce-port", &rport])
        .envs(env.iter().copied())
        .output()
        .expect("run roce");
    let (out, err) = (
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr),
    );
    assert_eq!(o.status.code(), Some(0), "stdout: {out}\nstderr: {err}");
    let v: Value = serde_json::from_str(out.lines().last().unwrap_or(""))
        .unwrap_or_else(|e| panic!("not JSON ({e}): {out}"));
    assert_eq!(v["verified"], true, "{v}");
    v
}

/// (address, QPN) of the client's end and of the server's.
fn loopback_ends(v: &Value) -> [(String, u64); 2] {
    let e = &v["counters"]["endpoints"];
    let end = |side: &str| {
        (
            e[side][0]["addr"].as_str().unwrap().to_string(),
            e[side][0]["qpn"].as_u64().unwrap(),
        )
    };
    [end("local"), end("remote")]
}

/// `--loopback` runs both sides in this process on 127.0.0.1, two
/// contexts of one device as a NIC allows: both ends report that
/// address, their QPNs differ, and the datagrams were routed to their
/// context by destination QPN through the shared-memory path.
#[test]
fn loopback_runs_both_sides_on_one_address() {
    let v = loopback_json(&[], None);
    let [client, server] = loopback_ends(&v);
    assert_eq!(client.0, "127.0.0.1", "{v}");
    assert_eq!(server.0, "127.0.0.1", "{v}");
    assert_ne!(client.1, server.1, "{v}");
    let b = &v["counters"]["backend"];
    assert!(b["udp_shm_qpn_routes"].as_u64().unwrap() > 0, "{b}");
    assert!(b["udp_shm_tx_datagrams"].as_u64().unwrap() > 0, "{b}");
}

/// A stack that does not share (a plain UDP socket) holds 127.0.0.1's
/// RoCE port: both sides, which chose their address themselves, take the
/// next loopback address together (they once failed "in use").
#[test]
fn loopback_moves_off_a_port_a_non_sharing_stack_holds() {
    let v = loopback_json(&[], Some("127.0.0.1"));
    let [client, server] = loopback_ends(&v);
    assert_eq!(client.0, server.0, "{v}");
    assert_ne!(client.0, "127.0.0.1", "{v}");
    assert!(client.0.starts_with("127."), "{v}");
}

/// `--loopback` takes free addresses as the drop-in does: with its
/// control port held on 127.0.0.1 it listens on the next loopback
/// address, where its server's RoCE address follows; with the port held
/// on every address (a listener on the wildcard address) on a port the
/// kernel picks. Either way the run passes, data verified, and says the
/// move in one line.
#[test]
fn loopback_moves_off_a_taken_control_port() {
    for wildcard in [false, true] {
        let (port, rport) = port_args();
        let at = if wildcard { "0.0.0.0" } else { "127.0.0.1" };
        let _held = std::net::TcpListener::bind(format!("{at}:{port}")).unwrap();
        let mut c = Command::new(env!("CARGO_BIN_EXE_roce"));
        c.args(["perf", "write-bw", "--loopback", "-n", "100"])
            .args(["-p", &port, "--roce-port", &rport])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let o = wait_bounded(c, Duration::from_secs(60));
        let (out, err) = (
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr),
        );
        assert_eq!(o.status.code(), Some(0), "stdout: {out}\nstderr: {err}");
        assert!(out.contains("Data verified  : yes"), "{out}");
        let moved = err
            .lines()
            .find(|l| l.contains(&format!("127.0.0.1:{port} (TCP) is taken")))
            .unwrap_or_else(|| panic!("no move said: {err}"));
        if wildcard {
            assert!(moved.contains("on every loopback address"), "{moved}");
        } else {
            let v = loopback_json_at(&port, &rport);
            let [_, server] = loopback_ends(&v);
            assert_ne!(server.0, "127.0.0.1", "{v}");
            assert!(server.0.starts_with("127."), "{v}");
        }
    }
}

/// The `--json` report of a `--loopback` run on control port `port`.
fn loopback_json_at(port: &str, rport: &str) -> Value {
    let mut c = Command::new(env!("CARGO_BIN_EXE_roce"));
    c.args(["perf", "write-bw", "--loopback", "-n", "100", "--json"])
        .args(["-p", port, "--roce-port", rport])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let o = wait_bounded(c, Duration::from_secs(60));
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(0), "{out}");
    serde_json::from_str(out.lines().last().unwrap_or("")).unwrap()
}

/// Runs `c`, killed after `limit`.
fn wait_bounded(mut c: Command, limit: Duration) -> Output {
    let mut child = c.spawn().expect("run roce");
    let start = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > limit {
            let _ = child.kill();
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

/// With `ROCE_SHM=0` each context holds its address alone: the client
/// takes a free loopback address of its own, and the datagrams go by UDP.
#[test]
fn loopback_without_sharing_gives_the_client_an_address_of_its_own() {
    let v = loopback_json(&[("ROCE_SHM", "0")], None);
    let [client, server] = loopback_ends(&v);
    assert_eq!(server.0, "127.0.0.1", "{v}");
    assert_ne!(client.0, "127.0.0.1", "{v}");
    assert!(client.0.starts_with("127."), "{v}");
    let b = &v["counters"]["backend"];
    assert_eq!(b["udp_shm_tx_datagrams"], 0, "{b}");
    assert!(b["udp_tx_datagrams"].as_u64().unwrap() > 0, "{b}");
}

#[test]
fn peer_killed_mid_run_ends_with_an_error() {
    let (port, roce_port) = port_args();
    let mut server = Command::new(env!("CARGO_BIN_EXE_roce"))
        .args([
            "perf",
            "write-bw",
            "--bind",
            "127.0.0.1",
            "-p",
            &port,
            "--roce-port",
            &roce_port,
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    common::wait_listening(&mut server, &port);
    let mut client = Command::new(env!("CARGO_BIN_EXE_roce"))
        .args([
            "perf",
            "write-bw",
            "127.0.0.1",
            "--bind",
            "127.0.0.2",
            "-D",
            "30",
            "-p",
            &port,
            "--roce-port",
            &roce_port,
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    server.kill().unwrap();
    let _ = server.wait();
    let killed = Instant::now();
    // The client must end by itself, with an error, long before -D 30.
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(st) = client.try_wait().unwrap() {
            break st;
        }
        assert!(
            Instant::now() < deadline,
            "the client did not notice the dead peer"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let o = client.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(status.code(), Some(1), "{err}");
    assert!(
        err.contains("retry counter exceeded (RetryExcErr) on QP")
            && err.contains("(the peer stopped answering: killed, or unreachable)")
            || err.contains("closed the control connection"),
        "{err}"
    );
    assert!(
        killed.elapsed() < Duration::from_secs(10),
        "noticed after {:?}",
        killed.elapsed()
    );
}

#[test]
fn ctrl_c_ends_a_run_with_a_partial_report() {
    let (port, roce_port) = port_args();
    let child = Command::new(env!("CARGO_BIN_EXE_roce"))
        .args([
            "perf",
            "send-lat",
            "--loopback",
            "-D",
            "30",
            "-p",
            &port,
            "--roce-port",
            &roce_port,
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    let st = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(st.success());
    let start = Instant::now();
    let o = child.wait_with_output().unwrap();
    assert!(start.elapsed() < Duration::from_secs(15));
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(
        o.status.code(),
        Some(130),
        "{out} {}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(out.contains("interrupted: partial results"), "{out}");
    let row = out
        .lines()
        .find(|l| l.starts_with(" 2 "))
        .expect("a partial result row");
    let iters: u64 = row.split_whitespace().nth(1).unwrap().parse().unwrap();
    assert!(iters > 10, "{row}");
}

#[test]
fn dcqcn_over_udp_reacts_to_ce_marks() {
    let (port, roce_port) = port_args();
    // The fault injector marks 20 % of the ECN-capable packets CE: the
    // receiver answers with CNPs and the sender's DCQCN cuts its rate.
    let v = json_run(&[
        "perf",
        "write-bw",
        "--loopback",
        "-n",
        "500",
        "-p",
        &port,
        "--roce-port",
        &roce_port,
        "--cc",
        "dcqcn",
        "--link-gbps",
        "40",
        "--faults",
        "ce=20%",
        "--json",
    ]);
    let cc = &v["results"][0]["cc"];
    assert!(cc["cnp_received"].as_u64().unwrap() > 0, "{v}");
    assert_eq!(v["verified"], true);
    // Without --cc the data is not ECN-capable: nothing is marked.
    let (port, roce_port) = port_args();
    let v = json_run(&[
        "perf",
        "write-bw",
        "--loopback",
        "-n",
        "200",
        "-p",
        &port,
        "--roce-port",
        &roce_port,
        "--faults",
        "ce=20%",
        "--json",
    ]);
    assert_eq!(v["results"][0]["cc"]["cnp_received"], 0, "{v}");
    let err = one_line_failure(&roce(&[
        "perf",
        "write-bw",
        "--loopback",
        "--cc",
        "dcqcn",
        "--link-gbps",
        "0",
    ]));
    assert!(err.contains("--link-gbps"), "{err}");
}

#[test]
fn perftest_rdma_cm_mode_between_two_processes() {
    let (port, roce_port) = port_args();
    for test in ["write-bw", "read-bw", "send-bw"] {
        let server = Command::new(env!("CARGO_BIN_EXE_roce"))
            .args(["perf", test, "--perftest", "-R", "--bind", "127.0.0.1"])
            .args([
                "-s",
                "8192",
                "-n",
                "300",
                "-p",
                &port,
                "--roce-port",
                &roce_port,
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(300));
        let c = roce(&[
            "perf",
            test,
            "127.0.0.1",
            "--perftest",
            "-R",
            "--bind",
            "127.0.0.2",
            "-s",
            "8192",
            "-n",
            "300",
            "-p",
            &port,
            "--roce-port",
            &roce_port,
        ]);
        let cout = String::from_utf8_lossy(&c.stdout).into_owned();
        assert_eq!(
            c.status.code(),
            Some(0),
            "{cout}{}",
            String::from_utf8_lossy(&c.stderr)
        );
        let s = server.wait_with_output().unwrap();
        let sout = String::from_utf8_lossy(&s.stdout).into_owned();
        assert_eq!(s.status.code(), Some(0), "{sout}");
        // Both print the client's row (WRITE/READ): 8192 bytes, 300 iterations.
        let row = |o: &str| {
            o.lines()
                .find(|l| l.trim_start().starts_with("8192"))
                .map(|l| l.split_whitespace().take(4).collect::<Vec<_>>().join(" "))
        };
        assert!(
            row(&cout).is_some_and(|r| r.starts_with("8192 300 ")),
            "{cout}"
        );
        if test == "send-bw" {
            // The SEND server measures its own receive rate.
            assert!(
                row(&sout).is_some_and(|r| r.starts_with("8192 300 ")),
                "{sout}"
            );
        } else {
            assert_eq!(row(&cout), row(&sout), "{test}");
        }
    }
    // -R needs --perftest; the server needs an address.
    assert_eq!(roce(&["perf", "write-bw", "-R"]).status.code(), Some(2));
    let o = roce(&["perf", "write-bw", "--perftest", "-R"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("--bind"));
}

#[test]
fn perftest_latency_and_atomic_tests_between_two_processes() {
    // Over perftest's TCP exchange, and over RDMA CM (-R).
    let tests = [
        "send-lat",
        "write-lat",
        "read-lat",
        "atomic-lat",
        "atomic-bw",
    ];
    for (test, cm) in tests.into_iter().flat_map(|t| [(t, None), (t, Some("-R"))]) {
        let (port, roce_port) = port_args();
        let mut server = Command::new(env!("CARGO_BIN_EXE_roce"))
            .args(["perf", test, "--perftest", "--bind", "127.0.0.1"])
            .args(cm)
            .args(["-n", "300", "-p", &port, "--roce-port", &roce_port])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        if cm.is_none() {
            // (with -R the client retries until the server listens)
            common::wait_listening(&mut server, &port);
        }
        let mut args = vec![
            "perf",
            test,
            "127.0.0.1",
            "--perftest",
            "--bind",
            "127.0.0.2",
            "-n",
            "300",
            "-p",
            &port,
            "--roce-port",
            &roce_port,
        ];
        args.extend(cm);
        let c = roce(&args);
        let cout = String::from_utf8_lossy(&c.stdout).into_owned();
        assert_eq!(c.status.code(), Some(0), "{test} {cm:?}: {cout}");
        let s = server.wait_with_output().unwrap();
        let sout = String::from_utf8_lossy(&s.stdout).into_owned();
        assert_eq!(s.status.code(), Some(0), "{test}: {sout}");
        let size = if test.starts_with("atomic") { "8" } else { "2" };
        let row = |out: &str| -> Option<Vec<f64>> {
            out.lines()
                .find(|l| l.split_whitespace().next() == Some(size))
                .map(|l| l.split_whitespace().map(|x| x.parse().unwrap()).collect())
        };
        let f = row(&cout).unwrap_or_else(|| panic!("{test}: no result row: {cout}"));
        assert_eq!(f[1], 300.0, "{test}");
        if test.ends_with("lat") {
            // t_min <= t_typical <= t_max, all positive.
            assert!(f[2] > 0.0 && f[2] <= f[4] && f[4] <= f[3], "{test}: {f:?}");
            // Ping-pongs are measured on both sides; READ/atomic latency
            // only by the client.
            let both = matches!(test, "send-lat" | "write-lat");
            assert_eq!(row(&sout).is_some(), both, "{test}: {sout}");
        } else {
            assert!(f[3] > 0.0, "{test}: {f:?}");
            // The server prints the client's report.
            assert_eq!(row(&sout), Some(f), "{test}");
        }
    }
}

/// Runs `test` with `flags` and `--json` in perftest mode between two
/// processes (server on 127.0.0.1, client on 127.0.0.2); both must exit 0
/// and print exactly one JSON object: (client's, server's).
fn perftest_json_pair(test: &str, flags: &[&str]) -> [Value; 2] {
    let (port, roce_port) = port_args();
    let mut common = vec![
        "--perftest",
        "--json",
        "-p",
        &port,
        "--roce-port",
        &roce_port,
    ];
    common.extend_from_slice(flags);
    let mut server = Command::new(env!("CARGO_BIN_EXE_roce"))
        .args(["perf", test, "--bind", "127.0.0.1"])
        .args(&common)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    if !flags.contains(&"-R") {
        // (with -R the client retries until the server listens)
        common::wait_listening(&mut server, &port);
    }
    let mut args = vec!["perf", test, "127.0.0.1", "--bind", "127.0.0.2"];
    args.extend(&common);
    let c = roce(&args);
    let s = server.wait_with_output().unwrap();
    [c, s].map(|o| {
        assert_eq!(
            o.status.code(),
            Some(0),
            "{test}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        serde_json::from_slice(&o.stdout).expect("stdout is one JSON object")
    })
}

#[test]
fn perftest_mode_prints_json() {
    // Both sides of a bidirectional SEND test over perftest's exchange,
    // with --json: one object each, nothing else on stdout.
    for v in perftest_json_pair("send-bw", &["-b", "-s", "8192", "-n", "300"]) {
        assert_eq!(v["test"], "send-bw");
        assert_eq!(v["exchange"], "perftest");
        assert_eq!(v["bidirectional"], true);
        let r = &v["results"][0];
        assert_eq!(
            (r["bytes"].as_u64(), r["iterations"].as_u64()),
            (Some(8192), Some(300))
        );
        assert!(r["bw_avg_mb_per_sec"].as_f64().unwrap() > 0.0, "{v}");
    }
}

#[test]
fn perftest_rdma_cm_mode_with_several_qps() {
    // -R -q 3: three data connections made through the CM, each QP's
    // keys exchanged; the rows count the messages of all three.
    for test in ["write-bw", "send-bw"] {
        let flags = ["-R", "-q", "3", "-s", "4096", "-n", "100"];
        for v in perftest_json_pair(test, &flags) {
            assert_eq!(v["qps"], 3, "{v}");
            assert_eq!(v["results"][0]["iterations"], 300, "{test}: {v}");
        }
    }
}
