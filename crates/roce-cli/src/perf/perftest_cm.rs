//! `roce perf --perftest -R`: perftest 4.5's rdma_cm mode (`ib_write_bw -R`
//! and the other seven tools with `-R`). There is no TCP at all: the control channel is its
//! own RC connection made through the CM on the test port, carrying one
//! SEND per message into a single 56-byte receive; the data QP is a second
//! CM connection to the same port. Messages (client sends first, server
//! answers), as Debian's perftest 4.5+0.17 binary does them:
//!
//! 1. version (16 bytes, "6.06" NUL-padded), cycle buffer (4, BE), cache
//!    line (4, BE), MTU (2, the ibv_mtu enum as an ASCII digit + NUL);
//! 2. a 56-byte all-zero sync; the server starts listening for the data
//!    connection only after answering it (the client retries a refused
//!    connect);
//! 3. the data connection, then another zero sync;
//! 4. the keys as the binary `struct pingpong_dest` (56 bytes, see
//!    [`dest_bytes`]) three times: per QP, again per QP, after RTR;
//! 5. the traffic; then keys, the report (five 8-byte BE values) and keys;
//! 6. the server disconnects the data connection; the client waits for it.
//!
//! SEND BW and the latency tests post their receives (SEND) and add a
//! fourth key round before the traffic, and have no report (each side
//! prints its own figures); ib_write_lat has no closing round: all as over
//! TCP. `ROCE_PERFTEST_TRACE=1` prints the size of
//! every control message received (to work out a peer's sequence).

use std::net::IpAddr;
use std::time::{Duration, Instant};

use roce_verbs::{
    Access, CmConnection, CmError, CmListener, CmRequest, CompletionQueue, ConnParam,
    ConnectOptions, Context, MemoryRegion, QpCaps, QpInitAttr, QpType, QueuePair, RecvWr, SendWr,
};

use super::args::PerfArgs;
use super::backend::{link_path_mtu, open_context};
use super::error::PerfError;
use super::lane::DataQps;
use super::messages::Endpoint;
use super::messages::Test;
use super::net::resolve;
use super::perftest_plan::{mtu_msg, Plan};
use super::perftest_plane::{print_rows, PerftestChannel, PerftestPlane};
use super::perftest_wire::{
    agreed_mtu, dest_bytes, parse_dest, version_msg, version_text, Dest, CM_MSG_LEN,
};
use super::plane::{ControlPlane, Endpoints};
use super::session;

/// Size of a control message buffer (`sizeof(struct pingpong_dest)`).
const MSG: usize = CM_MSG_LEN;
const RECV: u64 = 5;
const SEND: u64 = 6;

/// The control connection: one RC QP, a 56-byte receive always posted.
struct Channel {
    qp: QueuePair,
    scq: CompletionQueue,
    rcq: CompletionQueue,
    send: MemoryRegion,
    recv: MemoryRegion,
    client: bool,
    wait: Duration,
    conn: Option<CmConnection>,
}

impl Channel {
    fn new(ctx: &Context, client: bool) -> Result<Channel, PerfError> {
        let pd = ctx.alloc_pd();
        let scq = ctx.create_cq(8, None)?;
        let rcq = ctx.create_cq(8, None)?;
        let cap = QpCaps {
            max_send_wr: 4,
            max_recv_wr: 4,
            ..QpCaps::default()
        };
        let qp = pd.create_qp(&QpInitAttr::new(QpType::Rc, &scq, &rcq).cap(cap))?;
        let send = pd.reg_mr(vec![0u8; MSG], Access::NONE)?;
        let recv = pd.reg_mr(vec![0u8; MSG], Access::LOCAL_WRITE)?;
        qp.to_init(&ConnectOptions::default())?;
        let ch = Channel {
            qp,
            scq,
            rcq,
            send,
            recv,
            client,
            wait: Duration::from_secs(300),
            conn: None,
        };
        ch.post_recv()?;
        Ok(ch)
    }

    fn post_recv(&self) -> Result<(), PerfError> {
        self.qp
            .post_recv(RecvWr {
                wr_id: RECV,
                sgl: [self.recv.sge(0, MSG as u32)].into_iter().collect(),
            })
            .map_err(|e| PerfError::Failed(format!("control receive: {e}")))
    }

