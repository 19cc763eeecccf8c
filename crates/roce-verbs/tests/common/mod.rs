//! Two contexts on an in-memory fabric with a connected QP pair.
#![allow(dead_code, unreachable_pub)]

use std::time::Duration;

use roce_io::{FaultConfig, FaultInjector};
use roce_verbs::*;

pub const WAIT: Duration = Duration::from_secs(5);

pub const ALL: Access = Access(
    Access::LOCAL_WRITE.0
        | Access::REMOTE_WRITE.0
        | Access::REMOTE_READ.0
        | Access::REMOTE_ATOMIC.0,
);

pub struct Side {
    pub ctx: Context,
    pub pd: ProtectionDomain,
    pub cq: CompletionQueue,
    pub qp: QueuePair,
}

pub fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

fn open(fabric: &roce_io::Fabric, addr: &str, faults: Option<FaultConfig>) -> Context {
    let cfg = DeviceConfig::new(addr.parse().unwrap());
    match faults {
        None => Context::open_fabric_with(fabric, cfg, |ep| ep).unwrap(),
        Some(f) => Context::open_fabric_with(fabric, cfg, |ep| FaultInjector::new(ep, f)).unwrap(),
    }
}

/// Two contexts (10.0.0.1, 10.0.0.2), a QP of `qp_type` on each, connected
/// (RC/UC) or ready (UD).
pub fn pair(qp_type: QpType) -> (Side, Side) {
    pair_with(qp_type, None, None, &ConnectOptions::default())
}

pub fn pair_with(
    qp_type: QpType,
    fa: Option<FaultConfig>,
    fb: Option<FaultConfig>,
    opts: &ConnectOptions,
) -> (Side, Side) {
    let fabric = roce_io::Fabric::new();
    let ctxs = [open(&fabric, "10.0.0.1", fa), open(&fabric, "10.0.0.2", fb)];
    let sides: Vec<Side> = ctxs
        .into_iter()
        .map(|ctx| {
            let pd = ctx.alloc_pd();
            let cq = ctx.create_cq(4096, None).unwrap();
            let qp = pd.create_qp(&QpInitAttr::new(qp_type, &cq, &cq)).unwrap();
            Side { ctx, pd, cq, qp }
        })
        .collect();
    let mut it = sides.into_iter();
    let (a, b) = (it.next().unwrap(), it.next().unwrap());
    let (ea, eb) = (
        a.qp.endpoint(Psn::new(0x100)),
        b.qp.endpoint(Psn::new(0x200)),
    );
    a.qp.connect(ea.psn, &eb, opts).unwrap();
    b.qp.connect(eb.psn, &ea, opts).unwrap();
    (a, b)
}

/// A second RC pair between the contexts of `a` and `b`: `a`'s QP on
/// `cq` (a CQ of `a`'s context, for both queues), `b`'s on its own CQ.
pub fn rc_pair_on(a: &Side, b: &Side, cq: &CompletionQueue) -> (QueuePair, QueuePair) {
    let qa =
        a.pd.create_qp(&QpInitAttr::new(QpType::Rc, cq, cq))
            .unwrap();
    let qb =
        b.pd.create_qp(&QpInitAttr::new(QpType::Rc, &b.cq, &b.cq))
            .unwrap();
    let (ea, eb) = (qa.endpoint(Psn::new(1)), qb.endpoint(Psn::new(2)));
    qa.connect(ea.psn, &eb, &ConnectOptions::default()).unwrap();
    qb.connect(eb.psn, &ea, &ConnectOptions::default()).unwrap();
    (qa, qb)
}

/// Polls exactly one completion (within `WAIT`).
pub fn one(cq: &CompletionQueue) -> Completion {
    let mut v = cq.poll_until(1, WAIT).unwrap();
    assert_eq!(v.len(), 1, "no completion within {WAIT:?}");
    v.pop().unwrap()
}
