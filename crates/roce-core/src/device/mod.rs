//! [`Device`]: the sans-IO engine that owns every verbs object of one
//! RoCE v2 device and runs their transport.
//!
//! Call order (as quinn-proto's `Connection`): feed received datagrams to
//! [`Device::handle_datagram`]; drain packets to send with
//! [`Device::poll_transmit`] until it returns `None`; ask
//! [`Device::poll_timeout`] when to call [`Device::handle_timeout`]; read
//! completions with [`Device::poll_cq`] and events with
//! [`Device::poll_event`]. Time is always passed in; the device has no
//! clock, socket or thread.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, VecDeque};
use std::net::IpAddr;

use roce_wire::{Ecn, Error as WireError, Qpn, RocePacket, Transport};

use crate::cc::{CcConfig, CcCounters, QpCc};
use crate::counters::{DeviceCounters, QpCounters};
use crate::cq::{Cq, CqId, CqOverflow};
use crate::ids::{Ids, Quarantine};
use crate::mr::{Access, AccessError, MrKeys, MrTable, PdId, RegionMemory};
use crate::qp::accept::Reject;
use crate::qp::state::{ModifyError, QpAttrMask, QpState};
use crate::qp::{AckDelay, Ctx, PostError, Qp, QpAttr, QpInitAttr};
use crate::srq::{Srq, SrqId};
use crate::wc::Wc;
use crate::wr::{RecvWr, SendWr};
use crate::{AsyncEvent, Nanos};

mod cm;
pub use cm::CmCounters;

/// The seed of a device configured without one (tests, the simulator):
/// a fixed string with the first address folded in, so that two such
/// devices draw different identifiers, the same on every run.
fn default_seed(addrs: &[IpAddr]) -> [u8; 32] {
    let mut seed = *b"roce-core fixed seed: tests only";
    if let Some(a) = addrs.first() {
        let b = match a {
            IpAddr::V4(v) => v.to_ipv6_mapped().octets(),
            IpAddr::V6(v) => v.octets(),
        };
        for (s, x) in seed.iter_mut().zip(b) {
            *s ^= x;
        }
    }
    seed
}
/// Destroyed QPNs kept out of use (a peer may still address them).
const RETIRED_QPNS: usize = 4096;
/// Most QPs one device holds.
const MAX_QPS: usize = 1 << 20;

/// Device-wide settings.
#[derive(Clone, Debug)]
pub struct DeviceConfig {
    /// Local addresses; index = GID index.
    pub addrs: Vec<IpAddr>,
    /// ECN codepoint of request (data) packets: Not-ECT (the default),
    /// ECT(0) or ECT(1). ACKs, NAKs and CNPs are always Not-ECT.
    pub ecn: Ecn,
    /// Line rate of the port in b/s (the reaction point's ceiling;
    /// default 100 Gb/s).
    pub link_bps: u64,
    /// Congestion control (off by default; the notification point is on).
    pub cc: CcConfig,
    /// Seed of the device's CSPRNG (ChaCha20), from which QPNs, initial
    /// PSNs, memory keys and CM identifiers are drawn (see `crate::ids`).
    /// `None` uses a fixed seed: reproducible, and so predictable — for
    /// tests and the simulator only. roce-verbs fills it from the
    /// operating system's `getrandom` when it opens a device.
    pub seed: Option<[u8; 32]>,
    /// Active MTU of the port in bytes (256..=4096): the path MTU of UD
    /// QPs and the default of connected ones.
    pub active_mtu: u32,
    /// An RC requester sends a new packet only while it is at most this
    /// many PSNs past the oldest unacknowledged one (a READ counts its
    /// response packets), as rxe does with 128 (`RXE_MAX_UNACKED_PSNS`):
    /// a slow responder is not flooded, and a loss costs at most this many
    /// resent packets. 0: no per-packet limit (a message still starts only
    /// within 4096 PSNs).
    pub max_unacked_psns: u32,
    /// Packets one QP may send in a row before the next ready QP's turn
    /// (round robin in bursts; at least 1). Runs of one QP's packets are
    /// what a UDP backend can hand the kernel as one GSO send (its
    /// datagrams share a socket and a destination): with per-packet turns
    /// eight busy QPs cost a system call per packet. 16 packets of a 4096
    /// MTU are one 64 KiB GSO send; a simulated NIC arbitrating per
    /// packet uses 1.
    pub tx_burst: u32,
    /// How RC responders defer their positive ACKs ([`AckDelay`]; off by
    /// default, as a NIC).
    pub ack_delay: AckDelay,
    /// The code that computes and checks ICRCs (protocol reference §4):
    /// crc32fast by default; the table-driven code under an emulated CPU,
    /// where it is faster ([`roce_wire::crc32`]; roce-io's
    /// `CpuTuning::detect` says which suits the CPU). Only speed differs.
    pub icrc_code: roce_wire::crc32::Code,
}

