//! Single flows on empty paths: FCT against the ideal formula.

mod common;
use common::*;
use roce_sim::*;

#[test]
fn single_flow_matches_ideal_fct() {
    for &(size, hops_topo) in &[(1_000u64, 0), (100_000, 0), (1_000_000, 1), (3_000_000, 2)] {
        let topo = match hops_topo {
            0 => Topology::star(2, gbps(100), US),
            1 => Topology::dumbbell(1, 1, gbps(100), gbps(400), US),
            _ => Topology::fat_tree(4, gbps(100), gbps(100), US),
        };
        let dst = topo.hosts - 1;
        let r = run_sim(
            &topo,
            FabricConfig::default(),
            quiet(),
            vec![flow(0, dst, size, 5 * US)],
            20 * MS,
            1,
        );
        let f = &r.flows[0];
        let fct = f.fct_ps.expect("completed");
        let err = (fct as f64 - f.ideal_ps as f64).abs() / f.ideal_ps as f64;
        eprintln!(
            "size {size} {}: fct {fct} ideal {} err {err:.5}",
            topo.name, f.ideal_ps
        );
        assert!(
            err < 0.01,
            "size {size} on {}: fct {fct} ideal {} (err {err})",
            topo.name,
            f.ideal_ps
        );
        assert_eq!(r.drops.total(), 0);
        assert_eq!(r.engine.rx_bad_icrc, 0);
        assert_eq!(r.engine.retransmitted, 0);
    }
}
