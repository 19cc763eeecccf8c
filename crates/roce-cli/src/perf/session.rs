//! The one session driver of `roce perf`: a run's sizes in order, each
//! with its buffers made ready, the plane's sync, the traffic loop
//! perftest's tools run in that role ([`super::traffic`],
//! [`super::traffic_lat`]) and the plane's report; then the plane's
//! closing report. The control plane is any [`ControlPlane`] (roce
//! perf's own exchange, perftest's over TCP or rdma_cm); the QPs are
//! already connected.

use std::time::{Duration, Instant};

use super::error::PerfError;
use super::messages::Test;
use super::plane::{After, ControlPlane, Measured, Run};
use super::traffic::{client_traffic, send_duplex, server_receive, Counted, Traffic, Watch};
use super::traffic_lat::{one_sided, send_ping_pong, write_ping_pong};

/// Runs every size of `run` over `plane`; the rows this side prints.
pub(crate) fn run<P: ControlPlane>(plane: &mut P, run: &Run<'_>) -> Result<Vec<P::Row>, PerfError> {
    let mut rows = Vec::new();
    for (k, &size) in run.sizes.iter().enumerate() {
        let after = if run.test.is_bw() {
            bw_size(plane, run, k, size)?
        } else {
            lat_size(plane, run, k, size)?
        };
        match after {
            After::Row(r) => rows.push(r),
            After::Nothing => {}
            After::End => break,
        }
    }
    plane.finish(run, &mut rows)?;
    Ok(rows)
}

/// One loop's parameters; a timed run's clock starts here.
fn traffic<'a>(run: &'a Run<'a>, size: u64, depth: u64, cq_mod: u64) -> Traffic<'a> {
    Traffic {
        lanes: run.lanes,
        remotes: run.remotes,
        size,
        iters: run.per_size(),
        depth,
        cq_mod,
        test: run.test,
        until: run
            .duration
            .map(|d| Instant::now() + Duration::from_secs_f64(d)),
        duration: run.duration,
        progress_every: run.progress_every,
        verify: None,
        peer_says_sent: false,
    }
}

/// One size of a BW test: the requester's loop (with `-b` both sides'),
/// the SEND receiver's, or none (the target of a one-sided test, which
/// only says it is done).
fn bw_size<P: ControlPlane>(
    plane: &mut P,
    run: &Run<'_>,
    k: usize,
    size: u64,
) -> Result<After<P::Row>, PerfError> {
    let test = run.test;
    let requester = run.client || run.bidir;
    let target = !run.client || run.bidir;
    let receiver = test == Test::SendBw && target;
    let nq = run.lanes.len();
    if run.data.is_some() {
        // What this size fills starts from zeros (the checks read it).
        let zeros = vec![0u8; size as usize];
        for lane in run.lanes {
            if target && matches!(test, Test::WriteBw | Test::AtomicBw) {
                let n = if test == Test::AtomicBw {
                    8
                } else {
                    zeros.len()
                };
                lane.mr.write(lane.target, &zeros[..n])?;
            }
            if requester && matches!(test, Test::ReadBw | Test::AtomicBw) {
                lane.mr.write(lane.source, &zeros)?;
            }
        }
    }
    if receiver {
        for lane in run.lanes {
            lane.post_ring(size, run.per_size())?;
        }
    }
    if !plane.sync(k, size)? {
        return Ok(After::End);
    }
    // Within what the peer's receive buffer holds, if the plane says so.
    let depth = match run.inflight_budget {
        Some(b) => run.tx_depth.min((b / (size.max(1) * nq as u64)).max(2)),
        None => run.tx_depth,
    };
    let mut t = traffic(run, size, depth, run.cq_mod);
    t.verify = run.check(size as usize);
    t.peer_says_sent = run.peer_says_sent;
    let mut watch = plane.watch();
    let counted = if requester && receiver {
        send_duplex(&t, &mut watch)?
    } else if requester {
        client_traffic(&t, &mut watch)?
    } else if receiver {
        server_receive(&t, &mut watch)?
    } else {
        watch.sent_all(&vec![0; nq])?;
        Counted {
            per_qp: vec![0; nq],
            secs: 0.0,
            peak_bps: 0.0,
        }
    };
    drop(watch);
    plane.report(run, k, size, Measured::Bw(counted))
}

