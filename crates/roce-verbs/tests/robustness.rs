//! Robustness of the verbs layer: the context dropped on its own progress
//! thread, a progress thread that dies, iterators run outside the engine
//! lock, CQ arming and overflow events, CM attempts given up and listeners
//! dropped, SRQ destruction and the memory an SRQ receive holds.

mod common;

use std::io;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use common::*;
use roce_io::{Backend, Nanos, PacketBatch};
use roce_verbs::*;

/// Panics seen on any thread (message and thread name).
static PANICS: Mutex<Vec<String>> = Mutex::new(Vec::new());

fn record_panics() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let prev = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let name = thread::current().name().unwrap_or("?").to_string();
            if name == "roce-progress" {
                PANICS.lock().unwrap().push(format!("[{name}] {info}"));
            }
            prev(info);
        }));
    });
}

/// Panics recorded so far whose message contains `what`.
fn panics_with(what: &str) -> Vec<String> {
    PANICS
        .lock()
        .unwrap()
        .iter()
        .filter(|p| p.contains(what))
        .cloned()
        .collect()
}

/// A fabric endpoint that, once armed, stalls in `poll_at` (called by the
/// progress thread's step after it has collected channel events and before
/// it drops them) in the step right after a datagram arrived; or panics
/// there, with `panic`.
struct Gate<B> {
    inner: B,
    stage: Arc<AtomicU8>, // 0 off, 1 armed, 2 got a datagram, 3 done
    window: Mutex<Option<mpsc::Sender<()>>>,
    panic: bool,
}

