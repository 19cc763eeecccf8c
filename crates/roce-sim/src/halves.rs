//! The two halves of the fabric and what each does with its events: the
//! hosts (engines, applications, NIC transmitters, flow bookkeeping) and
//! the switches (queues, PFC, ETS, ECN, and the periodic queue sampling,
//! PFC watchdog and deadlock check). They share nothing but messages
//! (see [`crate::run`]), so they can run on two cores.

use std::collections::BTreeMap;

use crate::config::{HostConfig, MetricsConfig};
use crate::event::{Ev, Node};
use crate::host::{FlowDone, FlowReq, Host};
use crate::metrics::{self, DeadlockReport, QueueSample};
use crate::port::{pfc_frame, PortTx};
use crate::sim::{FlowState, Shared};
use crate::switch::{Switch, WatchdogEvent};
use crate::time::Ps;

/// The periodic work done between windows, at fixed instants.
#[derive(Clone, Debug)]
pub(crate) struct Schedule {
    /// (next instant, interval) of queue sampling, the PFC watchdog's poll
    /// and the deadlock check.
    sample: Option<(Ps, Ps)>,
    watchdog: Option<(Ps, Ps)>,
    deadlock: Option<(Ps, Ps)>,
}

/// Which periodic tasks fall due at an instant.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Due {
    pub(crate) sample: bool,
    pub(crate) watchdog: bool,
    pub(crate) deadlock: bool,
}

impl Schedule {
    pub(crate) fn new(m: &MetricsConfig, watchdog_poll: Option<Ps>) -> Schedule {
        let every = |first: Ps, dt: Ps| (dt > 0).then_some((first, dt));
        Schedule {
            sample: every(0, m.sample_interval),
            watchdog: watchdog_poll.and_then(|p| every(p, p)),
            deadlock: every(m.deadlock_check, m.deadlock_check),
        }
    }

    /// The next instant with work.
    pub(crate) fn next(&self) -> Option<Ps> {
        [self.sample, self.watchdog, self.deadlock]
            .iter()
            .flatten()
            .map(|&(t, _)| t)
            .min()
    }

    /// The tasks due at `at` (the earliest instant with work), each
    /// rescheduled one interval later.
    pub(crate) fn take_due(&mut self, at: Ps) -> Due {
        let fire = |slot: &mut Option<(Ps, Ps)>| match slot {
            Some((t, dt)) if *t == at => {
                *t += *dt;
                true
            }
            _ => false,
        };
        Due {
            sample: fire(&mut self.sample),
            watchdog: fire(&mut self.watchdog),
            deadlock: fire(&mut self.deadlock),
        }
    }
}

/// One half's view for the drivers in [`crate::run`].
pub(crate) trait Half {
    fn sh(&mut self) -> &mut Shared;
    fn dispatch(&mut self, ev: Ev);
    fn tasks(&mut self, due: Due);
    /// Every flow has completed (the run may stop).
    fn all_done(&self) -> bool {
        false
    }

    /// Runs every event before `t_end`.
    fn run_until(&mut self, t_end: Ps) {
        while let Some(t) = self.sh().ev.peek_time() {
            if t >= t_end {
                break;
            }
            let (t, ev) = self.sh().ev.pop().expect("peeked");
            self.sh().now = t;
            self.dispatch(ev);
        }
    }
}

/// The hosts and their flows.
pub(crate) struct HostHalf {
    pub(crate) sh: Shared,
    pub(crate) hosts: Vec<Host>,
    pub(crate) host_cfg: HostConfig,
    pub(crate) flows: Vec<FlowState>,
    /// Flow indices by start time; only the next one to start sits in the
    /// event queue (a 100 ms run has ~10^6 flows, and a heap that holds
    /// them all makes every event slower).
    pub(crate) start_order: Vec<u32>,
    pub(crate) next_start: usize,
    pub(crate) done: Vec<FlowDone>,
    pub(crate) completed: usize,
    /// When the last flow completed.
    pub(crate) all_done_at: Option<Ps>,
    pub(crate) tput: BTreeMap<(u32, u32, u8), Vec<u64>>,
    pub(crate) throughput_bin: Ps,
    /// Paused host transmitters at each sampling instant.
    pub(crate) pause_samples: Vec<metrics::PauseSample>,
    pub(crate) max_samples: usize,
}

