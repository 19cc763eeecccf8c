//! PFC: lossless incast, lossy drops, pause accounting, congestion
//! spreading.

mod common;
use common::*;
use roce_sim::*;

fn incast_flows(n: u32, size: u64) -> Vec<FlowSpec> {
    (1..=n).map(|s| flow(s, 0, size, 10 * US)).collect()
}

#[test]
fn incast_8_to_1_with_pfc_is_lossless_and_pauses() {
    let topo = Topology::star(9, gbps(40), US);
    let mut fabric = FabricConfig::default();
    fabric.buffer.size = 4_000_000;
    let r = run_sim(&topo, fabric, quiet(), incast_flows(8, 500_000), 5 * MS, 1);
    assert_eq!(r.drops.total(), 0, "{:?}", r.drops);
    assert_eq!(r.flows_completed, 8);
    let xoff = r.pfc_xoff_sent();
    assert!(xoff[3] > 0, "{xoff:?}");
    assert_eq!(xoff.iter().sum::<u64>(), xoff[3], "only priority 3 pauses");
    // The senders' NICs were paused; the receiver never was.
    let paused: u64 = (1..=8)
        .map(|h| r.port(&format!("h{h}"), 0).unwrap().paused_ps[3])
        .sum();
    assert!(paused > 0);
    assert_eq!(r.port("h0", 0).unwrap().paused_ps[3], 0);
    assert_eq!(r.engine.retransmitted, 0);
    // 4 MB at 40 G takes ≥ 800 µs; the receiver link was the bottleneck.
    let last = r.flows.iter().filter_map(|f| f.end_ps).max().unwrap();
    let ideal_all: u64 = 8 * 500_000 * 8 * 1_000_000 / 40_000; // ps at 40 Gb/s
    assert!(
        last as f64 > ideal_all as f64 * 1.05 && (last as f64) < ideal_all as f64 * 1.15,
        "{last}"
    );
}

#[test]
fn incast_without_pfc_and_small_buffer_drops_with_cause() {
    let topo = Topology::star(9, gbps(40), US);
    let mut fabric = FabricConfig::default();
    fabric.dcb.set_pfc("prio-pfc all:off").unwrap();
    fabric.buffer.size = 200_000;
    let r = run_sim(&topo, fabric, quiet(), incast_flows(8, 200_000), 2 * MS, 1);
    assert!(r.drops.buffer_overflow > 0, "{:?}", r.drops);
    assert_eq!(r.drops.headroom_exceeded + r.drops.watchdog, 0);
    assert_eq!(r.drops.total(), r.drops_by_switch["sw0"].total());
    assert_eq!(r.pfc_xoff_sent(), [0; 8]);
    assert!(
        r.engine.seq_naks > 0 || r.engine.timeouts > 0,
        "RC recovers: {:?}",
        r.engine
    );
}

#[test]
fn headroom_too_small_drops_lossless_packets() {
    let topo = Topology::star(9, gbps(40), 5 * US);
    let mut fabric = FabricConfig::default();
    fabric.buffer.headroom = Headroom::Bytes(2_000);
    fabric.buffer.xoff = Xoff::Static(20_000);
    let r = run_sim(&topo, fabric, quiet(), incast_flows(8, 200_000), MS, 1);
    assert!(r.drops.headroom_exceeded > 0, "{:?}", r.drops);
}

#[test]
fn short_pauses_are_refreshed_and_bounded() {
    // XOFF frames of 100 quanta at 40 G pause for 100 × 512 / 40e9 =
    // 1.28 µs each; the switch refreshes them while congested, and no
    // frame pauses a sender for longer than its own quanta.
    let topo = Topology::star(3, gbps(40), US);
    let mut fabric = FabricConfig {
        pfc_quanta: 100,
        ..FabricConfig::default()
    };
    fabric.buffer.xoff = Xoff::Static(30_000);
    let r = run_sim(
        &topo,
        fabric,
        quiet(),
        vec![flow(1, 0, 300_000, 0), flow(2, 0, 300_000, 0)],
        2 * MS,
        1,
    );
    assert_eq!(r.drops.total(), 0);
    let per_quantum = 512 * 1_000_000_000_000u64 / 40_000_000_000;
    for h in ["h1", "h2"] {
        let p = r.port(h, 0).unwrap();
        assert!(p.pfc_rx[3] > 0);
        assert!(
            p.paused_ps[3] <= p.pfc_rx[3] * 100 * per_quantum,
            "{h}: paused {} ps for {} frames",
            p.paused_ps[3],
            p.pfc_rx[3]
        );
    }
}

#[test]
fn congestion_spreads_to_a_victim_flow() {
    // Left: h0 (victim sender), h1..h3; right: h4 (incast receiver), h5
    // (victim receiver), h6..h9 more incast senders. The victim shares
    // only the left→right link with the incast, yet PFC from the right
    // switch pauses that link.
    let topo = Topology::dumbbell(4, 6, gbps(40), gbps(40), US);
    let mut flows = vec![flow(0, 5, 2_000_000, 0)];
    for s in [1, 2, 3, 6, 7, 8, 9] {
        flows.push(flow(s, 4, 2_000_000, 0));
    }
    let mut m = quiet();
    m.throughput_bin = 50 * US;
    let fabric = FabricConfig::default();
    let alone = run_sim(
        &topo,
        fabric.clone(),
        m.clone(),
        vec![flow(0, 5, 2_000_000, 0)],
        5 * MS,
        1,
    );
    let r = run_sim(&topo, fabric, m, flows, 5 * MS, 1);
    assert_eq!(r.drops.total(), 0);
    let v = r.flows[0].fct_ps.unwrap();
    let v_alone = alone.flows[0].fct_ps.unwrap();
    assert!(v > 2 * v_alone, "victim FCT {v} vs alone {v_alone}");
    let left_up = r.port("left", 4).unwrap();
    assert!(left_up.pfc_rx[3] > 0 && left_up.paused_ps[3] > 0);
}
