//! The simulation: builds switches and hosts from a [`Topology`], computes
//! routes, and runs the event loop.

use std::collections::{BTreeMap, VecDeque};
use std::time::Instant;

use roce_core::Rkey;

use crate::config::{FabricConfig, HostConfig, MetricsConfig};
use crate::dcb::Tsa;
use crate::event::{Ev, EventQueue, Node};
use crate::host::{FlowDone, FlowReq, Host};
use crate::metrics::{self, DeadlockReport, QueueSample, Results};
use crate::packet::Pool;
use crate::port::{pfc_frame, PortTx};
use crate::switch::{Switch, WatchdogEvent};
use crate::time::{ser_time, wire_len, Ps};
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
}

struct FlowState {
    spec: FlowSpec,
    ideal: Ps,
}

/// A fabric with its hosts, switches and flows, ready to run.
pub struct Simulation {
    name: String,
    topo_name: String,
    seed: u64,
    sh: Shared,
    switches: Vec<Switch>,
    hosts: Vec<Host>,
    host_cfg: HostConfig,
    mcfg: MetricsConfig,
    flows: Vec<FlowState>,
    /// Flow indices by start time; only the next one to start sits in the
    /// event queue (a 100 ms run has ~10^6 flows, and a heap that holds
    /// them all makes every event slower).
    start_order: Vec<u32>,
    next_start: usize,
    done: Vec<FlowDone>,
    completed: usize,
    watchdog_events: Vec<WatchdogEvent>,
    deadlocks: Vec<DeadlockReport>,
    /// The cycle seen at the last check (its queues), since when, and
    /// whether it was reported.
    dl_candidate: Option<(Vec<QueueId>, Ps, bool)>,
    queue_samples: Vec<QueueSample>,
    /// Paused transmitters at each sampling instant (the pause timeline).
    pause_samples: Vec<metrics::PauseSample>,
    /// Sampling instants recorded from the convergence time on (queues
    /// absent from one were empty).
    sample_ticks: u64,
    tput: BTreeMap<(u32, u32, u8), Vec<u64>>,
    wall: f64,
    end: Ps,
}

