//! Memory safety at the RDMA boundary: regions outlive the work requests
//! that reference them; owned buffers come back; raw memory works; the
//! context's thread stops when its last handle goes.

mod common;

use std::time::{Duration, Instant};

use common::*;
use roce_io::FaultConfig;
use roce_verbs::*;

/// B's responses are held 30 ms on the wire, so A's READ is outstanding
/// for that long.
fn slow_responder() -> (Side, Side) {
    let delay = FaultConfig::new(1).delay(30_000_000, 0);
    pair_with(QpType::Rc, None, Some(delay), &ConnectOptions::default())
}

#[test]
fn dereg_is_refused_while_a_wr_is_outstanding() {
    let (a, b) = slow_responder();
    let src = b.pd.reg_mr(pattern(100_000, 4), ALL).unwrap();
    let r = src.remote();
    let local =
        a.pd.reg_mr(vec![0u8; 100_000], Access::LOCAL_WRITE)
            .unwrap();
    a.qp.post_send(SendWr::read(1, [local.sge_all()], r.at(0)))
        .unwrap();
    let err = local.into_inner().unwrap_err();
    assert_eq!(err.error, Error::MrInUse);
    let local = err.mr;
    let c = one(&a.cq);
    assert!(c.is_success(), "{c:?}");
    // The completion was polled: nothing references the region any more.
    assert_eq!(local.into_inner().unwrap(), pattern(100_000, 4));
}

#[test]
fn dropping_a_region_under_an_outstanding_wr_keeps_it_registered() {
    let (a, b) = slow_responder();
    let src = b.pd.reg_mr(pattern(64 * 1024, 8), ALL).unwrap();
    let r = src.remote();
    // A raw region over memory the test keeps, to see what landed after
    // the handle is gone.
    let mut keep = vec![0u8; 64 * 1024];
    // SAFETY: the region is deregistered once its handle is dropped and the
    // READ's completion polled (checked below), before `keep` is read or
    // dropped; nothing touches `keep` meanwhile.
    let local = unsafe {
        a.pd.reg_mr_raw(keep.as_mut_ptr(), keep.len(), Access::LOCAL_WRITE)
    }
    .unwrap();
    let (lkey, sge) = (local.lkey(), local.sge(0, 1));
    let t = Instant::now();
    a.qp.post_send(SendWr::read(7, [local.sge_all()], r.at(0)))
        .unwrap();
    drop(local);
    // The response data lands 30 ms later: into a region that must still be
    // registered, or the READ would fail with a local protection error.
    let c = one(&a.cq);
    assert_eq!((c.wr_id(), c.status()), (7, WcStatus::Success), "{c:?}");
    assert!(
        t.elapsed() >= Duration::from_millis(25),
        "the READ was in flight"
    );
    // Polling released the last reference: the region is gone now.
    assert_eq!(
        a.qp.post_send(SendWr::send(8, [sge])),
        Err(PostError::UnknownLkey(lkey))
    );
    assert_eq!(keep, pattern(64 * 1024, 8));
}

#[test]
fn owned_buffers_come_back_with_their_completions() {
    let (a, b) = pair(QpType::Rc);
    // Receive into an owned buffer, send from one.
    b.qp.post_recv_owned(5, vec![0u8; 1000]).unwrap();
    a.qp.post_send_owned(SendWr::send(1, []), pattern(700, 2))
        .unwrap();
    let mut c = one(&a.cq);
    assert!(c.is_success());
    assert_eq!(c.take_buffer().unwrap(), pattern(700, 2));
    let mut r = one(&b.cq);
    assert_eq!((r.wr_id(), r.byte_len()), (5, 700));
    let got = r.take_buffer().unwrap();
    assert_eq!(got.len(), 1000);
    assert_eq!(&got[..700], &pattern(700, 2)[..]);

    // READ into an owned buffer.
    let remote = b.pd.reg_mr(pattern(5000, 6), ALL).unwrap();
    let rm = remote.remote();
    let wr = SendWr::read(2, [], rm.at(0));
    a.qp.post_send_owned(wr, vec![0u8; 5000]).unwrap();
    let mut c = one(&a.cq);
    assert_eq!((c.wr_id(), c.status()), (2, WcStatus::Success));
    assert_eq!(c.take_buffer().unwrap(), pattern(5000, 6));

    // A refused post hands the buffer back.
    let wr = SendWr::fetch_add(3, [], rm.at(0), 1);
    a.qp.post_send_owned(wr, vec![0u8; 8]).unwrap();
    assert!(one(&a.cq).is_success());
    let err =
        a.qp.post_send_owned(SendWr::fetch_add(4, [], rm.at(0), 1), vec![1; 3])
            .unwrap_err();
    assert_eq!(err.buffer, vec![1; 3]);
    assert!(
        matches!(err.error, PostError::InvalidWr(_)),
        "{:?}",
        err.error
    );
}

#[test]
fn raw_regions_are_zero_copy() {
    let (a, b) = pair(QpType::Rc);
    let mut src = pattern(20_000, 3);
    let mut dst = vec![0u8; 20_000];
    // SAFETY: both vectors outlive the regions (dereg'd below before the
    // vectors are read), and nothing touches them while registered.
    let (ms, md) = unsafe {
        (
            a.pd.reg_mr_raw(src.as_mut_ptr(), src.len(), Access::NONE)
                .unwrap(),
            b.pd.reg_mr_raw(dst.as_mut_ptr(), dst.len(), ALL).unwrap(),
        )
    };
    assert_eq!(ms.addr(), src.as_ptr() as u64);
    assert!(ms.is_raw());
    let r = md.remote();
    a.qp.post_send(SendWr::write(1, [ms.sge_all()], r.at(0)))
        .unwrap();
    assert!(one(&a.cq).is_success());
    let err = md.into_inner().unwrap_err();
    assert_eq!(err.error, Error::NotOwned);
    err.mr.dereg().unwrap();
    ms.dereg().unwrap();
    assert_eq!(dst, src);
}

#[test]
fn dropping_the_last_handle_joins_the_progress_thread() {
    let fabric = roce_io::Fabric::new();
    let addr = "10.0.0.9".parse().unwrap();
    let ctx = Context::open_fabric(&fabric, addr).unwrap();
    let pd = ctx.alloc_pd();
    let cq = ctx.create_cq(16, None).unwrap();
    let qp = pd
        .create_qp(&QpInitAttr::new(QpType::Rc, &cq, &cq))
        .unwrap();
    let mr = pd.reg_mr(vec![1u8; 64], Access::LOCAL_WRITE).unwrap();
    drop((ctx, pd, cq));
    // Objects keep the context alive: its endpoint is still attached.
    assert!(fabric.endpoint(addr).is_err());
    assert_eq!(mr.to_vec().unwrap(), vec![1u8; 64]);
    let t = Instant::now();
    drop(qp);
    drop(mr);
    let took = t.elapsed();
    assert!(took < Duration::from_millis(500), "drop took {took:?}");
    // The thread was joined and the engine and backend dropped: the
    // address is free again.
    assert!(fabric.endpoint(addr).is_ok());
}
