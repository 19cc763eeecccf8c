//! Two floors of this machine that the stack's same-host figures are
//! weighed against (docs/performance.md, "Side by side"; issue-level
//! targets in `benches/side_by_side.py`):
//!
//! * `memcpy`: one core copying 64 KiB from one buffer to another, the
//!   limit of any transport that moves a 64 KiB RDMA WRITE with at least
//!   one copy; printed in GB/s.
//! * `pipe`: two processes passing one byte back and forth over two
//!   pipes with blocking reads: each round trip is two sleeps and two
//!   wake-ups by the kernel, the least a completion-event ping-pong
//!   (`ibv_rc_pingpong -e`: both sides block in `ibv_get_cq_event`) can
//!   cost; printed as the median round trip in microseconds.
//!
//! `cargo run --release -p roce-testkit --example floors [-- ROUND_TRIPS]`
//! prints one JSON object: `{"memcpy_64k_gb_per_sec": .., "pipe_rtt_usec_p50": .., ...}`.

use std::io::{Read, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The copy size: what `ib_write_bw -s 65536` moves per WRITE.
const COPY: usize = 64 * 1024;
/// How long the copy loop runs.
const COPY_TIME: Duration = Duration::from_millis(500);

fn memcpy_rate() -> f64 {
    // Two pairs of buffers, alternated, so no copy is of a line the last
    // one just wrote (as in a ring of several slots).
    let src = [vec![1u8; COPY], vec![2u8; COPY]];
    let mut dst = [vec![0u8; COPY], vec![0u8; COPY]];
    let mut bytes = 0usize;
    let start = Instant::now();
    let mut i = 0usize;
    while start.elapsed() < COPY_TIME {
        for _ in 0..64 {
            let k = i & 1;
            dst[k].copy_from_slice(std::hint::black_box(&src[k]));
            std::hint::black_box(&dst[k]);
            i += 1;
            bytes += COPY;
        }
    }
    bytes as f64 / start.elapsed().as_secs_f64() / 1e9
}

/// The echoing side: reads a byte from stdin, writes it to stdout, until
/// end of file.
fn echo() -> std::io::Result<()> {
    let mut input = std::io::stdin().lock();
    let mut output = std::io::stdout().lock();
    let mut b = [0u8; 1];
    while input.read(&mut b)? == 1 {
        output.write_all(&b)?;
        output.flush()?;
    }
    Ok(())
}

fn pipe_round_trips(n: usize) -> std::io::Result<Vec<f64>> {
    let me = std::env::current_exe()?;
    let mut child = Command::new(me)
        .arg("--echo")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()?;
    let (Some(mut to), Some(mut from)) = (child.stdin.take(), child.stdout.take()) else {
        return Err(std::io::Error::other("no pipes to the echo process"));
    };
    let mut out = Vec::with_capacity(n);
    let mut b = [7u8; 1];
    // A few round trips first: the child's start-up is not a wake-up.
    for i in 0..n + 100 {
        let t = Instant::now();
        to.write_all(&b)?;
        from.read_exact(&mut b)?;
        if i >= 100 {
            out.push(t.elapsed().as_secs_f64() * 1e6);
        }
    }
    drop(to);
    child.wait()?;
    out.sort_by(f64::total_cmp);
    Ok(out)
}

fn main() -> std::io::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "--echo") {
        return echo();
    }
    let n: usize = args
        .iter()
        .find_map(|a| a.parse().ok())
        .unwrap_or(20_000)
        .max(1);
    let gbs = memcpy_rate();
    let rtt = pipe_round_trips(n)?;
    let pct = |p: usize| rtt[(rtt.len() - 1) * p / 100];
    println!(
        "{{\"memcpy_64k_gb_per_sec\": {gbs:.2}, \"pipe_round_trips\": {n}, \
         \"pipe_rtt_usec_p50\": {:.2}, \"pipe_rtt_usec_min\": {:.2}, \"pipe_rtt_usec_p99\": {:.2}}}",
        pct(50),
        rtt[0],
        pct(99)
    );
    Ok(())
}