    fn send(&self, mine: &[u8]) -> Result<(), PerfError> {
        self.send.write(0, mine)?;
        self.qp
            .post_send(SendWr::send(SEND, [self.send.sge(0, mine.len() as u32)]))
            .map_err(super::during("control send"))?;
        let c = self.scq.poll_until(1, self.wait)?;
        match c.first() {
            Some(c) if c.is_success() => Ok(()),
            Some(c) => Err(PerfError::Failed(format!("control send: {:?}", c.status()))),
            None => Err(PerfError::Timeout("control send: no completion".into())),
        }
    }

    fn recv(&self, n: usize) -> Result<Vec<u8>, PerfError> {
        let c = self.rcq.poll_until(1, self.wait)?;
        match c.first() {
            Some(c) if c.is_success() => {}
            Some(c) => {
                return Err(PerfError::Failed(format!(
                    "control receive: {:?}",
                    c.status()
                )))
            }
            None => {
                return Err(PerfError::Timeout(
                    "the peer sent nothing on the control channel".into(),
                ))
            }
        }
        let mut b = vec![0u8; n.min(MSG)];
        self.recv.read(0, &mut b)?;
        if std::env::var_os("ROCE_PERFTEST_TRACE").is_some() {
            eprintln!(
                "perftest -R: received {} bytes (expected {n})",
                c.first().map_or(0, |c| c.wc.byte_len)
            );
        }
        self.post_recv()?;
        Ok(b)
    }

    fn xchg(&self, mine: &[u8], n: usize) -> Result<Vec<u8>, PerfError> {
        if self.client {
            self.send(mine)?;
            self.recv(n)
        } else {
            let b = self.recv(n)?;
            self.send(mine)?;
            Ok(b)
        }
    }

    fn keys(&self, mine: &Dest) -> Result<Dest, PerfError> {
        parse_dest(&self.xchg(&dest_bytes(mine, 0), MSG)?)
    }
}

fn param(test: Test) -> ConnParam {
    let depth = if one_sided_reads(test) { 16 } else { 0 };
    ConnParam {
        responder_resources: depth,
        initiator_depth: depth,
        retry_count: 7,
        rnr_retry_count: 7,
        ..ConnParam::default()
    }
}

/// Tests whose requests read at the responder (READ, atomics): they need
/// READ/atomic credits on the connection.
fn one_sided_reads(test: Test) -> bool {
    matches!(
        test,
        Test::ReadBw | Test::ReadLat | Test::AtomicBw | Test::AtomicLat
    )
}

/// Connects `qp` to the server's port, retrying while nobody listens yet
/// (perftest's server listens for the data connection a moment later).
fn connect_retrying(
    qp: &QueuePair,
    server: IpAddr,
    port: u16,
    p: &ConnParam,
) -> Result<CmConnection, PerfError> {
    let mut tries = 0;
    // The CM retries for ~17 s when nothing answers: say so early (a
    // plain `roce perf` server, without --perftest -R, listens on TCP only).
    let _notice = crate::notice::SlowNotice::start(
        Duration::from_secs(2),
        format!(
            "roce perf: no answer yet from {server} port {port} over rdma_cm (is a server running there with -R: roce perf ... --perftest -R --bind ADDR, or ib_*_bw -R?); still trying"
        ),
    );
    loop {
        match qp.cm_connect(server, port, p, Duration::from_secs(30)) {
            Ok(c) => return Ok(c),
            Err(CmError::Rejected { reason: 8, .. }) if tries < 50 => {
                tries += 1;
                std::thread::sleep(Duration::from_millis(100));
            }
            Err(e) => {
                return Err(PerfError::Failed(format!(
                    "rdma_cm connect to {server}:{port}: {e}"
                )))
            }
        }
    }
}

/// Most requests from other addresses a server rejects while it waits
/// for one data connection.
const MAX_STRANGERS: usize = 64;

