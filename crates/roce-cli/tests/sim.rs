//! `roce sim` end to end: a tiny scenario through the real binary, its
//! summary numbers, CSV/JSON/SVG outputs, and the errors for bad input.

use std::path::Path;
use std::process::{Command, Output};

fn roce(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_roce"))
        .args(args)
        .output()
        .expect("run roce")
}

fn stdout(o: &Output) -> String {
    String::from_utf8(o.stdout.clone()).unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8(o.stderr.clone()).unwrap()
}

/// 2:1 incast of 300 KB at 40 G with DCQCN: small enough for debug builds.
const TINY: &str = r#"
name = "tiny"
seed = 7
duration = "2ms"

[topology]
kind = "star"
hosts = 3
rate = "40G"
delay = "1us"

[buffer]
size = "4MB"

[ecn]
tc3 = { kmin = "5KB", kmax = "200KB", pmax = 0.01 }

[cc]
algorithm = "dcqcn"
r_ai = "40M"

[metrics]
sample_interval = "5us"
throughput_bin = "20us"
convergence = "20us"

[[workload]]
kind = "incast"
count = 2
receiver = 0
size = "300KB"
"#;

fn write_tiny(dir: &Path) -> String {
    let p = dir.join("tiny.toml");
    std::fs::write(&p, TINY).unwrap();
    p.to_str().unwrap().to_string()
}

/// The number after `key` in `line` (e.g. "CNPs sent 12").
fn number_after(text: &str, key: &str) -> f64 {
    let i = text
        .find(key)
        .unwrap_or_else(|| panic!("`{key}` in {text}"))
        + key.len();
    text[i..]
        .trim_start()
        .split(|c: char| !(c.is_ascii_digit() || c == '.'))
        .next()
        .unwrap()
        .parse()
        .unwrap_or_else(|_| panic!("number after `{key}` in {text}"))
}

