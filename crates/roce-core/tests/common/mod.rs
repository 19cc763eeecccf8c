//! A deterministic two-device world for engine tests: virtual time, a wire
//! with latency, and a hook to drop, duplicate or alter datagrams.
#![allow(dead_code, unreachable_pub)]

use std::collections::VecDeque;
use std::net::IpAddr;

use roce_core::*;
use roce_testkit::rc::{self, Link};

/// What the wire does with one datagram.
pub enum Verdict {
    Deliver,
    Drop,
    Duplicate,
    /// Deliver these bytes instead.
    Replace(Vec<u8>),
}

pub struct Host {
    pub dev: Device,
    pub pd: PdId,
    pub cq: CqId,
    pub mr: MrKeys,
    pub base: u64,
    pub len: usize,
}

impl Host {
    pub fn new(addr: &str, mem_len: usize, base: u64) -> Host {
        Host::with_mtu(addr, mem_len, base, 4096)
    }

    pub fn with_mtu(addr: &str, mem_len: usize, base: u64, mtu: u32) -> Host {
        Host::with_config(addr, mem_len, base, |c| c.active_mtu = mtu)
    }

    /// A host whose device configuration `tweak` adjusts.
    pub fn with_config(
        addr: &str,
        mem_len: usize,
        base: u64,
        tweak: impl Fn(&mut DeviceConfig),
    ) -> Host {
        let mut cfg = DeviceConfig::new(addr.parse().unwrap());
        tweak(&mut cfg);
        let mut dev = Device::new(cfg);
        let pd = dev.alloc_pd();
        let cq = dev.create_cq(4096);
        let access = Access::LOCAL_WRITE
            | Access::REMOTE_WRITE
            | Access::REMOTE_READ
            | Access::REMOTE_ATOMIC;
        let mr = dev
            .reg_mr(pd, base, Box::new(vec![0u8; mem_len]), access)
            .unwrap();
        Host {
            dev,
            pd,
            cq,
            mr,
            base,
            len: mem_len,
        }
    }

    pub fn addr(&self) -> IpAddr {
        self.dev.addrs()[0]
    }

    pub fn sge(&self, off: u64, len: u32) -> Sge {
        Sge {
            addr: self.base + off,
            length: len,
            lkey: self.mr.lkey,
        }
    }

    pub fn write(&mut self, off: u64, data: &[u8]) {
        self.dev
            .mr_write(self.mr, self.pd, self.base + off, data)
            .unwrap();
    }

    pub fn read(&self, off: u64, len: usize) -> Vec<u8> {
        let mut v = vec![0u8; len];
        self.dev
            .mr_read(self.mr, self.pd, self.base + off, &mut v)
            .unwrap();
        v
    }

    pub fn poll(&mut self) -> Vec<Wc> {
        let mut out = vec![Wc::new(0, WcStatus::Success, WcOpcode::Send, Qpn::new(0)); 64];
        let mut all = Vec::new();
        loop {
            let n = self.dev.poll_cq(self.cq, &mut out).expect("CQ overflow");
            all.extend_from_slice(&out[..n]);
            if n < out.len() {
                return all;
            }
        }
    }
}

/// Decides the fate of each datagram: (sending host index, bytes).
pub type Filter = Box<dyn FnMut(usize, &[u8]) -> Verdict>;

pub struct World {
    pub hosts: [Host; 2],
    pub now: u64,
    pub latency: u64,
    wire: VecDeque<(u64, usize, Vec<u8>)>,
    pub filter: Filter,
    pub delivered: u64,
}

impl World {
    pub fn new(mem_len: usize) -> World {
        World::with_mtu(mem_len, 4096)
    }

    pub fn with_mtu(mem_len: usize, mtu: u32) -> World {
        World::with_config(mem_len, |c| c.active_mtu = mtu)
    }

    /// Two hosts whose device configurations `tweak` adjusts.
    pub fn with_config(mem_len: usize, tweak: impl Fn(&mut DeviceConfig)) -> World {
        World {
            hosts: [
                Host::with_config("10.0.0.1", mem_len, 0x1000_0000, &tweak),
                Host::with_config("10.0.0.2", mem_len, 0x2000_0000, &tweak),
            ],
            now: 0,
            latency: 1_000,
            wire: VecDeque::new(),
            filter: Box::new(|_, _| Verdict::Deliver),
            delivered: 0,
        }
    }

