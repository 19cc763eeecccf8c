//! Two contexts on one UDP address, as two processes of a host share a
//! NIC's port (docs/host.md): each binds the address with
//! `SO_REUSEPORT`, claims its QPNs, listeners and connections in the
//! address's host table, and hands on what the kernel gives it for the
//! other. The QPs address each other by the one GID; SEND, WRITE, READ,
//! atomics, UD and a CM connection run through it with the data checked,
//! and the host table's counters show the traffic took the routes by
//! QPN. The host tables live in a directory of this test's own.
//!
//! Addresses 127.0.32.x and UDP ports from 32791 are this file's own;
//! every wait is bounded.

mod common;

use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU16, Ordering};

use common::{one, pattern, ALL, WAIT};
use roce_io::{UdpBackend, UdpConfig};
use roce_verbs::*;

/// A fresh (address, port) for one test, the port below the kernel's
/// ephemeral range (32768 and up).
fn place() -> (IpAddr, u16) {
    static N: AtomicU16 = AtomicU16::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed);
    let pid = std::process::id() as u16;
    (
        IpAddr::from([127, 0, 32, 1 + (n as u8)]),
        20_791 + (pid % 500) * 8 + n,
    )
}

/// The host tables' directory of this run.
fn dir() -> PathBuf {
    let d = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("shared-address-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// A context on `addr`:`port` sharing it.
fn open(addr: IpAddr, port: u16) -> Context {
    let b = UdpBackend::bind(
        UdpConfig::new(addr)
            .port(port)
            .remote_port(port)
            .share(true)
            .share_dir(dir()),
    )
    .unwrap_or_else(|e| panic!("cannot bind {addr}:{port} shared: {e}"));
    let mut cfg = DeviceConfig::new(addr);
    cfg.shared = true;
    Context::open(b, cfg).unwrap()
}

struct Side {
    ctx: Context,
    pd: ProtectionDomain,
    cq: CompletionQueue,
    qp: QueuePair,
}

fn side(ctx: Context, t: QpType) -> Side {
    let pd = ctx.alloc_pd();
    let cq = ctx.create_cq(1024, None).unwrap();
    let qp = pd.create_qp(&QpInitAttr::new(t, &cq, &cq)).unwrap();
    Side { ctx, pd, cq, qp }
}

/// A counter of a context's backend.
fn counter(c: &Context, name: &str) -> u64 {
    c.backend_counters()
        .into_iter()
        .find(|(n, _)| *n == name)
        .map_or(0, |(_, v)| v)
}

#[test]
fn rc_between_two_contexts_on_one_address() {
    let (addr, port) = place();
    let (a, b) = (
        side(open(addr, port), QpType::Rc),
        side(open(addr, port), QpType::Rc),
    );
    assert_ne!(a.qp.qpn(), b.qp.qpn());
    // Both endpoints name the one address, as two processes' QPs on a
    // NIC name its GID.
    let (ea, eb) = (a.qp.endpoint(Psn::new(0x10)), b.qp.endpoint(Psn::new(0x20)));
    assert_eq!((ea.addr, eb.addr), (addr, addr));
    let opts = ConnectOptions {
        access: ALL,
        ..ConnectOptions::default()
    };
    a.qp.connect(ea.psn, &eb, &opts).unwrap();
    b.qp.connect(eb.psn, &ea, &opts).unwrap();

    // SEND.
    let src = a.pd.reg_mr(pattern(50_000, 3), ALL).unwrap();
    let dst = b.pd.reg_mr(vec![0u8; 200_000], ALL).unwrap();
    b.qp.post_recv(RecvWr {
        wr_id: 7,
        sgl: vec![dst.sge(0, 50_000)].into(),
    })
    .unwrap();
    a.qp.post_send(SendWr::send(1, [src.sge_all()])).unwrap();
    assert!(one(&a.cq).is_success());
    let r = one(&b.cq);
    assert_eq!(
        (r.wr_id(), r.byte_len(), r.status()),
        (7, 50_000, WcStatus::Success)
    );
    assert_eq!(&dst.to_vec().unwrap()[..50_000], &pattern(50_000, 3)[..]);

    // WRITE and READ.
    let rb = dst.remote();
    let w = SendWr::write(2, [src.sge_all()], rb.at(100_000));
    a.qp.post_send(w).unwrap();
    assert!(one(&a.cq).is_success());
    assert_eq!(
        &dst.to_vec().unwrap()[100_000..150_000],
        &pattern(50_000, 3)[..]
    );
    let back = a.pd.reg_mr(vec![0u8; 50_000], ALL).unwrap();
    let rd = SendWr::read(3, [back.sge_all()], rb.at(100_000));
    a.qp.post_send(rd).unwrap();
    assert!(one(&a.cq).is_success());
    assert_eq!(back.to_vec().unwrap(), pattern(50_000, 3));

    // Atomics.
    let target = b.pd.reg_mr(vec![0u8; 8], ALL).unwrap();
    target.write(0, &40u64.to_ne_bytes()).unwrap();
    let t = target.remote();
    let result = a.pd.reg_mr(vec![0u8; 16], ALL).unwrap();
    let faa = SendWr::fetch_add(4, [result.sge(0, 8)], t.at(0), 2);
    a.qp.post_send(faa).unwrap();
    assert!(one(&a.cq).is_success());
    let cas = SendOp::CompareSwap {
        remote: t.at(0),
        compare: 42,
        swap: 9,
    };
    a.qp.post_send(SendWr::new(5, cas, [result.sge(8, 8)]))
        .unwrap();
    assert!(one(&a.cq).is_success());
    let mut v = [0u8; 16];
    result.read(0, &mut v).unwrap();
    assert_eq!(u64::from_ne_bytes(v[..8].try_into().unwrap()), 40);
    assert_eq!(u64::from_ne_bytes(v[8..].try_into().unwrap()), 42);
    let mut now = [0u8; 8];
    target.read(0, &mut now).unwrap();
    assert_eq!(u64::from_ne_bytes(now), 9);

    // Each side reached the other by its QPN through the host table (a
    // ring to the owner, or the kernel's pick handed on), never as a
    // datagram for nobody.
    for (s, name) in [(&a, "a"), (&b, "b")] {
        let by_qpn = counter(&s.ctx, "udp_shm_qpn_routes") + counter(&s.ctx, "udp_shm_forwarded");
        assert!(by_qpn > 0, "{name}: {:?}", s.ctx.backend_counters());
    }
}

#[test]
fn ud_between_two_contexts_on_one_address() {
    let (addr, port) = place();
    let (a, b) = (
        side(open(addr, port), QpType::Ud),
        side(open(addr, port), QpType::Ud),
    );
    let opts = ConnectOptions::default();
    let qkey = opts.qkey;
    let (ea, eb) = (a.qp.endpoint(Psn::new(1)), b.qp.endpoint(Psn::new(2)));
    a.qp.connect(ea.psn, &eb, &opts).unwrap();
    b.qp.connect(eb.psn, &ea, &opts).unwrap();
    let rx = b.pd.reg_mr(vec![0u8; 40 + 1000], ALL).unwrap();
    let tx = a.pd.reg_mr(pattern(1000, 5), ALL).unwrap();
    let ah = a.pd.create_ah(AhAttr::new(addr)).unwrap();
    for i in 0..20u64 {
        b.qp.post_recv(RecvWr {
            wr_id: i,
            sgl: vec![rx.sge_all()].into(),
        })
        .unwrap();
        a.qp.post_send_ud(SendWr::send(i, [tx.sge_all()]), &ah, b.qp.qpn(), qkey)
            .unwrap();
        assert!(one(&a.cq).is_success());
        let r = one(&b.cq);
        assert_eq!((r.wr_id(), r.byte_len(), r.src_qp()), (i, 1040, a.qp.qpn()));
        assert_eq!(&rx.to_vec().unwrap()[40..], &pattern(1000, 5)[..]);
    }
}

#[test]
fn cm_connects_to_a_listener_of_the_other_context() {
    let (addr, port) = place();
    let (ca, cb) = (open(addr, port), open(addr, port));
    let listener = cb.cm_listen(9000).unwrap();
    // A second listener on the service, in the other context: refused, as
    // the host's CM refuses a second listener.
    assert_eq!(
        ca.cm_listen(9000).unwrap_err(),
        Error::Verbs(roce_core::VerbsError::Busy)
    );
    let server = std::thread::spawn(move || {
        let b = side(cb, QpType::Rc);
        let inbox = b.pd.reg_mr(vec![0u8; 64], ALL).unwrap();
        b.qp.to_init(&ConnectOptions::default()).unwrap();
        b.qp.post_recv(RecvWr {
            wr_id: 1,
            sgl: vec![inbox.sge_all()].into(),
        })
        .unwrap();
        let req = listener.get_request(WAIT).unwrap();
        assert_eq!(req.info().peer, addr);
        let _conn = req.accept(&b.qp, &ConnParam::default(), WAIT).unwrap();
        let r = one(&b.cq);
        assert_eq!((r.byte_len(), r.status()), (11, WcStatus::Success));
        assert_eq!(&inbox.to_vec().unwrap()[..11], b"via the CM.");
        b
    });
    let a = side(ca, QpType::Rc);
    let conn =
        a.qp.cm_connect(addr, 9000, &ConnParam::default(), WAIT)
            .unwrap();
    let msg = a.pd.reg_mr(b"via the CM.".to_vec(), ALL).unwrap();
    a.qp.post_send(SendWr::send(1, [msg.sge_all()])).unwrap();
    let c = one(&a.cq);
    assert!(
        c.is_success(),
        "{c:?} {:?} {:?} {:?}",
        a.qp.counters(),
        a.ctx.counters(),
        a.ctx.backend_counters()
    );
    let b = server.join().unwrap();
    drop(conn);
    drop(b);
    // A service nobody listens on: the REJ the kernel would send.
    let c = side(open(addr, port), QpType::Rc);
    let e =
        c.qp.cm_connect(addr, 9001, &ConnParam::default(), WAIT)
            .unwrap_err();
    assert!(matches!(e, CmError::Rejected { reason: 8, .. }), "{e:?}");
}

#[test]
fn a_listener_stopped_and_started_again_keeps_its_claim() {
    let (addr, port) = place();
    let (ca, cb) = (open(addr, port), open(addr, port));
    // Stopped, then at once listening again on the same service: the
    // stop's release, applied later, must not undo the new claim.
    drop(cb.cm_listen(9100).unwrap());
    let listener = cb.cm_listen(9100).unwrap();
    let server = std::thread::spawn(move || {
        let b = side(cb, QpType::Rc);
        let req = listener.get_request(WAIT).unwrap();
        let conn = req.accept(&b.qp, &ConnParam::default(), WAIT).unwrap();
        (b, conn)
    });
    // Let a few progress steps run (they apply queued releases).
    std::thread::sleep(std::time::Duration::from_millis(50));
    let a = side(ca, QpType::Rc);
    let conn = a.qp.cm_connect(addr, 9100, &ConnParam::default(), WAIT);
    assert!(conn.is_ok(), "{conn:?}");
    let _b = server.join().unwrap();
}
