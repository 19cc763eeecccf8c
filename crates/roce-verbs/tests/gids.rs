//! A context with more than one GID over UDP: a QP whose `sgid_index`
//! names the second one sends and receives there for real, the port of
//! that address is bound only once a QP uses it, and a GID whose port
//! another context holds is refused with `AddrUnavailable`.

mod common;

use std::net::{IpAddr, UdpSocket};
use std::sync::OnceLock;

use common::*;
use roce_verbs::*;

/// A port of this test's own for both address families: free on
/// 127.0.0.1 ([`roce_testkit::free_port`]) and, where the host has an
/// IPv6 loopback, on ::1; the same for every call.
fn port() -> u16 {
    static PORT: OnceLock<u16> = OnceLock::new();
    *PORT.get_or_init(|| {
        let v6 = UdpSocket::bind(("::1", 0)).is_ok();
        loop {
            let p = roce_testkit::free_port();
            if !v6 || UdpSocket::bind(("::1", p)).is_ok() {
                break p;
            }
        }
    })
}

fn open(v4: &str) -> Option<Context> {
    let v6: IpAddr = "::1".parse().unwrap();
    if UdpSocket::bind((v6, 0)).is_err() {
        eprintln!("skipped: no IPv6 loopback");
        return None;
    }
    let v4: IpAddr = v4.parse().unwrap();
    Some(
        OpenOptions::new(BackendKind::Udp, v4)
            .gids(vec![v4, v6])
            .roce_port(port(), port())
            .open()
            .unwrap(),
    )
}

#[test]
fn the_second_gid_carries_traffic_and_is_bound_on_first_use() {
    let Some(ctx) = open("127.0.61.1") else {
        return;
    };
    let v6: IpAddr = "::1".parse().unwrap();
    assert_eq!(ctx.addrs()[1], v6);
    // Not bound yet: nobody sends from ::1.
    drop(UdpSocket::bind((v6, port())).expect("::1 is free before a QP uses it"));
    let pd = ctx.alloc_pd();
    let cq = ctx.create_cq(64, None).unwrap();
    let a = pd
        .create_qp(&QpInitAttr::new(QpType::Rc, &cq, &cq))
        .unwrap();
    let b = pd
        .create_qp(&QpInitAttr::new(QpType::Rc, &cq, &cq))
        .unwrap();
    let mut ea = a.endpoint(Psn::new(5));
    let mut eb = b.endpoint(Psn::new(9));
    ea.addr = v6;
    eb.addr = v6;
    let opts = ConnectOptions {
        sgid_index: 1,
        ..ConnectOptions::default()
    };
    a.connect(ea.psn, &eb, &opts).unwrap();
    b.connect(eb.psn, &ea, &opts).unwrap();
    let e = UdpSocket::bind((v6, port())).unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::AddrInUse);
    let src = pd.reg_mr(pattern(10_000, 4), Access::NONE).unwrap();
    let dst = pd.reg_mr(vec![0u8; 10_000], ALL).unwrap();
    let r = dst.remote();
    a.post_send(SendWr::write(1, [src.sge_all()], r.at(0)))
        .unwrap();
    assert!(one(&cq).is_success());
    assert_eq!(dst.to_vec().unwrap(), pattern(10_000, 4));
    // Every packet went over ::1: the QP counted them, and none were
    // sent from an address the backend lacks.
    assert!(a.counters().tx_packets >= 3, "{:?}", a.counters());
    let lost = ctx
        .backend_counters()
        .iter()
        .find(|(n, _)| *n == "udp_set_tx_no_source")
        .map(|c| c.1);
    assert_eq!(lost, Some(0));

    // Another context wanting ::1 on that port: refused, cleanly.
    let other = open("127.0.61.2").unwrap();
    let opd = other.alloc_pd();
    let ocq = other.create_cq(4, None).unwrap();
    let q = opd
        .create_qp(&QpInitAttr::new(QpType::Rc, &ocq, &ocq))
        .unwrap();
    let mut eq = q.endpoint(Psn::new(1));
    eq.addr = v6;
    let e = q.connect(eq.psn, &ea, &opts).unwrap_err();
    assert_eq!(
        e,
        ModifyQpError::AddrUnavailable(v6, std::io::ErrorKind::AddrInUse)
    );
    assert!(e.to_string().contains("taken"), "{e}");
    // Its own first GID still works.
    let q2 = opd
        .create_qp(&QpInitAttr::new(QpType::Rc, &ocq, &ocq))
        .unwrap();
    let e2 = q2.endpoint(Psn::new(1));
    q2.connect(e2.psn, &e2, &ConnectOptions::default()).unwrap();
}
