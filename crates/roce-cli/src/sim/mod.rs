//! `roce sim SCENARIO.toml`: runs a fabric scenario in roce-sim (the real
//! roce-core engine on every host), prints a summary, and writes CSV, JSON
//! and SVG plots.
//!
//! Exit status: 0 the run finished; 1 an output file could not be written;
//! 2 the scenario was unreadable or invalid.

mod plots;

use std::fmt::Write as _;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};

use clap::Args;
use roce_sim::{Results, Scenario};

/// Arguments of `roce sim`.
#[derive(Args, Debug)]
pub(crate) struct SimArgs {
    /// The scenario (TOML: topology, `[dcb]`, `[buffer]`, `[ecn]`, `[cc]`,
    /// `[[workload]]`; see scenarios/README.md).
    scenario: PathBuf,
    /// Print the full results as JSON on stdout instead of the summary.
    #[arg(long)]
    json: bool,
    /// Write flows.csv, queues.csv, queue_stats.csv, ports.csv,
    /// throughput.csv and results.json into DIR.
    #[arg(long, value_name = "DIR")]
    csv: Option<PathBuf>,
    /// Write SVG plots into DIR: throughput.svg, queues.svg, pauses.svg,
    /// slowdown.svg.
    #[arg(long, value_name = "DIR")]
    plots: Option<PathBuf>,
    /// Simulated time to run instead of the scenario's `duration`: seconds
    /// as `perf -D` (`0.002`), or with a unit (`500us`, `10ms`).
    #[arg(long, value_name = "T")]
    duration: Option<String>,
    /// Threads: 1, or 2 to run the hosts and the switches on two cores
    /// (the default when the machine has two; the results are identical).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u8).range(1..=2))]
    threads: Option<u8>,
}

pub(crate) fn run(args: &SimArgs) -> i32 {
    let mut sc = match Scenario::from_file(&args.scenario) {
        Ok(s) => s,
        Err(e) => {
            // A read error names the file itself.
            let msg = match &e {
                roce_sim::Error::Io(_) => e.to_string(),
                _ => format!("{}: {e}", args.scenario.display()),
            };
            return crate::fail("sim", args.json, &msg, 2);
        }
    };
    if let Some(d) = &args.duration {
        // A bare number is seconds, as perf's -D.
        let with_unit = match d.trim().parse::<f64>() {
            Ok(_) => format!("{}s", d.trim()),
            Err(_) => d.clone(),
        };
        match roce_sim::parse_time("--duration", &with_unit) {
            Ok(t) if t > 0 => {
                sc.duration = t;
                // A longer run may exceed what the scenario may start.
                if let Err(e) = sc.check_counts() {
                    let msg = format!("{}: {e} (with --duration {d})", args.scenario.display());
                    return crate::fail("sim", args.json, &msg, 2);
                }
            }
            Ok(_) => {
                return crate::fail("sim", args.json, "--duration must be positive", 2);
            }
            Err(e) => {
                return crate::fail("sim", args.json, &e.to_string(), 2);
            }
        }
    }
    for w in sc.warnings() {
        eprintln!("roce sim: warning: {w}");
    }
    let bar = std::io::stderr().is_terminal().then(|| {
        let b = indicatif::ProgressBar::new(1000);
        b.set_style(
            indicatif::ProgressStyle::with_template(
                "{spinner} {msg} [{bar:40}] {percent}% simulated, {elapsed} wall, eta {eta}",
            )
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
            .progress_chars("=> "),
        );
        b.set_message(sc.name.clone());
        b
    });
    let results = roce_sim::run_on(&sc, args.threads.map(usize::from), |f| {
        if let Some(b) = &bar {
            b.set_position((f.clamp(0.0, 1.0) * 1000.0) as u64);
        }
    });
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    if args.json {
        println!("{}", results.to_json());
    } else {
        print!(
            "{}",
            summary(&results, sc.metrics.convergence, args.plots.is_some())
        );
    }
    let mut code = 0;
    if let Some(dir) = &args.csv {
        if let Err(e) = write_csv(dir, &results) {
            code = crate::fail("sim", args.json, &format!("{}: {e}", dir.display()), 1);
        }
    }
    if let Some(dir) = &args.plots {
        if let Err(e) = plots::write_all(dir, &results, &sc.fabric) {
            code = crate::fail("sim", args.json, &format!("{}: {e}", dir.display()), 1);
        }
    }
    code
}

