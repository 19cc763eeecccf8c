//! Concurrency and loss.

mod common;

use std::thread;

use common::*;
use roce_io::FaultConfig;
use roce_verbs::*;

/// Eight application threads and two progress threads share two cores in
/// this test (more when other test binaries run alongside): a budget that
/// only a lost completion can exhaust, not a scheduler that ran something
/// else for a few seconds. (The 5 s of `common::WAIT` ran out about once
/// in a thousand runs while a compile competed for the cores; the
/// failures examined still had completions arriving, 82 and 93 of 100 by
/// the deadline, so they were late, not lost.)
const STARVED_WAIT: std::time::Duration = std::time::Duration::from_secs(60);

fn one_starved(cq: &CompletionQueue) -> Completion {
    let mut v = cq.poll_until(1, STARVED_WAIT).unwrap();
    assert_eq!(v.len(), 1, "no completion within {STARVED_WAIT:?}");
    v.pop().unwrap()
}

#[test]
fn threads_post_and_poll_on_their_own_qps_of_one_context() {
    let fabric = roce_io::Fabric::new();
    let a = Context::open_fabric(&fabric, "10.0.0.1".parse().unwrap()).unwrap();
    let b = Context::open_fabric(&fabric, "10.0.0.2".parse().unwrap()).unwrap();
    let (pa, pb) = (a.alloc_pd(), b.alloc_pd());
    let mut handles = Vec::new();
    for t in 0..4u8 {
        let (ca, cb) = (
            a.create_cq(256, None).unwrap(),
            b.create_cq(256, None).unwrap(),
        );
        let qa = pa
            .create_qp(&QpInitAttr::new(QpType::Rc, &ca, &ca))
            .unwrap();
        let qb = pb
            .create_qp(&QpInitAttr::new(QpType::Rc, &cb, &cb))
            .unwrap();
        let (ea, eb) = (qa.endpoint(Psn::new(t as u32)), qb.endpoint(Psn::new(77)));
        qa.connect(ea.psn, &eb, &ConnectOptions::default()).unwrap();
        qb.connect(eb.psn, &ea, &ConnectOptions::default()).unwrap();
        let remote = pb.reg_mr(vec![0u8; 100 * 256], ALL).unwrap();
        let src = pa.reg_mr(vec![0u8; 256], Access::NONE).unwrap();
        // The requester thread: 100 WRITEs and 100 SENDs, one at a time.
        handles.push(thread::spawn(move || {
            let r = remote.remote();
            for i in 0..100u64 {
                let data = pattern(256, t.wrapping_add(i as u8));
                src.write(0, &data).unwrap();
                let wr = SendWr::write(i, [src.sge_all()], r.at(i * 256));
                qa.post_send(wr).unwrap();
                let c = one_starved(&ca);
                assert_eq!((c.wr_id(), c.status()), (i, WcStatus::Success));
                qa.post_send(SendWr::send(1000 + i, [src.sge(0, 8)]))
                    .unwrap();
                assert!(one_starved(&ca).is_success());
            }
            let all = remote.to_vec().unwrap();
            for i in 0..100usize {
                assert_eq!(
                    &all[i * 256..(i + 1) * 256],
                    &pattern(256, t.wrapping_add(i as u8))[..]
                );
            }
        }));
        // The responder thread: receives the SENDs.
        handles.push(thread::spawn(move || {
            let rx = pb_clone_reg(&qb);
            for i in 0..100u64 {
                qb.post_recv(RecvWr {
                    wr_id: i,
                    sgl: vec![rx.sge(0, 8)].into(),
                })
                .unwrap();
            }
            let got = cb.poll_until(100, STARVED_WAIT).unwrap();
            assert_eq!(got.len(), 100);
            assert!(got
                .iter()
                .enumerate()
                .all(|(i, c)| c.is_success() && c.wr_id() == i as u64));
        }));
    }
    for h in handles {
        h.join().unwrap();
    }
}

fn pb_clone_reg(qp: &QueuePair) -> MemoryRegion {
    qp.pd().reg_mr(vec![0u8; 8], Access::LOCAL_WRITE).unwrap()
}

