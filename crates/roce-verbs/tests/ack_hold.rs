//! A polling application's answer leaves before the ACK of the request it
//! answers when the engine defers ACKs (`DeviceConfig::ack_delay`, roce-core
//! `qp/responder/ack.rs`): the ACK waits for the QP's answer (or its
//! deadline) and follows it; moving the QP to the error state first sends
//! what was held.

mod common;

use std::io;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use roce_core::Nanos;
use roce_io::{Backend, Fabric, PacketBatch};
use roce_verbs::*;

/// (BTH opcode, PSN) of every datagram sent, in order.
type SendLog = Arc<Mutex<Vec<(u8, u32)>>>;

const RC_SEND_ONLY: u8 = 0x04;
const RC_ACK: u8 = 0x11;
/// wr_id of every receive.
const RECV: u64 = 1 << 40;
/// B's ACK deferral.
const HOLD: Duration = Duration::from_millis(50);
/// First PSNs of A's and B's requests.
const A_PSN: u32 = 7;
const B_PSN: u32 = 900;

/// A backend that records what it sends.
struct Recorder<B> {
    inner: B,
    log: SendLog,
}

/// The BTH opcode and PSN of an IPv4 RoCE v2 datagram.
fn opcode_psn(d: &[u8]) -> Option<(u8, u32)> {
    let ihl = usize::from(d.first()? & 0x0f) * 4;
    let bth = d.get(ihl + 8..ihl + 20)?;
    Some((bth[0], u32::from_be_bytes([0, bth[9], bth[10], bth[11]])))
}

impl<B: Backend> Backend for Recorder<B> {
    fn local_addrs(&self) -> &[IpAddr] {
        self.inner.local_addrs()
    }

    fn send(&mut self, now: Nanos, batch: &PacketBatch) -> io::Result<usize> {
        let n = self.inner.send(now, batch)?;
        let sent = batch.iter().take(n).filter_map(opcode_psn);
        self.log.lock().unwrap().extend(sent);
        Ok(n)
    }

    fn recv(&mut self, now: Nanos, batch: &mut PacketBatch) -> io::Result<usize> {
        self.inner.recv(now, batch)
    }

    fn poll_at(&self) -> Option<Nanos> {
        self.inner.poll_at()
    }
}

/// A connected RC pair on a fresh fabric; B's sends are recorded. B's
/// progress thread stays out of the way (no doorbell, long naps once B's
/// application polls), so that B's own polls take A's requests, as in a
/// ping-pong whose sides each have their own polling thread.
fn recorded_pair(opts: &ConnectOptions) -> (Side, Side, SendLog) {
    let fabric = Fabric::new();
    let log = SendLog::default();
    let a = Context::open_fabric(&fabric, "10.0.0.1".parse().unwrap()).unwrap();
    let b_addr = "10.0.0.2".parse().unwrap();
    let quiet = ProgressConfig {
        max_park: Duration::from_secs(1),
        poller_park: Duration::from_secs(1),
        ..ProgressConfig::default()
    };
    let b = Context::open_with(
        Recorder {
            inner: fabric.endpoint(b_addr).unwrap(),
            log: log.clone(),
        },
        // A deadline that scheduling noise cannot reach: the ACK must be
        // released by the answer (the rounds would take HOLD each if it
        // waited for its deadline instead).
        DeviceConfig {
            ack_delay: AckDelay {
                max_delay: HOLD.as_nanos() as u64,
                ..AckDelay::INTERACTIVE
            },
            ..DeviceConfig::new(b_addr)
        },
        quiet,
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
    let (ea, eb) = (
        a.qp.endpoint(Psn::new(A_PSN)),
        b.qp.endpoint(Psn::new(B_PSN)),
    );
    a.qp.connect(ea.psn, &eb, opts).unwrap();
    b.qp.connect(eb.psn, &ea, opts).unwrap();
    (a, b, log)
}

fn post_recv(s: &Side, mr: &MemoryRegion) {
    s.qp.post_recv(RecvWr {
        wr_id: RECV,
        sgl: vec![mr.sge(0, 64)].into(),
    })
    .unwrap();
}

/// In a SEND ping-pong the answering side's ACK leaves after its answer,
/// not before it.
#[test]
fn a_ping_pong_answer_goes_before_its_ack() {
    let (a, b, log) = recorded_pair(&ConnectOptions::default());
    let (ma, mb) = (
        a.pd.reg_mr(vec![1u8; 64], Access::LOCAL_WRITE).unwrap(),
        b.pd.reg_mr(vec![2u8; 64], Access::LOCAL_WRITE).unwrap(),
    );
    post_recv(&a, &ma);
    post_recv(&b, &mb);
    const ROUNDS: usize = 200;
    // Rounds in which A's SEND completed only HOLD or more after B's
    // answer was posted: its ACK waited for the deadline, not the answer.
    let mut waited = 0;
    for i in 0..ROUNDS as u64 {
        a.qp.post_send(SendWr::send(i, [ma.sge(0, 8)])).unwrap();
        let r = one(&b.cq);
        assert_eq!((r.wr_id(), r.byte_len()), (RECV, 8), "{r:?}");
        post_recv(&b, &mb);
        b.qp.post_send(SendWr::send(i, [mb.sge(0, 8)])).unwrap();
        let answered = std::time::Instant::now();
        // A: its SEND's completion and B's answer, in either order.
        let mut got: Vec<u64> = (0..2).map(|_| one(&a.cq).wr_id()).collect();
        if answered.elapsed() >= HOLD {
            waited += 1;
        }
        got.sort_unstable();
        assert_eq!(got, [i, RECV]);
        post_recv(&a, &ma);
        // B's SEND completes (A's ACK) before the next round.
        assert_eq!(one(&b.cq).wr_id(), i);
    }
    assert!(
        waited <= ROUNDS / 10,
        "{waited} of {ROUNDS} ACKs waited for their deadline"
    );
    // Round i: B's answer has PSN B_PSN + i, its ACK of A's SEND A_PSN + i.
    let sent = log.lock().unwrap().clone();
    let at = |want: (u8, u32)| sent.iter().position(|&x| x == want);
    let answer_first = (0..ROUNDS as u32)
        .filter(|i| {
            let answer = at((RC_SEND_ONLY, B_PSN + i)).expect("answer sent");
            let ack = at((RC_ACK, A_PSN + i)).expect("ACK sent");
            answer < ack
        })
        .count();
    // B's progress thread may take a request before B's application first
    // polls, and a slow answer lets the ACK's deadline pass first. Without
    // deferral, none goes first.
    assert!(
        answer_first >= ROUNDS * 9 / 10,
        "{answer_first} of {ROUNDS} answers went before their ACK"
    );
}

/// A request whose ACK is being held still gets it when the application
/// moves its QP to ERR right after seeing the request: the peer's SEND
/// completes successfully instead of retrying into RETRY_EXC_ERR.
#[test]
fn a_held_ack_leaves_before_the_qp_goes_to_error() {
    let opts = ConnectOptions {
        timeout: 14, // 67 ms: the failure shows in 0.13 s
        retry_cnt: 1,
        ..ConnectOptions::default()
    };
    for round in 0..20 {
        let (a, b, log) = recorded_pair(&opts);
        let ma = a.pd.reg_mr(vec![1u8; 64], Access::NONE).unwrap();
        let mb = b.pd.reg_mr(vec![0u8; 64], Access::LOCAL_WRITE).unwrap();
        post_recv(&b, &mb);
        a.qp.post_send(SendWr::send(1, [ma.sge(0, 8)])).unwrap();
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
            c.status(),
            log.lock().unwrap(),
            a.qp.counters(),
            b.qp.counters()
        );
    }
}

