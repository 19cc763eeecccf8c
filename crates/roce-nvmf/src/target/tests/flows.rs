//! Whole flows through the target core: admin queue bring-up, I/O,
//! keep-alive expiry, teardown, asynchronous events, discovery.

use std::time::Duration;

use super::sim::*;
use crate::initiator as ini;
use crate::target::*;
use crate::wire::fabrics::prop;
use crate::wire::features::fid;
use crate::wire::identify::{cns, IdentifyController, IdentifyNamespace, CTRATT_TBKAS};
use crate::wire::log::{lid, parse_discovery_header, DiscoveryEntry};
use crate::wire::sgl::SglDesc;
use crate::wire::status::Status;
use crate::wire::{Cid, Cntlid, Nsid};

#[test]
fn admin_flow_connect_properties_identify() {
    let mut s = Sim::new(config());
    let (admin, c) = s.connect_admin_to(SUBNQN, HOSTNQN);
    assert_eq!(c.status, Status::SUCCESS);
    assert_eq!(c.sqid, 0);
    assert_eq!(c.sqhd, 1);
    let cntlid = c.dw0 as u16;
    assert_ne!(cntlid, 0);
    assert_eq!(
        s.t.queue_state(admin),
        Some(QueueState::Live {
            cntlid: Cntlid(cntlid)
        })
    );

    // CAP: MQES 127, CSS NVM.
    let cap = s.cmd(admin, &ini::property_get(Cid(1), prop::CAP, true));
    let cap = cap.dw0 as u64 | (cap.dw1 as u64) << 32;
    assert_eq!(cap & 0xFFFF, 127);
    assert_eq!(cap >> 37 & 1, 1);
    let vs = s.cmd(admin, &ini::property_get(Cid(2), prop::VS, false));
    assert_eq!(vs.dw0, 0x0001_0400);
    // Identify before CC.EN = 1 is a Command Sequence Error.
    let d = s.buf(vec![0; 4096], false);
    let r = s.cmd(admin, &ini::identify(Cid(3), cns::CONTROLLER, Nsid(0), d));
    assert_eq!(r.status, Status::COMMAND_SEQUENCE_ERROR);
    let r = s.cmd(admin, &ini::property_set(Cid(4), prop::CC, 0x0046_0001));
    assert_eq!(r.status, Status::SUCCESS);
    let csts = s.cmd(admin, &ini::property_get(Cid(5), prop::CSTS, false));
    assert_eq!(csts.dw0 & 1, 1);
    let cc = s.cmd(admin, &ini::property_get(Cid(6), prop::CC, false));
    assert_eq!(cc.dw0, 0x0046_0001);
    // An undefined property.
    let r = s.cmd(admin, &ini::property_get(Cid(6), 0x40, false));
    assert_eq!(r.status, Status::INVALID_FIELD);

    let r = s.cmd(admin, &ini::identify(Cid(7), cns::CONTROLLER, Nsid(0), d));
    assert_eq!(r.status, Status::SUCCESS);
    let id = IdentifyController::parse(s.mem(d)).unwrap();
    assert_eq!(id.cntlid, cntlid);
    assert_eq!(id.subnqn, SUBNQN);
    assert_eq!(id.icdoff, 0);
    assert_eq!(id.ioccsz, 4 + 8192 / 16);
    assert_eq!(id.iorcsz, 1);
    assert_eq!(id.sgls, 1 | 1 << 2 | 1 << 20);
    assert_eq!(id.ctratt, CTRATT_TBKAS);
    assert_eq!(id.maxcmd, 128);
    assert_eq!(id.cntrltype, 1);
    assert_eq!(id.kas, 1);

    let d = s.buf(vec![0; 4096], true);
    let r = s.cmd(admin, &ini::identify(Cid(8), cns::NAMESPACE, Nsid(1), d));
    assert_eq!(r.status, Status::SUCCESS);
    // The host asked for invalidation: the response is SEND with Invalidate.
    assert_eq!(
        s.responses.last().unwrap().2,
        Some(match d {
            SglDesc::Keyed { key, .. } => key,
            _ => unreachable!(),
        })
    );
    let ns = IdentifyNamespace::parse(s.mem(d)).unwrap();
    assert_eq!((ns.nsze, ns.lbaf0_lbads, ns.nguid), (BLOCKS, 9, [1; 16]));
    let r = s.cmd(admin, &ini::identify(Cid(9), cns::NAMESPACE, Nsid(2), d));
    assert_eq!(r.status, Status::INVALID_NAMESPACE);

    let d = s.buf(vec![0xEE; 4096], false);
    s.cmd(
        admin,
        &ini::identify(Cid(10), cns::ACTIVE_NS_LIST, Nsid(0), d),
    );
    assert_eq!(&s.mem(d)[..8], &[1, 0, 0, 0, 0, 0, 0, 0]);
    s.cmd(
        admin,
        &ini::identify(Cid(11), cns::NS_DESC_LIST, Nsid(1), d),
    );
    assert_eq!(&s.mem(d)[..5], &[2, 16, 0, 0, 1]);
    let r = s.cmd(admin, &ini::identify(Cid(12), 0x55, Nsid(0), d));
    assert_eq!(r.status, Status::INVALID_FIELD);
    // CNS 06h for the NVM command set (what Linux asks): all limits 0.
    let z = s.buf(vec![0xEE; 4096], false);
    let r = s.cmd(
        admin,
        &ini::identify(Cid(12), cns::CS_CONTROLLER, Nsid(0), z),
    );
    assert_eq!(r.status, Status::SUCCESS);
    assert!(s.mem(z).iter().all(|&b| b == 0));
    let mut other_csi = ini::identify(Cid(12), cns::CS_CONTROLLER, Nsid(0), z);
    other_csi[47] = 2;
    assert_eq!(s.cmd(admin, &other_csi).status, Status::INVALID_FIELD);

    // Keep Alive and features.
    assert_eq!(
        s.cmd(admin, &ini::keep_alive(Cid(13))).status,
        Status::SUCCESS
    );
    let r = s.cmd(admin, &ini::get_features(Cid(14), fid::KEEP_ALIVE_TIMER));
    assert_eq!(r.dw0, 1000);
    let r = s.cmd(admin, &ini::set_features(Cid(15), 0x7E, 0));
    assert_eq!(r.status, Status::INVALID_FIELD);
    let mut save = ini::set_features(Cid(16), fid::KEEP_ALIVE_TIMER, 5);
    save[43] |= 0x80;
    assert_eq!(s.cmd(admin, &save).status, Status::FEATURE_NOT_SAVEABLE);
    // Unknown admin opcode.
    let r = s.cmd(
        admin,
        &crate::wire::sqe::SqeRepr::new(0xC1, Cid(17), Nsid(0)).to_bytes(),
    );
    assert_eq!(r.status, Status::INVALID_OPCODE);
}