#[test]
fn rc_over_five_percent_loss_completes_200_mixed_wrs() {
    let opts = ConnectOptions {
        timeout: 8,
        ..ConnectOptions::default()
    };
    let fa = FaultConfig::new(0x5eed).loss(0.05);
    let fb = FaultConfig::new(0xbeef).loss(0.05);
    let (a, b) = pair_with(QpType::Rc, Some(fa), Some(fb), &opts);
    const N: u64 = 200;
    const SZ: u64 = 3000;
    let local =
        a.pd.reg_mr(vec![0u8; (N * SZ) as usize], Access::LOCAL_WRITE)
            .unwrap();
    let remote = b.pd.reg_mr(vec![0u8; (N * SZ) as usize], ALL).unwrap();
    let counter = b.pd.reg_mr(vec![0u8; 8], ALL).unwrap();
    let inbox =
        b.pd.reg_mr(vec![0u8; (N * SZ) as usize], Access::LOCAL_WRITE)
            .unwrap();
    let r = remote.remote();
    for i in 0..N {
        let off = i * SZ;
        match i % 4 {
            // WRITE a slice; READ it back later.
            0 | 1 => {
                local.write(off, &pattern(SZ as usize, i as u8)).unwrap();
                let wr = SendWr::write(i, [local.sge(off, SZ as u32)], r.at(off));
                a.qp.post_send(wr).unwrap();
            }
            2 => {
                local.write(off, &pattern(SZ as usize, i as u8)).unwrap();
                b.qp.post_recv(RecvWr {
                    wr_id: i,
                    sgl: vec![inbox.sge(off, SZ as u32)].into(),
                })
                .unwrap();
                a.qp.post_send(SendWr::send(i, [local.sge(off, SZ as u32)]))
                    .unwrap();
            }
            _ => {
                let c = counter.remote();
                let wr = SendWr::fetch_add(i, [local.sge(off, 8)], c.at(0), 1);
                a.qp.post_send(wr).unwrap();
            }
        }
    }
    let done =
        a.cq.poll_until(N as usize, std::time::Duration::from_secs(8))
            .unwrap();
    assert_eq!(done.len(), N as usize, "completions: {}", done.len());
    for (i, c) in done.iter().enumerate() {
        assert_eq!(
            (c.wr_id(), c.status()),
            (i as u64, WcStatus::Success),
            "{c:?}"
        );
    }
    let recvs = b.cq.poll_until((N / 4) as usize, WAIT).unwrap();
    assert!(recvs
        .iter()
        .all(|c| c.is_success() && c.byte_len() == SZ as u32));
    let mut v = [0u8; 8];
    counter.read(0, &mut v).unwrap();
    assert_eq!(
        u64::from_ne_bytes(v),
        N / 4,
        "each FAA applied exactly once"
    );
    let all = remote.to_vec().unwrap();
    let inb = inbox.to_vec().unwrap();
    for i in 0..N {
        let s = (i * SZ) as usize..((i + 1) * SZ) as usize;
        match i % 4 {
            0 | 1 => assert_eq!(&all[s], &pattern(SZ as usize, i as u8)[..], "WRITE {i}"),
            2 => assert_eq!(&inb[s], &pattern(SZ as usize, i as u8)[..], "SEND {i}"),
            _ => {}
        }
    }
    // READ everything written back, over the same lossy link.
    let back =
        a.pd.reg_mr(vec![0u8; (N * SZ) as usize], Access::LOCAL_WRITE)
            .unwrap();
    a.qp.post_send(SendWr::read(9999, [back.sge_all()], r.at(0)))
        .unwrap();
    let c = one(&a.cq);
    assert_eq!((c.wr_id(), c.status()), (9999, WcStatus::Success));
    assert_eq!(back.to_vec().unwrap(), all);
    assert!(
        a.qp.counters().retransmitted + b.qp.counters().retransmitted > 0,
        "loss happened"
    );
}

#[test]
fn handles_are_send_and_sync() {
    fn check<T: Send + Sync>() {}
    check::<Context>();
    check::<ProtectionDomain>();
    check::<MemoryRegion>();
    check::<CompletionQueue>();
    check::<CompletionChannel>();
    check::<QueuePair>();
    check::<SharedReceiveQueue>();
    check::<AddressHandle>();
}

#[test]
fn any_backend_works_without_doorbells() {
    // Plain fabric ports: nothing wakes the passive side's progress thread,
    // which notices traffic within `max_park`.
    let fabric = roce_io::Fabric::new();
    let open = |addr: &str| {
        let addr = addr.parse().unwrap();
        let progress = ProgressConfig {
            max_park: std::time::Duration::from_micros(200),
            ..ProgressConfig::default()
        };
        Context::open_with(
            fabric.endpoint(addr).unwrap(),
            DeviceConfig::new(addr),
            progress,
        )
        .unwrap()
    };
    let (a, b) = (open("10.1.0.1"), open("10.1.0.2"));
    let (pa, pb) = (a.alloc_pd(), b.alloc_pd());
    let (ca, cb) = (
        a.create_cq(16, None).unwrap(),
        b.create_cq(16, None).unwrap(),
    );
    let qa = pa
        .create_qp(&QpInitAttr::new(QpType::Rc, &ca, &ca))
        .unwrap();
    let qb = pb
        .create_qp(&QpInitAttr::new(QpType::Rc, &cb, &cb))
        .unwrap();
    let (ea, eb) = (qa.endpoint(Psn::new(5)), qb.endpoint(Psn::new(6)));
    qa.connect(ea.psn, &eb, &ConnectOptions::default()).unwrap();
    qb.connect(eb.psn, &ea, &ConnectOptions::default()).unwrap();
    let target = pb.reg_mr(vec![0u8; 50_000], ALL).unwrap();
    let r = target.remote();
    for i in 0..20u64 {
        let wr = SendWr::write(i, [], r.at(0));
        qa.post_send_owned(wr, pattern(50_000, i as u8)).unwrap();
        let mut c = one(&ca);
        assert!(c.is_success());
        assert_eq!(c.take_buffer().unwrap(), pattern(50_000, i as u8));
        assert_eq!(target.to_vec().unwrap(), pattern(50_000, i as u8));
    }
}