fn write_csv(dir: &Path, r: &Results) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    std::fs::write(dir.join("flows.csv"), r.flows_csv())?;
    std::fs::write(dir.join("queues.csv"), r.queues_csv())?;
    std::fs::write(dir.join("ports.csv"), r.ports_csv())?;
    std::fs::write(dir.join("throughput.csv"), r.throughput_csv())?;
    let mut q = String::from(
        "switch,port,peer,prio,samples,mean_bytes,p50_bytes,p99_bytes,max_bytes,in_ecn_band,above_ecn_band\n",
    );
    let opt = |v: Option<f64>| v.map_or(String::new(), |v| format!("{v:.4}"));
    for s in &r.queue_stats {
        let _ = writeln!(
            q,
            "{},{},{},{},{},{:.1},{},{},{},{},{}",
            s.switch,
            s.port,
            s.peer,
            s.prio,
            s.samples,
            s.mean,
            s.p50,
            s.p99,
            s.max,
            opt(s.in_ecn_band),
            opt(s.above_ecn_band)
        );
    }
    std::fs::write(dir.join("queue_stats.csv"), q)?;
    std::fs::write(dir.join("results.json"), r.to_json())?;
    Ok(())
}

/// `1.5 KB`, `2.3 MB`.
pub(crate) fn human_bytes(b: f64) -> String {
    if b >= 1e6 {
        format!("{:.2} MB", b / 1e6)
    } else if b >= 1e3 {
        format!("{:.1} KB", b / 1e3)
    } else {
        format!("{b:.0} B")
    }
}

/// `1KB`, `10MB`, `inf` for a bucket bound.
fn size_label(b: u64) -> String {
    match b {
        u64::MAX => "inf".into(),
        b if b >= 1_000_000 && b % 1_000_000 == 0 => format!("{}MB", b / 1_000_000),
        b if b >= 1_000 && b % 1_000 == 0 => format!("{}KB", b / 1_000),
        b => format!("{b}B"),
    }
}

fn ms(ps: u64) -> f64 {
    ps as f64 / 1e9
}

