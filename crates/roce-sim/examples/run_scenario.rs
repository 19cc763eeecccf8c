//! Runs a scenario file and prints a summary; `--json PATH` writes the
//! full results, `--csv DIR` the flow, port, queue and throughput tables,
//! `--duration 10ms` overrides the scenario's duration.
//!
//! `cargo run --release -p roce-sim --example run_scenario -- scenarios/hpcc_fb_hadoop_30.toml`

use std::path::PathBuf;

use roce_sim::{run, Scenario};

fn main() {
    let mut args = std::env::args().skip(1);
    let mut file = None;
    let mut json = None;
    let mut csv = None;
    let mut duration = None;
    while let Some(a) = args.next() {
        match a.as_str() {
            "--json" => json = args.next().map(PathBuf::from),
            "--csv" => csv = args.next().map(PathBuf::from),
            "--duration" => duration = args.next(),
            _ => file = Some(PathBuf::from(a)),
        }
    }
    let Some(file) = file else {
        eprintln!("usage: run_scenario SCENARIO.toml [--json OUT.json] [--csv DIR]");
        std::process::exit(2);
    };
    let s = match Scenario::from_file(&file) {
        Ok(mut s) => {
            if let Some(d) = duration {
                // Reuse the scenario parser's units by parsing a tiny file.
                let t = format!("duration = \"{d}\"\n[topology]\nkind = \"hpcc\"\n");
                match Scenario::from_toml(&t) {
                    Ok(x) => s.duration = x.duration,
                    Err(e) => {
                        eprintln!("--duration: {e}");
                        std::process::exit(2);
                    }
                }
            }
            s
        }
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(1);
        }
    };
    let mut last = 0.0;
    let r = run(&s, |p| {
        if p - last >= 0.1 {
            eprint!("\r{:3.0}%", p * 100.0);
            last = p;
        }
    });
    eprintln!();
    println!(
        "{} on {}: {:.3} ms simulated",
        r.name,
        r.topology,
        r.sim_time_ps as f64 / 1e9
    );
    println!(
        "events {} in {:.3} s wall = {:.0} events/s; packet pool {} slots",
        r.events, r.wall_seconds, r.events_per_second, r.packet_pool_high_water
    );
    println!("flows {} completed of {}", r.flows_completed, r.flows.len());
    for b in &r.slowdown {
        if b.count > 0 {
            println!(
                "  size [{}, {}): n={} slowdown p50 {:.2} p95 {:.2} p99 {:.2}",
                b.min_size,
                if b.max_size == u64::MAX {
                    "inf".into()
                } else {
                    b.max_size.to_string()
                },
                b.count,
                b.p50.unwrap_or(f64::NAN),
                b.p95.unwrap_or(f64::NAN),
                b.p99.unwrap_or(f64::NAN)
            );
        }
    }
    let xoff = r.pfc_xoff_sent();
    println!("PFC XOFF sent per priority {xoff:?}");
    println!("drops {:?}", r.drops);
    println!("engine {:?}", r.engine);
    for w in &r.watchdog {
        println!("watchdog: {w:?}");
    }
    for d in &r.deadlocks {
        println!(
            "DEADLOCK at {} ps (since {} ps): {}",
            d.detected_ps,
            d.since_ps,
            d.cycle.join(" -> ")
        );
    }
    if let Some(p) = json {
        std::fs::write(&p, r.to_json()).expect("write JSON");
    }
    if let Some(d) = csv {
        std::fs::create_dir_all(&d).expect("create CSV dir");
        std::fs::write(d.join("flows.csv"), r.flows_csv()).expect("write");
        std::fs::write(d.join("ports.csv"), r.ports_csv()).expect("write");
        std::fs::write(d.join("queues.csv"), r.queues_csv()).expect("write");
        std::fs::write(d.join("throughput.csv"), r.throughput_csv()).expect("write");
    }
}
