//! `roce perf --perftest`: the out-of-band TCP exchange of perftest 4.5
//! (Debian `perftest` 4.5+0.17, version string "6.06"), so the eight tools
//! (`ib_{write,read,send,atomic}_{bw,lat}`) run against `roce perf` in
//! either role.
//!
//! Every step is one "exchange": the client writes its message, then reads
//! the server's; the server reads, then writes. Messages, in order (as
//! captured between two perftest 4.5 peers, testdata/captures):
//!
//! 1. version: 16 bytes, the ASCII version ("6.06") NUL-padded;
//! 2. cycle buffer size: 4 bytes, big-endian (4096);
//! 3. cache line size: 4 bytes, big-endian (64);
//! 4. MTU: 2 bytes, the ibv_mtu enum as an ASCII digit + NUL ("3" = 1024);
//! 5. key strings (108 bytes each, see [`Dest`]): one per QP, the same
//!    again per QP (the printing pass), and one with QP 0's keys after the
//!    QPs reach RTR/RTS; SEND tests do that single round before the
//!    printing pass (captured with `-q 4`);
//! 6. the sync rounds, traffic and reports of each size
//!    ([`super::perftest_plane`]): a key-string exchange per sync, the
//!    bandwidth report as five 8-byte big-endian exchanges (size,
//!    iterations, peak, average MB/s, Mpps);
//! 7. close: a key-string exchange, then each side writes "done\0" (5
//!    bytes) without waiting for the other and closes; ib_write_lat skips
//!    this and just closes (captured inside the lab VM over lo).

use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, TcpListener, TcpStream};
use std::time::Duration;

use roce_verbs::{ConnectOptions, Psn, QpEndpoint, RemoteMr, Rkey};

use super::args::{BackendKind, PerfArgs};
use super::backend::{gid_address, link_path_mtu, open_moving};
use super::error::PerfError;
use super::lane::{DataQp, DataQps};
use super::messages::Endpoint;
use super::messages::Test;
use super::net::{accept_interruptibly, connect_tcp, first_byte, resolve};
use super::perftest_plan::{mtu_msg, Plan, OUT_READS};
use super::perftest_plane::{print_rows, PerftestChannel, PerftestPlane};
use super::perftest_wire::{agreed_mtu, check_version, version_msg, Dest, KEY_LEN};
use super::plane::{ControlPlane, Endpoints};
use super::session;
use crate::stop::Stop;

/// The TCP side of the exchange.
struct Oob {
    s: TcpStream,
    client: bool,
}

impl Oob {
    fn xchg(&mut self, mine: &[u8], n: usize) -> Result<Vec<u8>, PerfError> {
        let mut theirs = vec![0u8; n];
        let e = |e: std::io::Error| {
            match e.kind() {
            // The peer stopped (an error of its own: see its output).
            std::io::ErrorKind::UnexpectedEof | std::io::ErrorKind::ConnectionReset => {
                PerfError::Failed(
                    "perftest exchange: the peer closed the connection (it stopped: see its output)"
                        .into(),
                )
            }
            _ => PerfError::Io("perftest exchange".into(), e),
        }
        };
        if self.client {
            self.s.write_all(mine).map_err(e)?;
            self.s.read_exact(&mut theirs).map_err(e)?;
        } else {
            self.s.read_exact(&mut theirs).map_err(e)?;
            self.s.write_all(mine).map_err(e)?;
        }
        Ok(theirs)
    }

    fn hand_shake(&mut self, mine: &Dest) -> Result<Dest, PerfError> {
        let b = self.xchg(&mine.format(), KEY_LEN)?;
        Dest::parse(&b)
    }

    fn close(mut self, mine: &Dest) -> Result<(), PerfError> {
        self.hand_shake(mine)?;
        self.s
            .write_all(b"done\0")
            .map_err(|e| PerfError::Io("perftest exchange".into(), e))?;
        let mut d = [0u8; 5];
        let _ = self.s.set_read_timeout(Some(Duration::from_secs(5)));
        let _ = self.s.read_exact(&mut d);
        Ok(())
    }
}

