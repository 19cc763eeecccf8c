//! ETS bandwidth shares, strict priority, ECN marking end to end.

mod common;
use common::*;
use roce_sim::*;

/// h1 (priority 0) and h2 (priority 3) each send 4 MB to h0 at 100 G:
/// the egress to h0 is congested and split by ETS.
fn share_of_tc0(ets: &str) -> f64 {
    let topo = Topology::star(3, gbps(100), US);
    let mut fabric = FabricConfig::default();
    fabric.dcb.set_pfc("prio-pfc all:off 0:on 3:on").unwrap();
    fabric.dcb.set_ets(ets).unwrap();
    let mut m = quiet();
    m.throughput_bin = 50 * US;
    let mut f0 = flow(1, 0, 4_000_000, 0);
    f0.dscp = 0;
    let f3 = flow(2, 0, 4_000_000, 0);
    let r = run_sim(&topo, fabric, m, vec![f0, f3], 3 * MS, 1);
    assert_eq!(r.drops.total(), 0);
    // Bins 1..6 = 50..300 µs: both classes backlogged.
    let r0 = r.series(1, 0, 0).unwrap().rate_bps(1, 6);
    let r3 = r.series(2, 0, 3).unwrap().rate_bps(1, 6);
    assert!(
        r0 + r3 > 0.9 * 100e9 * 1024.0 / 1106.0,
        "link not saturated: {r0} + {r3}"
    );
    eprintln!("{ets}: tc0 {r0:.3e} tc3 {r3:.3e}");
    r0 / (r0 + r3)
}

#[test]
fn ets_50_50_split() {
    let s = share_of_tc0("prio-tc 3:3 6:6 tc-tsa all:strict 0:ets 3:ets tc-bw 0:50 3:50");
    assert!((s - 0.5).abs() < 0.02, "tc0 share {s}");
}

#[test]
fn ets_70_30_split() {
    let s = share_of_tc0("prio-tc 3:3 6:6 tc-tsa all:strict 0:ets 3:ets tc-bw 0:70 3:30");
    assert!((s - 0.7).abs() < 0.02, "tc0 share {s}");
}

/// Small flows from h2 to h0 while h1 floods h0 at priority 3: at DSCP 48
/// (priority 6, strict) they pass the queue; at DSCP 26 they wait in it.
/// (h1 and h2 flood h0, h3 sends the small flows.)
fn small_flow_slowdowns(dscp: u8) -> Vec<f64> {
    let topo = Topology::star(4, gbps(100), US);
    let mut flows = vec![flow(1, 0, 8_000_000, 0), flow(2, 0, 8_000_000, 0)];
    for i in 0..10 {
        let mut f = flow(3, 0, 10_000, 100 * US + i * 20 * US);
        f.dscp = dscp;
        flows.push(f);
    }
    let r = run_sim(&topo, FabricConfig::default(), quiet(), flows, 5 * MS, 1);
    assert_eq!(r.drops.total(), 0);
    r.flows[2..]
        .iter()
        .map(|f| f.slowdown.expect("completed"))
        .collect()
}

#[test]
fn strict_priority_is_not_delayed_behind_ets_data() {
    let strict = small_flow_slowdowns(48);
    let ets = small_flow_slowdowns(26);
    eprintln!("strict {strict:?}\nets {ets:?}");
    let worst = strict.iter().cloned().fold(0.0, f64::max);
    assert!(worst < 1.1, "strict slowdowns {strict:?}");
    let best_ets = ets.iter().cloned().fold(f64::MAX, f64::min);
    assert!(
        best_ets > 3.0,
        "ets-class small flows should queue: {ets:?}"
    );
}

#[test]
fn ecn_marks_reach_the_engine_with_valid_checksums() {
    let topo = Topology::star(5, gbps(40), US);
    let mut fabric = FabricConfig::default();
    fabric.ecn[3] = Some(EcnTc {
        kmin: 5_000,
        kmax: 200_000,
        pmax: 0.01,
    });
    let flows = (1..5).map(|s| flow(s, 0, 1_000_000, 0)).collect();
    let r = run_sim(&topo, fabric, quiet(), flows, 5 * MS, 1);
    let marked: u64 = r.ports.iter().map(|p| p.ecn_marked[3]).sum();
    assert!(marked > 0);
    assert_eq!(r.engine.rx_ce, marked, "every mark arrives");
    assert_eq!(r.engine.rx_bad_icrc + r.engine.rx_malformed, 0);
    assert_eq!(r.flows_completed, 4);
}
