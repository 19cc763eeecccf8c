//! The walkthrough of docs/debugging.md ("Finding a bug: a sender that
//! ignores its completions"), on `tests/c/msgsend.c`: an rdma_cm
//! program whose client counts its send completions without looking at
//! their status, whose server keeps only 4 receives posted, and whose
//! connection asks for no RNR retries. Run as the walkthrough runs it
//! (`ROCE_STATS`, `ROCE_TRACE`, `ROCE_FAULTS`: what `roce exec
//! --stats/--trace/--faults` set), with an RNR window on the server so
//! that the bug shows on every run whatever the timing.
//!
//! Needs a C compiler and `librdmacm-dev` (`.ci/run` installs it and sets
//! `ROCE_REQUIRE_C_HEADERS`; elsewhere a missing header is a skip).

mod common;

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::{Duration, Instant};

use roce_testkit::{roce_bound, text, Group};
use serde_json::Value;

const LIMIT: Duration = Duration::from_secs(60);
const N: u64 = 200;

/// `tests/c/msgsend.c`, built once.
fn program() -> Option<PathBuf> {
    common::c_program("msgsend", "rdma/rdma_cma.h")
}

/// A loopback address block of this test's own: 127.B.N.x, N from 200
/// (the other tests' blocks take small N).
fn block() -> String {
    static N: AtomicU8 = AtomicU8::new(200);
    let n = N.fetch_add(1, Ordering::Relaxed);
    format!("127.{}.{n}", 60 + std::process::id() % 40)
}

fn tmp(name: &str) -> PathBuf {
    let d = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("exec-walkthrough");
    std::fs::create_dir_all(&d).unwrap();
    let p = d.join(name);
    let _ = std::fs::remove_file(&p);
    p
}

/// What one end of a run leaves: its output, its `ROCE_STATS_JSON`
/// summary, its trace.
struct End {
    out: Output,
    stats: Value,
    trace: Vec<Value>,
    trace_text: String,
}

impl End {
    fn stdout(&self) -> String {
        text(&self.out).0
    }

    fn stderr(&self) -> String {
        text(&self.out).1
    }

    /// The one QP's counter `key`.
    fn qp(&self, key: &str) -> u64 {
        let qps = &self.stats["contexts"][0]["qps"];
        assert_eq!(qps.as_array().map(Vec::len), Some(1), "{}", self.stats);
        qps[0][key]
            .as_u64()
            .unwrap_or_else(|| panic!("no {key}: {}", self.stats))
    }

    /// The completions the program polled, by status, over its CQs.
    fn completions(&self) -> Vec<(String, u64)> {
        let mut v: Vec<(String, u64)> = Vec::new();
        for cq in self.stats["contexts"][0]["cqs"].as_array().unwrap() {
            for (k, n) in cq["completions"].as_object().unwrap() {
                v.push((k.clone(), n.as_u64().unwrap()));
            }
        }
        v.sort();
        v
    }
}