#[test]
fn summary_csv_json_and_plots() {
    let dir = tempfile::tempdir().unwrap();
    let sc = write_tiny(dir.path());
    let csv = dir.path().join("csv");
    let plots = dir.path().join("plots");
    let o = roce(&[
        "sim",
        &sc,
        "--csv",
        csv.to_str().unwrap(),
        "--plots",
        plots.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(
        out.starts_with("scenario tiny (star-3, seed 7, cc dcqcn)"),
        "{out}"
    );
    assert!(out.contains("flows: 2 of 2 completed, 0 failed"), "{out}");
    assert!(out.contains("drops: 0 (buffer overflow 0"), "{out}");
    // Both flows land in the 100KB..1MB bucket with a slowdown ≥ 1.
    let line = out.lines().find(|l| l.contains("100KB .. 1MB")).unwrap();
    let cols: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(cols[3], "2", "{line}");
    let p50: f64 = cols[4].parse().unwrap();
    assert!((1.0..10.0).contains(&p50), "{line}");
    // The incast overloads h0's link: CE marks, CNPs both ways.
    let sent = number_after(&out, "CNPs sent");
    let recv = number_after(&out, ", received");
    assert!(sent >= 1.0 && sent == recv, "{out}");
    let jain = number_after(&out, "fairness: Jain");
    assert!(jain > 0.9 && jain <= 1.0, "{out}");
    assert!(out.contains("sw0 port 0 -> h0 prio 3: mean"), "{out}");
    assert!(number_after(&out, "simulator:") > 1000.0, "{out}");
    // CSV and JSON agree with the summary.
    let flows = std::fs::read_to_string(csv.join("flows.csv")).unwrap();
    assert_eq!(flows.lines().count(), 3, "{flows}");
    assert!(flows.starts_with("id,src,dst,size"));
    for f in [
        "queues.csv",
        "ports.csv",
        "throughput.csv",
        "queue_stats.csv",
    ] {
        let t = std::fs::read_to_string(csv.join(f)).unwrap();
        assert!(t.lines().count() > 1, "{f}: {t}");
    }
    let j: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(csv.join("results.json")).unwrap()).unwrap();
    assert_eq!(j["flows_completed"], 2);
    assert_eq!(j["cc"], "dcqcn");
    assert_eq!(j["engine"]["tx_cnp"].as_f64().unwrap(), sent);
    // Four SVG plots with data in them.
    for (f, min) in [
        ("throughput.svg", 5_000),
        ("queues.svg", 5_000),
        ("pauses.svg", 200),
        ("slowdown.svg", 1_000),
    ] {
        let s = std::fs::read_to_string(plots.join(f)).unwrap();
        assert!(s.starts_with("<svg"), "{f}");
        assert!(s.len() > min, "{f}: {} bytes", s.len());
    }
    let t = std::fs::read_to_string(plots.join("throughput.svg")).unwrap();
    assert!(t.contains("h1→h0 p3") && t.contains("h2→h0 p3"));
}

#[test]
fn json_and_duration_override() {
    let dir = tempfile::tempdir().unwrap();
    let sc = write_tiny(dir.path());
    let o = roce(&["sim", &sc, "--json", "--duration", "50us"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let j: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(j["sim_time_ps"], 50_000_000u64);
    assert_eq!(j["flows_completed"], 0, "300 KB cannot finish in 50 us");
    assert_eq!(j["name"], "tiny");
}

#[test]
fn bad_input_is_one_line_and_exit_2() {
    let o = roce(&["sim", "/nonexistent/x.toml"]);
    assert_eq!(o.status.code(), Some(2));
    let e = stderr(&o);
    assert_eq!(e.lines().count(), 1, "{e}");
    assert!(e.contains("/nonexistent/x.toml"), "{e}");
    assert_eq!(
        e.matches("/nonexistent/x.toml").count(),
        1,
        "named once: {e}"
    );

    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("bad.toml");
    std::fs::write(&p, TINY.replace("r_ai = \"40M\"", "rpg_ai_rate = 5")).unwrap();
    let o = roce(&["sim", p.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    let e = stderr(&o);
    assert_eq!(e.lines().count(), 1, "{e}");
    assert!(e.contains("cc.rpg_ai_rate") && e.contains("dcqcn"), "{e}");

    std::fs::write(
        &p,
        TINY.replace("algorithm = \"dcqcn\"", "algorithm = \"timely\""),
    )
    .unwrap();
    let o = roce(&["sim", p.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("cc.algorithm"), "{}", stderr(&o));

    let dir2 = tempfile::tempdir().unwrap();
    let sc = write_tiny(dir2.path());
    let o = roce(&["sim", &sc, "--duration", "soon"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("--duration"), "{}", stderr(&o));
}

/// Hostile scenarios (issue 18) end in one line naming the field and
/// exit status 2, at once: a ring of switches without hosts (it aborted
/// on allocation), and Poisson arrivals that a long `--duration` would
/// make billions of flows.
#[test]
fn hostile_scenarios_are_refused_naming_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("ring.toml");
    std::fs::write(
        &p,
        "duration = \"1ms\"\n[topology]\nkind = \"ring\"\nswitches = 4\nhosts_per_switch = 0\nrate = \"40G\"\ndelay = \"1us\"\n",
    )
    .unwrap();
    let start = std::time::Instant::now();
    let o = roce(&["sim", p.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let e = stderr(&o);
    assert_eq!(e.lines().count(), 1, "{e}");
    assert!(e.contains("topology.hosts_per_switch"), "{e}");

    let p = dir.path().join("poisson.toml");
    std::fs::write(
        &p,
        "duration = \"1ms\"\n[topology]\nkind = \"star\"\nhosts = 16\nrate = \"100G\"\ndelay = \"1us\"\n\
         [metrics]\nthroughput_bin = \"1s\"\n\
         [[workload]]\nkind = \"poisson\"\ncdf = \"websearch\"\nload = 0.9\n",
    )
    .unwrap();
    let o = roce(&["sim", p.to_str().unwrap(), "--duration", "3600s"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let e = stderr(&o);
    assert!(
        e.contains("workload[0].load") && e.contains("--duration"),
        "{e}"
    );
    assert!(start.elapsed() < std::time::Duration::from_secs(10));
}

/// A `[ecn]` class no traffic is in (the typo `tc4` for `tc3`) is warned
/// about, and so is DCQCN with no marking on the data's class; the tiny
/// scenario as written gets no warning.
#[test]
fn unused_ecn_classes_are_warned_about() {
    let dir = tempfile::tempdir().unwrap();
    let sc = write_tiny(dir.path());
    let o = roce(&["sim", &sc, "--duration", "20us"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(!stderr(&o).contains("warning"), "{}", stderr(&o));
    let p = dir.path().join("typo.toml");
    std::fs::write(&p, TINY.replace("tc3 = {", "tc4 = {")).unwrap();
    let o = roce(&["sim", p.to_str().unwrap(), "--duration", "20us"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let e = stderr(&o);
    assert!(e.contains("warning: ecn.tc4") && e.contains("tc3"), "{e}");
    assert!(e.contains("warning: cc.algorithm"), "{e}");
}

/// A run shorter than `metrics.convergence` says so for the fairness and
/// queue lines (the fairness reason was wrong, the queue line missing);
/// no flow completing prints one line, not six all-zero rows; the queue
/// line says its window; `--duration` takes bare seconds as perf's -D.
#[test]
fn summary_lines_say_what_they_cover() {
    let dir = tempfile::tempdir().unwrap();
    let sc = write_tiny(dir.path());
    let o = roce(&["sim", &sc, "--duration", "0.00001"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.contains(": 0.010 ms simulated"), "{out}");
    assert!(out.contains("FCT slowdown: - (no flow completed)"), "{out}");
    assert!(!out.contains(" .. "), "no bucket rows: {out}");
    let fair = out.lines().find(|l| l.starts_with("fairness:")).unwrap();
    assert!(
        fair.contains("before metrics.convergence = 0.020 ms"),
        "{fair}"
    );
    let queues = out.lines().find(|l| l.starts_with("queues")).unwrap();
    assert!(queues.contains("before metrics.convergence"), "{queues}");

    // The queue line points at queues.svg only when plots are written.
    let o = roce(&["sim", &sc]);
    let out = stdout(&o);
    let queues = out.lines().find(|l| l.starts_with("queues")).unwrap();
    assert!(
        queues.contains("from metrics.convergence = 0.020 ms") && !queues.contains("queues.svg"),
        "{queues}"
    );
    let plots = dir.path().join("plots");
    let o = roce(&["sim", &sc, "--plots", plots.to_str().unwrap()]);
    let out = stdout(&o);
    let queues = out.lines().find(|l| l.starts_with("queues")).unwrap();
    assert!(
        queues.contains("queues.svg shows the whole run"),
        "{queues}"
    );
}

/// The plots say what they show: the legend lists flows in order (h1, h2
/// ... h10, it was scrambled) in a column right of the plot, never over
/// the data; the throughput plot says it is delivered throughput; the
/// queue plot marks Kmin, Kmax and XOFF.
#[test]
fn plots_say_what_they_show() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("incast10.toml");
    let text = TINY
        .replace("hosts = 3", "hosts = 11")
        .replace("count = 2", "count = 10")
        .replace("size = \"300KB\"", "size = \"20KB\"");
    std::fs::write(&p, text).unwrap();
    let plots = dir.path().join("plots");
    let o = roce(&[
        "sim",
        p.to_str().unwrap(),
        "--duration",
        "100us",
        "--plots",
        plots.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    // (x, text) of every <text> element.
    let texts = |f: &str| -> Vec<(i64, String)> {
        let s = std::fs::read_to_string(plots.join(f)).unwrap();
        s.split("<text")
            .skip(1)
            .filter_map(|t| {
                let x = t.split("x=\"").nth(1)?.split('"').next()?.parse().ok()?;
                let body = t.split('>').nth(1)?.split('<').next()?.trim().to_string();
                Some((x, body))
            })
            .collect()
    };
    let t = texts("throughput.svg");
    assert!(t.iter().any(|(_, s)| s.contains("delivered")), "{t:?}");
    let flows: Vec<&(i64, String)> = t.iter().filter(|(_, s)| s.ends_with("→h0 p3")).collect();
    let names: Vec<&str> = flows.iter().map(|(_, s)| s.as_str()).collect();
    let want: Vec<String> = (1..=10).map(|h| format!("h{h}→h0 p3")).collect();
    assert_eq!(names, want, "legend order");
    // Right of the plot area (960 wide, the legend column is the last 250).
    assert!(flows.iter().all(|(x, _)| *x >= 960 - 250), "{flows:?}");
    let q = texts("queues.svg");
    for want in ["Kmin tc3 5.0 KB", "Kmax tc3 200.0 KB"] {
        assert!(q.iter().any(|(_, s)| s == want), "{want}: {q:?}");
    }
}

/// `scenarios/pfc_deadlock_ring.toml`: the deadlock is said before the
/// figures, and the fairness rates are means over the window they name,
/// in which nothing moved after the deadlock (they read 10.77 Gb/s over
/// 0..3 ms, the rate of the one 50 us bin the flows sent in, beside
/// "DEADLOCK at 0.070 ms").
#[test]
fn a_deadlock_frames_the_figures() {
    let sc = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../scenarios/pfc_deadlock_ring.toml"
    );
    let o = roce(&["sim", sc]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = stdout(&o);
    let lines: Vec<&str> = out.lines().collect();
    let at = |p: &str| lines.iter().position(|l| l.starts_with(p)).unwrap();
    let dl = lines[at("DEADLOCK at ")];
    assert!(dl.starts_with("DEADLOCK at 0.070 ms: ring"), "{out}");
    assert!(at("DEADLOCK") < at("fairness:"), "{out}");
    assert!(at("DEADLOCK") < at("queues"), "{out}");
    let fair = lines[at("fairness:")];
    assert!(
        fair.contains("mean rates over 0.000..3.000 ms")
            && fair.ends_with("; deadlocked from 0.070 ms: nothing moved after)"),
        "{fair}"
    );
    // 67,300 bytes per flow in 3 ms: 0.18 Gb/s each.
    let rates = fair.split("Gb/s: ").nth(1).unwrap();
    let rates: Vec<f64> = rates
        .split(';')
        .next()
        .unwrap()
        .split_whitespace()
        .map(|r| r.parse().unwrap())
        .collect();
    assert_eq!(rates, vec![0.18, 0.18, 0.18], "{fair}");
    let queues = lines[at("queues")];
    assert!(
        queues.contains("the whole run, 0.000..3.000 ms; deadlocked from 0.070 ms"),
        "{queues}"
    );
}
