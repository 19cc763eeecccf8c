//! The CM table's own rules: which local IDs it draws, and the fair share
//! of a listener each source address holds.

use super::*;

fn table() -> CmTable {
    CmTable::new(&mut Ids::new([5; 32]))
}

fn conn() -> Conn {
    Conn {
        state: CmState::Established,
        remote_id: 0x1234,
        tid: 1,
        peer: IpAddr::from([10, 0, 0, 2]),
        local: IpAddr::from([10, 0, 0, 1]),
        qpn: None,
        remote_qpn: Qpn::new(0x99),
        psn: Psn::new(0),
        param: ConnParam::default(),
        req: None,
        last: None,
        deadline: None,
        interval: 0,
        retries_left: 0,
        service_id: 0,
        refused_since: None,
        listen: None,
        mras: 0,
        pending: false,
        share: false,
        manual: false,
        qp_attr: None,
    }
}

/// Ends a connection with local ID `id`.
fn end(t: &mut CmTable, id: u32) {
    t.insert(id, conn());
    assert!(t.remove(id).is_some());
}

/// A local ID whose connection ended is not drawn again while it is
/// among the last RETIRED_CM_IDS retired; after that it may be.
#[test]
fn an_ended_connections_id_is_not_reused_soon() {
    // Tables from one seed draw the same IDs: `probe` shows what the
    // others will draw.
    let mut probe = table();
    let (first, second) = (probe.new_id(), probe.new_id());

    let mut t = table();
    end(&mut t, first);
    assert_eq!(t.new_id(), second, "the ended connection's ID came back");

    let mut t = table();
    end(&mut t, first);
    for id in (1..=RETIRED_CM_IDS as u32).filter(|&i| i != first) {
        end(&mut t, id);
    }
    // `first` has left the bounded quarantine (one in, one out).
    assert!(t.retired.contains(&1) && !t.retired.contains(&first));
    assert_eq!(t.new_id(), first);

    // A live ID is never drawn either.
    let mut t = table();
    t.insert(first, conn());
    assert_eq!(t.new_id(), second);
}

/// On a shared device, every connection the peer may name queues a claim
/// of its ID and its end a release; a full queue makes room by dropping a
/// claim and release that cancel out, and counts what it cannot queue.
#[test]
fn connections_claim_and_release_their_ids() {
    use crate::device::share::{OwnerQueue, MAX_OWNER_CHANGES};
    let mut t = table();
    t.owners = OwnerQueue::new(true);
    let sidr = Conn {
        state: CmState::SidrRcvd,
        ..conn()
    };
    t.insert(1, sidr);
    assert!(t.remove(1).is_some());
    assert_eq!(t.owners.pop(), None, "a received SIDR_REQ's ID is claimed");
    for id in 1..=MAX_OWNER_CHANGES as u32 {
        t.insert(id, conn());
    }
    // Full: a release cancels its queued claim; a new claim is lost.
    assert!(t.remove(7).is_some());
    t.insert(0x7000_0000, conn());
    t.insert(0x7000_0001, conn());
    assert_eq!(t.counters.owner_changes_dropped, 1);
    assert_eq!(t.owners.pop(), Some(OwnerChange::Claim(Owner::CommId(1))));
    // An unshared table queues nothing.
    let mut t = table();
    end(&mut t, 5);
    assert_eq!(t.owners.pop(), None);
}

mod fair_share {
    //! One source address cannot lock a listener out (issue 32, item 6):
    //! a flood of forged REQs from one address, never followed by an RTU,
    //! takes at most that address's share of the listener, and a request
    //! from another address is taken at once (its event is queued, and
    //! the accept's REP leaves).

    use roce_wire::cm::{attr, CmMessage};
    use roce_wire::{RocePacket, RxMeta};

    use super::*;
    use crate::{Access, DeviceConfig, QpCaps, QpInitAttr};

