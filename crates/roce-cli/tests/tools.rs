//! qperf, fio's rdma engine and rsockets preloading (Debian's `qperf`,
//! `fio`, `iperf3` and rdma-core's `librspreload.so`, unmodified) under
//! `roce exec`, server in one network namespace and client in another,
//! joined by a veth (root only; skipped otherwise). docs/dropin.md "qperf,
//! fio, rsockets".
//!
//! * qperf `-cm1` (connections through the RDMA CM: qperf's own address
//!   handles carry no GRH, which every RoCE device needs) runs every RC
//!   test of Debian's build five times, in its default event mode, and
//!   the latency tests and `rc_bw` five times with `-cp1` (polling the
//!   CQ); every figure must be there and positive. The same RC tests
//!   once each with server and client on one host (127.0.0.1 of a
//!   namespace of the test's own).
//! * fio's rdma engine with `verb=write`, `verb=read` and `verb=send`,
//!   16 MiB in 64 KiB blocks: both ends exit 0 and the client moved the
//!   whole size (the receiving server too for `send`, and it checked
//!   every block it received: `--verify=crc32c` on both ends; fio's
//!   engine allows no check of RDMA WRITE or READ data). `--thread` keeps
//!   fio's job inside its process group (a forked job makes a session of
//!   its own, which killing the group would miss). For `send` the
//!   receiver's iodepth covers every message (256 of 64 KiB), so that
//!   all its receives are posted before the first SEND: fio connects
//!   with `rnr_retry_count` 0 and has no flow control of its own (its
//!   comment in `fio_rdmaio_connect` asks for a receiver deeper than the
//!   sender), so a receiver that falls behind its sender by its
//!   iodepth ends the job at the first RNR NAK, and fio then waits for
//!   ever (docs/dropin.md "qperf, fio, rsockets").
//! * `iperf3` with `LD_PRELOAD=librspreload.so` on both ends, over this
//!   stack's librdmacm: both exit 0, both count the same bytes received,
//!   and the server's QP counters (`--log`) show them crossing RDMA, not
//!   a TCP socket the preload fell back to.
//!
//! Every process runs in a process group of its own, bounded, and is
//! ended through its group. `.ci/run` installs the programs and sets
//! `ROCE_REQUIRE_RDMA_TOOLS`, so in CI a missing program fails the test;
//! elsewhere it is skipped.

mod common;

use roce_testkit::netns::VethPair;
use roce_testkit::Group;
use std::path::Path;
use std::process::{Command, Output};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use common::{lib_dir, roce};

/// Longest one server and client pair may take.
const LIMIT: Duration = Duration::from_secs(90);
/// rdma-core's rsocket preload library (Debian's `librdmacm1`).
const RSPRELOAD: &str = "/usr/lib/x86_64-linux-gnu/rsocket/librspreload.so";
/// Every RC test of Debian's qperf 0.4.11 (its XRC tests are not built:
/// "bad test").
const QPERF_RC: [&str; 12] = [
    "rc_bi_bw",
    "rc_bw",
    "rc_compare_swap_mr",
    "rc_fetch_add_mr",
    "rc_lat",
    "rc_rdma_read_bw",
    "rc_rdma_read_lat",
    "rc_rdma_write_bw",
    "rc_rdma_write_lat",
    "rc_rdma_write_poll_lat",
    "ver_rc_compare_swap",
    "ver_rc_fetch_add",
];
/// qperf's control port (TCP, in the server's namespace).
const QPERF_PORT: u16 = 19765;

/// Whether `prog` is on PATH (or, with a `/`, is that file).
fn have(prog: &str) -> bool {
    if prog.contains('/') {
        return Path::new(prog).is_file();
    }
    std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(prog).is_file()))
}

/// Whether every one of `progs` is installed; a missing one fails the
/// test when `ROCE_REQUIRE_RDMA_TOOLS` is set (CI), else skips it.
fn have_all(progs: &[&str], package: &str) -> bool {
    let missing: Vec<&str> = progs.iter().copied().filter(|p| !have(p)).collect();
    if missing.is_empty() {
        return true;
    }
    assert!(
        std::env::var_os("ROCE_REQUIRE_RDMA_TOOLS").is_none(),
        "{} not installed (apt-get install {package})",
        missing.join(", ")
    );
    eprintln!(
        "skipped: {} not installed (apt-get install {package})",
        missing.join(", ")
    );
    false
}

