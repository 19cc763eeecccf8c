//! SVG plots of a run with plotters' SVG backend: throughput per flow,
//! queue length, pause timeline, FCT slowdown by size.

use std::collections::BTreeMap;
use std::path::Path;

use plotters::coord::Shift;
use plotters::prelude::*;
use roce_sim::config::{FabricConfig, Xoff};
use roce_sim::Results;

type Res = Result<(), Box<dyn std::error::Error>>;
type Area<'a> = DrawingArea<SVGBackend<'a>, Shift>;

const W: u32 = 960;
const H: u32 = 540;
/// Most lines in one plot (the largest by volume are kept).
const MAX_LINES: usize = 24;

fn io(e: Box<dyn std::error::Error>) -> std::io::Error {
    std::io::Error::other(e.to_string())
}

/// Writes throughput.svg, queues.svg, pauses.svg and slowdown.svg;
/// `fabric` gives the thresholds the queue plot marks.
pub(super) fn write_all(dir: &Path, r: &Results, fabric: &FabricConfig) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    throughput(&dir.join("throughput.svg"), r).map_err(io)?;
    queues(&dir.join("queues.svg"), r, fabric).map_err(io)?;
    pauses(&dir.join("pauses.svg"), r).map_err(io)?;
    slowdown(&dir.join("slowdown.svg"), r).map_err(io)?;
    Ok(())
}

fn end_ms(r: &Results) -> f64 {
    (r.sim_time_ps as f64 / 1e9).max(1e-6)
}

/// A white canvas `h` pixels high.
fn canvas(path: &Path, h: u32) -> Result<Area<'_>, Box<dyn std::error::Error>> {
    let root = SVGBackend::new(path, (W, h)).into_drawing_area();
    root.fill(&WHITE)?;
    Ok(root)
}

/// The frame all plots share: the caption `"<scenario>: <what>"`, margins
/// and label areas (`y_area` pixels wide for the y labels).
fn frame<'a, 'b>(
    root: &'a Area<'b>,
    r: &Results,
    what: &str,
    y_area: u32,
) -> ChartBuilder<'a, 'b, SVGBackend<'b>> {
    let mut b = ChartBuilder::on(root);
    b.caption(format!("{}: {what}", r.name), ("sans-serif", 22))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(y_area);
    b
}

/// The boxed series legend at `pos`.
fn legend<'a, CT: CoordTranslate>(
    c: &mut ChartContext<'a, SVGBackend<'a>, CT>,
    pos: SeriesLabelPosition,
) -> Res {
    c.configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .position(pos)
        .draw()?;
    Ok(())
}

/// Width of the legend column right of the plots (so that the legend
/// never covers the data).
const SIDE: u32 = 250;

/// The plot area and the legend column of a canvas.
fn with_side<'a>(root: &Area<'a>) -> (Area<'a>, Area<'a>) {
    root.split_horizontally(W - SIDE)
}

/// A legend in the column right of the plot: one line key and label per
/// entry, in the order given.
fn side_legend(side: &Area<'_>, entries: &[(String, ShapeStyle)]) -> Res {
    let text = ("sans-serif", 13).into_text_style(side);
    for (i, (label, style)) in entries.iter().enumerate() {
        let y = 50 + 18 * i as i32;
        side.draw(&PathElement::new([(4, y), (24, y)], *style))?;
        side.draw(&Text::new(label.clone(), (30, y - 7), text.clone()))?;
    }
    Ok(())
}

/// "h2" before "h10": names compared by their numbers.
fn natural(s: &str) -> Vec<(String, u64)> {
    let mut out = Vec::new();
    let mut text = String::new();
    let mut num: Option<u64> = None;
    for c in s.chars() {
        match (c.to_digit(10), num) {
            (Some(d), n) => num = Some(n.unwrap_or(0) * 10 + u64::from(d)),
            (None, Some(n)) => {
                out.push((std::mem::take(&mut text), n));
                num = None;
                text.push(c);
            }
            (None, None) => text.push(c),
        }
    }
    out.push((text, num.unwrap_or(0)));
    out
}

