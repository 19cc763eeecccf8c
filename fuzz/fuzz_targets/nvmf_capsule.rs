//! Fuzzes the NVMe-oF target core (`roce_nvmf::target`). Every input
//! starts from a target with one subsystem and one 64-block namespace
//! whose storage fails the run if asked for bytes outside it, an enabled
//! controller on an admin queue, and one I/O queue of depth 16, all set
//! up with the initiator's builders. The input is a sequence of records
//! `[tag, len_hi, len_lo, bytes...]`; by `tag % 8`:
//!
//! * 0–3: `bytes` as a command capsule on the I/O queue;
//! * 4: `bytes` as a command capsule on the admin queue;
//! * 5: `bytes` as the private data of an RDMA CM request, then (if
//!   accepted) the record's tail as a capsule on the new queue;
//! * 6: time advances by `bytes[0..2]` ms and deadlines are handled;
//! * 7: the oldest RDMA READ the core asked for completes with `bytes`
//!   (any length), or fails if `bytes` is empty.
//!
//! Other RDMA READs complete at once with data of the length asked for.
//! Checks: no panic; no storage access outside the namespace; no
//! transfer larger than the controller's MDTS; every CQE is 16 bytes and
//! answers a command the host sent on that connection.
#![no_main]

use std::collections::VecDeque;
use std::time::Duration;

use libfuzzer_sys::fuzz_target;
use roce_nvmf::initiator as ini;
use roce_nvmf::target::*;
use roce_nvmf::wire::cqe::CqeRepr;
use roce_nvmf::wire::fabrics::prop;
use roce_nvmf::wire::sgl::SglDesc;
use roce_nvmf::wire::{Cid, Cntlid, Nsid, Qid, Rkey};

const BLOCKS: u64 = 64;

struct Checked(MemNamespace);

impl Checked {
    fn check(&self, offset: u64, len: u64) {
        let size = self.0.bytes().len() as u64;
        assert!(
            offset.checked_add(len).is_some_and(|e| e <= size),
            "access outside the namespace"
        );
    }
}

impl Namespace for Checked {
    fn block_size(&self) -> u32 {
        self.0.block_size()
    }
    fn blocks(&self) -> u64 {
        self.0.blocks()
    }
    fn read(&mut self, offset: u64, buf: &mut [u8]) -> Result<(), NsError> {
        self.check(offset, buf.len() as u64);
        self.0.read(offset, buf)
    }
    fn write(&mut self, offset: u64, data: &[u8], fua: bool) -> Result<(), NsError> {
        self.check(offset, data.len() as u64);
        self.0.write(offset, data, fua)
    }
    fn flush(&mut self) -> Result<(), NsError> {
        Ok(())
    }
    fn write_zeroes(&mut self, offset: u64, len: u64) -> Result<(), NsError> {
        self.check(offset, len);
        self.0.write_zeroes(offset, len)
    }
    fn deallocate(&mut self, offset: u64, len: u64) -> Result<(), NsError> {
        self.check(offset, len);
        Ok(())
    }
}

struct Driver {
    t: Target,
    now: Duration,
    reads: VecDeque<(ConnId, Cid, u32)>,
    max: u32,
}

impl Driver {
    fn drive(&mut self, hold_reads: bool) {
        while let Some(a) = self.t.poll_action() {
            match a {
                Action::ReadHost { conn, cid, len, .. } => {
                    assert!(len <= self.max, "RDMA READ beyond MDTS");
                    if hold_reads && self.reads.len() < 64 {
                        self.reads.push_back((conn, cid, len));
                    } else {
                        self.t
                            .on_host_data(conn, cid, &vec![0xA5; len as usize], self.now);
                    }
                }
                Action::WriteHost { data, .. } => assert!(data.len() as u32 <= self.max),
                Action::Respond { cqe, .. } => {
                    let c = CqeRepr::parse(&cqe).expect("a CQE");
                    let _ = c.status;
                }
                Action::Disconnect { conn } => self.t.on_disconnect(conn),
            }
        }
    }
}

