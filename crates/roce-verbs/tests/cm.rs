//! The librdmacm-shaped API between two contexts on the in-memory fabric:
//! listen / get_request / accept on one thread, cm_connect on another,
//! data over the connection, disconnect seen by both; refused and
//! rejected connections.

mod common;

use std::thread;
use std::time::Duration;

use common::*;
use roce_verbs::*;

const PORT: u16 = 18515;

fn ctx(fabric: &roce_io::Fabric, addr: &str) -> Context {
    Context::open_fabric(fabric, addr.parse().unwrap()).unwrap()
}

#[test]
fn accept_connect_send_write_and_disconnect() {
    let fabric = roce_io::Fabric::new();
    let (a, b) = (ctx(&fabric, "10.0.0.1"), ctx(&fabric, "10.0.0.2"));
    let listener = b.cm_listen(PORT).unwrap();
    assert_eq!(
        b.cm_listen(PORT).unwrap_err(),
        Error::Verbs(roce_core::VerbsError::Busy)
    );

    // The client disconnects only after the server has looked at the
    // connected QP and the SEND (else a server thread scheduled late finds
    // the QP already in ERR after the client's disconnect).
    let (seen_tx, seen_rx) = std::sync::mpsc::channel::<()>();
    let server = thread::spawn(move || {
        let pd = b.alloc_pd();
        let cq = b.create_cq(64, None).unwrap();
        let qp = pd
            .create_qp(&QpInitAttr::new(QpType::Rc, &cq, &cq))
            .unwrap();
        let inbox = pd.reg_mr(vec![0u8; 64], ALL).unwrap();
        let window = pd.reg_mr(vec![0u8; 4096], ALL).unwrap();
        let req = listener.get_request(WAIT).unwrap();
        assert_eq!(req.info().private_data, b"client hello");
        assert_eq!(
            req.info().peer,
            "10.0.0.1".parse::<std::net::IpAddr>().unwrap()
        );
        // The REP's private data advertises the window (address, rkey).
        let w = window.remote();
        let mut pd_bytes = w.addr.to_be_bytes().to_vec();
        pd_bytes.extend_from_slice(&w.rkey.value().to_be_bytes());
        let param = ConnParam {
            private_data: pd_bytes,
            ..ConnParam::default()
        };
        // As after librdmacm's rdma_create_qp: the QP in INIT, a receive
        // posted before the connection exists.
        qp.to_init(&ConnectOptions::default()).unwrap();
        qp.post_recv(RecvWr {
            wr_id: 5,
            sgl: vec![inbox.sge(0, 64)].into(),
        })
        .unwrap();
        let conn = req.accept(&qp, &param, WAIT).unwrap();
        assert_eq!(conn.qp().state(), QpState::Rts);
        let c = one(&cq);
        assert_eq!(
            (c.wr_id(), c.status(), c.byte_len()),
            (5, WcStatus::Success, 16)
        );
        assert_eq!(&inbox.to_vec().unwrap()[..16], b"a SEND via RC CM");
        seen_tx.send(()).unwrap();
        // The client WRITEs, then disconnects; we see it.
        assert!(conn.wait_disconnect(WAIT));
        assert_eq!(qp.state(), QpState::Err);
        assert_eq!(&window.to_vec().unwrap()[..7], b"written");
        conn.is_connected()
    });

    let pd = a.alloc_pd();
    let cq = a.create_cq(64, None).unwrap();
    let qp = pd
        .create_qp(&QpInitAttr::new(QpType::Rc, &cq, &cq))
        .unwrap();
    let param = ConnParam {
        private_data: b"client hello".to_vec(),
        ..ConnParam::default()
    };
    let conn = qp
        .cm_connect("10.0.0.2".parse().unwrap(), PORT, &param, WAIT)
        .unwrap();
    assert_eq!(qp.state(), QpState::Rts);
    // The server put its window's address and rkey in the REP. The wire
    // carries no length: the engine gives private data without its zero
    // padding, so an rkey whose low byte is 0 arrives one byte short
    // (it failed so in CI); the zeros are put back.
    let mut rep = conn.private_data().to_vec();
    rep.resize(12, 0);
    let addr = u64::from_be_bytes(rep[..8].try_into().unwrap());
    let rkey = Rkey::new(u32::from_be_bytes(rep[8..12].try_into().unwrap()));
    let src = pd
        .reg_mr(b"a SEND via RC CMwritten".to_vec(), Access::NONE)
        .unwrap();
    qp.post_send(SendWr::send(1, [src.sge(0, 16)])).unwrap();
    assert!(one(&cq).is_success());
    let wr = SendWr::write(2, [src.sge(16, 7)], RemoteAddr::new(addr, rkey));
    qp.post_send(wr).unwrap();
    assert!(one(&cq).is_success());
    if seen_rx.recv_timeout(WAIT).is_err() {
        // The server failed (or hangs): report its panic, not this wait.
        let r = server.join();
        panic!("the server never saw the connection and the SEND: {r:?}");
    }
    conn.disconnect(WAIT).unwrap();
    assert_eq!(qp.state(), QpState::Err);
    let still_connected = server.join().unwrap();
    assert!(!still_connected);
}

#[test]
fn refused_rejected_and_unanswered_requests() {
    let fabric = roce_io::Fabric::new();
    let (a, b) = (ctx(&fabric, "10.0.0.1"), ctx(&fabric, "10.0.0.2"));
    let pd = a.alloc_pd();
    let cq = a.create_cq(64, None).unwrap();
    let peer = "10.0.0.2".parse().unwrap();
    let new_qp = || {
        pd.create_qp(&QpInitAttr::new(QpType::Rc, &cq, &cq))
            .unwrap()
    };

    // Nobody listens: REJ reason 8, "connection refused".
    let e = new_qp()
        .cm_connect(peer, PORT, &ConnParam::default(), WAIT)
        .unwrap_err();
    assert_eq!(
        e,
        CmError::Rejected {
            reason: 8,
            private_data: vec![]
        }
    );
    assert!(e.to_string().contains("connection refused"), "{e}");

    // The application rejects, with a reason of its own.
    let listener = b.cm_listen(PORT).unwrap();
    let server = thread::spawn(move || {
        let r = listener.get_request(WAIT).unwrap();
        r.reject(b"busy").unwrap();
        // A request dropped without an answer is rejected too.
        let r = listener.get_request(WAIT).unwrap();
        drop(r);
        // No third request comes.
        listener.get_request(Duration::from_millis(50)).unwrap_err()
    });
    let e = new_qp()
        .cm_connect(peer, PORT, &ConnParam::default(), WAIT)
        .unwrap_err();
    assert_eq!(
        e,
        CmError::Rejected {
            reason: 28,
            private_data: b"busy".to_vec()
        }
    );
    let e = new_qp()
        .cm_connect(peer, PORT, &ConnParam::default(), WAIT)
        .unwrap_err();
    assert!(matches!(e, CmError::Rejected { reason: 28, .. }), "{e:?}");
    assert_eq!(server.join().unwrap(), CmError::TimedOut);

    // Only RC QPs connect.
    let ud = pd
        .create_qp(&QpInitAttr::new(QpType::Ud, &cq, &cq))
        .unwrap();
    assert!(matches!(
        ud.cm_connect(peer, PORT, &ConnParam::default(), WAIT),
        Err(CmError::Verbs(Error::InvalidArgument(_)))
    ));
}
