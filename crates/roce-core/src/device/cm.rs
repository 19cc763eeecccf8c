//! The device's communication manager (see [`crate::cm`]): QP1 MADs in and
//! out, the per-connection state machine, retransmission timers, and the
//! QP transitions the CM makes on the application's behalf.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, VecDeque};
use std::net::IpAddr;

use roce_wire::cm::{
    self, attr, msg_ref, port_space, rej_reason, CmMessage, CmaHeader, DreqRepr, IdsRepr, PathRepr,
    RejRepr, RepRepr, ReqRepr, SidrRepRepr, SidrReqRepr, CMA_HEADER_LEN,
};
use roce_wire::mad::{self, MadHeader, MAD_LEN};
use roce_wire::{BthRepr, DethRepr, Ecn, ExtHeaders, Opcode, Psn, Qpn, RocePacket};

use super::{Device, VerbsError};
use crate::cm::{accepts, CmEvent, CmId, CmState, ConnParam, ConnRequest, ListenId, UdRequest};
use crate::qp::path::Path;
use crate::qp::state::{QpAttrMask, QpState, QpType};
use crate::qp::{AddressVector, QpAttr};
use crate::Nanos;

/// How long the peer may take to answer a REQ/REP/DREQ, as the exponent
/// we advertise (4.096 µs × 2^18 ≈ 1.07 s) and wait for before resending.
const CM_RESPONSE_TIMEOUT: u8 = 18;
/// Resends of a REQ/REP/DREQ before the connection is given up.
const MAX_CM_RETRIES: u8 = 15;
/// The local ACK timeout advertised in the REQ's path when the consumer
/// leaves it at 0.
const DEFAULT_PATH_ACK_TIMEOUT: u8 = 14;

fn timeout_ns(exp: u8) -> Nanos {
    4096u64 << exp.min(31)
}

/// A 64-bit mix (splitmix64's finaliser) for IDs and initial PSNs.
fn mix(mut x: u64) -> u64 {
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// What the REQ told the passive side (kept until accept).
#[derive(Clone, Debug)]
struct ReqInfo {
    remote_qpn: Qpn,
    starting_psn: Psn,
    path_mtu: u32,
    responder_resources: u8,
    initiator_depth: u8,
    retry_count: u8,
    rnr_retry_count: u8,
    ack_timeout: u8,
    traffic_class: u8,
    hop_limit: u8,
    flow_label: u32,
}

#[derive(Debug)]
struct Conn {
    state: CmState,
    remote_id: u32,
    tid: u64,
    peer: IpAddr,
    local: IpAddr,
    qpn: Option<Qpn>,
    remote_qpn: Qpn,
    /// The PSN this side expects first (our rq_psn), which the REQ/REP
    /// carries as its starting PSN.
    psn: Psn,
    param: ConnParam,
    req: Option<ReqInfo>,
    /// The last REQ/REP/DREQ, resent on timeout.
    last: Option<Box<[u8; MAD_LEN]>>,
    deadline: Option<Nanos>,
    interval: Nanos,
    retries_left: u8,
    /// The service a SIDR exchange is about.
    service_id: u64,
}

/// One MAD waiting to be sent.
#[derive(Debug)]
struct OutMad {
    src: IpAddr,
    dst: IpAddr,
    mad: Box<[u8; MAD_LEN]>,
}

/// CM counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CmCounters {
    /// MADs sent (including resends).
    pub tx_mads: u64,
    /// MADs received.
    pub rx_mads: u64,
    /// MADs resent after a timeout.
    pub resent: u64,
    /// QP1 packets that were not CM MADs, or messages no state takes.
    pub dropped: u64,
    /// REQs refused with a REJ (no listener, bad transport).
    pub rejected_reqs: u64,
}

/// The CM's part of a device.
#[derive(Debug, Default)]
pub(crate) struct CmTable {
    listeners: BTreeMap<u64, ListenId>,
    conns: BTreeMap<u32, Conn>,
    out: VecDeque<OutMad>,
    events: VecDeque<CmEvent>,
    counter: u64,
    gsi_psn: u32,
    /// Resend deadlines as (time, connection), earliest first; an entry
    /// whose connection is gone or has another deadline is stale and
    /// skipped when it comes up (as the device's QP timer heap does).
    timers: BinaryHeap<Reverse<(Nanos, u32)>>,
    pub(crate) counters: CmCounters,
}

impl CmTable {
    fn new_id(&mut self, now: Nanos) -> u32 {
        loop {
            self.counter += 1;
            let id = mix(now ^ self.counter.rotate_left(40)) as u32;
            if id != 0 && !self.conns.contains_key(&id) {
                return id;
            }
        }
    }

