//! The simulated driver the target tests use: host memory as keyed
//! buffers, actions performed in order.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::initiator as ini;
use crate::target::*;
use crate::wire::cm::CmAccept;
use crate::wire::cqe::CqeRepr;
use crate::wire::fabrics::prop;
use crate::wire::features::fid;
use crate::wire::sgl::SglDesc;
use crate::wire::status::Status;
use crate::wire::{Cid, Cntlid, Nsid, Qid};

pub(crate) const SUBNQN: &str = "nqn.2026-01.test:sub";
pub(crate) const HOSTNQN: &str = "nqn.2026-01.test:host";
pub(crate) const HOSTID: [u8; 16] = [0x42; 16];
pub(crate) const BLOCKS: u64 = 64;

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

pub(crate) fn null() -> SglDesc {
    crate::wire::sqe::SqeRepr::new(0, Cid(0), Nsid(0)).sgl1
}
