//! Connection management between two devices (IB CM over QP1 with
//! rdma_cm's addressing): connect/accept bring both QPs to RTS with each
//! other's QPN and PSN, data flows, disconnect flushes both sides; and the
//! failure paths: no listener, consumer reject, lost REP/RTU, a dead peer.

mod common;

use common::{Verdict, World};
use roce_core::cm::{CmEvent, CmState, ConnParam};
use roce_core::*;
use roce_testkit::frames;
use roce_wire::cm::{attr, rej_reason, CmMessage, CmaHeader};
use roce_wire::RocePacket;

const PORT: u16 = 7174;

fn init_qp(w: &mut World, i: usize) -> Qpn {
    let h = &mut w.hosts[i];
    let init = QpInitAttr {
        qp_type: QpType::Rc,
        pd: h.pd,
        send_cq: h.cq,
        recv_cq: h.cq,
        srq: None,
        cap: QpCaps::default(),
        sq_sig_all: false,
    };
    let q = h.dev.create_qp(init).unwrap();
    let a = QpAttr {
        qp_state: QpState::Init,
        qp_access_flags: Access::LOCAL_WRITE
            | Access::REMOTE_WRITE
            | Access::REMOTE_READ
            | Access::REMOTE_ATOMIC,
        ..QpAttr::default()
    };
    h.dev
        .modify_qp(
            q,
            &a,
            QpAttrMask::required(QpType::Rc, QpState::Reset, QpState::Init),
        )
        .unwrap();
    q
}

fn events(w: &mut World, i: usize) -> Vec<CmEvent> {
    std::iter::from_fn(|| w.hosts[i].dev.poll_cm_event()).collect()
}

/// Runs until host `i` has a CM event; returns it.
fn next_event(w: &mut World, i: usize) -> CmEvent {
    let mut got = None;
    w.run_until(100_000, |w| {
        got = w.hosts[i].dev.poll_cm_event();
        got.is_some()
    });
    got.unwrap_or_else(|| panic!("host {i}: no CM event (now {} ns)", w.now))
}

/// Connects host 0's QP to host 1's listener; returns (qp0, qp1, id0, id1).
fn establish(w: &mut World, p0: &ConnParam, p1: &ConnParam) -> (Qpn, Qpn, cm::CmId, cm::CmId) {
    let q0 = init_qp(w, 0);
    let peer = w.hosts[1].addr();
    let id0 = w.hosts[0]
        .dev
        .cm_connect(w.now, q0, peer, PORT, p0)
        .unwrap();
    let CmEvent::ConnectRequest(req) = next_event(w, 1) else {
        panic!("expected a connect request")
    };
    assert_eq!(req.remote_qpn, q0);
    assert_eq!(req.peer, w.hosts[0].addr());
    assert_eq!(req.private_data, p0.private_data);
    let q1 = init_qp(w, 1);
    w.hosts[1].dev.cm_accept(w.now, req.id, q1, p1).unwrap();
    let e0 = next_event(w, 0);
    assert_eq!(
        e0,
        CmEvent::Established {
            id: id0,
            private_data: p1.private_data.clone()
        }
    );
    let e1 = next_event(w, 1);
    assert!(matches!(e1, CmEvent::Established { id, .. } if id == req.id));
    (q0, q1, id0, req.id)
}