    fn send(&mut self, src: IpAddr, dst: IpAddr, tid: u64, m: &CmMessage<'_>) -> Box<[u8; 256]> {
        let mut mad = Box::new([0u8; MAD_LEN]);
        // Lengths are checked by the callers' constructions.
        if m.emit_mad(tid, &mut mad[..]).is_ok() {
            self.out.push_back(OutMad {
                src,
                dst,
                mad: mad.clone(),
            });
        }
        mad
    }

    /// Earliest time a resend may be due: O(1), possibly a stale entry
    /// (the timeout handler then does nothing).
    pub(crate) fn next_deadline(&self) -> Option<Nanos> {
        self.timers.peek().map(|Reverse((t, _))| *t)
    }

    /// Sets connection `id`'s resend deadline.
    fn schedule(&mut self, id: u32, t: Nanos) {
        if let Some(c) = self.conns.get_mut(&id) {
            c.deadline = Some(t);
            self.timers.push(Reverse((t, id)));
        }
    }
}

impl Conn {
    fn new(state: CmState, remote_id: u32, tid: u64, peer: IpAddr, local: IpAddr) -> Conn {
        Conn {
            state,
            remote_id,
            tid,
            peer,
            local,
            qpn: None,
            remote_qpn: Qpn::new(0),
            psn: Psn::new(0),
            param: ConnParam::default(),
            req: None,
            last: None,
            deadline: None,
            interval: 0,
            retries_left: 0,
            service_id: 0,
        }
    }

    /// Keeps `mad` for resending and resets the retry budget; the caller
    /// schedules the first resend at `now + interval`.
    fn arm(&mut self, mad: Box<[u8; MAD_LEN]>) {
        self.last = Some(mad);
        self.interval = timeout_ns(CM_RESPONSE_TIMEOUT);
        self.retries_left = MAX_CM_RETRIES;
    }
}

impl Device {
    /// `rdma_listen` on `port` (TCP port space): REQs for it raise
    /// [`CmEvent::ConnectRequest`].
    pub fn cm_listen(&mut self, port: u16) -> Result<ListenId, VerbsError> {
        self.listen_service(cm::ip_service_id(port_space::TCP, port))
    }

    /// `rdma_listen` on `port` in rdma_cm's UDP port space: SIDR_REQs for
    /// it raise [`CmEvent::UdRequest`].
    pub fn cm_listen_ud(&mut self, port: u16) -> Result<ListenId, VerbsError> {
        self.listen_service(cm::ip_service_id(port_space::UDP, port))
    }

    fn listen_service(&mut self, service: u64) -> Result<ListenId, VerbsError> {
        if self.cm.listeners.contains_key(&service) {
            return Err(VerbsError::Busy);
        }
        self.cm.listeners.insert(service, ListenId(service));
        Ok(ListenId(service))
    }

    /// `rdma_connect` on a UD id: asks the service at `dst:port` for its
    /// QPN and Q_Key (SIDR_REQ); [`CmEvent::UdResolved`] answers.
    pub fn cm_resolve_ud(
        &mut self,
        now: Nanos,
        dst: IpAddr,
        port: u16,
        private_data: &[u8],
    ) -> Result<CmId, VerbsError> {
        if private_data.len() > cm::private_len::SIDR_REQ - CMA_HEADER_LEN {
            return Err(VerbsError::InvalidArgument(
                "SIDR_REQ private data over 180 bytes",
            ));
        }
        let local = self.local_for(dst)?;
        let id = self.cm.new_id(now);
        let tid = (2u64 << 32) | id as u64;
        let mut pd = [0u8; cm::private_len::SIDR_REQ];
        cma_private(&mut pd, id, local, dst, private_data)?;
        let req = SidrReqRepr {
            request_id: id,
            pkey: 0xffff,
            service_id: cm::ip_service_id(port_space::UDP, port),
            private_data: &pd,
        };
        let mad = self.cm.send(local, dst, tid, &CmMessage::SidrReq(req));
        let mut c = Conn::new(CmState::SidrSent, 0, tid, dst, local);
        c.arm(mad);
        let t = now + c.interval;
        self.cm.conns.insert(id, c);
        self.cm.schedule(id, t);
        Ok(CmId(id))
    }

    /// `rdma_accept` on a UD request: answers with our UD QP and Q_Key.
    pub fn cm_accept_ud(&mut self, id: CmId, qpn: Qpn, qkey: u32) -> Result<(), VerbsError> {
        self.answer_sidr(id, 0, qpn, qkey)
    }

    /// `rdma_reject` on a UD request (SIDR_REP status 2, "rejected").
    pub fn cm_reject_ud(&mut self, id: CmId) -> Result<(), VerbsError> {
        self.answer_sidr(id, 2, Qpn::new(0), 0)
    }

