//! The CM that does not wait (`Context::set_cm_sink` and the `*_nowait`
//! calls), as the drop-in librdmacm drives it: every event of a context
//! reaches its sink, in order, and the calls return before the peer
//! answers.

mod common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::*;
use roce_verbs::*;

const PORT: u16 = 18600;

/// A context whose CM events are collected in a list.
fn ctx(fabric: &roce_io::Fabric, addr: &str) -> (Context, Arc<Mutex<Vec<CmEvent>>>) {
    let c = Context::open_fabric(fabric, addr.parse().unwrap()).unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s = seen.clone();
    assert!(c.set_cm_sink(Box::new(move |e| s.lock().unwrap().push(e))));
    // Only the first sink is taken.
    assert!(!c.set_cm_sink(Box::new(|_| {})));
    (c, seen)
}

/// Waits (bounded) until `f` finds what it looks for in `events`.
fn wait_for<T>(events: &Mutex<Vec<CmEvent>>, mut f: impl FnMut(&CmEvent) -> Option<T>) -> T {
    let end = Instant::now() + WAIT;
    loop {
        if let Some(t) = events.lock().unwrap().iter().find_map(&mut f) {
            return t;
        }
        assert!(
            Instant::now() < end,
            "no such event in {:?}",
            events.lock().unwrap()
        );
        std::thread::sleep(Duration::from_millis(2));
    }
}

fn rc_qp(c: &Context) -> QueuePair {
    let pd = c.alloc_pd();
    let cq = c.create_cq(16, None).unwrap();
    pd.create_qp(&QpInitAttr::new(QpType::Rc, &cq, &cq))
        .unwrap()
}

#[test]
fn connect_accept_and_disconnect_without_waiting() {
    let fabric = roce_io::Fabric::new();
    let ((a, ea), (b, eb)) = (ctx(&fabric, "10.0.0.1"), ctx(&fabric, "10.0.0.2"));
    b.cm_listen_nowait(PortSpace::Tcp, PORT, 4).unwrap();
    let (qa, qb) = (rc_qp(&a), rc_qp(&b));
    let param = ConnParam {
        private_data: b"hello".to_vec(),
        ..ConnParam::default()
    };
    let ida = a
        .cm_connect_nowait(&qa, "10.0.0.2".parse().unwrap(), PORT, &param)
        .unwrap();
    let req = wait_for(&eb, |e| match e {
        CmEvent::ConnectRequest(r) => Some(r.clone()),
        _ => None,
    });
    assert_eq!(req.private_data, b"hello");
    assert_eq!(req.remote_qpn, qa.qpn());
    b.cm_accept_nowait(req.id, &qb, &ConnParam::default())
        .unwrap();
    wait_for(&ea, |e| {
        matches!(e, CmEvent::Established { id, .. } if *id == ida).then_some(())
    });
    wait_for(&eb, |e| {
        matches!(e, CmEvent::Established { id, .. } if *id == req.id).then_some(())
    });
    assert_eq!((qa.state(), qb.state()), (QpState::Rts, QpState::Rts));
    assert_eq!(a.cm_state(ida), Some(CmState::Established));

    a.cm_disconnect_nowait(ida).unwrap();
    wait_for(&ea, |e| {
        matches!(e, CmEvent::Disconnected { id } if *id == ida).then_some(())
    });
    wait_for(&eb, |e| {
        matches!(e, CmEvent::Disconnected { id } if *id == req.id).then_some(())
    });
    assert_eq!(qb.state(), QpState::Err);
    // Each side's events came in order: the request or nothing before
    // Established, Disconnected last.
    let kinds = |v: &Mutex<Vec<CmEvent>>| -> Vec<&'static str> {
        v.lock()
            .unwrap()
            .iter()
            .map(|e| match e {
                CmEvent::ConnectRequest(_) => "request",
                CmEvent::Established { .. } => "established",
                CmEvent::Disconnected { .. } => "disconnected",
                _ => "other",
            })
            .collect()
    };
    assert_eq!(kinds(&ea), ["established", "disconnected"]);
    assert_eq!(kinds(&eb), ["request", "established", "disconnected"]);
}

#[test]
fn a_released_request_is_refused_and_a_stopped_listener_refuses() {
    let fabric = roce_io::Fabric::new();
    let ((a, ea), (b, eb)) = (ctx(&fabric, "10.0.0.1"), ctx(&fabric, "10.0.0.2"));
    let l = b.cm_listen_nowait(PortSpace::Tcp, PORT, 4).unwrap();
    let qa = rc_qp(&a);
    let ida = a
        .cm_connect_nowait(
            &qa,
            "10.0.0.2".parse().unwrap(),
            PORT,
            &ConnParam::default(),
        )
        .unwrap();
    let req = wait_for(&eb, |e| match e {
        CmEvent::ConnectRequest(r) => Some(r.id),
        _ => None,
    });
    // Given up unanswered (rdma_destroy_id of the request's id): REJ.
    b.cm_release(req);
    let reason = wait_for(&ea, |e| match e {
        CmEvent::Rejected { id, reason, .. } if *id == ida => Some(*reason),
        _ => None,
    });
    assert_eq!(reason, 28);
    b.cm_unlisten(l);
    // The connecting QP stays in INIT and may try again.
    assert_eq!(qa.state(), QpState::Init);
    assert_eq!(a.cm_state(ida), None);
}