/// The two namespaces, or `None` (with the reason printed) where they
/// cannot be made: not root, no `ip netns`.
fn lab(tag: &str) -> Option<VethPair> {
    match VethPair::new(tag, 98, 1) {
        Ok(l) => Some(l),
        Err(e) => {
            eprintln!("skipped: {e}");
            None
        }
    }
}

/// One pair at a time: two cores, and each pair measures.
fn one_at_a_time() -> MutexGuard<'static, ()> {
    static ONE: Mutex<()> = Mutex::new(());
    ONE.lock().unwrap_or_else(|p| p.into_inner())
}

/// `ip netns exec NS roce exec --devices DEV [--log] -- PROG ARGS`.
fn exec(ns: &str, dev: &str, log: bool, prog: &str, args: &[&str]) -> Command {
    let mut c = Command::new("ip");
    c.args(["netns", "exec", ns])
        .arg(roce().get_program())
        .args(["exec", "--devices", dev]);
    if log {
        c.arg("--log");
    }
    c.args(["--", prog])
        .args(args)
        .env("ROCE_LIB_DIR", lib_dir())
        .env_remove("ROCE_ADDR")
        .env_remove("ROCE_LOG")
        .env_remove("ROCE_ACK_DELAY")
        .env_remove("LD_PRELOAD");
    c
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Whether a socket of protocol `proto` (`tcp`, `udp`) is bound
/// (listening, for TCP) on `port` in namespace `ns`, read from /proc: a
/// probe connection would be taken for the client.
fn bound(ns: &str, proto: &str, port: u16) -> bool {
    let want = format!(":{port:04X}");
    let t = Command::new("ip")
        .args(["netns", "exec", ns, "cat"])
        .arg(format!("/proc/net/{proto}"))
        .arg(format!("/proc/net/{proto}6"))
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    t.lines().any(|l| {
        let cols: Vec<&str> = l.split_whitespace().collect();
        cols.len() > 3 && cols[1].ends_with(&want) && (proto == "udp" || cols[3] == "0A")
    })
}

/// Starts `server` and waits until `ready` (bounded by `end`); panics
/// with its output if it exits first.
fn start(server: Command, end: Instant, ready: impl Fn() -> bool, what: &str) -> Group {
    let mut s = Group::spawn(server);
    while !ready() {
        if s.exited() {
            let (o, _) = s.wait(end);
            panic!(
                "{what}: the server exited before it was ready:\n{}",
                text(&o)
            );
        }
        assert!(Instant::now() < end, "{what}: the server never got ready");
        std::thread::sleep(Duration::from_millis(20));
    }
    s
}

/// Runs `client` against the started server `s`. Both must exit 0
/// within `end`, but a server that `serves_on` (qperf's) is ended once
/// the client is done; returns their outputs. A client whose REQ comes
/// a moment before the server's listen (`ready` sees the bind or the
/// device, not the listen) is the stack's to ride out: it resends a REQ
/// refused for want of a listener for 0.5 s (docs/dropin.md "qperf, fio,
/// rsockets").
fn run_pair(
    mut s: Group,
    serves_on: bool,
    make: impl Fn() -> Command,
    end: Instant,
    what: &str,
) -> (String, String) {
    let (c, c_late) = Group::spawn(make()).wait(end);
    // A server whose client failed may wait for ever: give it a moment.
    let s_end = if serves_on {
        Instant::now()
    } else if c.status.success() {
        end
    } else {
        Instant::now() + Duration::from_secs(2)
    };
    while !s.exited() && Instant::now() < s_end {
        std::thread::sleep(Duration::from_millis(20));
    }
    let (s, s_late) = s.wait(s_end);
    let s_late = s_late && !serves_on;
    let (ct, st) = (text(&c), text(&s));
    assert!(
        c.status.success() && (serves_on || s.status.success()) && !c_late && !s_late,
        "{what}: server {} (timed out: {s_late}), client {} (timed out: {c_late})\n\
         --- server:\n{st}\n--- client:\n{ct}",
        s.status,
        c.status,
    );
    (st, ct)
}

/// qperf's results: `(test, quantity, value, unit)` from its
/// `TEST:` lines each followed by `    QUANTITY  =  VALUE UNIT` lines.
fn qperf_results(out: &str) -> Vec<(String, String, f64, String)> {
    let mut v = Vec::new();
    let mut test = String::new();
    for l in out.lines() {
        if !l.starts_with(' ') && l.ends_with(':') {
            test = l.trim_end_matches(':').to_string();
        } else if let Some((k, rest)) = l.trim().split_once('=') {
            let mut w = rest.split_whitespace();
            if let (Some(n), Some(u)) = (w.next().and_then(|n| n.parse().ok()), w.next()) {
                v.push((test.clone(), k.trim().to_string(), n, u.to_string()));
            }
        }
    }
    v
}

/// The quantity qperf reports for `test`.
fn qperf_quantity(test: &str) -> &'static str {
    if test.ends_with("_lat") {
        "latency"
    } else if test.ends_with("_bw") {
        "bw"
    } else {
        "msg_rate"
    }
}