    fn answer_sidr(&mut self, id: CmId, status: u8, qpn: Qpn, qkey: u32) -> Result<(), VerbsError> {
        let c = self.cm.conns.get(&id.0).ok_or(VerbsError::NotFound)?;
        if c.state != CmState::SidrRcvd {
            return Err(VerbsError::InvalidArgument("no pending UD request"));
        }
        let rep = SidrRepRepr {
            request_id: c.remote_id,
            status,
            qpn,
            service_id: c.service_id,
            qkey,
            private_data: &[],
        };
        let (src, dst, tid) = (c.local, c.peer, c.tid);
        self.cm.send(src, dst, tid, &CmMessage::SidrRep(rep));
        self.cm.conns.remove(&id.0);
        Ok(())
    }

    /// The local address of the family of `dst`.
    fn local_for(&self, dst: IpAddr) -> Result<IpAddr, VerbsError> {
        self.config
            .addrs
            .iter()
            .copied()
            .find(|a| a.is_ipv4() == dst.is_ipv4())
            .ok_or(VerbsError::InvalidArgument(
                "no local address of that family",
            ))
    }

    /// Stops listening; REQs for the port are rejected from now on.
    pub fn cm_stop_listen(&mut self, l: ListenId) {
        // (The key is the service ID, which the ListenId carries.)
        self.cm.listeners.remove(&l.0);
    }

    /// The next connection event.
    pub fn poll_cm_event(&mut self) -> Option<CmEvent> {
        self.cm.events.pop_front()
    }

    /// CM counters.
    pub fn cm_counters(&self) -> CmCounters {
        self.cm.counters
    }

    /// The state of a connection (`None` once it is gone).
    pub fn cm_state(&self, id: CmId) -> Option<CmState> {
        self.cm.conns.get(&id.0).map(|c| c.state)
    }

    /// `rdma_connect`: sends a REQ for `port` at `dst` on behalf of the RC
    /// QP `qpn`, which must be in INIT. The QP reaches RTS when the REP
    /// arrives ([`CmEvent::Established`]).
    pub fn cm_connect(
        &mut self,
        now: Nanos,
        qpn: Qpn,
        dst: IpAddr,
        port: u16,
        param: &ConnParam,
    ) -> Result<CmId, VerbsError> {
        let qp = self.qps.get(&qpn.value()).ok_or(VerbsError::NotFound)?;
        if qp.init.qp_type != QpType::Rc {
            return Err(VerbsError::InvalidArgument("rdma_cm connects RC QPs"));
        }
        if qp.state != QpState::Init {
            return Err(VerbsError::InvalidArgument("the QP must be in INIT"));
        }
        if param.private_data.len() > cm::private_len::REQ - CMA_HEADER_LEN {
            return Err(VerbsError::InvalidArgument(
                "REQ private data over 56 bytes",
            ));
        }
        let local = self.local_for(dst)?;
        let id = self.cm.new_id(now);
        let psn = Psn::new(mix(id as u64) as u32);
        let tid = (2u64 << 32) | id as u64;
        let mut pd = [0u8; cm::private_len::REQ];
        cma_private(&mut pd, id, local, dst, &param.private_data)?;
        let mtu = self.config.active_mtu;
        let ack = if param.ack_timeout == 0 {
            DEFAULT_PATH_ACK_TIMEOUT
        } else {
            param.ack_timeout
        };
        let req = ReqRepr {
            local_comm_id: id,
            service_id: cm::ip_service_id(port_space::TCP, port),
            local_ca_guid: self.node_guid(),
            local_qkey: 0,
            local_qpn: qpn,
            responder_resources: param.responder_resources,
            initiator_depth: param.initiator_depth,
            remote_cm_response_timeout: CM_RESPONSE_TIMEOUT,
            transport: 0,
            end_to_end_flow_control: false,
            starting_psn: psn,
            local_cm_response_timeout: CM_RESPONSE_TIMEOUT,
            retry_count: param.retry_count.min(7),
            pkey: 0xffff,
            path_mtu: mtu_code(mtu),
            rdc_exists: false,
            rnr_retry_count: param.rnr_retry_count.min(7),
            max_cm_retries: MAX_CM_RETRIES,
            srq: qp.init.srq.is_some(),
            extended_transport: 0,
            primary: PathRepr {
                local_lid: 0xffff,
                remote_lid: 0xffff,
                local_gid: cm::gid_of(local),
                remote_gid: cm::gid_of(dst),
                flow_label: 0,
                packet_rate: 0,
                traffic_class: 0,
                hop_limit: 64,
                sl: 0,
                subnet_local: false,
                local_ack_timeout: ack,
            },
            alternate: None,
            private_data: &pd,
        };
        let mad = self.cm.send(local, dst, tid, &CmMessage::Req(req));
        let mut c = Conn::new(CmState::ReqSent, 0, tid, dst, local);
        c.qpn = Some(qpn);
        c.psn = psn;
        c.param = param.clone();
        c.arm(mad);
        let t = now + c.interval;
        self.cm.conns.insert(id, c);
        self.cm.schedule(id, t);
        Ok(CmId(id))
    }

