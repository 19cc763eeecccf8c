//! The simulation: builds switches and hosts from a [`Topology`], computes
//! routes, and runs the event loop.

use std::collections::{BTreeMap, VecDeque};
use std::time::Instant;

use roce_core::Rkey;

use crate::config::{FabricConfig, HostConfig, MetricsConfig};
use crate::dcb::Tsa;
use crate::event::{Ev, EventQueue, Node, Side};
use crate::halves::{HostHalf, Schedule, SwitchHalf};
use crate::host::{FlowDone, Host};
use crate::metrics::{self, Results};
use crate::packet::{Packet, Pool};
use crate::port::PortTx;
use crate::run;
use crate::switch::Switch;
use crate::time::{ser_time, wire_len, Ps, PFC_FRAME_LEN, PREAMBLE_IFG};
use crate::topology::Topology;
use crate::workload::FlowSpec;

/// The splitmix64 finalizer: a cheap, well-mixing 64-bit hash.
pub(crate) fn mix64(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Lookup tables derived from the configuration.
#[derive(Clone)]
pub(crate) struct Tables {
    pub(crate) cfg: FabricConfig,
    pub(crate) dscp_prio: [u8; 64],
    pub(crate) tc_of: [u8; 8],
    pub(crate) lossless: [bool; 8],
    /// Strict TCs, highest first.
    pub(crate) strict_tcs: Vec<u8>,
    /// ETS TCs in ascending order.
    pub(crate) ets_tcs: Vec<u8>,
    /// Priorities of each TC, highest first.
    pub(crate) prios_of_tc: [Vec<u8>; 8],
    /// DWRR quantum per TC in bytes.
    pub(crate) quantum: [u32; 8],
    /// Largest frame the hosts can emit (for headroom).
    pub(crate) max_frame: u32,
}

impl Tables {
    fn new(cfg: FabricConfig, mtu: u32) -> Tables {
        let d = &cfg.dcb;
        let mut prios_of_tc: [Vec<u8>; 8] = Default::default();
        for p in (0..8u8).rev() {
            prios_of_tc[d.tc_of(p) as usize].push(p);
        }
        let used = |tc: u8| !prios_of_tc[tc as usize].is_empty();
        let strict_tcs = (0..8u8)
            .rev()
            .filter(|&tc| d.tc_tsa[tc as usize] == Tsa::Strict && used(tc))
            .collect();
        let ets_tcs = (0..8u8)
            .filter(|&tc| d.tc_tsa[tc as usize] == Tsa::Ets && used(tc))
            .collect();
        let mut quantum = [0u32; 8];
        for (q, bw) in quantum.iter_mut().zip(d.tc_bw) {
            *q = (bw as u32 * cfg.dwrr_quantum_per_pct).max(1);
        }
        Tables {
            dscp_prio: d.dscp_prio,
            tc_of: d.prio_tc,
            lossless: d.pfc_enabled,
            strict_tcs,
            ets_tcs,
            prios_of_tc,
            quantum,
            max_frame: crate::time::frame_len(mtu + 80),
            cfg,
        }
    }
}

/// State every node's handlers share.
pub(crate) struct Shared {
    pub(crate) now: Ps,
    pub(crate) ev: EventQueue,
    pub(crate) pool: Pool,
    pub(crate) t: Tables,
    pub(crate) scratch: Vec<u8>,
    pub(crate) rkeys: Vec<Rkey>,
    /// Which half of the fabric this is.
    side: Side,
    /// Events for the other half, in the order they were made.
    pub(crate) out: Vec<Msg>,
}

/// An event on its way to the other half, with the packet it carries.
pub(crate) struct Msg {
    key: u128,
    ev: Ev,
    pkt: Option<Packet>,
}

impl Shared {
    fn new(side: Side, t: Tables) -> Shared {
        Shared {
            now: 0,
            ev: EventQueue::new(side, 1 << 16),
            pool: Pool::default(),
            t,
            scratch: vec![0; 8192],
            rkeys: Vec::new(),
            side,
            out: Vec::new(),
        }
    }

    /// Schedules `ev` at `time` in the half it belongs to.
    pub(crate) fn push(&mut self, time: Ps, ev: Ev) {
        if ev.side() == self.side {
            self.ev.push(time, ev);
            return;
        }
        let key = self.ev.key(time);
        let pkt = match ev {
            Ev::Arrive { pkt, .. } => Some(self.pool.take(pkt)),
            _ => None,
        };
        self.out.push(Msg { key, ev, pkt });
    }

    /// Takes in the other half's events (emptying `msgs`).
    pub(crate) fn deliver(&mut self, msgs: &mut Vec<Msg>) {
        for m in msgs.drain(..) {
            let ev = match (m.ev, m.pkt) {
                (Ev::Arrive { node, port, .. }, Some(p)) => Ev::Arrive {
                    node,
                    port,
                    pkt: self.pool.put(p),
                },
                (ev, _) => ev,
            };
            self.ev.push_key(m.key, ev);
        }
    }
}

pub(crate) struct FlowState {
    pub(crate) spec: FlowSpec,
    pub(crate) ideal: Ps,
}

/// A fabric with its hosts, switches and flows, ready to run.
pub struct Simulation {
    name: String,
    topo_name: String,
    seed: u64,
    hh: HostHalf,
    sw: SwitchHalf,
    sched: Schedule,
    /// Threads to run on (1 or 2).
    threads: usize,
    /// Threads the last run used.
    used_threads: usize,
    wall: f64,
    end: Ps,
}

/// Adjacency: per node, (port, peer, peer port, link index).
type Adj = Vec<Vec<(u16, Node, u16, usize)>>;

fn node_index(n: Node, hosts: u32) -> usize {
    match n {
        Node::Host(h) => h as usize,
        Node::Switch(s) => (hosts + s) as usize,
    }
}

fn adjacency(t: &Topology) -> Adj {
    let mut adj: Adj = vec![Vec::new(); (t.hosts as usize) + t.switches.len()];
    for (i, l) in t.links.iter().enumerate() {
        let ia = node_index(l.a, t.hosts);
        let ib = node_index(l.b, t.hosts);
        let pa = adj[ia].len() as u16;
        let pb = adj[ib].len() as u16 + if ia == ib { 1 } else { 0 };
        adj[ia].push((pa, l.b, pb, i));
        adj[ib].push((pb, l.a, pa, i));
    }
    adj
}

/// Shortest-path ECMP next hops of every switch toward every host, with
/// the topology's static routes applied on top.
fn routes(t: &Topology, adj: &Adj) -> Vec<Vec<Vec<u16>>> {
    let nh = t.hosts as usize;
    let ns = t.switches.len();
    let mut out = vec![vec![Vec::new(); nh]; ns];
    let mut dist = vec![u32::MAX; nh + ns];
    let mut q = VecDeque::new();
    for dst in 0..nh {
        dist.fill(u32::MAX);
        dist[dst] = 0;
        q.clear();
        q.push_back(dst);
        while let Some(u) = q.pop_front() {
            // Hosts do not forward: only the destination host expands.
            if u < nh && u != dst {
                continue;
            }
            for &(_, peer, _, _) in &adj[u] {
                let v = node_index(peer, t.hosts);
                if dist[v] == u32::MAX {
                    dist[v] = dist[u] + 1;
                    q.push_back(v);
                }
            }
        }
        for (s, r) in out.iter_mut().enumerate() {
            let u = nh + s;
            if dist[u] == u32::MAX {
                continue;
            }
            for &(port, peer, _, _) in &adj[u] {
                let v = node_index(peer, t.hosts);
                let forwards = v >= nh || v == dst;
                if forwards && dist[v] != u32::MAX && dist[v] + 1 == dist[u] {
                    r[dst].push(port);
                }
            }
        }
    }
    for sr in &t.static_routes {
        let u = nh + sr.switch as usize;
        if let Some(&(port, ..)) = adj[u].iter().find(|a| a.1 == sr.next) {
            out[sr.switch as usize][sr.dst_host as usize] = vec![port];
        }
    }
    out
}

/// Ideal completion time of an RDMA WRITE of `size` bytes over an empty
/// path: the packets (as roce-core builds them: IPv4 20 + UDP 8 + BTH 12 +
/// RETH 16 on the first + payload padded to 4 + ICRC 4, each plus 42 bytes
/// of Ethernet, VLAN, FCS, preamble and IFG) pipelined store-and-forward
/// over the hops `(rate, delay)`, then the final ACK (48-byte datagram)
/// back. For equal-size packets this is
/// `Σ_h (d_h + s_h(pkt) + d_h + s_h(ack)) + (N − 1) × max_h s_h(pkt)`.
pub fn ideal_fct(size: u64, mtu: u32, hops: &[(u64, Ps)]) -> Ps {
    let mtu = mtu.max(1) as u64;
    let n = size.div_ceil(mtu).max(1);
    let mut free = vec![0 as Ps; hops.len()];
    let mut arrival = 0;
    for k in 0..n {
        let payload = if k + 1 == n { size - k * mtu } else { mtu };
        let dgram = 40 + if k == 0 { 16 } else { 0 } + payload.div_ceil(4) * 4 + 4;
        let w = wire_len(dgram as u32);
        let mut t = 0;
        for (h, &(rate, delay)) in hops.iter().enumerate() {
            let start = t.max(free[h]);
            free[h] = start + ser_time(w, rate);
            t = free[h] + delay;
        }
        arrival = t;
    }
    let ack = wire_len(48);
    arrival + hops.iter().map(|&(r, d)| ser_time(ack, r) + d).sum::<Ps>()
}

impl Simulation {
    /// Builds the fabric. `flows` may be in any order.
    pub fn new(
        name: &str,
        topo: &Topology,
        fabric: FabricConfig,
        host_cfg: HostConfig,
        mcfg: MetricsConfig,
        flows: Vec<FlowSpec>,
        seed: u64,
    ) -> Simulation {
        let adj = adjacency(topo);
        let mut routes = routes(topo, &adj);
        let tables = Tables::new(fabric, host_cfg.mtu);
        let sched = Schedule::new(&mcfg, tables.cfg.watchdog.map(|w| w.poll));
        let mut hsh = Shared::new(Side::Hosts, tables.clone());
        let ssh = Shared::new(Side::Switches, tables);
        let nh = topo.hosts;
        let tx_of = |ni: usize, port: usize| {
            let (_, peer, pp, li) = adj[ni][port];
            let l = &topo.links[li];
            PortTx::new(peer, pp, l.rate_bps, l.delay)
        };
        let mut hosts = Vec::with_capacity(nh as usize);
        for h in 0..nh {
            assert!(
                adj[h as usize].len() == 1,
                "host {h} must have exactly one link"
            );
            hosts.push(Host::new(h, tx_of(h as usize, 0), &host_cfg));
        }
        hsh.rkeys = hosts.iter().map(|h| h.rkey()).collect();
        let switches: Vec<Switch> = (0..topo.switches.len())
            .map(|s| {
                let ni = nh as usize + s;
                let ports = (0..adj[ni].len()).map(|p| tx_of(ni, p)).collect();
                let r = std::mem::take(&mut routes[s]);
                Switch::new(s as u32, topo.switches[s].clone(), ports, &ssh, seed, r)
            })
            .collect();
        let mut sim = Simulation {
            name: name.to_string(),
            topo_name: topo.name.clone(),
            seed,
            hh: HostHalf {
                sh: hsh,
                hosts,
                host_cfg,
                flows: Vec::new(),
                start_order: Vec::new(),
                next_start: 0,
                done: Vec::new(),
                completed: 0,
                all_done_at: None,
                tput: BTreeMap::new(),
                throughput_bin: mcfg.throughput_bin,
                pause_samples: Vec::new(),
                max_samples: mcfg.max_queue_samples,
            },
            sw: SwitchHalf {
                sh: ssh,
                switches,
                mcfg,
                watchdog_events: Vec::new(),
                deadlocks: Vec::new(),
                dl_candidate: None,
                queue_samples: Vec::new(),
                pause_samples: Vec::new(),
                sample_ticks: 0,
            },
            sched,
            threads: std::thread::available_parallelism().map_or(1, |n| n.get().min(2)),
            used_threads: 1,
            wall: 0.0,
            end: 0,
        };
        let mut fs = Vec::with_capacity(flows.len());
        for f in flows {
            let hops = sim.path(f.src, f.dst);
            let ideal = ideal_fct(f.size.max(1), sim.hh.host_cfg.mtu, &hops);
            fs.push(FlowState { spec: f, ideal });
        }
        let hh = &mut sim.hh;
        hh.flows = fs;
        hh.start_order = (0..hh.flows.len() as u32).collect();
        let flows = &hh.flows;
        hh.start_order
            .sort_by_key(|&i| flows[i as usize].spec.start);
        hh.schedule_next_start();
        hh.done = vec![FlowDone::default(); hh.flows.len()];
        sim
    }

    /// Runs on at most `n` threads (1 or 2; the result is the same).
    pub fn set_threads(&mut self, n: usize) {
        self.threads = n.clamp(1, 2);
    }

    /// The smallest delay plus PFC-frame time of any host link: how far
    /// one half may run ahead of the other (see [`crate::run`]).
    fn lookahead(&self) -> Ps {
        self.hh
            .hosts
            .iter()
            .map(|h| &h.tx)
            .chain(
                self.sw
                    .switches
                    .iter()
                    .flat_map(|s| s.ports.iter().filter(|p| matches!(p.peer, Node::Host(_)))),
            )
            .map(|tx| tx.delay + ser_time(PFC_FRAME_LEN + PREAMBLE_IFG, tx.rate_bps))
            .min()
            .unwrap_or(Ps::MAX)
            .max(1)
    }

    /// The hops (rate, delay) from host `src` to host `dst`, following the
    /// first equal-cost next hop at each switch.
    pub fn path(&self, src: u32, dst: u32) -> Vec<(u64, Ps)> {
        let mut hops = Vec::new();
        let h = &self.hh.hosts[src as usize].tx;
        hops.push((h.rate_bps, h.delay));
        let mut at = h.peer;
        while let Node::Switch(s) = at {
            let sw = &self.sw.switches[s as usize];
            let Some(&p) = sw.routes_to(dst).first() else {
                break;
            };
            let tx = &sw.ports[p as usize];
            hops.push((tx.rate_bps, tx.delay));
            at = tx.peer;
            if hops.len() > 64 {
                break;
            }
        }
        hops
    }

    /// Runs until `end` (or until every flow has completed, whichever is
    /// first), calling `progress` with the fraction of `end` reached.
    pub fn run(&mut self, end: Ps, mut progress: impl FnMut(f64)) {
        let t0 = Instant::now();
        let lookahead = self.lookahead();
        let sched = self.sched.clone();
        let (hh, sw) = (&mut self.hh, &mut self.sw);
        let two = self.threads > 1 && lookahead >= run::MIN_PARALLEL_LOOKAHEAD;
        self.used_threads = if two { 2 } else { 1 };
        self.end = if two {
            run::parallel(hh, sw, sched, lookahead, end, &mut progress)
        } else {
            run::sequential(hh, sw, sched, lookahead, end, &mut progress)
        };
        progress(1.0);
        self.hh.sh.now = self.end;
        self.sw.sh.now = self.end;
        for h in &mut self.hh.hosts {
            h.tx.finish(self.end);
        }
        for s in &mut self.sw.switches {
            for p in &mut s.ports {
                p.finish(self.end);
            }
        }
        self.wall += t0.elapsed().as_secs_f64();
    }

    /// Results so far.
    pub fn results(&self) -> Results {
        let mut pause_samples = self.sw.pause_samples.clone();
        pause_samples.extend_from_slice(&self.hh.pause_samples);
        // Per instant: the switches' ports, then the hosts'.
        pause_samples.sort_by_key(|p| p.time_ps);
        let (hh, sw) = (&self.hh, &self.sw);
        metrics::collect(metrics::Inputs {
            name: &self.name,
            topology: &self.topo_name,
            seed: self.seed,
            end: self.end,
            events: hh.sh.ev.processed() + sw.sh.ev.processed(),
            wall: self.wall,
            threads: self.used_threads,
            mtu: hh.host_cfg.mtu,
            flows: hh
                .flows
                .iter()
                .zip(&hh.done)
                .map(|(f, d)| (f.spec, f.ideal, *d))
                .collect(),
            size_buckets: &sw.mcfg.size_buckets,
            switches: &sw.switches,
            hosts: &hh.hosts,
            watchdog: &sw.watchdog_events,
            deadlocks: &sw.deadlocks,
            queue_samples: &sw.queue_samples,
            sample_ticks: sw.sample_ticks,
            pause_samples: &pause_samples,
            sample_interval: sw.mcfg.sample_interval,
            ecn: sw.sh.t.cfg.ecn,
            tc_of: sw.sh.t.tc_of,
            convergence: sw.mcfg.convergence,
            cc: hh.host_cfg.cc.algorithm.name(),
            tput: &hh.tput,
            tput_bin: sw.mcfg.throughput_bin,
            pool_high_water: hh.sh.pool.capacity() + sw.sh.pool.capacity(),
            queue_high_water: hh.sh.ev.high_water() + sw.sh.ev.high_water(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::EcnTc;
    use crate::topology::gbps;
    use crate::workload::FlowSpec;

    /// Holds the egress queue of a switch at a fixed depth (time stands
    /// still, so the link stays busy; each `tx_done` with the link freed
    /// dequeues one packet, which is replaced) and
    /// counts the CE marks: the fraction follows the RED curve.
    fn mark_fraction(depth_pkts: usize, samples: u32) -> (u64, f64) {
        let topo = Topology::star(2, gbps(100), 1_000_000);
        let mut fabric = FabricConfig::default();
        let ecn = EcnTc {
            kmin: 20_000,
            kmax: 120_000,
            pmax: 0.2,
        };
        fabric.ecn[3] = Some(ecn);
        let mut sim = Simulation::new(
            "red",
            &topo,
            fabric,
            HostConfig::default(),
            MetricsConfig::default(),
            Vec::new(),
            9,
        );
        let repr = roce_wire::Ipv4Repr {
            src: crate::host::host_ip(1),
            dst: crate::host::host_ip(0),
            dscp: 26,
            ecn: roce_wire::Ecn::Ect0,
            ident: 0,
            dont_frag: true,
            ttl: 64,
            payload_len: 978,
        };
        let mut d = vec![0u8; 998];
        repr.emit(&mut d).unwrap();
        let sw = &mut sim.sw.switches[0];
        let sh = &mut sim.sw.sh;
        let add = |sw: &mut Switch, sh: &mut Shared| {
            let id = sh.pool.alloc(&d);
            let p = sh.pool.get_mut(id);
            p.prio = 3;
            p.dst_host = 0;
            sw.arrive(sh, 1, id);
        };
        sw.ports[0].busy_until = Ps::MAX;
        for _ in 0..depth_pkts {
            add(sw, sh);
        }
        // Frame bytes of the TC queue seen at each dequeue.
        let depth = sw.pq[0].qbytes[3];
        for _ in 0..samples {
            sw.ports[0].busy_until = 0;
            sw.tx_done(sh, 0);
            add(sw, sh);
        }
        let marked = sw.ports[0].stats.ecn_marked[3];
        (depth, marked as f64 / samples as f64)
    }

    #[test]
    fn ecn_mark_fraction_follows_red() {
        let ecn = EcnTc {
            kmin: 20_000,
            kmax: 120_000,
            pmax: 0.2,
        };
        for pkts in [10, 30, 60, 100, 130] {
            let (depth, frac) = mark_fraction(pkts, 20_000);
            let p = ecn.probability(depth);
            // Binomial standard deviation at 20 000 samples is at most 0.0036.
            assert!(
                (frac - p).abs() < 0.012,
                "depth {depth}: marked {frac}, RED {p}"
            );
        }
    }

    #[test]
    fn a_pause_without_refresh_expires_by_itself() {
        // One XOFF of 10 000 quanta reaches h0 at 20 µs, mid-flow, and is
        // never refreshed nor cancelled: h0 stops for exactly
        // 10 000 × 512 / 100 Gb/s = 51.2 µs and then resumes on its own.
        let topo = Topology::star(2, gbps(100), 1_000_000);
        let flows = vec![FlowSpec {
            src: 0,
            dst: 1,
            size: 1_000_000,
            start: 0,
            dscp: 26,
        }];
        let m = MetricsConfig {
            sample_interval: 0,
            deadlock_check: 0,
            ..MetricsConfig::default()
        };
        let mut sim = Simulation::new(
            "expiry",
            &topo,
            FabricConfig::default(),
            HostConfig::default(),
            m,
            flows,
            1,
        );
        sim.hh.sh.push(
            20_000_000,
            Ev::Pfc {
                node: Node::Host(0),
                port: 0,
                prio: 3,
                quanta: 10_000,
            },
        );
        sim.run(10_000_000_000, |_| {});
        let r = sim.results();
        let pause = 51_200_000;
        assert_eq!(r.port("h0", 0).unwrap().paused_ps[3], pause);
        let f = &r.flows[0];
        let extra = f.fct_ps.unwrap() - f.ideal_ps;
        // The frame in flight at 20 µs finishes first (≤ 1 frame time).
        assert!(extra <= pause && extra + 90_000 >= pause, "extra {extra}");
    }

    /// Which priorities leave port 0 of a star's switch, in order, when 20
    /// data frames (DSCP 26, priority 3) from h1 are queued for h0 and
    /// then a CNP from h2 arrives with `cnp_dscp`.
    fn departures_after_a_cnp(cnp_dscp: u8) -> Vec<u8> {
        let topo = Topology::star(3, gbps(100), 1_000_000);
        let mut sim = Simulation::new(
            "cnp",
            &topo,
            FabricConfig::default(),
            HostConfig::default(),
            MetricsConfig::default(),
            Vec::new(),
            1,
        );
        let dgram = |dscp: u8, len: usize| {
            let repr = roce_wire::Ipv4Repr {
                src: crate::host::host_ip(1),
                dst: crate::host::host_ip(0),
                dscp,
                ecn: roce_wire::Ecn::NotEct,
                ident: 0,
                dont_frag: true,
                ttl: 64,
                payload_len: len - 20,
            };
            let mut d = vec![0u8; len];
            repr.emit(&mut d).unwrap();
            d
        };
        let data = dgram(26, 1068);
        // IPv4 + UDP + BTH (opcode 0x81) + 16 reserved bytes + ICRC.
        let mut cnp = dgram(cnp_dscp, 60);
        cnp[28] = 0x81;
        let sw = &mut sim.sw.switches[0];
        let sh = &mut sim.sw.sh;
        let add = |sw: &mut Switch, sh: &mut Shared, d: &[u8], in_port: u16| {
            let id = sh.pool.alloc(d);
            let prio = sh.t.dscp_prio[crate::packet::ipv4::dscp(d) as usize];
            let p = sh.pool.get_mut(id);
            p.prio = prio;
            p.dst_host = 0;
            sw.arrive(sh, in_port, id);
        };
        for _ in 0..20 {
            add(sw, sh, &data, 1);
        }
        assert_eq!(sh.out.len(), 1, "one frame on the wire, 19 queued");
        add(sw, sh, &cnp, 2);
        while sh.out.len() < 21 {
            sh.now = sw.ports[0].busy_until;
            sw.tx_done(sh, 0);
        }
        sh.out
            .iter()
            .map(|m| m.pkt.as_ref().unwrap().prio)
            .collect()
    }

    #[test]
    fn a_cnp_overtakes_the_data_queued_at_its_egress() {
        // DSCP 48 is priority 6, a strict TC: the CNP leaves right after
        // the frame already on the wire.
        let strict = departures_after_a_cnp(48);
        assert_eq!(strict[..3], [3, 6, 3]);
        assert_eq!(strict.iter().filter(|&&p| p == 6).count(), 1);
        // Sent in the data's class instead, it waits behind all 19.
        let same = departures_after_a_cnp(26);
        assert!(same.iter().all(|&p| p == 3));
        assert_eq!(same.len(), 21);
    }

    #[test]
    fn ecmp_routes_use_every_equal_cost_next_hop() {
        let t = Topology::leaf_spine(2, 4, 2, gbps(100), gbps(100), 1_000_000);
        let adj = adjacency(&t);
        let r = routes(&t, &adj);
        // leaf0 → host 2 (on leaf1): via any of 4 spines.
        assert_eq!(r[0][2].len(), 4);
        // leaf0 → host 0: its own port.
        assert_eq!(r[0][0], vec![0]);
        // spine → host 2: the one port to leaf1.
        assert_eq!(r[2][2].len(), 1);
    }
}