#[test]
fn connect_send_write_and_disconnect() {
    let mut w = World::new(1 << 16);
    w.hosts[1].dev.cm_listen(PORT).unwrap();
    // Record the starting PSNs of the REQ and the REP on the wire.
    let seen = std::rc::Rc::new(std::cell::RefCell::new((Psn::new(0), Psn::new(0))));
    let s2 = seen.clone();
    w.filter = Box::new(move |_, d| {
        let p = RocePacket::parse_ip(d).unwrap();
        if p.bth.dest_qp == roce_wire::mad::GSI_QPN {
            match CmMessage::parse_mad(p.payload).unwrap().1 {
                CmMessage::Req(r) => s2.borrow_mut().0 = r.starting_psn,
                CmMessage::Rep(r) => s2.borrow_mut().1 = r.starting_psn,
                _ => {}
            }
        }
        Verdict::Deliver
    });
    let p0 = ConnParam {
        private_data: b"hello from the active side".to_vec(),
        ..ConnParam::default()
    };
    let p1 = ConnParam {
        private_data: b"welcome".to_vec(),
        ..ConnParam::default()
    };
    let (q0, q1, id0, id1) = establish(&mut w, &p0, &p1);
    for (i, q) in [(0, q0), (1, q1)] {
        assert_eq!(w.hosts[i].dev.qp(q).unwrap().state(), QpState::Rts);
    }
    // The QPs point at each other.
    let a0 = w.hosts[0].dev.qp(q0).unwrap().attr();
    let a1 = w.hosts[1].dev.qp(q1).unwrap().attr();
    assert_eq!((a0.dest_qp_num, a1.dest_qp_num), (q1, q0));
    assert_eq!((a0.sq_psn, a0.rq_psn), (a1.rq_psn, a1.sq_psn));
    // Each side's starting PSN (REQ for the active side, REP for the
    // passive side) is the PSN it expects to receive: in the rdmacm_rping
    // capture the client's first SEND carries the REP's PSN and the
    // server's first READ the REQ's.
    let (req_psn, rep_psn) = *seen.borrow();
    assert_eq!((a0.rq_psn, a1.rq_psn), (req_psn, rep_psn));
    assert_eq!(a0.path_mtu, 4096);

    // SEND and WRITE over the connection, with the bytes checked.
    w.hosts[0].write(0, b"over rdma_cm");
    let recv = RecvWr {
        wr_id: 9,
        sgl: vec![w.hosts[1].sge(0x100, 64)].into(),
    };
    w.hosts[1].dev.post_recv(q1, recv).unwrap();
    let mut send = SendWr::send(1, [w.hosts[0].sge(0, 12)]);
    send.flags = SendFlags::SIGNALED;
    w.hosts[0].dev.post_send(q0, send).unwrap();
    let base1 = w.hosts[1].base;
    let rkey = w.hosts[1].mr.rkey;
    let mut write = SendWr::rdma(
        2,
        SendOp::Write,
        [w.hosts[0].sge(0, 12)],
        base1 + 0x800,
        rkey,
    );
    write.flags = SendFlags::SIGNALED;
    w.hosts[0].dev.post_send(q0, write).unwrap();
    w.settle(100_000);
    let c0 = w.hosts[0].poll();
    assert_eq!(c0.len(), 2);
    assert!(c0.iter().all(|c| c.status == WcStatus::Success));
    let c1 = w.hosts[1].poll();
    assert_eq!((c1.len(), c1[0].wr_id, c1[0].byte_len), (1, 9, 12));
    assert_eq!(w.hosts[1].read(0x100, 12), b"over rdma_cm");
    assert_eq!(w.hosts[1].read(0x800, 12), b"over rdma_cm");

    // Disconnect from the passive side: both QPs end in ERR, both sides
    // see exactly one Disconnected.
    w.hosts[1].dev.cm_disconnect(w.now, id1).unwrap();
    assert_eq!(w.hosts[1].dev.cm_state(id1), Some(CmState::DreqSent));
    w.settle(100_000);
    assert_eq!(events(&mut w, 0), [CmEvent::Disconnected { id: id0 }]);
    assert_eq!(events(&mut w, 1), [CmEvent::Disconnected { id: id1 }]);
    for (i, q) in [(0, q0), (1, q1)] {
        assert_eq!(w.hosts[i].dev.qp(q).unwrap().state(), QpState::Err);
    }
    assert_eq!(w.hosts[0].dev.cm_state(id0), None);
    // REQ REP RTU DREQ DREP and nothing resent.
    let sent = w.hosts[0].dev.cm_counters().tx_mads + w.hosts[1].dev.cm_counters().tx_mads;
    assert_eq!(sent, 5);
}

#[test]
fn the_req_on_the_wire_is_what_rdma_cm_sends() {
    let mut w = World::new(4096);
    let q0 = init_qp(&mut w, 0);
    let peer = w.hosts[1].addr();
    let p = ConnParam {
        responder_resources: 4,
        initiator_depth: 2,
        private_data: vec![7; 56],
        ..ConnParam::default()
    };
    w.hosts[0].dev.cm_connect(0, q0, peer, PORT, &p).unwrap();
    let mut buf = [0u8; 512];
    let n = w.hosts[0]
        .dev
        .poll_transmit(0, &mut buf)
        .datagram()
        .unwrap()
        .size;
    let pkt = RocePacket::parse_ip(&buf[..n]).unwrap();
    pkt.check_icrc().unwrap();
    assert_eq!(pkt.bth.dest_qp, roce_wire::mad::GSI_QPN);
    let deth = pkt.ext.deth.unwrap();
    assert_eq!(deth.qkey, roce_wire::mad::GSI_QKEY);
    let (h, m) = CmMessage::parse_mad(pkt.payload).unwrap();
    assert_eq!(h.attr_id, attr::REQ);
    let CmMessage::Req(r) = m else { panic!() };
    assert_eq!(r.service_id, 0x0106_0000 | PORT as u64);
    assert_eq!(r.local_qpn, q0);
    assert_eq!((r.responder_resources, r.initiator_depth), (4, 2));
    assert_eq!((r.path_mtu, r.retry_count, r.rnr_retry_count), (5, 7, 7));
    assert_eq!(roce_wire::cm::ip_of_gid(r.primary.remote_gid), peer);
    let c = CmaHeader::parse(r.private_data).unwrap();
    assert_eq!((c.src, c.dst), (w.hosts[0].addr(), peer));
    assert_eq!(&r.private_data[36..], &[7; 56][..]);
    // 57 bytes of consumer data do not fit.
    let q = init_qp(&mut w, 0);
    let too_long = ConnParam {
        private_data: vec![1; 57],
        ..ConnParam::default()
    };
    assert!(w.hosts[0]
        .dev
        .cm_connect(0, q, peer, PORT, &too_long)
        .is_err());
    // Only an RC QP in INIT may connect.
    let q2 = init_qp(&mut w, 0);
    w.hosts[0]
        .dev
        .modify_qp(
            q2,
            &QpAttr {
                qp_state: QpState::Err,
                ..QpAttr::default()
            },
            QpAttrMask::STATE,
        )
        .unwrap();
    assert!(w.hosts[0]
        .dev
        .cm_connect(0, q2, peer, PORT, &ConnParam::default())
        .is_err());
}

