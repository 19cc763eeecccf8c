//! A host: one NIC port driving one `roce_core::Device`, and the
//! application that turns flows into RDMA WRITEs on lazily connected RC
//! QPs (one per host pair and DSCP, connected in both directions).
//!
//! The NIC pulls a packet from the engine only when its link is idle. The
//! engine chooses which QP sends, so when the pulled packet's priority is
//! paused by the switch the NIC holds it until XON or expiry (head-of-line
//! blocking inside the NIC; real NICs keep per-priority queues).

use std::collections::{BTreeMap, VecDeque};
use std::net::{IpAddr, Ipv4Addr};

use roce_core::{
    Access, AddressVector, CqId, Device, DeviceConfig, MemFault, MrKeys, PdId, Psn, QpAttr,
    QpAttrMask, QpCaps, QpInitAttr, QpState, QpType, Qpn, RegionMemory, RxMeta, SendOp, SendWr,
    Sge, Tx, Wc, WcOpcode, WcStatus,
};

use crate::config::HostConfig;
use crate::event::{Ev, Node};
use crate::packet::ipv4;
use crate::port::PortTx;
use crate::sim::{mix64, Shared};
use crate::time::{ser_time, Ps, NS};

/// Registered memory whose contents do not matter: reads give zeros,
/// writes vanish. Lets every host expose a 4 GiB region at no cost.
struct NullMemory(usize);

impl RegionMemory for NullMemory {
    fn len(&self) -> usize {
        self.0
    }
    fn read(&self, _offset: usize, out: &mut [u8]) -> Result<(), MemFault> {
        out.fill(0);
        Ok(())
    }
    fn write(&mut self, _offset: usize, _data: &[u8]) -> Result<(), MemFault> {
        Ok(())
    }
}

const MR_BASE: u64 = 0x1_0000_0000;
const MR_LEN: usize = 1 << 32;

/// IPv4 address of host `i`: 10.0.0.0 + i + 1.
pub(crate) fn host_ip(i: u32) -> Ipv4Addr {
    Ipv4Addr::from(0x0a00_0001u32 + i)
}

/// Host index of an address from [`host_ip`].
pub(crate) fn host_of(ip: u32) -> u32 {
    ip.wrapping_sub(0x0a00_0001)
}

/// What the application did with one flow.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct FlowDone {
    pub(crate) end: Option<Ps>,
    pub(crate) failed: bool,
}

/// A flow as the hosts see it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct FlowReq {
    pub(crate) dst: u32,
    pub(crate) size: u64,
}

pub(crate) struct Host {
    pub(crate) id: u32,
    pub(crate) dev: Device,
    pd: PdId,
    cq: CqId,
    mr: MrKeys,
    pub(crate) tx: PortTx,
    held: Option<u32>,
    timer_at: Option<Ps>,
    /// (peer, dscp) → local QP.
    qps: BTreeMap<(u32, u8), Qpn>,
    /// Flows waiting for send-queue room, per QP.
    backlog: BTreeMap<u32, VecDeque<(u32, FlowReq)>>,
    wc: Vec<Wc>,
    pub(crate) ce_received: u64,
}

impl Host {
    pub(crate) fn new(id: u32, tx: PortTx, cfg: &HostConfig) -> Host {
        let mut c = DeviceConfig::new(IpAddr::V4(host_ip(id)));
        c.ecn = cfg.ecn;
        c.active_mtu = cfg.mtu;
        // DCQCN (docs/dcb.md §4): the reaction point's ceiling is this NIC's link.
        c.cc = cfg.cc;
        c.link_bps = tx.rate_bps;
        // A hardware NIC's window, not rxe's 128 PSNs: at 100 Gb/s and
        // microsecond round trips 128 packets would cap a flow.
        c.max_unacked_psns = 0;
        // A NIC that arbitrates between QPs packet by packet.
        c.tx_burst = 1;
        // Identifiers (QPNs, keys, PSNs) from a fixed seed per host: a
        // run is reproducible, and hosts differ.
        let mut seed = *b"roce-sim host seed ____________.";
        seed[20..24].copy_from_slice(&id.to_le_bytes());
        c.seed = Some(seed);
        let mut dev = Device::new(c);
        let pd = dev.alloc_pd();
        let cq = dev.create_cq(1 << 16);
        let access = Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ;
        let mr = dev
            .reg_mr(pd, MR_BASE, Box::new(NullMemory(MR_LEN)), access)
            .expect("a valid registration");
        Host {
            id,
            dev,
            pd,
            cq,
            mr,
            tx,
            held: None,
            timer_at: None,
            qps: BTreeMap::new(),
            backlog: BTreeMap::new(),
            wc: vec![Wc::new(0, WcStatus::Success, WcOpcode::Send, Qpn::new(0)); 64],
            ce_received: 0,
        }
    }

