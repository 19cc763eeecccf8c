//! `roce udaddy`: librdmacm's `udaddy` over this stack. The client resolves
//! the server's UD QP through the CM (SIDR in rdma_cm's UDP port space),
//! then both sides exchange `-C` datagrams of `-S` bytes: the client SENDs
//! with immediate data = its QPN; the server answers each sender at the
//! QPN the immediate names and the address the GRH carries. Either side
//! may be the Linux tool.

mod error;

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::time::Duration;

use clap::Parser;
use roce_verbs::{
    Access, AddressHandle, AhAttr, BackendKind, CompletionQueue, ConnectOptions, Context,
    MemoryRegion, ProtectionDomain, Psn, Qkey, QpCaps, QpInitAttr, QpType, Qpn, QueuePair, RecvWr,
    SendWr, WcFlags,
};

use error::UdaddyError;

/// rdma_cm's Q_Key for the UDP port space (`RDMA_UDP_QKEY`).
const UDP_QKEY: u32 = 0x0123_4567;
/// Room for the GRH in front of a UD receive.
const GRH: usize = 40;

/// `udaddy` over this stack (the client with `-s SERVER`).
#[derive(Parser, Debug, Clone)]
#[command(
    after_help = "Either side may be librdmacm's udaddy (rdmacm-utils). Exit status: 0 every \
                  datagram went both ways, 1 a failure, 2 bad flags."
)]
pub(crate) struct UdaddyArgs {
    /// The server to contact (omit to be the server).
    #[arg(short = 's')]
    server: Option<IpAddr>,
    /// Local address of the RoCE device (server: required; client: the
    /// route's source address by default).
    #[arg(short = 'b', long = "bind")]
    bind: Option<IpAddr>,
    /// rdma_cm port (udaddy itself always uses 7174).
    #[arg(long, default_value_t = 7174)]
    port: u16,
    /// Port space, as udaddy's -p: only 0x111 (UDP) is served.
    #[arg(short = 'p', default_value = "0x111", value_parser = ["0x111", "273", "udp"])]
    port_space: String,
    /// Datagrams each way.
    #[arg(short = 'C', default_value_t = 10)]
    count: u32,
    /// Datagram size in bytes.
    #[arg(short = 'S', default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=4096))]
    size: u32,
    /// Give up after this many seconds without progress (at most 10^9).
    #[arg(long, default_value_t = 60, value_parser = clap::value_parser!(u64).range(0..=1_000_000_000))]
    timeout: u64,
    /// UDP port of the RoCE traffic, both ends.
    #[arg(long, default_value_t = 4791, value_parser = clap::value_parser!(u16).range(1..))]
    roce_port: u16,
}

struct Ud {
    ctx: Context,
    pd: ProtectionDomain,
    scq: CompletionQueue,
    rcq: CompletionQueue,
    qp: QueuePair,
    recv: MemoryRegion,
    send: MemoryRegion,
    size: usize,
    wait: Duration,
}