#[test]
fn io_write_then_read_back() {
    let mut s = Sim::new(config());
    let (_admin, io, _) = s.io_ready(16);
    // Two blocks in capsule at LBA 3.
    let pattern: Vec<u8> = (0..1024).map(|i| (i * 7 + 3) as u8).collect();
    let w = ini::write(Cid(1), Nsid(1), 3, 2, false, null());
    let r = s.cmd(io, &ini::with_in_capsule_data(w, &pattern));
    assert_eq!(r.status, Status::SUCCESS);
    assert_eq!(r.sqid, 1);
    // Four blocks through a keyed buffer at LBA 10, FUA.
    let big: Vec<u8> = (0..2048).map(|i| (i * 13 + 1) as u8).collect();
    let src = s.buf(big.clone(), true);
    let r = s.cmd(io, &ini::write(Cid(2), Nsid(1), 10, 4, true, src));
    assert_eq!(r.status, Status::SUCCESS);
    assert!(s.responses.last().unwrap().2.is_some());
    // Read both back.
    let dst = s.buf(vec![0; 1024], true);
    assert_eq!(
        s.cmd(io, &ini::read(Cid(3), Nsid(1), 3, 2, dst)).status,
        Status::SUCCESS
    );
    assert_eq!(s.mem(dst), &pattern[..]);
    let dst = s.buf(vec![0; 2048], false);
    assert_eq!(
        s.cmd(io, &ini::read(Cid(4), Nsid(1), 10, 4, dst)).status,
        Status::SUCCESS
    );
    assert_eq!(s.mem(dst), &big[..]);
    assert_eq!(s.responses.last().unwrap().2, None);
    // Flush, Write Zeroes, read zeros back.
    assert_eq!(
        s.cmd(io, &ini::flush(Cid(5), Nsid(1))).status,
        Status::SUCCESS
    );
    assert_eq!(
        s.cmd(io, &ini::write_zeroes(Cid(6), Nsid(1), 11, 2)).status,
        Status::SUCCESS
    );
    let dst = s.buf(vec![0xAA; 2048], false);
    s.cmd(io, &ini::read(Cid(7), Nsid(1), 10, 4, dst));
    assert_eq!(&s.mem(dst)[..512], &big[..512]);
    assert!(s.mem(dst)[512..1536].iter().all(|&b| b == 0));
    assert_eq!(&s.mem(dst)[1536..], &big[1536..]);
    // Dataset Management: one range, deallocate.
    let mut range = [0u8; 16];
    range[4] = 4;
    range[8] = 60;
    let mut dsm = crate::wire::sqe::SqeRepr::new(0x09, Cid(8), Nsid(1));
    dsm.cdw[1] = 1 << 2;
    let r = s.cmd(io, &ini::with_in_capsule_data(dsm.to_bytes(), &range));
    assert_eq!(r.status, Status::SUCCESS);
    range[8] = 61;
    let mut dsm = crate::wire::sqe::SqeRepr::new(0x09, Cid(9), Nsid(1));
    dsm.cdw[1] = 1 << 2;
    let r = s.cmd(io, &ini::with_in_capsule_data(dsm.to_bytes(), &range));
    assert_eq!(r.status, Status::LBA_OUT_OF_RANGE);
}