impl DeviceConfig {
    /// A device with one address (and no seed: see [`DeviceConfig::seed`]).
    pub fn new(addr: IpAddr) -> DeviceConfig {
        DeviceConfig {
            addrs: vec![addr],
            ecn: Ecn::NotEct,
            seed: None,
            active_mtu: 4096,
            link_bps: 100_000_000_000,
            cc: CcConfig::default(),
            max_unacked_psns: 128,
            tx_burst: 16,
            ack_delay: AckDelay::OFF,
            icrc_code: roce_wire::crc32::Code::Fast,
        }
    }
}

/// The engine of one device.
#[derive(Debug)]
pub struct Device {
    config: DeviceConfig,
    next_pd: u32,
    mrs: MrTable,
    cqs: Vec<Option<Cq>>,
    srqs: Vec<Option<Srq>>,
    qps: BTreeMap<u32, Qp>,
    /// Unpredictable identifiers (QPNs, PSNs, CM IDs).
    ids: Ids,
    /// QPNs destroyed recently, not handed out again yet.
    retired_qpns: Quarantine<u32>,
    events: VecDeque<AsyncEvent>,
    /// QPs that may have something to send, in service order.
    ready: VecDeque<u32>,
    /// Packets the QP at the front of `ready` has sent in a row.
    burst: u32,
    /// Deferred ACKs of QPs destroyed or reset, to send first.
    farewell: VecDeque<(Vec<u8>, roce_wire::Transmit)>,
    /// The last datagram was an answer that released a held ACK: the next
    /// [`Device::poll_transmit`] ends the batch (see there).
    boundary: bool,
    /// Timer deadlines as (time, QPN), earliest first. Entries go stale when
    /// a QP's deadline moves; a stale entry (not the QP's `armed` time) is
    /// dropped when it reaches the top.
    timers: BinaryHeap<Reverse<(Nanos, u32)>>,
    counters: DeviceCounters,
    /// The communication manager (QP1).
    cm: cm::CmTable,
}

/// Errors of object management calls.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VerbsError {
    /// No such object.
    NotFound,
    /// Memory registration refused.
    Access(AccessError),
    /// A modify was refused.
    Modify(ModifyError),
    /// The object is still in use.
    Busy,
    /// An argument is out of range.
    InvalidArgument(&'static str),
}

impl std::fmt::Display for VerbsError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            VerbsError::NotFound => f.write_str("no such object"),
            VerbsError::Access(e) => write!(f, "memory access refused: {e:?}"),
            VerbsError::Modify(e) => write!(f, "{e}"),
            VerbsError::Busy => f.write_str("object in use"),
            VerbsError::InvalidArgument(w) => write!(f, "invalid argument: {w}"),
        }
    }
}

impl std::error::Error for VerbsError {}

impl From<ModifyError> for VerbsError {
    fn from(e: ModifyError) -> VerbsError {
        VerbsError::Modify(e)
    }
}

macro_rules! ctx {
    ($s:ident, $now:expr) => {
        Ctx {
            now: $now,
            mrs: &mut $s.mrs,
            cqs: &mut $s.cqs,
            srqs: &mut $s.srqs,
            events: &mut $s.events,
            local_addrs: &$s.config.addrs,
            ecn: $s.config.ecn,
            max_unacked: $s.config.max_unacked_psns,
            ack_delay: $s.config.ack_delay,
            boundary: false,
            icrc_code: $s.config.icrc_code,
            cq_lost: false,
        }
    };
}

