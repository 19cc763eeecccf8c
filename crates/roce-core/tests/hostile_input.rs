//! Every input from the network is hostile: random but well-formed RoCE v2
//! packets (valid ICRC, any opcode, random headers and payloads) and random
//! bytes thrown at live RC, UC and UD QPs must never panic the engine, and
//! the device must keep working afterwards.

mod common;

use common::*;
use proptest::prelude::*;
use roce_core::*;
use roce_testkit::frames;
use roce_wire::{
    AethRepr, AtomicEthRepr, BthRepr, DethRepr, ExtHeaders, Headers, Opcode, PayloadRule, RethRepr,
    Syndrome,
};

/// A packet from host A's address to host B, with the given fields.
#[allow(clippy::too_many_arguments)]
fn packet(
    op: Opcode,
    dest_qp: u32,
    psn: u32,
    ack_req: bool,
    va: u64,
    rkey: u32,
    len: u32,
    syn: u8,
    imm: u32,
    payload: &[u8],
) -> Vec<u8> {
    let h = op.headers();
    let has = |x| h.contains(x);
    let ext = ExtHeaders {
        deth: has(Headers::DETH).then_some(DethRepr {
            qkey: Qkey::new(if imm & 1 == 0 { 0x1111_1111 } else { imm }),
            src_qp: Qpn::new(psn),
        }),
        feth: None,
        reth: has(Headers::RETH).then_some(RethRepr {
            va,
            rkey: Rkey::new(rkey),
            dma_len: len,
        }),
        atomic: has(Headers::ATOMIC_ETH).then_some(AtomicEthRepr {
            va,
            rkey: Rkey::new(rkey),
            swap_add: imm as u64,
            compare: len as u64,
        }),
        aeth: has(Headers::AETH).then_some(AethRepr {
            syndrome: Syndrome::from_byte(syn),
            msn: Msn::new(psn),
        }),
        atomic_ack: has(Headers::ATOMIC_ACK_ETH).then_some(va),
        imm: has(Headers::IMM).then_some(imm),
        ieth: has(Headers::IETH).then_some(Rkey::new(rkey)),
    };
    if has(Headers::FETH) {
        return Vec::new();
    }
    let mut bth = BthRepr::new(op, Qpn::new(dest_qp), Psn::new(psn));
    bth.ack_req = ack_req;
    let (a, b) = ([10, 0, 0, 1].into(), [10, 0, 0, 2].into());
    let mut repr = frames::frame_v4(a, b, 0xc000, bth, ext, payload);
    frames::ipv4_mut(&mut repr).ecn = roce_wire::Ecn::from_bits(syn);
    frames::try_emit(&repr).unwrap_or_default()
}

fn payload_len(op: Opcode, want: usize) -> usize {
    match op.payload() {
        PayloadRule::None => 0,
        PayloadRule::Pmtu => [256, 1024, 4096][want % 3],
        PayloadRule::Last => 1 + want % 4096,
        PayloadRule::UpToPmtu => want % 4097,
        PayloadRule::Exactly(n) => n,
    }
}

