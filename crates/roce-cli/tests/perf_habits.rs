//! `roce perf` as an rdma-core/perftest user drives it: perftest's
//! harmless flags are accepted, the ones naming something this tool does
//! not do are refused with an error that says what to do.

mod common;

use std::process::Output;
use std::time::Duration;

use common::{roce, Guard};
use roce_testkit::port_args;

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
    let (port, _) = port_args();
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

/// Starts `roce perf ARGS` as a server on 127.0.0.1 and returns once it
/// listens on the port of its `-p`.
fn server(args: &[&str]) -> Guard {
    let child = roce()
        .args(["perf"])
        .args(args)
        .args(["--bind", "127.0.0.1"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    Guard(Some(child)).listening(common::control_port(args).expect("-p PORT"))
}

/// A plain server recognises a perftest client (here `roce perf
/// --perftest`, as ib_write_bw would be) and runs the test; it used to
/// wait silently for a JSON line that never came.
#[test]
fn a_plain_server_serves_a_perftest_client() {
    for test in ["write-bw", "send-lat"] {
        let (port, rport) = port_args();
        let common = ["-s", "4096", "-n", "50", "-p", &port, "--roce-port", &rport];
        let s = server(&[&[test][..], &common[..]].concat());
        let c = run(
            &[
                &[
                    "perf",
                    test,
                    "127.0.0.1",
                    "--perftest",
                    "--bind",
                    "127.0.0.2",
                ][..],
                &common[..],
            ]
            .concat(),
            Duration::from_secs(30),
        );
        let s = s.wait(Duration::from_secs(30));
        let (cout, sout) = (text(&c.stdout), text(&s.stdout));
        assert_eq!(
            c.status.code(),
            Some(0),
            "{test} client: {cout}{}",
            text(&c.stderr)
        );
        assert_eq!(
            s.status.code(),
            Some(0),
            "{test} server: {sout}{}",
            text(&s.stderr)
        );
        let serr = text(&s.stderr);
        // The server's banner names both kinds of client.
        let tool = format!("ib_{}", test.replace('-', "_"));
        assert!(
            serr.contains(&format!("or perftest's {tool} HOST")),
            "{serr}"
        );
        assert!(
            serr.contains("the client speaks perftest's exchange"),
            "{serr}"
        );
        assert!(
            cout.lines().any(|l| l.trim_start().starts_with("4096 ")),
            "{cout}"
        );
    }
}

/// The other way round (a plain client, a server forced to --perftest,
/// as a real ib_write_bw server would be): both sides fail at once with
/// an error that names --perftest, instead of "short perftest key string".
#[test]
fn a_plain_client_of_a_perftest_server_is_told_to_add_perftest() {
    let (port, rport) = port_args();
    let common = ["-n", "20", "-p", &port, "--roce-port", &rport];
    let s = server(&[&["write-bw", "--perftest"][..], &common[..]].concat());
    let start = std::time::Instant::now();
    let c = run(
        &[
            &["perf", "write-bw", "127.0.0.1", "--bind", "127.0.0.2"][..],
            &common[..],
        ]
        .concat(),
        Duration::from_secs(20),
    );
    let s = s.wait(Duration::from_secs(20));
    assert!(start.elapsed() < Duration::from_secs(5));
    let (cerr, serr) = (text(&c.stderr), text(&s.stderr));
    assert_eq!(c.status.code(), Some(1), "{cerr}");
    assert_eq!(s.status.code(), Some(1), "{serr}");
    assert!(
        cerr.contains("--perftest") && !cerr.contains("key string"),
        "{cerr}"
    );
    assert!(serr.contains("roce perf's own exchange"), "{serr}");

    // A real perftest server reads 16 bytes, answers with its version
    // string and goes on reading (what ib_write_bw does).
    use std::io::{Read, Write};
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port().to_string();
    let fake = std::thread::spawn(move || {
        let (mut s, _) = l.accept().unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut v = [0u8; 16];
        s.read_exact(&mut v).unwrap();
        s.write_all(b"6.06\0\0\0\0\0\0\0\0\0\0\0\0").unwrap();
        let mut rest = Vec::new();
        let _ = s.read_to_end(&mut rest);
    });
    let start = std::time::Instant::now();
    let c = run(
        &["perf", "write-bw", "127.0.0.1", "-p", &port, "-n", "20"],
        Duration::from_secs(20),
    );
    let cerr = text(&c.stderr);
    assert_eq!(c.status.code(), Some(1), "{cerr}");
    assert!(
        cerr.contains("perftest's exchange (version string '6.06')") && cerr.contains("--perftest"),
        "{cerr}"
    );
    assert!(start.elapsed() < Duration::from_secs(5));
    fake.join().unwrap();
}

/// A `--roce-port` that differs between the sides is found on the
/// control connection: both fail at once naming the flag (it used to end
/// in RetryExcErr after 1.9 s with nothing about the port).
#[test]
fn different_roce_ports_are_named() {
    let (port, rport) = port_args();
    let other = (rport.parse::<u16>().unwrap() + 1000).to_string();
    let s = server(&["write-bw", "-n", "20", "-p", &port, "--roce-port", &rport]);
    let start = std::time::Instant::now();
    let c = run(
        &[
            "perf",
            "write-bw",
            "127.0.0.1",
            "--bind",
            "127.0.0.2",
            "-n",
            "20",
            "-p",
            &port,
            "--roce-port",
            &other,
        ],
        Duration::from_secs(20),
    );
    let s = s.wait(Duration::from_secs(20));
    assert!(
        start.elapsed() < Duration::from_secs(2),
        "{:?}",
        start.elapsed()
    );
    for (o, who) in [(&c, "client"), (&s, "server")] {
        let err = text(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{who}: {err}");
        assert!(
            err.contains("--roce-port") && err.contains(&rport) && err.contains(&other),
            "{who}: {err}"
        );
    }
}

/// `send-lat`/`write-lat -D 1` end on time: the server stops when the
/// client's result arrives (it used to wait 10 s more for a message that
/// never came: 12.0 s wall for -D 2).
#[test]
fn timed_ping_pong_latency_tests_end_on_time() {
    for test in ["send-lat", "write-lat"] {
        let (port, _) = port_args();
        let start = std::time::Instant::now();
        let o = run(
            &[
                "perf",
                test,
                "--loopback",
                "--backend",
                "fabric",
                "-D",
                "1",
                "-p",
                &port,
            ],
            Duration::from_secs(30),
        );
        let took = start.elapsed();
        assert_eq!(o.status.code(), Some(0), "{test}: {}", text(&o.stderr));
        assert!(
            took < Duration::from_secs(4),
            "{test} -D 1 took {took:?}: {}",
            text(&o.stdout)
        );
        assert!(
            text(&o.stdout).contains("Latency Test"),
            "{}",
            text(&o.stdout)
        );
    }
}

/// The default output has perftest's `local address` / `remote address`
/// lines (QPN, PSN, RKey, VAddr, GID), one per QP, before the table; the
/// JSON has the same endpoints.
#[test]
fn address_lines_as_perftest() {
    let (port, _) = port_args();
    let o = run(
        &[
            "perf",
            "write-bw",
            "--loopback",
            "--backend",
            "fabric",
            "-q",
            "2",
            "-n",
            "10",
            "-p",
            &port,
        ],
        Duration::from_secs(30),
    );
    let out = text(&o.stdout);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let lines: Vec<&str> = out.lines().collect();
    let local: Vec<usize> = (0..lines.len())
        .filter(|&i| lines[i].starts_with(" local address: LID 0x0000 QPN 0x"))
        .collect();
    let remote: Vec<usize> = (0..lines.len())
        .filter(|&i| lines[i].starts_with(" remote address: LID 0x0000 QPN 0x"))
        .collect();
    assert_eq!((local.len(), remote.len()), (2, 2), "{out}");
    for l in ["PSN 0x", "RKey 0x", "VAddr 0x"] {
        assert!(lines[local[0]].contains(l), "{out}");
    }
    // The client's side (127.0.0.2) and its peer (127.0.0.1), as GIDs.
    assert!(
        lines[local[0] + 1].ends_with("255:255:127:00:00:02"),
        "{out}"
    );
    assert!(
        lines[remote[0] + 1].ends_with("255:255:127:00:00:01"),
        "{out}"
    );
    let table = lines.iter().position(|l| l.contains("#bytes")).unwrap();
    assert!(remote[1] < table, "{out}");

    let (port, _) = port_args();
    let o = run(
        &[
            "perf",
            "write-bw",
            "--loopback",
            "--backend",
            "fabric",
            "-n",
            "10",
            "-p",
            &port,
            "--json",
        ],
        Duration::from_secs(30),
    );
    let v: serde_json::Value = serde_json::from_str(text(&o.stdout).trim()).unwrap();
    let e = &v["counters"]["endpoints"];
    assert_eq!(e["local"][0]["addr"], "127.0.0.2", "{v}");
    assert_eq!(e["remote"][0]["addr"], "127.0.0.1", "{v}");
    assert!(e["remote"][0]["qpn"].as_u64().is_some(), "{v}");
}

/// `-n` with `-D` is refused (it was silently ignored), in both exchanges.
#[test]
fn iterations_and_duration_are_refused_together() {
    let (port, _) = port_args();
    for extra in [&[][..], &["--perftest", "127.0.0.1"][..]] {
        let o = run(
            &[
                &["perf", "write-bw", "-D", "1", "-n", "10", "-p", &port][..],
                extra,
            ]
            .concat(),
            Duration::from_secs(10),
        );
        let err = text(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{extra:?}: {err}");
        assert!(
            err.contains("-n and -D cannot be combined"),
            "{extra:?}: {err}"
        );
    }
    let o = run(
        &[
            "perf",
            "write-bw",
            "--loopback",
            "-D",
            "1",
            "-n",
            "10",
            "-p",
            &port,
        ],
        Duration::from_secs(10),
    );
    assert!(text(&o.stderr).contains("-n and -D cannot be combined"));
}

/// A server given its own -s/-n says that the client's apply (it adopted
/// them silently).
#[test]
fn the_server_says_whose_parameters_apply() {
    let (port, rport) = port_args();
    let s = server(&[
        "write-bw",
        "-s",
        "65536",
        "-n",
        "5000",
        "-p",
        &port,
        "--roce-port",
        &rport,
    ]);
    let c = run(
        &[
            "perf",
            "write-bw",
            "127.0.0.1",
            "--bind",
            "127.0.0.2",
            "-s",
            "4096",
            "-n",
            "20",
            "-p",
            &port,
            "--roce-port",
            &rport,
        ],
        Duration::from_secs(30),
    );
    let s = s.wait(Duration::from_secs(30));
    assert_eq!(c.status.code(), Some(0), "{}", text(&c.stderr));
    let err = text(&s.stderr);
    assert_eq!(s.status.code(), Some(0), "{err}");
    assert!(
        err.contains("the client's parameters apply, as in perftest: -s 4096 -n 20 (this server's -s 65536 -n 5000 ignored)"),
        "{err}"
    );
}

/// `-a` shows its progress on stderr, one line per size, also when piped
/// (it was silent for the minute 23 sizes take).
#[test]
fn all_sizes_show_progress_when_piped() {
    let (port, _) = port_args();
    let o = run(
        &[
            "perf",
            "write-bw",
            "--loopback",
            "--backend",
            "fabric",
            "-a",
            "-n",
            "2",
            "-p",
            &port,
        ],
        Duration::from_secs(60),
    );
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{err}");
    let lines: Vec<&str> = err
        .lines()
        .filter(|l| l.contains(" of 23 done] "))
        .collect();
    assert_eq!(lines.len(), 23, "{err}");
    assert!(lines[0].starts_with("[size 1 of 23 done] 2 "), "{err}");
    assert!(
        lines[22].starts_with("[size 23 of 23 done] 8388608 "),
        "{err}"
    );
}

/// A flag this tool does not have gets no clap tip to pass it "as a
/// value" after `--`; the message names the subcommand's --help.
#[test]
fn unknown_flags_point_to_the_help_not_to_dashdash() {
    let o = run(&["perf", "write-bw", "-Z"], Duration::from_secs(10));
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("unexpected argument '-Z'"), "{err}");
    assert!(!err.contains("'-- -Z'") && !err.contains("tip"), "{err}");
    assert!(err.contains("`roce perf --help` lists them"), "{err}");
}
