//! Helpers shared by the simulator's integration tests.
#![allow(dead_code, unreachable_pub)]

use roce_sim::*;

pub const US: Ps = 1_000_000;
pub const MS: Ps = 1_000_000_000;

/// A quiet metrics config (no periodic sampling unless asked).
pub fn quiet() -> MetricsConfig {
    MetricsConfig {
        sample_interval: 0,
        throughput_bin: 0,
        deadlock_check: 0,
        ..MetricsConfig::default()
    }
}

pub fn flow(src: u32, dst: u32, size: u64, start: Ps) -> FlowSpec {
    FlowSpec {
        src,
        dst,
        size,
        start,
        dscp: 26,
    }
}

pub fn run_sim(
    topo: &Topology,
    fabric: FabricConfig,
    metrics: MetricsConfig,
    flows: Vec<FlowSpec>,
    end: Ps,
    seed: u64,
) -> Results {
    let mut sim = Simulation::new(
        "test",
        topo,
        fabric,
        HostConfig::default(),
        metrics,
        flows,
        seed,
    );
    sim.run(end, |_| {});
    sim.results()
}
