//! A shared-buffer switch: ingress accounting and PFC per (port,
//! priority), routing with ECMP, per-priority egress queues scheduled by
//! ETS, RED/ECN marking on dequeue, and the PFC watchdog.
//!
//! Buffer model (after the DCQCN/HPCC ns-3 MMU): every byte in the switch
//! is charged to its ingress (port, priority), either to the shared pool
//! or, past the XOFF threshold of a lossless priority, to that ingress's
//! headroom. XOFF goes upstream when the ingress has headroom bytes or its
//! shared bytes reach the threshold (static, or dynamic
//! `α × (buffer − headroom reserve − shared used)`, docs/dcb.md §1); XON when
//! the headroom is empty and the shared bytes are at or below the
//! threshold minus the resume offset. A lossless packet that finds its
//! headroom full is dropped (`headroom_exceeded`: thresholds too high for
//! the cable); a lossy packet that finds the shared pool full is dropped
//! (`buffer_overflow`). Bytes leave the accounting when the packet starts
//! on the egress link.

use std::collections::VecDeque;

use rand_core::RngCore;
use rand_xoshiro::Xoshiro256PlusPlus;
use serde::Serialize;

use crate::config::{Headroom, Xoff};
use crate::event::{Ev, Node};
use crate::packet::ipv4;
use crate::port::PortTx;
use crate::sim::{mix64, Shared};
use crate::time::{ser_time, Ps, PFC_FRAME_LEN, PREAMBLE_IFG};

/// Drops by cause.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct DropCounters {
    /// Lossy packet, shared buffer full (or any packet, whole buffer full).
    pub buffer_overflow: u64,
    /// Lossless packet past its XOFF threshold with the headroom full.
    pub headroom_exceeded: u64,
    /// Dropped by the PFC watchdog.
    pub watchdog: u64,
    /// No route to the destination.
    pub no_route: u64,
}

impl DropCounters {
    /// All drops.
    pub fn total(&self) -> u64 {
        self.buffer_overflow + self.headroom_exceeded + self.watchdog + self.no_route
    }

    pub(crate) fn add(&mut self, o: &DropCounters) {
        self.buffer_overflow += o.buffer_overflow;
        self.headroom_exceeded += o.headroom_exceeded;
        self.watchdog += o.watchdog;
        self.no_route += o.no_route;
    }
}

/// A watchdog action, as reported.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct WatchdogEvent {
    /// When the storm was declared.
    pub time_ps: Ps,
    /// Switch name.
    pub switch: String,
    /// Egress port.
    pub port: u16,
    /// Priority.
    pub prio: u8,
    /// Packets flushed from the queue at detection.
    pub flushed: u64,
}

#[derive(Clone, Copy, Debug, Default)]
struct Ingress {
    /// Bytes charged to the shared pool.
    shared: u64,
    /// Bytes charged to headroom.
    hdrm: u64,
    /// XOFF in force upstream.
    xoff: bool,
    /// Generation of the XOFF (stale refresh events are ignored).
    gen: u32,
}

#[derive(Clone, Copy, Debug, Default)]
struct Wd {
    stuck_polls: u32,
    last_tx: u64,
    drop_until: Ps,
}

/// One egress/ingress port's queues and buffer accounting.
#[derive(Debug, Default)]
pub(crate) struct PortQueues {
    /// Egress queues per priority (packet ids).
    pub(crate) q: [VecDeque<u32>; 8],
    /// Bytes queued per priority.
    pub(crate) qbytes: [u64; 8],
    /// Bytes queued per traffic class.
    tcbytes: [u64; 8],
    /// Ingress accounting per priority (PFC).
    ing: [Ingress; 8],
    /// PFC watchdog per priority.
    wd: [Wd; 8],
}

#[derive(Clone, Copy, Debug, Default)]
struct Dwrr {
    ptr: usize,
    fresh: bool,
    deficit: [u64; 8],
}