/// The endpoints of every QP: QPN, a starting PSN from the operating
/// system's randomness (not the clock or the pid), the region.
fn local_endpoints(qps: &[DataQp], plan: &Plan, local: IpAddr) -> Result<Vec<Endpoint>, PerfError> {
    qps.iter()
        .map(|q| {
            Ok(Endpoint {
                qpn: q.qp.qpn().value(),
                psn: roce_verbs::random_psn()?.value(),
                addr: local,
                rkey: q.mr.rkey().value(),
                vaddr: q.mr.addr(),
                len: plan.max_size(),
            })
        })
        .collect()
}

impl PerftestChannel for Oob {
    fn keys(&mut self, mine: &Dest) -> Result<Dest, PerfError> {
        self.hand_shake(mine)
    }
    fn xchg8(&mut self, mine: &[u8]) -> Result<Vec<u8>, PerfError> {
        self.xchg(mine, 8)
    }
    fn watch(&self) -> Option<TcpStream> {
        self.s.try_clone().ok()
    }
}

/// Runs one test in perftest-compatible mode; the exit is via `Err` on
/// failure. A server waiting for its client gives up at `stop` (Ctrl-C).
pub(crate) fn run(args: &PerfArgs, stop: &Stop) -> Result<(), PerfError> {
    Plan::from_args(args)?;
    let client = args.server.is_some();
    let stream = if let Some(server) = &args.server {
        let addr = resolve(server, args.port)?;
        let s = connect_tcp(addr, args.bind)?;
        args.say_moved();
        s
    } else {
        let bind = args.bind.unwrap_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED));
        let l = TcpListener::bind((bind, args.port))
            .map_err(|e| PerfError::Io(format!("cannot listen on port {}", args.port), e))?;
        eprintln!(
            "roce perf: waiting for a perftest client on port {}",
            args.port
        );
        let s = accept_interruptibly(&l, stop)?;
        // A client of roce perf's own exchange opens with a JSON line:
        // tell it what to do rather than read its hello as perftest's.
        if first_byte(&s)? == b'{' {
            let msg = "this server was started with --perftest (perftest's exchange); \
                       start it without --perftest to serve both kinds of client, or run \
                       the client with --perftest";
            let mut w = &s;
            let _ = writeln!(
                w,
                "{}",
                serde_json::json!({"type": "error", "message": msg})
            );
            // Read the hello before closing: unread data would make the
            // close a reset, which can discard the error on its way.
            let _ = s.shutdown(std::net::Shutdown::Write);
            let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
            let _ = std::io::copy(&mut (&s).take(64 << 10), &mut std::io::sink());
            return Err(PerfError::Protocol(
                "the client speaks roce perf's own exchange, not perftest's \
                 (a server without --perftest serves both)"
                    .into(),
            ));
        }
        s
    };
    run_on(args, stream, client)
}