/// Runs a server (`sargs`, `sfaults`) and a client (`cargs`) of
/// `msgsend` with N messages, each in a process group of its own,
/// each with its summary and trace.
fn run(tag: &str, sargs: &[&str], sfaults: &str, cargs: &[&str]) -> Option<(End, End)> {
    let exe = program()?;
    let b = block();
    let (s, c) = (format!("{b}.1"), format!("{b}.2"));
    let port = common::free_port().to_string();
    let n = N.to_string();
    let files = |who: &str| {
        (
            tmp(&format!("{tag}-{who}.json")),
            tmp(&format!("{tag}-{who}.jsonl")),
        )
    };
    let (server_files, client_files) = (files("server"), files("client"));
    let cmd = |who: &str, addr: &str, args: &[&str], faults: &str| {
        let (stats, trace) = if who == "server" {
            &server_files
        } else {
            &client_files
        };
        let mut cmd = Command::new(&exe);
        cmd.args([who, &s, &port, &n])
            .args(args)
            .env("LD_LIBRARY_PATH", common::dropin("exec-walkthrough-dropin"))
            .env_remove("ROCE_PCAP")
            .env_remove("ROCE_FAULTS")
            .env("ROCE_ADDR", addr)
            .env("ROCE_DEVICES", "lo")
            .env("ROCE_STATS", stats)
            .env("ROCE_STATS_JSON", "1")
            .env("ROCE_TRACE", trace);
        if !faults.is_empty() {
            cmd.env("ROCE_FAULTS", faults);
        }
        cmd
    };
    let end = Instant::now() + LIMIT;
    let mut server = Group::spawn(cmd("server", &s, sargs, sfaults));
    let addr: Ipv4Addr = s.parse().unwrap();
    while !roce_bound(addr) {
        assert!(!server.exited(), "the server exited before it listened");
        assert!(Instant::now() < end, "the server never opened {addr}");
        std::thread::sleep(Duration::from_millis(10));
    }
    // From its open to rdma_listen the server makes no round trip.
    std::thread::sleep(Duration::from_millis(300));
    let (co, ct) = Group::spawn(cmd("client", &c, cargs, "")).wait(end);
    let (so, st) = server.wait(end);
    assert!(
        !ct && !st,
        "timed out\nserver:\n{}\nclient:\n{}",
        roce_testkit::text_of(&so),
        roce_testkit::text_of(&co)
    );
    let read = |(stats, trace): &(PathBuf, PathBuf), out: Output| {
        let s = std::fs::read_to_string(stats).unwrap_or_else(|e| {
            panic!("{}: {e}\n{}", stats.display(), roce_testkit::text_of(&out))
        });
        let trace_text = std::fs::read_to_string(trace).unwrap();
        End {
            stats: serde_json::from_str(&s).unwrap_or_else(|e| panic!("{e}: {s}")),
            trace: lines(trace, &trace_text),
            trace_text,
            out,
        }
    };
    Some((read(&server_files, so), read(&client_files, co)))
}

/// Every line of a trace, each one JSON.
fn lines(path: &Path, text: &str) -> Vec<Value> {
    assert!(text.ends_with('\n'), "{}: a cut line", path.display());
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect()
}

/// "server: received K messages": K.
fn received(server: &End) -> u64 {
    let out = server.stdout();
    out.lines()
        .find_map(|l| l.strip_prefix("server: received "))
        .and_then(|r| r.strip_suffix(" messages"))
        .unwrap_or_else(|| panic!("no count in\n{out}\n{}", server.stderr()))
        .parse()
        .unwrap()
}

/// The statuses of the completions in a trace's `ibv_poll_cq` lines, in
/// order, with the index of their line.
fn polled(trace: &[Value]) -> Vec<(usize, String)> {
    trace
        .iter()
        .enumerate()
        .filter(|(_, l)| l["call"] == "ibv_poll_cq")
        .flat_map(|(i, l)| {
            l["wc"]
                .as_array()
                .into_iter()
                .flatten()
                .map(move |w| (i, w["status"].as_str().unwrap_or("?").to_string()))
        })
        .collect()
}

