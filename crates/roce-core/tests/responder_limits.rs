//! The responder's rules against a hostile or broken requester (issue
//! 18): SEND with Invalidate reaches only regions that may be invalidated,
//! the QP's remote rights apply to zero-length operations, READ/atomic
//! requests beyond max_dest_rd_atomic are refused, and the responder's
//! output queue does not grow with what the peer sends.

mod common;

use common::*;
use roce_core::*;

fn send_inv(w: &mut World, qa: Qpn, rkey: Rkey) {
    let wr = SendWr {
        op: SendOp::SendWithInv(rkey),
        ..SendWr::send(7, [w.hosts[0].sge(0, 16)])
    };
    w.hosts[0].dev.post_send(qa, wr).unwrap();
}

#[test]
fn send_with_invalidate_cannot_invalidate_an_ordinary_region() {
    let mut w = World::new(1 << 16);
    let (qa, qb) = w.connect(QpType::Rc, 1024);
    // A purely local region on B (no remote rights).
    let pd = w.hosts[1].pd;
    let local = w.hosts[1]
        .dev
        .reg_mr(
            pd,
            0x7000_0000,
            Box::new(vec![5u8; 64]),
            Access::LOCAL_WRITE,
        )
        .unwrap();
    recv(&mut w, 1, qb, 70, 0, 64);
    send_inv(&mut w, qa, local.rkey);
    w.settle(10_000);
    let a = w.hosts[0].poll();
    assert_eq!(statuses(&a)[0], (7, WcStatus::RemInvReqErr));
    let b = w.hosts[1].poll();
    assert_eq!(statuses(&b)[0], (70, WcStatus::RemInvReqErr));
    assert!(!b[0].wc_flags.contains(WcFlags::WITH_INV));
    // The region is still valid.
    let mut out = [0u8; 4];
    w.hosts[1]
        .dev
        .mr_read(local, pd, 0x7000_0000, &mut out)
        .unwrap();
    assert_eq!(out, [5; 4]);

    // The main region (remote rights, but an ordinary registration) too.
    let mut w = World::new(1 << 16);
    let (qa, qb) = w.connect(QpType::Rc, 1024);
    recv(&mut w, 1, qb, 70, 0, 64);
    let rkey = w.hosts[1].mr.rkey;
    send_inv(&mut w, qa, rkey);
    w.settle(10_000);
    assert_eq!(statuses(&w.hosts[0].poll())[0], (7, WcStatus::RemInvReqErr));
    // Still valid: the region reads (an invalidated one would refuse).
    let h = &w.hosts[1];
    assert!(
        h.dev.mr_read(h.mr, h.pd, h.base, &mut [0u8; 4]).is_ok(),
        "region invalidated"
    );

    // A region registered as invalidatable is invalidated.
    let mut w = World::new(1 << 16);
    let (qa, qb) = w.connect(QpType::Rc, 1024);
    let pd = w.hosts[1].pd;
    let fast = w.hosts[1]
        .dev
        .reg_mr_invalidatable(
            pd,
            0x7000_0000,
            Box::new(vec![0u8; 64]),
            Access::LOCAL_WRITE,
        )
        .unwrap();
    recv(&mut w, 1, qb, 70, 0, 64);
    send_inv(&mut w, qa, fast.rkey);
    w.settle(10_000);
    assert_eq!(statuses(&w.hosts[0].poll())[0], (7, WcStatus::Success));
    let b = w.hosts[1].poll();
    assert_eq!(statuses(&b)[0], (70, WcStatus::Success));
    assert_eq!(b[0].invalidated_rkey, fast.rkey);
    let mut out = [0u8; 4];
    assert_eq!(
        w.hosts[1].dev.mr_read(fast, pd, 0x7000_0000, &mut out),
        Err(VerbsError::Access(AccessError::BadKey))
    );
}