impl<B: Backend> Backend for Gate<B> {
    fn local_addrs(&self) -> &[IpAddr] {
        self.inner.local_addrs()
    }
    fn send(&mut self, now: Nanos, b: &PacketBatch) -> io::Result<usize> {
        self.inner.send(now, b)
    }
    fn recv(&mut self, now: Nanos, b: &mut PacketBatch) -> io::Result<usize> {
        let n = self.inner.recv(now, b)?;
        if n > 0 {
            let _ = self
                .stage
                .compare_exchange(1, 2, Ordering::SeqCst, Ordering::SeqCst);
        }
        Ok(n)
    }
    fn poll_at(&self) -> Option<Nanos> {
        if self
            .stage
            .compare_exchange(2, 3, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok()
        {
            if self.panic {
                panic!("backend bug");
            }
            if let Some(tx) = self.window.lock().unwrap().take() {
                let _ = tx.send(());
            }
            thread::sleep(Duration::from_millis(500));
        }
        self.inner.poll_at()
    }
}

fn gated(
    fabric: &roce_io::Fabric,
    addr: &str,
    panic: bool,
) -> (Context, Arc<AtomicU8>, mpsc::Receiver<()>) {
    let stage = Arc::new(AtomicU8::new(0));
    let (tx, rx) = mpsc::channel();
    let s = stage.clone();
    let ctx = Context::open_fabric_with(
        fabric,
        DeviceConfig::new(addr.parse().unwrap()),
        move |ep| Gate {
            inner: ep,
            stage: s,
            window: Mutex::new(Some(tx)),
            panic,
        },
    )
    .unwrap();
    (ctx, stage, rx)
}

/// A UD QP on `ctx` with its CQ (on `ch`).
fn ud(
    ctx: &Context,
    ch: Option<&CompletionChannel>,
) -> (ProtectionDomain, CompletionQueue, QueuePair) {
    let pd = ctx.alloc_pd();
    let cq = ctx.create_cq(16, ch).unwrap();
    let qp = pd
        .create_qp(&QpInitAttr::new(QpType::Ud, &cq, &cq))
        .unwrap();
    qp.ready_ud(Psn::new(1), &ConnectOptions::default())
        .unwrap();
    (pd, cq, qp)
}

/// The progress thread may hold the last reference to a completion
/// channel (it upgrades it to raise the event), and so to the context:
/// the context is then dropped on its own progress thread, which must not
/// settle or join itself (it used to panic: "failed to join thread").
#[test]
fn last_context_reference_dropped_on_the_progress_thread() {
    record_panics();
    let fabric = roce_io::Fabric::new();
    let (a, stage, window) = gated(&fabric, "10.0.0.1", false);
    let b = Context::open_fabric(&fabric, "10.0.0.2".parse().unwrap()).unwrap();
    let ch = a.create_comp_channel();
    let (pa, ca, qa) = ud(&a, Some(&ch));
    let (pb, cb, qb) = ud(&b, None);
    qa.post_recv_owned(1, vec![0u8; 256]).unwrap();
    ca.req_notify(false).unwrap();
    stage.store(1, Ordering::SeqCst);
    let ah = pb.create_ah(AhAttr::new(a.addrs()[0])).unwrap();
    qb.post_send_ud(
        SendWr::send(1, []),
        &ah,
        qa.qpn(),
        ConnectOptions::default().qkey,
    )
    .unwrap();
    assert!(one(&cb).is_success());
    window
        .recv_timeout(WAIT)
        .expect("A's progress thread took the SEND");
    // A's progress thread now holds the channel; the application drops
    // everything of A.
    let t = Instant::now();
    drop((qa, ca, ch, pa, a));
    assert!(
        t.elapsed() < Duration::from_secs(5),
        "the drops took {:?}",
        t.elapsed()
    );
    thread::sleep(Duration::from_secs(1));
    // (Tests run in parallel: the other test's deliberate "backend bug"
    // panic may be recorded too.)
    let panics = panics_with("join");
    assert!(panics.is_empty(), "{panics:#?}");
}

/// A panic on the progress thread (here a backend's) is reported as
/// `DeviceFatal` (it used to end the thread silently: the context kept
/// accepting work while nothing delivered what arrived).
#[test]
fn a_dead_progress_thread_is_reported() {
    record_panics();
    let fabric = roce_io::Fabric::new();
    let (a, stage, _window) = gated(&fabric, "10.0.0.1", true);
    let b = Context::open_fabric(&fabric, "10.0.0.2".parse().unwrap()).unwrap();
    let (_pa, _ca, qa) = ud(&a, None);
    let (pb, cb, qb) = ud(&b, None);
    stage.store(1, Ordering::SeqCst);
    let ah = pb.create_ah(AhAttr::new(a.addrs()[0])).unwrap();
    let qkey = ConnectOptions::default().qkey;
    // A datagram (dropped: no receive posted) reaches A's progress
    // thread, whose backend then panics.
    qb.post_send_ud(SendWr::send(1, []), &ah, qa.qpn(), qkey)
        .unwrap();
    assert!(one(&cb).is_success());
    let fatal = a.get_async_event(Some(Duration::from_secs(5)));
    assert_eq!(fatal, Some(AsyncEvent::DeviceFatal));
    assert!(!panics_with("backend bug").is_empty());
}

/// `post_send_list` runs the caller's iterator before it locks the
/// engine: an iterator that touches the context (fills the region it posts
/// from) used to deadlock.
#[test]
fn post_send_list_runs_the_callers_iterator_outside_the_engine_lock() {
    let (a, b) = pair(QpType::Rc);
    let rx = b.pd.reg_mr(vec![0u8; 4 * 64], Access::LOCAL_WRITE).unwrap();
    for i in 0..4u64 {
        b.qp.post_recv(RecvWr {
            wr_id: i,
            sgl: vec![rx.sge(i * 64, 64)].into(),
        })
        .unwrap();
    }
    let tx = Arc::new(a.pd.reg_mr(vec![0u8; 4 * 64], Access::NONE).unwrap());
    let (done_tx, done_rx) = mpsc::channel();
    let (qp, m) = (a.qp.clone(), tx.clone());
    thread::spawn(move || {
        let wrs = (0..4u64).map(|i| {
            m.write(i * 64, &[i as u8; 64]).unwrap();
            SendWr::send(i, [m.sge(i * 64, 64)])
        });
        let r = qp.post_send_list(wrs);
        let _ = done_tx.send(r);
    });
    let r = done_rx.recv_timeout(Duration::from_secs(3));
    assert!(r.is_ok(), "post_send_list hung: {r:?}");
}

/// `req_notify(false)` then `req_notify(true)`: the CQ stays armed for the
/// next completion (as rxe), so an unsolicited completion raises the
/// event.
#[test]
fn a_solicited_arm_does_not_downgrade_a_next_completion_arm() {
    let fabric = roce_io::Fabric::new();
    let a = Context::open_fabric(&fabric, "10.0.0.1".parse().unwrap()).unwrap();
    let b = Context::open_fabric(&fabric, "10.0.0.2".parse().unwrap()).unwrap();
    let ch = a.create_comp_channel();
    let (_pa, ca, qa) = ud(&a, Some(&ch));
    let (pb, cb, qb) = ud(&b, None);
    qa.post_recv_owned(1, vec![0u8; 256]).unwrap();
    ca.req_notify(false).unwrap();
    ca.req_notify(true).unwrap();
    let ah = pb.create_ah(AhAttr::new(a.addrs()[0])).unwrap();
    qb.post_send_ud(
        SendWr::send(1, []),
        &ah,
        qa.qpn(),
        ConnectOptions::default().qkey,
    )
    .unwrap();
    assert!(one(&cb).is_success());
    let ev = ch.get_event(Some(Duration::from_secs(1)));
    assert!(ev.is_some(), "no event for the (unsolicited) completion");
}

const PORT: u16 = 18600;

fn rc_qp(ctx: &Context) -> (ProtectionDomain, CompletionQueue, QueuePair) {
    let pd = ctx.alloc_pd();
    let cq = ctx.create_cq(16, None).unwrap();
    let qp = pd
        .create_qp(&QpInitAttr::new(QpType::Rc, &cq, &cq))
        .unwrap();
    (pd, cq, qp)
}

/// A `cm_connect` that times out gives the attempt up (REJ): a server
/// that gets to the request late cannot connect the QP behind the
/// caller's back.
#[test]
fn a_timed_out_cm_connect_is_given_up() {
    let fabric = roce_io::Fabric::new();
    let a = Context::open_fabric(&fabric, "10.0.0.1".parse().unwrap()).unwrap();
    let b = Context::open_fabric(&fabric, "10.0.0.2".parse().unwrap()).unwrap();
    let listener = b.cm_listen(PORT).unwrap();
    let (_pa, _ca, qa) = rc_qp(&a);
    let (_pb, _cb, qb) = rc_qp(&b);
    let e = qa
        .cm_connect(
            "10.0.0.2".parse().unwrap(),
            PORT,
            &ConnParam::default(),
            Duration::from_millis(300),
        )
        .unwrap_err();
    assert_eq!(e, CmError::TimedOut);
    assert_eq!(qa.state(), QpState::Init);
    // The server gets to the request late and tries to accept it.
    let accepted = listener
        .get_request(Duration::from_millis(500))
        .map(|r| r.accept(&qb, &ConnParam::default(), Duration::from_millis(500)));
    thread::sleep(Duration::from_millis(100));
    assert!(
        !matches!(accepted, Ok(Ok(_))),
        "the server connected to a given-up request"
    );
    assert_eq!(
        qa.state(),
        QpState::Init,
        "A's QP was connected after the timeout"
    );
}

/// Dropping a listener rejects the requests it had queued: the active side
/// hears at once instead of waiting out its timeout.
#[test]
fn dropping_a_listener_rejects_its_queued_requests() {
    let fabric = roce_io::Fabric::new();
    let a = Context::open_fabric(&fabric, "10.0.0.1".parse().unwrap()).unwrap();
    let b = Context::open_fabric(&fabric, "10.0.0.2".parse().unwrap()).unwrap();
    let listener = b.cm_listen(PORT + 1).unwrap();
    let (_pa, _ca, qa) = rc_qp(&a);
    let client = thread::spawn(move || {
        let t = Instant::now();
        let r = qa.cm_connect(
            "10.0.0.2".parse().unwrap(),
            PORT + 1,
            &ConnParam::default(),
            Duration::from_secs(4),
        );
        (r.map(|_| ()), t.elapsed())
    });
    thread::sleep(Duration::from_millis(300)); // the REQ is queued at B
    drop(listener);
    let (r, took) = client.join().unwrap();
    assert!(
        matches!(r, Err(CmError::Rejected { .. })),
        "{r:?} after {took:?}"
    );
    assert!(
        took < Duration::from_secs(2),
        "rejected only after {took:?}"
    );
}

#[test]
fn zero_length_raw_region_at_null() {
    let fabric = roce_io::Fabric::new();
    let a = Context::open_fabric(&fabric, "10.0.0.1".parse().unwrap()).unwrap();
    let pd = a.alloc_pd();
    // SAFETY: zero bytes at null, as the contract allows.
    let mr = unsafe { pd.reg_mr_raw(std::ptr::null_mut(), 0, Access::LOCAL_WRITE) }.unwrap();
    assert_eq!(mr.to_vec().unwrap(), Vec::<u8>::new());
    mr.write(0, &[]).unwrap();
}

/// An overflowed CQ raises one CqError (as IBV_EVENT_CQ_ERR), not one per
/// later completion, and the QP whose completion was lost goes to error.
#[test]
fn an_overflowed_cq_raises_one_error_event() {
    let fabric = roce_io::Fabric::new();
    let a = Context::open_fabric(&fabric, "10.0.0.1".parse().unwrap()).unwrap();
    let b = Context::open_fabric(&fabric, "10.0.0.2".parse().unwrap()).unwrap();
    let pa = a.alloc_pd();
    let ca = a.create_cq(1, None).unwrap();
    let qa = pa
        .create_qp(&QpInitAttr::new(QpType::Ud, &ca, &ca))
        .unwrap();
    qa.ready_ud(Psn::new(1), &ConnectOptions::default())
        .unwrap();
    let (pb, cb, qb) = ud(&b, None);
    for i in 0..6 {
        qa.post_recv_owned(i, vec![0u8; 256]).unwrap();
    }
    let ah = pb.create_ah(AhAttr::new(a.addrs()[0])).unwrap();
    let qkey = ConnectOptions::default().qkey;
    for i in 0..6 {
        qb.post_send_ud(SendWr::send(i, []), &ah, qa.qpn(), qkey)
            .unwrap();
        assert!(one(&cb).is_success());
    }
    thread::sleep(Duration::from_millis(200));
    let mut evs = Vec::new();
    while let Some(e) = a.get_async_event(Some(Duration::from_millis(50))) {
        evs.push(e);
    }
    // One CQ error, and the QP whose completion was lost is in error.
    assert_eq!(
        evs,
        vec![AsyncEvent::CqError(ca.id()), AsyncEvent::QpFatal(qa.qpn())]
    );
}

/// Dropping the last SRQ handle destroys it and releases the regions of
/// the receives still posted on it.
#[test]
fn a_dropped_srq_releases_its_receives() {
    let fabric = roce_io::Fabric::new();
    let a = Context::open_fabric(&fabric, "10.0.0.1".parse().unwrap()).unwrap();
    let pd = a.alloc_pd();
    let mr = pd.reg_mr(vec![0u8; 64], Access::LOCAL_WRITE).unwrap();
    let srq = pd.create_srq(4).unwrap();
    srq.post_recv(RecvWr {
        wr_id: 1,
        sgl: vec![mr.sge_all()].into(),
    })
    .unwrap();
    drop(srq);
    let r = mr.into_inner();
    assert!(r.is_ok(), "{:?}", r.map(|_| ()).map_err(|e| e.error));
}

/// Lets only the first datagram through once armed (stage 1), then drops
/// everything.
struct FirstOnly<B> {
    inner: B,
    stage: Arc<AtomicU8>,
}

impl<B: Backend> Backend for FirstOnly<B> {
    fn local_addrs(&self) -> &[IpAddr] {
        self.inner.local_addrs()
    }
    fn send(&mut self, now: Nanos, b: &PacketBatch) -> io::Result<usize> {
        match self.stage.load(Ordering::SeqCst) {
            0 => self.inner.send(now, b),
            1 => {
                self.stage.store(2, Ordering::SeqCst);
                let mut one = PacketBatch::new(1, b.slot_size());
                one.push(b.get(0));
                self.inner.send(now, &one)?;
                Ok(b.len())
            }
            _ => Ok(b.len()),
        }
    }
    fn recv(&mut self, now: Nanos, b: &mut PacketBatch) -> io::Result<usize> {
        self.inner.recv(now, b)
    }
    fn poll_at(&self) -> Option<Nanos> {
        self.inner.poll_at()
    }
}

/// An SRQ receive that a QP has begun filling (first packet of a
/// multi-packet SEND) goes back to the SRQ when that QP is destroyed: it
/// is the SRQ's, and its region stays registered while the SRQ holds it.
/// Once the SRQ is gone too, the region is released, and a peer writing
/// through its old rkey gets a remote access error (the `reg_mr_raw`
/// contract lets the caller free the memory then).
#[test]
fn an_srq_receive_in_progress_goes_back_to_the_srq_on_destroy() {
    let fabric = roce_io::Fabric::new();
    let stage = Arc::new(AtomicU8::new(0));
    let s = stage.clone();
    let a = Context::open_fabric_with(
        &fabric,
        DeviceConfig::new("10.0.0.1".parse().unwrap()),
        move |ep| FirstOnly {
            inner: ep,
            stage: s,
        },
    )
    .unwrap();
    let b = Context::open_fabric(&fabric, "10.0.0.2".parse().unwrap()).unwrap();
    let (pa, pb) = (a.alloc_pd(), b.alloc_pd());
    let (ca, cb) = (
        a.create_cq(64, None).unwrap(),
        b.create_cq(64, None).unwrap(),
    );
    let srq = pb.create_srq(4).unwrap();
    let qa = pa
        .create_qp(&QpInitAttr::new(QpType::Rc, &ca, &ca))
        .unwrap();
    let qb = pb
        .create_qp(&QpInitAttr::new(QpType::Rc, &cb, &cb).srq(&srq))
        .unwrap();
    // A second, ordinary pair for a later RDMA WRITE.
    let qa2 = pa
        .create_qp(&QpInitAttr::new(QpType::Rc, &ca, &ca))
        .unwrap();
    let qb2 = pb
        .create_qp(&QpInitAttr::new(QpType::Rc, &cb, &cb))
        .unwrap();
    let opts = ConnectOptions {
        path_mtu: Some(1024),
        ..ConnectOptions::default()
    };
    for (x, y) in [(&qa, &qb), (&qa2, &qb2)] {
        let (ex, ey) = (x.endpoint(Psn::new(10)), y.endpoint(Psn::new(20)));
        x.connect(ex.psn, &ey, &opts).unwrap();
        y.connect(ey.psn, &ex, &opts).unwrap();
    }
    let mut mem = vec![0u8; 8192];
    // SAFETY: `mem` outlives the context (dropped at the end of the test).
    let rx = unsafe { pb.reg_mr_raw(mem.as_mut_ptr(), mem.len(), ALL) }.unwrap();
    let remote = rx.remote();
    srq.post_recv(RecvWr {
        wr_id: 1,
        sgl: vec![rx.sge_all()].into(),
    })
    .unwrap();
    // A 4 KiB SEND: 4 packets at the 1024-byte MTU; only the first arrives.
    let tx = pa.reg_mr(vec![7u8; 4096], Access::NONE).unwrap();
    stage.store(1, Ordering::SeqCst);
    qa.post_send(SendWr::send(1, [tx.sge_all()])).unwrap();
    thread::sleep(Duration::from_millis(100));
    assert_eq!(srq.len(), 0, "the responder took the SRQ receive");
    // B destroys the QP (no completion is owed for a destroyed QP's
    // receive): the receive is the SRQ's again.
    drop(qb);
    assert_eq!(srq.len(), 1, "the receive went back to the SRQ");
    // B drops the region's handle and the SRQ: by the contract of
    // reg_mr_raw the memory may now be freed.
    drop(rx);
    drop(srq);
    // A peer writes through the old rkey.
    stage.store(0, Ordering::SeqCst);
    let w = pa.reg_mr(vec![0xAAu8; 16], Access::NONE).unwrap();
    qa2.post_send(SendWr::write(2, [w.sge_all()], remote.at(0)))
        .unwrap();
    let c = one(&ca);
    assert_eq!(
        c.status(),
        WcStatus::RemAccessErr,
        "the region was still registered"
    );
    drop((b, cb, qb2, pb));
    // Nothing wrote the memory after its release.
    assert!(mem.iter().all(|&x| x != 0xAA));
}

/// A request the application took before dropping the listener stays
/// its own to accept (as in rdma_cm: destroying the listener leaves the
/// ids it delivered alone).
#[test]
fn a_request_taken_before_the_listener_is_dropped_can_be_accepted() {
    let fabric = roce_io::Fabric::new();
    let a = Context::open_fabric(&fabric, "10.0.0.1".parse().unwrap()).unwrap();
    let b = Context::open_fabric(&fabric, "10.0.0.2".parse().unwrap()).unwrap();
    let listener = b.cm_listen(PORT + 2).unwrap();
    let (_pa, _ca, qa) = rc_qp(&a);
    let (_pb, _cb, qb) = rc_qp(&b);
    let client = thread::spawn(move || {
        let r = qa.cm_connect(
            "10.0.0.2".parse().unwrap(),
            PORT + 2,
            &ConnParam::default(),
            Duration::from_secs(5),
        );
        // The connection is kept (dropping it would disconnect).
        let state = r
            .as_ref()
            .map(|c| c.qp().state())
            .map_err(|e| format!("{e:?}"));
        (state, r)
    });
    let req = listener.get_request(WAIT).unwrap();
    drop(listener);
    let conn = req.accept(&qb, &ConnParam::default(), WAIT);
    assert!(conn.is_ok(), "{:?}", conn.as_ref().err());
    let (state, r) = client.join().unwrap();
    assert_eq!(state, Ok(QpState::Rts));
    drop(r);
}