/// The next connection request on `l` from `peer` (the control
/// connection's client): a request from any other address, which cannot
/// be this test's data connection (a stranger's, or a REQ spoofed to take
/// the connection with the test's memory keys), is rejected and the wait
/// goes on, up to `timeout` and [`MAX_STRANGERS`] of them.
fn request_from(l: &CmListener, peer: IpAddr, timeout: Duration) -> Result<CmRequest, PerfError> {
    let end = Instant::now() + timeout;
    for _ in 0..=MAX_STRANGERS {
        let left = end.saturating_duration_since(Instant::now());
        let req = l
            .get_request(left)
            .map_err(super::during("waiting for a data connection"))?;
        let from = req.info().peer;
        if from.to_canonical() == peer.to_canonical() {
            return Ok(req);
        }
        eprintln!("roce perf: refused a data connection from {from}: the client is {peer}");
        let _ = req.reject(&[]);
    }
    Err(PerfError::Failed(format!(
        "more than {MAX_STRANGERS} connection requests from addresses other than the client's ({peer})"
    )))
}

/// Runs one test in perftest's rdma_cm mode.
pub(crate) fn run(args: &PerfArgs) -> Result<(), PerfError> {
    let plan = Plan::from_args(args)?;
    let test = plan.test;
    let server = match &args.server {
        Some(s) => Some(resolve(s, args.port)?.ip()),
        None => None,
    };
    let client = server.is_some();
    let local = match (args.bind, server) {
        (Some(b), _) => b,
        (None, Some(s)) => crate::rping::route_source(s)
            .ok_or_else(|| PerfError::Failed(format!("no route to {s}")))?,
        (None, None) => {
            return Err(PerfError::Args(
                "the -R server needs its RoCE address: --bind ADDR".into(),
            ))
        }
    };
    let mtu = args.mtu.min(link_path_mtu(args, local)?);
    let ctx = open_context(args, local, mtu, None)?;
    args.say_moved();

    // The control connection.
    let mut ch;
    let mut client_addr = None;
    let control = ConnParam {
        responder_resources: 0,
        initiator_depth: 0,
        ..param(test)
    };
    if let Some(s) = server {
        ch = Channel::new(&ctx, client)?;
        ch.conn = Some(connect_retrying(&ch.qp, s, args.port, &control)?);
    } else {
        let l = ctx.cm_listen(args.port).map_err(super::during(format!(
            "cannot listen on port {}",
            args.port
        )))?;
        eprintln!(
            "roce perf: waiting for a perftest -R client on port {}",
            args.port
        );
        // The first request to connect wins (nothing tells a client from
        // a spoofed REQ here: docs/security.md), each accepted on a
        // channel of its own, several at once, so that a forged request
        // (no RTU) holds no real client up; the data connections must
        // then come from the same address.
        let (conn, (c, peer)) =
            crate::rping::first_to_connect::<_, PerfError>(&l, Duration::from_secs(3600), |req| {
                let peer = req.info().peer;
                let c = Channel::new(&ctx, false)?;
                Ok(req
                    .accept_nowait(&c.qp, &control)
                    .ok()
                    .map(|a| (a, (c, peer))))
            })?;
        ch = c;
        ch.conn = Some(conn);
        client_addr = Some(peer);
    }
    let their_version = version_text(&ch.xchg(&version_msg(), 16)?);
    ch.xchg(&4096u32.to_be_bytes(), 4)?;
    ch.xchg(&64u32.to_be_bytes(), 4)?;
    let mtu = agreed_mtu(&ch.xchg(&mtu_msg(mtu), 2)?, mtu);

    // The data QPs and their memory: one CM connection each, made after a
    // zero sync (the client retries while the server is not listening
    // yet; the server takes the requests in the order they come) and
    // followed by another.
    let set = DataQps::create(&ctx, &plan)?;
    let dqs = &set.qps;
    let zeros = [0u8; MSG];
    let mut data = Vec::with_capacity(dqs.len());
    if let Some(s) = server {
        ch.xchg(&zeros, MSG)?;
        for dq in dqs {
            data.push(connect_retrying(&dq.qp, s, args.port, &param(test))?);
        }
    } else {
        ch.recv(MSG)?;
        let l = ctx.cm_listen(args.port).map_err(super::during(format!(
            "cannot listen on port {}",
            args.port
        )))?;
        ch.send(&zeros)?;
        let peer = client_addr.ok_or_else(|| PerfError::Failed("no control connection".into()))?;
        for dq in dqs {
            let req = request_from(&l, peer, Duration::from_secs(60))?;
            data.push(
                req.accept(&dq.qp, &param(test), Duration::from_secs(30))
                    .map_err(super::during("accept a data connection"))?,
            );
        }
    }
    ch.xchg(&zeros, MSG)?;

    // The keys, as over TCP: per QP, then the confirming rounds. The
    // CM connected the QPs: the keys tell each side the peer's buffers.
    let mut mine = Vec::with_capacity(dqs.len());
    for dq in dqs {
        let attr = dq.qp.query()?;
        mine.push(Endpoint {
            qpn: dq.qp.qpn().value(),
            psn: attr.sq_psn.value(),
            addr: local,
            rkey: dq.mr.rkey().value(),
            vaddr: dq.mr.addr(),
            len: plan.max_size(),
        });
    }
    let out_reads = if one_sided_reads(test) { 16 } else { 0 };
    let mut plane = PerftestPlane::new(&mut ch, &plan, client, out_reads);
    plane.exchange(&Endpoints { qps: mine, mtu }, &|_| Ok(()))?;
    let remotes = plane.confirm_keys(args)?;
    let lanes = set.lanes();
    let rows = session::run(&mut plane, &plan.run(&lanes, &remotes, client))?;
    let last = plane.first_keys()?;
    // ib_write_lat has no closing round (over TCP it just closes).
    if test != Test::WriteLat {
        ch.keys(&last)?;
    }
    // perftest's server closes the data connections; its client waits.
    if client {
        if !data
            .iter()
            .all(|c| c.wait_disconnect(Duration::from_secs(30)))
        {
            return Err(PerfError::Timeout(
                "the server did not disconnect the data connections".into(),
            ));
        }
    } else {
        for conn in data {
            conn.disconnect(Duration::from_secs(30))
                .map_err(super::during("disconnect"))?;
        }
    }
    print_rows(&plan, mtu, &their_version, &rows, args);
    Ok(())
}