impl Device {
    /// A device with the given configuration.
    pub fn new(mut config: DeviceConfig) -> Device {
        if !matches!(config.active_mtu, 256 | 512 | 1024 | 2048 | 4096) {
            config.active_mtu = 1024;
        }
        let mut ids = Ids::new(config.seed.unwrap_or_else(|| default_seed(&config.addrs)));
        let mut mr_seed = [0u8; 32];
        for c in mr_seed.chunks_mut(8) {
            c.copy_from_slice(&ids.u64().to_le_bytes());
        }
        let mrs = MrTable::new(mr_seed);
        let cm = cm::CmTable::new(&mut ids);
        Device {
            config,
            next_pd: 1,
            mrs,
            cqs: Vec::new(),
            srqs: Vec::new(),
            qps: BTreeMap::new(),
            ids,
            retired_qpns: Quarantine::new(RETIRED_QPNS),
            events: VecDeque::new(),
            ready: VecDeque::new(),
            burst: 0,
            farewell: VecDeque::new(),
            boundary: false,
            timers: BinaryHeap::new(),
            counters: DeviceCounters::default(),
            cm,
        }
    }

    /// Local addresses (GID table).
    pub fn addrs(&self) -> &[IpAddr] {
        &self.config.addrs
    }

    /// Sets the ECN codepoint of outgoing data packets.
    pub fn set_ecn(&mut self, ecn: Ecn) {
        self.config.ecn = ecn;
    }

    /// Sets the congestion control of QPs created from now on.
    pub fn set_cc(&mut self, cc: CcConfig) {
        self.config.cc = cc;
    }

    /// Sets the port's line rate (b/s) for QPs created from now on.
    pub fn set_link_bps(&mut self, bps: u64) {
        self.config.link_bps = bps.max(1);
    }

    /// The device's congestion control settings.
    pub fn cc_config(&self) -> &CcConfig {
        &self.config.cc
    }

    /// Device counters.
    pub fn counters(&self) -> &DeviceCounters {
        &self.counters
    }

    /// `ibv_alloc_pd`.
    pub fn alloc_pd(&mut self) -> PdId {
        let pd = PdId(self.next_pd);
        self.next_pd += 1;
        pd
    }

    /// `ibv_reg_mr`: registers `mem` as the bytes at `va`.
    pub fn reg_mr(
        &mut self,
        pd: PdId,
        va: u64,
        mem: Box<dyn RegionMemory>,
        access: Access,
    ) -> Result<MrKeys, VerbsError> {
        self.mrs
            .register(pd, va, mem, access)
            .map_err(VerbsError::Access)
    }

    /// Registers a region that the peer may invalidate with a SEND with
    /// Invalidate: the model of a fast-registered region (`ibv_alloc_mr`
    /// and `IBV_WR_REG_MR`). Regions from [`Device::reg_mr`] cannot be
    /// invalidated remotely (IBTA Vol 1 §10.6.3.6).
    pub fn reg_mr_invalidatable(
        &mut self,
        pd: PdId,
        va: u64,
        mem: Box<dyn RegionMemory>,
        access: Access,
    ) -> Result<MrKeys, VerbsError> {
        self.mrs
            .register_invalidatable(pd, va, mem, access)
            .map_err(VerbsError::Access)
    }

    /// Revokes a region ([`MrTable::revoke`]): no access reaches its
    /// memory any more. False when it is not registered.
    pub fn revoke_mr(&mut self, keys: MrKeys) -> bool {
        self.mrs.revoke(keys.lkey)
    }

