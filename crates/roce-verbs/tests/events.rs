//! Completion channels and asynchronous events.

mod common;

use std::time::{Duration, Instant};

use common::*;
use roce_verbs::*;

#[test]
fn get_event_wakes_on_a_completion_and_times_out_without_one() {
    let fabric = roce_io::Fabric::new();
    let a = Context::open_fabric(&fabric, "10.0.0.1".parse().unwrap()).unwrap();
    let b = Context::open_fabric(&fabric, "10.0.0.2".parse().unwrap()).unwrap();
    let ch = b.create_comp_channel();
    let (ca, cb) = (
        a.create_cq(16, None).unwrap(),
        b.create_cq(16, Some(&ch)).unwrap(),
    );
    let (pa, pb) = (a.alloc_pd(), b.alloc_pd());
    let qa = pa
        .create_qp(&QpInitAttr::new(QpType::Rc, &ca, &ca))
        .unwrap();
    let qb = pb
        .create_qp(&QpInitAttr::new(QpType::Rc, &cb, &cb))
        .unwrap();
    let (ea, eb) = (qa.endpoint(Psn::new(1)), qb.endpoint(Psn::new(2)));
    qa.connect(ea.psn, &eb, &ConnectOptions::default()).unwrap();
    qb.connect(eb.psn, &ea, &ConnectOptions::default()).unwrap();

    // Nothing armed, nothing happening: times out.
    let t = Instant::now();
    assert!(ch.get_event(Some(Duration::from_millis(50))).is_none());
    assert!(t.elapsed() >= Duration::from_millis(50));

    // Armed; a SEND arrives 20 ms later from another thread.
    qb.post_recv_owned(1, vec![0u8; 64]).unwrap();
    cb.req_notify(false).unwrap();
    let sender = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(20));
        qa.post_send_owned(SendWr::send(1, []), b"wake up".to_vec())
            .unwrap();
        assert!(one(&ca).is_success());
    });
    let t = Instant::now();
    let fired = ch
        .get_event(Some(WAIT))
        .expect("the completion raised an event");
    assert!(t.elapsed() < Duration::from_secs(1));
    assert_eq!(fired, cb);
    assert_eq!(cb.unacked_events(), 1);
    cb.ack_events(1);
    assert_eq!(cb.unacked_events(), 0);
    let mut c = cb.poll_one().unwrap().expect("the event's completion");
    assert_eq!(&c.take_buffer().unwrap()[..7], b"wake up");
    sender.join().unwrap();

    // Not re-armed: no further event.
    assert!(ch.get_event(Some(Duration::from_millis(20))).is_none());
}

#[test]
fn qp_errors_raise_async_events_and_flush() {
    let (a, b) = pair(QpType::Rc);
    assert!(a
        .ctx
        .get_async_event(Some(Duration::from_millis(10)))
        .is_none());
    // A WRITE with a bad rkey is NAKed: the requester QP goes to ERR.
    let src = a.pd.reg_mr(vec![1u8; 16], Access::NONE).unwrap();
    let dst = b.pd.reg_mr(vec![0u8; 16], ALL).unwrap();
    let bad = Rkey::new(dst.rkey().value() ^ 0xff00);
    a.qp.post_send(SendWr::write(
        1,
        [src.sge_all()],
        RemoteAddr::new(dst.addr(), bad),
    ))
    .unwrap();
    let c = one(&a.cq);
    assert_eq!(c.status(), WcStatus::RemAccessErr);
    assert_eq!(
        a.ctx.get_async_event(Some(WAIT)),
        Some(AsyncEvent::QpFatal(a.qp.qpn()))
    );
    assert_eq!(a.qp.state(), QpState::Err);
    // Later posts flush, and their regions are released.
    a.qp.post_send(SendWr::send(2, [src.sge_all()])).unwrap();
    let c = one(&a.cq);
    assert_eq!((c.wr_id(), c.status()), (2, WcStatus::WrFlushErr));
    assert!(src.into_inner().is_ok());
}
