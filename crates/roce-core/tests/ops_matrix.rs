//! Every operation × sizes {0, 1, PMTU−1, PMTU, PMTU+1, 1 MiB} × path MTUs
//! {256, 1024, 4096} over RC (and the SEND/WRITE subset over UC, SEND over
//! UD), with the data verified byte by byte and every completion field
//! checked.

mod common;

use common::*;
use roce_core::*;

const MIB: usize = 1 << 20;

fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

#[derive(Clone, Copy, Debug)]
enum Op {
    Send,
    SendImm,
    SendInv,
    Write,
    WriteImm,
    Read,
}

fn sizes(pmtu: usize) -> [usize; 6] {
    [0, 1, pmtu - 1, pmtu, pmtu + 1, MIB]
}

fn run_case(w: &mut World, qa: Qpn, qb: Qpn, op: Op, len: usize, case: u64) {
    let src_off = 0u64;
    let dst_off = 2 * MIB as u64;
    let data = pattern(len, case);
    // Requester data at A:0; for READ the source is B's memory.
    match op {
        Op::Read => w.hosts[1].write(dst_off, &data),
        _ => w.hosts[0].write(src_off, &data),
    }
    // Clear the destination so stale bytes cannot pass the check.
    let dst_host = if matches!(op, Op::Read) { 0 } else { 1 };
    let clear_off = if matches!(op, Op::Read) {
        4 * MIB as u64
    } else {
        dst_off
    };
    w.hosts[dst_host].write(clear_off, &vec![0xeeu8; len + 1]);
    let recv_len = (len + 64) as u32;
    if matches!(op, Op::Send | Op::SendImm | Op::SendInv | Op::WriteImm) {
        let sge = w.hosts[1].sge(dst_off, recv_len);
        w.hosts[1]
            .dev
            .post_recv(
                qb,
                RecvWr {
                    wr_id: 1000 + case,
                    sgl: vec![sge].into(),
                },
            )
            .unwrap();
    }
    let rkey_b = w.hosts[1].mr.rkey;
    let va_b = w.hosts[1].base + dst_off;
    let wr = match op {
        Op::Send => SendWr::send(case, [w.hosts[0].sge(src_off, len as u32)]),
        Op::SendImm => SendWr {
            op: SendOp::SendWithImm(0xdead_0000 | case as u32),
            ..SendWr::send(case, [w.hosts[0].sge(src_off, len as u32)])
        },
        Op::SendInv => {
            // Register a scratch region on B whose rkey the SEND invalidates.
            let mr = w.hosts[1]
                .dev
                .reg_mr_invalidatable(
                    w.hosts[1].pd,
                    0x7000_0000,
                    Box::new(vec![0u8; 64]),
                    Access::LOCAL_WRITE | Access::REMOTE_READ,
                )
                .unwrap();
            SendWr {
                op: SendOp::SendWithInv(mr.rkey),
                ..SendWr::send(case, [w.hosts[0].sge(src_off, len as u32)])
            }
        }
        Op::Write => SendWr::rdma(
            case,
            SendOp::Write,
            [w.hosts[0].sge(src_off, len as u32)],
            va_b,
            rkey_b,
        ),
        Op::WriteImm => SendWr::rdma(
            case,
            SendOp::WriteWithImm(0xbeef_0000 | case as u32),
            [w.hosts[0].sge(src_off, len as u32)],
            va_b,
            rkey_b,
        ),
        Op::Read => SendWr::rdma(
            case,
            SendOp::Read,
            [w.hosts[0].sge(4 * MIB as u64, len as u32)],
            va_b,
            rkey_b,
        ),
    };
    let inv_rkey = match wr.op {
        SendOp::SendWithInv(k) => Some(k),
        _ => None,
    };
    w.hosts[0].dev.post_send(qa, wr).unwrap();
    w.settle(2_000_000);
    let ca = w.hosts[0].poll();
    let cb = w.hosts[1].poll();
    let ctx = format!("{op:?} len {len} case {case}");
    assert_eq!(ca.len(), 1, "{ctx}: requester completions {ca:?}");
    let c = ca[0];
    assert_eq!(
        (c.wr_id, c.status, c.qp_num),
        (case, WcStatus::Success, qa),
        "{ctx}"
    );
    let expect_opcode = match op {
        Op::Send | Op::SendImm | Op::SendInv => WcOpcode::Send,
        Op::Write | Op::WriteImm => WcOpcode::RdmaWrite,
        Op::Read => WcOpcode::RdmaRead,
    };
    assert_eq!(c.opcode, expect_opcode, "{ctx}");
    if matches!(op, Op::Read) {
        assert_eq!(c.byte_len as usize, len, "{ctx}");
        assert_eq!(
            w.hosts[0].read(4 * MIB as u64, len + 1)[..len],
            data[..],
            "{ctx}: READ data"
        );
        assert!(cb.is_empty(), "{ctx}");
        return;
    }
    // Destination bytes, and the byte after them untouched.
    let got = w.hosts[1].read(dst_off, len + 1);
    assert_eq!(&got[..len], &data[..], "{ctx}: data");
    let recv_expected = !matches!(op, Op::Write);
    if !recv_expected {
        assert!(cb.is_empty(), "{ctx}: {cb:?}");
        return;
    }
    assert_eq!(cb.len(), 1, "{ctx}: responder completions {cb:?}");
    let r = cb[0];
    assert_eq!(
        (r.wr_id, r.status, r.qp_num, r.src_qp),
        (1000 + case, WcStatus::Success, qb, qa),
        "{ctx}"
    );
    assert_eq!(r.byte_len as usize, len, "{ctx}");
    match op {
        Op::SendImm => {
            assert_eq!(
                (r.opcode, r.imm_data),
                (WcOpcode::Recv, 0xdead_0000 | case as u32),
                "{ctx}"
            );
            assert!(r.wc_flags.contains(WcFlags::WITH_IMM));
        }
        Op::WriteImm => {
            assert_eq!(
                (r.opcode, r.imm_data),
                (WcOpcode::RecvRdmaWithImm, 0xbeef_0000 | case as u32),
                "{ctx}"
            );
            assert!(r.wc_flags.contains(WcFlags::WITH_IMM));
        }
        Op::SendInv => {
            assert!(r.wc_flags.contains(WcFlags::WITH_INV), "{ctx}");
            assert_eq!(Some(r.invalidated_rkey), inv_rkey, "{ctx}");
        }
        _ => {
            assert_eq!(r.opcode, WcOpcode::Recv);
            assert!(!r.wc_flags.contains(WcFlags::WITH_IMM));
        }
    }
}

