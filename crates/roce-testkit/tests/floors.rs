//! The `floors` example (benches/side_by_side.py's memcpy and pipe
//! floors) runs and prints figures that make sense.

use std::process::Command;
use std::time::Duration;

use roce_testkit::{example, run_bounded, text_of};

/// The number after `"key": ` in the example's one-line JSON object.
fn field(line: &str, key: &str) -> f64 {
    let at = line
        .find(&format!("\"{key}\": "))
        .unwrap_or_else(|| panic!("{key} in {line}"));
    line[at + key.len() + 4..]
        .split([',', '}'])
        .next()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("{key}'s value in {line}"))
}

#[test]
fn floors_prints_a_copy_rate_and_pipe_round_trips() {
    let mut c = Command::new(example("floors"));
    c.arg("500");
    let out = run_bounded(c, Duration::from_secs(60));
    assert!(out.status.success(), "{}", text_of(&out));
    let line = String::from_utf8_lossy(&out.stdout);
    let line = line.trim();
    assert_eq!(field(line, "pipe_round_trips"), 500.0, "{line}");
    assert!(field(line, "memcpy_64k_gb_per_sec") > 0.0, "{line}");
    let (min, p50, p99) = (
        field(line, "pipe_rtt_usec_min"),
        field(line, "pipe_rtt_usec_p50"),
        field(line, "pipe_rtt_usec_p99"),
    );
    assert!(0.0 < min && min <= p50 && p50 <= p99, "{line}");
}
