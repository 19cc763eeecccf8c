//! The target core driven through whole flows with a simulated driver:
//! host memory as keyed buffers, actions performed in order.

use std::collections::BTreeMap;
use std::time::Duration;

use super::*;
use crate::initiator as ini;
use crate::wire::cm::{CmAccept, CmReject, RejectStatus};
use crate::wire::cqe::CqeRepr;
use crate::wire::fabrics::prop;
use crate::wire::features::fid;
use crate::wire::identify::{cns, IdentifyController, IdentifyNamespace};
use crate::wire::log::{lid, parse_discovery_header, DiscoveryEntry};
use crate::wire::sgl::SglDesc;
use crate::wire::status::Status;
use crate::wire::{Cid, Cntlid, Nsid, Qid};

const SUBNQN: &str = "nqn.2026-01.test:sub";
const HOSTNQN: &str = "nqn.2026-01.test:host";
const HOSTID: [u8; 16] = [0x42; 16];
const BLOCKS: u64 = 64;

pub(crate) fn config() -> TargetConfig {
    let mut s = Subsystem::new(SUBNQN);
    s.allowed_hosts = Some(vec![HOSTNQN.into()]);
    s.namespaces.push(NamespaceEntry {
        nsid: Nsid(1),
        nguid: [1; 16],
        uuid: [2; 16],
        storage: Box::new(MemNamespace::new(BLOCKS, 512)),
    });
    TargetConfig {
        subsystems: vec![s],
        port: PortInfo::default(),
        limits: Limits::default(),
    }
}

/// A host: keyed buffers and the responses and disconnects seen.
pub(crate) struct Sim {
    pub(crate) t: Target,
    pub(crate) now: Duration,
    /// key -> (address, bytes)
    mem: BTreeMap<u32, (u64, Vec<u8>)>,
    next_key: u32,
    pub(crate) responses: Vec<(ConnId, CqeRepr, Option<crate::wire::Rkey>)>,
    pub(crate) disconnects: Vec<ConnId>,
    /// Leave RDMA READs unanswered (to keep commands outstanding).
    pub(crate) stall_reads: bool,
    pub(crate) stalled: Vec<(ConnId, Cid)>,
}

impl Sim {
    pub(crate) fn new(cfg: TargetConfig) -> Sim {
        Sim {
            t: Target::new(cfg),
            now: Duration::ZERO,
            mem: BTreeMap::new(),
            next_key: 0x100,
            responses: Vec::new(),
            disconnects: Vec::new(),
            stall_reads: false,
            stalled: Vec::new(),
        }
    }

    /// Registers a host buffer; returns its keyed descriptor.
    pub(crate) fn buf(&mut self, data: Vec<u8>, invalidate: bool) -> SglDesc {
        let key = self.next_key;
        self.next_key += 1;
        let addr = 0x10_0000 * key as u64;
        let len = data.len() as u32;
        self.mem.insert(key, (addr, data));
        SglDesc::Keyed {
            addr,
            len,
            key: crate::wire::Rkey(key),
            invalidate,
        }
    }

    pub(crate) fn mem(&self, d: SglDesc) -> &[u8] {
        match d {
            SglDesc::Keyed { key, .. } => &self.mem[&key.0].1,
            _ => &[],
        }
    }

    /// Performs every pending action, as a driver would.
    pub(crate) fn drive(&mut self) {
        while let Some(a) = self.t.poll_action() {
            match a {
                Action::ReadHost {
                    conn,
                    cid,
                    addr,
                    key,
                    len,
                } => {
                    if self.stall_reads {
                        self.stalled.push((conn, cid));
                        continue;
                    }
                    let Some((base, b)) = self.mem.get(&key.0) else {
                        self.t.on_transfer_error(conn, cid);
                        continue;
                    };
                    let off = (addr - base) as usize;
                    let data = b[off..off + len as usize].to_vec();
                    self.t.on_host_data(conn, cid, &data, self.now);
                }
                Action::WriteHost {
                    addr, key, data, ..
                } => {
                    let (base, b) = self.mem.get_mut(&key.0).expect("write to a registered key");
                    let off = (addr - *base) as usize;
                    assert!(off + data.len() <= b.len(), "write past the host buffer");
                    b[off..off + data.len()].copy_from_slice(&data);
                }
                Action::Respond {
                    conn,
                    cqe,
                    invalidate,
                } => {
                    self.responses
                        .push((conn, CqeRepr::parse(&cqe).unwrap(), invalidate));
                }
                Action::Disconnect { conn } => self.disconnects.push(conn),
            }
        }
    }