/// A legend key for a line series: a short stroke in `style`.
fn line_key(style: ShapeStyle) -> impl Fn((i32, i32)) -> PathElement<(i32, i32)> {
    move |(x, y)| PathElement::new([(x, y), (x + 16, y)], style)
}

fn empty(path: &Path, title: &str, what: &str) -> Res {
    let root = canvas(path, H)?;
    root.titled(title, ("sans-serif", 22))?.draw_text(
        what,
        &("sans-serif", 16).into_text_style(&root),
        (40, 40),
    )?;
    root.present()?;
    Ok(())
}

fn throughput(path: &Path, r: &Results) -> Res {
    let mut series: Vec<_> = r.throughput.iter().collect();
    if series.is_empty() {
        return empty(
            path,
            "Throughput per flow",
            "no throughput bins (metrics.throughput_bin = 0)",
        );
    }
    series.sort_by_key(|s| std::cmp::Reverse(s.bytes.iter().sum::<u64>()));
    series.truncate(MAX_LINES);
    // The largest kept, drawn and listed in flow order (h1, h2, ... h10).
    series.sort_by_key(|s| (s.src, s.dst, s.prio));
    let gbps =
        |s: &roce_sim::ThroughputSeries, b: u64| b as f64 * 8.0 / (s.bin_ps as f64 * 1e-12) / 1e9;
    let ymax = series
        .iter()
        .flat_map(|s| s.bytes.iter().map(move |&b| gbps(s, b)))
        .fold(1.0, f64::max)
        * 1.1;
    let canvas = canvas(path, H)?;
    let (root, side) = with_side(&canvas);
    let mut c = frame(
        &root,
        r,
        "throughput per flow, delivered (data arriving at the destination host)",
        60,
    )
    .build_cartesian_2d(0.0..end_ms(r), 0.0..ymax)?;
    c.configure_mesh()
        .x_desc("time (ms)")
        .y_desc("Gb/s delivered")
        .draw()?;
    let mut keys = Vec::new();
    for (i, s) in series.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        let bin_ms = s.bin_ps as f64 / 1e9;
        let pts = s
            .bytes
            .iter()
            .enumerate()
            .map(|(k, &b)| ((k as f64 + 0.5) * bin_ms, gbps(s, b)));
        let label = format!("h{}→h{} p{}", s.src, s.dst, s.prio);
        c.draw_series(LineSeries::new(pts, color.stroke_width(2)))?;
        keys.push((label, color.stroke_width(2)));
    }
    side_legend(&side, &keys)?;
    canvas.present()?;
    Ok(())
}

/// Switch names by index: the switch ports come first in `r.ports`, in
/// switch order.
fn switch_names(r: &Results) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for p in &r.ports {
        let host = p.node.starts_with('h') && p.node[1..].chars().all(|c| c.is_ascii_digit());
        if host {
            break;
        }
        if names.last() != Some(&p.node) {
            names.push(p.node.clone());
        }
    }
    names
}