#[test]
fn keep_alive_expiry_tears_down() {
    let mut s = Sim::new(config());
    let (admin, io, _) = s.io_ready(8);
    assert_eq!(s.t.next_deadline(), Some(Duration::from_millis(1000)));
    s.now = Duration::from_millis(600);
    assert_eq!(
        s.cmd(admin, &ini::keep_alive(Cid(5))).status,
        Status::SUCCESS
    );
    assert_eq!(s.t.next_deadline(), Some(Duration::from_millis(1600)));
    s.t.on_timeout(Duration::from_millis(1599));
    s.drive();
    assert!(s.disconnects.is_empty());
    s.t.on_timeout(Duration::from_millis(1600));
    s.drive();
    assert_eq!(s.disconnects, vec![io, admin]);
    assert_eq!(s.t.controller_count(), 0);
    assert_eq!(s.t.next_deadline(), None);
    // A closed queue answers nothing.
    assert!(s.send(io, &ini::flush(Cid(1), Nsid(1))).is_none());
}

/// Traffic-based keep alive, as Linux's nvmet keeps it: when the timer
/// runs out after a command on any of the controller's queues (an I/O
/// queue's Connect included), it starts another period; a period with no
/// command at all ends the controller.
#[test]
fn traffic_buys_another_keep_alive_period() {
    let mut s = Sim::new(config());
    let (admin, cntlid) = s.enabled_admin();
    let r = s.cmd(
        admin,
        &ini::set_features(Cid(2), fid::NUMBER_OF_QUEUES, 0x0003_0003),
    );
    assert_eq!(r.status, Status::SUCCESS);
    assert_eq!(s.t.next_deadline(), Some(Duration::from_millis(1000)));
    // Commands before the deadline: at its end, another period.
    s.t.on_timeout(Duration::from_millis(1000));
    s.drive();
    assert_eq!(s.t.controller_count(), 1);
    assert_eq!(s.t.next_deadline(), Some(Duration::from_millis(2000)));
    // A host slow to connect its I/O queue, sending no Keep Alive: its
    // Connect inside the second period counts.
    s.now = Duration::from_millis(1900);
    let (io, c) = s.connect_io(cntlid, 1, 8);
    assert_eq!(c.status, Status::SUCCESS);
    s.t.on_timeout(Duration::from_millis(2000));
    s.drive();
    assert!(s.disconnects.is_empty());
    assert_eq!(s.t.next_deadline(), Some(Duration::from_millis(3000)));
    // An I/O command counts too.
    s.now = Duration::from_millis(2500);
    assert_eq!(
        s.cmd(io, &ini::flush(Cid(1), Nsid(1))).status,
        Status::SUCCESS
    );
    s.t.on_timeout(Duration::from_millis(3000));
    s.drive();
    assert_eq!(s.t.controller_count(), 1);
    // A whole period of silence ends it.
    s.t.on_timeout(Duration::from_millis(4000));
    s.drive();
    assert_eq!(s.disconnects, vec![io, admin]);
    assert_eq!(s.t.controller_count(), 0);
}