    const PORT: u16 = 7174;
    const SERVER: [u8; 4] = [10, 0, 0, 1];
    const CLIENT: [u8; 4] = [10, 0, 0, 2];
    const ATTACKER: [u8; 4] = [10, 0, 0, 9];

    fn device(addr: [u8; 4]) -> Device {
        Device::new(DeviceConfig::new(IpAddr::from(addr)))
    }

    /// A fresh RC QP in INIT.
    fn init_qp(dev: &mut Device) -> Qpn {
        let pd = dev.alloc_pd();
        let cq = dev.create_cq(16);
        let init = QpInitAttr {
            qp_type: QpType::Rc,
            pd,
            send_cq: cq,
            recv_cq: cq,
            srq: None,
            cap: QpCaps::default(),
            sq_sig_all: false,
        };
        let q = dev.create_qp(init).unwrap();
        let a = QpAttr {
            qp_state: QpState::Init,
            qp_access_flags: Access::LOCAL_WRITE,
            ..QpAttr::default()
        };
        dev.modify_qp(
            q,
            &a,
            QpAttrMask::required(QpType::Rc, QpState::Reset, QpState::Init),
        )
        .unwrap();
        q
    }

    /// Every datagram `dev` has to send.
    fn sent(dev: &mut Device, now: Nanos) -> Vec<Vec<u8>> {
        let mut buf = vec![0u8; 4400];
        std::iter::from_fn(|| {
            dev.poll_transmit(now, &mut buf)
                .datagram()
                .map(|t| buf[..t.size].to_vec())
        })
        .collect()
    }

    /// The CM message of a QP1 datagram: (attribute ID, destination).
    fn mad_of(d: &[u8]) -> (u16, IpAddr) {
        let p = RocePacket::parse_ip(d).unwrap();
        let (h, _) = CmMessage::parse_mad(p.payload).unwrap();
        (h.attr_id, p.ip.dst())
    }

    /// The REQ `dev` sends to the server's listener.
    fn req_from(dev: &mut Device) -> Vec<u8> {
        let q = init_qp(dev);
        let peer = IpAddr::from(SERVER);
        dev.cm_connect(0, q, peer, PORT, &ConnParam::default())
            .unwrap();
        let mut out = sent(dev, 0);
        assert_eq!(out.len(), 1);
        out.remove(0)
    }

    /// `req` with its local communication ID (the MAD's first data word)
    /// set to `id`: a new request each time, as a flood sends. (Delivered
    /// as a UDP socket does, with the ICRC not checked.)
    fn with_id(req: &[u8], id: u32) -> Vec<u8> {
        let off = {
            let p = RocePacket::parse_ip(req).unwrap();
            p.payload.as_ptr() as usize - req.as_ptr() as usize
        };
        let mut d = req.to_vec();
        d[off + 24..off + 28].copy_from_slice(&id.to_be_bytes());
        d
    }

    /// Runs a flood of `n` forged REQs from one address at a listener with
    /// the default backlog, delivering the real client's REQ halfway; the
    /// application accepts what it is given when `accept_all` (each
    /// forged request then stays half-open: REP sent, no RTU), and takes
    /// nothing otherwise. Returns the server when the real request's
    /// event came and its accept's REP left, with the event's position.
    fn flood(n: u32, accept_all: bool) -> Device {
        let mut server = device(SERVER);
        let listen = server.cm_listen(PORT).unwrap();
        let forged = req_from(&mut device(ATTACKER));
        let real = req_from(&mut device(CLIENT));
        let mut now = 0;
        let mut got_real = false;
        for k in 0..n {
            // 20 000 REQs a second.
            now += 50_000;
            server.handle_datagram(now, &with_id(&forged, 0x7000_0000 + k), RxMeta::inexact());
            if k == n / 2 {
                server.handle_datagram(now, &real, RxMeta::inexact());
            }
            server.handle_timeout(now);
            while let Some(e) = server.poll_cm_event() {
                let CmEvent::ConnectRequest(r) = e else {
                    continue;
                };
                assert_eq!(r.listen, listen);
                if r.peer == IpAddr::from(CLIENT) {
                    assert_eq!(k, n / 2, "the real request waited");
                    let q = init_qp(&mut server);
                    server
                        .cm_accept(now, r.id, q, &ConnParam::default())
                        .unwrap();
                    got_real = true;
                } else if accept_all {
                    let q = init_qp(&mut server);
                    server
                        .cm_accept(now, r.id, q, &ConnParam::default())
                        .unwrap();
                }
            }
            for d in sent(&mut server, now) {
                if d.len() > 28 && mad_of(&d) == (attr::REP, IpAddr::from(CLIENT)) {
                    assert!(got_real);
                    return server;
                }
            }
        }
        panic!(
            "the real client got no REP during the flood: {:?}",
            server.cm.counters
        );
    }

