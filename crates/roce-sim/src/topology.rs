//! Fabric wiring: nodes, full-duplex links, and the builders of the
//! standard shapes. Ports are numbered per node in the order links are
//! added; a host has exactly one port (0).

use serde::Serialize;

use crate::event::Node;
use crate::time::{Ps, US};

/// One full-duplex link.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct LinkSpec {
    /// One end.
    pub a: Node,
    /// The other end.
    pub b: Node,
    /// Line rate in bits per second (both directions).
    pub rate_bps: u64,
    /// Propagation delay.
    pub delay: Ps,
}

/// A forced next hop: at `switch`, packets for `dst_host` go to `next`
/// (replacing the shortest-path ECMP set).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct StaticRoute {
    /// The switch.
    pub switch: u32,
    /// Destination host.
    pub dst_host: u32,
    /// The neighbour to forward to.
    pub next: Node,
}

/// Hosts, switches, links and any static routes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Topology {
    /// A short description.
    pub name: String,
    /// Number of hosts (indices 0..hosts).
    pub hosts: u32,
    /// Switch names (index = switch id).
    pub switches: Vec<String>,
    /// Links.
    pub links: Vec<LinkSpec>,
    /// Routes that override shortest-path ECMP.
    pub static_routes: Vec<StaticRoute>,
}

/// A rate in Gb/s as bits per second.
pub const fn gbps(g: u64) -> u64 {
    g * 1_000_000_000
}

impl Topology {
    fn new(name: String, hosts: u32) -> Topology {
        Topology {
            name,
            hosts,
            switches: Vec::new(),
            links: Vec::new(),
            static_routes: Vec::new(),
        }
    }

    fn switch(&mut self, name: String) -> u32 {
        self.switches.push(name);
        self.switches.len() as u32 - 1
    }

    fn link(&mut self, a: Node, b: Node, rate_bps: u64, delay: Ps) {
        self.links.push(LinkSpec {
            a,
            b,
            rate_bps,
            delay,
        });
    }

    /// `hosts` hosts on one switch (N:1 incast: senders 1.., receiver 0).
    pub fn star(hosts: u32, rate_bps: u64, delay: Ps) -> Topology {
        let mut t = Topology::new(format!("star-{hosts}"), hosts);
        let s = t.switch("sw0".into());
        for h in 0..hosts {
            t.link(Node::Host(h), Node::Switch(s), rate_bps, delay);
        }
        t
    }

    /// Two switches joined by one link of `core_bps`; hosts `0..left` on
    /// the left switch, `left..left+right` on the right one.
    pub fn dumbbell(left: u32, right: u32, host_bps: u64, core_bps: u64, delay: Ps) -> Topology {
        let mut t = Topology::new(format!("dumbbell-{left}x{right}"), left + right);
        let l = t.switch("left".into());
        let r = t.switch("right".into());
        for h in 0..left {
            t.link(Node::Host(h), Node::Switch(l), host_bps, delay);
        }
        for h in left..left + right {
            t.link(Node::Host(h), Node::Switch(r), host_bps, delay);
        }
        t.link(Node::Switch(l), Node::Switch(r), core_bps, delay);
        t
    }

    /// Two-tier leaf-spine: every leaf connects to every spine.
    pub fn leaf_spine(
        leaves: u32,
        spines: u32,
        hosts_per_leaf: u32,
        host_bps: u64,
        fabric_bps: u64,
        delay: Ps,
    ) -> Topology {
        let mut t = Topology::new(
            format!("leaf-spine-{leaves}x{spines}x{hosts_per_leaf}"),
            leaves * hosts_per_leaf,
        );
        let lv: Vec<u32> = (0..leaves).map(|i| t.switch(format!("leaf{i}"))).collect();
        let sp: Vec<u32> = (0..spines).map(|i| t.switch(format!("spine{i}"))).collect();
        for (i, &l) in lv.iter().enumerate() {
            for h in 0..hosts_per_leaf {
                let host = i as u32 * hosts_per_leaf + h;
                t.link(Node::Host(host), Node::Switch(l), host_bps, delay);
            }
        }
        for &l in &lv {
            for &s in &sp {
                t.link(Node::Switch(l), Node::Switch(s), fabric_bps, delay);
            }
        }
        t
    }

    /// A k-ary fat-tree (Al-Fares et al.): k pods of k/2 edge and k/2
    /// aggregation switches, (k/2)² cores, k/2 hosts per edge switch.
    pub fn fat_tree(k: u32, host_bps: u64, fabric_bps: u64, delay: Ps) -> Topology {
        let h = k / 2;
        let pods = k;
        let mut t = Topology::new(format!("fat-tree-k{k}"), pods * h * h);
        Self::pods(&mut t, pods, h, h, h, h * h, h, host_bps, fabric_bps, delay);
        t
    }

