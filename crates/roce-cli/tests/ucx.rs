//! UCX (Debian's ucx-utils, unmodified, default settings) under `roce
//! exec`: `ucx_info -d` lists `rc_verbs` and `ud_verbs` on `roce_lo`
//! (the device files `roce exec` provides, docs/dropin.md "UCX"), and
//! `ucx_perftest` server and client run `tag_lat`, `tag_bw`,
//! `ucp_put_bw`, `ucp_get` and `ucp_am_bw` with `UCX_TLS=rc_verbs,ud_verbs`
//! and with `UCX_TLS=ud_verbs` (whose receives UCX drops unless `wc.sl`
//! says IPv4), on loopback (server and client both on 127.0.0.1, the
//! default, as `ROCE_LOG=1` shows) and between two network namespaces
//! (root only; skipped otherwise).
//!
//! Every process runs in a process group of its own, bounded, and is
//! ended through its group. `.ci/run` installs ucx-utils and sets
//! `ROCE_REQUIRE_UCX`, so in CI a missing program fails the test;
//! elsewhere it is skipped.

mod common;

use roce_testkit::netns::VethPair;
use roce_testkit::Group;
use std::process::{Command, Output};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use common::{lib_dir, roce};
use roce_testkit::free_port;

/// Longest a server and client pair may take.
const LIMIT: Duration = Duration::from_secs(60);
/// Iterations of each test: short runs.
const ITERS: &str = "500";
/// The tests, each run with each transport set.
const TESTS: [&str; 5] = ["tag_lat", "tag_bw", "ucp_put_bw", "ucp_get", "ucp_am_bw"];

/// Whether UCX's tools are installed; a missing one fails the test in CI.
fn have_ucx() -> bool {
    let found = ["ucx_info", "ucx_perftest"].iter().all(|prog| {
        std::env::var_os("PATH")
            .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(prog).is_file()))
    });
    if !found {
        assert!(
            std::env::var_os("ROCE_REQUIRE_UCX").is_none(),
            "ucx_info or ucx_perftest is not installed (apt-get install ucx-utils)"
        );
        eprintln!("skipped: ucx_info or ucx_perftest is not installed (apt-get install ucx-utils)");
    }
    found
}