#[test]
fn no_listener_is_rejected_with_invalid_service_id() {
    let mut w = World::new(4096);
    let q0 = init_qp(&mut w, 0);
    let peer = w.hosts[1].addr();
    let id = w.hosts[0]
        .dev
        .cm_connect(0, q0, peer, 9999, &ConnParam::default())
        .unwrap();
    let e = next_event(&mut w, 0);
    assert_eq!(
        e,
        CmEvent::Rejected {
            id,
            reason: rej_reason::INVALID_SERVICE_ID,
            private_data: vec![]
        }
    );
    // Resent every 50 ms for 0.5 s first (a listener may be on its way:
    // `a_req_racing_the_listen_is_resent_until_it_comes`), then reported.
    let resent = w.hosts[0].dev.cm_counters().resent_after_refusal;
    assert!((9..=11).contains(&resent), "{resent} resends");
    assert_eq!(w.hosts[1].dev.cm_counters().rejected_reqs, resent + 1);
    assert!(
        (500_000_000..1_000_000_000).contains(&w.now),
        "reported at {} ns",
        w.now
    );
    assert_eq!(w.hosts[0].dev.cm_state(id), None);
    // The QP is untouched (still INIT) and can try again.
    assert_eq!(w.hosts[0].dev.qp(q0).unwrap().state(), QpState::Init);
    // A second listener on a taken port is refused.
    w.hosts[1].dev.cm_listen(PORT).unwrap();
    assert_eq!(w.hosts[1].dev.cm_listen(PORT), Err(VerbsError::Busy));
}

#[test]
fn consumer_reject_carries_private_data() {
    let mut w = World::new(4096);
    w.hosts[1].dev.cm_listen(PORT).unwrap();
    let q0 = init_qp(&mut w, 0);
    let peer = w.hosts[1].addr();
    let id = w.hosts[0]
        .dev
        .cm_connect(0, q0, peer, PORT, &ConnParam::default())
        .unwrap();
    let CmEvent::ConnectRequest(req) = next_event(&mut w, 1) else {
        panic!()
    };
    w.hosts[1].dev.cm_reject(req.id, b"go away").unwrap();
    assert_eq!(
        next_event(&mut w, 0),
        CmEvent::Rejected {
            id,
            reason: rej_reason::CONSUMER_DEFINED,
            private_data: b"go away".to_vec()
        }
    );
    // The request is gone on the passive side too.
    assert!(w.hosts[1].dev.cm_reject(req.id, b"").is_err());
}

/// Drops the first MAD host `from` sends with attribute `attr_id`.
fn drop_first(from: usize, attr_id: u16) -> common::Filter {
    let mut dropped = false;
    Box::new(move |i, d| {
        if dropped || i != from {
            return Verdict::Deliver;
        }
        let p = RocePacket::parse_ip(d).unwrap();
        if p.bth.dest_qp != roce_wire::mad::GSI_QPN {
            return Verdict::Deliver;
        }
        let (h, _) = CmMessage::parse_mad(p.payload).unwrap();
        if h.attr_id == attr_id {
            dropped = true;
            return Verdict::Drop;
        }
        Verdict::Deliver
    })
}

#[test]
fn a_lost_rep_or_rtu_is_recovered_by_retransmission() {
    for (from, lost) in [(1, attr::REP), (0, attr::RTU), (0, attr::REQ)] {
        let mut w = World::new(4096);
        w.hosts[1].dev.cm_listen(PORT).unwrap();
        w.filter = drop_first(from, lost);
        let (q0, q1, _, _) = establish(&mut w, &ConnParam::default(), &ConnParam::default());
        w.settle(100_000);
        assert_eq!(w.hosts[0].dev.qp(q0).unwrap().state(), QpState::Rts);
        assert_eq!(w.hosts[1].dev.qp(q1).unwrap().state(), QpState::Rts);
        let resent = w.hosts[0].dev.cm_counters().resent + w.hosts[1].dev.cm_counters().resent;
        assert!(resent >= 1, "lost {lost:#x}: nothing resent");
        // The resend waited the advertised response timeout (~1.07 s).
        assert!(w.now >= 1_073_741_824, "lost {lost:#x}: now {}", w.now);
        assert!(events(&mut w, 0).is_empty() && events(&mut w, 1).is_empty());
    }
}