#[test]
fn disconnecting_admin_queue_removes_controller() {
    let mut s = Sim::new(config());
    let (admin, io, _) = s.io_ready(8);
    s.t.on_disconnect(admin);
    s.drive();
    assert_eq!(s.disconnects, vec![io]);
    assert_eq!(s.t.controller_count(), 0);
    s.t.on_disconnect(io);
    assert_eq!(s.t.connection_count(), 0);
}

#[test]
fn cc_disable_deletes_io_queues() {
    let mut s = Sim::new(config());
    let (admin, io, _) = s.io_ready(8);
    assert_eq!(
        s.cmd(admin, &ini::property_set(Cid(3), prop::CC, 0x0046_4000))
            .status,
        Status::SUCCESS
    );
    let csts = s.cmd(admin, &ini::property_get(Cid(4), prop::CSTS, false));
    assert_eq!(csts.dw0, 2 << 2);
    assert_eq!(s.disconnects, vec![io]);
}

#[test]
fn aer_held_until_namespace_added() {
    let mut s = Sim::new(config());
    let (admin, _) = s.enabled_admin();
    let r = s.cmd(
        admin,
        &ini::set_features(Cid(2), fid::ASYNC_EVENT_CONFIG, 1 << 8),
    );
    assert_eq!(r.status, Status::SUCCESS);
    for i in 0..4 {
        assert!(s
            .send(admin, &ini::async_event_request(Cid(20 + i)))
            .is_none());
    }
    let r = s.cmd(admin, &ini::async_event_request(Cid(30)));
    assert_eq!(r.status, Status::AER_LIMIT_EXCEEDED);
    let added = s.t.add_namespace(
        0,
        NamespaceEntry {
            nsid: Nsid(2),
            nguid: [3; 16],
            uuid: [4; 16],
            storage: Box::new(MemNamespace::new(8, 4096)),
        },
    );
    assert!(added);
    s.drive();
    let (_, cqe, _) = *s.responses.last().unwrap();
    assert_eq!((cqe.cid, cqe.dw0), (Cid(20), 0x0004_0002));
    // The changed namespace list names it, and reading clears it.
    let d = s.buf(vec![0; 4096], false);
    let r = s.cmd(
        admin,
        &ini::get_log_page(Cid(3), lid::CHANGED_NS, Nsid::BROADCAST, 4096, 0, false, d),
    );
    assert_eq!(r.status, Status::SUCCESS);
    assert_eq!(&s.mem(d)[..8], &[2, 0, 0, 0, 0, 0, 0, 0]);
    s.cmd(
        admin,
        &ini::get_log_page(Cid(3), lid::CHANGED_NS, Nsid::BROADCAST, 4096, 0, false, d),
    );
    assert_eq!(&s.mem(d)[..4], &[0, 0, 0, 0]);
    // Logs: SMART, error (the AER limit failure was logged), unknown.
    let d = s.buf(vec![0; 512], false);
    let r = s.cmd(
        admin,
        &ini::get_log_page(Cid(4), lid::SMART, Nsid::BROADCAST, 512, 0, false, d),
    );
    assert_eq!(r.status, Status::SUCCESS);
    assert_eq!(s.mem(d)[3], 100);
    let d = s.buf(vec![0; 64], false);
    s.cmd(
        admin,
        &ini::get_log_page(Cid(5), lid::ERROR, Nsid(0), 64, 0, false, d),
    );
    let e = crate::wire::log::ErrorEntry::parse(s.mem(d)).unwrap();
    assert_eq!(
        (e.cid, e.status),
        (30, Status::AER_LIMIT_EXCEEDED.to_field(false))
    );
    let r = s.cmd(
        admin,
        &ini::get_log_page(Cid(6), 0x33, Nsid(0), 64, 0, false, d),
    );
    assert_eq!(r.status, Status::INVALID_LOG_PAGE);
    let r = s.cmd(
        admin,
        &ini::get_log_page(Cid(7), lid::SMART, Nsid(0), 64, 2, false, d),
    );
    assert_eq!(r.status, Status::INVALID_FIELD);
    assert!(!s.t.add_namespace(
        0,
        NamespaceEntry {
            nsid: Nsid(2),
            nguid: [0; 16],
            uuid: [0; 16],
            storage: Box::new(MemNamespace::new(1, 512))
        }
    ));
}

