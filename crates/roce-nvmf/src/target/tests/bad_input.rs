//! Every bad input gets the status the specification names.

use super::sim::*;
use crate::initiator as ini;
use crate::target::*;
use crate::wire::cm::{CmReject, RejectStatus};
use crate::wire::fabrics::prop;
use crate::wire::sgl::SglDesc;
use crate::wire::status::Status;
use crate::wire::{Cid, Cntlid, Nsid, Qid};

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
fn pending_host_data_is_bounded() {
    let mut cfg = config();
    cfg.limits.max_pending_host_data = 1024;
    let mut s = Sim::new(cfg);
    let (_admin, io, _) = s.io_ready(8);
    // A second controller with its own I/O queue, for the end.
    let (admin2, cntlid2) = s.enabled_admin();
    let r = s.cmd(admin2, &ini::set_features(Cid(2), 0x07, 0));
    assert_eq!(r.status, Status::SUCCESS);
    let (io2, c) = s.connect_io(cntlid2, 1, 8);
    assert_eq!(c.status, Status::SUCCESS);

    s.stall_reads = true;
    let two = s.buf(vec![1; 1024], false);
    let one = s.buf(vec![2; 512], false);
    assert!(s
        .send(io, &ini::write(Cid(1), Nsid(1), 0, 2, false, two))
        .is_none());
    // 1024 bytes already asked for: a further RDMA READ would pass the bound.
    let r = s.cmd(io, &ini::write(Cid(2), Nsid(1), 4, 1, false, one));
    assert_eq!(r.status, Status::COMMAND_INTERRUPTED);
    assert!(!r.status.dnr, "the host may retry");
    // In-capsule data needs no RDMA READ and is not held back.
    let w = ini::write(Cid(3), Nsid(1), 5, 1, false, null());
    assert_eq!(
        s.cmd(io, &ini::with_in_capsule_data(w, &[3; 512])).status,
        Status::SUCCESS
    );
    // Once the data arrives, the retry goes through.
    s.stall_reads = false;
    let (c, cid) = s.stalled.pop().unwrap();
    s.t.on_host_data(c, cid, &[1; 1024], s.now);
    s.drive();
    assert_eq!(
        s.cmd(io, &ini::write(Cid(2), Nsid(1), 4, 1, false, one))
            .status,
        Status::SUCCESS
    );
    // A queue that goes away with data pending gives its share back.
    s.stall_reads = true;
    assert!(s
        .send(io, &ini::write(Cid(4), Nsid(1), 0, 2, false, two))
        .is_none());
    let r = s.cmd(io2, &ini::write(Cid(5), Nsid(1), 0, 1, false, one));
    assert_eq!(r.status, Status::COMMAND_INTERRUPTED);
    s.t.on_disconnect(io);
    s.stalled.clear();
    assert!(s
        .send(io2, &ini::write(Cid(5), Nsid(1), 0, 2, false, two))
        .is_none());
    assert_eq!(s.stalled.len(), 1, "the bound was given back");
}

#[test]
fn writes_are_durable_with_the_write_cache_off() {
    use std::sync::{Arc, Mutex};
    struct Fua(MemNamespace, Arc<Mutex<Vec<bool>>>);
    impl Namespace for Fua {
        fn block_size(&self) -> u32 {
            self.0.block_size()
        }
        fn blocks(&self) -> u64 {
            self.0.blocks()
        }
        fn read(&mut self, o: u64, b: &mut [u8]) -> Result<(), NsError> {
            self.0.read(o, b)
        }
        fn write(&mut self, o: u64, d: &[u8], fua: bool) -> Result<(), NsError> {
            self.1.lock().unwrap().push(fua);
            self.0.write(o, d, fua)
        }
        fn flush(&mut self) -> Result<(), NsError> {
            Ok(())
        }
    }
    let seen = Arc::new(Mutex::new(Vec::new()));
    let mut cfg = config();
    cfg.subsystems[0].namespaces[0].storage =
        Box::new(Fua(MemNamespace::new(BLOCKS, 512), seen.clone()));
    let mut s = Sim::new(cfg);
    let (admin, io, _) = s.io_ready(8);
    let w = |cid| {
        ini::with_in_capsule_data(
            ini::write(Cid(cid), Nsid(1), 0, 1, false, null()),
            &[1; 512],
        )
    };
    assert_eq!(s.cmd(io, &w(1)).status, Status::SUCCESS);
    // Volatile Write Cache feature (06h), WCE = 0.
    assert_eq!(
        s.cmd(admin, &ini::set_features(Cid(9), 0x06, 0)).status,
        Status::SUCCESS
    );
    assert_eq!(s.cmd(admin, &ini::get_features(Cid(9), 0x06)).dw0, 0);
    assert_eq!(s.cmd(io, &w(2)).status, Status::SUCCESS);
    assert_eq!(*seen.lock().unwrap(), vec![false, true]);
}