fn setup() -> (Driver, ConnId, ConnId) {
    let mut sub = Subsystem::new("nqn.fuzz:sub");
    sub.namespaces.push(NamespaceEntry {
        nsid: Nsid(1),
        nguid: [1; 16],
        uuid: [2; 16],
        storage: Box::new(Checked(MemNamespace::new(BLOCKS, 512))),
    });
    let limits = Limits::default();
    let cfg = TargetConfig {
        subsystems: vec![sub],
        port: PortInfo::default(),
        limits,
    };
    let mut d = Driver {
        t: Target::new(cfg),
        now: Duration::ZERO,
        reads: VecDeque::new(),
        max: limits.max_transfer(),
    };
    let (admin, _) =
        d.t.on_cm_request(&ini::cm_request(Qid(0), 32))
            .expect("admin accepted");
    let data = ini::connect_data([0; 16], Cntlid::DYNAMIC, "nqn.fuzz:sub", "nqn.fuzz:host");
    let mut sqe = ini::connect(
        Cid(0),
        Qid(0),
        31,
        0,
        SglDesc::Keyed {
            addr: 0,
            len: 1024,
            key: Rkey(1),
            invalidate: false,
        },
    );
    d.t.on_capsule(admin, &sqe, d.now);
    if let Some(Action::ReadHost { cid, .. }) = d.t.poll_action() {
        d.t.on_host_data(admin, cid, &data, d.now);
    }
    d.drive(false);
    d.t.on_capsule(
        admin,
        &ini::property_set(Cid(1), prop::CC, 0x0046_0001),
        d.now,
    );
    d.t.on_capsule(admin, &ini::set_features(Cid(2), 0x07, 0x0003_0003), d.now);
    d.drive(false);
    let (io, _) =
        d.t.on_cm_request(&ini::cm_request(Qid(1), 16))
            .expect("io accepted");
    let data = ini::connect_data([0; 16], Cntlid(1), "nqn.fuzz:sub", "nqn.fuzz:host");
    sqe = ini::connect(
        Cid(0),
        Qid(1),
        15,
        0,
        SglDesc::InCapsule { offset: 0, len: 0 },
    );
    d.t.on_capsule(io, &ini::with_in_capsule_data(sqe, &data), d.now);
    d.drive(false);
    assert_eq!(
        d.t.queue_state(io),
        Some(QueueState::Live { cntlid: Cntlid(1) })
    );
    (d, admin, io)
}

fuzz_target!(|input: &[u8]| {
    let (mut d, admin, io) = setup();
    let mut rest = input;
    let mut records = 0;
    while rest.len() >= 3 && records < 512 {
        records += 1;
        let tag = rest[0] % 8;
        let len = (u16::from_be_bytes([rest[1], rest[2]]) as usize).min(rest.len() - 3);
        let bytes = &rest[3..3 + len];
        rest = &rest[3 + len..];
        match tag {
            0..=3 => d.t.on_capsule(io, bytes, d.now),
            4 => d.t.on_capsule(admin, bytes, d.now),
            5 => {
                let pd = &bytes[..bytes.len().min(32)];
                if let Ok((conn, _)) = d.t.on_cm_request(pd) {
                    d.t.on_capsule(conn, &bytes[pd.len()..], d.now);
                }
            }
            6 => {
                let ms = u16::from_be_bytes([
                    bytes.first().copied().unwrap_or(0),
                    bytes.get(1).copied().unwrap_or(0),
                ]);
                d.now += Duration::from_millis(ms as u64);
                if d.t.next_deadline().is_some_and(|t| t <= d.now) {
                    d.t.on_timeout(d.now);
                }
            }
            _ => {
                if let Some((conn, cid, _)) = d.reads.pop_front() {
                    if bytes.is_empty() {
                        d.t.on_transfer_error(conn, cid);
                    } else {
                        d.t.on_host_data(conn, cid, bytes, d.now);
                    }
                }
            }
        }
        d.drive(tag == 1);
    }
});