    /// `ibv_rereg_mr`: changes a region in place, keeping its keys
    /// ([`MrTable::reregister`]); hands back the old memory when
    /// `translation` replaced it.
    pub fn rereg_mr(
        &mut self,
        keys: MrKeys,
        pd: Option<PdId>,
        access: Option<Access>,
        translation: Option<(u64, Box<dyn RegionMemory>)>,
    ) -> Result<Option<Box<dyn RegionMemory>>, VerbsError> {
        self.mrs
            .reregister(keys.lkey, pd, access, translation)
            .map_err(VerbsError::Access)
    }

    /// `ibv_dereg_mr`: hands the memory back.
    pub fn dereg_mr(&mut self, keys: MrKeys) -> Result<Box<dyn RegionMemory>, VerbsError> {
        self.mrs.deregister(keys.lkey).ok_or(VerbsError::NotFound)
    }

    /// Reads registered memory (what the application sees of its buffer).
    pub fn mr_read(
        &self,
        keys: MrKeys,
        pd: PdId,
        va: u64,
        out: &mut [u8],
    ) -> Result<(), VerbsError> {
        let span = self
            .mrs
            .check(keys.lkey.value(), pd, va, out.len() as u64, Access::NONE)
            .map_err(VerbsError::Access)?;
        self.mrs.read(span, 0, out);
        Ok(())
    }

    /// Writes registered memory from the application side.
    pub fn mr_write(
        &mut self,
        keys: MrKeys,
        pd: PdId,
        va: u64,
        data: &[u8],
    ) -> Result<(), VerbsError> {
        let span = self
            .mrs
            .check(keys.lkey.value(), pd, va, data.len() as u64, Access::NONE)
            .map_err(VerbsError::Access)?;
        self.mrs.write(span, 0, data);
        Ok(())
    }

    /// `ibv_create_cq`.
    pub fn create_cq(&mut self, cqe: usize) -> CqId {
        self.cqs.push(Some(Cq::new(cqe.max(1))));
        CqId(self.cqs.len() as u32 - 1)
    }

    /// The CQ object (to arm notifications, inspect its state).
    pub fn cq(&mut self, cq: CqId) -> Option<&mut Cq> {
        self.cqs.get_mut(cq.0 as usize).and_then(|c| c.as_mut())
    }

    /// `ibv_resize_cq`: the CQ holds `cqe` completions from now on;
    /// refused while more than that are waiting ([`Cq::resize`]).
    pub fn resize_cq(&mut self, cq: CqId, cqe: usize) -> Result<(), VerbsError> {
        self.cq(cq).ok_or(VerbsError::NotFound)?.resize(cqe)
    }

    /// `ibv_poll_cq`.
    pub fn poll_cq(&mut self, cq: CqId, out: &mut [Wc]) -> Result<usize, CqOverflow> {
        match self.cq(cq) {
            Some(c) => c.poll(out),
            None => Ok(0),
        }
    }

    /// `ibv_destroy_cq`: refused while a QP uses it.
    pub fn destroy_cq(&mut self, cq: CqId) -> Result<(), VerbsError> {
        if self
            .qps
            .values()
            .any(|q| q.init.send_cq == cq || q.init.recv_cq == cq)
        {
            return Err(VerbsError::Busy);
        }
        self.cqs
            .get_mut(cq.0 as usize)
            .and_then(|c| c.take())
            .map(|_| ())
            .ok_or(VerbsError::NotFound)
    }

    /// `ibv_create_srq`.
    pub fn create_srq(&mut self, pd: PdId, max_wr: usize) -> SrqId {
        self.srqs.push(Some(Srq::new(pd, max_wr)));
        SrqId(self.srqs.len() as u32 - 1)
    }

    /// The SRQ object (to set its limit).
    pub fn srq(&mut self, srq: SrqId) -> Option<&mut Srq> {
        self.srqs.get_mut(srq.0 as usize).and_then(|s| s.as_mut())
    }

    /// `ibv_destroy_srq`: refused while a QP uses it; returns the receives
    /// still posted, so their buffers can be released.
    pub fn destroy_srq(&mut self, srq: SrqId) -> Result<Vec<RecvWr>, VerbsError> {
        if self.qps.values().any(|q| q.init.srq == Some(srq)) {
            return Err(VerbsError::Busy);
        }
        let mut s = self
            .srqs
            .get_mut(srq.0 as usize)
            .and_then(|s| s.take())
            .ok_or(VerbsError::NotFound)?;
        let mut left = Vec::with_capacity(s.len());
        while let Some(wr) = s.take() {
            left.push(wr);
        }
        Ok(left)
    }