    #[test]
    fn a_flood_from_one_source_leaves_room_for_another() {
        for accept_all in [false, true] {
            let server = flood(60_000, accept_all);
            let c = server.cm.counters;
            // The flood holds its share (128 / 16) and nothing more.
            let share = source_share(DEFAULT_BACKLOG);
            assert_eq!(share, 8);
            let held = server
                .cm
                .conns
                .values()
                .filter(|c| c.peer == IpAddr::from(ATTACKER))
                .count();
            assert_eq!(held, share, "{c:?}");
            assert_eq!(c.dropped_backlog, 0, "{c:?}");
            // Every forged REQ up to the real one's but the share was dropped.
            assert_eq!(c.dropped_source_share, 30_001 - share as u64, "{c:?}");
        }
    }

    /// The share counts requests until they are connected: an RTU frees
    /// the slot, and so does a request's end (rejected, timed out).
    #[test]
    fn a_share_is_freed_by_the_rtu_and_by_the_end() {
        assert_eq!(
            [1, 4, 8, 16, 128, 1024].map(source_share),
            [1, 4, 8, 8, 8, 64]
        );
        let mut server = device(SERVER);
        server.cm_listen_backlog(PORT, 1).unwrap();
        let mut client = device(CLIENT);
        let real = req_from(&mut client);
        server.handle_datagram(0, &real, RxMeta::inexact());
        // The backlog is full: the client's next request waits.
        let second = with_id(&real, 0x1234_5678);
        server.handle_datagram(0, &second, RxMeta::inexact());
        assert_eq!(server.cm.counters.dropped_backlog, 1);
        let Some(CmEvent::ConnectRequest(r)) = server.poll_cm_event() else {
            panic!("no request")
        };
        let q = init_qp(&mut server);
        server.cm_accept(0, r.id, q, &ConnParam::default()).unwrap();
        // REP sent, no RTU: the backlog has room, but the client's share
        // (1) is taken.
        assert!(server.cm.pending.is_empty());
        server.handle_datagram(0, &second, RxMeta::inexact());
        assert_eq!(server.cm.counters.dropped_source_share, 1);
        for d in sent(&mut server, 0) {
            client.handle_datagram(0, &d, RxMeta::default());
        }
        for d in sent(&mut client, 0) {
            server.handle_datagram(0, &d, RxMeta::default());
        }
        assert_eq!(server.cm_state(r.id), Some(CmState::Established));
        assert!(server.cm.shares.is_empty());
        server.handle_datagram(0, &second, RxMeta::inexact());
        let c = server.cm.counters;
        assert_eq!((c.dropped_backlog, c.dropped_source_share), (1, 1));
        let Some(CmEvent::ConnectRequest(r2)) = std::iter::from_fn(|| server.poll_cm_event())
            .find(|e| matches!(e, CmEvent::ConnectRequest(_)))
        else {
            panic!("the second request was not taken")
        };
        server.cm_reject(r2.id, &[]).unwrap();
        assert!(server.cm.shares.is_empty() && server.cm.pending.is_empty());
    }
}