/// Where a qperf pair runs: the server's namespace and device, the
/// client's, and the address the client dials.
struct Hosts<'a> {
    server: (&'a str, &'a str),
    client: (&'a str, &'a str),
    addr: &'a str,
}

/// How long a qperf client with `n` tests of `-t 1` may take (each test
/// takes its second, plus its setup, on a loaded debug build).
fn qperf_limit(n: usize) -> Duration {
    Duration::from_secs(30 + 3 * n as u64)
}

/// qperf server, then a client with `opts` running each of `tests`
/// `rounds` times in one invocation (qperf runs a test named twice
/// twice); every run of every test must report its quantity, positive.
fn qperf(h: &Hosts, opts: &[&str], tests: &[&str], rounds: usize) {
    let what = format!("qperf {} (x{rounds})", opts.join(" "));
    let t0 = Instant::now();
    let end = t0 + qperf_limit(tests.len() * rounds);
    let s = start(
        exec(h.server.0, h.server.1, false, "qperf", &[]),
        end,
        || bound(h.server.0, "tcp", QPERF_PORT),
        &what,
    );
    let (_, ct) = run_pair(
        s,
        true,
        || {
            let mut args = vec![h.addr];
            args.extend(opts);
            args.extend(["-t", "1"]);
            for _ in 0..rounds {
                args.extend(tests);
            }
            exec(h.client.0, h.client.1, false, "qperf", &args)
        },
        end,
        &what,
    );
    assert!(
        !ct.contains("rejected") && !ct.contains("failed") && !ct.contains("timed out"),
        "{what}:\n{ct}"
    );
    let r = qperf_results(&ct);
    for t in tests {
        let q = qperf_quantity(t);
        let found: Vec<_> = r
            .iter()
            .filter(|(test, k, _, _)| test == t && k == q)
            .collect();
        assert_eq!(found.len(), rounds, "{what}: {q} of {t}\n{ct}");
        for f in &found {
            assert!(f.2 > 0.0, "{what}: {t} {q} = {}\n{ct}", f.2);
        }
        let figs: Vec<String> = found.iter().map(|f| format!("{} {}", f.2, f.3)).collect();
        eprintln!("{what}: {t} {q}: {}", figs.join(", "));
    }
    eprintln!("{what}: {:.1} s", t0.elapsed().as_secs_f64());
}

/// Runs of each RC test between namespaces (the issue's "each run five
/// times").
const QPERF_ROUNDS: usize = 5;

#[test]
fn qperf_every_rc_test_between_namespaces() {
    if !have_all(&["qperf"], "qperf") {
        return;
    }
    let Some(lab) = lab("qp") else { return };
    let _one = one_at_a_time();
    let h = Hosts {
        server: (&lab.a, &lab.va),
        client: (&lab.b, &lab.vb),
        addr: &lab.ip_a,
    };
    qperf(&h, &["-cm1"], &QPERF_RC, QPERF_ROUNDS);
    qperf(
        &h,
        &["-cm1", "-cp1"],
        &["rc_lat", "rc_rdma_write_lat", "rc_rdma_read_lat", "rc_bw"],
        QPERF_ROUNDS,
    );
}