#[test]
fn a_silent_peer_is_unreachable_after_every_retry() {
    let mut w = World::new(4096);
    w.filter = Box::new(|i, _| {
        if i == 0 {
            Verdict::Drop
        } else {
            Verdict::Deliver
        }
    });
    let q0 = init_qp(&mut w, 0);
    let peer = w.hosts[1].addr();
    let id = w.hosts[0]
        .dev
        .cm_connect(0, q0, peer, PORT, &ConnParam::default())
        .unwrap();
    assert_eq!(next_event(&mut w, 0), CmEvent::Unreachable { id });
    let gave_up = w.now;
    w.settle(1000);
    let c = w.hosts[0].dev.cm_counters();
    // The REQ, 15 resends, and the closing REJ (timeout).
    assert_eq!((c.tx_mads, c.resent), (17, 15));
    // 16 waits of 4.096 µs × 2^18.
    assert_eq!(gave_up, 16 * (4096u64 << 18));
    assert_eq!(w.hosts[0].dev.cm_state(id), None);
}

#[test]
fn a_dreq_for_an_unknown_connection_still_gets_a_drep() {
    let mut w = World::new(4096);
    w.hosts[1].dev.cm_listen(PORT).unwrap();
    let (_, _, id0, _) = establish(&mut w, &ConnParam::default(), &ConnParam::default());
    // Lose the DREP: the DREQ is resent, the passive side (whose
    // connection is gone by then) answers it again.
    w.filter = drop_first(1, attr::DREP);
    w.hosts[0].dev.cm_disconnect(w.now, id0).unwrap();
    assert_eq!(next_event(&mut w, 0), CmEvent::Disconnected { id: id0 });
    assert_eq!(w.hosts[0].dev.cm_counters().resent, 1);
    assert_eq!(events(&mut w, 1).len(), 1);
}

#[test]
fn ud_service_resolution_answers_qpn_and_qkey() {
    let mut w = World::new(4096);
    w.hosts[1].dev.cm_listen_ud(PORT).unwrap();
    // A TCP-space listener on the same port is a different service.
    w.hosts[1].dev.cm_listen(PORT).unwrap();
    let peer = w.hosts[1].addr();
    let id = w.hosts[0]
        .dev
        .cm_resolve_ud(0, peer, PORT, b"who serves?")
        .unwrap();
    let CmEvent::UdRequest(req) = next_event(&mut w, 1) else {
        panic!("expected a UD request")
    };
    assert_eq!(req.listen.port(), PORT);
    assert_eq!(req.peer, w.hosts[0].addr());
    assert_eq!(req.private_data, b"who serves?");
    w.hosts[1]
        .dev
        .cm_accept_ud(req.id, Qpn::new(0x23), 0x0123_4567)
        .unwrap();
    assert_eq!(
        next_event(&mut w, 0),
        CmEvent::UdResolved {
            id,
            qpn: Qpn::new(0x23),
            qkey: 0x0123_4567
        }
    );
    // Answered once: a second answer is refused.
    assert!(w.hosts[1].dev.cm_reject_ud(req.id).is_err());

    // Nobody serves port 9: SIDR_REP status 1.
    let id = w.hosts[0].dev.cm_resolve_ud(w.now, peer, 9, &[]).unwrap();
    let e = next_event(&mut w, 0);
    assert!(
        matches!(e, CmEvent::Rejected { id: i, reason: 1, .. } if i == id),
        "{e:?}"
    );
    // The application refuses: status 2.
    let id = w.hosts[0]
        .dev
        .cm_resolve_ud(w.now, peer, PORT, &[])
        .unwrap();
    let CmEvent::UdRequest(req) = next_event(&mut w, 1) else {
        panic!()
    };
    w.hosts[1].dev.cm_reject_ud(req.id).unwrap();
    let e = next_event(&mut w, 0);
    assert!(
        matches!(e, CmEvent::Rejected { id: i, reason: 2, .. } if i == id),
        "{e:?}"
    );

    // The SIDR_REQ on the wire is what udaddy sends: UDP port space.
    let mut buf = [0u8; 512];
    w.hosts[0]
        .dev
        .cm_resolve_ud(w.now, peer, 7174, &[])
        .unwrap();
    let n = w.hosts[0]
        .dev
        .poll_transmit(w.now, &mut buf)
        .datagram()
        .unwrap()
        .size;
    let p = RocePacket::parse_ip(&buf[..n]).unwrap();
    let (_, m) = CmMessage::parse_mad(p.payload).unwrap();
    let CmMessage::SidrReq(r) = m else { panic!() };
    assert_eq!(r.service_id, 0x0111_1c06);
    assert_eq!(CmaHeader::parse(r.private_data).unwrap().dst, peer);
}

