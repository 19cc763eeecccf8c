//! The CM verbs the application calls: `rdma_listen`, `rdma_connect`,
//! `rdma_accept`, `rdma_reject`, `rdma_disconnect` and SIDR for UD.

use std::net::IpAddr;

use roce_wire::cm::{
    self, msg_ref, port_space, rej_reason, CmMessage, DreqRepr, PathRepr, RepRepr, ReqRepr,
    SidrRepRepr, SidrReqRepr, CMA_HEADER_LEN,
};
use roce_wire::Qpn;

use super::{
    cma_private, mtu_code, CmCounters, Conn, CM_RESPONSE_TIMEOUT, DEFAULT_BACKLOG,
    DEFAULT_PATH_ACK_TIMEOUT, MAX_CM_RETRIES, MAX_CONNS,
};
use crate::cm::{CmEvent, CmId, CmState, ConnParam, ListenId};
use crate::device::{Device, VerbsError};
use crate::qp::state::{QpAttrMask, QpState, QpType};
use crate::qp::QpAttr;
use crate::Nanos;

impl Device {
    /// `rdma_listen` on `port` (TCP port space): REQs for it raise
    /// [`CmEvent::ConnectRequest`].
    pub fn cm_listen(&mut self, port: u16) -> Result<ListenId, VerbsError> {
        self.cm_listen_backlog(port, DEFAULT_BACKLOG)
    }

    /// `rdma_listen(id, backlog)`: at most `backlog` (at least 1) received
    /// REQs wait for [`Device::cm_accept`] / [`Device::cm_reject`] at once;
    /// further REQs are dropped (their senders resend), and a request
    /// nobody answers is dropped after about 4 s.
    pub fn cm_listen_backlog(&mut self, port: u16, backlog: usize) -> Result<ListenId, VerbsError> {
        self.listen_service(cm::ip_service_id(port_space::TCP, port), backlog)
    }

    /// `rdma_listen` on `port` in rdma_cm's UDP port space: SIDR_REQs for
    /// it raise [`CmEvent::UdRequest`].
    pub fn cm_listen_ud(&mut self, port: u16) -> Result<ListenId, VerbsError> {
        self.listen_service(cm::ip_service_id(port_space::UDP, port), DEFAULT_BACKLOG)
    }