/// qperf's server and client on one host, 127.0.0.1, `-cm1` and nothing
/// else. The host is a network namespace of the test's own (one end of
/// a fresh pair, its loopback): processes of other tests on the
/// machine's 127.0.0.1 share the address and its host-wide CM ports
/// with whoever opens there, and a REQ refused or a datagram handed on
/// through one of them would make this test measure them.
#[test]
fn qperf_every_rc_test_on_one_host() {
    if !have_all(&["qperf"], "qperf") {
        return;
    }
    let Some(lab) = lab("q1") else { return };
    let _one = one_at_a_time();
    let h = Hosts {
        server: (&lab.a, "lo"),
        client: (&lab.a, "lo"),
        addr: "127.0.0.1",
    };
    qperf(&h, &["-cm1"], &QPERF_RC, 1);
}

/// fio's figures for the group: `(io bytes, bandwidth bytes/s)` of its
/// `READ:` or `WRITE:` line (`bw=23.1MiB/s (24.2MB/s), ..., io=16.0MiB
/// (16.8MB), ...`), from the decimal figures in parentheses.
fn fio_group(out: &str, dir: &str) -> Option<(f64, f64)> {
    let l = out
        .lines()
        .find(|l| l.trim_start().starts_with(&format!("{dir}:")))?;
    let paren = |key: &str| -> Option<f64> {
        let at = l.find(key)?;
        let rest = &l[at..];
        let inner = &rest[rest.find('(')? + 1..rest.find(')')?];
        let unit_at = inner.find(|c: char| c.is_ascii_alphabetic())?;
        let n: f64 = inner[..unit_at].parse().ok()?;
        let mult = match &inner[unit_at..unit_at + 1] {
            "k" => 1e3,
            "M" => 1e6,
            "G" => 1e9,
            _ => 1.0,
        };
        Some(n * mult)
    };
    Some((paren("io=")?, paren("bw=")?))
}

/// fio's rdma engine: a server (`rw=read`, iodepth `server_depth`) in
/// one namespace, a client with `verb` (`rw=write`, iodepth 4) in the
/// other, 16 MiB in 64 KiB blocks.
fn fio(lab: &VethPair, verb: &str, server_depth: u32) {
    const SIZE: f64 = 16.0 * 1024.0 * 1024.0;
    let what = format!("fio verb={verb}");
    let end = Instant::now() + LIMIT;
    let common = [
        "--thread",
        "--ioengine=rdma",
        "--port=9123",
        "--bs=64k",
        "--size=16m",
    ];
    let depth = format!("--iodepth={server_depth}");
    // SEND's data is checked: the client's blocks carry fio's verify
    // header and a CRC32C of the whole block, and the server, a read
    // job with `verify`, checks each block it receives (its magic,
    // length, seed, offset and CRC). fio cannot check RDMA WRITE or
    // READ: docs/dropin.md "qperf, fio, rsockets". fio would write its
    // verify state into the working directory (the crate's) at exit.
    let verify: &[&str] = if verb == "send" {
        &["--verify=crc32c", "--verify_state_save=0"]
    } else {
        &[]
    };
    let mut sargs = common.to_vec();
    sargs.extend(["--name=server", "--rw=read", &depth]);
    sargs.extend(verify);
    let s = start(
        exec(&lab.a, &lab.va, false, "fio", &sargs),
        end,
        || bound(&lab.a, "udp", 4791),
        &what,
    );
    let verb_arg = format!("--verb={verb}");
    let host = format!("--hostname={}", lab.ip_a);
    let (st, ct) = run_pair(
        s,
        false,
        || {
            let mut cargs = common.to_vec();
            cargs.extend([
                "--name=client",
                "--rw=write",
                "--iodepth=4",
                &verb_arg,
                &host,
            ]);
            cargs.extend(verify);
            exec(&lab.b, &lab.vb, false, "fio", &cargs)
        },
        end,
        &what,
    );
    assert!(
        !ct.contains("completion status") && !st.contains("completion status"),
        "{what}:\n{st}\n{ct}"
    );
    let (io, bw) =
        fio_group(&ct, "WRITE").unwrap_or_else(|| panic!("{what}: no WRITE: line\n{ct}"));
    // fio prints io in three digits: 16.0MiB is "(16.8MB)".
    assert!((io - SIZE).abs() < 0.01 * SIZE, "{what}: io {io}\n{ct}");
    assert!(bw > 0.0, "{what}: bw {bw}\n{ct}");
    if verb == "send" {
        let (sio, _) =
            fio_group(&st, "READ").unwrap_or_else(|| panic!("{what}: no READ: line\n{st}"));
        assert!(
            (sio - SIZE).abs() < 0.01 * SIZE,
            "{what}: server io {sio}\n{st}"
        );
        // A block that fails its check prints "verify: bad ..." and
        // ends the job with err=84 (EILSEQ).
        assert!(
            !st.contains("verify:") && st.contains("err= 0"),
            "{what}: the server's check of the data failed\n{st}"
        );
    }
    eprintln!(
        "{what}: {}",
        ct.lines()
            .find(|l| l.trim_start().starts_with("WRITE:"))
            .unwrap_or("")
            .trim()
    );
}

