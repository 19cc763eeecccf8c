//! PFC deadlock on a cyclic buffer dependency: detection and the watchdog.

mod common;
use common::*;
use roce_sim::*;

/// Three switches in a ring, one host each, routes forced clockwise: every
/// host writes to the host two switches ahead, so each ring link carries
/// two flows and every ring egress queue waits on the next switch.
fn ring_case(watchdog: Option<WatchdogConfig>, end: Ps) -> Results {
    let topo = Topology::ring(3, 1, gbps(100), US, true);
    let mut fabric = FabricConfig::default();
    fabric.buffer.xoff = Xoff::Static(40_000);
    fabric.watchdog = watchdog;
    let mut m = quiet();
    m.deadlock_check = 5 * US;
    m.deadlock_after = 50 * US;
    m.throughput_bin = 50 * US;
    let flows = vec![
        flow(0, 2, 20_000_000, 0),
        flow(1, 0, 20_000_000, 0),
        flow(2, 1, 20_000_000, 0),
    ];
    let host = HostConfig {
        qp_timeout: 6,
        ..HostConfig::default()
    };
    let mut sim = Simulation::new("ring", &topo, fabric, host, m, flows, 1);
    sim.run(end, |_| {});
    sim.results()
}

#[test]
fn ring_deadlocks_and_is_reported() {
    let r = ring_case(None, 2 * MS);
    assert_eq!(r.drops.total(), 0);
    assert_eq!(r.deadlocks.len(), 1, "{:?}", r.deadlocks);
    let d = &r.deadlocks[0];
    assert_eq!(d.cycle.len(), 3, "{:?}", d.cycle);
    assert!(d.cycle.iter().all(|q| q.ends_with(":prio3")));
    // Nothing moves after the deadlock.
    assert_eq!(r.flows_completed, 0);
    let last_bins: u64 = r
        .throughput
        .iter()
        .map(|s| s.bytes.iter().skip(30).sum::<u64>())
        .sum();
    assert_eq!(last_bins, 0, "traffic after the deadlock");
}

#[test]
fn watchdog_breaks_the_deadlock() {
    let wd = WatchdogConfig {
        poll: 20 * US,
        detect: 2,
        restore: 100 * US,
    };
    let r = ring_case(Some(wd), 10 * MS);
    assert!(!r.watchdog.is_empty());
    assert!(r.drops.watchdog > 0);
    assert_eq!(r.drops.total(), r.drops.watchdog);
    assert!(r.engine.retransmitted > 0);
    let stuck = ring_case(None, 10 * MS);
    let moved = |r: &Results| -> u64 {
        r.throughput
            .iter()
            .map(|s| s.bytes.iter().sum::<u64>())
            .sum()
    };
    assert!(
        moved(&r) > 3 * moved(&stuck),
        "{} vs {}",
        moved(&r),
        moved(&stuck)
    );
}