/// A side that takes the request through a completion channel and then
/// lets go of everything at once (QP, CQ, channel, PD, region, context),
/// as a C program does before it exits, still sends the ACK it held: the
/// peer's SEND completes successfully. This covers the ordinary close;
/// the race it was written for (the last handle going inside the progress
/// thread, which was waking the channel) did not reproduce here, and is
/// guarded by roce-ibverbs' `ibv_rc_pingpong_with_completion_events`,
/// which failed in about 40 % of runs before the fix.
#[test]
fn a_held_ack_leaves_when_the_whole_context_goes() {
    let opts = ConnectOptions {
        timeout: 14,
        retry_cnt: 1,
        ..ConnectOptions::default()
    };
    for round in 0..20 {
        let fabric = Fabric::new();
        let a = Context::open_fabric(&fabric, "10.0.0.1".parse().unwrap()).unwrap();
        let b_addr: IpAddr = "10.0.0.2".parse().unwrap();
        let b = Context::open_fabric_with(
            &fabric,
            DeviceConfig {
                ack_delay: AckDelay {
                    max_delay: HOLD.as_nanos() as u64,
                    ..AckDelay::INTERACTIVE
                },
                ..DeviceConfig::new(b_addr)
            },
            |port| port,
        )
        .unwrap();
        let (apd, acq) = (a.alloc_pd(), a.create_cq(16, None).unwrap());
        let aqp = apd
            .create_qp(&QpInitAttr::new(QpType::Rc, &acq, &acq))
            .unwrap();
        let ch = b.create_comp_channel();
        let (bpd, bcq) = (b.alloc_pd(), b.create_cq(16, Some(&ch)).unwrap());
        let bqp = bpd
            .create_qp(&QpInitAttr::new(QpType::Rc, &bcq, &bcq))
            .unwrap();
        let (ea, eb) = (aqp.endpoint(Psn::new(A_PSN)), bqp.endpoint(Psn::new(B_PSN)));
        aqp.connect(ea.psn, &eb, &opts).unwrap();
        bqp.connect(eb.psn, &ea, &opts).unwrap();
        let ma = apd.reg_mr(vec![1u8; 64], Access::NONE).unwrap();
        let mb = bpd.reg_mr(vec![0u8; 64], Access::LOCAL_WRITE).unwrap();
        bqp.post_recv(RecvWr {
            wr_id: RECV,
            sgl: vec![mb.sge(0, 64)].into(),
        })
        .unwrap();
        bcq.req_notify(false).unwrap();
        aqp.post_send(SendWr::send(1, [ma.sge(0, 8)])).unwrap();
        let ev = ch
            .get_event(Some(Duration::from_secs(5)))
            .expect("B's event");
        ev.ack_events(1);
        assert!(one(&bcq).is_success());
        drop((ev, bqp, mb, bcq, ch, bpd, b));
        let c = one(&acq);
        assert!(
            c.is_success(),
            "round {round}: A's SEND ended {:?}",
            c.status()
        );
    }
}
