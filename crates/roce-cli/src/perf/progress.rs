//! Progress of a run while it lasts, on stderr: a bar on a terminal (of
//! the time for `-D`, of the iterations otherwise, once a run has lasted
//! a second), and when stderr is not a terminal a line every few seconds
//! for runs that count iterations (the table comes only at the end, and a
//! run under `--faults loss=...` can take minutes).

use std::io::IsTerminal;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};

/// How often a progress line is printed off a terminal
/// (`--progress-every`); `None` prints no progress at all (`--json`).
pub(crate) fn interval(args: &super::args::PerfArgs) -> Option<Duration> {
    (!args.json && args.progress_every > 0.0 && args.progress_every < 1e6)
        .then(|| Duration::from_secs_f64(args.progress_every))
}

/// How long an iteration run lasts before its bar appears.
const BAR_AFTER: Duration = Duration::from_secs(1);

/// The progress of one size of one side.
pub(crate) struct Progress {
    start: Instant,
    /// `-D`: the run's length in seconds.
    duration: Option<f64>,
    /// Iterations to do in all (counted runs of the side that counts).
    total: Option<u64>,
    size: u64,
    tty: bool,
    every: Option<Duration>,
    bar: Option<ProgressBar>,
    next_line: Instant,
    ticks: u32,
}

impl Progress {
    /// Progress of a run of `duration` seconds, or of `total` operations
    /// of `size` bytes (`None`: this side does not count them), with a
    /// line every `every` off a terminal ([`interval`]; `None`: silent).
    pub(crate) fn new(
        duration: Option<f64>,
        total: Option<u64>,
        size: u64,
        every: Option<Duration>,
    ) -> Progress {
        let start = Instant::now();
        let tty = every.is_some() && std::io::stderr().is_terminal();
        let bar = match duration {
            Some(d) if tty => {
                let pb = ProgressBar::new((d * 1000.0) as u64);
                if let Ok(st) = ProgressStyle::with_template("{bar:40} {elapsed_precise} / {msg}") {
                    pb.set_style(st);
                }
                pb.set_message(format!("{d:.0}s"));
                Some(pb)
            }
            _ => None,
        };
        Progress {
            start,
            duration,
            total: total.filter(|_| duration.is_none()),
            size,
            tty,
            every,
            bar,
            next_line: start + every.unwrap_or(Duration::MAX / 4),
            ticks: 0,
        }
    }

    /// After `done` operations; reads the clock every 16th call.
    pub(crate) fn tick(&mut self, done: u64) {
        self.ticks = self.ticks.wrapping_add(1);
        if self.every.is_none() || !self.ticks.is_multiple_of(16) {
            return;
        }
        let now = Instant::now();
        let elapsed = now - self.start;
        if self.duration.is_some() {
            if let Some(pb) = &self.bar {
                pb.set_position(elapsed.as_millis() as u64);
            }
            return;
        }
        let Some(total) = self.total else {
            return;
        };
        if self.tty {
            if self.bar.is_none() && elapsed >= BAR_AFTER {
                let pb = ProgressBar::new(total);
                if let Ok(st) = ProgressStyle::with_template(
                    "{bar:40} {pos}/{len} iterations {elapsed_precise} {msg}",
                ) {
                    pb.set_style(st);
                }
                self.bar = Some(pb);
            }
            if let Some(pb) = &self.bar {
                pb.set_position(done);
                pb.set_message(rate(done, self.size, elapsed));
            }
        } else if now >= self.next_line {
            if let Some(every) = self.every {
                self.next_line = now + every;
            }
            // Not "roce perf: ...", which introduces errors.
            eprintln!(
                "[{} B: {done} of {total} iterations ({}%) in {:.1} s, {}]",
                self.size,
                done * 100 / total.max(1),
                elapsed.as_secs_f64(),
                rate(done, self.size, elapsed)
            );
        }
    }

    /// Clears the bar.
    pub(crate) fn finish(self) {
        if let Some(pb) = self.bar {
            pb.finish_and_clear();
        }
    }
}

/// The rate so far, as the table reports it (MB/sec: 2^20 bytes).
fn rate(done: u64, size: u64, elapsed: Duration) -> String {
    let secs = elapsed.as_secs_f64().max(1e-9);
    format!(
        "{:.2} MB/sec so far",
        (done * size) as f64 / secs / 1_048_576.0
    )
}