/// One switch.
pub(crate) struct Switch {
    pub(crate) id: u32,
    pub(crate) name: String,
    pub(crate) ports: Vec<PortTx>,
    /// Egress queues per port per priority (packet ids).
    /// Per-port queue and buffer state, kept together: a packet's arrival
    /// and departure touch one port's entry instead of five vectors.
    pub(crate) pq: Vec<PortQueues>,
    headroom: Vec<u64>,
    /// PFC frames to send per port: (priority, quanta).
    ctrl: Vec<VecDeque<(u8, u16)>>,
    dwrr: Vec<Dwrr>,
    shared_used: u64,
    shared_pool: u64,
    /// Per destination host: (start, len) into `route_ports`.
    routes: Vec<(u32, u16)>,
    route_ports: Vec<u16>,
    salt: u64,
    rng: Xoshiro256PlusPlus,
    pub(crate) drops: DropCounters,
}

impl Switch {
    pub(crate) fn new(
        id: u32,
        name: String,
        ports: Vec<PortTx>,
        sh: &Shared,
        seed: u64,
        routes: Vec<Vec<u16>>,
    ) -> Switch {
        let n = ports.len();
        let cfg = &sh.t.cfg;
        let max_frame = sh.t.max_frame as u64;
        let headroom: Vec<u64> = ports
            .iter()
            .map(|p| match cfg.buffer.headroom {
                Headroom::Bytes(b) => b,
                Headroom::Auto => {
                    let bdp =
                        (2 * p.delay as u128 * p.rate_bps as u128 / 8 / 1_000_000_000_000) as u64;
                    3 * max_frame + PFC_FRAME_LEN as u64 + bdp
                }
            })
            .collect();
        let lossless = sh.t.lossless.iter().filter(|&&l| l).count() as u64;
        let reserve: u64 = headroom.iter().sum::<u64>() * lossless;
        let mut route_ports = Vec::new();
        let routes = routes
            .into_iter()
            .map(|r| {
                let start = route_ports.len() as u32;
                route_ports.extend_from_slice(&r);
                (start, r.len() as u16)
            })
            .collect();
        use rand_core::SeedableRng;
        Switch {
            id,
            name,
            ports,
            pq: (0..n).map(|_| PortQueues::default()).collect(),
            headroom,
            ctrl: (0..n).map(|_| VecDeque::new()).collect(),
            dwrr: vec![Dwrr::default(); n],
            shared_used: 0,
            shared_pool: cfg.buffer.size.saturating_sub(reserve),
            routes,
            route_ports,
            salt: mix64(seed ^ (id as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15)),
            rng: Xoshiro256PlusPlus::seed_from_u64(seed ^ 0x5eed_0000 ^ id as u64),
            drops: DropCounters::default(),
        }
    }

    /// Equal-cost egress ports toward `dst`.
    pub(crate) fn routes_to(&self, dst: u32) -> &[u16] {
        match self.routes.get(dst as usize) {
            Some(&(s, n)) => &self.route_ports[s as usize..s as usize + n as usize],
            None => &[],
        }
    }

    fn threshold(&self, sh: &Shared) -> u64 {
        match sh.t.cfg.buffer.xoff {
            Xoff::Static(b) => b,
            Xoff::Dynamic(alpha) => {
                (self.shared_pool.saturating_sub(self.shared_used) as f64 * alpha) as u64
            }
        }
    }