/// One size of a latency test on the first QP: a SEND or WRITE
/// ping-pong, or READ/atomic round trips that the client measures while
/// the server serves.
fn lat_size<P: ControlPlane>(
    plane: &mut P,
    run: &Run<'_>,
    k: usize,
    size: u64,
) -> Result<After<P::Row>, PerfError> {
    let lane = &run.lanes[0];
    let n = size as usize;
    if let Some(d) = &run.data {
        // This side's message is its pattern; the peer's lands on zeros.
        lane.mr.write(lane.source, &d.own[..n])?;
        if run.test == Test::WriteLat {
            lane.mr.write(lane.target, &vec![0u8; n])?;
        }
    }
    if run.test == Test::SendLat {
        lane.post_ring(size, run.per_size())?;
    }
    if !plane.sync(k, size)? {
        return Ok(After::End);
    }
    let mut t = traffic(run, size, 1, 1);
    let samples = match run.test {
        Test::SendLat | Test::WriteLat => {
            t.verify = run.check(n);
            let mut watch = plane.watch();
            if run.test == Test::WriteLat {
                write_ping_pong(&t, run.client, &mut watch)?
            } else {
                send_ping_pong(&t, run.client, &mut watch)?
            }
        }
        _ if run.client => one_sided(&t, &mut plane.watch())?,
        _ => {
            plane.serve(run, size)?;
            Vec::new()
        }
    };
    plane.report(run, k, size, Measured::Lat(samples))
}

#[cfg(test)]
mod tests {
    use std::net::IpAddr;
    use std::sync::mpsc::{channel, Receiver, Sender};

    use roce_verbs::{ConnectOptions, Context, Psn, QpEndpoint, Qpn, RemoteMr, Rkey};

    use super::*;
    use crate::perf::lane::DataQps;
    use crate::perf::messages::Endpoint;
    use crate::perf::perftest_plan::Plan;
    use crate::perf::plane::{CheckPeer, Endpoints};

    enum Msg {
        Endpoints(Vec<Endpoint>),
        Sync(usize),
        Count(u64),
    }

    /// A plane over two in-process channels that logs the driver's calls;
    /// its row is (size, this side's count, the peer's).
    struct Fake {
        tx: Sender<Msg>,
        rx: Receiver<Msg>,
        calls: Vec<String>,
    }

    type Row = (u64, u64, u64);

    impl Fake {
        fn recv(&self) -> Msg {
            self.rx
                .recv_timeout(Duration::from_secs(20))
                .expect("the peer's message")
        }
    }

    /// Fails a loop that has run for 20 s (every test is bounded).
    struct Patience(Instant);

    impl Watch for Patience {
        fn progressed(&mut self) {}

        fn idle(&mut self, _look: bool, what: &dyn Fn() -> String) -> Result<bool, PerfError> {
            if self.0.elapsed() > Duration::from_secs(20) {
                return Err(PerfError::Timeout(what()));
            }
            std::thread::yield_now();
            Ok(true)
        }
    }

    impl ControlPlane for Fake {
        type Row = Row;
        type Watch<'w> = Patience;

        fn exchange(
            &mut self,
            mine: &Endpoints,
            check: CheckPeer<'_>,
        ) -> Result<Endpoints, PerfError> {
            self.calls.push("exchange".into());
            let _ = self.tx.send(Msg::Endpoints(mine.qps.clone()));
            let Msg::Endpoints(qps) = self.recv() else {
                return Err(PerfError::Protocol("not endpoints".into()));
            };
            check(&qps)?;
            Ok(Endpoints { qps, mtu: mine.mtu })
        }

        fn sync(&mut self, k: usize, _size: u64) -> Result<bool, PerfError> {
            self.calls.push(format!("sync {k}"));
            let _ = self.tx.send(Msg::Sync(k));
            match self.recv() {
                Msg::Sync(j) if j == k => Ok(true),
                _ => Err(PerfError::Protocol("not this size's sync".into())),
            }
        }

        fn watch(&mut self) -> Patience {
            Patience(Instant::now())
        }

        fn report(
            &mut self,
            _run: &Run<'_>,
            k: usize,
            size: u64,
            mine: Measured,
        ) -> Result<After<Row>, PerfError> {
            self.calls.push(format!("report {k}"));
            let n = match mine {
                Measured::Bw(c) => c.ops(),
                Measured::Lat(s) => s.len() as u64,
            };
            let _ = self.tx.send(Msg::Count(n));
            match self.recv() {
                Msg::Count(theirs) => Ok(After::Row((size, n, theirs))),
                _ => Err(PerfError::Protocol("not a count".into())),
            }
        }

        fn finish(&mut self, _run: &Run<'_>, _rows: &mut Vec<Row>) -> Result<(), PerfError> {
            self.calls.push("finish".into());
            Ok(())
        }
    }

    fn plan(test: Test, sizes: &[u64], qps: usize) -> Plan {
        Plan {
            test,
            is_send: matches!(test, Test::SendBw | Test::SendLat),
            lat: !test.is_bw(),
            sizes: sizes.to_vec(),
            iters: 64,
            tx_depth: 16,
            qps,
            bidir: false,
            duration: None,
            progress_every: None,
        }
    }

