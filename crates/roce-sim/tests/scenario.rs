//! Scenario files: operator syntax, errors, shipped examples, determinism.

use roce_sim::*;

const BASE: &str = r#"
name = "t"
seed = 3
duration = "1ms"

[topology]
kind = "leaf-spine"
leaves = 2
spines = 2
hosts_per_leaf = 4
host_rate = "100G"
fabric_rate = "100G"
delay = "1us"

[dcb]
pfc = "dcb pfc set dev eth0 prio-pfc all:off 3:on delay 4096"
ets = "prio-tc 3:3 6:6 tc-tsa all:strict 0:ets 3:ets tc-bw 0:60 3:40"
app = "dscp-prio 26:3 48:6"

[buffer]
size = "4MB"
xoff = "static"
xoff_bytes = "200KB"
resume_offset = "3KB"
headroom = "100KB"

[ecn]
tc3 = { kmin = "5KB", kmax = "200KB", pmax = 0.01 }

[watchdog]
poll = "100us"
detect = 2
restore = "200us"

[metrics]
sample_interval = "20us"
throughput_bin = "0"

[[workload]]
kind = "poisson"
cdf = "fb_hadoop"
load = 0.3
stop = "300us"

[[workload]]
kind = "incast"
count = 4
receiver = 0
size = "50KB"
time = "100us"
"#;

#[test]
fn operator_syntax_parses() {
    let s = Scenario::from_toml(BASE).unwrap();
    let d = &s.fabric.dcb;
    assert_eq!(d.pfc_enabled.iter().filter(|&&e| e).count(), 1);
    assert_eq!(d.pfc_delay, Some(4096));
    assert_eq!(d.tc_bw[0], 60);
    assert_eq!(d.tc_tsa[6], Tsa::Strict);
    assert_eq!(s.fabric.buffer.xoff, Xoff::Static(200_000));
    assert_eq!(s.fabric.buffer.headroom, Headroom::Bytes(100_000));
    assert_eq!(s.fabric.ecn[3].unwrap().kmax, 200_000);
    assert_eq!(s.fabric.watchdog.unwrap().restore, 200_000_000);
    assert_eq!(s.topology.hosts, 8);
    let flows = s.flows();
    assert_eq!(
        flows
            .iter()
            .filter(|f| f.dst == 0 && f.start == 100_000_000 && f.size == 50_000)
            .count(),
        4
    );
    assert!(flows.len() > 4);
}

fn err_of(text: &str) -> String {
    Scenario::from_toml(text).unwrap_err().to_string()
}

#[test]
fn bad_input_is_reported_with_its_key() {
    let e = err_of(&BASE.replace("[buffer]", "[buffer]\nbogus = 1"));
    assert!(e.contains("bogus"), "{e}");
    let e = err_of(&BASE.replace("seed = 3", "seed = 3\nspeed = 3"));
    assert!(e.contains("speed"), "{e}");
    let e = err_of(&BASE.replace("hosts_per_leaf = 4", "hosts_per_leaf = 4\nk = 4"));
    assert!(e.contains("`k`"), "{e}");
    let e = err_of(&BASE.replace("3:on delay", "3:yes delay"));
    assert!(e.contains("dcb.pfc") && e.contains("on/off"), "{e}");
    let e = err_of(&BASE.replace("tc-bw 0:60 3:40", "tc-bw 0:60 3:50"));
    assert!(e.contains("dcb.ets") && e.contains("110"), "{e}");
    let e = err_of(&BASE.replace("26:3 48:6", "26:3 48:9"));
    assert!(e.contains("dcb.app"), "{e}");
    let e = err_of(&BASE.replace("size = \"4MB\"", "size = \"4 furlongs\""));
    assert!(e.contains("buffer.size") && e.contains("furlongs"), "{e}");
    let e = err_of(&BASE.replace("duration = \"1ms\"", "duration = 5"));
    assert!(e.contains("duration") && e.contains("unit"), "{e}");
    let e = err_of(&BASE.replace("tc3 = {", "tc9 = {"));
    assert!(e.contains("ecn.tc9"), "{e}");
    let e = err_of(&BASE.replace("cdf = \"fb_hadoop\"", "cdf = \"no-such-cdf\""));
    assert!(e.contains("workload[0].cdf"), "{e}");
    let e = err_of(&BASE.replace("receiver = 0", "receiver = 99"));
    assert!(
        e.contains("workload[1].receiver") && e.contains("99"),
        "{e}"
    );
    let e = err_of(&BASE.replace("kind = \"leaf-spine\"", "kind = \"torus\""));
    assert!(e.contains("torus"), "{e}");
    let e = err_of(&BASE.replace("xoff = \"static\"", "xoff = \"dynamic\""));
    assert!(e.contains("buffer.xoff_bytes"), "{e}");
    let e = err_of("duration = ");
    assert!(e.starts_with("scenario: "), "{e}");
}

#[test]
fn shipped_scenarios_parse() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenarios");
    let mut n = 0;
    for e in std::fs::read_dir(&dir).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "toml") {
            Scenario::from_file(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
            n += 1;
        }
    }
    assert!(n >= 4);
}

fn strip_wall(mut r: Results) -> Results {
    r.wall_seconds = 0.0;
    r.events_per_second = 0.0;
    r.threads = 0;
    r
}