/// A listener's backlog bounds the requests waiting for the application
/// (`rdma_listen`'s backlog); the rest are dropped and their senders
/// resend. A request nobody answers is dropped after about 4 s, which
/// frees its slot, and the CM table is empty once every REQ gave up.
#[test]
fn the_backlog_bounds_waiting_requests_and_unanswered_ones_time_out() {
    let mut w = World::new(4096);
    w.hosts[1].dev.cm_listen_backlog(PORT, 4).unwrap();
    let peer = w.hosts[1].addr();
    let ids: Vec<_> = (0..10)
        .map(|_| {
            let q = init_qp(&mut w, 0);
            w.hosts[0]
                .dev
                .cm_connect(0, q, peer, PORT, &ConnParam::default())
                .unwrap()
        })
        .collect();
    // Until the first resend (1.07 s): 4 requests wait, 6 were dropped.
    w.run_until(1_000_000, |w| w.now > 1_000_000_000);
    let reqs = events(&mut w, 1)
        .into_iter()
        .filter(|e| matches!(e, CmEvent::ConnectRequest(_)))
        .count();
    assert_eq!(reqs, 4);
    let c = w.hosts[1].dev.cm_counters();
    assert_eq!(c.dropped_backlog, 6);
    // Nobody answers: each waiting request times out, and resent REQs
    // take the freed slots, until the senders give up.
    w.run_until(10_000_000, |w| {
        ids.iter().all(|id| w.hosts[0].dev.cm_state(*id).is_none())
    });
    let c = w.hosts[1].dev.cm_counters();
    assert!(c.pending_timed_out >= 4, "{c:?}");
    assert!(c.dropped_backlog > 6, "{c:?}");
    for id in &ids {
        assert_eq!(w.hosts[0].dev.cm_state(*id), None);
    }
}

/// A peer's MRAs ("I need longer") extend a connection's wait at most 4
/// times, each by at most 2^22 × 4.096 µs: MRAs asking for 2^31 × 4.096 µs
/// (2.4 hours) each cannot keep a REQ waiting for ever.
#[test]
fn mra_extensions_are_capped() {
    let mut w = World::new(4096);
    let req = std::rc::Rc::new(std::cell::RefCell::new(Vec::new()));
    let r2 = req.clone();
    // The peer never sees anything: it only sends MRAs (below).
    w.filter = Box::new(move |i, d| {
        if i == 0 && r2.borrow().is_empty() {
            *r2.borrow_mut() = d.to_vec();
        }
        Verdict::Drop
    });
    let q0 = init_qp(&mut w, 0);
    let peer = w.hosts[1].addr();
    let id = w.hosts[0]
        .dev
        .cm_connect(0, q0, peer, PORT, &ConnParam::default())
        .unwrap();
    w.step();
    let captured = req.borrow().clone();
    let t0 = w.now;
    let mut mad = [0u8; roce_wire::mad::MAD_LEN];
    let mra = roce_wire::cm::MraRepr {
        local_comm_id: 0x1234,
        remote_comm_id: id.0,
        message_mraed: roce_wire::cm::msg_ref::REQ,
        service_timeout: 31,
        private_data: &[],
    };
    CmMessage::Mra(mra).emit_mad(7, &mut mad).unwrap();
    // (rewrite's payload must outlive the captured packet.)
    let mad: &'static [u8] = Box::leak(Box::new(mad));
    let d = frames::rewrite(&captured, |r| {
        let ip = frames::ipv4_mut(r);
        std::mem::swap(&mut ip.src, &mut ip.dst);
        r.payload = mad;
    });
    for _ in 0..10 {
        w.hosts[0].dev.handle_datagram(w.now, &d, RxMeta::default());
    }
    assert_eq!(w.hosts[0].dev.cm_counters().mras_ignored, 6);
    assert_eq!(next_event(&mut w, 0), CmEvent::Unreachable { id });
    // 2^22 × 4.096 µs (the capped MRA) + 16 resend intervals of 2^18.
    let bound = (4096u64 << 22) + 17 * (4096u64 << 18);
    assert!(w.now - t0 <= bound, "gave up after {} ns", w.now - t0);
}