    /// A data frame fully received on `in_port`.
    pub(crate) fn arrive(&mut self, sh: &mut Shared, in_port: u16, pkt: u32) {
        let (prio, flen, dst, hash) = {
            let p = sh.pool.get_mut(pkt);
            p.in_port = in_port;
            (p.prio, p.frame_len() as u64, p.dst_host, p.hash)
        };
        let routes = self.routes_to(dst);
        let out = match routes.len() {
            0 => None,
            1 => Some(routes[0]),
            n => Some(routes[(mix64(hash ^ self.salt) % n as u64) as usize]),
        };
        let Some(out) = out else {
            self.drops.no_route += 1;
            sh.pool.free(pkt);
            return;
        };
        let pr = prio as usize;
        if self.pq[out as usize].wd[pr].drop_until > sh.now {
            self.drops.watchdog += 1;
            sh.pool.free(pkt);
            return;
        }
        let ip = in_port as usize;
        if sh.t.lossless[pr] {
            let thr = self.threshold(sh);
            let ing = &mut self.pq[ip].ing[pr];
            let past = ing.shared + flen > thr || self.shared_used + flen > self.shared_pool;
            if past {
                if ing.hdrm + flen > self.headroom[ip] {
                    self.drops.headroom_exceeded += 1;
                    sh.pool.free(pkt);
                    return;
                }
                ing.hdrm += flen;
            } else {
                ing.shared += flen;
                self.shared_used += flen;
            }
            let ing = self.pq[ip].ing[pr];
            if !ing.xoff && (ing.hdrm > 0 || ing.shared >= thr) {
                self.send_xoff(sh, in_port, prio);
            }
        } else {
            if self.shared_used + flen > self.shared_pool {
                self.drops.buffer_overflow += 1;
                sh.pool.free(pkt);
                return;
            }
            self.pq[ip].ing[pr].shared += flen;
            self.shared_used += flen;
        }
        let o = out as usize;
        self.pq[o].q[pr].push_back(pkt);
        self.pq[o].qbytes[pr] += flen;
        self.pq[o].tcbytes[sh.t.tc_of[pr] as usize] += flen;
        let st = &mut self.ports[o].stats;
        st.max_queue[pr] = st.max_queue[pr].max(self.pq[o].qbytes[pr]);
        self.start_tx(sh, out);
    }

    fn send_xoff(&mut self, sh: &mut Shared, port: u16, prio: u8) {
        let ing = &mut self.pq[port as usize].ing[prio as usize];
        ing.xoff = true;
        ing.gen = ing.gen.wrapping_add(1);
        let gen = ing.gen;
        self.queue_pfc(sh, port, prio, sh.t.cfg.pfc_quanta);
        let p = &self.ports[port as usize];
        let dur = roce_wire::pfc::quanta_to_ps(sh.t.cfg.pfc_quanta, p.rate_bps);
        let refresh = ((dur as f64 * sh.t.cfg.pfc_refresh) as Ps).max(1);
        sh.push(
            sh.now + refresh,
            Ev::PfcRefresh {
                sw: self.id,
                port,
                prio,
                gen,
            },
        );
    }

    fn queue_pfc(&mut self, sh: &mut Shared, port: u16, prio: u8, quanta: u16) {
        let st = &mut self.ports[port as usize].stats;
        if quanta > 0 {
            st.xoff_tx[prio as usize] += 1;
        } else {
            st.xon_tx[prio as usize] += 1;
        }
        self.ctrl[port as usize].push_back((prio, quanta));
        self.start_tx(sh, port);
    }

    /// The refresh timer of an XOFF: re-send while still congested.
    pub(crate) fn refresh(&mut self, sh: &mut Shared, port: u16, prio: u8, gen: u32) {
        let ing = self.pq[port as usize].ing[prio as usize];
        if !ing.xoff || ing.gen != gen {
            return;
        }
        if self.should_resume(sh, port, prio) {
            self.pq[port as usize].ing[prio as usize].xoff = false;
            self.queue_pfc(sh, port, prio, 0);
            return;
        }
        self.send_xoff(sh, port, prio);
    }

    fn should_resume(&self, sh: &Shared, port: u16, prio: u8) -> bool {
        let ing = &self.pq[port as usize].ing[prio as usize];
        ing.xoff
            && ing.hdrm == 0
            && (ing.shared == 0 || ing.shared + sh.t.cfg.buffer.resume_offset <= self.threshold(sh))
    }

    /// Takes a packet's bytes out of its ingress accounting (it left the
    /// switch or was flushed) and sends XON if that ends the congestion.
    fn release(&mut self, sh: &mut Shared, in_port: u16, prio: u8, flen: u64) {
        let ing = &mut self.pq[in_port as usize].ing[prio as usize];
        let from_hdrm = ing.hdrm.min(flen);
        ing.hdrm -= from_hdrm;
        let rest = (flen - from_hdrm).min(ing.shared);
        ing.shared -= rest;
        self.shared_used -= rest;
        if self.should_resume(sh, in_port, prio) {
            let ing = &mut self.pq[in_port as usize].ing[prio as usize];
            ing.xoff = false;
            ing.gen = ing.gen.wrapping_add(1);
            self.queue_pfc(sh, in_port, prio, 0);
        }
    }