#[test]
fn zero_length_operations_need_the_qps_remote_rights() {
    // B's QP grants nothing remote.
    for op in [SendOp::WriteWithImm(0x1234), SendOp::Write, SendOp::Read] {
        let mut w = World::new(1 << 16);
        let (qa, qb) = w.connect_with(QpType::Rc, 1024, |i, a| {
            if i == 1 {
                a.qp_access_flags = Access::LOCAL_WRITE;
            }
        });
        recv(&mut w, 1, qb, 70, 0, 64);
        let (va, rkey) = (w.hosts[1].base, w.hosts[1].mr.rkey);
        let wr = SendWr::rdma(1, op, [], va, rkey);
        w.hosts[0].dev.post_send(qa, wr).unwrap();
        w.settle(10_000);
        let a = w.hosts[0].poll();
        assert_eq!(statuses(&a)[0], (1, WcStatus::RemAccessErr), "{op:?}");
        // No receive was consumed: it is flushed, not completed.
        let b = w.hosts[1].poll();
        assert!(
            b.iter().all(|c| c.status != WcStatus::Success),
            "{op:?}: {b:?}"
        );
    }
}

#[test]
fn reads_beyond_max_dest_rd_atomic_are_invalid_requests() {
    let mut w = World::new(1 << 16);
    // A requester that ignores the responder's limit: 4 READs in flight
    // against max_dest_rd_atomic 1.
    let (qa, _qb) = w.connect_with(QpType::Rc, 1024, |i, a| {
        if i == 0 {
            a.max_rd_atomic = 4;
        } else {
            a.max_dest_rd_atomic = 1;
        }
    });
    for k in 0..4u64 {
        let (va, rkey) = (w.hosts[1].base + k * 64, w.hosts[1].mr.rkey);
        let wr = SendWr::rdma(k, SendOp::Read, [w.hosts[0].sge(k * 64, 64)], va, rkey);
        w.hosts[0].dev.post_send(qa, wr).unwrap();
    }
    w.settle(10_000);
    let s = statuses(&w.hosts[0].poll());
    assert_eq!(s[0], (0, WcStatus::Success));
    assert_eq!(s[1], (1, WcStatus::RemInvReqErr));
    // Within the limit, the same READs all succeed.
    let mut w = World::new(1 << 16);
    let (qa, _qb) = w.connect_with(QpType::Rc, 1024, |_, a| {
        a.max_rd_atomic = 4;
        a.max_dest_rd_atomic = 4;
    });
    for k in 0..4u64 {
        let (va, rkey) = (w.hosts[1].base + k * 64, w.hosts[1].mr.rkey);
        let wr = SendWr::rdma(k, SendOp::Read, [w.hosts[0].sge(k * 64, 64)], va, rkey);
        w.hosts[0].dev.post_send(qa, wr).unwrap();
    }
    w.settle(10_000);
    let s = statuses(&w.hosts[0].poll());
    assert!(s.iter().all(|x| x.1 == WcStatus::Success), "{s:?}");
}

#[test]
fn the_responders_output_is_bounded() {
    let mut w = World::new(1 << 16);
    let (qa, qb) = w.connect(QpType::Rc, 1024);
    // Capture a FETCH_ADD as it leaves A, then replay it to B 5000 times
    // without letting B transmit: each copy is a duplicate whose answer
    // would be queued again.
    let seen = std::rc::Rc::new(std::cell::RefCell::new(Vec::new()));
    let s = seen.clone();
    w.filter = Box::new(move |from, d| {
        if from == 0 && op_of(d) == roce_wire::Operation::FetchAdd {
            *s.borrow_mut() = d.to_vec();
        }
        Verdict::Deliver
    });
    w.post_rdma(qa, SendOp::FetchAdd { add: 1 }, 0, 8, 64);
    w.settle(10_000);
    let atomic = seen.borrow().clone();
    assert!(!atomic.is_empty());
    for _ in 0..5000 {
        w.hosts[1]
            .dev
            .handle_datagram(w.now, &atomic, RxMeta::default());
    }
    let mut buf = vec![0u8; 4400];
    let mut out = 0;
    while w.hosts[1]
        .dev
        .poll_transmit(w.now, &mut buf)
        .datagram()
        .is_some()
    {
        out += 1;
    }
    assert!(out <= 512, "{out} responses queued");
    let c = w.hosts[1].dev.qp_counters(qb).unwrap();
    assert!(c.drop_responder_full >= 5000 - 512, "{c:?}");
    // The counter was added to once.
    let mut v = [0u8; 8];
    let (mr, pd, base) = (w.hosts[1].mr, w.hosts[1].pd, w.hosts[1].base);
    w.hosts[1].dev.mr_read(mr, pd, base + 64, &mut v).unwrap();
    assert_eq!(u64::from_ne_bytes(v), 1);
}