fn queues(path: &Path, r: &Results, fabric: &FabricConfig) -> Res {
    let dt = r.sample_interval_ps;
    if dt == 0 || r.queue_samples.is_empty() {
        return empty(
            path,
            "Queue length",
            "no queue samples (metrics.sample_interval = 0 or queues stayed empty)",
        );
    }
    let mut by: BTreeMap<(u32, u16, u8), BTreeMap<u64, u64>> = BTreeMap::new();
    for q in &r.queue_samples {
        by.entry((q.switch, q.port, q.prio))
            .or_default()
            .insert(q.time_ps / dt, q.bytes);
    }
    let mut keys: Vec<_> = by
        .iter()
        .map(|(k, v)| (*k, v.values().copied().max().unwrap_or(0)))
        .collect();
    keys.sort_by_key(|&(_, m)| std::cmp::Reverse(m));
    keys.truncate(8);
    let names = switch_names(r);
    let sname = |sw: u32| {
        names
            .get(sw as usize)
            .cloned()
            .unwrap_or_else(|| format!("s{sw}"))
    };
    // The busiest kept, listed by switch, port and priority.
    keys.sort_by_key(|&((sw, port, prio), _)| (natural(&sname(sw)), port, prio));
    // The thresholds of the plotted priorities' classes: ECN Kmin/Kmax of
    // the egress, and where PFC pauses (XOFF, an ingress threshold).
    let mut marks: Vec<(String, f64, RGBColor)> = Vec::new();
    let mut prios: Vec<u8> = keys.iter().map(|k| k.0 .2).collect();
    prios.sort_unstable();
    prios.dedup();
    for &p in &prios {
        let tc = fabric.dcb.tc_of(p);
        if let Some(e) = fabric.ecn[usize::from(tc)] {
            marks.push((
                format!("Kmin tc{tc} {}", super::human_bytes(e.kmin as f64)),
                e.kmin as f64,
                GREEN,
            ));
            marks.push((
                format!("Kmax tc{tc} {}", super::human_bytes(e.kmax as f64)),
                e.kmax as f64,
                RED,
            ));
        }
    }
    if prios
        .iter()
        .any(|&p| fabric.dcb.pfc_enabled[usize::from(p & 7)])
    {
        let b = &fabric.buffer;
        let (label, at) = match b.xoff {
            Xoff::Static(x) => (
                format!("XOFF {} (ingress)", super::human_bytes(x as f64)),
                x as f64,
            ),
            Xoff::Dynamic(a) => {
                let x = a / (1.0 + a) * b.size as f64;
                (
                    format!(
                        "XOFF ≈{} (dynamic α={a}, one ingress)",
                        super::human_bytes(x)
                    ),
                    x,
                )
            }
        };
        marks.push((label, at, BLUE));
    }
    let data_max = keys.iter().map(|k| k.1).max().unwrap_or(1) as f64;
    // The thresholds show when they are within reach of the data.
    marks.retain(|m| m.1 <= data_max * 4.0);
    let ymax = marks.iter().map(|m| m.1).fold(data_max, f64::max) / 1e3 * 1.1;
    let ticks = r.sim_time_ps / dt;
    let canvas = canvas(path, H)?;
    let (root, side) = with_side(&canvas);
    let mut c = frame(&root, r, "egress queue length (the whole run)", 70)
        .build_cartesian_2d(0.0..end_ms(r), 0.0..ymax.max(1.0))?;
    c.configure_mesh().x_desc("time (ms)").y_desc("KB").draw()?;
    let mut legend_keys = Vec::new();
    for (label, at, color) in &marks {
        let style = color.mix(0.7).stroke_width(1);
        let y = at / 1e3;
        c.draw_series(DashedLineSeries::new(
            [(0.0, y), (end_ms(r), y)],
            6,
            4,
            style,
        ))?;
        legend_keys.push((label.clone(), style));
    }
    for (i, ((sw, port, prio), _)) in keys.iter().enumerate() {
        let m = &by[&(*sw, *port, *prio)];
        let color = Palette99::pick(i).to_rgba();
        let pts = (0..=ticks).map(|k| {
            (
                (k * dt) as f64 / 1e9,
                m.get(&k).copied().unwrap_or(0) as f64 / 1e3,
            )
        });
        let sname = sname(*sw);
        let peer = r
            .queue_stats
            .iter()
            .find(|q| q.switch == sname && q.port == *port)
            .map_or(String::new(), |q| format!("→{}", q.peer));
        c.draw_series(LineSeries::new(pts, color.stroke_width(2)))?;
        legend_keys.push((
            format!("{sname} port {port}{peer} prio {prio}"),
            color.stroke_width(2),
        ));
    }
    side_legend(&side, &legend_keys)?;
    canvas.present()?;
    Ok(())
}