    /// The HPCC paper's 320-host fabric (Li et al., SIGCOMM 2019): 20 ToR ×
    /// 16 hosts, 20 Agg, 16 Core; 100 G host links, 400 G fabric, 1 µs per
    /// link. Not a k-ary fat-tree; wired as 5 pods of 4 ToR + 4 Agg (each
    /// ToR to every Agg of its pod), and Agg j of every pod to cores
    /// 4j..4j+3, so every tier has 1.6 Tb/s per pod: no oversubscription.
    pub fn hpcc() -> Topology {
        let mut t = Topology::new("hpcc-320".into(), 320);
        Self::pods(&mut t, 5, 4, 4, 16, 16, 4, gbps(100), gbps(400), US);
        t
    }

    /// Pods of `tors` ToRs and `aggs` Aggs (full bipartite inside a pod),
    /// `hosts_per_tor` hosts per ToR, `cores` cores; Agg j of each pod links
    /// to cores `j*cores_per_agg..(j+1)*cores_per_agg`.
    #[allow(clippy::too_many_arguments)]
    fn pods(
        t: &mut Topology,
        pods: u32,
        tors: u32,
        aggs: u32,
        hosts_per_tor: u32,
        cores: u32,
        cores_per_agg: u32,
        host_bps: u64,
        fabric_bps: u64,
        delay: Ps,
    ) {
        let core: Vec<u32> = (0..cores).map(|i| t.switch(format!("core{i}"))).collect();
        let mut host = 0;
        for p in 0..pods {
            let tor: Vec<u32> = (0..tors).map(|i| t.switch(format!("tor{p}.{i}"))).collect();
            let agg: Vec<u32> = (0..aggs).map(|i| t.switch(format!("agg{p}.{i}"))).collect();
            for &e in &tor {
                for _ in 0..hosts_per_tor {
                    t.link(Node::Host(host), Node::Switch(e), host_bps, delay);
                    host += 1;
                }
            }
            for &e in &tor {
                for &a in &agg {
                    t.link(Node::Switch(e), Node::Switch(a), fabric_bps, delay);
                }
            }
            for (j, &a) in agg.iter().enumerate() {
                for c in 0..cores_per_agg {
                    let ci = (j as u32 * cores_per_agg + c) as usize;
                    if let Some(&cs) = core.get(ci) {
                        t.link(Node::Switch(a), Node::Switch(cs), fabric_bps, delay);
                    }
                }
            }
        }
    }

    /// A ring of `n` switches with `hosts_per_switch` hosts each. With
    /// `clockwise`, every switch forwards traffic for hosts on other
    /// switches to its clockwise neighbour (even when counter-clockwise is
    /// shorter): the routes form a cyclic buffer dependency, the classic
    /// PFC deadlock setup.
    pub fn ring(
        n: u32,
        hosts_per_switch: u32,
        rate_bps: u64,
        delay: Ps,
        clockwise: bool,
    ) -> Topology {
        let mut t = Topology::new(format!("ring-{n}"), n * hosts_per_switch);
        for i in 0..n {
            t.switch(format!("ring{i}"));
        }
        for s in 0..n {
            for h in 0..hosts_per_switch {
                t.link(
                    Node::Host(s * hosts_per_switch + h),
                    Node::Switch(s),
                    rate_bps,
                    delay,
                );
            }
        }
        for s in 0..n {
            t.link(Node::Switch(s), Node::Switch((s + 1) % n), rate_bps, delay);
        }
        if clockwise {
            for s in 0..n {
                for dst in 0..t.hosts {
                    if dst / hosts_per_switch != s {
                        t.static_routes.push(StaticRoute {
                            switch: s,
                            dst_host: dst,
                            next: Node::Switch((s + 1) % n),
                        });
                    }
                }
            }
        }
        t
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn degree(t: &Topology, n: Node) -> usize {
        t.links.iter().filter(|l| l.a == n || l.b == n).count()
    }

    #[test]
    fn hpcc_shape() {
        let t = Topology::hpcc();
        assert_eq!(t.hosts, 320);
        assert_eq!(t.switches.len(), 56);
        let count = |p: &str| t.switches.iter().filter(|s| s.starts_with(p)).count();
        assert_eq!((count("tor"), count("agg"), count("core")), (20, 20, 16));
        // ToR: 16 hosts + 4 Aggs; Agg: 4 ToRs + 4 cores; core: 5 Aggs.
        for (i, name) in t.switches.iter().enumerate() {
            let d = degree(&t, Node::Switch(i as u32));
            let want = if name.starts_with("tor") {
                20
            } else if name.starts_with("agg") {
                8
            } else {
                5
            };
            assert_eq!(d, want, "{name}");
        }
        assert_eq!(t.links.len(), 320 + 80 + 80);
    }

    #[test]
    fn fat_tree_k4() {
        let t = Topology::fat_tree(4, gbps(100), gbps(100), US);
        assert_eq!(t.hosts, 16);
        assert_eq!(t.switches.len(), 20);
        assert!((0..20).all(|s| degree(&t, Node::Switch(s)) == 4));
    }
}