/// A listener closed and opened again on the same port (perftest does it
/// between its exchange and its test connections): a REQ that comes in
/// between is left for its sender to resend, not refused; once the port
/// has had no listener for 2 s, REQs are refused again.
#[test]
fn a_req_between_two_listeners_on_a_port_is_resent_not_refused() {
    let mut w = World::new(4096);
    let l = w.hosts[1].dev.cm_listen(PORT).unwrap();
    w.hosts[1].dev.cm_stop_listen(l);
    let q0 = init_qp(&mut w, 0);
    let peer = w.hosts[1].addr();
    let id = w.hosts[0]
        .dev
        .cm_connect(0, q0, peer, PORT, &ConnParam::default())
        .unwrap();
    // The REQ arrives and is held (no REJ, no event on either side).
    w.run_until(100_000, |w| w.hosts[1].dev.cm_counters().rx_mads > 0);
    assert_eq!(w.hosts[1].dev.cm_counters().held_for_relisten, 1);
    assert_eq!(w.hosts[1].dev.cm_counters().rejected_reqs, 0);
    assert!(events(&mut w, 0).is_empty());
    // The new listener gets the resent REQ.
    w.hosts[1].dev.cm_listen(PORT).unwrap();
    let CmEvent::ConnectRequest(req) = next_event(&mut w, 1) else {
        panic!("expected the resent REQ")
    };
    assert_eq!(req.remote_qpn, q0);
    assert_eq!(w.hosts[0].dev.cm_state(id), Some(cm::CmState::ReqSent));

    // Without a new listener, the REQ is refused once 2 s have passed
    // since the first REQ found the port closed.
    let l2 = w.hosts[1].dev.cm_listen(PORT + 1).unwrap();
    w.hosts[1].dev.cm_stop_listen(l2);
    let q2 = init_qp(&mut w, 0);
    let id2 = w.hosts[0]
        .dev
        .cm_connect(w.now, q2, peer, PORT + 1, &ConnParam::default())
        .unwrap();
    let e = next_event(&mut w, 0);
    assert_eq!(
        e,
        CmEvent::Rejected {
            id: id2,
            reason: rej_reason::INVALID_SERVICE_ID,
            private_data: vec![]
        },
        "refused once the grace ran out"
    );
    assert!(w.now >= 2_000_000_000, "the refusal came at {} ns", w.now);
}

/// The active side's half of the above, for a peer that refuses at once
/// (Linux's CM: REJ reason 8 the moment a REQ finds no listener): a REQ
/// refused so, to a port this side connected to moments before, is
/// resent until a listener is back (perftest's `-R` client against rxe's
/// server); for up to 2 s, after which the refusal is reported. A port
/// this side has not just connected to is resent for 0.5 s only
/// (`no_listener_is_rejected_with_invalid_service_id`).
#[test]
fn a_refused_req_to_a_port_just_connected_to_is_resent() {
    let mut w = World::new(4096);
    let l = w.hosts[1].dev.cm_listen(PORT).unwrap();
    establish(&mut w, &ConnParam::default(), &ConnParam::default());
    w.hosts[1].dev.cm_stop_listen(l);
    let q2 = init_qp(&mut w, 0);
    let peer = w.hosts[1].addr();
    let id2 = w.hosts[0]
        .dev
        .cm_connect(w.now, q2, peer, PORT, &ConnParam::default())
        .unwrap();
    // Host 1 holds the REQ for its own 2 s, then refuses it and every
    // resend at once (its relisten grace has run out).
    assert!(w.run_until(1_000_000, |w| {
        w.hosts[0].dev.cm_counters().resent_after_refusal >= 3
    }));
    assert!(w.hosts[1].dev.cm_counters().rejected_reqs >= 3);
    assert!(events(&mut w, 0).is_empty(), "the refusal was reported");
    assert_eq!(w.hosts[0].dev.cm_state(id2), Some(cm::CmState::ReqSent));
    // A listener again: the next resend is its request.
    w.hosts[1].dev.cm_listen(PORT).unwrap();
    let CmEvent::ConnectRequest(req) = next_event(&mut w, 1) else {
        panic!("expected the resent REQ")
    };
    assert_eq!(req.remote_qpn, q2);
    let q3 = init_qp(&mut w, 1);
    w.hosts[1]
        .dev
        .cm_accept(w.now, req.id, q3, &ConnParam::default())
        .unwrap();
    assert!(matches!(next_event(&mut w, 0), CmEvent::Established { id, .. } if id == id2));

    // With no listener coming back, the refusal is reported 2 s after the
    // first one, not held until the REQ's retries run out.
    let l2 = w.hosts[1].dev.cm_listen(PORT + 1).unwrap();
    w.hosts[1].dev.cm_stop_listen(l2);
    let q4 = init_qp(&mut w, 0);
    let start = w.now;
    let id4 = w.hosts[0]
        .dev
        .cm_connect(w.now, q4, peer, PORT + 1, &ConnParam::default())
        .unwrap();
    // Not connected to before: refused as soon as host 1's own grace ends.
    let e = next_event(&mut w, 0);
    assert_eq!(
        e,
        CmEvent::Rejected {
            id: id4,
            reason: rej_reason::INVALID_SERVICE_ID,
            private_data: vec![]
        }
    );
    let took = w.now - start;
    assert!(took < 3_000_000_000, "refused after {took} ns");
}