    /// A PFC frame arrived on `port`: pause that port's transmitter.
    pub(crate) fn on_pfc(&mut self, sh: &mut Shared, port: u16, frame: &roce_wire::MacControl) {
        let now = sh.now;
        let wd = &self.pq[port as usize].wd;
        let wake = self.ports[port as usize]
            .on_pause_frame(now, frame, |p| wd[p as usize].drop_until > now);
        if let Some(t) = wake {
            sh.push(
                t,
                Ev::Kick {
                    node: Node::Switch(self.id),
                    port,
                },
            );
        }
        self.start_tx(sh, port);
    }

    /// The ETS choice among priorities with queued, unpaused packets:
    /// strict TCs first, highest TC first; then DWRR over the ETS TCs with
    /// quanta proportional to tc-bw. Inside a TC the highest priority wins.
    fn pick(&mut self, sh: &Shared, port: usize) -> Option<u8> {
        let now = sh.now;
        let t = &sh.t;
        let tx = &self.ports[port];
        let q = &self.pq[port].q;
        let head = |tc: u8| -> Option<u8> {
            t.prios_of_tc[tc as usize]
                .iter()
                .copied()
                .find(|&p| !q[p as usize].is_empty() && !tx.paused(p, now))
        };
        for &tc in &t.strict_tcs {
            if let Some(p) = head(tc) {
                return Some(p);
            }
        }
        let n = t.ets_tcs.len();
        if n == 0 || !t.ets_tcs.iter().any(|&tc| head(tc).is_some()) {
            return None;
        }
        let d = &mut self.dwrr[port];
        loop {
            let tc = t.ets_tcs[d.ptr % n];
            if let Some(p) = head(tc) {
                if !d.fresh {
                    d.deficit[tc as usize] += t.quantum[tc as usize] as u64;
                    d.fresh = true;
                }
                let len = sh.pool.get(q[p as usize][0]).frame_len() as u64;
                if d.deficit[tc as usize] >= len {
                    d.deficit[tc as usize] -= len;
                    return Some(p);
                }
            } else {
                d.deficit[tc as usize] = 0;
            }
            d.ptr = (d.ptr + 1) % n;
            d.fresh = false;
        }
    }

    /// Marks the link busy until `done` and schedules a wake-up then if
    /// the port has more to send (an idle port needs no event: the next
    /// arrival finds the link free, or schedules the wake-up itself).
    fn occupy(&mut self, sh: &mut Shared, o: usize, done: Ps) {
        let more = !self.ctrl[o].is_empty() || self.pq[o].q.iter().any(|q| !q.is_empty());
        let tx = &mut self.ports[o];
        tx.busy_until = done;
        tx.wake_pending = more;
        if more {
            sh.push(
                done,
                Ev::TxDone {
                    node: Node::Switch(self.id),
                    port: o as u16,
                },
            );
        }
    }

    /// Starts the next frame on `port` if its link is idle.
    pub(crate) fn start_tx(&mut self, sh: &mut Shared, port: u16) {
        let o = port as usize;
        let tx = &mut self.ports[o];
        if sh.now < tx.busy_until {
            if !tx.wake_pending {
                tx.wake_pending = true;
                sh.push(
                    tx.busy_until,
                    Ev::Kick {
                        node: Node::Switch(self.id),
                        port,
                    },
                );
            }
            return;
        }
        if let Some((prio, quanta)) = self.ctrl[o].pop_front() {
            let tx = &self.ports[o];
            let done = sh.now + ser_time(PFC_FRAME_LEN + PREAMBLE_IFG, tx.rate_bps);
            sh.push(
                done + tx.delay,
                Ev::Pfc {
                    node: tx.peer,
                    port: tx.peer_port,
                    prio,
                    quanta,
                },
            );
            self.occupy(sh, o, done);
            return;
        }
        let Some(prio) = self.pick(sh, o) else {
            return;
        };
        let pr = prio as usize;
        let Some(pkt) = self.pq[o].q[pr].pop_front() else {
            return;
        };
        let tc = sh.t.tc_of[pr] as usize;
        let (flen, wlen, in_port) = {
            let p = sh.pool.get(pkt);
            (p.frame_len() as u64, p.wire_len(), p.in_port)
        };
        // RED on dequeue, on the depth of the TC the packet saw.
        if let Some(e) = sh.t.cfg.ecn[tc] {
            let prob = e.probability(self.pq[o].tcbytes[tc]);
            if prob > 0.0
                && (prob >= 1.0
                    || (self.rng.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64) < prob)
                && ipv4::mark_ce(sh.pool.get_mut(pkt).head_mut())
            {
                self.ports[o].stats.ecn_marked[pr] += 1;
            }
        }
        self.pq[o].qbytes[pr] -= flen;
        self.pq[o].tcbytes[tc] -= flen;
        self.release(sh, in_port, prio, flen);
        let tx = &mut self.ports[o];
        tx.stats.tx_bytes[pr] += flen;
        tx.stats.tx_pkts[pr] += 1;
        let done = sh.now + ser_time(wlen, tx.rate_bps);
        sh.push(
            done + tx.delay,
            Ev::Arrive {
                node: tx.peer,
                port: tx.peer_port,
                pkt,
            },
        );
        self.occupy(sh, o, done);
    }