fn pauses(path: &Path, r: &Results) -> Res {
    let dt = r.sample_interval_ps;
    let mut rows: Vec<_> = r.pauses.iter().collect();
    if dt == 0 || rows.is_empty() {
        return empty(
            path,
            "PFC pause timeline",
            "no transmitter was paused at any sampling instant",
        );
    }
    rows.sort_by_key(|p| std::cmp::Reverse(p.paused_at_ps.len()));
    rows.truncate(40);
    rows.sort_by(|a, b| (&a.node, a.port, a.prio).cmp(&(&b.node, b.port, b.prio)));
    let n = rows.len();
    let root = canvas(path, H.max(120 + 18 * n as u32))?;
    let labels: Vec<String> = rows
        .iter()
        .map(|p| format!("{}:{} p{}", p.node, p.port, p.prio))
        .collect();
    let mut c = frame(&root, r, "PFC pause timeline (paused transmitters)", 150)
        .build_cartesian_2d(0.0..end_ms(r), 0.0..n as f64)?;
    c.configure_mesh()
        .x_desc("time (ms)")
        .y_labels(0)
        .disable_y_mesh()
        .draw()?;
    let style = ("sans-serif", 13).into_text_style(&root);
    for (i, l) in labels.iter().enumerate() {
        let (px, py) = c.backend_coord(&(0.0, i as f64 + 0.5));
        root.draw_text(l, &style, (px - 140, py - 6))?;
    }
    let w = dt as f64 / 1e9;
    for (i, p) in rows.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba().filled();
        // Consecutive paused samples merge into one bar.
        let mut runs: Vec<(u64, u64)> = Vec::new();
        for &t in &p.paused_at_ps {
            match runs.last_mut() {
                Some(r) if t == r.1 + dt => r.1 = t,
                _ => runs.push((t, t)),
            }
        }
        c.draw_series(runs.iter().map(|&(a, b)| {
            let (x0, x1) = (a as f64 / 1e9, b as f64 / 1e9 + w);
            Rectangle::new([(x0, i as f64 + 0.15), (x1, i as f64 + 0.85)], color)
        }))?;
    }
    root.present()?;
    Ok(())
}

fn slowdown(path: &Path, r: &Results) -> Res {
    let pts: Vec<(f64, f64)> = r
        .flows
        .iter()
        .filter_map(|f| f.slowdown.map(|s| (f.size.max(1) as f64, s.max(1.0))))
        .collect();
    if pts.is_empty() {
        return empty(path, "FCT slowdown by flow size", "no flow completed");
    }
    let xmin = pts.iter().map(|p| p.0).fold(f64::MAX, f64::min) / 2.0;
    let xmax = pts.iter().map(|p| p.0).fold(1.0, f64::max) * 2.0;
    let ymax = pts.iter().map(|p| p.1).fold(2.0, f64::max) * 1.5;
    let root = canvas(path, H)?;
    let mut c = frame(&root, r, "FCT slowdown by flow size", 60)
        .build_cartesian_2d((xmin..xmax).log_scale(), (1.0..ymax).log_scale())?;
    c.configure_mesh()
        .x_desc("flow size (bytes)")
        .y_desc("slowdown (FCT / ideal)")
        .draw()?;
    c.draw_series(
        pts.iter()
            .map(|&p| Circle::new(p, 2, BLUE.mix(0.35).filled())),
    )?
    .label("flows")
    .legend(|(x, y)| Circle::new((x + 8, y), 3, BLUE.filled()));
    for (name, pick, color) in [
        ("p50 per bucket", 0usize, GREEN),
        ("p99 per bucket", 2usize, RED),
    ] {
        let line: Vec<(f64, f64)> = r
            .slowdown
            .iter()
            .filter_map(|b| {
                let v = [b.p50, b.p95, b.p99][pick]?;
                let lo = b.min_size.max(1) as f64;
                let hi = if b.max_size == u64::MAX {
                    xmax
                } else {
                    b.max_size as f64
                };
                Some(((lo * hi).sqrt().clamp(xmin, xmax), v.max(1.0)))
            })
            .collect();
        c.draw_series(LineSeries::new(line, color.stroke_width(3)))?
            .label(name)
            .legend(line_key(color.stroke_width(3)));
    }
    legend(&mut c, SeriesLabelPosition::UpperLeft)?;
    root.present()?;
    Ok(())
}
