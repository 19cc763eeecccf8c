//! One device address shared by several processes (docs/host.md): a
//! shared device hands back what names no object of its own
//! (`RxOutcome::Foreign`), answers a forwarded datagram as an unshared
//! device does, queues the claims and releases of its local communication
//! IDs, and creates QPs only with QPNs the host table accepts. Each
//! "process" here is a device of its own with the address of another.

mod common;

use std::net::{IpAddr, Ipv4Addr};

use common::Host;
use roce_core::cm::{CmEvent, CmId, ConnParam};
use roce_core::*;
use roce_testkit::frames;
use roce_wire::cm::{attr, rej_reason, CmMessage};
use roce_wire::{BthRepr, ExtHeaders, Opcode, RocePacket};

const PORT: u16 = 7174;
const SERVER: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
const CLIENT: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);

/// A device at `addr`, shared or not, with its own seed (two processes
/// draw different identifiers).
fn host(addr: Ipv4Addr, shared: bool, seed: u8) -> Host {
    Host::with_config(&addr.to_string(), 4096, 0x1000_0000, |c| {
        c.shared = shared;
        c.seed = Some([seed; 32]);
    })
}

/// A fresh RC QP in INIT.
fn init_qp(h: &mut Host) -> Qpn {
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
        qp_access_flags: Access::LOCAL_WRITE,
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

/// Every datagram the device has to send (each one's `Transmit` names
/// the BTH's destination QP).
fn sent(h: &mut Host) -> Vec<Vec<u8>> {
    let mut buf = vec![0u8; 4400];
    let mut out = Vec::new();
    while let Some(t) = h.dev.poll_transmit(0, &mut buf).datagram() {
        let d = buf[..t.size].to_vec();
        let p = RocePacket::parse_ip(&d).unwrap();
        assert_eq!(t.dest_qpn, p.bth.dest_qp.value());
        out.push(d);
    }
    out
}

/// The one datagram the device has to send.
fn one_sent(h: &mut Host) -> Vec<u8> {
    let mut out = sent(h);
    assert_eq!(out.len(), 1, "expected one datagram");
    out.remove(0)
}

fn rx(h: &mut Host, d: &[u8], forwarded: bool) -> RxOutcome {
    h.dev
        .handle_datagram(0, d, RxMeta::default().with_forwarded(forwarded))
}

/// The CM attribute ID of a QP1 datagram.
fn attr_of(d: &[u8]) -> u16 {
    let p = RocePacket::parse_ip(d).unwrap();
    CmMessage::parse_mad(p.payload).unwrap().0.attr_id
}

/// The service ID of a REQ or SIDR_REQ datagram.
fn service_of(d: &[u8]) -> u64 {
    let p = RocePacket::parse_ip(d).unwrap();
    match CmMessage::parse_mad(p.payload).unwrap().1 {
        CmMessage::Req(r) => r.service_id,
        CmMessage::SidrReq(r) => r.service_id,
        m => panic!("not a request: {m:?}"),
    }
}

fn owner_changes(h: &mut Host) -> Vec<OwnerChange> {
    std::iter::from_fn(|| h.dev.poll_owner_change()).collect()
}

fn claim(id: CmId) -> OwnerChange {
    OwnerChange::Claim(Owner::CommId(id.0))
}

fn release(id: CmId) -> OwnerChange {
    OwnerChange::Release(Owner::CommId(id.0))
}

/// Counters of the receive side: (datagrams, foreign, unknown QP).
fn rx_counts(h: &Host) -> (u64, u64, u64) {
    let c = h.dev.counters();
    (c.rx_datagrams, c.rx_foreign, c.rx_unknown_qp)
}

#[test]
fn a_packet_for_an_unknown_qpn_is_foreign_until_forwarded() {
    let bth = BthRepr::new(Opcode::RC_SEND_ONLY, Qpn::new(0x12_3456), Psn::new(1));
    let d = frames::datagram_v4(CLIENT, SERVER, 0xc000, bth, ExtHeaders::default(), b"hi");
    let mut a = host(SERVER, true, 1);
    assert_eq!(
        rx(&mut a, &d, false),
        RxOutcome::Foreign(Owner::Qp(0x12_3456))
    );
    assert_eq!(rx_counts(&a), (1, 1, 0));
    // Forwarded, and still not ours: dropped and counted, as unshared.
    assert_eq!(rx(&mut a, &d, true), RxOutcome::Done);
    assert_eq!(rx_counts(&a), (2, 1, 1));
    assert!(sent(&mut a).is_empty());

    // QP0 is nobody's: dropped, not handed on.
    let bth0 = BthRepr::new(Opcode::RC_SEND_ONLY, Qpn::new(0), Psn::new(1));
    let d0 = frames::datagram_v4(CLIENT, SERVER, 0xc000, bth0, ExtHeaders::default(), b"hi");
    assert_eq!(rx(&mut a, &d0, false), RxOutcome::Done);
    assert_eq!(rx_counts(&a), (3, 1, 2));

    // A QP of this device takes its packets (here: drops them, RESET).
    let q = a.dev.create_qp(QpInitAttr {
        qp_type: QpType::Rc,
        pd: a.pd,
        send_cq: a.cq,
        recv_cq: a.cq,
        srq: None,
        cap: QpCaps::default(),
        sq_sig_all: false,
    });
    let q = q.unwrap();
    let mine = frames::rewrite(&d, |r| r.bth.dest_qp = q);
    assert_eq!(rx(&mut a, &mine, false), RxOutcome::Done);
    assert_eq!(rx_counts(&a), (4, 1, 2));

    // An unshared device never hands anything back.
    let mut u = host(SERVER, false, 1);
    for forwarded in [false, true] {
        assert_eq!(rx(&mut u, &d, forwarded), RxOutcome::Done);
    }
    assert_eq!(rx_counts(&u), (2, 0, 2));
}

#[test]
fn a_request_without_a_listener_here_is_foreign_until_forwarded() {
    let server = IpAddr::V4(SERVER);
    let mut c = host(CLIENT, false, 2);
    let q = init_qp(&mut c);
    let id = c
        .dev
        .cm_connect(0, q, server, PORT, &ConnParam::default())
        .unwrap();
    let req = one_sent(&mut c);
    let sid = service_of(&req);

    let mut b = host(SERVER, true, 3);
    assert_eq!(
        rx(&mut b, &req, false),
        RxOutcome::Foreign(Owner::Service(sid))
    );
    // No REJ, and nothing counted but the hand-back.
    assert!(sent(&mut b).is_empty());
    assert_eq!(b.dev.cm_counters(), CmCounters::default());
    assert_eq!(rx_counts(&b), (1, 1, 0));

    // Forwarded (no process listens): the REJ an unshared device sends,
    // byte for byte, and its counters.
    assert_eq!(rx(&mut b, &req, true), RxOutcome::Done);
    let rej = one_sent(&mut b);
    let mut u = host(SERVER, false, 3);
    assert_eq!(rx(&mut u, &req, false), RxOutcome::Done);
    assert_eq!(sent(&mut u), vec![rej.clone()]);
    assert_eq!(b.dev.cm_counters(), u.dev.cm_counters());
    assert_eq!(b.dev.cm_counters().rejected_reqs, 1);
    assert!(owner_changes(&mut b).is_empty());
    // The client resends a REQ refused for want of a listener for 0.5 s
    // (a listener may be on its way), then reports the refusal.
    assert_eq!(rx(&mut c, &rej, false), RxOutcome::Done);
    assert_eq!(c.dev.poll_cm_event(), None);
    assert_eq!(c.dev.cm_counters().resent_after_refusal, 1);
    let late = 600_000_000;
    assert_eq!(
        c.dev.handle_datagram(late, &rej, RxMeta::default()),
        RxOutcome::Done
    );
    assert_eq!(
        c.dev.poll_cm_event(),
        Some(CmEvent::Rejected {
            id,
            reason: rej_reason::INVALID_SERVICE_ID,
            private_data: vec![]
        })
    );

    // A SIDR_REQ likewise; forwarded, its SIDR_REP says "not supported".
    c.dev.cm_resolve_ud(0, server, PORT, &[]).unwrap();
    let sidr = one_sent(&mut c);
    let sid = service_of(&sidr);
    assert_eq!(
        rx(&mut b, &sidr, false),
        RxOutcome::Foreign(Owner::Service(sid))
    );
    assert!(sent(&mut b).is_empty());
    assert_eq!(rx(&mut b, &sidr, true), RxOutcome::Done);
    assert_eq!(attr_of(&one_sent(&mut b)), attr::SIDR_REP);
    assert_eq!(b.dev.cm_counters().rejected_reqs, 2);

    // With the listener here, the request is this device's.
    b.dev.cm_listen(PORT).unwrap();
    let q = init_qp(&mut c);
    c.dev
        .cm_connect(0, q, server, PORT, &ConnParam::default())
        .unwrap();
    let req = one_sent(&mut c);
    assert_eq!(rx(&mut b, &req, false), RxOutcome::Done);
    assert!(matches!(
        b.dev.poll_cm_event(),
        Some(CmEvent::ConnectRequest(_))
    ));
    // And its resend too, even once the listener went.
    let ls = b
        .dev
        .cm_stop_listen(roce_core::cm::ListenId(service_of(&req)));
    assert_eq!(ls.len(), 1);
    assert_eq!(rx(&mut b, &req, false), RxOutcome::Done);
    assert_eq!(b.dev.counters().rx_foreign, 2);
}

/// Two processes share the server's address and two the client's: every
/// MAD of a connection that reaches the process not holding it is handed
/// back with the ID that names the one that does, and each side's local
/// ID is claimed while the connection lives.
#[test]
fn mads_for_another_processes_connection_are_foreign() {
    let server = IpAddr::V4(SERVER);
    let (mut a, mut b) = (host(SERVER, true, 3), host(SERVER, true, 4));
    let (mut c1, mut c2) = (host(CLIENT, true, 5), host(CLIENT, true, 6));
    a.dev.cm_listen(PORT).unwrap();
    let q0 = init_qp(&mut c1);
    let id0 = c1
        .dev
        .cm_connect(0, q0, server, PORT, &ConnParam::default())
        .unwrap();
    assert_eq!(owner_changes(&mut c1), [claim(id0)]);
    let req = one_sent(&mut c1);
    // The kernel hands the REQ to b, whose forwarder hands it to a.
    let sid = service_of(&req);
    assert_eq!(
        rx(&mut b, &req, false),
        RxOutcome::Foreign(Owner::Service(sid))
    );
    assert_eq!(rx(&mut a, &req, true), RxOutcome::Done);
    let Some(CmEvent::ConnectRequest(r)) = a.dev.poll_cm_event() else {
        panic!("no request")
    };
    let id1 = r.id;
    assert_eq!(owner_changes(&mut a), [claim(id1)]);
    let q1 = init_qp(&mut a);
    a.dev.cm_accept(0, id1, q1, &ConnParam::default()).unwrap();
    assert!(owner_changes(&mut a).is_empty());

    // REP: to c2, which hands it to c1.
    let rep = one_sent(&mut a);
    assert_eq!(
        rx(&mut c2, &rep, false),
        RxOutcome::Foreign(Owner::CommId(id0.0))
    );
    assert!(sent(&mut c2).is_empty());
    assert_eq!(rx(&mut c1, &rep, true), RxOutcome::Done);
    assert!(matches!(
        c1.dev.poll_cm_event(),
        Some(CmEvent::Established { id, .. }) if id == id0
    ));

    // RTU: to b first, then straight to a (the kernel's choice was right).
    let rtu = one_sent(&mut c1);
    assert_eq!(attr_of(&rtu), attr::RTU);
    assert_eq!(
        rx(&mut b, &rtu, false),
        RxOutcome::Foreign(Owner::CommId(id1.0))
    );
    assert_eq!(rx(&mut a, &rtu, false), RxOutcome::Done);
    assert!(matches!(
        a.dev.poll_cm_event(),
        Some(CmEvent::Established { id, .. }) if id == id1
    ));
    // A MAD for a's connection that fails its checks (another source) is
    // a's to drop, not another process's.
    let forged = frames::rewrite(&rtu, |f| frames::ipv4_mut(f).src = [10, 0, 0, 9].into());
    let dropped = a.dev.cm_counters().dropped;
    assert_eq!(rx(&mut a, &forged, false), RxOutcome::Done);
    assert_eq!(a.dev.cm_counters().dropped, dropped + 1);

    // DREQ: to b, which sends no DREP, then to a.
    c1.dev.cm_disconnect(0, id0).unwrap();
    let dreq = one_sent(&mut c1);
    assert_eq!(
        rx(&mut b, &dreq, false),
        RxOutcome::Foreign(Owner::CommId(id1.0))
    );
    assert!(sent(&mut b).is_empty());
    assert_eq!(rx(&mut a, &dreq, true), RxOutcome::Done);
    assert_eq!(
        a.dev.poll_cm_event(),
        Some(CmEvent::Disconnected { id: id1 })
    );
    assert_eq!(owner_changes(&mut a), [release(id1)]);

    // DREP: to c2, then c1.
    let drep = one_sent(&mut a);
    assert_eq!(
        rx(&mut c2, &drep, false),
        RxOutcome::Foreign(Owner::CommId(id0.0))
    );
    assert_eq!(rx(&mut c1, &drep, true), RxOutcome::Done);
    assert_eq!(
        c1.dev.poll_cm_event(),
        Some(CmEvent::Disconnected { id: id0 })
    );
    assert_eq!(owner_changes(&mut c1), [release(id0)]);

    // The processes holding nothing queued nothing and counted nothing
    // but the hand-backs.
    for (h, n) in [(&mut b, 3), (&mut c2, 2)] {
        assert!(owner_changes(h).is_empty());
        assert_eq!(h.dev.counters().rx_foreign, n);
        assert_eq!(h.dev.cm_counters(), CmCounters::default());
    }
    // A resent DREQ that no process owns any more comes back forwarded:
    // answered with a DREP, as an unshared device does (not handed on).
    assert_eq!(rx(&mut b, &dreq, true), RxOutcome::Done);
    assert_eq!(attr_of(&one_sent(&mut b)), attr::DREP);
}

/// Drives `h`'s timers until it has a CM event.
fn until_event(h: &mut Host) -> CmEvent {
    for _ in 0..100 {
        if let Some(e) = h.dev.poll_cm_event() {
            return e;
        }
        let t = h.dev.poll_timeout().expect("a timer");
        h.dev.handle_timeout(t);
        sent(h);
    }
    panic!("no CM event")
}

/// A connection's ID is released however it ends: the active side's REQ
/// unanswered, the passive side's request not answered by the program,
/// a SIDR exchange done. A received SIDR_REQ's ID is never claimed.
#[test]
fn ids_are_released_when_connections_time_out_or_end() {
    let server = IpAddr::V4(SERVER);
    let mut c = host(CLIENT, true, 5);
    let q = init_qp(&mut c);
    let id = c
        .dev
        .cm_connect(0, q, server, PORT, &ConnParam::default())
        .unwrap();
    let req = one_sent(&mut c);
    assert_eq!(until_event(&mut c), CmEvent::Unreachable { id });
    assert_eq!(owner_changes(&mut c), [claim(id), release(id)]);

    let mut a = host(SERVER, true, 3);
    a.dev.cm_listen(PORT).unwrap();
    assert_eq!(rx(&mut a, &req, false), RxOutcome::Done);
    let Some(CmEvent::ConnectRequest(r)) = a.dev.poll_cm_event() else {
        panic!("no request")
    };
    assert_eq!(owner_changes(&mut a), [claim(r.id)]);
    // Nobody accepts it: it times out.
    let t = a.dev.poll_timeout().unwrap();
    a.dev.handle_timeout(t);
    assert_eq!(a.dev.cm_state(r.id), None);
    assert_eq!(a.dev.cm_counters().pending_timed_out, 1);
    assert_eq!(owner_changes(&mut a), [release(r.id)]);

    // SIDR: the resolving side's ID only.
    a.dev.cm_listen_ud(PORT).unwrap();
    let sid = c.dev.cm_resolve_ud(0, server, PORT, &[]).unwrap();
    assert_eq!(owner_changes(&mut c), [claim(sid)]);
    assert_eq!(rx(&mut a, &one_sent(&mut c), false), RxOutcome::Done);
    let Some(CmEvent::UdRequest(u)) = a.dev.poll_cm_event() else {
        panic!("no UD request")
    };
    a.dev.cm_accept_ud(u.id, Qpn::new(0x42), 0x1111).unwrap();
    assert!(owner_changes(&mut a).is_empty());
    assert_eq!(rx(&mut c, &one_sent(&mut a), false), RxOutcome::Done);
    assert!(matches!(
        c.dev.poll_cm_event(),
        Some(CmEvent::UdResolved { id, .. }) if id == sid
    ));
    assert_eq!(owner_changes(&mut c), [release(sid)]);
}

/// Runs `w` until host `i` has a CM event; returns it.
fn next_event(w: &mut common::World, i: usize) -> CmEvent {
    let mut got = None;
    w.run_until(100_000, |w| {
        got = w.hosts[i].dev.poll_cm_event();
        got.is_some()
    });
    got.unwrap_or_else(|| panic!("host {i}: no CM event"))
}

/// An unshared device queues no owner change and hands nothing back.
#[test]
fn an_unshared_device_claims_nothing() {
    let mut w = common::World::new(4096);
    w.hosts[1].dev.cm_listen(PORT).unwrap();
    let q0 = init_qp(&mut w.hosts[0]);
    let peer = w.hosts[1].addr();
    w.hosts[0]
        .dev
        .cm_connect(0, q0, peer, PORT, &ConnParam::default())
        .unwrap();
    let CmEvent::ConnectRequest(r) = next_event(&mut w, 1) else {
        panic!("no request")
    };
    let q1 = init_qp(&mut w.hosts[1]);
    w.hosts[1]
        .dev
        .cm_accept(w.now, r.id, q1, &ConnParam::default())
        .unwrap();
    for i in 0..2 {
        assert!(matches!(next_event(&mut w, i), CmEvent::Established { .. }));
    }
    for h in w.hosts.iter_mut() {
        assert_eq!(h.dev.poll_owner_change(), None);
        assert_eq!(h.dev.counters().rx_foreign, 0);
    }
}

#[test]
fn create_qp_with_draws_until_a_qpn_is_accepted() {
    let mut a = host(SERVER, true, 1);
    let init = QpInitAttr {
        qp_type: QpType::Rc,
        pd: a.pd,
        send_cq: a.cq,
        recv_cq: a.cq,
        srq: None,
        cap: QpCaps::default(),
        sq_sig_all: false,
    };
    let mut offered = Vec::new();
    let q = a
        .dev
        .create_qp_with(init, |q| {
            offered.push(q);
            offered.len() > 5
        })
        .unwrap();
    assert_eq!(offered.len(), 6);
    assert_eq!(q, offered[5]);
    for r in &offered[..5] {
        assert!(a.dev.qp(*r).is_none());
    }
    // Drawn at random: six different QPNs, none special.
    let mut v: Vec<u32> = offered.iter().map(|q| q.value()).collect();
    v.sort_unstable();
    v.dedup();
    assert_eq!(v.len(), 6);
    assert!(v.iter().all(|&q| (16..0xff_ffff).contains(&q)));

    // Refusing every one: Busy after 64, and no QP.
    let mut offered = Vec::new();
    let e = a.dev.create_qp_with(init, |q| {
        offered.push(q);
        false
    });
    assert_eq!(e, Err(VerbsError::Busy));
    assert_eq!(offered.len(), 64);
    assert!(offered.iter().all(|q| a.dev.qp(*q).is_none()));
    // A failed check is reported before any QPN is offered.
    let bad = QpInitAttr {
        send_cq: CqId(999),
        ..init
    };
    let e = a.dev.create_qp_with(bad, |_| panic!("offered"));
    assert_eq!(e, Err(VerbsError::NotFound));
    assert!(a.dev.create_qp(init).is_ok());
}