    /// `rdma_accept`: brings the RC QP `qpn` (in INIT) to RTS with the
    /// REQ's parameters and sends the REP. [`CmEvent::Established`]
    /// follows the RTU.
    pub fn cm_accept(
        &mut self,
        now: Nanos,
        id: CmId,
        qpn: Qpn,
        param: &ConnParam,
    ) -> Result<(), VerbsError> {
        let c = self.cm.conns.get(&id.0).ok_or(VerbsError::NotFound)?;
        if c.state != CmState::ReqRcvd {
            return Err(VerbsError::InvalidArgument("no pending request"));
        }
        if param.private_data.len() > cm::private_len::REP {
            return Err(VerbsError::InvalidArgument(
                "REP private data over 196 bytes",
            ));
        }
        let req = c.req.clone().ok_or(VerbsError::NotFound)?;
        let (peer, local) = (c.peer, c.local);
        let psn = Psn::new(mix(id.0 as u64 ^ 0x5eed) as u32);
        let initiator_depth = param.initiator_depth.min(req.responder_resources);
        let responder_resources = param.responder_resources.min(req.initiator_depth);
        let av = self.av_to(peer, local, &req);
        let a = QpAttr {
            qp_state: QpState::Rtr,
            ah_attr: av,
            path_mtu: req.path_mtu.min(self.config.active_mtu),
            dest_qp_num: req.remote_qpn,
            // A message's starting PSN is the PSN its sender expects to
            // receive: the other side sends from it (what Linux's CM does,
            // seen in the rdmacm_rping capture).
            rq_psn: psn,
            max_dest_rd_atomic: responder_resources.max(1),
            min_rnr_timer: param.min_rnr_timer,
            sq_psn: req.starting_psn,
            timeout: req.ack_timeout,
            retry_cnt: req.retry_count,
            rnr_retry: req.rnr_retry_count,
            max_rd_atomic: initiator_depth.max(1),
            ..QpAttr::default()
        };
        self.bring_up(qpn, a)?;
        let rep = RepRepr {
            local_comm_id: id.0,
            remote_comm_id: self.cm.conns[&id.0].remote_id,
            local_qkey: 0,
            local_qpn: qpn,
            starting_psn: psn,
            responder_resources,
            initiator_depth,
            target_ack_delay: 15,
            failover_accepted: 0,
            end_to_end_flow_control: false,
            rnr_retry_count: param.rnr_retry_count.min(7),
            srq: self.qps[&qpn.value()].init.srq.is_some(),
            local_ca_guid: self.node_guid(),
            private_data: &param.private_data,
        };
        let tid = self.cm.conns[&id.0].tid;
        let mad = self.cm.send(local, peer, tid, &CmMessage::Rep(rep));
        let c = self.cm.conns.get_mut(&id.0).ok_or(VerbsError::NotFound)?;
        c.qpn = Some(qpn);
        c.psn = psn;
        c.param = param.clone();
        c.state = CmState::RepSent;
        c.arm(mad);
        let t = now + c.interval;
        self.cm.schedule(id.0, t);
        Ok(())
    }

    /// `rdma_reject`: refuses a pending request (REJ, reason "consumer
    /// defined").
    pub fn cm_reject(&mut self, id: CmId, private_data: &[u8]) -> Result<(), VerbsError> {
        let c = self.cm.conns.get(&id.0).ok_or(VerbsError::NotFound)?;
        if c.state != CmState::ReqRcvd {
            return Err(VerbsError::InvalidArgument("no pending request"));
        }
        if private_data.len() > cm::private_len::REJ {
            return Err(VerbsError::InvalidArgument(
                "REJ private data over 148 bytes",
            ));
        }
        let (remote, tid, src, dst) = (c.remote_id, c.tid, c.local, c.peer);
        self.send_rej(
            src,
            dst,
            tid,
            id.0,
            remote,
            msg_ref::REQ,
            rej_reason::CONSUMER_DEFINED,
            private_data,
        );
        self.cm.conns.remove(&id.0);
        Ok(())
    }

    /// `rdma_disconnect`: moves the QP to ERR (flushing its work requests)
    /// and sends a DREQ; [`CmEvent::Disconnected`] follows the DREP.
    pub fn cm_disconnect(&mut self, now: Nanos, id: CmId) -> Result<(), VerbsError> {
        let c = self.cm.conns.get(&id.0).ok_or(VerbsError::NotFound)?;
        match c.state {
            CmState::Established => {}
            CmState::DreqSent => return Ok(()),
            _ => return Err(VerbsError::InvalidArgument("not connected")),
        }
        let (qpn, remote_qpn, remote, src, dst) =
            (c.qpn, c.remote_qpn, c.remote_id, c.local, c.peer);
        if let Some(q) = qpn {
            self.qp_to_err(q);
        }
        self.cm.counter += 1;
        let tid = (3u64 << 32) | (self.cm.counter & 0xffff_ffff);
        let dreq = DreqRepr {
            local_comm_id: id.0,
            remote_comm_id: remote,
            remote_qpn,
            private_data: &[],
        };
        let mad = self.cm.send(src, dst, tid, &CmMessage::Dreq(dreq));
        let c = self.cm.conns.get_mut(&id.0).ok_or(VerbsError::NotFound)?;
        c.state = CmState::DreqSent;
        c.tid = tid;
        c.arm(mad);
        let t = now + c.interval;
        self.cm.schedule(id.0, t);
        Ok(())
    }