/// The server refuses every receive (RNR NAK) for its first 5 s: the
/// client's first SEND is refused, its QP (no RNR retries) goes to the
/// error state, every later SEND is flushed; the client counts its 200
/// completions as sent and exits 0, the server received fewer. The
/// summaries show the RNR NAKs each side sent and received and the
/// client's error completions; its trace holds the ibv_poll_cq line
/// with RNR_RETRY_EXC_ERR, the flushed ones after it, and the SENDs it
/// kept posting into the dead QP.
#[test]
fn a_sender_that_ignores_its_completions() {
    let Some((server, client)) = run("bug", &[], "rnr at=0 for=5s", &[]) else {
        return;
    };
    let (sout, cout) = (server.stdout(), client.stdout());
    assert!(client.out.status.success(), "{cout}\n{}", client.stderr());
    assert!(cout.contains("client: sent 200 messages"), "{cout}");
    let got = received(&server);
    assert!(got < N, "{sout}");

    assert!(server.qp("rnr_naks_sent") > 0, "{}", server.stats);
    assert!(client.qp("rnr_naks_received") > 0, "{}", client.stats);
    let by_status = client.completions();
    let count = |s: &str| by_status.iter().find(|(k, _)| k == s).map_or(0, |x| x.1);
    assert_eq!(count("RNR_RETRY_EXC_ERR"), 1, "{by_status:?}");
    assert!(count("WR_FLUSH_ERR") > 0, "{by_status:?}");
    assert_eq!(
        by_status.iter().map(|x| x.1).sum::<u64>(),
        N,
        "{by_status:?}"
    );
    assert!(count("SUCCESS") <= got, "{by_status:?} {sout}");

    let wcs = polled(&client.trace);
    assert_eq!(wcs.len() as u64, N, "{wcs:?}");
    let at = wcs
        .iter()
        .position(|(_, s)| s == "RNR_RETRY_EXC_ERR")
        .unwrap_or_else(|| panic!("{wcs:?}"));
    assert!(
        wcs[at + 1..].iter().all(|(_, s)| s == "WR_FLUSH_ERR"),
        "{wcs:?}"
    );
    // It went on posting SENDs into the QP in the error state.
    let line = wcs[at].0;
    assert!(
        client.trace[line..]
            .iter()
            .any(|l| l["call"] == "ibv_post_send" && l["ret"] == 0),
        "no post after the error"
    );
    // The CM's own ibv_modify_qp inside rdma_create_ep adds nothing to
    // its line (one "attr", the program's).
    let ep = client
        .trace_text
        .lines()
        .find(|l| l.contains("\"call\":\"rdma_create_ep\""))
        .unwrap();
    assert_eq!(ep.matches("\"attr\":").count(), 1, "{ep}");
}

/// The same run with the client checking `wc.status` (`--check`): it
/// says which message failed and how, that its QP is in the error
/// state, and exits 1 instead of claiming the messages sent.
#[test]
fn checking_the_status_reports_the_failure() {
    let Some((server, client)) = run("check", &[], "rnr at=0 for=5s", &["--check"]) else {
        return;
    };
    let (cout, cerr) = (client.stdout(), client.stderr());
    assert_eq!(client.out.status.code(), Some(1), "{cout}\n{cerr}");
    assert!(!cout.contains("sent"), "{cout}");
    assert!(
        cerr.contains("of 200 failed: RNR retry counter exceeded (status 13)"),
        "{cerr}"
    );
    assert!(cerr.contains("is in state ERR"), "{cerr}");
    assert!(received(&server) < N);
    let q = client
        .trace
        .iter()
        .find(|l| l["call"] == "ibv_query_qp")
        .unwrap_or_else(|| panic!("no ibv_query_qp"));
    assert_eq!(q["ret"], 0, "{q}");
}

/// Fixed (RNR retries 7 asked for on both sides, receives posted before
/// `rdma_accept`, the status checked), under a 1.5 s RNR window: the
/// client takes RNR NAKs, retries through the window, and every message
/// arrives, every completion SUCCESS.
#[test]
fn the_fixed_program_delivers_through_an_rnr_window() {
    let Some((server, client)) = run("fixed", &["--fixed"], "rnr at=0 for=1500ms", &["--fixed"])
    else {
        return;
    };
    let (cout, cerr) = (client.stdout(), client.stderr());
    assert!(client.out.status.success(), "{cout}\n{cerr}");
    assert!(cout.contains("client: sent 200 messages"), "{cout}");
    assert_eq!(received(&server), N, "{}", server.stdout());
    assert!(client.qp("rnr_naks_received") > 0, "{}", client.stats);
    assert_eq!(client.completions(), vec![("SUCCESS".to_string(), N)]);
    assert_eq!(server.completions(), vec![("SUCCESS".to_string(), N)]);
}