    /// One side on `fabric` at `addr`: its QPs, connected to the peer's
    /// through the plane's exchange, then the driver.
    fn side(
        fabric: roce_io::Fabric,
        addr: &str,
        plan: Plan,
        client: bool,
        mut plane: Fake,
    ) -> (Vec<Row>, Vec<String>) {
        let a: IpAddr = addr.parse().unwrap();
        let ctx = Context::open_fabric(&fabric, a).unwrap();
        let set = DataQps::create(&ctx, &plan).unwrap();
        let qps = &set.qps;
        let mine: Vec<Endpoint> = qps
            .iter()
            .enumerate()
            .map(|(i, q)| Endpoint {
                qpn: q.qp.qpn().value(),
                psn: 100 + i as u32,
                addr: a,
                rkey: q.mr.rkey().value(),
                vaddr: q.mr.addr(),
                len: plan.max_size(),
            })
            .collect();
        let n = mine.len();
        let same = move |r: &[Endpoint]| {
            (r.len() == n)
                .then_some(())
                .ok_or_else(|| PerfError::Failed("another number of QPs".into()))
        };
        let mine = Endpoints {
            qps: mine,
            mtu: 4096,
        };
        let theirs = plane.exchange(&mine, &same).unwrap();
        for ((q, m), r) in qps.iter().zip(&mine.qps).zip(&theirs.qps) {
            let ep = QpEndpoint {
                qpn: Qpn::new(r.qpn),
                psn: Psn::new(r.psn),
                addr: r.addr,
                mr: Some(RemoteMr {
                    addr: r.vaddr,
                    rkey: Rkey::new(r.rkey),
                    len: r.len,
                }),
            };
            q.qp.connect(Psn::new(m.psn), &ep, &ConnectOptions::default())
                .unwrap();
        }
        let lanes = set.lanes();
        let remotes: Vec<(u64, Rkey)> = theirs
            .qps
            .iter()
            .map(|r| (r.vaddr, Rkey::new(r.rkey)))
            .collect();
        let rows = run(&mut plane, &plan.run(&lanes, &remotes, client)).unwrap();
        (rows, plane.calls)
    }

    /// Both sides of a run over the fake plane: (client's, server's).
    fn pair(plan: Plan) -> [(Vec<Row>, Vec<String>); 2] {
        let fabric = roce_io::Fabric::new();
        let (to_client, from_server) = channel();
        let (to_server, from_client) = channel();
        let server = {
            let (fabric, plan) = (fabric.clone(), plan.clone());
            let plane = Fake {
                tx: to_client,
                rx: from_client,
                calls: Vec::new(),
            };
            std::thread::spawn(move || side(fabric, "10.0.0.1", plan, false, plane))
        };
        let plane = Fake {
            tx: to_server,
            rx: from_server,
            calls: Vec::new(),
        };
        let client = side(fabric, "10.0.0.2", plan, true, plane);
        [client, server.join().unwrap()]
    }

    /// The calls a plane sees for `sizes` sizes.
    fn calls(sizes: usize) -> Vec<String> {
        let mut c = vec!["exchange".to_string()];
        for k in 0..sizes {
            c.extend([format!("sync {k}"), format!("report {k}")]);
        }
        c.push("finish".into());
        c
    }

    /// WRITE BW on two QPs, two sizes: each size synced and reported in
    /// order; the client counts its 64 WRITEs per QP, the server none.
    #[test]
    fn a_write_bw_run_over_any_plane() {
        let [client, server] = pair(plan(Test::WriteBw, &[1024, 4096], 2));
        assert_eq!(client.0, [(1024, 128, 0), (4096, 128, 0)]);
        assert_eq!(server.0, [(1024, 0, 128), (4096, 0, 128)]);
        assert_eq!(client.1, calls(2));
        assert_eq!(server.1, calls(2));
    }

    /// SEND BW: the server's loop counts what it received.
    #[test]
    fn a_send_bw_run_counts_both_ends() {
        let [client, server] = pair(plan(Test::SendBw, &[512], 2));
        assert_eq!(client.0, [(512, 128, 128)]);
        assert_eq!(server.0, [(512, 128, 128)]);
    }

    /// SEND latency: 64 sends on each side make 63 intervals per size.
    #[test]
    fn a_send_lat_run_has_a_sample_per_interval() {
        let [client, server] = pair(plan(Test::SendLat, &[2, 64], 1));
        assert_eq!(client.0, [(2, 63, 63), (64, 63, 63)]);
        assert_eq!(server.0, [(2, 63, 63), (64, 63, 63)]);
        assert_eq!(client.1, calls(2));
    }

    /// READ latency: the client measures every READ, the server serves.
    #[test]
    fn a_read_lat_run_is_measured_by_the_client() {
        let [client, server] = pair(plan(Test::ReadLat, &[8], 1));
        assert_eq!(client.0, [(8, 64, 0)]);
        assert_eq!(server.0, [(8, 0, 64)]);
    }
}
