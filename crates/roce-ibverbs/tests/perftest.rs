//! perftest's eight tools (Debian's `perftest` package:
//! `ib_{write,read,send,atomic}_{bw,lat}`), unmodified, over the drop-in
//! library: each test runs a tool as server and as client on loopback
//! (`-d roce_lo -x 0 -p PORT`, the client naming 127.0.0.1), the way a
//! user starts them with `LD_LIBRARY_PATH` naming a directory that holds
//! `libibverbs.so.1`. Both must exit 0 and the client must print its
//! results table with a figure above zero.
//!
//! Iterations are kept small so that the debug build finishes in
//! seconds. perftest refuses some combinations by itself, whatever the
//! device: `-e` with RDMA WRITE, `-q` above 1 in the latency tests, and
//! `-a` (or `-s`) with atomics; those are not run.
//!
//! `.ci/run` sets `ROCE_REQUIRE_RDMA_TOOLS`, so in CI a missing program
//! fails the test; elsewhere it is skipped with a message.

mod common;

use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::{free_port, have, listening};

/// The directory with `libibverbs.so.1`.
fn dropin() -> PathBuf {
    common::dropin("perftest-dropin")
}

fn command(prog: &str, args: &[String]) -> Command {
    let mut c = Command::new(prog);
    c.args(args)
        .env("LD_LIBRARY_PATH", dropin())
        .env_remove("ROCE_ADDR")
        .env_remove("ROCE_ACK_DELAY")
        .env("ROCE_DEVICES", "lo")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    c
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Kills `child` and returns what it printed.
fn kill(mut child: Child) -> String {
    let _ = child.kill();
    text(&child.wait_with_output().unwrap())
}

/// Waits for `child` until `end`; `None` (and the child killed) past it.
fn finish(mut child: Child, end: Instant) -> Result<Output, String> {
    loop {
        if child.try_wait().unwrap().is_some() {
            return Ok(child.wait_with_output().unwrap());
        }
        if Instant::now() > end {
            return Err(kill(child));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Runs `prog` as server and client with `args` (and the device, GID
/// index and port flags), both bounded by `limit`; both must exit 0.
/// Returns the client's output. A run that failed only because perftest
/// could not calibrate its cycle counter against the clock at the end
/// ("Correlation coefficient r^2 ... < 0.9", on a loaded machine: every
/// transfer done, no report) is run again, twice at most.
fn pair(prog: &str, args: &[&str], limit: Duration) -> String {
    let mut tries = 0;
    loop {
        match pair_once(prog, args, limit) {
            Ok(out) => return out,
            Err(e) if tries < 2 && e.contains("Correlation coefficient r^2") => {
                eprintln!("{prog} {args:?}: perftest's clock calibration failed; again");
                tries += 1;
            }
            Err(e) => panic!("{e}"),
        }
    }
}

/// One run of [`pair`]: the client's output, or what both printed.
fn pair_once(prog: &str, args: &[&str], limit: Duration) -> Result<String, String> {
    let port = free_port().to_string();
    let mut a: Vec<String> = ["-d", "roce_lo", "-x", "0", "-p", &port]
        .iter()
        .map(|s| s.to_string())
        .collect();
    a.extend(args.iter().map(|s| s.to_string()));
    let end = Instant::now() + limit;
    let mut server = command(prog, &a).spawn().unwrap();
    // The client does not retry: start it once the server listens.
    while !listening(port.parse().unwrap()) {
        if let Some(st) = server.try_wait().unwrap() {
            let out = text(&server.wait_with_output().unwrap());
            panic!("{prog} {args:?}: the server exited ({st}) before it listened:\n{out}");
        }
        if Instant::now() > end {
            panic!(
                "{prog} {args:?}: the server did not listen in {limit:?}:\n{}",
                kill(server)
            );
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let mut ca = a.clone();
    ca.push("127.0.0.1".into());
    let client = command(prog, &ca).spawn().unwrap();
    let c = finish(client, end);
    // A client that failed leaves a server waiting for it: a short grace.
    let s_end = if c.as_ref().is_ok_and(|o| o.status.success()) {
        end
    } else {
        end.min(Instant::now() + Duration::from_secs(2))
    };
    let s = finish(server, s_end);
    let show = |r: &Result<Output, String>| match r {
        Ok(o) => format!("exited {}\n{}", o.status, text(o)),
        Err(t) => format!("killed after {limit:?}\n{t}"),
    };
    let ok = |r: &Result<Output, String>| r.as_ref().is_ok_and(|o| o.status.success());
    if !(ok(&s) && ok(&c)) {
        return Err(format!(
            "{prog} {args:?}:\n--- server {}\n--- client {}",
            show(&s),
            show(&c)
        ));
    }
    Ok(text(&c.unwrap()))
}

/// The numeric rows of a results table (after its `#bytes` header).
fn rows(out: &str) -> Vec<Vec<f64>> {
    out.lines()
        .skip_while(|l| !l.trim_start().starts_with("#bytes"))
        .skip(1)
        .map(|l| {
            l.split_whitespace()
                .map(|w| w.parse::<f64>())
                .collect::<Result<Vec<f64>, _>>()
        })
        .take_while(|r| r.as_ref().is_ok_and(|v| v.len() >= 4))
        .map(Result::unwrap)
        .collect()
}

#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Bw,
    Lat,
}

/// The figure a row must show above zero: the message rate
/// (`MsgRate[Mpps]`: a few small messages may well average 0.00 MB/s),
/// or the first latency (`t_min`, or `t_avg` in a `-D` run).
fn figure(kind: Kind, row: &[f64]) -> f64 {
    match kind {
        Kind::Bw => row[4],
        Kind::Lat => row[2],
    }
}

/// Runs one tool with `args`; the client's table must have `sizes` rows
/// (each with a figure above zero), the first of `first_size` bytes.
/// Returns the rows.
fn check(
    prog: &str,
    args: &[&str],
    sizes: usize,
    first_size: f64,
    limit: Duration,
) -> Vec<Vec<f64>> {
    let kind = if prog.ends_with("_bw") {
        Kind::Bw
    } else {
        Kind::Lat
    };
    let out = pair(prog, args, limit);
    let rows = rows(&out);
    assert_eq!(rows.len(), sizes, "{prog} {args:?}: result rows in\n{out}");
    assert_eq!(
        rows[0][0], first_size,
        "{prog} {args:?}: message size in\n{out}"
    );
    for r in &rows {
        assert!(
            r.len() >= 5 || kind == Kind::Lat,
            "{prog} {args:?}: a short row: {r:?} in\n{out}"
        );
        assert!(
            figure(kind, r) > 0.0 && r[1] > 0.0,
            "{prog} {args:?}: a row without a figure: {r:?} in\n{out}"
        );
    }
    // The largest messages have a bandwidth (BW average[MB/sec]).
    if let (Kind::Bw, Some(last)) = (kind, rows.last()) {
        assert!(last[3] > 0.0, "{prog} {args:?}: no bandwidth in\n{out}");
    }
    // Both sides share the device's GID 0, as on a NIC (docs/host.md):
    // one address in the address lines (one pair of lines per QP), the
    // QPs told apart by number.
    let gids: std::collections::BTreeSet<&str> = out
        .lines()
        .filter_map(|l| l.split("GID: ").nth(1))
        .map(str::trim)
        .collect();
    assert_eq!(
        gids.into_iter().collect::<Vec<_>>(),
        ["00:00:00:00:00:00:00:00:00:00:255:255:127:00:00:01"],
        "{prog} {args:?}: GIDs in\n{out}"
    );
    rows
}

const LIMIT: Duration = Duration::from_secs(60);

/// The default message size of each tool (perftest's).
fn default_size(prog: &str) -> f64 {
    match prog {
        _ if prog.starts_with("ib_atomic") => 8.0,
        _ if prog.ends_with("_bw") => 65536.0,
        _ => 2.0,
    }
}

/// One run of `prog` with `extra`, skipped when it is not installed.
fn run(prog: &str, extra: &[&str]) -> Option<Vec<Vec<f64>>> {
    if !have(prog) {
        return None;
    }
    Some(check(prog, extra, 1, default_size(prog), LIMIT))
}

/// perftest `-a`: every size from 2 bytes to 8 MiB, 23 rows.
fn all_sizes(prog: &str, iters: &str) {
    if !have(prog) {
        return;
    }
    let rows = check(
        prog,
        &["-a", "-n", iters],
        23,
        2.0,
        Duration::from_secs(120),
    );
    assert_eq!(rows[22][0], 8388608.0, "{rows:?}");
}

macro_rules! tools {
    ($($name:ident: $prog:literal;)*) => {
        mod plain {
            $(#[test] fn $name() { super::run($prog, &["-n", "200"]); })*
        }
        mod duration {
            // -D 1: one second of traffic after perftest's warm-up.
            $(#[test] fn $name() { super::run($prog, &["-D", "1"]); })*
        }
    };
}

tools! {
    write_bw: "ib_write_bw";
    write_lat: "ib_write_lat";
    read_bw: "ib_read_bw";
    read_lat: "ib_read_lat";
    send_bw: "ib_send_bw";
    send_lat: "ib_send_lat";
    atomic_bw: "ib_atomic_bw";
    atomic_lat: "ib_atomic_lat";
}

macro_rules! bw_tools {
    ($($name:ident: $prog:literal;)*) => {
        mod four_qps {
            // -q 4: the table counts every QP's iterations.
            $(#[test] fn $name() {
                if let Some(rows) = super::run($prog, &["-n", "200", "-q", "4"]) {
                    assert_eq!(rows[0][1], 800.0, "{rows:?}");
                }
            })*
        }
        mod bidirectional {
            $(#[test] fn $name() { super::run($prog, &["-n", "200", "-b"]); })*
        }
    };
}

bw_tools! {
    write_bw: "ib_write_bw";
    read_bw: "ib_read_bw";
    send_bw: "ib_send_bw";
    atomic_bw: "ib_atomic_bw";
}

mod all_sizes {
    // Atomics have one size (perftest refuses -a for them).
    #[test]
    fn write_bw() {
        super::all_sizes("ib_write_bw", "10");
    }
    #[test]
    fn read_bw() {
        super::all_sizes("ib_read_bw", "10");
    }
    #[test]
    fn send_bw() {
        super::all_sizes("ib_send_bw", "10");
    }
    #[test]
    fn write_lat() {
        super::all_sizes("ib_write_lat", "5");
    }
    #[test]
    fn read_lat() {
        super::all_sizes("ib_read_lat", "5");
    }
    #[test]
    fn send_lat() {
        super::all_sizes("ib_send_lat", "5");
    }
}

mod events {
    // -e: completions through a completion channel (perftest refuses it
    // for RDMA WRITE). ib_send_lat takes both CQs' events from one
    // channel and relies on the send completion coming before the
    // peer's answer, as an HCA's ACK does.
    #[test]
    fn send_lat() {
        super::run("ib_send_lat", &["-n", "500", "-e"]);
    }
    #[test]
    fn send_bw() {
        super::run("ib_send_bw", &["-n", "200", "-e"]);
    }
    #[test]
    fn read_bw() {
        super::run("ib_read_bw", &["-n", "200", "-e"]);
    }
    #[test]
    fn read_lat() {
        super::run("ib_read_lat", &["-n", "200", "-e"]);
    }
    #[test]
    fn atomic_bw() {
        super::run("ib_atomic_bw", &["-n", "200", "-e"]);
    }
    #[test]
    fn atomic_lat() {
        super::run("ib_atomic_lat", &["-n", "200", "-e"]);
    }
}

#[test]
fn write_bw_64k_messages() {
    if let Some(rows) = run("ib_write_bw", &["-n", "200", "-s", "65536"]) {
        assert_eq!(rows[0][0], 65536.0);
    }
}

#[test]
fn write_bw_small_messages() {
    if !have("ib_write_bw") {
        return;
    }
    check("ib_write_bw", &["-n", "200", "-s", "2"], 1, 2.0, LIMIT);
}