    fn listen_service(&mut self, service: u64, backlog: usize) -> Result<ListenId, VerbsError> {
        if self.cm.listeners.contains_key(&service) {
            return Err(VerbsError::Busy);
        }
        self.cm.relisten.retain(|(s, _)| *s != service);
        self.cm
            .listeners
            .insert(service, (ListenId(service), backlog.clamp(1, MAX_CONNS)));
        self.release_held(service);
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
        if !self.cm.has_room() {
            return Err(VerbsError::Busy);
        }
        let id = self.cm.new_id();
        let tid = self.cm.new_tid();
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
        self.cm.insert(id, c);
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
        self.cm.remove(id.0);
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
    /// Returns the requests it received that are still unanswered (for
    /// [`Device::cm_abandon`]).
    pub fn cm_stop_listen(&mut self, l: ListenId) -> Vec<CmId> {
        // (The key is the service ID, which the ListenId carries.)
        if self.cm.listeners.remove(&l.0).is_some() {
            self.cm.listener_gone(l.0);
        }
        self.cm
            .conns
            .iter()
            .filter(|(_, c)| {
                c.listen == Some(l) && matches!(c.state, CmState::ReqRcvd | CmState::SidrRcvd)
            })
            .map(|(id, _)| CmId(*id))
            .collect()
    }

    /// `rdma_bind_addr` of `port` in rdma_cm's TCP port space, ahead of
    /// an `rdma_listen` that may come a moment later: a REQ for it that
    /// finds no listener meanwhile is left unanswered for up to 2 s
    /// (`RELISTEN_GRACE` in `device/cm.rs`; its sender resends it)
    /// instead of refused, as after a listener that just
    /// closed. Some servers tell their peer the port they bound before
    /// they listen on it (qperf 0.4.11's `cm_open_server`), so their
    /// peer's REQ can come first; a peer that resends a refused REQ
    /// (this CM, for 0.5 s) copes, Linux's CM does not. A listen on the
    /// port ends the grace; so does its running out.
    pub fn cm_expect_listen(&mut self, port: u16) {
        let service = cm::ip_service_id(port_space::TCP, port);
        if !self.cm.listeners.contains_key(&service) {
            self.cm.listener_gone(service);
        }
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
        if qp.common.init.qp_type != QpType::Rc {
            return Err(VerbsError::InvalidArgument("rdma_cm connects RC QPs"));
        }
        if qp.common.state != QpState::Init {
            return Err(VerbsError::InvalidArgument("the QP must be in INIT"));
        }
        let srq = qp.common.init.srq.is_some();
        self.send_req(now, qpn, srq, dst, port, param, false)
    }

    /// `rdma_connect` on an id without a QP (`rdma_conn_param.qp_num`): the
    /// REQ names `qpn`, a QP the program manages, which the CM never
    /// modifies. The REP raises [`CmEvent::ConnectResponse`]; the program
    /// brings its QP up with [`Device::cm_qp_attr`] and calls
    /// [`Device::cm_establish`].
    pub fn cm_connect_manual(
        &mut self,
        now: Nanos,
        qpn: Qpn,
        srq: bool,
        dst: IpAddr,
        port: u16,
        param: &ConnParam,
    ) -> Result<CmId, VerbsError> {
        self.send_req(now, qpn, srq, dst, port, param, true)
    }

    #[allow(clippy::too_many_arguments)]
    fn send_req(
        &mut self,
        now: Nanos,
        qpn: Qpn,
        srq: bool,
        dst: IpAddr,
        port: u16,
        param: &ConnParam,
        manual: bool,
    ) -> Result<CmId, VerbsError> {
        if param.private_data.len() > cm::private_len::REQ - CMA_HEADER_LEN {
            return Err(VerbsError::InvalidArgument(
                "REQ private data over 56 bytes",
            ));
        }
        let local = self.local_for(dst)?;
        if !self.cm.has_room() {
            return Err(VerbsError::Busy);
        }
        let id = self.cm.new_id();
        let psn = self.cm.new_psn();
        let tid = self.cm.new_tid();
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
            srq,
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
        c.service_id = cm::ip_service_id(port_space::TCP, port);
        c.qpn = (!manual).then_some(qpn);
        c.manual = manual;
        c.psn = psn;
        c.param = param.clone();
        c.arm(mad);
        let t = now + c.interval;
        self.cm.insert(id, c);
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
        let srq = self
            .qps
            .get(&qpn.value())
            .ok_or(VerbsError::NotFound)?
            .common
            .init
            .srq
            .is_some();
        self.send_rep(now, id, qpn, srq, param, false)
    }

    /// `rdma_accept` on an id without a QP: the REP names `qpn`, a QP the
    /// program manages and has brought up with [`Device::cm_qp_attr`];
    /// the CM never modifies it. [`CmEvent::Established`] follows the RTU.
    pub fn cm_accept_manual(
        &mut self,
        now: Nanos,
        id: CmId,
        qpn: Qpn,
        srq: bool,
        param: &ConnParam,
    ) -> Result<(), VerbsError> {
        self.send_rep(now, id, qpn, srq, param, true)
    }

    fn send_rep(
        &mut self,
        now: Nanos,
        id: CmId,
        qpn: Qpn,
        srq: bool,
        param: &ConnParam,
        manual: bool,
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
        let (peer, local, psn) = (c.peer, c.local, c.psn);
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
        if !manual {
            self.bring_up(qpn, a)?;
        }
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
            srq,
            local_ca_guid: self.node_guid(),
            private_data: &param.private_data,
        };
        let tid = self.cm.conns[&id.0].tid;
        let mad = self.cm.send(local, peer, tid, &CmMessage::Rep(rep));
        self.cm.unpend(id.0);
        let c = self.cm.conns.get_mut(&id.0).ok_or(VerbsError::NotFound)?;
        c.qpn = (!manual).then_some(qpn);
        c.manual = manual;
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
        self.cm.remove(id.0);
        Ok(())
    }

