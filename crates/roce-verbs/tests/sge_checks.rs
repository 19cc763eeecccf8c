//! `ProgressConfig::check_sges_at_post` off (the drop-in libibverbs'
//! setting): a work request whose scatter/gather entry names an unknown
//! lkey, a region of another PD or bytes outside its region is posted,
//! and completes with a local protection error when it runs, as on rxe
//! and RoCE NICs; a receive that meets a SEND so also NAKs it (the
//! sender sees a remote operational error).

mod common;

use common::*;
use roce_verbs::*;

/// Two contexts on a fabric with the post-time checks off, an RC QP on
/// each, connected.
fn lenient_pair() -> (Side, Side) {
    let fabric = roce_io::Fabric::new();
    let cfg = ProgressConfig {
        check_sges_at_post: false,
        ..ProgressConfig::default()
    };
    let sides: Vec<Side> = ["10.0.0.1", "10.0.0.2"]
        .into_iter()
        .map(|a| {
            let addr = a.parse().unwrap();
            let ep = fabric.endpoint(addr).unwrap();
            let ctx = Context::open_with(ep, DeviceConfig::new(addr), cfg).unwrap();
            let pd = ctx.alloc_pd();
            let cq = ctx.create_cq(64, None).unwrap();
            let qp = pd
                .create_qp(&QpInitAttr::new(QpType::Rc, &cq, &cq))
                .unwrap();
            Side { ctx, pd, cq, qp }
        })
        .collect();
    let mut it = sides.into_iter();
    let (a, b) = (it.next().unwrap(), it.next().unwrap());
    let (ea, eb) = (
        a.qp.endpoint(Psn::new(0x100)),
        b.qp.endpoint(Psn::new(0x200)),
    );
    let opts = ConnectOptions::default();
    a.qp.connect(ea.psn, &eb, &opts).unwrap();
    b.qp.connect(eb.psn, &ea, &opts).unwrap();
    (a, b)
}

#[test]
fn a_receive_into_another_pds_region_fails_when_a_send_meets_it() {
    let (a, b) = lenient_pair();
    let other = b
        .ctx
        .alloc_pd()
        .reg_mr(vec![0u8; 64], Access::LOCAL_WRITE)
        .unwrap();
    b.qp.post_recv(RecvWr {
        wr_id: 5,
        sgl: vec![other.sge(0, 64)].into(),
    })
    .unwrap();
    let src = a.pd.reg_mr(pattern(64, 1), Access::NONE).unwrap();
    a.qp.post_send(SendWr::send(1, [src.sge_all()])).unwrap();
    assert_eq!(one(&a.cq).status(), WcStatus::RemOpErr);
    let r = one(&b.cq);
    assert_eq!((r.wr_id(), r.status()), (5, WcStatus::LocProtErr));
}

#[test]
fn sends_outside_their_region_or_of_no_region_complete_in_error() {
    let (a, _b) = lenient_pair();
    let mr = a.pd.reg_mr(vec![0u8; 64], Access::LOCAL_WRITE).unwrap();
    a.qp.post_send(SendWr::send(1, [mr.sge(32, 64)])).unwrap();
    assert_eq!(one(&a.cq).status(), WcStatus::LocProtErr);
    let (a, _b) = lenient_pair();
    let bad = Sge {
        addr: 0x1000,
        length: 8,
        lkey: Lkey::new(0x7777),
    };
    a.qp.post_send(SendWr::send(2, [bad])).unwrap();
    assert_eq!(one(&a.cq).status(), WcStatus::LocProtErr);
}
