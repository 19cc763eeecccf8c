//! Region memory that faults under the engine's copy (issue 33: a program
//! frees, unmaps or protects memory it registered): every engine access
//! gets the IBTA outcome of a refused access, and the region is revoked.
//!
//! * WRITE, READ and atomics aimed at it: a remote access error NAK
//!   (IBTA Vol 1 §9.7.5.1.5, C9-85), `RemAccessErr` at the requester.
//! * A SEND gathering from it, or a READ response landing in it:
//!   `LocProtErr` on the send queue's WR (§11.6.2).
//! * A SEND landing in a receive on it: `LocProtErr` on the receive and a
//!   remote operational error NAK, `RemOpErr` at the requester (what the
//!   responder does for a bad receive L_Key; docs/protocol.md).

mod common;

use common::*;
use roce_core::*;

/// Memory whose every access faults, as a page the program unmapped does.
struct Gone(usize);

impl RegionMemory for Gone {
    fn len(&self) -> usize {
        self.0
    }
    fn read(&self, _offset: usize, _out: &mut [u8]) -> Result<(), MemFault> {
        Err(MemFault)
    }
    fn write(&mut self, _offset: usize, _data: &[u8]) -> Result<(), MemFault> {
        Err(MemFault)
    }
}

const GONE_VA: u64 = 0x7000_0000;

fn all_rights() -> Access {
    Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ | Access::REMOTE_ATOMIC
}

/// Registers a faulting region of 4 KiB on host `h`.
fn gone(w: &mut World, h: usize) -> MrKeys {
    let pd = w.hosts[h].pd;
    w.hosts[h]
        .dev
        .reg_mr(pd, GONE_VA, Box::new(Gone(4096)), all_rights())
        .unwrap()
}

/// The region is revoked: a later access fails at its key check.
fn assert_revoked(w: &World, h: usize, k: MrKeys) {
    let mut b = [0u8; 1];
    assert_eq!(
        w.hosts[h].dev.mr_read(k, w.hosts[h].pd, GONE_VA, &mut b),
        Err(VerbsError::Access(AccessError::BadKey))
    );
}

#[test]
fn remote_operations_on_faulting_memory_get_a_remote_access_error() {
    let ops = [
        SendOp::Write,
        SendOp::Read,
        SendOp::FetchAdd { add: 1 },
        SendOp::CompareSwap {
            compare: 0,
            swap: 1,
        },
    ];
    for op in ops {
        let mut w = World::new(1 << 16);
        let (qa, _qb) = w.connect(QpType::Rc, 1024);
        let k = gone(&mut w, 1);
        let len = if matches!(op, SendOp::Write | SendOp::Read) {
            64
        } else {
            8
        };
        let sge = w.hosts[0].sge(0, len);
        let wr = SendWr::rdma(1, op, [sge], GONE_VA, k.rkey);
        w.hosts[0].dev.post_send(qa, wr).unwrap();
        w.settle(10_000);
        assert_eq!(
            statuses(&w.hosts[0].poll())[0],
            (1, WcStatus::RemAccessErr),
            "{op:?}"
        );
        assert_revoked(&w, 1, k);
    }
}

#[test]
fn a_send_gathering_from_faulting_memory_completes_with_a_local_protection_error() {
    let mut w = World::new(1 << 16);
    let (qa, qb) = w.connect(QpType::Rc, 1024);
    let k = gone(&mut w, 0);
    recv(&mut w, 1, qb, 70, 0, 64);
    let sge = Sge {
        addr: GONE_VA,
        length: 64,
        lkey: k.lkey,
    };
    w.hosts[0]
        .dev
        .post_send(qa, SendWr::send(7, [sge]))
        .unwrap();
    w.settle(10_000);
    assert_eq!(statuses(&w.hosts[0].poll())[0], (7, WcStatus::LocProtErr));
    assert_revoked(&w, 0, k);
}

#[test]
fn read_responses_landing_in_faulting_memory_are_a_local_protection_error() {
    let mut w = World::new(1 << 16);
    let (qa, _qb) = w.connect(QpType::Rc, 1024);
    let k = gone(&mut w, 0);
    let sge = Sge {
        addr: GONE_VA,
        length: 64,
        lkey: k.lkey,
    };
    let (va, rkey) = (w.hosts[1].base, w.hosts[1].mr.rkey);
    let wr = SendWr::rdma(1, SendOp::Read, [sge], va, rkey);
    w.hosts[0].dev.post_send(qa, wr).unwrap();
    w.settle(10_000);
    assert_eq!(statuses(&w.hosts[0].poll())[0], (1, WcStatus::LocProtErr));
    assert_revoked(&w, 0, k);
}

#[test]
fn a_send_into_a_faulting_receive_is_a_local_protection_error_and_a_nak() {
    let mut w = World::new(1 << 16);
    let (qa, qb) = w.connect(QpType::Rc, 1024);
    let k = gone(&mut w, 1);
    let sge = Sge {
        addr: GONE_VA,
        length: 64,
        lkey: k.lkey,
    };
    w.hosts[1]
        .dev
        .post_recv(
            qb,
            RecvWr {
                wr_id: 70,
                sgl: vec![sge].into(),
            },
        )
        .unwrap();
    let src = w.hosts[0].sge(0, 64);
    w.hosts[0]
        .dev
        .post_send(qa, SendWr::send(7, [src]))
        .unwrap();
    w.settle(10_000);
    assert_eq!(statuses(&w.hosts[1].poll())[0], (70, WcStatus::LocProtErr));
    assert_eq!(statuses(&w.hosts[0].poll())[0], (7, WcStatus::RemOpErr));
    assert_revoked(&w, 1, k);
}

#[test]
fn the_table_reports_a_fault_and_revokes_the_region() {
    let mut t = MrTable::default();
    let k = t
        .register(PdId(1), GONE_VA, Box::new(Gone(64)), all_rights())
        .unwrap();
    let span = t
        .check(k.lkey.value(), PdId(1), GONE_VA, 8, Access::NONE)
        .unwrap();
    assert_eq!(t.read_u64(span), Err(AccessError::Fault));
    assert_eq!(
        t.check(k.lkey.value(), PdId(1), GONE_VA, 8, Access::NONE),
        Err(AccessError::BadKey)
    );
    // A write fault revokes as well; a re-registration with new memory
    // makes the region valid again.
    let k = t
        .register(PdId(1), GONE_VA, Box::new(Gone(64)), all_rights())
        .unwrap();
    let span = t
        .check(k.lkey.value(), PdId(1), GONE_VA, 8, Access::NONE)
        .unwrap();
    assert_eq!(t.write_u64(span, 1), Err(AccessError::Fault));
    assert_eq!(
        t.check(k.lkey.value(), PdId(1), GONE_VA, 8, Access::NONE),
        Err(AccessError::BadKey)
    );
    t.reregister(k.lkey, None, None, Some((GONE_VA, Box::new(vec![0u8; 64]))))
        .unwrap();
    let span = t
        .check(k.lkey.value(), PdId(1), GONE_VA, 8, Access::NONE)
        .unwrap();
    assert_eq!(t.read_u64(span), Ok(0));
}
