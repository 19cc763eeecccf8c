//! What the peer's CM MADs do: REQ, REP, RTU, REJ, MRA, DREQ, DREP and
//! SIDR requests and replies, and the replies the CM sends back.

use std::net::IpAddr;

use roce_wire::cm::{
    self, attr, msg_ref, port_space, rej_reason, CmMessage, CmaHeader, DreqRepr, IdsRepr, RepRepr,
    ReqRepr, SidrRepRepr, SidrReqRepr, CMA_HEADER_LEN,
};
use roce_wire::mad::{self, MadHeader};
use roce_wire::{Opcode, Owner, Qpn, RocePacket};

use super::super::{Device, RxOutcome};
use super::{timeout_ns, trim_zeros, Conn, OutMad, ReqInfo, DEFAULT_PATH_ACK_TIMEOUT};
use crate::cm::{accepts, CmEvent, CmId, CmState, ConnRequest, UdRequest};
use crate::qp::accept::pkey_in_table;
use crate::qp::QpAttr;
use crate::Nanos;

impl Device {
    /// A datagram for QP1. With `may_forward` (a shared device, a
    /// datagram not handed on yet), a well-formed MAD that names a service
    /// or connection this device does not have is [`RxOutcome::Foreign`]
    /// ([`Device::foreign_owner`]); anything else is handled as ever.
    pub(in crate::device) fn cm_handle(
        &mut self,
        now: Nanos,
        p: &RocePacket<'_>,
        may_forward: bool,
    ) -> RxOutcome {
        // QP1 serves every partition of the port, and only those: the
        // BTH P_Key must match an entry of the P_Key table (IBTA Vol 1
        // §10.9.3), full or limited member, not both limited.
        if !pkey_in_table(p.bth.pkey.0) {
            self.cm.counters.dropped_pkey += 1;
            return RxOutcome::Done;
        }
        let ok = p.bth.opcode == Opcode::UD_SEND_ONLY
            && p.ext.deth.is_some_and(|d| d.qkey == mad::GSI_QKEY);
        let parsed = if ok {
            CmMessage::parse_mad(p.payload).ok()
        } else {
            None
        };
        let Some((h, m)) = parsed else {
            self.cm.counters.dropped += 1;
            return RxOutcome::Done;
        };
        let (peer, local) = (p.ip.src(), p.ip.dst());
        if may_forward {
            if let Some(o) = self.foreign_owner(&m, peer) {
                return RxOutcome::Foreign(o);
            }
        }
        self.cm.counters.rx_mads += 1;
        match m {
            CmMessage::Req(r) => {
                if self.on_req(now, &h, &r, peer, local) {
                    self.hold_req(now, r.service_id, peer, local, p.payload);
                }
            }
            CmMessage::Dreq(d) => self.on_dreq(&h, &d, peer, local),
            CmMessage::SidrReq(r) => self.on_sidr_req(now, &h, &r, peer, local),
            m => {
                let Some((to_us, from)) = reply_ids(&m) else {
                    self.cm.counters.dropped += 1;
                    return RxOutcome::Done;
                };
                let Some(c) = self.cm.conns.get(&to_us) else {
                    self.cm.counters.dropped += 1;
                    return RxOutcome::Done;
                };
                let known_peer =
                    c.remote_id == from || matches!(c.state, CmState::ReqSent | CmState::SidrSent);
                if c.peer != peer || c.local != local || !known_peer || !accepts(c.state, h.attr_id)
                {
                    self.cm.counters.dropped += 1;
                    return RxOutcome::Done;
                }
                self.on_reply(now, to_us, &m);
            }
        }
        RxOutcome::Done
    }

    /// What a MAD names that this device does not have, and another
    /// process sharing its address may (docs/host.md): a REQ's or
    /// SIDR_REQ's service ID when no listener here holds it and the
    /// request is not one received here already (a resend), or the local
    /// communication ID any other MAD names (IBTA Vol 1 §12.6: the
    /// REQ's sender's ID in its REP, RTU, REJ, MRA, DREQ and DREP; the
    /// request ID in a SIDR_REP, §12.11.2) when no connection here has it.
    /// `None` for what is this device's, even if it then fails the peer
    /// checks and is dropped, and for what names nobody (ID 0, which no
    /// CM draws; a message of a kind this CM does not take).
    fn foreign_owner(&self, m: &CmMessage<'_>, peer: IpAddr) -> Option<Owner> {
        match named_owner(m)? {
            Owner::CommId(id) => (!self.cm.conns.contains_key(&id)).then_some(Owner::CommId(id)),
            Owner::Service(service) => {
                let request = match m {
                    CmMessage::Req(r) => r.local_comm_id,
                    CmMessage::SidrReq(r) => r.request_id,
                    _ => return None,
                };
                let theirs = !self.cm.by_remote.contains_key(&(peer, request))
                    && !self.cm.listeners.contains_key(&service);
                theirs.then_some(Owner::Service(service))
            }
            Owner::Qp(_) => None,
        }
    }