    /// A stable GUID for the device, from its first address.
    fn node_guid(&self) -> u64 {
        let a = self
            .config
            .addrs
            .first()
            .map_or([0u8; 16], |a| cm::gid_of(*a));
        0x0200_00ff_fe00_0000 ^ mix(u128::from_be_bytes(a) as u64) & 0x00ff_ffff
    }

    fn av_to(&self, peer: IpAddr, local: IpAddr, req: &ReqInfo) -> AddressVector {
        let sgid = self
            .config
            .addrs
            .iter()
            .position(|a| *a == local)
            .unwrap_or(0) as u8;
        AddressVector {
            dest: peer,
            sgid_index: sgid,
            hop_limit: req.hop_limit.max(1),
            traffic_class: req.traffic_class,
            flow_label: req.flow_label,
        }
    }

    /// INIT → RTR → RTS with `a` (RC masks from the transition table).
    fn bring_up(&mut self, qpn: Qpn, mut a: QpAttr) -> Result<(), VerbsError> {
        a.qp_state = QpState::Rtr;
        self.modify_qp(
            qpn,
            &a,
            QpAttrMask::required(QpType::Rc, QpState::Init, QpState::Rtr),
        )?;
        a.qp_state = QpState::Rts;
        self.modify_qp(
            qpn,
            &a,
            QpAttrMask::required(QpType::Rc, QpState::Rtr, QpState::Rts),
        )
    }

    fn qp_to_err(&mut self, qpn: Qpn) {
        let a = QpAttr {
            qp_state: QpState::Err,
            ..QpAttr::default()
        };
        // A QP already in ERR (or destroyed) needs nothing.
        let _ = self.modify_qp(qpn, &a, QpAttrMask::STATE);
    }

    #[allow(clippy::too_many_arguments)]
    fn send_rej(
        &mut self,
        src: IpAddr,
        dst: IpAddr,
        tid: u64,
        local_id: u32,
        remote_id: u32,
        which: u8,
        reason: u16,
        private_data: &[u8],
    ) {
        let rej = RejRepr {
            local_comm_id: local_id,
            remote_comm_id: remote_id,
            message_rejected: which,
            reason,
            ari: &[],
            private_data,
        };
        self.cm.send(src, dst, tid, &CmMessage::Rej(rej));
    }

    /// A datagram for QP1.
    pub(super) fn cm_handle(&mut self, now: Nanos, p: &RocePacket<'_>) {
        let ok = p.bth.opcode == Opcode::UD_SEND_ONLY
            && p.ext.deth.is_some_and(|d| d.qkey == mad::GSI_QKEY);
        let parsed = if ok {
            CmMessage::parse_mad(p.payload).ok()
        } else {
            None
        };
        let Some((h, m)) = parsed else {
            self.cm.counters.dropped += 1;
            return;
        };
        self.cm.counters.rx_mads += 1;
        let (peer, local) = (p.ip.src(), p.ip.dst());
        match m {
            CmMessage::Req(r) => self.on_req(now, &h, &r, peer, local),
            CmMessage::Dreq(d) => self.on_dreq(&h, &d, peer, local),
            CmMessage::SidrReq(r) => self.on_sidr_req(now, &h, &r, peer, local),
            m => {
                let (to_us, from) = match m {
                    CmMessage::Rep(r) => (r.remote_comm_id, r.local_comm_id),
                    CmMessage::Rtu(r) | CmMessage::Drep(r) => (r.remote_comm_id, r.local_comm_id),
                    CmMessage::Rej(r) => (r.remote_comm_id, r.local_comm_id),
                    CmMessage::Mra(r) => (r.remote_comm_id, r.local_comm_id),
                    CmMessage::SidrRep(r) => (r.request_id, 0),
                    _ => {
                        self.cm.counters.dropped += 1;
                        return;
                    }
                };
                let Some(c) = self.cm.conns.get(&to_us) else {
                    self.cm.counters.dropped += 1;
                    return;
                };
                let known_peer =
                    c.remote_id == from || matches!(c.state, CmState::ReqSent | CmState::SidrSent);
                if c.peer != peer || !known_peer || !accepts(c.state, h.attr_id) {
                    self.cm.counters.dropped += 1;
                    return;
                }
                self.on_reply(now, to_us, &m);
            }
        }
    }