#[test]
fn rc_every_operation_size_and_mtu() {
    let mut case = 0;
    for pmtu in [256usize, 1024, 4096] {
        let mut w = World::new(6 * MIB);
        let (qa, qb) = w.connect(QpType::Rc, pmtu as u32);
        for op in [
            Op::Send,
            Op::SendImm,
            Op::SendInv,
            Op::Write,
            Op::WriteImm,
            Op::Read,
        ] {
            for len in sizes(pmtu) {
                case += 1;
                run_case(&mut w, qa, qb, op, len, case);
            }
        }
        let c = w.hosts[0].dev.qp_counters(qa).unwrap();
        assert_eq!(c.retransmitted, 0, "a clean wire needs no retransmission");
    }
}

#[test]
fn uc_send_and_write_every_size_and_mtu() {
    let mut case = 0;
    for pmtu in [256usize, 1024, 4096] {
        let mut w = World::new(6 * MIB);
        let (qa, qb) = w.connect(QpType::Uc, pmtu as u32);
        for op in [Op::Send, Op::SendImm, Op::Write, Op::WriteImm] {
            for len in sizes(pmtu) {
                case += 1;
                run_case(&mut w, qa, qb, op, len, case);
            }
        }
    }
}

#[test]
fn rc_atomics_every_mtu() {
    for pmtu in [256u32, 1024, 4096] {
        let mut w = World::new(MIB);
        let (qa, _qb) = w.connect(QpType::Rc, pmtu);
        let rkey = w.hosts[1].mr.rkey;
        let va = w.hosts[1].base + 64;
        w.hosts[1].write(64, &1000u64.to_ne_bytes());
        for i in 0..10u64 {
            let wr = SendWr::rdma(
                i,
                SendOp::FetchAdd { add: i },
                [w.hosts[0].sge(8 * i, 8)],
                va,
                rkey,
            );
            w.hosts[0].dev.post_send(qa, wr).unwrap();
        }
        let wr = SendWr::rdma(
            10,
            SendOp::CompareSwap {
                compare: 1045,
                swap: 5,
            },
            [w.hosts[0].sge(80, 8)],
            va,
            rkey,
        );
        w.hosts[0].dev.post_send(qa, wr).unwrap();
        let wr = SendWr::rdma(
            11,
            SendOp::CompareSwap {
                compare: 1045,
                swap: 9,
            },
            [w.hosts[0].sge(88, 8)],
            va,
            rkey,
        );
        w.hosts[0].dev.post_send(qa, wr).unwrap();
        w.settle(100_000);
        let ca = w.hosts[0].poll();
        assert_eq!(ca.len(), 12);
        let mut expect = 1000u64;
        for (i, c) in ca.iter().enumerate().take(10) {
            assert_eq!(
                (c.wr_id, c.status, c.opcode, c.byte_len),
                (i as u64, WcStatus::Success, WcOpcode::FetchAdd, 8)
            );
            assert_eq!(w.hosts[0].read(8 * i as u64, 8), expect.to_ne_bytes());
            expect += i as u64;
        }
        assert_eq!(expect, 1045);
        assert_eq!(
            w.hosts[0].read(80, 8),
            1045u64.to_ne_bytes(),
            "CAS returns the original"
        );
        assert_eq!(
            w.hosts[0].read(88, 8),
            5u64.to_ne_bytes(),
            "second CAS sees the swapped value"
        );
        assert_eq!(
            w.hosts[1].read(64, 8),
            5u64.to_ne_bytes(),
            "second CAS did not swap"
        );
    }
}