    /// `ibv_post_srq_recv`.
    pub fn post_srq_recv(&mut self, srq: SrqId, wr: RecvWr) -> Result<(), PostError> {
        let s = self.srq(srq).ok_or(PostError::NoSuchObject)?;
        if wr.sgl.len() > crate::srq::MAX_SRQ_SGE {
            return Err(PostError::TooManySge);
        }
        if s.post(wr) {
            Ok(())
        } else {
            Err(PostError::QueueFull)
        }
    }

    /// `ibv_create_qp`: a new QP in RESET.
    pub fn create_qp(&mut self, init: QpInitAttr) -> Result<Qpn, VerbsError> {
        if self
            .cqs
            .get(init.send_cq.0 as usize)
            .is_none_or(|c| c.is_none())
            || self
                .cqs
                .get(init.recv_cq.0 as usize)
                .is_none_or(|c| c.is_none())
        {
            return Err(VerbsError::NotFound);
        }
        if let Some(s) = init.srq {
            if self.srqs.get(s.0 as usize).is_none_or(|x| x.is_none()) {
                return Err(VerbsError::NotFound);
            }
        }
        if init.cap.max_inline_data > 4096 {
            return Err(VerbsError::InvalidArgument("max_inline_data above 4096"));
        }
        if self.qps.len() >= MAX_QPS {
            return Err(VerbsError::InvalidArgument("too many QPs"));
        }
        let qpn = self.fresh_qpn();
        let mut qp = Qp::new(Qpn::new(qpn), init);
        qp.attr.path_mtu = self.config.active_mtu;
        // The starting PSN until the application sets its own: random.
        qp.attr.sq_psn = self.ids.psn();
        qp.cc = QpCc::new(&self.config.cc, self.config.link_bps);
        self.qps.insert(qpn, qp);
        Ok(Qpn::new(qpn))
    }

    /// A QPN drawn at random (IBTA Vol 1 §10.2.4.1 leaves the choice to
    /// the channel adapter): not 0 or 1 (the special QPs), not below 16
    /// (rxe's reserved range), not 0xFFFFFF (the multicast QPN, §10.8.1),
    /// not live and not destroyed recently (a peer of the old QP may still
    /// send to it).
    fn fresh_qpn(&mut self) -> u32 {
        loop {
            let q = self.ids.u32() & 0xff_ffff;
            if q >= 16
                && q != 0xff_ffff
                && !self.qps.contains_key(&q)
                && !self.retired_qpns.contains(&q)
            {
                return q;
            }
        }
    }

    /// A random 24-bit PSN from the device's CSPRNG, for an application
    /// (or the CM) to start a connection with (IBTA Vol 1 §9.7.1).
    pub fn random_psn(&mut self) -> roce_wire::Psn {
        self.ids.psn()
    }

    /// A random 64-bit value from the device's CSPRNG, for the API layer
    /// (the virtual addresses of the regions it owns).
    pub fn random_u64(&mut self) -> u64 {
        self.ids.u64()
    }

    /// `ibv_destroy_qp`.
    pub fn destroy_qp(&mut self, qpn: Qpn) -> Result<(), VerbsError> {
        let mut qp = self.qps.remove(&qpn.value()).ok_or(VerbsError::NotFound)?;
        self.retired_qpns.retire(qpn.value());
        let mut ctx = ctx!(self, 0);
        keep_farewell(&mut self.farewell, &mut qp, &mut ctx);
        qp.return_srq_recv(&mut ctx);
        Ok(())
    }

    /// The QP (for its state, attributes and counters).
    pub fn qp(&self, qpn: Qpn) -> Option<&Qp> {
        self.qps.get(&qpn.value())
    }