    /// Posts, on host 0's `qp`, an RDMA `op` (wr_id 1) between host 0's
    /// memory at `local_off` and host 1's at `remote_off`, `len` bytes.
    pub fn post_rdma(&mut self, qp: Qpn, op: SendOp, local_off: u64, len: u32, remote_off: u64) {
        let (va, rkey) = (self.hosts[1].base + remote_off, self.hosts[1].mr.rkey);
        let sge = self.hosts[0].sge(local_off, len);
        let wr = SendWr::rdma(1, op, [sge], va, rkey);
        self.hosts[0].dev.post_send(qp, wr).unwrap();
    }

    /// Creates a QP of `qp_type` on each host and connects them (RC/UC) or
    /// brings them to RTS (UD).
    pub fn connect(&mut self, qp_type: QpType, pmtu: u32) -> (Qpn, Qpn) {
        self.connect_with(qp_type, pmtu, |_, _| {})
    }

    /// As `connect`, with `tweak(host index, attr)` applied before RTR and RTS.
    pub fn connect_with(
        &mut self,
        qp_type: QpType,
        pmtu: u32,
        tweak: impl Fn(usize, &mut QpAttr),
    ) -> (Qpn, Qpn) {
        let q = self.create_qps(qp_type, |_, _| {});
        self.link(qp_type, pmtu, q, [0x100, 0x200], tweak);
        (q[0], q[1])
    }

    /// A QP of `qp_type` on each host, on its PD and CQ (init attributes
    /// adjusted by `tweak(host index, init)`), in RESET.
    pub fn create_qps(
        &mut self,
        qp_type: QpType,
        tweak: impl Fn(usize, &mut QpInitAttr),
    ) -> [Qpn; 2] {
        let mut q = [Qpn::new(0); 2];
        for (i, h) in self.hosts.iter_mut().enumerate() {
            let mut init = QpInitAttr {
                qp_type,
                pd: h.pd,
                send_cq: h.cq,
                recv_cq: h.cq,
                srq: None,
                cap: QpCaps::default(),
                sq_sig_all: false,
            };
            tweak(i, &mut init);
            q[i] = h.dev.create_qp(init).unwrap();
        }
        q
    }

    /// Brings `q[0]` (on host 0) and `q[1]` (on host 1) to RTS connected
    /// to each other ([`roce_testkit::rc::bring_up`]): host `i` sends from
    /// PSN `psn[i]`; `tweak(i, attr)` changes host `i`'s attributes first.
    pub fn link(
        &mut self,
        qp_type: QpType,
        pmtu: u32,
        q: [Qpn; 2],
        psn: [u32; 2],
        tweak: impl Fn(usize, &mut QpAttr),
    ) {
        let addrs = [self.hosts[0].addr(), self.hosts[1].addr()];
        for i in 0..2 {
            let link = Link {
                qp_type,
                pmtu,
                peer: addrs[1 - i],
                peer_qpn: q[1 - i],
                sq_psn: Psn::new(psn[i]),
                rq_psn: Psn::new(psn[1 - i]),
            };
            rc::bring_up(&mut self.hosts[i].dev, q[i], &link, |a| tweak(i, a));
        }
    }