#[test]
fn ud_send_every_mtu_with_grh() {
    for pmtu in [256usize, 1024, 4096] {
        let mut w = World::with_mtu(MIB, pmtu as u32);
        let (qa, qb) = w.connect(QpType::Ud, pmtu as u32);
        for (i, len) in [0, 1, pmtu - 1, pmtu].into_iter().enumerate() {
            let data = pattern(len, i as u64);
            w.hosts[0].write(0, &data);
            let sge = w.hosts[1].sge(8192, (40 + len) as u32);
            w.hosts[1]
                .dev
                .post_recv(
                    qb,
                    RecvWr {
                        wr_id: 50 + i as u64,
                        sgl: vec![sge].into(),
                    },
                )
                .unwrap();
            let dest = UdDest::new(w.hosts[1].addr(), qb, Qkey::new(0x1111_1111));
            let mut wr = SendWr::send(i as u64, [w.hosts[0].sge(0, len as u32)]);
            wr.ud = Some(dest);
            if i == 1 {
                wr.op = SendOp::SendWithImm(77);
            }
            w.hosts[0].dev.post_send(qa, wr).unwrap();
            w.settle(10_000);
            let ca = w.hosts[0].poll();
            assert_eq!((ca[0].wr_id, ca[0].status), (i as u64, WcStatus::Success));
            let cb = w.hosts[1].poll();
            assert_eq!(cb.len(), 1, "len {len}");
            let r = cb[0];
            assert_eq!(
                (r.status, r.byte_len as usize, r.src_qp),
                (WcStatus::Success, 40 + len, qa)
            );
            assert!(r.wc_flags.contains(WcFlags::GRH));
            assert_eq!(r.wc_flags.contains(WcFlags::WITH_IMM), i == 1);
            let grh = w.hosts[1].read(8192, 40);
            assert!(
                grh[..20].iter().all(|&b| b == 0),
                "IPv4 GRH: 20 zero bytes first"
            );
            assert_eq!(grh[20], 0x45, "then the IPv4 header");
            assert_eq!(&grh[32..36], &[10, 0, 0, 1], "with the sender's address");
            assert_eq!(w.hosts[1].read(8192 + 40, len), data);
        }
        // A UD message longer than the path MTU is refused at post time.
        let mut wr = SendWr::send(99, [w.hosts[0].sge(0, pmtu as u32 + 1)]);
        wr.ud = Some(UdDest::new(w.hosts[1].addr(), qb, Qkey::new(0x1111_1111)));
        assert!(matches!(
            w.hosts[0].dev.post_send(qa, wr),
            Err(PostError::InvalidWr(_))
        ));
    }
}

#[test]
fn ud_send_follows_its_address_vector() {
    use std::sync::{Arc, Mutex};
    let mut w = World::new(MIB);
    let (qa, qb) = w.connect(QpType::Ud, 1024);
    let seen = Arc::new(Mutex::new(Vec::new()));
    let seen2 = seen.clone();
    w.filter = Box::new(move |from, d| {
        if from == 0 {
            let p = roce_wire::RocePacket::parse_ip(d).unwrap();
            let ttl = match p.ip {
                roce_wire::IpRepr::V4(v4) => v4.ttl,
                roce_wire::IpRepr::V6(v6) => v6.hop_limit,
            };
            seen2.lock().unwrap().push((p.ip.dscp(), ttl));
        }
        Verdict::Deliver
    });
    let sge = w.hosts[1].sge(0, 100);
    w.hosts[1]
        .dev
        .post_recv(
            qb,
            RecvWr {
                wr_id: 1,
                sgl: vec![sge].into(),
            },
        )
        .unwrap();
    let mut dest = UdDest::new(w.hosts[1].addr(), qb, Qkey::new(0x1111_1111));
    dest.av.traffic_class = 26 << 2;
    dest.av.hop_limit = 9;
    let mut wr = SendWr::send(7, [w.hosts[0].sge(0, 16)]);
    wr.ud = Some(dest);
    w.hosts[0].dev.post_send(qa, wr).unwrap();
    w.settle(10_000);
    assert_eq!(w.hosts[1].poll()[0].status, WcStatus::Success);
    assert_eq!(*seen.lock().unwrap(), vec![(26, 9)]);
    // A GID index the device does not have fails the WR, not the process.
    let mut bad = UdDest::new(w.hosts[1].addr(), qb, Qkey::new(0x1111_1111));
    bad.av.sgid_index = 5;
    let mut wr = SendWr::send(8, [w.hosts[0].sge(0, 16)]);
    wr.ud = Some(bad);
    w.hosts[0].dev.post_send(qa, wr).unwrap();
    w.settle(10_000);
    let c = w.hosts[0].poll();
    assert_eq!(
        (c.last().unwrap().wr_id, c.last().unwrap().status),
        (8, WcStatus::LocQpOpErr)
    );
}