    /// Counters of a QP.
    pub fn qp_counters(&self, qpn: Qpn) -> Option<QpCounters> {
        self.qp(qpn).map(|q| *q.counters())
    }

    /// Congestion control counters and rate of a QP.
    pub fn qp_cc_counters(&self, qpn: Qpn) -> Option<CcCounters> {
        self.qp(qpn).map(|q| q.cc_counters())
    }

    /// `ibv_modify_qp`.
    pub fn modify_qp(
        &mut self,
        qpn: Qpn,
        attr: &QpAttr,
        mask: QpAttrMask,
    ) -> Result<(), VerbsError> {
        let qp = self.qps.get_mut(&qpn.value()).ok_or(VerbsError::NotFound)?;
        let mut ctx = ctx!(self, 0);
        if mask.contains(QpAttrMask::STATE)
            && matches!(attr.qp_state, QpState::Reset | QpState::Err)
        {
            keep_farewell(&mut self.farewell, qp, &mut ctx);
        }
        let r = qp.modify(attr, mask, &mut ctx);
        qp.check_cq_lost(&mut ctx);
        r?;
        self.mark_ready(qpn.value());
        self.note_timer(qpn.value());
        Ok(())
    }

    /// `ibv_post_send`.
    pub fn post_send(&mut self, qpn: Qpn, wr: SendWr) -> Result<(), PostError> {
        let qp = self
            .qps
            .get_mut(&qpn.value())
            .ok_or(PostError::NoSuchObject)?;
        let mut ctx = ctx!(self, 0);
        let r = qp.post_send(wr, &mut ctx);
        qp.check_cq_lost(&mut ctx);
        r?;
        self.mark_ready(qpn.value());
        Ok(())
    }

    /// `ibv_post_recv`.
    pub fn post_recv(&mut self, qpn: Qpn, wr: RecvWr) -> Result<(), PostError> {
        let qp = self
            .qps
            .get_mut(&qpn.value())
            .ok_or(PostError::NoSuchObject)?;
        let mut ctx = ctx!(self, 0);
        let r = qp.post_recv(wr, &mut ctx);
        qp.check_cq_lost(&mut ctx);
        r
    }

    /// The next asynchronous event (`ibv_get_async_event`).
    pub fn poll_event(&mut self) -> Option<AsyncEvent> {
        self.events.pop_front()
    }

    fn mark_ready(&mut self, qpn: u32) {
        if let Some(qp) = self.qps.get_mut(&qpn) {
            if !qp.queued {
                qp.queued = true;
                self.ready.push_back(qpn);
            }
        }
    }

    /// Processes one received IP datagram (IPv4 or IPv6 carrying RoCE v2).
    pub fn handle_datagram(&mut self, now: Nanos, dgram: &[u8], meta: roce_wire::RxMeta) {
        self.counters.rx_datagrams += 1;
        let p = match RocePacket::parse_ip(dgram) {
            Ok(p) => p,
            Err(_) => {
                self.counters.rx_malformed += 1;
                return;
            }
        };
        if meta.header_exact {
            if let Err(WireError::BadIcrc { .. }) = p.check_icrc_with(self.config.icrc_code) {
                self.counters.rx_bad_icrc += 1;
                return;
            }
        } else {
            self.counters.rx_icrc_unchecked += 1;
        }
        let op = p.bth.opcode;
        if p.bth.dest_qp == roce_wire::mad::GSI_QPN && op.transport() != Transport::Cnp {
            self.cm_handle(now, &p);
            return;
        }
        let qpn = p.bth.dest_qp.value();
        let Some(qp) = self.qps.get_mut(&qpn) else {
            self.counters.rx_unknown_qp += 1;
            return;
        };
        // Only the connected peer's packets, to our address, in the QP's
        // partition and a state that takes them (IBTA Vol 1 §9.6).
        if let Err(why) = qp.check_packet(&p, &self.config.addrs) {
            match why {
                Reject::State => qp.counters.drop_bad_state += 1,
                _ => qp.counters.drop_invalid += 1,
            }
            return;
        }
        if op.transport() == Transport::Cnp {
            // Reaction point (docs/dcb.md §4): the CNP names our QP, and
            // came from its peer (checked above).
            self.counters.rx_cnp += 1;
            qp.cc.on_cnp(now);
            self.note_timer(qpn);
            return;
        }
        let ip_hlen = p.ip.header_len().min(dgram.len());
        let ce = p.ip.ecn() == Ecn::Ce;
        let mut ctx = ctx!(self, now);
        if op.kind().is_request() {
            let accepted = qp.resp_handle_request(&p, &dgram[..ip_hlen], &mut ctx);
            // Notification point (docs/protocol.md §7): CE → CNP to the
            // peer, only for a packet the QP took (a forged or stale one
            // must not make us send CNPs).
            if ce && accepted {
                qp.cc.on_ce(now);
            }
        } else if matches!(qp.state, QpState::Rts | QpState::Sqd | QpState::Sqe) {
            if qp.req_handle_response(&p, &mut ctx) && ce {
                qp.cc.on_ce(now);
            }
        } else {
            qp.counters.drop_bad_state += 1;
        }
        qp.check_cq_lost(&mut ctx);
        if qp.wants_to_send() {
            self.mark_ready(qpn);
        }
        self.note_timer(qpn);
    }