    /// One step: move every packet due, deliver what arrived, run timers.
    /// Returns false when nothing happened and nothing is scheduled.
    pub fn step(&mut self) -> bool {
        let mut buf = vec![0u8; 4400];
        let mut moved = false;
        for i in 0..2 {
            while let Some(t) = self.hosts[i]
                .dev
                .poll_transmit(self.now, &mut buf)
                .datagram()
            {
                let n = t.size;
                // The engine tells a backend the destination QP without
                // its reading the BTH (docs/host.md).
                let bth_qp = roce_wire::RocePacket::parse_ip(&buf[..n]).map(|p| p.bth.dest_qp);
                assert_eq!(bth_qp.map(|q| q.value()), Ok(t.dest_qpn), "{t:?}");
                // And, for a CM MAD, the listener or connection it is for.
                if t.dest_qpn == 1 {
                    let p = roce_wire::RocePacket::parse_ip(&buf[..n]).unwrap();
                    let m = roce_wire::cm::CmMessage::parse_mad(p.payload).map(|(_, m)| m);
                    use roce_wire::cm::CmMessage as M;
                    use roce_wire::Owner;
                    // The receiver's ID the message names; 0 names nobody.
                    let id = |c: u32| (c != 0).then_some(Owner::CommId(c));
                    let want = match m {
                        Ok(M::Req(r)) => Some(Owner::Service(r.service_id)),
                        Ok(M::SidrReq(r)) => Some(Owner::Service(r.service_id)),
                        Ok(M::Rep(r)) => id(r.remote_comm_id),
                        Ok(M::Rtu(r) | M::Drep(r)) => id(r.remote_comm_id),
                        Ok(M::Dreq(r)) => id(r.remote_comm_id),
                        Ok(M::Rej(r)) => id(r.remote_comm_id),
                        Ok(M::Mra(r)) => id(r.remote_comm_id),
                        Ok(M::SidrRep(r)) => id(r.request_id),
                        _ => None,
                    };
                    assert_eq!(t.mad_owner, want, "{t:?}");
                }
                moved = true;
                let dst = 1 - i;
                match (self.filter)(i, &buf[..n]) {
                    Verdict::Deliver => {
                        self.wire
                            .push_back((self.now + self.latency, dst, buf[..n].to_vec()))
                    }
                    Verdict::Drop => {}
                    Verdict::Replace(d) => self.wire.push_back((self.now + self.latency, dst, d)),
                    Verdict::Duplicate => {
                        self.wire
                            .push_back((self.now + self.latency, dst, buf[..n].to_vec()));
                        self.wire
                            .push_back((self.now + self.latency + 10, dst, buf[..n].to_vec()));
                    }
                }
            }
        }
        // Deliver everything due now.
        let mut i = 0;
        while i < self.wire.len() {
            if self.wire[i].0 <= self.now {
                let (_, dst, d) = self.wire.remove(i).unwrap();
                self.hosts[dst]
                    .dev
                    .handle_datagram(self.now, &d, RxMeta::default());
                self.delivered += 1;
                moved = true;
            } else {
                i += 1;
            }
        }
        for h in self.hosts.iter_mut() {
            if h.dev.poll_timeout().is_some_and(|t| t <= self.now) {
                h.dev.handle_timeout(self.now);
                moved = true;
            }
        }
        if moved {
            return true;
        }
        // Idle: jump to the next event.
        let next_wire = self.wire.iter().map(|w| w.0).min();
        let next_timer = self.hosts.iter().filter_map(|h| h.dev.poll_timeout()).min();
        match next_wire.into_iter().chain(next_timer).min() {
            Some(t) => {
                self.now = t.max(self.now);
                true
            }
            None => false,
        }
    }

    /// Steps until `done` holds or nothing more can happen; returns whether
    /// `done` held. Bounded by `max_steps`.
    pub fn run_until(
        &mut self,
        max_steps: usize,
        mut done: impl FnMut(&mut World) -> bool,
    ) -> bool {
        for _ in 0..max_steps {
            if done(self) {
                return true;
            }
            if !self.step() {
                return done(self);
            }
        }
        done(self)
    }

    /// Runs until both devices are idle.
    pub fn settle(&mut self, max_steps: usize) {
        for _ in 0..max_steps {
            if !self.step() {
                return;
            }
        }
        panic!(
            "world did not settle in {max_steps} steps (now {} ns)",
            self.now
        );
    }
}

/// (wr_id, status) of each completion.
pub fn statuses(v: &[Wc]) -> Vec<(u64, WcStatus)> {
    v.iter().map(|c| (c.wr_id, c.status)).collect()
}

/// Posts a receive of `len` bytes at `off` of host `h`'s region.
pub fn recv(w: &mut World, h: usize, qp: Qpn, wr_id: u64, off: u64, len: u32) {
    let sge = w.hosts[h].sge(off, len);
    w.hosts[h]
        .dev
        .post_recv(
            qp,
            RecvWr {
                wr_id,
                sgl: vec![sge].into(),
            },
        )
        .unwrap();
}

/// The operation of a datagram.
pub fn op_of(d: &[u8]) -> roce_wire::Operation {
    roce_wire::RocePacket::parse_ip(d)
        .unwrap()
        .bth
        .opcode
        .operation()
}

/// The async events host `h` raised, in order.
pub fn events(w: &mut World, h: usize) -> Vec<AsyncEvent> {
    let mut v = Vec::new();
    while let Some(e) = w.hosts[h].dev.poll_event() {
        v.push(e);
    }
    v
}

/// A byte pattern of `len` bytes, distinct per `seed`.
pub fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

/// Creates a QP on each host (init attributes adjusted by `tweak(host,
/// init)`) and brings both up.
pub fn pair(
    w: &mut World,
    ty: QpType,
    pmtu: u32,
    tweak: impl Fn(usize, &mut QpInitAttr),
) -> (Qpn, Qpn) {
    let q = w.create_qps(ty, tweak);
    w.link(ty, pmtu, q, [0x100, 0x200], |_, _| {});
    (q[0], q[1])
}

/// Posts a receive of host 1's region to `srq`.
pub fn srq_recv(w: &mut World, srq: SrqId, wr_id: u64, off: u64, len: u32) {
    let sge = w.hosts[1].sge(off, len);
    w.hosts[1]
        .dev
        .post_srq_recv(
            srq,
            RecvWr {
                wr_id,
                sgl: vec![sge].into(),
            },
        )
        .unwrap();
}