    /// The link of `port` finished a frame (or a pause may have expired).
    pub(crate) fn tx_done(&mut self, sh: &mut Shared, port: u16) {
        self.ports[port as usize].wake_pending = false;
        self.start_tx(sh, port);
    }

    /// One watchdog poll (docs/dcb.md §1): a lossless egress queue that is
    /// non-empty, paused and sent nothing since the last poll for `detect`
    /// polls in a row is declared stormed: its packets are dropped, and
    /// arriving ones and pauses for it are dropped/ignored for `restore`.
    pub(crate) fn watchdog(&mut self, sh: &mut Shared, out: &mut Vec<WatchdogEvent>) {
        let Some(cfg) = sh.t.cfg.watchdog else {
            return;
        };
        let now = sh.now;
        for o in 0..self.ports.len() {
            for pr in 0..8 {
                if !sh.t.lossless[pr] {
                    continue;
                }
                let sent = self.ports[o].stats.tx_pkts[pr];
                let queued = !self.pq[o].q[pr].is_empty();
                let w = &mut self.pq[o].wd[pr];
                if w.drop_until > now {
                    w.last_tx = sent;
                    continue;
                }
                let stuck = queued && self.ports[o].paused(pr as u8, now) && sent == w.last_tx;
                w.last_tx = sent;
                w.stuck_polls = if stuck { w.stuck_polls + 1 } else { 0 };
                if w.stuck_polls < cfg.detect {
                    continue;
                }
                w.stuck_polls = 0;
                w.drop_until = now + cfg.restore;
                self.ports[o].force_resume(pr as u8, now);
                let mut flushed = 0;
                while let Some(pkt) = self.pq[o].q[pr].pop_front() {
                    let (flen, in_port) = {
                        let p = sh.pool.get(pkt);
                        (p.frame_len() as u64, p.in_port)
                    };
                    self.pq[o].qbytes[pr] -= flen;
                    self.pq[o].tcbytes[sh.t.tc_of[pr] as usize] -= flen;
                    sh.pool.free(pkt);
                    self.drops.watchdog += 1;
                    flushed += 1;
                    self.release(sh, in_port, pr as u8, flen);
                }
                out.push(WatchdogEvent {
                    time_ps: now,
                    switch: self.name.clone(),
                    port: o as u16,
                    prio: pr as u8,
                    flushed,
                });
            }
        }
    }

    /// Egress queues (port, prio) that are paused and hold packets, with
    /// the set of ingress ports those packets came from (for the
    /// deadlock wait-for graph).
    pub(crate) fn blocked_queues(&self, sh: &Shared) -> Vec<(u16, u8, Vec<u16>)> {
        let mut v = Vec::new();
        for o in 0..self.ports.len() {
            for pr in 0..8u8 {
                let q = &self.pq[o].q[pr as usize];
                if q.is_empty() || !self.ports[o].paused(pr, sh.now) {
                    continue;
                }
                let mut ins: Vec<u16> = q.iter().map(|&p| sh.pool.get(p).in_port).collect();
                ins.sort_unstable();
                ins.dedup();
                v.push((o as u16, pr, ins));
            }
        }
        v
    }
}
