//! A polling application's answer carries the ACK of the request it
//! answers: a polling progress step that received an RC SEND or WRITE holds
//! its transmit back until the application's next call (progress.rs), and
//! whatever changes a QP's state first sends what was held.

mod common;

use std::io;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

use common::*;
use roce_core::Nanos;
use roce_io::{Backend, Fabric, PacketBatch};
use roce_verbs::*;

/// BTH opcodes of the datagrams of each send call, in order.
type SendLog = Arc<Mutex<Vec<Vec<u8>>>>;

const RC_SEND_ONLY: u8 = 0x04;
const RC_ACK: u8 = 0x11;
/// wr_id of every receive.
const RECV: u64 = 1 << 40;

/// A backend that records the opcodes of every send call.
struct Recorder<B> {
    inner: B,
    log: SendLog,
}

/// The BTH opcode of an IPv4 RoCE v2 datagram.
fn opcode(d: &[u8]) -> Option<u8> {
    let ihl = usize::from(d.first()? & 0x0f) * 4;
    d.get(ihl + 8).copied()
}

impl<B: Backend> Backend for Recorder<B> {
    fn local_addrs(&self) -> &[IpAddr] {
        self.inner.local_addrs()
    }

    fn send(&mut self, now: Nanos, batch: &PacketBatch) -> io::Result<usize> {
        let n = self.inner.send(now, batch)?;
        let ops = batch.iter().take(n).filter_map(opcode).collect();
        self.log.lock().unwrap().push(ops);
        Ok(n)
    }

    fn recv(&mut self, now: Nanos, batch: &mut PacketBatch) -> io::Result<usize> {
        self.inner.recv(now, batch)
    }

    fn poll_at(&self) -> Option<Nanos> {
        self.inner.poll_at()
    }
}

/// A connected RC pair on a fresh fabric; B's send calls are recorded.
fn recorded_pair(opts: &ConnectOptions) -> (Side, Side, SendLog) {
    let fabric = Fabric::new();
    let log = SendLog::default();
    let a = Context::open_fabric(&fabric, "10.0.0.1".parse().unwrap()).unwrap();
    let l = log.clone();
    let b = Context::open_fabric_with(
        &fabric,
        DeviceConfig::new("10.0.0.2".parse().unwrap()),
        move |ep| Recorder { inner: ep, log: l },
    )
    .unwrap();
    let side = |ctx: Context| {
        let pd = ctx.alloc_pd();
        let cq = ctx.create_cq(256, None).unwrap();
        let qp = pd
            .create_qp(&QpInitAttr::new(QpType::Rc, &cq, &cq))
            .unwrap();
        Side { ctx, pd, cq, qp }
    };
    let (a, b) = (side(a), side(b));
    let (ea, eb) = (a.qp.endpoint(Psn::new(7)), b.qp.endpoint(Psn::new(9)));
    a.qp.connect(ea.psn, &eb, opts).unwrap();
    b.qp.connect(eb.psn, &ea, opts).unwrap();
    (a, b, log)
}

fn post_recv(s: &Side, mr: &MemoryRegion) {
    s.qp.post_recv(RecvWr {
        wr_id: RECV,
        sgl: vec![mr.sge(0, 64)],
    })
    .unwrap();
}

/// In a SEND ping-pong the answering side's ACK leaves in the same send
/// call as its answer, right after it, not in a call of its own before it.
#[test]
fn a_ping_pong_answer_carries_the_ack() {
    let (a, b, log) = recorded_pair(&ConnectOptions::default());
    let (ma, mb) = (
        a.pd.reg_mr(vec![1u8; 64], Access::LOCAL_WRITE).unwrap(),
        b.pd.reg_mr(vec![2u8; 64], Access::LOCAL_WRITE).unwrap(),
    );
    post_recv(&a, &ma);
    post_recv(&b, &mb);
    const ROUNDS: usize = 200;
    for i in 0..ROUNDS as u64 {
        a.qp.post_send(SendWr::send(i, vec![ma.sge(0, 8)])).unwrap();
        let r = one(&b.cq);
        assert_eq!((r.wr_id, r.byte_len), (RECV, 8), "{r:?}");
        post_recv(&b, &mb);
        b.qp.post_send(SendWr::send(i, vec![mb.sge(0, 8)])).unwrap();
        // A: its SEND's completion and B's answer, in either order.
        let mut got: Vec<u64> = (0..2).map(|_| one(&a.cq).wr_id).collect();
        got.sort_unstable();
        assert_eq!(got, [i, RECV]);
        post_recv(&a, &ma);
        // B's SEND completes (A's ACK) before the next round.
        assert_eq!(one(&b.cq).wr_id, i);
    }
    let calls = log.lock().unwrap().clone();
    let together = calls
        .iter()
        .filter(|ops| ops.windows(2).any(|w| w == [RC_SEND_ONLY, RC_ACK]))
        .count();
    let alone = calls.iter().filter(|ops| ops[..] == [RC_ACK]).count();
    // The progress thread may take a request now and then (it then sends
    // the ACK at once); the application's own polls take nearly all.
    assert!(
        together >= ROUNDS * 8 / 10,
        "{together} of {ROUNDS} answers carried their ACK ({alone} ACKs alone)"
    );
}

/// A request whose ACK is being held still gets it when the application
/// moves its QP to ERR right after seeing the request: the peer's SEND
/// completes successfully instead of retrying into RETRY_EXC_ERR.
#[test]
fn a_held_ack_leaves_before_the_qp_goes_to_error() {
    let opts = ConnectOptions {
        timeout: 8, // 1 ms
        retry_cnt: 1,
        ..ConnectOptions::default()
    };
    for round in 0..20 {
        let (a, b, log) = recorded_pair(&opts);
        let ma = a.pd.reg_mr(vec![1u8; 64], Access::NONE).unwrap();
        let mb = b.pd.reg_mr(vec![0u8; 64], Access::LOCAL_WRITE).unwrap();
        post_recv(&b, &mb);
        a.qp.post_send(SendWr::send(1, vec![ma.sge(0, 8)])).unwrap();
        assert!(one(&b.cq).is_success());
        let attr = QpAttr {
            qp_state: QpState::Err,
            ..QpAttr::default()
        };
        b.qp.modify(&attr, QpAttrMask::STATE).unwrap();
        let c = one(&a.cq);
        assert!(
            c.is_success(),
            "round {round}: A's SEND ended {:?}; B sent {:?}; A {:?}; B {:?}",
            c.status,
            log.lock().unwrap(),
            a.qp.counters(),
            b.qp.counters()
        );
    }
}