    fn on_req(&mut self, now: Nanos, h: &MadHeader, r: &ReqRepr<'_>, peer: IpAddr, local: IpAddr) {
        // A resent REQ of a connection we know: resend our answer.
        if let Some((&id, c)) = self
            .cm
            .conns
            .iter()
            .find(|(_, c)| c.remote_id == r.local_comm_id && c.peer == peer)
        {
            if c.state == CmState::RepSent {
                if let Some(m) = c.last.clone() {
                    self.cm.out.push_back(OutMad {
                        src: local,
                        dst: peer,
                        mad: m,
                    });
                }
            }
            let _ = id;
            return;
        }
        let listen = match cm::ip_service_port(r.service_id) {
            Some((port_space::TCP, _)) => self.cm.listeners.get(&r.service_id).copied(),
            _ => None,
        };
        let (reason, listen) = match listen {
            None => (rej_reason::INVALID_SERVICE_ID, None),
            Some(_) if r.transport != 0 => (rej_reason::INVALID_TRANSPORT_TYPE, None),
            Some(l) => (0, Some(l)),
        };
        let Some(listen) = listen else {
            self.cm.counters.rejected_reqs += 1;
            self.send_rej(
                local,
                peer,
                h.tid,
                0,
                r.local_comm_id,
                msg_ref::REQ,
                reason,
                &[],
            );
            return;
        };
        let (peer_port, user) = match CmaHeader::parse(r.private_data) {
            Ok(c) => (c.src_port, &r.private_data[CMA_HEADER_LEN..]),
            Err(_) => (0, r.private_data),
        };
        let id = self.cm.new_id(now);
        let info = ReqInfo {
            remote_qpn: r.local_qpn,
            starting_psn: r.starting_psn,
            path_mtu: 128u32 << r.path_mtu.clamp(1, 5),
            responder_resources: r.responder_resources,
            initiator_depth: r.initiator_depth,
            retry_count: r.retry_count,
            rnr_retry_count: r.rnr_retry_count,
            ack_timeout: r.primary.local_ack_timeout,
            traffic_class: r.primary.traffic_class,
            hop_limit: r.primary.hop_limit,
            flow_label: r.primary.flow_label,
        };
        let mut c = Conn::new(CmState::ReqRcvd, r.local_comm_id, h.tid, peer, local);
        c.remote_qpn = r.local_qpn;
        c.req = Some(info);
        self.cm.conns.insert(id, c);
        self.cm
            .events
            .push_back(CmEvent::ConnectRequest(ConnRequest {
                id: CmId(id),
                listen,
                peer,
                local,
                peer_port,
                remote_qpn: r.local_qpn,
                responder_resources: r.responder_resources,
                initiator_depth: r.initiator_depth,
                private_data: trim_zeros(user).to_vec(),
            }));
    }

    fn on_sidr_req(
        &mut self,
        now: Nanos,
        h: &MadHeader,
        r: &SidrReqRepr<'_>,
        peer: IpAddr,
        local: IpAddr,
    ) {
        // A resent SIDR_REQ still waiting for the application: nothing new.
        if self
            .cm
            .conns
            .values()
            .any(|c| c.state == CmState::SidrRcvd && c.remote_id == r.request_id && c.peer == peer)
        {
            return;
        }
        let listen = match cm::ip_service_port(r.service_id) {
            Some((port_space::UDP, _)) => self.cm.listeners.get(&r.service_id).copied(),
            _ => None,
        };
        let Some(listen) = listen else {
            // Status 1: the service ID is not supported here.
            self.cm.counters.rejected_reqs += 1;
            let rep = SidrRepRepr {
                request_id: r.request_id,
                status: 1,
                qpn: Qpn::new(0),
                service_id: r.service_id,
                qkey: 0,
                private_data: &[],
            };
            self.cm.send(local, peer, h.tid, &CmMessage::SidrRep(rep));
            return;
        };
        let (peer_port, user) = match CmaHeader::parse(r.private_data) {
            Ok(c) => (c.src_port, &r.private_data[CMA_HEADER_LEN..]),
            Err(_) => (0, r.private_data),
        };
        let id = self.cm.new_id(now);
        let mut c = Conn::new(CmState::SidrRcvd, r.request_id, h.tid, peer, local);
        c.service_id = r.service_id;
        self.cm.conns.insert(id, c);
        self.cm.events.push_back(CmEvent::UdRequest(UdRequest {
            id: CmId(id),
            listen,
            peer,
            local,
            peer_port,
            private_data: trim_zeros(user).to_vec(),
        }));
    }