/// A world whose host B has RC, UC and UD QPs in RTS (and receives posted).
fn target() -> (World, Vec<u32>) {
    let mut w = World::new(1 << 16);
    let (_, rc) = w.connect(QpType::Rc, 1024);
    let (_, uc) = w.connect(QpType::Uc, 256);
    let (_, ud) = w.connect(QpType::Ud, 4096);
    for (i, q) in [rc, uc, ud].into_iter().enumerate() {
        for k in 0..4 {
            let sge = w.hosts[1].sge(4096 * (i as u64 * 4 + k), 4096);
            w.hosts[1]
                .dev
                .post_recv(
                    q,
                    RecvWr {
                        wr_id: k,
                        sgl: vec![sge].into(),
                    },
                )
                .unwrap();
        }
    }
    (w, vec![rc.value(), uc.value(), ud.value()])
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn random_wellformed_packets_never_panic(
        pkts in proptest::collection::vec(
            (any::<u8>(), 0usize..4, any::<u32>(), any::<bool>(), any::<u64>(), any::<u32>(), any::<u32>(), any::<u8>(), any::<u32>(), any::<usize>(), any::<bool>()),
            1..40,
        )
    ) {
        let (mut w, qps) = target();
        let rkey_b = w.hosts[1].mr.rkey.value();
        let base_b = w.hosts[1].base;
        let sent = pkts.len();
        for (opb, which, psn, ack, va, rkey, len, syn, imm, plen, aim) in pkts {
            let ops: Vec<Opcode> = Opcode::all().collect();
            let op = ops[opb as usize % ops.len()];
            let dest = if which < 3 { qps[which] } else { psn & 0xff_ffff };
            // Half the time aim at real memory with the real key.
            let (va, rkey) = if aim { (base_b + (va % 70_000), rkey_b) } else { (va, rkey) };
            let payload = vec![0xa5u8; payload_len(op, plen)];
            let d = packet(op, dest, psn, ack, va, rkey, len % 100_000, syn, imm, &payload);
            if d.is_empty() { continue; }
            w.hosts[1].dev.handle_datagram(w.now, &d, RxMeta::default());
            w.now += 100;
            if w.hosts[1].dev.poll_timeout().is_some_and(|t| t <= w.now) {
                w.hosts[1].dev.handle_timeout(w.now);
            }
            let mut buf = vec![0u8; 4400];
            while w.hosts[1].dev.poll_transmit(w.now, &mut buf).datagram().is_some() {}
        }
        // No datagram was counted twice (whether the QPs see them is
        // checked by hostile_packets_reach_the_qps).
        let c = w.hosts[1].dev.counters();
        prop_assert!(c.rx_datagrams as usize <= sent);
        // The device still works: its CQ polls, events drain, and a fresh
        // RC pair on it carries data.
        let _ = w.hosts[1].poll();
        while w.hosts[1].dev.poll_event().is_some() {}
        let (qa, qb) = w.connect(QpType::Rc, 1024);
        w.hosts[0].write(0, b"still alive");
        let sge = w.hosts[1].sge(60_000, 64);
        w.hosts[1].dev.post_recv(qb, RecvWr { wr_id: 99, sgl: vec![sge].into() }).unwrap();
        w.hosts[0].dev.post_send(qa, SendWr::send(1, [w.hosts[0].sge(0, 11)])).unwrap();
        w.settle(100_000);
        prop_assert!(w.hosts[1].poll().iter().any(|c| c.wr_id == 99 && c.status == WcStatus::Success));
        prop_assert_eq!(w.hosts[1].read(60_000, 11), b"still alive".to_vec());
    }

    #[test]
    fn random_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..300)) {
        let (mut w, _) = target();
        w.hosts[1].dev.handle_datagram(0, &data, RxMeta::default());
        w.hosts[1].dev.handle_datagram(0, &data, RxMeta::inexact());
        let mut buf = vec![0u8; 4400];
        while w.hosts[1].dev.poll_transmit(0, &mut buf).datagram().is_some() {}
    }
}

/// The generator reaches the QPs' processing: over a fixed sample, most
/// packets are accepted by a QP (executed, NAKed or dropped by its rules).
#[test]
fn hostile_packets_reach_the_qps() {
    let (mut w, qps) = target();
    let mut x = 0x2545_f491_4f6c_dd1du64;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let base = w.hosts[1].base;
    let rkey = w.hosts[1].mr.rkey.value();
    let mut delivered = 0;
    for _ in 0..2000 {
        let ops: Vec<Opcode> = Opcode::all().collect();
        let op = ops[(next() % ops.len() as u64) as usize];
        let dest = qps[(next() % 3) as usize];
        let payload = vec![1u8; payload_len(op, next() as usize)];
        let d = packet(
            op,
            dest,
            next() as u32 & 0xff_ffff,
            true,
            base + next() % 60_000,
            rkey,
            (next() % 5000) as u32,
            next() as u8,
            next() as u32,
            &payload,
        );
        if !d.is_empty() {
            w.hosts[1].dev.handle_datagram(0, &d, RxMeta::default());
            delivered += 1;
        }
    }
    let per_qp: u64 = qps
        .iter()
        .map(|&q| {
            let c = w.hosts[1].dev.qp_counters(Qpn::new(q)).unwrap();
            c.rx_packets
                + c.drop_out_of_sequence
                + c.duplicates
                + c.drop_invalid
                + c.drop_qkey
                + c.drop_bad_state
                + c.drop_ghost_response
        })
        .sum();
    assert!(delivered > 1000, "{delivered}");
    assert!(
        per_qp as f64 > 0.9 * delivered as f64,
        "only {per_qp} of {delivered} reached a QP"
    );
}