/// A server may tell its peer the port it bound before it listens
/// (qperf 0.4.11 does), so a REQ can find no listener for a moment: the
/// active side resends a REQ refused for want of a listener every 50 ms
/// for 0.5 s, and the listener that comes meanwhile gets it.
#[test]
fn a_req_racing_the_listen_is_resent_until_it_comes() {
    let mut w = World::new(4096);
    let q0 = init_qp(&mut w, 0);
    let peer = w.hosts[1].addr();
    let id = w.hosts[0]
        .dev
        .cm_connect(0, q0, peer, PORT, &ConnParam::default())
        .unwrap();
    assert!(w.run_until(1_000_000, |w| {
        w.hosts[0].dev.cm_counters().resent_after_refusal >= 2
    }));
    assert!(events(&mut w, 0).is_empty(), "not reported yet");
    assert!(w.now < 500_000_000);
    w.hosts[1].dev.cm_listen(PORT).unwrap();
    let CmEvent::ConnectRequest(req) = next_event(&mut w, 1) else {
        panic!("expected the resent REQ")
    };
    assert_eq!(req.remote_qpn, q0);
    let q1 = init_qp(&mut w, 1);
    w.hosts[1]
        .dev
        .cm_accept(w.now, req.id, q1, &ConnParam::default())
        .unwrap();
    assert!(matches!(next_event(&mut w, 0), CmEvent::Established { id: e, .. } if e == id));
}

/// A QP the program manages (rdma_cm ids without a QP, as `cmtime` and
/// `rping -q` use them): the CM tells each side the attributes and never
/// modifies the QPs itself; the active side gets CONNECT_RESPONSE and
/// sends the RTU on `cm_establish`, the passive side ESTABLISHED on it.
#[test]
fn program_managed_qps_are_told_their_attributes() {
    let mut w = World::new(4096);
    w.hosts[1].dev.cm_listen(PORT).unwrap();
    let (q0, q1) = (init_qp(&mut w, 0), init_qp(&mut w, 1));
    let peer = w.hosts[1].addr();
    let id0 = w.hosts[0]
        .dev
        .cm_connect_manual(0, q0, false, peer, PORT, &ConnParam::default())
        .unwrap();
    let CmEvent::ConnectRequest(req) = next_event(&mut w, 1) else {
        panic!("expected the REQ")
    };
    // The passive side brings its QP up itself, then accepts.
    let bring_up = |w: &mut World, i: usize, id: cm::CmId, q: Qpn| {
        for st in [QpState::Rtr, QpState::Rts] {
            let (a, m) = w.hosts[i].dev.cm_qp_attr(id, st).unwrap();
            w.hosts[i].dev.modify_qp(q, &a, m).unwrap();
        }
    };
    bring_up(&mut w, 1, req.id, q1);
    w.hosts[1]
        .dev
        .cm_accept_manual(w.now, req.id, q1, false, &ConnParam::default())
        .unwrap();
    let e = next_event(&mut w, 0);
    assert!(
        matches!(e, CmEvent::ConnectResponse { id, .. } if id == id0),
        "{e:?}"
    );
    // The CM left the active QP alone: still INIT.
    assert_eq!(w.hosts[0].dev.qp(q0).unwrap().state(), QpState::Init);
    bring_up(&mut w, 0, id0, q0);
    w.hosts[0].dev.cm_establish(id0).unwrap();
    assert!(matches!(next_event(&mut w, 1), CmEvent::Established { .. }));
    assert_eq!(w.hosts[0].dev.cm_state(id0), Some(CmState::Established));
    // Each side's QP names the other's, and each sends from the PSN the
    // other expects.
    let (a0, a1) = (
        *w.hosts[0].dev.qp(q0).unwrap().attr(),
        *w.hosts[1].dev.qp(q1).unwrap().attr(),
    );
    assert_eq!((a0.dest_qp_num, a1.dest_qp_num), (q1, q0));
    assert_eq!(a0.sq_psn, a1.rq_psn);
    assert_eq!(a1.sq_psn, a0.rq_psn);
    assert_eq!(w.hosts[1].dev.qp(q1).unwrap().state(), QpState::Rts);
}

/// Host 0's QP1 datagrams leave with this BTH P_Key (ICRC recomputed).
fn qp1_pkey(pkey: u16) -> common::Filter {
    Box::new(move |i, d| {
        let p = RocePacket::parse_ip(d).unwrap();
        if i != 0 || p.bth.dest_qp != roce_wire::mad::GSI_QPN {
            return Verdict::Deliver;
        }
        Verdict::Replace(frames::rewrite(d, |r| r.bth.pkey = roce_wire::Pkey(pkey)))
    })
}