impl Ud {
    /// Opens on `local`, or, when this side chose it itself (`moves`) and
    /// a stack that does not share it holds it, on another loopback
    /// address ([`crate::device::open_moving`]).
    fn open(local: IpAddr, args: &UdaddyArgs, moves: bool) -> Result<Ud, UdaddyError> {
        let open = |at: IpAddr| -> Result<_, UdaddyError> {
            let o = crate::device::tool_options(BackendKind::Udp, at, args.roce_port)?;
            let mtu = o.link_mtu()?;
            if args.size > mtu {
                return Err(UdaddyError::SizeAboveMtu {
                    size: args.size,
                    mtu,
                });
            }
            Ok(o.open()?)
        };
        // The UDP port taken: a side that chose its address moves on.
        let taken = |e: &UdaddyError| {
            matches!(
                e,
                UdaddyError::Open(roce_verbs::OpenError::PortInUse { .. })
            )
        };
        let at = (local, args.roce_port);
        let (ctx, _) = crate::device::open_moving("udaddy", at, moves, &[], false, open, taken)?;
        let pd = ctx.alloc_pd();
        let n = args.count as usize;
        let scq = ctx.create_cq(n + 16, None)?;
        let rcq = ctx.create_cq(n + 16, None)?;
        let mut init = QpInitAttr::new(QpType::Ud, &scq, &rcq);
        init.cap = QpCaps {
            max_send_wr: args.count.max(1),
            max_recv_wr: args.count.max(1),
            ..QpCaps::default()
        };
        let qp = pd.create_qp(&init)?;
        let opts = ConnectOptions {
            qkey: Qkey::new(UDP_QKEY),
            ..ConnectOptions::default()
        };
        qp.ready_ud(Psn::new(0), &opts)?;
        let size = args.size as usize;
        let recv = pd.reg_mr(vec![0u8; n.max(1) * (size + GRH)], Access::LOCAL_WRITE)?;
        let send = pd.reg_mr(vec![0x5a; size], Access::NONE)?;
        for i in 0..n {
            qp.post_recv(RecvWr {
                wr_id: i as u64,
                sgl: [recv.sge((i * (size + GRH)) as u64, (size + GRH) as u32)]
                    .into_iter()
                    .collect(),
            })
            .map_err(|e| UdaddyError::Post("post recv", e))?;
        }
        Ok(Ud {
            ctx,
            pd,
            scq,
            rcq,
            qp,
            recv,
            send,
            size,
            wait: Duration::from_secs(args.timeout.max(1)),
        })
    }

    /// `n` SENDs with immediate = our QPN to `qpn` at `ah`.
    fn send_to(&self, ah: &AddressHandle, qpn: Qpn, n: u32) -> Result<(), UdaddyError> {
        for i in 0..n {
            let sge = self.send.sge(0, self.size as u32);
            let wr = SendWr::send_with_imm(1_000_000 + i as u64, [sge], self.qp.qpn().value());
            self.qp
                .post_send_ud(wr, ah, qpn, Qkey::new(UDP_QKEY))
                .map_err(|e| UdaddyError::Post("post send", e))?;
        }
        let done = self.scq.poll_until(n as usize, self.wait)?;
        if done.len() < n as usize || done.iter().any(|c| !c.is_success()) {
            return Err(UdaddyError::SendsIncomplete {
                completed: done.iter().filter(|c| c.is_success()).count(),
                sent: n,
            });
        }
        Ok(())
    }

    /// Waits for `n` datagrams; returns (source address, immediate) of each.
    fn receive(&self, n: u32) -> Result<Vec<(IpAddr, u32)>, UdaddyError> {
        let got = self.rcq.poll_until(n as usize, self.wait)?;
        if got.len() < n as usize {
            return Err(UdaddyError::ReceivedTooFew {
                received: got.len(),
                expected: n,
            });
        }
        let mut out = Vec::new();
        for c in got {
            if !c.is_success() {
                return Err(UdaddyError::RecvCompletion(c.status()));
            }
            let off = c.wr_id() as usize * (self.size + GRH);
            let mut grh = [0u8; GRH];
            self.recv.read(off as u64, &mut grh)?;
            let src = if !c.wc.wc_flags.contains(WcFlags::GRH) {
                return Err(UdaddyError::NoGrh);
            } else if grh[20] >> 4 == 4 {
                IpAddr::V4(Ipv4Addr::new(grh[32], grh[33], grh[34], grh[35]))
            } else {
                let mut a = [0u8; 16];
                a.copy_from_slice(&grh[8..24]);
                IpAddr::V6(Ipv6Addr::from(a))
            };
            out.push((src, c.wc.imm_data));
        }
        Ok(out)
    }
}

/// The first of the received datagrams (source, immediate data) that
/// came from `client`.
fn from_client(got: &[(IpAddr, u32)], client: IpAddr) -> Option<(IpAddr, u32)> {
    got.iter()
        .copied()
        .find(|(src, _)| src.to_canonical() == client.to_canonical())
}

pub(crate) fn run(args: &UdaddyArgs) -> i32 {
    let r = match args.server {
        Some(s) => client(args, s),
        None => server(args),
    };
    match r {
        Ok(()) => {
            println!("test complete");
            0
        }
        Err(e) => {
            eprintln!("roce udaddy: {e}");
            1
        }
    }
}

