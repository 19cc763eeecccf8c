//! RC smoke tests: every operation once, data and completions checked.

mod common;

use common::*;
use roce_core::*;

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

#[test]
fn rc_send_write_read_atomics() {
    let mut w = World::new(1 << 20);
    let (qa, qb) = w.connect(QpType::Rc, 1024);
    // SEND 5000 bytes A -> B.
    let data = pattern(5000, 7);
    w.hosts[0].write(0, &data);
    w.hosts[1]
        .dev
        .post_recv(
            qb,
            RecvWr {
                wr_id: 9,
                sgl: vec![w.hosts[1].sge(0, 8192)].into(),
            },
        )
        .unwrap();
    w.hosts[0]
        .dev
        .post_send(qa, SendWr::send(1, [w.hosts[0].sge(0, 5000)]))
        .unwrap();
    w.settle(100_000);
    let ca = w.hosts[0].poll();
    let cb = w.hosts[1].poll();
    assert_eq!(ca.len(), 1, "{ca:?}");
    assert_eq!(ca[0].status, WcStatus::Success);
    assert_eq!(ca[0].wr_id, 1);
    assert_eq!(ca[0].opcode, WcOpcode::Send);
    assert_eq!(cb.len(), 1, "{cb:?}");
    assert_eq!(
        (cb[0].wr_id, cb[0].status, cb[0].opcode, cb[0].byte_len),
        (9, WcStatus::Success, WcOpcode::Recv, 5000)
    );
    assert_eq!(w.hosts[1].read(0, 5000), data);

    // WRITE 3000 bytes A -> B at offset 100000.
    let data = pattern(3000, 3);
    w.hosts[0].write(10_000, &data);
    let rkey = w.hosts[1].mr.rkey;
    let dst = w.hosts[1].base + 100_000;
    w.hosts[0]
        .dev
        .post_send(
            qa,
            SendWr::rdma(2, SendOp::Write, [w.hosts[0].sge(10_000, 3000)], dst, rkey),
        )
        .unwrap();
    w.settle(100_000);
    let ca = w.hosts[0].poll();
    assert_eq!(
        (ca[0].wr_id, ca[0].status, ca[0].opcode),
        (2, WcStatus::Success, WcOpcode::RdmaWrite)
    );
    assert_eq!(w.hosts[1].read(100_000, 3000), data);
    assert!(
        w.hosts[1].poll().is_empty(),
        "a plain WRITE completes nothing at the responder"
    );

    // READ 2500 bytes back from B into A at offset 200000.
    let src = w.hosts[1].base + 100_000;
    w.hosts[0]
        .dev
        .post_send(
            qa,
            SendWr::rdma(3, SendOp::Read, [w.hosts[0].sge(200_000, 2500)], src, rkey),
        )
        .unwrap();
    w.settle(100_000);
    let ca = w.hosts[0].poll();
    assert_eq!(
        (ca[0].wr_id, ca[0].status, ca[0].opcode, ca[0].byte_len),
        (3, WcStatus::Success, WcOpcode::RdmaRead, 2500)
    );
    assert_eq!(w.hosts[0].read(200_000, 2500), data[..2500].to_vec());

    // FETCH_ADD and COMPARE_SWAP on B's word at offset 4096.
    w.hosts[1].write(4096, &40u64.to_ne_bytes());
    let va = w.hosts[1].base + 4096;
    w.hosts[0]
        .dev
        .post_send(
            qa,
            SendWr::rdma(
                4,
                SendOp::FetchAdd { add: 2 },
                [w.hosts[0].sge(300_000, 8)],
                va,
                rkey,
            ),
        )
        .unwrap();
    w.hosts[0]
        .dev
        .post_send(
            qa,
            SendWr::rdma(
                5,
                SendOp::CompareSwap {
                    compare: 42,
                    swap: 7,
                },
                [w.hosts[0].sge(300_008, 8)],
                va,
                rkey,
            ),
        )
        .unwrap();
    w.settle(100_000);
    let ca = w.hosts[0].poll();
    assert_eq!(ca.len(), 2);
    assert_eq!(
        (ca[0].wr_id, ca[0].opcode, ca[0].status),
        (4, WcOpcode::FetchAdd, WcStatus::Success)
    );
    assert_eq!(
        (ca[1].wr_id, ca[1].opcode, ca[1].status),
        (5, WcOpcode::CompSwap, WcStatus::Success)
    );
    assert_eq!(w.hosts[0].read(300_000, 8), 40u64.to_ne_bytes());
    assert_eq!(w.hosts[0].read(300_008, 8), 42u64.to_ne_bytes());
    assert_eq!(w.hosts[1].read(4096, 8), 7u64.to_ne_bytes());
}

