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
                sgl: vec![w.hosts[1].sge(0, 8192)],
            },
        )
        .unwrap();
    w.hosts[0]
        .dev
        .post_send(qa, SendWr::send(1, vec![w.hosts[0].sge(0, 5000)]))
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
            SendWr::rdma(
                2,
                SendOp::Write,
                vec![w.hosts[0].sge(10_000, 3000)],
                dst,
                rkey,
            ),
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
            SendWr::rdma(
                3,
                SendOp::Read,
                vec![w.hosts[0].sge(200_000, 2500)],
                src,
                rkey,
            ),
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
                vec![w.hosts[0].sge(300_000, 8)],
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
                vec![w.hosts[0].sge(300_008, 8)],
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