    /// Handles a REQ; true when it was left unanswered for a listener
    /// expected soon (the caller keeps it: `held.rs`).
    pub(super) fn on_req(
        &mut self,
        now: Nanos,
        h: &MadHeader,
        r: &ReqRepr<'_>,
        peer: IpAddr,
        local: IpAddr,
    ) -> bool {
        // A resent REQ of a connection we know: resend our answer (found
        // through the index, not a scan of every connection).
        if let Some(&id) = self.cm.by_remote.get(&(peer, r.local_comm_id)) {
            if let Some(c) = self.cm.conns.get(&id) {
                if c.state == CmState::RepSent && c.local == local {
                    if let Some(m) = c.last.clone() {
                        self.cm.out.push_back(OutMad {
                            src: local,
                            dst: peer,
                            mad: m,
                        });
                    }
                }
            }
            return false;
        }
        let listen = match cm::ip_service_port(r.service_id) {
            Some((port_space::TCP, _)) => self.cm.listeners.get(&r.service_id).map(|l| l.0),
            _ => None,
        };
        let (reason, listen) = match listen {
            None => (rej_reason::INVALID_SERVICE_ID, None),
            Some(_) if r.transport != 0 => (rej_reason::INVALID_TRANSPORT_TYPE, None),
            Some(l) => (0, Some(l)),
        };
        let Some(listen) = listen else {
            if reason == rej_reason::INVALID_SERVICE_ID
                && self.cm.hold_for_relisten(r.service_id, now)
            {
                return true;
            }
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
            return false;
        };
        // The listener's backlog (`rdma_listen`), the table and the event
        // queue are bounded: a flood of REQs with new IDs is dropped once
        // they are full (a real peer resends its REQ, IBTA Vol 1 §12.7.27).
        if !self.cm.backlog_room(listen.0)
            || !self.cm.has_room()
            || self.cm.events.len() >= super::MAX_EVENTS
        {
            self.cm.counters.dropped_backlog += 1;
            return false;
        }
        // And one source holds at most its share of the listener's
        // requests not yet connected (see `SHARES_PER_BACKLOG`): a flood
        // from one address is dropped here, before it takes anything.
        if !self.cm.source_room(listen.0, peer) {
            self.cm.counters.dropped_source_share += 1;
            return false;
        }
        let (peer_port, user) = match CmaHeader::parse(r.private_data) {
            Ok(c) => (c.src_port, &r.private_data[CMA_HEADER_LEN..]),
            Err(_) => (0, r.private_data),
        };
        let id = self.cm.new_id();
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
        // Chosen now: a program managing its QP asks for it
        // (`cm_qp_attr`) before it accepts.
        c.psn = self.cm.new_psn();
        c.listen = Some(listen);
        self.cm.insert(id, c);
        self.cm
            .schedule(id, now + timeout_ns(super::PENDING_TIMEOUT));
        self.cm.push_event(CmEvent::ConnectRequest(ConnRequest {
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
        false
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
        if self.cm.by_remote.contains_key(&(peer, r.request_id)) {
            return;
        }
        let listen = match cm::ip_service_port(r.service_id) {
            Some((port_space::UDP, _)) => self.cm.listeners.get(&r.service_id).map(|l| l.0),
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
        if !self.cm.backlog_room(listen.0)
            || !self.cm.has_room()
            || self.cm.events.len() >= super::MAX_EVENTS
        {
            self.cm.counters.dropped_backlog += 1;
            return;
        }
        if !self.cm.source_room(listen.0, peer) {
            self.cm.counters.dropped_source_share += 1;
            return;
        }
        let (peer_port, user) = match CmaHeader::parse(r.private_data) {
            Ok(c) => (c.src_port, &r.private_data[CMA_HEADER_LEN..]),
            Err(_) => (0, r.private_data),
        };
        let id = self.cm.new_id();
        let mut c = Conn::new(CmState::SidrRcvd, r.request_id, h.tid, peer, local);
        c.service_id = r.service_id;
        c.listen = Some(listen);
        self.cm.insert(id, c);
        self.cm
            .schedule(id, now + timeout_ns(super::PENDING_TIMEOUT));
        self.cm.push_event(CmEvent::UdRequest(UdRequest {
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
            c.peer == peer
                && c.local == local
                && c.remote_id == d.local_comm_id
                && accepts(c.state, attr::DREQ)
        });
        if let Some(c) = known.then(|| self.cm.remove(id)).flatten() {
            if let Some(q) = c.qpn {
                self.qp_to_err(q);
            }
            self.cm.push_event(CmEvent::Disconnected { id: CmId(id) });
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
                // Connected: no longer part of its source's share.
                self.cm.unshare(id);
                let c = self.cm.conns.get_mut(&id).expect("exists");
                c.state = CmState::Established;
                c.deadline = None;
                c.last = None;
                self.cm.push_event(CmEvent::Established {
                    id: CmId(id),
                    private_data: Vec::new(),
                });
            }
            (CmState::ReqSent, CmMessage::Rej(r))
                if r.reason == rej_reason::INVALID_SERVICE_ID
                    && self.cm.resend_refused(id, now) => {}
            (_, CmMessage::Rej(r)) => {
                let Some(c) = self.cm.remove(id) else { return };
                if c.state == CmState::RepSent {
                    if let Some(q) = c.qpn {
                        self.qp_to_err(q);
                    }
                }
                self.cm.push_event(CmEvent::Rejected {
                    id: CmId(id),
                    reason: r.reason,
                    private_data: trim_zeros(r.private_data).to_vec(),
                });
            }
            (_, CmMessage::Mra(r)) => {
                // The peer needs longer: wait its service timeout once more,
                // at most MAX_MRAS times and at most 2^MAX_MRA_TIMEOUT
                // × 4.096 µs each (IBTA Vol 1 §12.6.6).
                let Some(c) = self.cm.conns.get_mut(&id) else {
                    return;
                };
                if c.mras >= super::MAX_MRAS {
                    self.cm.counters.mras_ignored += 1;
                    return;
                }
                c.mras += 1;
                let wait = timeout_ns(r.service_timeout.min(super::MAX_MRA_TIMEOUT));
                let t = now + wait + c.interval;
                self.cm.schedule(id, t);
            }
            (CmState::SidrSent, CmMessage::SidrRep(r)) => {
                self.cm.remove(id);
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
                self.cm.push_event(ev);
            }
            (CmState::DreqSent, CmMessage::Drep(_)) => {
                self.cm.remove(id);
                self.cm.push_event(CmEvent::Disconnected { id: CmId(id) });
            }
            _ => self.cm.counters.dropped += 1,
        }
    }

    fn on_rep(&mut self, now: Nanos, id: u32, r: &RepRepr<'_>) {
        let c = &self.cm.conns[&id];
        let (manual, service) = (c.manual, c.service_id);
        let (peer, local, psn, param, qpn) = (c.peer, c.local, c.psn, c.param.clone(), c.qpn);
        self.cm.connected(peer, service, now);
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
        if manual {
            // The program brings its QP up (`cm_qp_attr`), then calls
            // `cm_establish`, which sends the RTU.
            let c = self.cm.conns.get_mut(&id).expect("exists");
            c.remote_id = r.local_comm_id;
            c.remote_qpn = r.local_qpn;
            c.state = CmState::RepRcvd;
            c.deadline = None;
            c.last = None;
            c.qp_attr = Some(a);
            self.cm.push_event(CmEvent::ConnectResponse {
                id: CmId(id),
                private_data: trim_zeros(r.private_data).to_vec(),
            });
            return;
        }
        let Some(qpn) = qpn else { return };
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
            self.cm.remove(id);
            self.cm.push_event(CmEvent::Unreachable { id: CmId(id) });
            return;
        }
        let c = self.cm.conns.get_mut(&id).expect("exists");
        c.remote_id = r.local_comm_id;
        c.remote_qpn = r.local_qpn;
        c.state = CmState::Established;
        c.deadline = None;
        c.last = None;
        self.send_rtu(id);
        self.cm.push_event(CmEvent::Established {
            id: CmId(id),
            private_data: trim_zeros(r.private_data).to_vec(),
        });
    }

    pub(super) fn send_rtu(&mut self, id: u32) {
        let c = &self.cm.conns[&id];
        let rtu = IdsRepr {
            local_comm_id: id,
            remote_comm_id: c.remote_id,
            private_data: &[],
        };
        let (src, dst, tid) = (c.local, c.peer, c.tid);
        self.cm.send(src, dst, tid, &CmMessage::Rtu(rtu));
    }
}

/// What a CM MAD is for on its receiver's side (docs/host.md): the
/// service ID of a REQ or SIDR_REQ (its listener), else the receiver's
/// communication ID it names (a DREQ's remote ID, the first of
/// [`reply_ids`]). `None` for ID 0, which no CM draws, and for messages
/// this CM does not take.
pub(in crate::device) fn named_owner(m: &CmMessage<'_>) -> Option<Owner> {
    let id = match m {
        CmMessage::Req(r) => return Some(Owner::Service(r.service_id)),
        CmMessage::SidrReq(r) => return Some(Owner::Service(r.service_id)),
        CmMessage::Dreq(d) => d.remote_comm_id,
        m => reply_ids(m)?.0,
    };
    (id != 0).then_some(Owner::CommId(id))
}

/// The (local communication ID it names on our side, the sender's ID) of
/// a reply-like MAD: REP, RTU, DREP, REJ, MRA (IBTA Vol 1 §12.6), and a
/// SIDR_REP's request ID (§12.11.2; it carries no ID of its sender's).
/// `None` for REQ, DREQ, SIDR_REQ and the messages this CM does not take.
fn reply_ids(m: &CmMessage<'_>) -> Option<(u32, u32)> {
    Some(match m {
        CmMessage::Rep(r) => (r.remote_comm_id, r.local_comm_id),
        CmMessage::Rtu(r) | CmMessage::Drep(r) => (r.remote_comm_id, r.local_comm_id),
        CmMessage::Rej(r) => (r.remote_comm_id, r.local_comm_id),
        CmMessage::Mra(r) => (r.remote_comm_id, r.local_comm_id),
        CmMessage::SidrRep(r) => (r.request_id, 0),
        _ => return None,
    })
}