#[test]
fn discovery_controller_lists_allowed_subsystems() {
    let mut cfg = config();
    let mut other = Subsystem::new("nqn.2026-01.test:private");
    other.allowed_hosts = Some(vec!["nqn.2026-01.test:someone-else".into()]);
    cfg.subsystems.push(other);
    cfg.port.traddr = "192.0.2.1".into();
    let mut s = Sim::new(cfg);
    let (admin, c) = s.connect_admin_to(DISCOVERY_NQN, HOSTNQN);
    assert_eq!(c.status, Status::SUCCESS);
    assert_eq!(
        s.cmd(admin, &ini::property_set(Cid(1), prop::CC, 1)).status,
        Status::SUCCESS
    );
    let d = s.buf(vec![0; 4096], false);
    s.cmd(admin, &ini::identify(Cid(2), cns::CONTROLLER, Nsid(0), d));
    let id = IdentifyController::parse(s.mem(d)).unwrap();
    assert_eq!((id.cntrltype, id.subnqn.as_str()), (2, DISCOVERY_NQN));
    let r = s.cmd(admin, &ini::identify(Cid(2), cns::NAMESPACE, Nsid(1), d));
    assert_eq!(r.status, Status::INVALID_FIELD);
    let d = s.buf(vec![0; 3072], false);
    let r = s.cmd(
        admin,
        &ini::get_log_page(Cid(3), lid::DISCOVERY, Nsid(0), 3072, 0, false, d),
    );
    assert_eq!(r.status, Status::SUCCESS);
    let (_, numrec) = parse_discovery_header(s.mem(d)).unwrap();
    assert_eq!(numrec, 1);
    let e = DiscoveryEntry::parse(&s.mem(d)[1024..]).unwrap();
    assert_eq!(
        (e.subnqn.as_str(), e.traddr.as_str(), e.trsvcid.as_str()),
        (SUBNQN, "192.0.2.1", "4420")
    );
    assert_eq!((e.trtype, e.adrfam, e.subtype, e.asqsz), (1, 1, 2, 32));
    // No I/O commands or queues on a discovery controller.
    let r = s.cmd(admin, &ini::set_features(Cid(4), fid::NUMBER_OF_QUEUES, 0));
    assert_eq!(r.status, Status::INVALID_FIELD);
}