/// An egress queue: (switch, port, priority).
type QueueId = (u32, u16, u8);

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
        let mut sh = Shared {
            now: 0,
            ev: EventQueue::with_capacity(1 << 16),
            pool: Pool::default(),
            t: Tables::new(fabric, host_cfg.mtu),
            scratch: vec![0; 8192],
            rkeys: Vec::new(),
        };
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
        sh.rkeys = hosts.iter().map(|h| h.rkey()).collect();
        let switches: Vec<Switch> = (0..topo.switches.len())
            .map(|s| {
                let ni = nh as usize + s;
                let ports = (0..adj[ni].len()).map(|p| tx_of(ni, p)).collect();
                let r = std::mem::take(&mut routes[s]);
                Switch::new(s as u32, topo.switches[s].clone(), ports, &sh, seed, r)
            })
            .collect();
        let mut sim = Simulation {
            name: name.to_string(),
            topo_name: topo.name.clone(),
            seed,
            sh,
            switches,
            hosts,
            host_cfg,
            flows: Vec::new(),
            start_order: Vec::new(),
            next_start: 0,
            done: Vec::new(),
            completed: 0,
            watchdog_events: Vec::new(),
            deadlocks: Vec::new(),
            dl_candidate: None,
            queue_samples: Vec::new(),
            pause_samples: Vec::new(),
            sample_ticks: 0,
            tput: BTreeMap::new(),
            mcfg,
            wall: 0.0,
            end: 0,
        };
        for f in flows {
            let hops = sim.path(f.src, f.dst);
            let ideal = ideal_fct(f.size.max(1), sim.host_cfg.mtu, &hops);
            sim.flows.push(FlowState { spec: f, ideal });
        }
        sim.start_order = (0..sim.flows.len() as u32).collect();
        sim.start_order
            .sort_by_key(|&i| sim.flows[i as usize].spec.start);
        sim.schedule_next_start();
        sim.done = vec![FlowDone::default(); sim.flows.len()];
        if sim.mcfg.sample_interval > 0 {
            sim.sh.ev.push(0, Ev::Sample);
        }
        if let Some(w) = sim.sh.t.cfg.watchdog {
            sim.sh.ev.push(w.poll, Ev::Watchdog);
        }
        if sim.mcfg.deadlock_check > 0 {
            sim.sh.ev.push(sim.mcfg.deadlock_check, Ev::DeadlockCheck);
        }
        sim
    }

    /// The hops (rate, delay) from host `src` to host `dst`, following the
    /// first equal-cost next hop at each switch.
    pub fn path(&self, src: u32, dst: u32) -> Vec<(u64, Ps)> {
        let mut hops = Vec::new();
        let h = &self.hosts[src as usize].tx;
        hops.push((h.rate_bps, h.delay));
        let mut at = h.peer;
        while let Node::Switch(s) = at {
            let sw = &self.switches[s as usize];
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

    /// Puts the next flow (in start-time order) into the event queue.
    fn schedule_next_start(&mut self) {
        if let Some(&i) = self.start_order.get(self.next_start) {
            let t = self.flows[i as usize].spec.start.max(self.sh.now);
            self.sh.ev.push(t, Ev::FlowStart { flow: i });
        }
    }

    fn start_flow(&mut self, i: u32) {
        let f = self.flows[i as usize].spec;
        if f.src == f.dst
            || f.src as usize >= self.hosts.len()
            || f.dst as usize >= self.hosts.len()
        {
            self.done[i as usize].failed = true;
            return;
        }
        let qp = Host::connect(&mut self.hosts, f.src, f.dst, f.dscp, &self.host_cfg);
        let rkey = self.sh.rkeys[f.dst as usize];
        let req = FlowReq {
            dst: f.dst,
            size: f.size,
        };
        self.hosts[f.src as usize].post(&mut self.sh, qp, i, req, rkey);
    }

    /// Runs until `end` (or until every flow has completed, whichever is
    /// first), calling `progress` with the fraction of `end` reached.
    pub fn run(&mut self, end: Ps, mut progress: impl FnMut(f64)) {
        let t0 = Instant::now();
        let mut n: u64 = 0;
        let total = self.flows.len();
        while let Some(t) = self.sh.ev.peek_time() {
            if t > end {
                break;
            }
            let (t, ev) = self.sh.ev.pop().expect("peeked");
            self.sh.now = t;
            self.dispatch(ev);
            n += 1;
            if n & 0xffff == 0 {
                progress(t as f64 / end.max(1) as f64);
            }
            if total > 0 && self.completed == total {
                break;
            }
        }
        let all_done = total > 0 && self.completed == total;
        self.end = if all_done {
            self.sh.now
        } else {
            end.max(self.sh.now)
        };
        self.sh.now = self.end;
        for h in &mut self.hosts {
            h.tx.finish(self.end);
        }
        for s in &mut self.switches {
            for p in &mut s.ports {
                p.finish(self.end);
            }
        }
        self.wall += t0.elapsed().as_secs_f64();
        progress(1.0);
    }

    fn dispatch(&mut self, ev: Ev) {
        let sh = &mut self.sh;
        match ev {
            Ev::Arrive {
                node: Node::Host(h),
                pkt,
                ..
            } => {
                self.record_tput(h, pkt);
                self.completed += self.hosts[h as usize].arrive(&mut self.sh, pkt, &mut self.done);
            }
            Ev::Arrive {
                node: Node::Switch(s),
                port,
                pkt,
            } => self.switches[s as usize].arrive(sh, port, pkt),
            Ev::Pfc {
                node: Node::Host(h),
                prio,
                quanta,
                ..
            } => self.hosts[h as usize].on_pfc(sh, &pfc_frame(prio, quanta)),
            Ev::Pfc {
                node: Node::Switch(s),
                port,
                prio,
                quanta,
            } => self.switches[s as usize].on_pfc(sh, port, &pfc_frame(prio, quanta)),
            Ev::TxDone {
                node: Node::Host(h),
                ..
            } => self.hosts[h as usize].tx_done(sh),
            Ev::TxDone {
                node: Node::Switch(s),
                port,
            } => self.switches[s as usize].tx_done(sh, port),
            Ev::Kick {
                node: Node::Host(h),
                ..
            } => self.hosts[h as usize].try_tx(sh),
            Ev::Kick {
                node: Node::Switch(s),
                port,
            } => self.switches[s as usize].tx_done(sh, port),
            Ev::PfcRefresh {
                sw,
                port,
                prio,
                gen,
            } => self.switches[sw as usize].refresh(sh, port, prio, gen),
            Ev::HostTimer { host } => {
                self.completed += self.hosts[host as usize].on_timer(&mut self.sh, &mut self.done);
            }
            Ev::FlowStart { flow } => {
                self.start_flow(flow);
                self.next_start += 1;
                self.schedule_next_start();
            }
            Ev::Sample => {
                self.sample();
                let dt = self.mcfg.sample_interval;
                self.sh.ev.push(self.sh.now + dt, Ev::Sample);
            }
            Ev::Watchdog => {
                for s in &mut self.switches {
                    s.watchdog(&mut self.sh, &mut self.watchdog_events);
                }
                if let Some(w) = self.sh.t.cfg.watchdog {
                    self.sh.ev.push(self.sh.now + w.poll, Ev::Watchdog);
                }
            }
            Ev::DeadlockCheck => {
                self.check_deadlock();
                let dt = self.mcfg.deadlock_check;
                self.sh.ev.push(self.sh.now + dt, Ev::DeadlockCheck);
            }
        }
    }

    fn record_tput(&mut self, h: u32, pkt: u32) {
        let bin = self.mcfg.throughput_bin;
        if bin == 0 {
            return;
        }
        let p = self.sh.pool.get(pkt);
        // BTH opcode after IPv4 (20) and UDP (8): skip ACKs and CNPs.
        let op = p.data.get(28).copied().unwrap_or(0x11);
        if matches!(op, 0x11 | 0x12 | 0x81) {
            return;
        }
        let series = self.tput.entry((p.src_host, h, p.prio)).or_default();
        let i = (self.sh.now / bin) as usize;
        if series.len() <= i {
            series.resize(i + 1, 0);
        }
        series[i] += p.data.len() as u64;
    }

    fn sample(&mut self) {
        if self.queue_samples.len() >= self.mcfg.max_queue_samples {
            return;
        }
        if self.sh.now >= self.mcfg.convergence {
            self.sample_ticks += 1;
        }
        let now = self.sh.now;
        let ports = self
            .switches
            .iter()
            .flat_map(|s| {
                s.ports
                    .iter()
                    .enumerate()
                    .map(move |(o, tx)| (Node::Switch(s.id), o as u16, tx))
            })
            .chain(self.hosts.iter().map(|h| (Node::Host(h.id), 0, &h.tx)));
        for (node, port, tx) in ports {
            for prio in 0..8u8 {
                if tx.paused(prio, now) {
                    self.pause_samples.push(metrics::PauseSample {
                        time_ps: now,
                        node,
                        port,
                        prio,
                    });
                }
            }
        }
        for s in &self.switches {
            for (o, qb) in s.pq.iter().map(|p| &p.qbytes).enumerate() {
                for (pr, &b) in qb.iter().enumerate() {
                    if b > 0 {
                        self.queue_samples.push(QueueSample {
                            time_ps: self.sh.now,
                            switch: s.id,
                            port: o as u16,
                            prio: pr as u8,
                            bytes: b,
                        });
                    }
                }
            }
        }
    }

    /// Builds the wait-for graph of paused, non-empty egress queues: queue
    /// (S, p, prio) waits for queue (T, r, prio) when S's port p leads to T
    /// and (T, r, prio) holds packets that entered T through that link. A
    /// cycle that persists for `deadlock_after` is a PFC deadlock.
    fn check_deadlock(&mut self) {
        let now = self.sh.now;
        let mut nodes: Vec<(u32, u16, u8, Vec<u16>)> = Vec::new();
        for s in &self.switches {
            for (o, pr, ins) in s.blocked_queues(&self.sh) {
                nodes.push((s.id, o, pr, ins));
            }
        }
        let cycle = find_cycle(&nodes, |i| {
            let (s, o, pr, _) = &nodes[i];
            let tx = &self.switches[*s as usize].ports[*o as usize];
            let Node::Switch(t) = tx.peer else {
                return Vec::new();
            };
            nodes
                .iter()
                .enumerate()
                .filter(|(_, n)| n.0 == t && n.2 == *pr && n.3.contains(&tx.peer_port))
                .map(|(j, _)| j)
                .collect()
        });
        let Some(cycle) = cycle else {
            self.dl_candidate = None;
            return;
        };
        let mut key: Vec<QueueId> = cycle
            .iter()
            .map(|&i| (nodes[i].0, nodes[i].1, nodes[i].2))
            .collect();
        key.sort_unstable();
        match &mut self.dl_candidate {
            Some((k, since, reported)) if *k == key => {
                if !*reported && now - *since >= self.mcfg.deadlock_after {
                    *reported = true;
                    let members = cycle
                        .iter()
                        .map(|&i| {
                            let (s, o, pr, _) = &nodes[i];
                            let sw = &self.switches[*s as usize];
                            format!("{}:port{}:prio{}", sw.name, o, pr)
                        })
                        .collect();
                    self.deadlocks.push(DeadlockReport {
                        detected_ps: now,
                        since_ps: *since,
                        cycle: members,
                    });
                }
            }
            _ => self.dl_candidate = Some((key, now, false)),
        }
    }

    /// Results so far.
    pub fn results(&self) -> Results {
        metrics::collect(metrics::Inputs {
            name: &self.name,
            topology: &self.topo_name,
            seed: self.seed,
            end: self.end,
            events: self.sh.ev.processed(),
            wall: self.wall,
            mtu: self.host_cfg.mtu,
            flows: self
                .flows
                .iter()
                .zip(&self.done)
                .map(|(f, d)| (f.spec, f.ideal, *d))
                .collect(),
            size_buckets: &self.mcfg.size_buckets,
            switches: &self.switches,
            hosts: &self.hosts,
            watchdog: &self.watchdog_events,
            deadlocks: &self.deadlocks,
            queue_samples: &self.queue_samples,
            sample_ticks: self.sample_ticks,
            pause_samples: &self.pause_samples,
            sample_interval: self.mcfg.sample_interval,
            ecn: self.sh.t.cfg.ecn,
            tc_of: self.sh.t.tc_of,
            convergence: self.mcfg.convergence,
            cc: self.host_cfg.cc.algorithm.name(),
            tput: &self.tput,
            tput_bin: self.mcfg.throughput_bin,
            pool_high_water: self.sh.pool.capacity(),
            queue_high_water: self.sh.ev.high_water(),
        })
    }
}

/// Some cycle in the directed graph given by `succ`, as node indices.
fn find_cycle(
    nodes: &[(u32, u16, u8, Vec<u16>)],
    succ: impl Fn(usize) -> Vec<usize>,
) -> Option<Vec<usize>> {
    let n = nodes.len();
    // 0 = unvisited, 1 = on stack, 2 = done.
    let mut color = vec![0u8; n];
    let mut stack: Vec<(usize, Vec<usize>, usize)> = Vec::new();
    for root in 0..n {
        if color[root] != 0 {
            continue;
        }
        color[root] = 1;
        stack.push((root, succ(root), 0));
        while let Some((u, ss, k)) = stack.last_mut() {
            if *k < ss.len() {
                let v = ss[*k];
                *k += 1;
                match color[v] {
                    0 => {
                        color[v] = 1;
                        let sv = succ(v);
                        stack.push((v, sv, 0));
                    }
                    1 => {
                        let pos = stack.iter().position(|e| e.0 == v).unwrap_or(0);
                        return Some(stack[pos..].iter().map(|e| e.0).collect());
                    }
                    _ => {}
                }
            } else {
                color[*u] = 2;
                stack.pop();
            }
        }
    }
    None
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
        let sw = &mut sim.switches[0];
        let sh = &mut sim.sh;
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
        sim.sh.ev.push(
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