impl HostHalf {
    /// Puts the next flow (in start-time order) into the event queue.
    pub(crate) fn schedule_next_start(&mut self) {
        if let Some(&i) = self.start_order.get(self.next_start) {
            let t = self.flows[i as usize].spec.start.max(self.sh.now);
            self.sh.push(t, Ev::FlowStart { flow: i });
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

    fn record_tput(&mut self, h: u32, pkt: u32) {
        let bin = self.throughput_bin;
        if bin == 0 {
            return;
        }
        let p = self.sh.pool.get(pkt);
        // BTH opcode after IPv4 (20) and UDP (8): skip ACKs and CNPs.
        let op = p.head().get(28).copied().unwrap_or(0x11);
        if matches!(op, 0x11 | 0x12 | 0x81) {
            return;
        }
        let series = self.tput.entry((p.src_host, h, p.prio)).or_default();
        let i = (self.sh.now / bin) as usize;
        if series.len() <= i {
            series.resize(i + 1, 0);
        }
        series[i] += p.len() as u64;
    }

    fn count(&mut self, n: usize) {
        self.completed += n;
        if n > 0 && self.completed == self.flows.len() {
            self.all_done_at = Some(self.sh.now);
        }
    }
}

/// Appends a sample for each paused priority of `tx`.
fn sample_pauses(out: &mut Vec<metrics::PauseSample>, now: Ps, node: Node, port: u16, tx: &PortTx) {
    for prio in 0..8u8 {
        if tx.paused(prio, now) {
            out.push(metrics::PauseSample {
                time_ps: now,
                node,
                port,
                prio,
            });
        }
    }
}

impl Half for HostHalf {
    fn sh(&mut self) -> &mut Shared {
        &mut self.sh
    }

    fn all_done(&self) -> bool {
        self.all_done_at.is_some()
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
                let n = self.hosts[h as usize].arrive(&mut self.sh, pkt, &mut self.done);
                self.count(n);
            }
            Ev::Pfc {
                node: Node::Host(h),
                prio,
                quanta,
                ..
            } => self.hosts[h as usize].on_pfc(sh, &pfc_frame(prio, quanta)),
            Ev::TxDone {
                node: Node::Host(h),
                ..
            } => self.hosts[h as usize].tx_done(sh),
            Ev::Kick {
                node: Node::Host(h),
                ..
            } => self.hosts[h as usize].try_tx(sh),
            Ev::HostTimer { host } => {
                let n = self.hosts[host as usize].on_timer(&mut self.sh, &mut self.done);
                self.count(n);
            }
            Ev::FlowStart { flow } => {
                self.start_flow(flow);
                self.next_start += 1;
                self.schedule_next_start();
            }
            _ => unreachable!("a switch event reached the hosts: {ev:?}"),
        }
    }

    fn tasks(&mut self, due: Due) {
        if due.sample && self.pause_samples.len() < self.max_samples {
            let now = self.sh.now;
            for h in &self.hosts {
                sample_pauses(&mut self.pause_samples, now, Node::Host(h.id), 0, &h.tx);
            }
        }
    }
}

/// The switches and the fabric-wide checks.
pub(crate) struct SwitchHalf {
    pub(crate) sh: Shared,
    pub(crate) switches: Vec<Switch>,
    pub(crate) mcfg: MetricsConfig,
    pub(crate) watchdog_events: Vec<WatchdogEvent>,
    pub(crate) deadlocks: Vec<DeadlockReport>,
    /// The cycle seen at the last check (its queues), since when, and
    /// whether it was reported.
    pub(crate) dl_candidate: Option<(Vec<QueueId>, Ps, bool)>,
    pub(crate) queue_samples: Vec<QueueSample>,
    /// Paused switch transmitters at each sampling instant.
    pub(crate) pause_samples: Vec<metrics::PauseSample>,
    /// Sampling instants recorded from the convergence time on (queues
    /// absent from one were empty).
    pub(crate) sample_ticks: u64,
}

/// An egress queue: (switch, port, priority).
pub(crate) type QueueId = (u32, u16, u8);

impl Half for SwitchHalf {
    fn sh(&mut self) -> &mut Shared {
        &mut self.sh
    }

    fn dispatch(&mut self, ev: Ev) {
        let sh = &mut self.sh;
        match ev {
            Ev::Arrive {
                node: Node::Switch(s),
                port,
                pkt,
            } => self.switches[s as usize].arrive(sh, port, pkt),
            Ev::Pfc {
                node: Node::Switch(s),
                port,
                prio,
                quanta,
            } => self.switches[s as usize].on_pfc(sh, port, &pfc_frame(prio, quanta)),
            Ev::TxDone {
                node: Node::Switch(s),
                port,
            }
            | Ev::Kick {
                node: Node::Switch(s),
                port,
            } => self.switches[s as usize].tx_done(sh, port),
            Ev::PfcRefresh {
                sw,
                port,
                prio,
                gen,
            } => self.switches[sw as usize].refresh(sh, port, prio, gen),
            _ => unreachable!("a host event reached the switches: {ev:?}"),
        }
    }

    fn tasks(&mut self, due: Due) {
        if due.sample {
            self.sample();
        }
        if due.watchdog {
            for s in &mut self.switches {
                s.watchdog(&mut self.sh, &mut self.watchdog_events);
            }
        }
        if due.deadlock {
            self.check_deadlock();
        }
    }
}

impl SwitchHalf {
    fn sample(&mut self) {
        if self.queue_samples.len() >= self.mcfg.max_queue_samples {
            return;
        }
        let now = self.sh.now;
        if now >= self.mcfg.convergence {
            self.sample_ticks += 1;
        }
        for s in &self.switches {
            for (o, tx) in s.ports.iter().enumerate() {
                sample_pauses(
                    &mut self.pause_samples,
                    now,
                    Node::Switch(s.id),
                    o as u16,
                    tx,
                );
            }
        }
        for s in &self.switches {
            for (o, qb) in s.pq.iter().map(|p| &p.qbytes).enumerate() {
                for (pr, &b) in qb.iter().enumerate() {
                    if b > 0 {
                        self.queue_samples.push(QueueSample {
                            time_ps: now,
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
