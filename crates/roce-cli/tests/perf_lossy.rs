//! `roce perf --faults loss=...`: a lossy run crawls (go-back-N resends,
//! a lost tail waits for the retransmission timer), so it says what to
//! expect before it starts and shows its progress while it runs: on a
//! terminal a bar, elsewhere a line every few seconds (here every 0.2 s,
//! through the hidden `--progress-every`). It printed nothing until the
//! end.

mod common;

use std::time::Duration;

use common::{roce, text};
use roce_testkit::port_args;
use roce_testkit::run_bounded;

/// A 5 % loss run with a fixed seed: which packets are lost is then the
/// same every time, and so is the number of lost tails, each waiting out
/// the 268 ms retransmission timer (about 1.2 s in all here). With a new
/// seed per run, a run that lost no tail could end before its first
/// progress line.
fn lossy(extra: &[&str]) -> std::process::Output {
    let (port, rport) = port_args();
    let mut c = roce();
    c.args([
        "perf",
        "write-bw",
        "--loopback",
        "--faults",
        "loss=5%,seed=7",
    ])
    .args([
        "-s",
        "4096",
        "-n",
        "1000",
        "-p",
        &port,
        "--roce-port",
        &rport,
    ])
    .args(extra);
    run_bounded(c, Duration::from_secs(120))
}

#[test]
fn a_lossy_run_warns_and_shows_progress() {
    let o = lossy(&["--progress-every", "0.2"]);
    let (out, err) = text(&o);
    assert_eq!(o.status.code(), Some(0), "{out}\n{err}");
    let lines: Vec<&str> = err.lines().collect();
    assert!(
        lines[0].starts_with(
            "roce perf: --faults loss=5%: each lost packet makes go-back-N resend what followed it"
        ) && lines[0].contains("expect a few MB/s, not line rate")
            && lines[0].contains("2 to 4 MB/s at 5%"),
        "{err}"
    );
    // "[4096 B: 448 of 1000 iterations (44%) in 1.2 s, 1.45 MB/sec so far]"
    let progress: Vec<u64> = lines[1..]
        .iter()
        .filter_map(|l| {
            let rest = l.strip_prefix("[4096 B: ")?;
            let (done, rest) = rest.split_once(" of 1000 iterations (")?;
            assert!(rest.ends_with(" MB/sec so far]"), "{l}");
            done.parse().ok()
        })
        .collect();
    assert!(!progress.is_empty(), "no progress line: {err}");
    assert!(progress.windows(2).all(|w| w[0] <= w[1]), "{err}");
    assert!(progress.iter().all(|&d| d <= 1000), "{err}");
    assert!(out.contains(" 4096       1000 "), "{out}");
}

/// `--json` keeps stderr free of both.
#[test]
fn json_has_neither_warning_nor_progress() {
    let o = lossy(&["--progress-every", "0.2", "--json"]);
    let (out, err) = text(&o);
    assert_eq!(o.status.code(), Some(0), "{out}\n{err}");
    assert_eq!(err, "", "{err}");
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(v["results"][0]["iterations"], 1000, "{out}");
}

/// Flags that cannot run get their error alone, not the warning first.
#[test]
fn bad_flags_get_no_warning() {
    let o = lossy(&["--perftest"]);
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert_eq!(
        err.trim_end(),
        "roce perf: --perftest talks to another program's endpoint; it cannot be combined with --loopback"
    );
}