    /// Sends a capsule and returns the response to `cid` (panics if none).
    pub(crate) fn cmd(&mut self, conn: ConnId, capsule: &[u8]) -> CqeRepr {
        self.send(conn, capsule).expect("a response")
    }

    pub(crate) fn send(&mut self, conn: ConnId, capsule: &[u8]) -> Option<CqeRepr> {
        let n = self.responses.len();
        self.t.on_capsule(conn, capsule, self.now);
        self.drive();
        self.responses.get(n).map(|r| r.1)
    }

    pub(crate) fn cm(&mut self, qid: u16, depth: u16) -> ConnId {
        let (conn, acc) = self
            .t
            .on_cm_request(&ini::cm_request(Qid(qid), depth))
            .unwrap();
        assert_eq!(CmAccept::parse(&acc).unwrap().crqsize, depth);
        conn
    }

    /// CM request + Connect for the admin queue.
    pub(crate) fn connect_admin_to(&mut self, subnqn: &str, hostnqn: &str) -> (ConnId, CqeRepr) {
        let conn = self.cm(0, 32);
        let data = ini::connect_data(HOSTID, Cntlid::DYNAMIC, subnqn, hostnqn);
        let sgl = self.buf(data, false);
        let c = self.cmd(conn, &ini::connect(Cid(0), Qid(0), 31, 1000, sgl));
        (conn, c)
    }

    pub(crate) fn enabled_admin(&mut self) -> (ConnId, Cntlid) {
        let (conn, c) = self.connect_admin_to(SUBNQN, HOSTNQN);
        assert_eq!(c.status, Status::SUCCESS);
        let r = self.cmd(conn, &ini::property_set(Cid(1), prop::CC, 0x0046_0001));
        assert_eq!(r.status, Status::SUCCESS);
        (conn, Cntlid(c.dw0 as u16))
    }

    pub(crate) fn connect_io(&mut self, cntlid: Cntlid, qid: u16, depth: u16) -> (ConnId, CqeRepr) {
        let conn = self.cm(qid, depth);
        let data = ini::connect_data(HOSTID, cntlid, SUBNQN, HOSTNQN);
        let sqe = ini::connect(
            Cid(0),
            Qid(qid),
            depth - 1,
            0,
            SglDesc::InCapsule { offset: 0, len: 0 },
        );
        let c = self.cmd(conn, &ini::with_in_capsule_data(sqe, &data));
        (conn, c)
    }

    /// A controller with one I/O queue of `depth`.
    pub(crate) fn io_ready(&mut self, depth: u16) -> (ConnId, ConnId, Cntlid) {
        let (admin, cntlid) = self.enabled_admin();
        let r = self.cmd(
            admin,
            &ini::set_features(Cid(2), fid::NUMBER_OF_QUEUES, 0x0003_0003),
        );
        assert_eq!(r.status, Status::SUCCESS);
        assert_eq!(r.dw0, 0x0003_0003);
        let (io, c) = self.connect_io(cntlid, 1, depth);
        assert_eq!(c.status, Status::SUCCESS);
        assert_eq!(c.dw0 as u16, cntlid.0);
        (admin, io, cntlid)
    }
}