/// The exchange on a connected control stream: `client` writes first.
/// A plain `roce perf` server comes here when its client turns out to
/// speak perftest's exchange.
pub(crate) fn run_on(args: &PerfArgs, stream: TcpStream, client: bool) -> Result<(), PerfError> {
    let plan = Plan::from_args(args)?;
    let test = plan.test;
    let _ = stream.set_nodelay(true);
    let _ = stream.set_read_timeout(Some(Duration::from_secs(300)));
    let tcp_local = stream
        .local_addr()
        .map_err(|e| PerfError::Failed(e.to_string()))?
        .ip();
    let local = gid_address(args, args.bind.unwrap_or(tcp_local))?;
    // With ROCE_SHM=0, a server given no address moves off a loopback
    // address its client or another stack holds; the client learns the
    // new one from its GID.
    let local = if !client
        && args.bind.is_none_or(|b| b.is_unspecified())
        && args.backend == BackendKind::Udp
    {
        let peer = stream.peer_addr().ok().map(|a| a.ip());
        let index = args.gid_index.map(usize::from);
        crate::device::loopback_server_local("perf", local, peer, args.roce_port, args.json, index)
    } else {
        local
    };
    let mut oob = Oob { s: stream, client };

    // Version, cycle buffer, cache line, MTU.
    let their_version = check_version(&oob.xchg(&version_msg(), 16)?)?;
    oob.xchg(&4096u32.to_be_bytes(), 4)?;
    oob.xchg(&64u32.to_be_bytes(), 4)?;
    let mtu = args.mtu.min(link_path_mtu(args, local)?);
    let mtu = agreed_mtu(&oob.xchg(&mtu_msg(mtu), 2)?, mtu);

    // One QP and region per -q.
    // The bind is the probe: a side that chose its loopback address
    // itself moves on when another pair took it meanwhile; the peer
    // learns the address from the GID in the keys.
    let moves = args.local_moves
        || (args.bind.is_none_or(|b| b.is_unspecified()) && args.gid_index.is_none());
    let peer: Vec<IpAddr> = oob.s.peer_addr().ok().map(|a| a.ip()).into_iter().collect();
    let (ctx, local) = open_moving(args, local, mtu, None, moves, &peer, args.json)?;
    let set = DataQps::create(&ctx, &plan)?;
    let qps = &set.qps;
    let mine = local_endpoints(qps, &plan, local)?;
    let mut plane = PerftestPlane::new(&mut oob, &plan, client, plan.out_reads());
    // As in roce perf's own exchange: the GIDs the keys name are where
    // this side sends, so they must be the TCP peer's (unless -x), or a
    // stranger's keys could aim this side's traffic at a third host.
    let check = |rem: &[Endpoint]| {
        crate::device::check_peer_qps(
            args.gid_index.is_some(),
            rem.iter().map(|r| (r.qpn, r.addr)),
            peer.first().copied(),
            "-x",
        )
        .map_err(PerfError::from)
    };
    let rem = plane
        .exchange(
            &Endpoints {
                qps: mine.clone(),
                mtu,
            },
            &check,
        )?
        .qps;
    let opts = ConnectOptions {
        path_mtu: Some(mtu),
        max_rd_atomic: plane.peer_out_reads().clamp(1, OUT_READS) as u8,
        timeout: 14,
        retry_cnt: 7,
        rnr_retry: 7,
        min_rnr_timer: 12,
        ..ConnectOptions::default()
    };
    for ((q, m), r) in qps.iter().zip(&mine).zip(&rem) {
        let ep = QpEndpoint {
            qpn: roce_verbs::Qpn::new(r.qpn),
            psn: Psn::new(r.psn),
            addr: r.addr,
            mr: Some(RemoteMr {
                addr: r.vaddr,
                rkey: Rkey::new(r.rkey),
                len: r.len,
            }),
        };
        q.qp.connect(Psn::new(m.psn), &ep, &opts)
            .map_err(super::during("cannot connect the QP"))?;
    }
    let remotes = plane.confirm_keys(args)?;
    let lanes = set.lanes();
    let rows = session::run(&mut plane, &plan.run(&lanes, &remotes, client))?;
    let last = plane.first_keys()?;
    if test != Test::WriteLat {
        oob.close(&last)?;
    }
    print_rows(&plan, mtu, &their_version, &rows, args);
    drop(set);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::perftest_wire::tests::hex;
    use super::*;

    #[test]
    fn preamble_matches_capture() {
        assert_eq!(version_msg(), hex("362e3036000000000000000000000000"));
        assert_eq!(4096u32.to_be_bytes().to_vec(), hex("00001000"));
        assert_eq!(64u32.to_be_bytes().to_vec(), hex("00000040"));
        assert_eq!(mtu_msg(1024), hex("3300"));
    }
}