#[test]
fn several_io_queues_up_to_the_granted_number() {
    let mut s = Sim::new(config());
    let (admin, cntlid) = s.enabled_admin();
    // Ask for 8, get max_io_queues (8): then ask again before any I/O
    // queue exists, for 2.
    let r = s.cmd(
        admin,
        &ini::set_features(Cid(2), fid::NUMBER_OF_QUEUES, 0x0007_0007),
    );
    assert_eq!(r.dw0, 0x0007_0007);
    let r = s.cmd(
        admin,
        &ini::set_features(Cid(2), fid::NUMBER_OF_QUEUES, 0x0001_0001),
    );
    assert_eq!(r.dw0, 0x0001_0001);
    let (q1, c) = s.connect_io(cntlid, 1, 16);
    assert_eq!(c.status, Status::SUCCESS);
    let (q2, c) = s.connect_io(cntlid, 2, 16);
    assert_eq!(c.status, Status::SUCCESS);
    let (_, c) = s.connect_io(cntlid, 3, 16);
    assert_eq!((c.status, c.dw0), (Status::CONNECT_INVALID_PARAMETERS, 42));
    // Number of Queues cannot change once I/O queues exist.
    let r = s.cmd(
        admin,
        &ini::set_features(Cid(3), fid::NUMBER_OF_QUEUES, 0x0003_0003),
    );
    assert_eq!(r.status, Status::COMMAND_SEQUENCE_ERROR);
    // Both queues reach the same namespace; responses name their queue.
    let w = ini::with_in_capsule_data(
        ini::write(
            Cid(1),
            Nsid(1),
            9,
            1,
            false,
            SglDesc::InCapsule { offset: 0, len: 0 },
        ),
        &[7; 512],
    );
    let r = s.cmd(q1, &w);
    assert_eq!((r.status, r.sqid), (Status::SUCCESS, 1));
    let d = s.buf(vec![0; 512], false);
    let r = s.cmd(q2, &ini::read(Cid(1), Nsid(1), 9, 1, d));
    assert_eq!((r.status, r.sqid), (Status::SUCCESS, 2));
    assert_eq!(s.mem(d), &[7; 512][..]);
    // The same CID on two queues is no conflict.
    assert_eq!(r.cid, Cid(1));
}

/// With `Limits::remote_invalidate` off, a command whose keyed SGL asks
/// for invalidation (subtype Fh, as Linux's host sends every one with
/// data) is answered by a plain SEND: the host invalidates the key
/// itself. Its data still moves (docs/interop.md, "NVMe-oF against
/// Linux": the loss case).
#[test]
fn responses_without_remote_invalidate_when_turned_off() {
    let mut cfg = config();
    cfg.limits.remote_invalidate = false;
    let mut s = Sim::new(cfg);
    let (_admin, io, _) = s.io_ready(16);
    let data: Vec<u8> = (0..1024).map(|i| (i * 5 + 1) as u8).collect();
    let src = s.buf(data.clone(), true);
    let r = s.cmd(io, &ini::write(Cid(1), Nsid(1), 0, 2, false, src));
    assert_eq!(r.status, Status::SUCCESS);
    assert_eq!(s.responses.last().unwrap().2, None);
    let dst = s.buf(vec![0; 1024], true);
    let r = s.cmd(io, &ini::read(Cid(2), Nsid(1), 0, 2, dst));
    assert_eq!(r.status, Status::SUCCESS);
    assert_eq!(s.responses.last().unwrap().2, None);
    assert_eq!(s.mem(dst), &data[..]);
}
