//! `roce perf` cut short and pushed to its edges: Ctrl-C on either side of
//! two processes (both print what they measured), Ctrl-C before a peer
//! came, `-a` for the SEND tests (receives still queued from the last size
//! must fit the next), damaged datagrams dropped and retransmitted, an
//! unwritable capture file, and flag combinations no mode takes.

mod common;

use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::Guard;
use roce_testkit::port_args;
use serde_json::Value;

fn roce(args: &[&str]) -> Output {
    common::roce().args(args).output().expect("run roce")
}

fn spawn(args: &[&str]) -> Child {
    common::roce()
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run roce")
}

fn interrupt(c: &Child) {
    let st = Command::new("kill")
        .args(["-INT", &c.id().to_string()])
        .status()
        .expect("kill");
    assert!(st.success());
}

fn text(o: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// Waits for a child with a bound, so a hang fails the test (the shared
/// guard kills it then; an ended child is never signalled).
fn wait_bounded(c: Child, limit: Duration) -> Output {
    Guard(Some(c)).wait(limit)
}

/// Ctrl-C on the server of two processes: the server prints its partial
/// report and exits 130; the client is told, ends its loop and prints its
/// own (exit 0, `peer_interrupted`). Before, the latency tests stalled for
/// 10 s and failed, and send-bw hung (the client waited on RNR forever).
#[test]
fn ctrl_c_on_the_server_ends_both_sides_with_reports() {
    for test in ["write-bw", "send-bw", "send-lat"] {
        let (port, roce_port) = port_args();
        let common = ["-p", &port, "--roce-port", &roce_port];
        let mut sargs = vec!["perf", test, "--bind", "127.0.0.2"];
        sargs.extend(common);
        let mut server = spawn(&sargs);
        common::wait_listening(&mut server, &port);
        let mut cargs = vec![
            "perf",
            test,
            "127.0.0.2",
            "--bind",
            "127.0.0.1",
            "-D",
            "30",
            "--json",
        ];
        cargs.extend(common);
        let client = spawn(&cargs);
        std::thread::sleep(Duration::from_millis(2500));
        interrupt(&server);
        let so = wait_bounded(server, Duration::from_secs(20));
        let co = wait_bounded(client, Duration::from_secs(20));
        let (sout, serr) = text(&so);
        let (cout, cerr) = text(&co);
        assert_eq!(so.status.code(), Some(130), "{test}: {sout} {serr}");
        assert!(
            sout.contains("interrupted: partial results"),
            "{test}: {sout}"
        );
        assert_eq!(co.status.code(), Some(0), "{test}: {cout} {cerr}");
        let v: Value = serde_json::from_str(cout.lines().last().unwrap_or(""))
            .unwrap_or_else(|e| panic!("{test}: not JSON ({e}): {cout}"));
        assert_eq!(v["peer_interrupted"], true, "{test}: {v}");
        assert_eq!(v["interrupted"], false, "{test}: {v}");
        let iters = v["results"][0]["iterations"].as_u64().unwrap_or(0);
        assert!(iters > 0, "{test}: {v}");
    }
}

/// Ctrl-C in a one-process run of a SEND test: the partial report and 130
/// (the server side used to fail: "expected a 'measured' message").
#[test]
fn ctrl_c_in_a_loopback_send_bw_run() {
    let (port, roce_port) = port_args();
    let c = spawn(&[
        "perf",
        "send-bw",
        "--loopback",
        "-D",
        "30",
        "-p",
        &port,
        "--roce-port",
        &roce_port,
    ]);
    std::thread::sleep(Duration::from_millis(2500));
    interrupt(&c);
    let o = wait_bounded(c, Duration::from_secs(20));
    let (out, err) = text(&o);
    assert_eq!(o.status.code(), Some(130), "{out} {err}");
    assert!(out.contains("interrupted: partial results"), "{out}");
    assert!(!err.contains("roce perf:"), "{err}");
}

/// Ctrl-C while the server waits for a client ends it at once.
#[test]
fn ctrl_c_before_a_client_came() {
    let (port, roce_port) = port_args();
    let mut server = spawn(&["perf", "write-bw", "-p", &port, "--roce-port", &roce_port]);
    // Its Ctrl-C handler is set by then: `roce` installs it first.
    common::wait_listening(&mut server, &port);
    interrupt(&server);
    let o = wait_bounded(server, Duration::from_secs(5));
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(130), "{err}");
    assert!(err.contains("interrupted before a client came"), "{err}");
}

/// `-a` runs every size of the SEND tests (receives posted for the last
/// size are still queued when the next, larger one starts), on every QP.
#[test]
fn every_size_of_the_send_tests() {
    for (test, qps) in [("send-lat", "1"), ("send-bw", "2")] {
        let (port, roce_port) = port_args();
        let o = roce(&[
            "perf",
            test,
            "-q",
            qps,
            "--loopback",
            "-a",
            "-n",
            "2",
            "--json",
            "-p",
            &port,
            "--roce-port",
            &roce_port,
        ]);
        let (out, err) = text(&o);
        assert_eq!(o.status.code(), Some(0), "{test}: {out} {err}");
        let v: Value = serde_json::from_str(out.lines().last().unwrap_or("")).unwrap();
        let sizes: Vec<u64> = v["results"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["bytes"].as_u64().unwrap())
            .collect();
        assert_eq!(sizes.len(), 23, "{test}: {sizes:?}");
        assert_eq!(sizes.last(), Some(&(8 << 20)), "{test}");
        assert_eq!(v["verified"], true);
    }
}