/// The destination QP of each of host 0's first 48 packets when two of
/// its QPs each have a 64 KiB WRITE (64 packets of 1024) to send.
fn turns(tx_burst: u32) -> Vec<u32> {
    let mut w = World::with_config(1 << 20, |c| c.tx_burst = tx_burst);
    let (a1, b1) = w.connect(QpType::Rc, 1024);
    let (a2, b2) = w.connect(QpType::Rc, 1024);
    let (raddr, rkey) = (w.hosts[1].base, w.hosts[1].mr.rkey);
    for (i, qa) in [a1, a2].into_iter().enumerate() {
        let sge = w.hosts[0].sge(0, 65536);
        let wr = SendWr::rdma(i as u64, SendOp::Write, [sge], raddr, rkey);
        w.hosts[0].dev.post_send(qa, wr).unwrap();
    }
    let mut buf = vec![0u8; 4400];
    (0..48)
        .map(|_| {
            let n = w.hosts[0]
                .dev
                .poll_transmit(0, &mut buf)
                .datagram()
                .expect("a packet")
                .size;
            // BTH destination QP after IPv4 (20) and UDP (8) headers.
            let d = &buf[..n];
            let qpn = u32::from_be_bytes([0, d[33], d[34], d[35]]);
            assert!(qpn == b1.value() || qpn == b2.value());
            u32::from(qpn == b2.value())
        })
        .collect()
}

#[test]
fn busy_qps_take_turns_in_bursts() {
    // Default: 16 packets a turn, so a backend can send each run at once.
    let runs: Vec<u32> = [0, 1, 0].iter().flat_map(|&q| [q; 16]).collect();
    assert_eq!(turns(16), runs);
    // One packet a turn (what the simulator's NICs use).
    let alternate: Vec<u32> = (0..48).map(|i| i % 2).collect();
    assert_eq!(turns(1), alternate);
}

/// `max_outstanding` is the deepest the requester's window went: a
/// 64-packet WRITE opens it past one packet and never past the
/// per-packet window the device enforces; a lone one-packet SEND at a
/// time never past one.
#[test]
fn max_outstanding_is_the_deepest_window() {
    let mut w = World::new(1 << 20);
    let (qa, _qb) = w.connect(QpType::Rc, 1024);
    let rkey = w.hosts[1].mr.rkey;
    let dst = w.hosts[1].base;
    w.hosts[0]
        .dev
        .post_send(
            qa,
            SendWr::rdma(1, SendOp::Write, [w.hosts[0].sge(0, 64 * 1024)], dst, rkey),
        )
        .unwrap();
    w.settle(1_000_000);
    assert_eq!(w.hosts[0].poll().len(), 1);
    let c = w.hosts[0].dev.qp(qa).unwrap().counters();
    assert!(
        (2..=64).contains(&c.max_outstanding),
        "max_outstanding {}",
        c.max_outstanding
    );
    let (qc, qd) = w.connect(QpType::Rc, 1024);
    for i in 0..5 {
        w.hosts[1]
            .dev
            .post_recv(
                qd,
                RecvWr {
                    wr_id: i,
                    sgl: vec![w.hosts[1].sge(0, 64)].into(),
                },
            )
            .unwrap();
        w.hosts[0]
            .dev
            .post_send(qc, SendWr::send(i, [w.hosts[0].sge(0, 64)]))
            .unwrap();
        w.settle(100_000);
    }
    assert_eq!(w.hosts[0].dev.qp(qc).unwrap().counters().max_outstanding, 1);
}