    /// Records a QP's current deadline in the timer heap if it changed.
    fn note_timer(&mut self, qpn: u32) {
        if let Some(qp) = self.qps.get_mut(&qpn) {
            let t = qp.poll_timeout();
            if t != qp.armed {
                qp.armed = t;
                if let Some(t) = t {
                    self.timers.push(Reverse((t, qpn)));
                }
            }
        }
    }

    /// Drops the stale entries at the top of the timer heap, so that
    /// [`Device::poll_timeout`] names a live deadline (after timers ran,
    /// and when a transmit drain ends: a deferred ACK's deadline, left
    /// behind when the ACK followed its answer, would otherwise have a
    /// driver wake up for nothing every round trip).
    fn prune_timers(&mut self) {
        while let Some(&Reverse((t, qpn))) = self.timers.peek() {
            if self.timer_is_live(t, qpn) {
                break;
            }
            self.timers.pop();
        }
    }

    /// True when a heap entry still describes its QP's deadline.
    fn timer_is_live(&self, t: Nanos, qpn: u32) -> bool {
        self.qps.get(&qpn).is_some_and(|q| q.armed == Some(t))
    }

    /// Writes the next datagram to send into `buf` (which should hold at
    /// least 4200 bytes); returns how to send it (its length, addresses,
    /// DSCP / ECN: a backend sends from these without parsing it), or
    /// `None` when nothing is due.
    ///
    /// `None` also ends a batch early, once, after an answer that released
    /// a deferred ACK (qp/responder/ack.rs; not with `AckDelay::ack_first`,
    /// whose peers wait for the ACK): a driver that sends what it
    /// has at `None` puts the answer, which the peer waits for, in a send
    /// call of its own, and the ACK in the next (its system call then runs
    /// while the peer works on the answer). [`Device::transmit_due`] says
    /// that more is waiting; a driver that only polls again later loses
    /// nothing either.
    pub fn poll_transmit(&mut self, now: Nanos, buf: &mut [u8]) -> Option<roce_wire::Transmit> {
        self.next_datagram(now, buf)
    }