fn null() -> SglDesc {
    crate::wire::sqe::SqeRepr::new(0, Cid(0), Nsid(0)).sgl1
}

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
fn connect_failures_name_the_parameter() {
    let mut s = Sim::new(config());
    let (_, c) = s.connect_admin_to("nqn.2026-01.test:nope", HOSTNQN);
    assert_eq!(c.status, Status::CONNECT_INVALID_PARAMETERS);
    assert_eq!(c.dw0, 1 << 16 | 256);
    let (_, c) = s.connect_admin_to(SUBNQN, "nqn.2026-01.test:stranger");
    assert_eq!(c.status, Status::CONNECT_INVALID_HOST);
    assert_eq!(s.t.controller_count(), 0);

    // SQSIZE not matching the CM request's HSQSIZE.
    let conn = s.cm(0, 32);
    let data = s.buf(
        ini::connect_data(HOSTID, Cntlid::DYNAMIC, SUBNQN, HOSTNQN),
        false,
    );
    let c = s.cmd(conn, &ini::connect(Cid(0), Qid(0), 15, 0, data));
    assert_eq!((c.status, c.dw0), (Status::CONNECT_INVALID_PARAMETERS, 44));
    // A QID other than the CM request's.
    let c = s.cmd(conn, &ini::connect(Cid(0), Qid(1), 31, 0, data));
    assert_eq!((c.status, c.dw0), (Status::CONNECT_INVALID_PARAMETERS, 42));
    // A fixed CNTLID on the admin queue (dynamic model).
    let data2 = s.buf(ini::connect_data(HOSTID, Cntlid(3), SUBNQN, HOSTNQN), false);
    let c = s.cmd(conn, &ini::connect(Cid(0), Qid(0), 31, 0, data2));
    assert_eq!(
        (c.status, c.dw0),
        (Status::CONNECT_INVALID_PARAMETERS, 1 << 16 | 16)
    );
    // Bad record format.
    let mut bad = ini::connect(Cid(0), Qid(0), 31, 0, data);
    bad[40] = 1;
    assert_eq!(
        s.cmd(conn, &bad).status,
        Status::CONNECT_INCOMPATIBLE_FORMAT
    );
    // Connect data too short for its SGL: Data SGL Length Invalid.
    let short = s.buf(vec![0; 100], false);
    let c = s.cmd(conn, &ini::connect(Cid(0), Qid(0), 31, 0, short));
    assert_eq!(c.status, Status::DATA_SGL_LENGTH_INVALID);
    // Anything but Connect first is a Command Sequence Error.
    let c = s.cmd(conn, &ini::keep_alive(Cid(1)));
    assert_eq!(c.status, Status::COMMAND_SEQUENCE_ERROR);
    assert_eq!(s.t.queue_state(conn), Some(QueueState::AwaitConnect));

    // I/O queue with an unknown controller.
    let (_admin, cntlid) = s.enabled_admin();
    let (_, c) = s.connect_io(Cntlid(cntlid.0 + 100), 1, 8);
    assert_eq!(
        (c.status, c.dw0),
        (Status::CONNECT_INVALID_PARAMETERS, 1 << 16 | 16)
    );
    let (io, c) = s.connect_io(cntlid, 1, 8);
    assert_eq!(c.status, Status::SUCCESS);
    // A second Connect on a live queue.
    let sqe = ini::connect(Cid(9), Qid(1), 7, 0, null());
    let data = ini::connect_data(HOSTID, cntlid, SUBNQN, HOSTNQN);
    assert_eq!(
        s.cmd(io, &ini::with_in_capsule_data(sqe, &data)).status,
        Status::COMMAND_SEQUENCE_ERROR
    );
    // The same QID twice.
    let (_, c) = s.connect_io(cntlid, 1, 8);
    assert_eq!((c.status, c.dw0), (Status::CONNECT_INVALID_PARAMETERS, 42));
}