fn client(args: &UdaddyArgs, server: IpAddr) -> Result<(), UdaddyError> {
    println!("udaddy: starting client");
    let mut local = args
        .bind
        .or_else(|| crate::rping::route_source(server))
        .ok_or(UdaddyError::NoRoute(server))?;
    if args.bind.is_none() {
        // Both ends on this host's loopback with ROCE_SHM=0: the client
        // moves off the server's address (as perf, pingpong and rping
        // do). Otherwise both share it, as processes share a NIC's port.
        if let Some((a, note)) =
            crate::device::loopback_client_local("udaddy", server, local, args.roce_port)?
        {
            eprintln!("{note}");
            local = a;
        }
    }
    let ud = Ud::open(local, args, args.bind.is_none())?;
    println!("udaddy: connecting");
    // The CM retries for ~17 s: say early that no one answers.
    let notice = crate::notice::SlowNotice::start(
        std::time::Duration::from_secs(2),
        format!(
            "roce udaddy: no answer yet from {server} port {} (is a server running there: roce udaddy -b {server}, or udaddy?); still trying",
            args.port
        ),
    );
    let resolved = ud.ctx.cm_resolve_ud(server, args.port, &[], ud.wait);
    drop(notice);
    let (qpn, qkey) = resolved.map_err(|error| UdaddyError::Resolve {
        server,
        port: args.port,
        error,
    })?;
    if qkey != UDP_QKEY {
        return Err(UdaddyError::Qkey {
            qkey,
            expected: UDP_QKEY,
        });
    }
    let ah = ud.pd.create_ah(AhAttr::new(server))?;
    println!("initiating data transfers");
    ud.send_to(&ah, qpn, args.count)?;
    println!("receiving data transfers");
    let got = ud.receive(args.count)?;
    if let Some((src, _)) = got.iter().find(|(src, _)| *src != server) {
        return Err(UdaddyError::ReplyFrom { src: *src, server });
    }
    println!("data transfers complete");
    Ok(())
}

fn server(args: &UdaddyArgs) -> Result<(), UdaddyError> {
    println!("udaddy: starting server");
    let local = args.bind.ok_or(UdaddyError::NeedBind)?;
    let ud = Ud::open(local, args, false)?;
    let listener = ud
        .ctx
        .cm_listen_ud(args.port)
        .map_err(|error| UdaddyError::Listen {
            port: args.port,
            error,
        })?;
    let req = listener
        .get_ud_request(ud.wait)
        .map_err(UdaddyError::Wait)?;
    // The first request is served (no peer is known beforehand:
    // docs/security.md); the replies then go to its sender only.
    let client = req.info().peer;
    req.accept(&ud.qp, UDP_QKEY).map_err(UdaddyError::Accept)?;
    println!("receiving data transfers");
    let got = ud.receive(args.count)?;
    println!("sending replies");
    // Answer the client at the QPN its immediate data names. Datagrams
    // from other addresses (rdma_cm's Q_Key is well known) name no
    // destination: a forged one must not aim the replies elsewhere.
    let Some((src, imm)) = from_client(&got, client) else {
        return Err(UdaddyError::NotFromClient {
            received: got.len(),
            client,
        });
    };
    let ah = ud.pd.create_ah(AhAttr::new(src))?;
    ud.send_to(&ah, Qpn::new(imm & 0xff_ffff), args.count)?;
    println!("data transfers complete");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The server answers the client that resolved it, at the QPN of the
    /// client's own datagram: a datagram forged from another address
    /// (first in line, naming another QPN) does not aim the replies.
    #[test]
    fn replies_go_to_the_resolving_client_only() {
        let client: IpAddr = "10.0.0.2".parse().unwrap();
        let forged: IpAddr = "10.0.0.66".parse().unwrap();
        let mapped = IpAddr::V6(Ipv4Addr::new(10, 0, 0, 2).to_ipv6_mapped());
        let got = [(forged, 0x66), (client, 0x1234), (client, 0x1234)];
        assert_eq!(from_client(&got, client), Some((client, 0x1234)));
        assert_eq!(from_client(&got[1..], mapped), Some((client, 0x1234)));
        assert_eq!(from_client(&got[..1], client), None);
    }
}
