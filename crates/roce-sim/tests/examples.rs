//! The example runs a shipped scenario and prints its summary.

use std::process::Command;
use std::time::Duration;

use roce_testkit::{example, run_bounded, text};

#[test]
fn run_scenario_summarises_a_shipped_scenario() {
    let scenario = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../scenarios/incast_2to1_dcqcn.toml"
    );
    let mut c = Command::new(example("run_scenario"));
    c.args([scenario, "--duration", "2ms"]);
    let o = run_bounded(c, Duration::from_secs(120));
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}{err}");
    assert!(out.contains("ms simulated"), "{out}");
    assert!(out.contains("flows "), "{out}");
    assert!(out.contains("PFC XOFF sent per priority"), "{out}");
}
