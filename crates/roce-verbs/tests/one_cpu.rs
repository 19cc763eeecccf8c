//! A program that may run on one CPU only (a one-CPU VM or container, or
//! `taskset -c 0`): an empty poll yields the CPU
//! (`ProgressConfig::yield_when_idle`), since whoever the program waits
//! for needs it. What that is worth is measured, not tested here
//! (`benches/dropin_side_by_side.py --one-cpu`); here: the default
//! follows the CPUs the opening thread may use, and a ping-pong on one
//! CPU completes with it on.

mod common;

use std::time::Duration;

use common::*;
use nix::sched::{sched_getaffinity, sched_setaffinity, CpuSet};
use nix::unistd::Pid;
use roce_io::Fabric;
use roce_verbs::*;

/// Runs `f` on a thread allowed only the first CPU this one may use.
fn on_one_cpu<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    std::thread::spawn(move || {
        let mine = sched_getaffinity(Pid::from_raw(0)).unwrap();
        let first = (0..CpuSet::count()).find(|&c| mine.is_set(c).unwrap_or(false));
        let mut one = CpuSet::new();
        one.set(first.expect("no CPU in the affinity mask"))
            .unwrap();
        sched_setaffinity(Pid::from_raw(0), &one).unwrap();
        f()
    })
    .join()
    .unwrap()
}

#[test]
fn the_default_follows_the_cpus_the_thread_may_use() {
    let cpus = std::thread::available_parallelism().unwrap().get();
    assert_eq!(ProgressConfig::default().yield_when_idle, cpus == 1);
    assert!(on_one_cpu(|| ProgressConfig::default().yield_when_idle));
}

/// Two contexts and their progress threads on one CPU, each side
/// polling its CQ between messages: 200 SEND round trips, every byte
/// checked.
#[test]
fn a_ping_pong_on_one_cpu_completes() {
    on_one_cpu(|| {
        let fabric = Fabric::new();
        let open = |a: &str| {
            let ctx = Context::open_fabric(&fabric, a.parse().unwrap()).unwrap();
            let pd = ctx.alloc_pd();
            let cq = ctx.create_cq(16, None).unwrap();
            let qp = pd
                .create_qp(&QpInitAttr::new(QpType::Rc, &cq, &cq))
                .unwrap();
            Side { ctx, pd, cq, qp }
        };
        let (a, b) = (open("10.0.0.1"), open("10.0.0.2"));
        let (ea, eb) = (a.qp.endpoint(Psn::new(1)), b.qp.endpoint(Psn::new(900)));
        a.qp.connect(ea.psn, &eb, &ConnectOptions::default())
            .unwrap();
        b.qp.connect(eb.psn, &ea, &ConnectOptions::default())
            .unwrap();
        let ma = a.pd.reg_mr(vec![0u8; 64], Access::LOCAL_WRITE).unwrap();
        let mb = b.pd.reg_mr(vec![0u8; 64], Access::LOCAL_WRITE).unwrap();
        let wait = Duration::from_secs(20);
        for i in 0..200u64 {
            let (from, to, mf, mt) = if i % 2 == 0 {
                (&a, &b, &ma, &mb)
            } else {
                (&b, &a, &mb, &ma)
            };
            to.qp
                .post_recv(RecvWr {
                    wr_id: i,
                    sgl: vec![mt.sge(0, 64)].into(),
                })
                .unwrap();
            mf.write(0, &pattern(64, i as u8)).unwrap();
            from.qp.post_send(SendWr::send(i, [mf.sge(0, 64)])).unwrap();
            let got = to.cq.poll_until(1, wait).unwrap();
            assert_eq!(got.len(), 1, "round {i}: nothing arrived");
            assert!(got[0].is_success() && got[0].wr_id() == i, "{got:?}");
            assert_eq!(mt.to_vec().unwrap(), pattern(64, i as u8), "round {i}");
            let sent = from.cq.poll_until(1, wait).unwrap();
            assert!(sent.len() == 1 && sent[0].is_success(), "{sent:?}");
        }
    });
}