impl PerftestChannel for Channel {
    fn keys(&mut self, mine: &Dest) -> Result<Dest, PerfError> {
        Channel::keys(self, mine)
    }
    fn xchg8(&mut self, mine: &[u8]) -> Result<Vec<u8>, PerfError> {
        self.xchg(mine, 8)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use roce_io::{UdpBackend, UdpConfig};
    use roce_verbs::DeviceConfig;

    /// A UDP port of this test's own, so that it meets no other stack.
    const ROCE_PORT: u16 = 18794;
    const CM_PORT: u16 = 7400;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn open(addr: &str) -> Context {
        let a = ip(addr);
        let b = UdpBackend::bind(UdpConfig::new(a).port(ROCE_PORT).remote_port(ROCE_PORT))
            .expect("a free loopback address");
        Context::open(b, DeviceConfig::new(a)).unwrap()
    }

    fn rc_qp(ctx: &Context) -> (QueuePair, CompletionQueue) {
        let cq = ctx.create_cq(8, None).unwrap();
        let qp = ctx
            .alloc_pd()
            .create_qp(&QpInitAttr::new(QpType::Rc, &cq, &cq))
            .unwrap();
        (qp, cq)
    }

    /// The -R server takes its data connections only from the control
    /// connection's client: a request from another address (here a
    /// stranger's, first in line) is refused, the client's accepted.
    #[test]
    fn data_connections_only_from_the_control_connections_client() {
        let server = open("127.0.19.1");
        let l = server.cm_listen(CM_PORT).unwrap();
        let peers = std::thread::spawn(|| {
            let (stranger, client) = (open("127.0.19.3"), open("127.0.19.2"));
            let p = ConnParam::default();
            let wait = Duration::from_secs(10);
            let (q, _cq) = rc_qp(&stranger);
            let refused = q.cm_connect(ip("127.0.19.1"), CM_PORT, &p, wait).err();
            let (q, cq) = rc_qp(&client);
            let conn = q.cm_connect(ip("127.0.19.1"), CM_PORT, &p, wait);
            (refused, conn.map(|c| (c, cq, client)))
        });
        let req = request_from(&l, ip("127.0.19.2"), Duration::from_secs(20)).unwrap();
        assert_eq!(req.info().peer, ip("127.0.19.2"));
        let (qp, _cq) = rc_qp(&server);
        let _conn = req
            .accept(&qp, &ConnParam::default(), Duration::from_secs(10))
            .unwrap();
        let (refused, conn) = peers.join().unwrap();
        assert!(
            matches!(refused, Some(CmError::Rejected { .. })),
            "{refused:?}"
        );
        assert!(conn.is_ok(), "the client's connection: {:?}", conn.err());
    }
}
