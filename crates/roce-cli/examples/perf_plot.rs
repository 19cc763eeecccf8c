//! Bandwidth vs message size of `roce perf write-bw -a` for several QP
//! counts, drawn as an SVG (the plot in `docs/`).
//!
//! ```text
//! cargo build --release -p roce-cli --bin roce --example perf_plot
//! target/release/examples/perf_plot --out docs/perf-write-bw.svg
//! ```
//!
//! Runs `roce perf write-bw --loopback -a -q Q --json` (UDP backend on
//! loopback) for each `Q` of `--qps` (default 1,2,4,8), one after the
//! other, prints the figures as a table and draws bandwidth (Gbit/s)
//! against message size (log scale). `--roce PATH` picks the binary
//! (default: `roce` next to the `examples/` directory this program runs
//! from); arguments after `--` are passed to every `roce perf` run.

use std::path::PathBuf;
use std::process::Command;

use plotters::prelude::*;

struct Opts {
    roce: PathBuf,
    out: PathBuf,
    qps: Vec<u32>,
    iters: u64,
    extra: Vec<String>,
}

fn usage() -> ! {
    eprintln!(
        "usage: perf_plot [--roce PATH] [--out FILE.svg] [--qps 1,2,4,8] [--iters N] [-- ROCE PERF ARGS]"
    );
    std::process::exit(2)
}

fn opts() -> Opts {
    let default_roce = std::env::current_exe()
        .ok()
        .and_then(|p| Some(p.parent()?.parent()?.join("roce")))
        .unwrap_or_else(|| PathBuf::from("roce"));
    let mut o = Opts {
        roce: default_roce,
        out: PathBuf::from("docs/perf-write-bw.svg"),
        qps: vec![1, 2, 4, 8],
        iters: 200,
        extra: Vec::new(),
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut val = || args.next().unwrap_or_else(|| usage());
        match a.as_str() {
            "--roce" => o.roce = PathBuf::from(val()),
            "--out" => o.out = PathBuf::from(val()),
            "--qps" => {
                o.qps = val()
                    .split(',')
                    .map(|q| q.parse().unwrap_or_else(|_| usage()))
                    .collect()
            }
            "--iters" => o.iters = val().parse().unwrap_or_else(|_| usage()),
            "--" => {
                o.extra = args.by_ref().collect();
            }
            _ => usage(),
        }
    }
    o
}

/// One curve: (bytes, Gbit/s) per size.
fn run(o: &Opts, qps: u32) -> Result<Vec<(u64, f64)>, String> {
    let port = (19_000 + std::process::id() % 1000 + qps).to_string();
    let out = Command::new(&o.roce)
        .args(["perf", "write-bw", "--loopback", "-a", "--json"])
        .args([
            "-q",
            &qps.to_string(),
            "-n",
            &o.iters.to_string(),
            "-p",
            &port,
        ])
        .args(&o.extra)
        .output()
        .map_err(|e| format!("{}: {e}", o.roce.display()))?;
    if !out.status.success() {
        return Err(format!(
            "roce perf -q {qps}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let v: serde_json::Value = serde_json::from_str(text.lines().last().unwrap_or(""))
        .map_err(|e| format!("roce perf -q {qps}: not JSON: {e}"))?;
    Ok(v["results"]
        .as_array()
        .ok_or("no results")?
        .iter()
        .filter_map(|r| Some((r["bytes"].as_u64()?, r["bw_avg_gbit_per_sec"].as_f64()?)))
        .collect())
}

fn size_label(b: f64) -> String {
    let b = b.round() as u64;
    match b {
        b if b >= 1 << 20 => format!("{}M", b >> 20),
        b if b >= 1 << 10 => format!("{}K", b >> 10),
        b => b.to_string(),
    }
}

fn draw(o: &Opts, curves: &[(u32, Vec<(u64, f64)>)]) -> Result<(), Box<dyn std::error::Error>> {
    let ymax = curves
        .iter()
        .flat_map(|(_, c)| c.iter().map(|p| p.1))
        .fold(1.0f64, f64::max)
        * 1.1;
    let root = SVGBackend::new(&o.out, (900, 560)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            "roce perf write-bw -a --loopback (UDP backend)",
            ("sans-serif", 22),
        )
        .margin(16)
        .x_label_area_size(48)
        .y_label_area_size(64)
        .build_cartesian_2d((2f64..(8u64 << 20) as f64).log_scale(), 0f64..ymax)?;
    chart
        .configure_mesh()
        .x_desc("message size [bytes]")
        .y_desc("bandwidth [Gbit/s]")
        .x_label_formatter(&|x| size_label(*x))
        .y_label_formatter(&|y| format!("{y:.1}"))
        .draw()?;
    let colors = [BLUE, RED, GREEN, MAGENTA, CYAN, BLACK];
    for (k, (q, c)) in curves.iter().enumerate() {
        let color = colors[k % colors.len()];
        let pts: Vec<(f64, f64)> = c.iter().map(|&(b, g)| (b as f64, g)).collect();
        chart
            .draw_series(LineSeries::new(pts.clone(), color.stroke_width(2)))?
            .label(format!("-q {q}"))
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color));
        chart.draw_series(pts.iter().map(|&p| Circle::new(p, 3, color.filled())))?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()?;
    root.present()?;
    Ok(())
}

fn main() {
    let o = opts();
    let mut curves = Vec::new();
    for &q in &o.qps {
        let t0 = std::time::Instant::now();
        match run(&o, q) {
            Ok(c) => {
                eprintln!(
                    "-q {q}: {} sizes in {:.1} s",
                    c.len(),
                    t0.elapsed().as_secs_f64()
                );
                curves.push((q, c));
            }
            Err(e) => {
                eprintln!("perf_plot: {e}");
                std::process::exit(1);
            }
        }
    }
    print!("{:>10}", "bytes");
    for (q, _) in &curves {
        print!("  {:>10}", format!("-q {q} Gb/s"));
    }
    println!();
    if let Some((_, first)) = curves.first() {
        for (i, (bytes, _)) in first.iter().enumerate() {
            print!("{bytes:>10}");
            for (_, c) in &curves {
                print!("  {:>10.3}", c.get(i).map_or(f64::NAN, |p| p.1));
            }
            println!();
        }
    }
    if let Some(dir) = o.out.parent().filter(|d| !d.as_os_str().is_empty()) {
        let _ = std::fs::create_dir_all(dir);
    }
    if let Err(e) = draw(&o, &curves) {
        eprintln!("perf_plot: cannot draw {}: {e}", o.out.display());
        std::process::exit(1);
    }
    eprintln!("wrote {}", o.out.display());
}