/// CM MADs on QP1 are taken only in a partition of the port's P_Key
/// table (the default, 0xFFFF): a REQ in another partition (0x1234, or
/// 0x8001 with the full-member bit) is dropped and counted, and no
/// request reaches the application; a limited member of the default
/// partition (0x7FFF) matches the table's full member and connects.
#[test]
fn cm_mads_outside_the_ports_partitions_are_dropped() {
    for pkey in [0x1234, 0x8001, 0x0000] {
        let mut w = World::new(4096);
        w.hosts[1].dev.cm_listen(PORT).unwrap();
        w.filter = qp1_pkey(pkey);
        let q0 = init_qp(&mut w, 0);
        let peer = w.hosts[1].addr();
        w.hosts[0]
            .dev
            .cm_connect(0, q0, peer, PORT, &ConnParam::default())
            .unwrap();
        // Past the first resend of the REQ.
        w.run_until(1_000_000, |w| w.now > 2_500_000_000);
        let c = w.hosts[1].dev.cm_counters();
        assert!(c.dropped_pkey >= 2, "P_Key {pkey:#x}: {c:?}");
        assert_eq!(c.rx_mads, 0, "P_Key {pkey:#x}: {c:?}");
        assert!(events(&mut w, 1).is_empty(), "P_Key {pkey:#x}");
    }
    let mut w = World::new(4096);
    w.hosts[1].dev.cm_listen(PORT).unwrap();
    w.filter = qp1_pkey(0x7fff);
    let (q0, q1, _, _) = establish(&mut w, &ConnParam::default(), &ConnParam::default());
    assert_eq!(w.hosts[0].dev.qp(q0).unwrap().state(), QpState::Rts);
    assert_eq!(w.hosts[1].dev.qp(q1).unwrap().state(), QpState::Rts);
    assert_eq!(w.hosts[1].dev.cm_counters().dropped_pkey, 0);
}

/// A port bound ahead of its listen (`cm_expect_listen`): a REQ that
/// comes first is left unanswered, not refused, kept, and handled as soon
/// as the listener is there (not at the peer's resend, a second later); a
/// port bound but never listened on refuses once the grace has run out.
#[test]
fn a_req_before_an_expected_listen_is_held_not_refused() {
    let mut w = World::new(4096);
    w.hosts[1].dev.cm_expect_listen(PORT);
    let q0 = init_qp(&mut w, 0);
    let peer = w.hosts[1].addr();
    let id = w.hosts[0]
        .dev
        .cm_connect(0, q0, peer, PORT, &ConnParam::default())
        .unwrap();
    // Until the REQ has come (and gone unanswered) and half a second more.
    assert!(w.run_until(1_000_000, |w| w.now >= 500_000_000));
    assert_eq!(w.hosts[1].dev.cm_counters().rejected_reqs, 0);
    assert!(w.hosts[1].dev.cm_counters().held_for_relisten >= 1);
    assert!(events(&mut w, 0).is_empty(), "neither refused nor answered");
    let listened = w.now;
    w.hosts[1].dev.cm_listen(PORT).unwrap();
    let CmEvent::ConnectRequest(req) = next_event(&mut w, 1) else {
        panic!("expected the held REQ")
    };
    assert_eq!(w.hosts[1].dev.cm_counters().replayed_reqs, 1);
    assert!(
        w.now - listened < 1_000_000,
        "at once: {} ns",
        w.now - listened
    );
    assert_eq!(req.remote_qpn, q0);
    let q1 = init_qp(&mut w, 1);
    w.hosts[1]
        .dev
        .cm_accept(w.now, req.id, q1, &ConnParam::default())
        .unwrap();
    assert!(matches!(next_event(&mut w, 0), CmEvent::Established { id: e, .. } if e == id));
    // The peer's own resend of that REQ, later, is a known one (answered
    // with the REP again, not a second request).
    assert!(w.run_until(1_000_000, |w| w.now >= listened + 3_000_000_000));
    let extra = events(&mut w, 1);
    assert!(
        !extra
            .iter()
            .any(|e| matches!(e, CmEvent::ConnectRequest(_))),
        "one request only: {extra:?}"
    );

    // Bound, never listened on: refused after the 2 s grace.
    w.hosts[1].dev.cm_expect_listen(PORT + 1);
    let q2 = init_qp(&mut w, 0);
    let start = w.now;
    let id2 = w.hosts[0]
        .dev
        .cm_connect(w.now, q2, peer, PORT + 1, &ConnParam::default())
        .unwrap();
    let e = next_event(&mut w, 0);
    assert_eq!(
        e,
        CmEvent::Rejected {
            id: id2,
            reason: rej_reason::INVALID_SERVICE_ID,
            private_data: vec![]
        }
    );
    assert!(
        w.now - start >= 2_000_000_000,
        "refused after {} ns",
        w.now - start
    );
    // An expected listen on a port already listened on changes nothing.
    w.hosts[1].dev.cm_expect_listen(PORT);
    assert_eq!(w.hosts[1].dev.cm_listen(PORT), Err(VerbsError::Busy));
}