/// `[prefix...] roce exec --devices DEV -- PROG ARGS`, with UCX's
/// settings cleared but `UCX_TLS`, saying where it opened (`ROCE_LOG`).
fn exec(prefix: &[&str], dev: &str, tls: Option<&str>, prog: &str, args: &[&str]) -> Command {
    let roce_bin = roce().get_program().to_owned();
    let mut c = match prefix.split_first() {
        Some((first, rest)) => {
            let mut c = Command::new(first);
            c.args(rest).arg(roce_bin);
            c
        }
        None => Command::new(roce_bin),
    };
    c.args(["exec", "--devices", dev, "--", prog])
        .args(args)
        .env("ROCE_LIB_DIR", lib_dir())
        .env("ROCE_LOG", "1")
        .env_remove("ROCE_ADDR")
        .env_remove("ROCE_ACK_DELAY");
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("UCX_") {
            c.env_remove(k);
        }
    }
    if let Some(t) = tls {
        c.env("UCX_TLS", t);
    }
    c
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Whether a socket listens on TCP `port` (in this network namespace or,
/// with `ns`, in that one), read from /proc: a probe connection would be
/// taken for the client by the server.
fn listening(ns: Option<&str>, port: u16) -> bool {
    let want = format!(":{port:04X}");
    let tables = match ns {
        None => ["/proc/net/tcp", "/proc/net/tcp6"]
            .iter()
            .map(|f| std::fs::read_to_string(f).unwrap_or_default())
            .collect::<String>(),
        Some(ns) => Command::new("ip")
            .args([
                "netns",
                "exec",
                ns,
                "cat",
                "/proc/net/tcp",
                "/proc/net/tcp6",
            ])
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default(),
    };
    tables.lines().any(|l| {
        let cols: Vec<&str> = l.split_whitespace().collect();
        cols.len() > 3 && cols[1].ends_with(&want) && cols[3] == "0A"
    })
}

/// The figures of `ucx_perftest`'s `Final:` line: iterations, latency
/// (50 %ile, average, overall, µs), bandwidth (average, overall, MB/s),
/// message rate (average, overall).
fn final_line(out: &str) -> Option<Vec<f64>> {
    let l = out.lines().find(|l| l.trim_start().starts_with("Final:"))?;
    let v: Vec<f64> = l
        .split_whitespace()
        .skip(1)
        .map(|w| w.parse().ok())
        .collect::<Option<_>>()?;
    (v.len() == 8).then_some(v)
}

/// Whether every `opened on` line of `out` (`ROCE_LOG`) is `want`
/// (`DEVICE opened on ADDRESS`), and there is one.
fn opened_on(out: &str, want: &str) -> bool {
    let want = format!("libibverbs (roce): {want}");
    let mut opened = out.lines().filter(|l| l.contains(" opened on ")).peekable();
    opened.peek().is_some() && opened.all(|l| l == want)
}

/// Server `server`, then client `client` once the server listens on
/// `port`; both must exit 0, say they opened where `opened` says
/// (server's, client's `DEVICE opened on ADDRESS`), and the client print
/// its figures for ITERS iterations. One pair at a time (two cores).
/// Returns the client's figures.
fn pair(
    server: Command,
    client: Command,
    ns: Option<&str>,
    port: u16,
    opened: [&str; 2],
    what: &str,
) -> Vec<f64> {
    static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let end = Instant::now() + LIMIT;
    let mut s = Group::spawn(server);
    while !listening(ns, port) {
        if s.exited() {
            let (out, _) = s.wait(end);
            panic!(
                "{what}: the server exited before it listened:\n{}",
                text(&out)
            );
        }
        assert!(
            Instant::now() < end,
            "{what}: the server did not listen on {port}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let (c, c_late) = Group::spawn(client).wait(end);
    let (s, s_late) = s.wait(if c.status.success() {
        end
    } else {
        Instant::now() + Duration::from_secs(2)
    });
    let (ct, st) = (text(&c), text(&s));
    assert!(
        c.status.success() && s.status.success() && !c_late && !s_late,
        "{what}: server {} (timed out: {s_late}), client {} (timed out: {c_late})\n\
         --- server:\n{st}\n--- client:\n{ct}",
        s.status,
        c.status,
    );
    for (who, t, want) in [("server", &st, opened[0]), ("client", &ct, opened[1])] {
        assert!(
            opened_on(t, want),
            "{what}: the {who} did not open on {want:?} alone\n{t}"
        );
    }
    let f = final_line(&ct).unwrap_or_else(|| panic!("{what}: no Final: line\n{ct}"));
    assert_eq!(f[0], ITERS.parse::<f64>().unwrap(), "{what}:\n{ct}");
    // Latency and message rate; the bandwidth column is printed with two
    // decimals and reads 0.00 MB/s for 8-byte messages on a loaded host.
    assert!(f[2] > 0.0 && f[6] > 0.0, "{what}: figures {f:?}\n{ct}");
    assert!(!ct.contains("unhandled timeout"), "{what}:\n{ct}");
    eprintln!(
        "{what}: {}",
        ct.lines().find(|l| l.contains("Final:")).unwrap_or("")
    );
    f
}

/// Every test of TESTS with `tls`, on loopback: server and client on
/// 127.0.0.1, the address neither is given.
fn loopback(tls: &str) {
    if !have_ucx() {
        return;
    }
    for t in TESTS {
        let port = free_port();
        let p = port.to_string();
        let server = exec(
            &[],
            "lo",
            Some(tls),
            "ucx_perftest",
            &["-p", &p, "-t", t, "-n", ITERS],
        );
        let client = exec(
            &[],
            "lo",
            Some(tls),
            "ucx_perftest",
            &["127.0.0.1", "-p", &p, "-t", t, "-n", ITERS],
        );
        let on_lo = "roce_lo opened on 127.0.0.1";
        pair(
            server,
            client,
            None,
            port,
            [on_lo, on_lo],
            &format!("{tls} {t}"),
        );
    }
}

#[test]
fn ucx_info_lists_rc_verbs_and_ud_verbs_on_roce_lo() {
    if !have_ucx() {
        return;
    }
    let c = exec(&[], "lo", None, "ucx_info", &["-d"]);
    let (o, late) = Group::spawn(c).wait(Instant::now() + LIMIT);
    let t = text(&o);
    assert!(o.status.success() && !late, "{t}");
    // Each transport section: "# Transport: NAME" then "# Device: DEV".
    let lines: Vec<&str> = t.lines().map(str::trim).collect();
    let on_roce_lo = |tl: &str| {
        lines.windows(2).any(|w| {
            w[0].ends_with(&format!("Transport: {tl}")) && w[1].ends_with("Device: roce_lo:1")
        })
    };
    assert!(on_roce_lo("rc_verbs"), "no rc_verbs on roce_lo:1\n{t}");
    assert!(on_roce_lo("ud_verbs"), "no ud_verbs on roce_lo:1\n{t}");
}

/// Without the device files (`--no-device-files`) UCX sees no device:
/// what the files are for.
#[test]
fn ucx_info_without_device_files_sees_no_roce_device() {
    if !have_ucx() || std::path::Path::new("/dev/infiniband/uverbs_roce_lo").exists() {
        return;
    }
    let mut c = roce();
    c.args([
        "exec",
        "--devices",
        "lo",
        "--no-device-files",
        "--",
        "ucx_info",
        "-d",
    ])
    .env("ROCE_LIB_DIR", lib_dir());
    let (o, late) = Group::spawn(c).wait(Instant::now() + LIMIT);
    let t = text(&o);
    assert!(!late, "{t}");
    assert!(!t.contains("roce_lo:1"), "{t}");
}

#[test]
fn ucx_perftest_rc_and_ud_verbs_on_loopback() {
    loopback("rc_verbs,ud_verbs");
}

#[test]
fn ucx_perftest_ud_verbs_on_loopback() {
    loopback("ud_verbs");
}

/// Every test of TESTS with `tls`, server in one namespace, client in
/// the other.
fn across(tls: &str) {
    if !have_ucx() {
        return;
    }
    let lab = match VethPair::new("ux", 97, 1) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("skipped: {e}");
            return;
        }
    };
    for t in TESTS {
        let port = free_port();
        let p = port.to_string();
        let server = exec(
            &["ip", "netns", "exec", &lab.a],
            &lab.va,
            Some(tls),
            "ucx_perftest",
            &["-p", &p, "-t", t, "-n", ITERS],
        );
        let client = exec(
            &["ip", "netns", "exec", &lab.b],
            &lab.vb,
            Some(tls),
            "ucx_perftest",
            &[&lab.ip_a, "-p", &p, "-t", t, "-n", ITERS],
        );
        pair(
            server,
            client,
            Some(&lab.a),
            port,
            [
                &format!("roce_{} opened on {}", lab.va, lab.ip_a),
                &format!("roce_{} opened on {}", lab.vb, lab.ip_b),
            ],
            &format!("netns {tls} {t}"),
        );
    }
}

#[test]
fn ucx_perftest_rc_and_ud_verbs_between_namespaces() {
    across("rc_verbs,ud_verbs");
}

#[test]
fn ucx_perftest_ud_verbs_between_namespaces() {
    across("ud_verbs");
}