/// The text summary; `convergence` is `metrics.convergence`, from which
/// the queue statistics and the fairness window are taken.
/// The run's summary; `plots` says whether SVG plots are being written
/// (the text then points at them).
pub(crate) fn summary(r: &Results, convergence: u64, plots: bool) -> String {
    let before_convergence = r.sim_time_ps <= convergence;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "scenario {} ({}, seed {}, cc {}): {:.3} ms simulated",
        r.name,
        r.topology,
        r.seed,
        r.cc,
        ms(r.sim_time_ps)
    );
    let failed = r.flows.iter().filter(|f| f.failed).count();
    let _ = writeln!(
        s,
        "flows: {} of {} completed, {} failed",
        r.flows_completed,
        r.flows.len(),
        failed
    );
    // A deadlock freezes everything after it: said first, and the
    // figures measured over windows that reach past it say so.
    for dl in &r.deadlocks {
        let _ = writeln!(
            s,
            "DEADLOCK at {:.3} ms: {}",
            ms(dl.detected_ps),
            dl.cycle.join(" -> ")
        );
    }
    let deadlock = r.deadlocks.iter().map(|d| d.detected_ps).min();
    let frozen = |to: u64| {
        deadlock.filter(|&d| d < to).map_or(String::new(), |d| {
            format!("; deadlocked from {:.3} ms: nothing moved after", ms(d))
        })
    };
    let f = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.2}"));
    if r.flows_completed == 0 {
        let _ = writeln!(s, "FCT slowdown: - (no flow completed)");
    } else {
        let _ = writeln!(
            s,
            "FCT slowdown by size:   count      p50      p95      p99"
        );
    }
    for b in r.slowdown.iter().filter(|_| r.flows_completed > 0) {
        let _ = writeln!(
            s,
            "  {:>6} .. {:<6} {:>8} {:>8} {:>8} {:>8}",
            size_label(b.min_size),
            size_label(b.max_size),
            b.count,
            f(b.p50),
            f(b.p95),
            f(b.p99)
        );
    }
    let xoff = r.pfc_xoff_sent();
    let paused: u64 = r
        .ports
        .iter()
        .map(|p| p.paused_ps.iter().sum::<u64>())
        .sum();
    let per_prio: Vec<String> = xoff
        .iter()
        .enumerate()
        .filter(|(_, &n)| n > 0)
        .map(|(p, n)| format!("prio {p}: {n}"))
        .collect();
    let _ = writeln!(
        s,
        "pauses: {} XOFF frames sent{}, {:.1} us paused in all",
        xoff.iter().sum::<u64>(),
        if per_prio.is_empty() {
            String::new()
        } else {
            format!(" ({})", per_prio.join(", "))
        },
        paused as f64 / 1e6
    );
    let d = &r.drops;
    let _ = writeln!(
        s,
        "drops: {} (buffer overflow {}, headroom exceeded {}, watchdog {}, no route {})",
        d.total(),
        d.buffer_overflow,
        d.headroom_exceeded,
        d.watchdog,
        d.no_route
    );
    let marked: u64 = r
        .ports
        .iter()
        .map(|p| p.ecn_marked.iter().sum::<u64>())
        .sum();
    let _ = writeln!(
        s,
        "ecn: {} packets CE-marked, {} CE received; CNPs sent {}, received {}",
        marked, r.engine.rx_ce, r.engine.tx_cnp, r.engine.rx_cnp
    );
    match &r.fairness {
        Some(fa) => {
            let rates: Vec<String> = fa.gbps.iter().map(|g| format!("{g:.2}")).collect();
            let _ = writeln!(
                s,
                "fairness: Jain {:.4} over {} flows, mean rates over {:.3}..{:.3} ms (Gb/s: {}{})",
                fa.jain,
                fa.flows.len(),
                ms(fa.from_ps),
                ms(fa.to_ps),
                rates.join(" "),
                frozen(fa.to_ps)
            );
        }
        None if before_convergence => {
            let _ = writeln!(
                s,
                "fairness: - (the run ended at {:.3} ms, before metrics.convergence = {:.3} ms, where the window starts)",
                ms(r.sim_time_ps),
                ms(convergence)
            );
        }
        None => {
            let _ = writeln!(
                s,
                "fairness: - (needs throughput bins and 2+ concurrent flows after metrics.convergence)"
            );
        }
    }
    let mut qs: Vec<_> = r.queue_stats.iter().collect();
    qs.sort_by(|a, b| b.mean.total_cmp(&a.mean));
    let window = if convergence > 0 {
        format!(
            "from metrics.convergence = {:.3} ms to the end{}",
            ms(convergence),
            if plots {
                "; queues.svg shows the whole run"
            } else {
                ""
            }
        )
    } else {
        format!("the whole run, 0.000..{:.3} ms", ms(r.sim_time_ps))
    };
    let window = format!("{window}{}", frozen(r.sim_time_ps));
    if !qs.is_empty() {
        let _ = writeln!(s, "queues (busiest by mean, {window}):");
    } else if before_convergence {
        let _ = writeln!(
            s,
            "queues: - (the run ended at {:.3} ms, before metrics.convergence = {:.3} ms, where the statistics start)",
            ms(r.sim_time_ps),
            ms(convergence)
        );
    } else {
        let _ = writeln!(s, "queues: - (every egress queue stayed empty, {window})");
    }
    for q in qs.iter().take(5) {
        let band = q.in_ecn_band.map_or(String::new(), |v| {
            format!(
                ", in ECN band {:.0}%, above {:.0}%",
                v * 100.0,
                q.above_ecn_band.unwrap_or(0.0) * 100.0
            )
        });
        let _ = writeln!(
            s,
            "  {} port {} -> {} prio {}: mean {}, p50 {}, p99 {}, max {}{}",
            q.switch,
            q.port,
            q.peer,
            q.prio,
            human_bytes(q.mean),
            human_bytes(q.p50 as f64),
            human_bytes(q.p99 as f64),
            human_bytes(q.max as f64),
            band
        );
    }
    if !r.watchdog.is_empty() {
        let _ = writeln!(s, "watchdog actions: {}", r.watchdog.len());
    }
    let _ = writeln!(
        s,
        "simulator: {} events in {:.3} s wall ({:.2} M events/s)",
        r.events,
        r.wall_seconds,
        r.events_per_second / 1e6
    );
    s
}