    /// Creates a QP on each of `a` and `b` (for `dscp`) and brings both to
    /// RTS connected to each other, unless they exist.
    pub(crate) fn connect(hosts: &mut [Host], a: u32, b: u32, dscp: u8, cfg: &HostConfig) -> Qpn {
        if let Some(&q) = hosts[a as usize].qps.get(&(b, dscp)) {
            return q;
        }
        let qa = hosts[a as usize].create_qp();
        let qb = hosts[b as usize].create_qp();
        hosts[a as usize].bring_up(qa, b, qb, dscp, cfg);
        hosts[b as usize].bring_up(qb, a, qa, dscp, cfg);
        hosts[a as usize].qps.insert((b, dscp), qa);
        hosts[b as usize].qps.insert((a, dscp), qb);
        qa
    }

    fn create_qp(&mut self) -> Qpn {
        let init = QpInitAttr {
            qp_type: QpType::Rc,
            pd: self.pd,
            send_cq: self.cq,
            recv_cq: self.cq,
            srq: None,
            cap: QpCaps {
                max_send_wr: 4096,
                max_recv_wr: 16,
                ..QpCaps::default()
            },
            sq_sig_all: true,
        };
        self.dev.create_qp(init).expect("CQ exists")
    }

    /// RESET → INIT → RTR → RTS with the masks the transition table requires.
    fn bring_up(&mut self, qp: Qpn, peer: u32, peer_qp: Qpn, dscp: u8, cfg: &HostConfig) {
        let mut a = QpAttr {
            qp_state: QpState::Init,
            qp_access_flags: Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ,
            ..QpAttr::default()
        };
        let req = |from, to| QpAttrMask::required(QpType::Rc, from, to);
        let m = req(QpState::Reset, QpState::Init);
        self.dev.modify_qp(qp, &a, m).expect("INIT");
        a.qp_state = QpState::Rtr;
        a.path_mtu = cfg.mtu;
        a.ah_attr = AddressVector {
            dest: IpAddr::V4(host_ip(peer)),
            traffic_class: dscp << 2,
            ..AddressVector::default()
        };
        a.dest_qp_num = peer_qp;
        a.rq_psn = Psn::new(0);
        a.max_dest_rd_atomic = 16;
        a.min_rnr_timer = 1;
        let m = req(QpState::Init, QpState::Rtr);
        self.dev.modify_qp(qp, &a, m).expect("RTR");
        a.qp_state = QpState::Rts;
        a.sq_psn = Psn::new(0);
        a.timeout = cfg.qp_timeout;
        a.retry_cnt = 7;
        a.rnr_retry = 7;
        a.max_rd_atomic = 16;
        let m = req(QpState::Rtr, QpState::Rts);
        self.dev.modify_qp(qp, &a, m).expect("RTS");
    }

    /// Posts the RDMA WRITE of flow `id` on `qp` (or queues it while the
    /// send queue is full).
    pub(crate) fn post(
        &mut self,
        sh: &mut Shared,
        qp: Qpn,
        id: u32,
        f: FlowReq,
        peer_rkey: roce_core::Rkey,
    ) {
        let len = f.size.clamp(1, u32::MAX as u64) as u32;
        let wr = SendWr::rdma(
            id as u64,
            SendOp::Write,
            [Sge {
                addr: MR_BASE,
                length: len,
                lkey: self.mr.lkey,
            }],
            MR_BASE,
            peer_rkey,
        );
        match self.dev.post_send(qp, wr) {
            Ok(()) => {}
            Err(roce_core::PostError::QueueFull) => {
                self.backlog
                    .entry(qp.value())
                    .or_default()
                    .push_back((id, f));
            }
            Err(e) => panic!("post_send refused a well-formed WRITE: {e}"),
        }
        self.try_tx(sh);
        self.resched_timer(sh);
    }

    pub(crate) fn rkey(&self) -> roce_core::Rkey {
        self.mr.rkey
    }

    /// Sends the next packet if the link is idle and its priority flows.
    pub(crate) fn try_tx(&mut self, sh: &mut Shared) {
        if self.tx.busy {
            return;
        }
        let pkt = match self.held.take() {
            Some(p) => p,
            None => {
                // A NIC has no send calls to split: an end of batch is
                // passed over.
                let n = loop {
                    match self.dev.poll_transmit(sh.now / NS, &mut sh.scratch) {
                        Tx::Datagram(t) => break t.size,
                        Tx::EndOfBatch => continue,
                        Tx::Idle => return,
                    }
                };
                let d = &sh.scratch[..n];
                let prio = sh.t.dscp_prio[ipv4::dscp(d) as usize & 63];
                let (src, dst) = ipv4::addrs(d).unwrap_or((0, 0));
                let sport = ipv4::udp_sport(d);
                let id = sh.pool.alloc(d);
                let p = sh.pool.get_mut(id);
                p.prio = prio;
                p.src_host = self.id;
                p.dst_host = host_of(dst);
                p.hash = mix64(((src as u64) << 32 | dst as u64) ^ (sport as u64) << 17);
                id
            }
        };
        let (prio, wlen, flen) = {
            let p = sh.pool.get(pkt);
            (p.prio, p.wire_len(), p.frame_len() as u64)
        };
        if self.tx.paused(prio, sh.now) {
            self.held = Some(pkt);
            return;
        }
        let tx = &mut self.tx;
        tx.busy = true;
        tx.stats.tx_bytes[prio as usize] += flen;
        tx.stats.tx_pkts[prio as usize] += 1;
        let done = sh.now + ser_time(wlen, tx.rate_bps);
        let me = Node::Host(self.id);
        sh.push(done, Ev::TxDone { node: me, port: 0 });
        sh.push(
            done + tx.delay,
            Ev::Arrive {
                node: tx.peer,
                port: tx.peer_port,
                pkt,
            },
        );
    }