    /// The next datagram [`poll_transmit`](Self::poll_transmit) sends.
    fn next_datagram(&mut self, now: Nanos, buf: &mut [u8]) -> Option<roce_wire::Transmit> {
        // A QP's last ACK before the CM message that may end it (a DREQ),
        // and before the boundary: a driver flushing a closing device
        // calls again only while something is due, and the boundary (a
        // send-call split for latency) must not strand it.
        if let Some((p, t)) = self.farewell.pop_front() {
            buf.get_mut(..p.len())?.copy_from_slice(&p);
            self.counters.tx_datagrams += 1;
            return Some(t);
        }
        if std::mem::take(&mut self.boundary) {
            return None;
        }
        if let Some(n) = self.cm_poll_transmit(buf) {
            self.counters.tx_datagrams += 1;
            return Some(n);
        }
        let rounds = self.ready.len();
        for _ in 0..rounds {
            let Some(qpn) = self.ready.pop_front() else {
                break;
            };
            let Some(qp) = self.qps.get_mut(&qpn) else {
                continue;
            };
            qp.queued = false;
            let mut ctx = ctx!(self, now);
            let sent = qp.poll_transmit(&mut ctx, buf);
            self.boundary = ctx.boundary;
            qp.check_cq_lost(&mut ctx);
            if let Some(n) = sent {
                // Round robin in bursts: the QP keeps its turn for up to
                // `tx_burst` packets, then goes to the back if it has more.
                self.burst += 1;
                if qp.wants_to_send() {
                    qp.queued = true;
                    if self.burst < self.config.tx_burst {
                        self.ready.push_front(qpn);
                    } else {
                        self.burst = 0;
                        self.ready.push_back(qpn);
                    }
                } else {
                    self.burst = 0;
                }
                self.counters.tx_datagrams += 1;
                self.note_timer(qpn);
                return Some(n);
            }
            self.note_timer(qpn);
            self.burst = 0;
            // Nothing now (window, credits, RNR wait, a deferred ACK):
            // timers or incoming packets will make it ready again.
        }
        self.prune_timers();
        None
    }

    /// Whether [`Device::poll_transmit`] would give a datagram at `now`
    /// (a cheap look: a QP whose only output is a deferred ACK, or whose
    /// window or pacing holds it back, may still say yes). A driver that
    /// has just handed the engine datagrams can skip its transmit phase
    /// when this is false and no timer is due: nothing is lost, since the
    /// engine's deadlines say when to look again.
    pub fn transmit_due(&self, now: Nanos) -> bool {
        !self.farewell.is_empty()
            || self.cm.has_output()
            || self
                .ready
                .iter()
                .any(|q| self.qps.get(q).is_some_and(|qp| qp.wants_to_send_at(now)))
    }

    /// Earliest time [`Device::handle_timeout`] has work. O(1); may name a
    /// deadline that has since moved later (the call then does nothing).
    pub fn poll_timeout(&self) -> Option<Nanos> {
        let qp = self.timers.peek().map(|Reverse((t, _))| *t);
        match (qp, self.cm.next_deadline()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Runs expired timers; touches only the QPs that are due.
    pub fn handle_timeout(&mut self, now: Nanos) {
        if self.cm.next_deadline().is_some_and(|t| t <= now) {
            self.cm_handle_timeout(now);
        }
        while let Some(&Reverse((t, qpn))) = self.timers.peek() {
            if t > now {
                break;
            }
            self.timers.pop();
            if !self.timer_is_live(t, qpn) {
                continue;
            }
            if let Some(qp) = self.qps.get_mut(&qpn) {
                qp.armed = None;
                let mut ctx = ctx!(self, now);
                qp.handle_timeout(&mut ctx);
                qp.check_cq_lost(&mut ctx);
                if qp.wants_to_send() {
                    self.mark_ready(qpn);
                }
            }
            self.note_timer(qpn);
        }
        // So that poll_timeout reports a live deadline.
        self.prune_timers();
    }
}

/// Keeps a QP's deferred ACK to send as its last packet when the
/// application destroys the QP, resets it or moves it to the error state
/// (also through the CM): with deferral off it would have left before the
/// application could do any of these. Bounded: the oldest go first.
fn keep_farewell(
    queue: &mut VecDeque<(Vec<u8>, roce_wire::Transmit)>,
    qp: &mut Qp,
    ctx: &mut Ctx<'_>,
) {
    const MAX_FAREWELLS: usize = 1024;
    // An ACK is well under 512 bytes; allocated only when there is one.
    let mut buf = [0u8; 512];
    if let Some(t) = qp.take_deferred_ack(ctx, &mut buf) {
        if queue.len() >= MAX_FAREWELLS {
            queue.pop_front();
        }
        queue.push_back((buf[..t.size].to_vec(), t));
    }
}