    /// Gives up a connection not yet established (the application stopped
    /// waiting, or dropped its listener), as `rdma_destroy_id` does: a REQ
    /// sent is withdrawn with a REJ (reason timeout), a request received is
    /// rejected (a SIDR request too), a REP sent is withdrawn with a REJ and the QP goes to
    /// ERR. The connection is forgotten, so a late answer from the peer
    /// finds nothing (and no QP is connected behind the caller's back).
    /// Established or disconnecting connections are left alone.
    pub fn cm_abandon(&mut self, id: CmId) {
        let Some(c) = self.cm.conns.get(&id.0) else {
            return;
        };
        if c.state == CmState::SidrRcvd {
            // Status 2: rejected.
            let _ = self.answer_sidr(id, 2, Qpn::new(0), 0);
            return;
        }
        let (reason, which) = match c.state {
            CmState::ReqSent => (rej_reason::TIMEOUT, msg_ref::REQ),
            CmState::ReqRcvd => (rej_reason::CONSUMER_DEFINED, msg_ref::REQ),
            CmState::RepSent => (rej_reason::CONSUMER_DEFINED, msg_ref::OTHER),
            _ => return,
        };
        let (remote, tid, src, dst, qpn, state) =
            (c.remote_id, c.tid, c.local, c.peer, c.qpn, c.state);
        self.send_rej(src, dst, tid, id.0, remote, which, reason, &[]);
        self.cm.remove(id.0);
        if let (CmState::RepSent, Some(q)) = (state, qpn) {
            self.qp_to_err(q);
        }
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
        let tid = self.cm.new_tid();
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

    /// `rdma_establish`: the program brought its QP to RTS after
    /// [`CmEvent::ConnectResponse`]; the RTU leaves and the connection is
    /// established (no event: the program knows).
    pub fn cm_establish(&mut self, id: CmId) -> Result<(), VerbsError> {
        let c = self.cm.conns.get_mut(&id.0).ok_or(VerbsError::NotFound)?;
        if c.state != CmState::RepRcvd {
            return Err(VerbsError::InvalidArgument(
                "no REP waiting for rdma_establish",
            ));
        }
        c.state = CmState::Established;
        self.send_rtu(id.0);
        Ok(())
    }

    /// `rdma_init_qp_attr` for RTR or RTS: the attributes (and the mask of
    /// the transition) that bring a program-managed QP of connection `id`
    /// to `state`, from the REQ (passive side) or the REP (active side).
    pub fn cm_qp_attr(
        &mut self,
        id: CmId,
        state: QpState,
    ) -> Result<(QpAttr, QpAttrMask), VerbsError> {
        let c = self.cm.conns.get(&id.0).ok_or(VerbsError::NotFound)?;
        let mut a = match (&c.qp_attr, &c.req) {
            (Some(a), _) => *a,
            (None, Some(req)) => {
                let (peer, local, psn) = (c.peer, c.local, c.psn);
                let req = req.clone();
                QpAttr {
                    ah_attr: self.av_to(peer, local, &req),
                    path_mtu: req.path_mtu.min(self.config.active_mtu),
                    dest_qp_num: req.remote_qpn,
                    rq_psn: psn,
                    max_dest_rd_atomic: req.initiator_depth.max(1),
                    min_rnr_timer: ConnParam::default().min_rnr_timer,
                    sq_psn: req.starting_psn,
                    timeout: req.ack_timeout,
                    retry_cnt: req.retry_count,
                    rnr_retry: req.rnr_retry_count,
                    max_rd_atomic: req.responder_resources.max(1),
                    ..QpAttr::default()
                }
            }
            (None, None) => {
                return Err(VerbsError::InvalidArgument(
                    "the peer's parameters are not known yet",
                ))
            }
        };
        let from = match state {
            QpState::Rtr => QpState::Init,
            QpState::Rts => QpState::Rtr,
            _ => return Err(VerbsError::InvalidArgument("RTR or RTS")),
        };
        a.qp_state = state;
        Ok((a, QpAttrMask::required(QpType::Rc, from, state)))
    }
}