#[test]
fn cm_request_checks() {
    let mut s = Sim::new(config());
    let rej = |b: [u8; 4]| RejectStatus::from_code(CmReject::parse(&b).unwrap().status).unwrap();
    assert_eq!(
        rej(s.t.on_cm_request(&[]).unwrap_err()),
        RejectStatus::InvalidHsqsize
    );
    let mut pd = ini::cm_request(Qid(0), 64);
    assert_eq!(
        rej(s.t.on_cm_request(&pd).unwrap_err()),
        RejectStatus::InvalidHsqsize
    );
    pd = ini::cm_request(Qid(1), 1);
    assert_eq!(
        rej(s.t.on_cm_request(&pd).unwrap_err()),
        RejectStatus::InvalidHsqsize
    );
    pd = ini::cm_request(Qid(1), 129);
    assert_eq!(
        rej(s.t.on_cm_request(&pd).unwrap_err()),
        RejectStatus::InvalidHsqsize
    );
    pd = ini::cm_request(Qid(9), 8);
    assert_eq!(
        rej(s.t.on_cm_request(&pd).unwrap_err()),
        RejectStatus::InvalidQid
    );
    pd = ini::cm_request(Qid(1), 8);
    pd[4] = 0;
    assert_eq!(
        rej(s.t.on_cm_request(&pd).unwrap_err()),
        RejectStatus::InvalidHrqsize
    );
    pd[0] = 1;
    assert_eq!(
        rej(s.t.on_cm_request(&pd).unwrap_err()),
        RejectStatus::InvalidRecfmt
    );
    let mut cfg = config();
    cfg.limits.max_connections = 1;
    let mut s = Sim::new(cfg);
    s.cm(0, 32);
    let e = s.t.on_cm_request(&ini::cm_request(Qid(0), 32)).unwrap_err();
    assert_eq!(rej(e), RejectStatus::NoResources);
}

#[test]
fn io_bad_input_statuses() {
    let mut s = Sim::new(config());
    let (_admin, io, _) = s.io_ready(8);
    let buf = s.buf(vec![0; 4096], false);
    // Past the end, and a start LBA that overflows.
    let r = s.cmd(io, &ini::read(Cid(1), Nsid(1), BLOCKS - 1, 2, buf));
    assert_eq!(r.status, Status::LBA_OUT_OF_RANGE);
    let r = s.cmd(io, &ini::read(Cid(1), Nsid(1), u64::MAX, 1, buf));
    assert_eq!(r.status, Status::LBA_OUT_OF_RANGE);
    let r = s.cmd(io, &ini::write(Cid(1), Nsid(1), BLOCKS, 1, false, buf));
    assert_eq!(r.status, Status::LBA_OUT_OF_RANGE);
    let r = s.cmd(io, &ini::write_zeroes(Cid(1), Nsid(1), BLOCKS - 2, 3));
    assert_eq!(r.status, Status::LBA_OUT_OF_RANGE);
    // Unknown namespace.
    let r = s.cmd(io, &ini::read(Cid(1), Nsid(7), 0, 1, buf));
    assert_eq!(r.status, Status::INVALID_NAMESPACE);
    // Keyed SGL shorter than the transfer.
    let small = s.buf(vec![0; 511], false);
    let r = s.cmd(io, &ini::read(Cid(1), Nsid(1), 0, 1, small));
    assert_eq!(r.status, Status::DATA_SGL_LENGTH_INVALID);
    // In-capsule data shorter than the descriptor says.
    let mut cap =
        ini::with_in_capsule_data(ini::write(Cid(1), Nsid(1), 0, 1, false, null()), &[1; 512]);
    cap.truncate(64 + 100);
    assert_eq!(s.cmd(io, &cap).status, Status::DATA_SGL_LENGTH_INVALID);
    // In-capsule offset past the in-capsule area.
    let mut w = ini::write(Cid(1), Nsid(1), 0, 1, false, null());
    SglDesc::InCapsule {
        offset: 1 << 20,
        len: 512,
    }
    .emit(&mut w[24..40]);
    assert_eq!(s.cmd(io, &w).status, Status::SGL_OFFSET_INVALID);
    // In-capsule data for a read.
    let mut rd = ini::read(Cid(1), Nsid(1), 0, 1, null());
    SglDesc::InCapsule {
        offset: 0,
        len: 512,
    }
    .emit(&mut rd[24..40]);
    assert_eq!(s.cmd(io, &rd).status, Status::SGL_DESCRIPTOR_TYPE_INVALID);
    // A Last Segment descriptor.
    let seg = SglDesc::Other {
        sgl_type: 3,
        subtype: 0,
    };
    let r = s.cmd(io, &ini::read(Cid(1), Nsid(1), 0, 1, seg));
    assert_eq!(r.status, Status::SGL_DESCRIPTOR_TYPE_INVALID);
    // PRPs over fabrics.
    let mut prp = ini::read(Cid(1), Nsid(1), 0, 1, buf);
    prp[1] = 0;
    assert_eq!(s.cmd(io, &prp).status, Status::INVALID_FIELD);
    // More than MDTS (128 KiB): 257 blocks of 512 bytes.
    let huge = s.buf(vec![0; 257 * 512], false);
    let r = s.cmd(io, &ini::read(Cid(1), Nsid(1), 0, 257, huge));
    assert_eq!(r.status, Status::INVALID_FIELD);
    // Unknown I/O opcode, and an admin opcode on an I/O queue.
    let r = s.cmd(
        io,
        &crate::wire::sqe::SqeRepr::new(0x7E, Cid(1), Nsid(1)).to_bytes(),
    );
    assert_eq!(r.status, Status::INVALID_OPCODE);
    let r = s.cmd(io, &ini::property_get(Cid(1), prop::CAP, true));
    assert_eq!(r.status, Status::INVALID_OPCODE);
    // Nothing outside the namespace was touched and nothing is pending.
    assert!(s.t.poll_action().is_none());
}