    fn on_dreq(&mut self, h: &MadHeader, d: &DreqRepr<'_>, peer: IpAddr, local: IpAddr) {
        let id = d.remote_comm_id;
        let known = self.cm.conns.get(&id).is_some_and(|c| {
            c.peer == peer && c.remote_id == d.local_comm_id && accepts(c.state, attr::DREQ)
        });
        if known {
            let c = self.cm.conns.remove(&id).expect("known");
            if let Some(q) = c.qpn {
                self.qp_to_err(q);
            }
            self.cm
                .events
                .push_back(CmEvent::Disconnected { id: CmId(id) });
        }
        // Answer even a DREQ we do not know (its DREP was lost, or the
        // connection is long gone), as Linux does.
        let drep = IdsRepr {
            local_comm_id: id,
            remote_comm_id: d.local_comm_id,
            private_data: &[],
        };
        self.cm.send(local, peer, h.tid, &CmMessage::Drep(drep));
    }

    fn on_reply(&mut self, now: Nanos, id: u32, m: &CmMessage<'_>) {
        let state = self.cm.conns[&id].state;
        match (state, m) {
            (CmState::ReqSent, CmMessage::Rep(r)) => self.on_rep(now, id, r),
            (CmState::Established, CmMessage::Rep(_)) => {
                // Our RTU was lost: send it again.
                self.send_rtu(id);
            }
            (CmState::RepSent, CmMessage::Rtu(_)) => {
                let c = self.cm.conns.get_mut(&id).expect("exists");
                c.state = CmState::Established;
                c.deadline = None;
                c.last = None;
                self.cm.events.push_back(CmEvent::Established {
                    id: CmId(id),
                    private_data: Vec::new(),
                });
            }
            (_, CmMessage::Rej(r)) => {
                let c = self.cm.conns.remove(&id).expect("exists");
                if c.state == CmState::RepSent {
                    if let Some(q) = c.qpn {
                        self.qp_to_err(q);
                    }
                }
                self.cm.events.push_back(CmEvent::Rejected {
                    id: CmId(id),
                    reason: r.reason,
                    private_data: trim_zeros(r.private_data).to_vec(),
                });
            }
            (_, CmMessage::Mra(r)) => {
                // The peer needs longer: wait its service timeout once more.
                let t = now + timeout_ns(r.service_timeout) + self.cm.conns[&id].interval;
                self.cm.schedule(id, t);
            }
            (CmState::SidrSent, CmMessage::SidrRep(r)) => {
                self.cm.conns.remove(&id);
                let ev = if r.status == 0 {
                    CmEvent::UdResolved {
                        id: CmId(id),
                        qpn: r.qpn,
                        qkey: r.qkey,
                    }
                } else {
                    CmEvent::Rejected {
                        id: CmId(id),
                        reason: r.status as u16,
                        private_data: trim_zeros(r.private_data).to_vec(),
                    }
                };
                self.cm.events.push_back(ev);
            }
            (CmState::DreqSent, CmMessage::Drep(_)) => {
                self.cm.conns.remove(&id);
                self.cm
                    .events
                    .push_back(CmEvent::Disconnected { id: CmId(id) });
            }
            _ => self.cm.counters.dropped += 1,
        }
    }

    fn on_rep(&mut self, _now: Nanos, id: u32, r: &RepRepr<'_>) {
        let c = &self.cm.conns[&id];
        let Some(qpn) = c.qpn else { return };
        let (peer, local, psn, param) = (c.peer, c.local, c.psn, c.param.clone());
        let info = ReqInfo {
            remote_qpn: r.local_qpn,
            starting_psn: r.starting_psn,
            path_mtu: self.config.active_mtu,
            responder_resources: 0,
            initiator_depth: 0,
            retry_count: param.retry_count,
            rnr_retry_count: r.rnr_retry_count,
            ack_timeout: param.ack_timeout,
            traffic_class: 0,
            hop_limit: 64,
            flow_label: 0,
        };
        let a = QpAttr {
            ah_attr: self.av_to(peer, local, &info),
            path_mtu: info.path_mtu,
            dest_qp_num: r.local_qpn,
            rq_psn: psn,
            max_dest_rd_atomic: param.responder_resources.max(1),
            min_rnr_timer: param.min_rnr_timer,
            sq_psn: r.starting_psn,
            timeout: if param.ack_timeout == 0 {
                DEFAULT_PATH_ACK_TIMEOUT
            } else {
                param.ack_timeout
            },
            retry_cnt: param.retry_count.min(7),
            rnr_retry: r.rnr_retry_count,
            max_rd_atomic: param.initiator_depth.min(r.responder_resources).max(1),
            ..QpAttr::default()
        };
        if self.bring_up(qpn, a).is_err() {
            let tid = self.cm.conns[&id].tid;
            self.send_rej(
                local,
                peer,
                tid,
                id,
                r.local_comm_id,
                msg_ref::REP,
                rej_reason::NO_QP,
                &[],
            );
            self.cm.conns.remove(&id);
            self.cm
                .events
                .push_back(CmEvent::Unreachable { id: CmId(id) });
            return;
        }
        let c = self.cm.conns.get_mut(&id).expect("exists");
        c.remote_id = r.local_comm_id;
        c.remote_qpn = r.local_qpn;
        c.state = CmState::Established;
        c.deadline = None;
        c.last = None;
        self.send_rtu(id);
        self.cm.events.push_back(CmEvent::Established {
            id: CmId(id),
            private_data: trim_zeros(r.private_data).to_vec(),
        });
    }