#[test]
fn same_seed_same_results_other_seed_other_results() {
    let s = Scenario::from_toml(BASE).unwrap();
    let a = strip_wall(run(&s, |_| {}));
    let b = strip_wall(run(&s, |_| {}));
    assert!(a.flows.len() > 10 && a.flows_completed > 10);
    assert_eq!(a, b);
    assert_eq!(a.to_json(), b.to_json());
    let mut s2 = s.clone();
    s2.seed = 4;
    let c = strip_wall(run(&s2, |_| {}));
    assert_ne!(a.flows, c.flows);
    assert_ne!(a.events, c.events);
}

/// The hosts and the switches on two threads give exactly the results of
/// one thread: every flow, counter, sample, pause and watchdog action
/// (the scenario has PFC, ECN, a watchdog, sampling and an incast).
#[test]
fn two_threads_give_the_results_of_one() {
    let s = Scenario::from_toml(BASE).unwrap();
    let one = run_on(&s, Some(1), |_| {});
    let two = run_on(&s, Some(2), |_| {});
    assert_eq!((one.threads, two.threads), (1, 2));
    let (one, two) = (strip_wall(one), strip_wall(two));
    assert!(one.flows_completed > 10 && !one.queue_samples.is_empty());
    assert!(one
        .ports
        .iter()
        .any(|p| p.tx_pkts.iter().sum::<u64>() > 1000));
    assert_eq!(one, two);
    assert_eq!(one.to_json(), two.to_json());
}

#[test]
fn progress_is_reported_and_results_serialize() {
    let s = Scenario::from_toml(BASE).unwrap();
    let mut last = -1.0;
    let r = run(&s, |p| {
        assert!(p >= last && p <= 1.0);
        last = p;
    });
    assert_eq!(last, 1.0);
    let j: serde_json::Value = serde_json::from_str(&r.to_json()).unwrap();
    assert!(j["flows"].as_array().unwrap().len() == r.flows.len());
    assert!(r.flows_csv().lines().count() == r.flows.len() + 1);
    assert!(r.queues_csv().starts_with("time_ps,"));
    assert!(r.ports_csv().lines().count() > 1);
}

/// A hostile scenario cannot make the simulator allocate without bound
/// (issue 18): every count it sets is capped, and the error names the
/// field. Each of these aborted on allocation, or built millions of
/// objects, before the caps.
#[test]
fn hostile_counts_are_refused_naming_the_field() {
    let topo = |t: &str| {
        format!("duration = \"1ms\"\n[topology]\n{t}\nrate = \"40G\"\nhost_rate = \"40G\"\nfabric_rate = \"40G\"\ndelay = \"1us\"\n")
    };
    let cases = [
        (
            "kind = \"ring\"\nswitches = 4\nhosts_per_switch = 0",
            "topology.hosts_per_switch",
        ),
        (
            "kind = \"ring\"\nswitches = 4000000000\nhosts_per_switch = 1",
            "topology",
        ),
        (
            "kind = \"leaf-spine\"\nleaves = 2\nspines = 4000000000\nhosts_per_leaf = 2",
            "topology.spines",
        ),
        (
            "kind = \"leaf-spine\"\nleaves = 4096\nspines = 4096\nhosts_per_leaf = 1",
            "links",
        ),
        ("kind = \"fat-tree\"\nk = 1000", "topology"),
        ("kind = \"star\"\nhosts = 1", "topology.hosts"),
    ];
    for (t, want) in cases {
        // Keys a kind does not take are refused first: keep each kind's.
        let mut text = topo(t);
        if t.contains("ring") || t.contains("star") {
            text = text.replace("host_rate = \"40G\"\nfabric_rate = \"40G\"\n", "");
        } else {
            text = text.replace("rate = \"40G\"\nhost_rate", "host_rate");
        }
        let e = err_of(&text);
        assert!(e.contains(want), "{t}: {e}");
    }
    let star = topo("kind = \"star\"\nhosts = 64")
        .replace("host_rate = \"40G\"\nfabric_rate = \"40G\"\n", "");
    // Poisson arrivals at full load of 64 hosts with 1-byte flows for
    // 10 s: billions of flows.
    let dir = tempfile_dir();
    let cdf = dir.join("tiny.cdf");
    std::fs::write(&cdf, "1 0\n2 100\n").unwrap();
    let text = format!(
        "{}\n[[workload]]\nkind = \"poisson\"\ncdf = \"{}\"\nload = 1.0\n",
        star.replace("duration = \"1ms\"", "duration = \"10s\""),
        cdf.display()
    );
    let e = err_of(&text);
    assert!(e.contains("workload[0].load") && e.contains("flows"), "{e}");
    let e = err_of(&format!("{star}\n[metrics]\nthroughput_bin = \"1ps\"\n"));
    assert!(e.contains("metrics.throughput_bin"), "{e}");
    let e = err_of(&format!(
        "{star}\n[metrics]\nmax_queue_samples = 10000000000\n"
    ));
    assert!(e.contains("metrics.max_queue_samples"), "{e}");
    let _ = std::fs::remove_dir_all(dir);
}

fn tempfile_dir() -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("roce-sim-hostile-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}