/// Datagrams damaged on the way (`--faults corrupt=`) fail their ICRC and
/// are dropped, and retransmission replaces them: the data verifies.
/// (Before, the UDP backend only counted them and handed them on.)
#[test]
fn damaged_datagrams_are_dropped_and_resent() {
    let (port, roce_port) = port_args();
    let o = roce(&[
        "perf",
        "write-bw",
        "--loopback",
        "-s",
        "16384",
        "-n",
        "300",
        "--faults",
        "corrupt=0.02,seed=7",
        "--json",
        "-p",
        &port,
        "--roce-port",
        &roce_port,
    ]);
    let (out, err) = text(&o);
    assert_eq!(o.status.code(), Some(0), "{out} {err}");
    let v: Value = serde_json::from_str(out.lines().last().unwrap_or("")).unwrap();
    assert_eq!(v["verified"], true, "{v}");
    let d = &v["counters"]["device"];
    let dropped = d["rx_bad_icrc"].as_u64().unwrap_or(0);
    assert_eq!(v["counters"]["icrc"]["failed"], dropped, "{d}");
    let resent = v["counters"]["qps"][0]["retransmitted"]
        .as_u64()
        .unwrap_or(0);
    assert!(dropped > 0 || resent > 0, "no damage seen: {v}");
}

/// A capture file that cannot be written fails the run after its report.
#[test]
fn an_unwritable_capture_fails_the_run() {
    let (port, roce_port) = port_args();
    let o = roce(&[
        "perf",
        "write-bw",
        "--loopback",
        "-n",
        "200",
        "--pcap",
        "/dev/full",
        "-p",
        &port,
        "--roce-port",
        &roce_port,
    ]);
    let (out, err) = text(&o);
    assert_eq!(o.status.code(), Some(1), "{out} {err}");
    assert!(err.contains("pcap file could not be written"), "{err}");
}

/// Combinations no mode takes give one-line errors at once.
#[test]
fn flag_combinations_refused() {
    let (port, roce_port) = port_args();
    for (args, want, code) in [
        (
            vec!["perf", "write-bw", "--perftest", "--loopback"],
            "cannot be combined with --loopback",
            1,
        ),
        (
            vec!["perf", "write-bw", "--loopback", "-d", "nosuch0", "-n", "5"],
            "no device nosuch0",
            1,
        ),
        (
            vec!["perf", "write-bw", "--roce-port", "0"],
            "0 is not in 1..=65535",
            2,
        ),
        (
            vec!["perf", "write-bw", "--loopback", "--vlan", "5"],
            "needs --backend packet",
            1,
        ),
        (
            vec!["perf", "write-bw", "--loopback", "--link-gbps", "1e-300"],
            "between 0.001 and 10000",
            1,
        ),
    ] {
        let mut a = args.clone();
        a.extend(["-p", &port]);
        if !args.contains(&"--roce-port") {
            a.extend(["--roce-port", &roce_port]);
        }
        let start = Instant::now();
        let o = roce(&a);
        let (_, err) = text(&o);
        assert_eq!(o.status.code(), Some(code), "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: {err}");
        assert!(start.elapsed() < Duration::from_secs(10), "{args:?}");
    }
}

/// Ctrl-C during an `-a` latency run keeps the sizes measured so far: a
/// stop that lands between sizes used to end both sides with "no
/// iteration completed" and no report. The signal comes once the run has
/// measured its first, second, then third size (its progress lines on
/// stderr), not after a fixed time: under load, setting up can take longer
/// than any fixed delay.
#[test]
fn ctrl_c_during_all_sizes_keeps_the_rows_measured() {
    let mut interrupted = 0;
    for after in 1..=3usize {
        let (port, roce_port) = port_args();
        let mut c = spawn(&[
            "perf",
            "send-lat",
            "--loopback",
            "-a",
            "-n",
            "50",
            "-p",
            &port,
            "--roce-port",
            &roce_port,
        ]);
        // Read stderr as it comes; say when `after` sizes are done.
        let stderr = c.stderr.take().expect("piped stderr");
        let (tx, rx) = std::sync::mpsc::channel();
        let reader = std::thread::spawn(move || {
            use std::io::BufRead;
            let mut all = String::new();
            let mut done = 0;
            for line in std::io::BufReader::new(stderr)
                .lines()
                .map_while(Result::ok)
            {
                if line.starts_with("[size ") {
                    done += 1;
                    if done == after {
                        let _ = tx.send(());
                    }
                }
                all.push_str(&line);
                all.push('\n');
            }
            all
        });
        let measured = rx.recv_timeout(Duration::from_secs(60)).is_ok();
        interrupt(&c);
        let o = wait_bounded(c, Duration::from_secs(30));
        let err = reader.join().expect("stderr reader");
        let out = String::from_utf8_lossy(&o.stdout).into_owned();
        assert!(
            measured,
            "{after}: no size was measured in 60 s: {out} {err}"
        );
        if o.status.code() == Some(0) {
            continue; // finished before the signal
        }
        assert_eq!(o.status.code(), Some(130), "{after} sizes: {out} {err}");
        assert!(!err.contains("roce perf:"), "{after} sizes: {err}");
        assert!(out.contains("interrupted: partial results"), "{out}");
        interrupted += 1;
    }
    // At least one run was cut short (else the test checked nothing).
    assert!(interrupted > 0, "every run finished before its signal");
}