    fn send_rtu(&mut self, id: u32) {
        let c = &self.cm.conns[&id];
        let rtu = IdsRepr {
            local_comm_id: id,
            remote_comm_id: c.remote_id,
            private_data: &[],
        };
        let (src, dst, tid) = (c.local, c.peer, c.tid);
        self.cm.send(src, dst, tid, &CmMessage::Rtu(rtu));
    }

    /// Resends or gives up the connections whose timers expired.
    pub(super) fn cm_handle_timeout(&mut self, now: Nanos) {
        while let Some(&Reverse((t, id))) = self.cm.timers.peek() {
            if t > now {
                break;
            }
            self.cm.timers.pop();
            let Some(c) = self.cm.conns.get_mut(&id) else {
                continue;
            };
            if c.deadline != Some(t) {
                continue;
            }
            if c.retries_left > 0 {
                c.retries_left -= 1;
                let next = now + c.interval;
                if let Some(m) = c.last.clone() {
                    let (src, dst) = (c.local, c.peer);
                    self.cm.out.push_back(OutMad { src, dst, mad: m });
                    self.cm.counters.resent += 1;
                }
                self.cm.schedule(id, next);
                continue;
            }
            let c = self.cm.conns.remove(&id).expect("listed");
            if let Some(q) = c.qpn {
                if c.state != CmState::ReqSent {
                    self.qp_to_err(q);
                }
            }
            let ev = match c.state {
                CmState::DreqSent => CmEvent::Disconnected { id: CmId(id) },
                _ => {
                    if c.state == CmState::ReqSent {
                        self.send_rej(
                            c.local,
                            c.peer,
                            c.tid,
                            id,
                            0,
                            msg_ref::REQ,
                            rej_reason::TIMEOUT,
                            &[],
                        );
                    }
                    CmEvent::Unreachable { id: CmId(id) }
                }
            };
            self.cm.events.push_back(ev);
        }
    }

    /// Writes the next QP1 datagram into `buf`.
    pub(super) fn cm_poll_transmit(&mut self, buf: &mut [u8]) -> Option<usize> {
        while let Some(o) = self.cm.out.pop_front() {
            let path = Path {
                src: o.src,
                dst: o.dst,
                sport: crate::qp::path::udp_sport(1),
                dscp: 0,
                ecn: Ecn::NotEct,
                ttl: 64,
                flow_label: 0,
            };
            let psn = Psn::new(self.cm.gsi_psn);
            self.cm.gsi_psn = (self.cm.gsi_psn + 1) & 0xff_ffff;
            let mut bth = BthRepr::new(Opcode::UD_SEND_ONLY, mad::GSI_QPN, psn);
            bth.ack_req = true;
            let ext = ExtHeaders {
                deth: Some(DethRepr {
                    qkey: mad::GSI_QKEY,
                    src_qp: mad::GSI_QPN,
                }),
                ..ExtHeaders::default()
            };
            if let Some(n) = path.emit(bth, ext, MAD_LEN, buf, |d| d.copy_from_slice(&o.mad[..])) {
                self.cm.counters.tx_mads += 1;
                return Some(n);
            }
            self.cm.counters.dropped += 1;
        }
        None
    }
}

/// rdma_cm's private data of a REQ or SIDR_REQ: its IP header (the source
/// port derived from the connection's ID) and then the consumer's bytes
/// (whose length the callers checked against `pd`).
fn cma_private(
    pd: &mut [u8],
    id: u32,
    local: IpAddr,
    dst: IpAddr,
    user: &[u8],
) -> Result<(), VerbsError> {
    let cma = CmaHeader {
        src_port: 0x8000 | (id as u16 & 0x7fff),
        src: local,
        dst,
    };
    cma.emit(pd)
        .map_err(|_| VerbsError::InvalidArgument("address"))?;
    pd[CMA_HEADER_LEN..CMA_HEADER_LEN + user.len()].copy_from_slice(user);
    Ok(())
}

fn mtu_code(mtu: u32) -> u8 {
    match mtu {
        256 => 1,
        512 => 2,
        1024 => 3,
        2048 => 4,
        _ => 5,
    }
}

/// Private data without its zero padding (the wire does not carry a
/// length; consumers that need exact lengths put them in their data).
fn trim_zeros(d: &[u8]) -> &[u8] {
    let end = d.iter().rposition(|&b| b != 0).map_or(0, |i| i + 1);
    &d[..end]
}