#[test]
fn fio_rdma_write_read_send_between_namespaces() {
    if !have_all(&["fio"], "fio") {
        return;
    }
    let Some(lab) = lab("fi") else { return };
    let _one = one_at_a_time();
    fio(&lab, "write", 4);
    fio(&lab, "read", 4);
    fio(&lab, "send", 256);
}

/// The `rx_bytes` of every QP the library's log (`ROCE_LOG`) reports
/// destroyed, added up.
fn qp_rx_bytes(log: &str) -> u64 {
    log.lines()
        .filter(|l| l.contains("destroyed: QpCounters"))
        .filter_map(|l| {
            let at = l.find("rx_bytes: ")? + "rx_bytes: ".len();
            l[at..]
                .split(|c: char| !c.is_ascii_digit())
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum()
}

/// The bytes the server received, from iperf3's JSON (found by text):
/// the `"bytes"` of `"sum_received"` in its `"end"` object.
fn iperf_received(out: &str) -> Option<u64> {
    let at = out.rfind("\"sum_received\"")?;
    let rest = &out[at..];
    let b = rest.find("\"bytes\"")? + "\"bytes\"".len();
    rest[b..]
        .trim_start_matches([':', ' ', '\t'])
        .split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()
}

#[test]
fn rsockets_preload_iperf3_between_namespaces() {
    if !have_all(&["iperf3", RSPRELOAD], "iperf3 librdmacm1") {
        return;
    }
    let Some(lab) = lab("rs") else { return };
    let _one = one_at_a_time();
    let what = "iperf3 over rsockets";
    let end = Instant::now() + LIMIT;
    let preload = format!("LD_PRELOAD={RSPRELOAD}");
    let s = start(
        exec(
            &lab.a,
            &lab.va,
            true,
            "env",
            &[&preload, "iperf3", "-s", "-1", "-p", "5201", "--json"],
        ),
        end,
        || bound(&lab.a, "udp", 4791),
        what,
    );
    let (st, ct) = run_pair(
        s,
        false,
        || {
            exec(
                &lab.b,
                &lab.vb,
                false,
                "env",
                &[
                    &preload, "iperf3", "-c", &lab.ip_a, "-p", "5201", "-t", "2", "--json",
                ],
            )
        },
        end,
        what,
    );
    // Both ends' view of what the server received (the client's comes
    // from the server at the end of the test).
    let c = iperf_received(&ct).unwrap_or_else(|| panic!("{what}: client JSON\n{ct}"));
    let s = iperf_received(&st).unwrap_or_else(|| panic!("{what}: server JSON\n{st}"));
    assert!(
        c > 0 && c == s,
        "{what}: client says {c}, server {s}\n{st}\n{ct}"
    );
    // And it went through RDMA: the server's QPs received at least that
    // many bytes (rsockets' headers and control messages besides).
    let rx = qp_rx_bytes(&st);
    assert!(
        rx >= s,
        "{what}: the server's QPs received {rx} bytes, iperf3 {s}\n{st}"
    );
    eprintln!(
        "{what}: {s} bytes in 2 s ({:.0} Mbit/s), server QPs {rx} bytes",
        s as f64 * 8.0 / 2e6
    );
}