#[test]
fn queue_depth_and_cid_conflict() {
    let mut s = Sim::new(config());
    let (_admin, io, _) = s.io_ready(2);
    s.stall_reads = true;
    let a = s.buf(vec![1; 512], false);
    assert!(s
        .send(io, &ini::write(Cid(1), Nsid(1), 0, 1, false, a))
        .is_none());
    // Same CID while the first is outstanding.
    let r = s.cmd(io, &ini::write(Cid(1), Nsid(1), 1, 1, false, a));
    assert_eq!((r.cid, r.status), (Cid(1), Status::CID_CONFLICT));
    assert!(s
        .send(io, &ini::write(Cid(2), Nsid(1), 1, 1, false, a))
        .is_none());
    // A third command on a queue of depth 2.
    let r = s.cmd(io, &ini::write(Cid(3), Nsid(1), 2, 1, false, a));
    assert_eq!(r.status, Status::COMMAND_SEQUENCE_ERROR);
    // The stalled reads complete; a failed transfer answers Data Transfer Error.
    s.stall_reads = false;
    let stalled = core::mem::take(&mut s.stalled);
    s.t.on_host_data(stalled[0].0, stalled[0].1, &[1; 512], s.now);
    s.t.on_transfer_error(stalled[1].0, stalled[1].1);
    s.drive();
    let n = s.responses.len();
    assert_eq!(s.responses[n - 2].1.status, Status::SUCCESS);
    assert_eq!(s.responses[n - 1].1.status, Status::DATA_TRANSFER_ERROR);
    // Host data of the wrong length.
    s.stall_reads = true;
    s.send(io, &ini::write(Cid(4), Nsid(1), 0, 1, false, a));
    let (c, cid) = s.stalled.pop().unwrap();
    s.t.on_host_data(c, cid, &[0; 100], s.now);
    s.drive();
    assert_eq!(
        s.responses.last().unwrap().1.status,
        Status::DATA_TRANSFER_ERROR
    );
    // A capsule shorter than an SQE drops the connection.
    s.t.on_capsule(io, &[0; 63], s.now);
    s.drive();
    assert_eq!(s.disconnects, vec![io]);
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

/// Storage that fails the test if the core ever asks for bytes outside
/// the namespace.
struct Checked(MemNamespace);

impl Namespace for Checked {
    fn block_size(&self) -> u32 {
        self.0.block_size()
    }
    fn blocks(&self) -> u64 {
        self.0.blocks()
    }
    fn read(&mut self, offset: u64, buf: &mut [u8]) -> Result<(), NsError> {
        assert!(
            offset + buf.len() as u64 <= self.0.bytes().len() as u64,
            "read outside"
        );
        self.0.read(offset, buf)
    }
    fn write(&mut self, offset: u64, data: &[u8], fua: bool) -> Result<(), NsError> {
        assert!(
            offset + data.len() as u64 <= self.0.bytes().len() as u64,
            "write outside"
        );
        self.0.write(offset, data, fua)
    }
    fn flush(&mut self) -> Result<(), NsError> {
        Ok(())
    }
    fn write_zeroes(&mut self, offset: u64, len: u64) -> Result<(), NsError> {
        assert!(
            offset + len <= self.0.bytes().len() as u64,
            "zeroes outside"
        );
        self.0.write_zeroes(offset, len)
    }
    fn deallocate(&mut self, offset: u64, len: u64) -> Result<(), NsError> {
        assert!(
            offset + len <= self.0.bytes().len() as u64,
            "deallocate outside"
        );
        Ok(())
    }
}

/// Arbitrary capsules from mutated valid ones: no panic, and the storage
/// is never asked for bytes outside the namespace (the fuzz target runs
/// the same check on libFuzzer's inputs).
#[test]
fn no_panic_on_mutated_capsules() {
    let fresh = || {
        let mut cfg = config();
        cfg.subsystems[0].namespaces[0].storage = Box::new(Checked(MemNamespace::new(BLOCKS, 512)));
        let mut s = Sim::new(cfg);
        let (admin, io, cntlid) = s.io_ready(32);
        (s, admin, io, cntlid)
    };
    let seeds: Vec<Vec<u8>> = vec![
        ini::with_in_capsule_data(ini::write(Cid(1), Nsid(1), 3, 2, true, null()), &[9; 1024]),
        ini::read(
            Cid(2),
            Nsid(1),
            0,
            1,
            SglDesc::Keyed {
                addr: 0,
                len: 512,
                key: crate::wire::Rkey(9),
                invalidate: true,
            },
        )
        .to_vec(),
        ini::write(
            Cid(2),
            Nsid(1),
            60,
            4,
            false,
            SglDesc::Keyed {
                addr: 0,
                len: 2048,
                key: crate::wire::Rkey(9),
                invalidate: false,
            },
        )
        .to_vec(),
        ini::write_zeroes(Cid(3), Nsid(1), 62, 2).to_vec(),
        ini::identify(Cid(3), 1, Nsid(0), null()).to_vec(),
        ini::get_log_page(Cid(4), 2, Nsid(0), 512, 0, false, null()).to_vec(),
        ini::set_features(Cid(5), 7, 0).to_vec(),
        ini::async_event_request(Cid(6)).to_vec(),
    ];
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut rnd = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let (mut s, mut admin, mut io, mut cntlid) = fresh();
    let (mut answered, mut restarts) = (0u32, 0u32);
    for i in 0..20_000u32 {
        let mut c = seeds[(rnd() % seeds.len() as u64) as usize].clone();
        for _ in 0..(rnd() % 6) {
            let at = (rnd() % c.len() as u64) as usize;
            c[at] = rnd() as u8;
        }
        if rnd() % 16 == 0 {
            c.truncate((rnd() % 80) as usize);
        }
        let conn = if i % 4 == 0 { admin } else { io };
        s.t.on_capsule(conn, &c, s.now);
        while let Some(a) = s.t.poll_action() {
            match a {
                Action::ReadHost { conn, cid, len, .. } => {
                    assert!(len <= Limits::default().max_transfer());
                    s.t.on_host_data(conn, cid, &vec![0x5A; len as usize], s.now);
                }
                Action::WriteHost { data, .. } => {
                    assert!(data.len() as u32 <= Limits::default().max_transfer())
                }
                Action::Respond { .. } => answered += 1,
                Action::Disconnect { .. } => {}
            }
        }
        let live = Some(QueueState::Live { cntlid });
        if s.t.queue_state(io) != live || s.t.queue_state(admin) != live {
            (s, admin, io, cntlid) = fresh();
            restarts += 1;
        }
    }
    assert!(answered > 15_000, "{answered} answers");
    assert!(restarts < 5_000, "{restarts} restarts");
}
