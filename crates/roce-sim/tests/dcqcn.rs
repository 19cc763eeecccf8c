//! DCQCN in the fabric (docs/dcb.md §6): N:1 incast at 40 G converges to fair
//! shares with the bottleneck queue near the ECN band and PFC pauses rare;
//! without congestion control PFC pauses persist and spread to a victim
//! flow that only shares an upstream link.

mod common;
use common::*;
use roce_sim::*;

/// The DCQCN paper's 40 G marking: Kmin 5 KB, Kmax 200 KB, Pmax 1 %.
const KMAX: u64 = 200_000;

fn fabric() -> FabricConfig {
    let mut f = FabricConfig::default();
    f.buffer.size = 12_000_000;
    f.ecn[3] = Some(EcnTc {
        kmin: 5_000,
        kmax: KMAX,
        pmax: 0.01,
    });
    f
}

fn run(topo: &Topology, flows: Vec<FlowSpec>, cc: CcConfig, end: Ps, conv: Ps) -> Results {
    run_seeded(topo, flows, cc, end, conv, 1)
}

/// Runs until `end`, fairness measured from `conv`, with `seed`.
fn run_seeded(
    topo: &Topology,
    flows: Vec<FlowSpec>,
    cc: CcConfig,
    end: Ps,
    conv: Ps,
    seed: u64,
) -> Results {
    let host = HostConfig {
        cc,
        ..HostConfig::default()
    };
    let m = MetricsConfig {
        sample_interval: 5 * US,
        throughput_bin: 50 * US,
        deadlock_check: 0,
        convergence: conv,
        ..MetricsConfig::default()
    };
    let mut sim = Simulation::new("dcqcn", topo, fabric(), host, m, flows, seed);
    sim.run(end, |_| {});
    sim.results()
}

/// N long flows into host 0 of a 40 G star, for 10 ms; measured after 5 ms.
fn incast(n: u32, cc: CcConfig) -> Results {
    let topo = Topology::star(n + 1, gbps(40), US);
    let flows = (1..=n).map(|s| flow(s, 0, 1 << 30, 0)).collect();
    run(&topo, flows, cc, 10 * MS, 5 * MS)
}

fn bottleneck(r: &Results) -> &QueueStats {
    r.queue_stats
        .iter()
        .find(|q| q.switch == "sw0" && q.peer == "h0" && q.prio == 3)
        .expect("the bottleneck queue was sampled")
}

fn check_incast(n: u32) {
    let none = incast(n, CcConfig::default());
    let dcqcn = incast(n, CcConfig::dcqcn());
    for r in [&none, &dcqcn] {
        assert_eq!(r.drops.total(), 0, "{}: {:?}", r.cc, r.drops);
    }
    // Fair shares after convergence, and the link kept busy.
    let f = dcqcn.fairness.as_ref().expect("flows measured");
    assert_eq!(f.flows.len(), n as usize);
    let total: f64 = f.gbps.iter().sum();
    assert!(f.jain >= 0.95, "N={n}: Jain {} ({:?})", f.jain, f.gbps);
    assert!(total > 0.85 * 38.0, "N={n}: {total} Gb/s in all");
    // The queue stays near the ECN band: mostly at or below Kmax, and
    // nowhere near the XOFF threshold where PFC-only keeps it.
    let q = bottleneck(&dcqcn);
    let q0 = bottleneck(&none);
    let above = q.above_ecn_band.unwrap();
    assert!(above < 0.1, "N={n}: above Kmax {above} of the time: {q:?}");
    assert!(q.mean < KMAX as f64, "N={n}: {q:?}");
    assert!(q0.p50 > 10 * KMAX, "N={n} without CC: {q0:?}");
    assert!(q0.above_ecn_band.unwrap() > 0.9);
    // PFC: persistent without CC, rare with DCQCN.
    let (x0, x1) = (none.pfc_xoff_sent()[3], dcqcn.pfc_xoff_sent()[3]);
    assert!(x0 > 100, "N={n}: {x0} XOFF without CC");
    assert!(x1 * 20 <= x0, "N={n}: {x1} XOFF with DCQCN vs {x0}");
    // The reaction points acted on the CNPs the notification point sent.
    assert!(dcqcn.engine.tx_cnp > 0 && dcqcn.engine.rx_cnp == dcqcn.engine.tx_cnp);
    assert!(dcqcn.qp_cc.iter().any(|c| c.paced > 0));
}

#[test]
fn incast_2_to_1_converges_with_dcqcn() {
    check_incast(2);
}

#[test]
fn incast_8_to_1_converges_with_dcqcn() {
    check_incast(8);
}

#[test]
fn incast_16_to_1_converges_with_dcqcn() {
    check_incast(16);
}

#[test]
fn mlx5_variant_converges_too() {
    let r = incast(8, CcConfig::dcqcn_mlx5());
    let f = r.fairness.as_ref().unwrap();
    assert!(f.jain >= 0.95, "Jain {} ({:?})", f.jain, f.gbps);
    assert_eq!(r.pfc_xoff_sent()[3], 0);
    assert_eq!(r.cc, "dcqcn-mlx5");
}

#[test]
fn dcqcn_spares_the_victim_flow() {
    // Dumbbell 4 + 6 at 40 G: h0 → h5 shares only the left → right link
    // with an incast into h4 (senders h1..h3 on the left, h6..h9 right).
    // The victim starts at 2 ms, into the incast's steady state. One run
    // is one trajectory of a chaotic system (seed 1 leaves the victim
    // 11.8 Gb/s with DCQCN, seeds 2 and 3 about 21), so the figures are
    // the medians of three seeds.
    let topo = Topology::dumbbell(4, 6, gbps(40), gbps(40), US);
    let mut flows = vec![flow(0, 5, 1 << 30, 2 * MS)];
    for s in [1, 2, 3, 6, 7, 8, 9] {
        flows.push(flow(s, 4, 1 << 30, 0));
    }
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let victim = |r: &Results| r.series(0, 5, 3).unwrap().rate_bps(60, 120) / 1e9;
    let left_up = |r: &Results| r.port("left", 4).unwrap().paused_ps[3] as f64;
    let (mut v0, mut v1, mut p0, mut p1) = (vec![], vec![], vec![], vec![]);
    for seed in 1..=3 {
        let none = run_seeded(
            &topo,
            flows.clone(),
            CcConfig::default(),
            6 * MS,
            3 * MS,
            seed,
        );
        let dcqcn = run_seeded(
            &topo,
            flows.clone(),
            CcConfig::dcqcn(),
            6 * MS,
            3 * MS,
            seed,
        );
        v0.push(victim(&none));
        v1.push(victim(&dcqcn));
        p0.push(left_up(&none));
        p1.push(left_up(&dcqcn));
    }
    let (v0, v1, p0, p1) = (median(v0), median(v1), median(p0), median(p1));
    // PFC alone: the victim is paused with the incast, down to about the
    // incast's per-flow share; DCQCN leaves it the link's spare capacity.
    assert!(v0 < 10.0, "victim without CC: {v0} Gb/s");
    assert!(
        v1 > 2.0 * v0 && v1 > 15.0,
        "victim with DCQCN: {v1} vs {v0}"
    );
    assert!(p0 > 1e9, "left→right paused {p0} ps");
    assert!(
        p1 * 10.0 < p0,
        "left→right paused {p1} ps with DCQCN vs {p0}"
    );
}
