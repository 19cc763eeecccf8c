//! `roce perf` as an rdma-core/perftest user drives it: perftest's
//! harmless flags are accepted, the ones naming something this tool does
//! not do are refused with an error that says what to do.

mod common;

use std::process::Output;
use std::sync::atomic::{AtomicU16, Ordering};
use std::time::Duration;

use common::{roce, Guard};

/// A TCP control port and a RoCE UDP port per test, distinct across the
/// tests of this binary and across processes.
fn ports() -> (String, String) {
    static NEXT: AtomicU16 = AtomicU16::new(0);
    let n = NEXT.fetch_add(1, Ordering::SeqCst);
    let base = 36_000 + (std::process::id() % 200) as u16 * 40;
    ((base + 2 * n).to_string(), (base + 2 * n + 1).to_string())
}

/// Runs `roce ARGS` with a bounded wait.
fn run(args: &[&str], limit: Duration) -> Output {
    let child = roce()
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    Guard(Some(child)).wait(limit)
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// `-F`, `-c RC` and `-i 1` (perftest habits) run the test; `-c UD` and
/// `-i 2` say why not, in one line, exit 1, with no clap tip.
#[test]
fn perftest_flags_are_accepted_or_explained() {
    let (port, _) = ports();
    let o = run(
        &[
            "perf",
            "write-bw",
            "--loopback",
            "--backend",
            "fabric",
            "-F",
            "-c",
            "RC",
            "-i",
            "1",
            "-s",
            "4096",
            "-n",
            "20",
            "-p",
            &port,
        ],
        Duration::from_secs(30),
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert!(text(&o.stdout).contains("RDMA_Write BW Test"));
    for (flags, want) in [(["-c", "UD"], "RC only"), (["-i", "2"], "one port")] {
        let o = run(
            &[
                &["perf", "write-bw", "--loopback", "-p", &port][..],
                &flags[..],
            ]
            .concat(),
            Duration::from_secs(10),
        );
        let err = text(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{flags:?}: {err}");
        assert!(
            err.contains(want) && !err.contains("tip"),
            "{flags:?}: {err}"
        );
        assert_eq!(err.trim().lines().count(), 1, "{err}");
    }
}

/// The help texts say what the tools are: not "inspect RoCE v2 captures"
/// for everything; `--perftest` names all eight tools and both version
/// numbers; perf's device flag is perftest's and devinfo's `--ib-dev`.
#[test]
fn help_texts_are_current() {
    let help = |args: &[&str]| text(&run(args, Duration::from_secs(10)).stdout);
    for h in [help(&["--help"]), help(&["pingpong", "--help"])] {
        assert!(!h.contains("inspect RoCE v2 captures"), "{h}");
    }
    assert!(help(&["--help"]).contains("perftest-style"));
    let perf = help(&["perf", "--help"]);
    let para = perf
        .split("\n\n")
        .find(|p| p.contains("--perftest"))
        .unwrap_or_default();
    for t in ["eight", "atomic", "_lat", "6.06", "4.5"] {
        assert!(para.contains(t), "{t}: {para}");
    }
    assert!(perf.contains("-d, --ib-dev <IFACE>"), "{perf}");
    assert!(help(&["devinfo", "--help"]).contains("--ib-dev"));
}