    /// Schedules the engine's next timer if it is earlier than the one
    /// pending. `Device::poll_timeout` is O(1) (the top of its timer heap),
    /// so it is asked after every engine call: with congestion control a
    /// QP arms deadlines (pacing slots, rate timers, CNP hold-off) earlier
    /// than the pending ACK timeouts. A superseded event finds `timer_at`
    /// changed and does nothing; one whose deadline moved later just asks
    /// again.
    pub(crate) fn resched_timer(&mut self, sh: &mut Shared) {
        if let Some(t) = self.dev.poll_timeout() {
            let t = (t * NS).max(sh.now);
            if self.timer_at.is_none_or(|p| t < p) {
                self.timer_at = Some(t);
                sh.push(t, Ev::HostTimer { host: self.id });
            }
        }
    }

    /// The engine's timer event at `sh.now`.
    /// Returns the number of flows that completed.
    pub(crate) fn on_timer(&mut self, sh: &mut Shared, done: &mut [FlowDone]) -> usize {
        if self.timer_at != Some(sh.now) {
            return 0;
        }
        self.timer_at = None;
        self.dev.handle_timeout(sh.now / NS);
        self.after_engine(sh, done)
    }

    /// A datagram for this host; returns the number of flows that completed.
    pub(crate) fn arrive(&mut self, sh: &mut Shared, pkt: u32, done: &mut [FlowDone]) -> usize {
        let p = sh.pool.get(pkt);
        if ipv4::ecn(p.head()) == 3 {
            self.ce_received += 1;
        }
        let n = p.write_to(&mut sh.scratch);
        self.dev
            .handle_datagram(sh.now / NS, &sh.scratch[..n], RxMeta::default());
        sh.pool.free(pkt);
        self.after_engine(sh, done)
    }

    fn after_engine(&mut self, sh: &mut Shared, done: &mut [FlowDone]) -> usize {
        let mut completed = 0;
        // A CQ overflow cannot happen here: the CQ holds 65536 entries and
        // is drained after every engine call.
        while let Ok(n) = self.dev.poll_cq(self.cq, &mut self.wc) {
            for i in 0..n {
                let wc = self.wc[i];
                if let Some(f) = done.get_mut(wc.wr_id as usize) {
                    if f.end.is_none() {
                        completed += 1;
                    }
                    f.end = Some(sh.now);
                    f.failed = wc.status != WcStatus::Success;
                }
                self.drain_backlog(sh, wc.qp_num);
            }
            if n < self.wc.len() {
                break;
            }
        }
        self.try_tx(sh);
        self.resched_timer(sh);
        completed
    }

    fn drain_backlog(&mut self, sh: &mut Shared, qp: Qpn) {
        let Some(b) = self.backlog.get_mut(&qp.value()) else {
            return;
        };
        if let Some((id, f)) = b.pop_front() {
            let rkey = sh.rkeys[f.dst as usize];
            self.post(sh, qp, id, f, rkey);
        }
    }

    /// Pause frame from the switch.
    pub(crate) fn on_pfc(&mut self, sh: &mut Shared, frame: &roce_wire::MacControl) {
        if let Some(t) = self.tx.on_pause_frame(sh.now, frame, |_| false) {
            sh.push(
                t,
                Ev::Kick {
                    node: Node::Host(self.id),
                    port: 0,
                },
            );
        }
        self.try_tx(sh);
    }

    /// Link idle again.
    pub(crate) fn tx_done(&mut self, sh: &mut Shared) {
        self.tx.busy = false;
        self.try_tx(sh);
        self.resched_timer(sh);
    }
}

impl Host {
    /// (retransmitted, timeouts, sequence NAKs sent) over this host's QPs.
    pub(crate) fn qp_totals(&self) -> (u64, u64, u64) {
        let mut t = (0, 0, 0);
        for &q in self.qps.values() {
            if let Some(c) = self.dev.qp_counters(q) {
                t.0 += c.retransmitted;
                t.1 += c.timeouts;
                t.2 += c.seq_naks_sent;
            }
        }
        t
    }

    /// Congestion control counters of this host's QPs:
    /// ((peer, dscp), counters) in QP order.
    pub(crate) fn cc_counters(&self) -> Vec<((u32, u8), roce_core::CcCounters)> {
        self.qps
            .iter()
            .filter_map(|(&k, &q)| self.dev.qp_cc_counters(q).map(|c| (k, c)))
            .collect()
    }
}
