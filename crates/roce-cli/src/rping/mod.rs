//! `roce rping`: librdmacm's `rping` over this stack, connecting through
//! the IB CM (rdma_cm addressing) so either side may be the Linux tool.
//!
//! Per ping, as rping does it: the client fills its start buffer with
//! `rdma-ping-N: ` and a rotating run of letters, SENDs its address, rkey
//! and length (16 bytes, big-endian: u64, u32, u32); the server RDMA READs
//! it and SENDs 16 zero bytes ("go ahead"); the client SENDs where its
//! second buffer is; the server RDMA WRITEs what it read there (the string
//! and its NUL) and SENDs again; the client compares the two buffers. The
//! client disconnects after `-C` pings; the server serves until the client
//! disconnects.

mod accept;
mod error;

use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use clap::Parser;
use roce_verbs::{
    Access, BackendKind, CmConnection, CmError, CmListener, CompletionQueue, ConnParam, Context,
    MemoryRegion, ProtectionDomain, QpCaps, QpInitAttr, QpType, QueuePair, RecvWr, RemoteAddr,
    Rkey, SendWr, WcStatus,
};

use crate::stop::Stop;
pub(crate) use accept::first_to_connect;
pub(crate) use error::RpingError;

/// `rping` over this stack (the client with `-c`, the server with `-s`).
#[derive(Parser, Debug, Clone)]
#[command(
    after_help = "Either side may be librdmacm's rping (rdmacm-utils). Exit status: 0 every \
                  ping completed (server: the client disconnected), 1 a failure, 2 bad flags."
)]
pub(crate) struct RpingArgs {
    /// Run the server.
    #[arg(short = 's', conflicts_with = "client")]
    server: bool,
    /// Run the client.
    #[arg(short = 'c')]
    pub(crate) client: bool,
    /// Client: the server's address. Server: the local address to listen
    /// on (the RoCE device's IP; 0.0.0.0 takes --bind) [server default:
    /// 127.0.0.1, this host only].
    #[arg(short = 'a')]
    addr: Option<IpAddr>,
    /// rdma_cm port.
    #[arg(short = 'p', default_value_t = 7174)]
    port: u16,
    /// Pings (client; 0 = until interrupted).
    #[arg(short = 'C', default_value_t = 0)]
    count: u64,
    /// Ping size in bytes (at least 16 as rping requires).
    #[arg(short = 'S', default_value_t = 64, value_parser = clap::value_parser!(u32).range(16..=(1 << 24)))]
    size: u32,
    /// Print the ping data.
    #[arg(short = 'v')]
    verbose: bool,
    /// Validate the ping data (client).
    #[arg(short = 'V')]
    validate: bool,
    /// Local address of the RoCE device [default: the route's source
    /// address towards -a, or -a itself for the server].
    #[arg(long)]
    bind: Option<IpAddr>,
    /// Give up after this many seconds without progress (0: wait forever;
    /// at most 10^9). A client waits at most 4 s for the server to answer
    /// its connection request, and once connected either side gives up on
    /// a peer silent for 10 s (a killed peer sends no disconnect; less
    /// with a shorter --timeout).
    #[arg(long, default_value_t = 60, value_parser = clap::value_parser!(u64).range(0..=1_000_000_000))]
    timeout: u64,
    /// UDP port of the RoCE traffic, both ends (4791 is the standard).
    #[arg(long, default_value_t = 4791, value_parser = clap::value_parser!(u16).range(1..))]
    roce_port: u16,
    /// Inject faults into what this side sends, as `roce perf --faults`
    /// (`loss=5%,duplicate=1%,reorder=2%,seed=N`, ...).
    #[arg(long, value_parser = crate::device::check_faults)]
    faults: Option<String>,
}

const RECV_ID: u64 = 1;
const SEND_ID: u64 = 2;
const RDMA_ID: u64 = 3;

/// The 16-byte buffer advertisement (`struct rping_rdma_info`).
fn info(mr: &MemoryRegion) -> [u8; 16] {
    let r = mr.remote();
    let mut b = [0u8; 16];
    b[..8].copy_from_slice(&r.addr.to_be_bytes());
    b[8..12].copy_from_slice(&r.rkey.value().to_be_bytes());
    b[12..].copy_from_slice(&(mr.len() as u32).to_be_bytes());
    b
}

fn parse_info(b: &[u8]) -> (u64, Rkey, u32) {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[..8]);
    let mut k = [0u8; 4];
    k.copy_from_slice(&b[8..12]);
    let mut l = [0u8; 4];
    l.copy_from_slice(&b[12..16]);
    (
        u64::from_be_bytes(a),
        Rkey::new(u32::from_be_bytes(k)),
        u32::from_be_bytes(l),
    )
}

/// The client's ping `n` of `size` bytes: `rdma-ping-N: ` then letters
/// from `start` ('A'..='z', wrapping), NUL-terminated at `size - 1`.
pub(crate) fn ping_text(n: u64, start: u8, size: usize) -> Vec<u8> {
    let mut b = format!("rdma-ping-{n}: ").into_bytes();
    b.truncate(size.saturating_sub(1));
    let mut c = start;
    while b.len() < size.saturating_sub(1) {
        b.push(c);
        c = if c >= b'z' { b'A' } else { c + 1 };
    }
    b.push(0);
    b
}

/// The text of a NUL-terminated buffer.
fn c_str(b: &[u8]) -> String {
    let end = b.iter().position(|&x| x == 0).unwrap_or(b.len());
    String::from_utf8_lossy(&b[..end]).into_owned()
}

struct Rig {
    _ctx: Context,
    pd: ProtectionDomain,
    cq: CompletionQueue,
    qp: QueuePair,
    recv: MemoryRegion,
    send: MemoryRegion,
    wait: Duration,
    /// Once connected, how long the peer may stay silent ([`silence`]).
    silence: Duration,
    /// "the client" or "the server": who [`Rig::wait_for`] waits on.
    peer: &'static str,
    /// Completions that arrived while waiting for another one.
    early: std::cell::RefCell<Vec<u64>>,
}

impl Rig {
    /// Opens on `local`, or, when this side chose it itself (`moves`) and
    /// a stack that does not share it holds it, on another loopback
    /// address ([`crate::device::open_moving`], which says so unless
    /// `quiet`); with the address taken.
    fn open(
        local: IpAddr,
        port: u16,
        faults: Option<&str>,
        moves: bool,
        quiet: bool,
    ) -> Result<(Rig, IpAddr), RpingError> {
        let open = |at: IpAddr| -> Result<_, RpingError> {
            // The active MTU follows the link (rxe's rule: 1500 -> 1024): the
            // CM advertises it in the REQ, and packets must fit the
            // interface.
            let mut o = crate::device::tool_options(BackendKind::Udp, at, port)?;
            if let Some(w) = crate::device::middleware(None, faults)? {
                o = o.wrap(w);
            }
            Ok(o.open()?)
        };
        // The UDP port taken: a side that chose its address moves on.
        let taken =
            |e: &RpingError| matches!(e, RpingError::Open(roce_verbs::OpenError::PortInUse { .. }));
        let (ctx, local) =
            crate::device::open_moving("rping", (local, port), moves, &[], quiet, open, taken)?;
        let pd = ctx.alloc_pd();
        let (cq, qp) = endpoint(&ctx, &pd)?;
        let recv = pd.reg_mr(vec![0u8; 16], Access::LOCAL_WRITE)?;
        let send = pd.reg_mr(vec![0u8; 16], Access::NONE)?;
        let rig = Rig {
            _ctx: ctx,
            pd,
            cq,
            qp,
            recv,
            send,
            wait: Duration::from_secs(1 << 40),
            silence: Duration::from_secs(1 << 40),
            peer: "the peer",
            early: std::cell::RefCell::new(Vec::new()),
        };
        Ok((rig, local))
    }

    fn post_recv(&self) -> Result<(), RpingError> {
        post_recv_on(&self.qp, &self.recv)
    }

    fn send_bytes(&self, b: &[u8; 16]) -> Result<(), RpingError> {
        self.send.write(0, b)?;
        self.qp
            .post_send(SendWr::send(SEND_ID, [self.send.sge(0, 16)]))
            .map_err(|e| RpingError::Post("post send", e))
    }

    /// Waits for the completion `id`; a flushed receive means the peer
    /// disconnected (`Ok(false)`).
    fn wait_for(&self, id: u64) -> Result<bool, RpingError> {
        {
            let mut early = self.early.borrow_mut();
            if let Some(i) = early.iter().position(|&x| x == id) {
                early.remove(i);
                return Ok(true);
            }
        }
        loop {
            let v = self.cq.poll_until(1, self.silence)?;
            let Some(c) = v.into_iter().next() else {
                // Nothing for that long from a peer that pings without
                // pause: it is gone without a disconnect (killed, where
                // the kernel's rdma_cm would still send one).
                return Err(RpingError::PeerSilent {
                    peer: self.peer,
                    secs: self.silence.as_secs(),
                });
            };
            if c.status() == WcStatus::WrFlushErr {
                return Ok(false);
            }
            if !c.is_success() {
                return Err(RpingError::Completion {
                    status: c.status(),
                    wr_id: c.wr_id(),
                });
            }
            if c.wr_id() == id {
                return Ok(true);
            }
            self.early.borrow_mut().push(c.wr_id());
        }
    }
}

/// A CQ and an RC QP in INIT on it, as rping's.
fn endpoint(
    ctx: &Context,
    pd: &ProtectionDomain,
) -> Result<(CompletionQueue, QueuePair), RpingError> {
    let cq = ctx.create_cq(64, None)?;
    let mut init = QpInitAttr::new(QpType::Rc, &cq, &cq);
    init.cap = QpCaps {
        max_send_wr: 16,
        max_recv_wr: 16,
        ..QpCaps::default()
    };
    let qp = pd.create_qp(&init)?;
    qp.to_init(&roce_verbs::ConnectOptions::default())?;
    Ok((cq, qp))
}

fn post_recv_on(qp: &QueuePair, recv: &MemoryRegion) -> Result<(), RpingError> {
    qp.post_recv(RecvWr {
        wr_id: RECV_ID,
        sgl: [recv.sge(0, 16)].into_iter().collect(),
    })
    .map_err(|e| RpingError::Post("post recv", e))
}

/// rping's server waits for its client with [`first_to_connect`], each
/// request on a CQ and QP of its own (with its receive posted), which
/// become the rig's.
fn first_client(
    rig: &Rig,
    ctx: &Context,
    listener: &CmListener,
) -> Result<(CmConnection, CompletionQueue, QueuePair), RpingError> {
    let (conn, (cq, qp)) = first_to_connect::<_, RpingError>(listener, rig.wait, |req| {
        let (cq, qp) = endpoint(ctx, &rig.pd)?;
        post_recv_on(&qp, &rig.recv)?;
        // A request gone meanwhile (its wait for us timed out) is skipped.
        Ok(req.accept_nowait(&qp, &param()).ok().map(|a| (a, (cq, qp))))
    })?;
    Ok((conn, cq, qp))
}

/// The source address the kernel's routing picks towards `peer`.
pub(crate) fn route_source(peer: IpAddr) -> Option<IpAddr> {
    roce_verbs::loopback::route_source(peer).ok()
}

/// Runs `roce rping`; returns the exit status. At `stop` (Ctrl-C, for
/// the client) the client stops pinging and disconnects, so the server
/// (Linux's rping has no silence limit) hears DISCONNECTED at once.
pub(crate) fn run(args: &RpingArgs, stop: &Stop) -> i32 {
    if args.server == args.client {
        eprintln!("roce rping: give -s (server) or -c (client)");
        return 2;
    }
    let r = match (args.server, args.addr) {
        (true, _) => server(args),
        (false, Some(a)) => client(args, a, stop),
        (false, None) => {
            eprintln!("roce rping: the client needs the server's address: -c -a ADDR");
            return 2;
        }
    };
    match r {
        Ok(()) if stop.requested() => {
            eprintln!("roce rping: interrupted: disconnected from the server");
            130
        }
        Ok(()) => 0,
        Err(e) => {
            eprintln!("roce rping: {e}");
            1
        }
    }
}

fn wait(args: &RpingArgs) -> Duration {
    if args.timeout == 0 {
        Duration::from_secs(1 << 40)
    } else {
        Duration::from_secs(args.timeout)
    }
}

/// Once connected, how long a peer may stay silent: rping pings without
/// pause, so a peer silent this long is gone (a process killed sends no
/// disconnect here, where the kernel's rdma_cm outlives it and sends one).
pub(crate) const PEER_SILENCE: Duration = Duration::from_secs(10);

/// The connected wait: [`PEER_SILENCE`], less with a shorter `--timeout`,
/// unbounded with `--timeout 0`.
fn silence(args: &RpingArgs) -> Duration {
    if args.timeout == 0 {
        wait(args)
    } else {
        wait(args).min(PEER_SILENCE)
    }
}

/// How long a client waits for the server to answer its connection
/// request when `--timeout` allows that long.
const CONNECT_WAIT: Duration = Duration::from_secs(4);

/// The client's wait for an answer to its connection request: at most
/// [`CONNECT_WAIT`], less with a shorter `--timeout`, unbounded with
/// `--timeout 0`.
fn connect_wait(args: &RpingArgs) -> Duration {
    if args.timeout == 0 {
        wait(args)
    } else {
        wait(args).min(CONNECT_WAIT)
    }
}

fn param() -> ConnParam {
    // rping's rdma_conn_param.
    ConnParam {
        responder_resources: 1,
        initiator_depth: 1,
        retry_count: 7,
        rnr_retry_count: 7,
        ..ConnParam::default()
    }
}

fn client(args: &RpingArgs, server: IpAddr, stop: &Stop) -> Result<(), RpingError> {
    let local = match args.bind.or_else(|| route_source(server)) {
        Some(a) => a,
        None => return Err(RpingError::NoRoute(server)),
    };
    // Both ends on this host's loopback with ROCE_SHM=0: the server holds
    // the address this client dials, so the client takes another.
    // Otherwise both share it, as two processes share a NIC's port.
    let (local, moved) = match args.bind {
        Some(_) => (local, None),
        None => match crate::device::loopback_client_local("rping", server, local, args.roce_port)?
        {
            Some((a, note)) => (a, Some(note)),
            None => (local, None),
        },
    };
    let moves = args.bind.is_none();
    let (mut rig, _) = Rig::open(local, args.roce_port, args.faults.as_deref(), moves, false)?;
    rig.wait = wait(args);
    rig.silence = silence(args);
    rig.peer = "the server";
    let size = args.size as usize;
    let start_buf = rig.pd.reg_mr(
        vec![0u8; size],
        Access::LOCAL_WRITE | Access::REMOTE_READ | Access::REMOTE_WRITE,
    )?;
    let rdma_buf = rig.pd.reg_mr(
        vec![0u8; size],
        Access::LOCAL_WRITE | Access::REMOTE_READ | Access::REMOTE_WRITE,
    )?;
    rig.post_recv()?;
    // A missing server is reported within CONNECT_WAIT, as rping's
    // rdma_cm reports one within a few seconds (the CM alone would retry
    // its request for about 17 s). `--timeout 0` keeps trying, saying so.
    let (addr, port) = (server, args.port);
    let hint = error::server_hint(addr);
    let limit = connect_wait(args);
    let notice = (args.timeout == 0).then(|| {
        crate::notice::SlowNotice::start(
            Duration::from_secs(2),
            format!("roce rping: no answer yet from {addr} port {port} ({hint}); still trying"),
        )
    });
    let conn = rig.qp.cm_connect(server, args.port, &param(), limit);
    drop(notice);
    let conn: CmConnection = conn.map_err(|error| match error {
        CmError::TimedOut | CmError::Unreachable => RpingError::NoAnswer {
            addr,
            port,
            secs: limit.as_secs(),
        },
        error => RpingError::Connect { addr, port, error },
    })?;
    if let Some(note) = moved {
        eprintln!("{note}");
    }
    let mut start = b'A';
    let mut ping = 0u64;
    while (args.count == 0 || ping < args.count) && !stop.requested() {
        let text = ping_text(ping, start, size);
        start = if start >= b'z' { b'A' } else { start + 1 };
        start_buf.write(0, &text)?;
        rdma_buf.write(0, &vec![0u8; size])?;
        // Advertise the start buffer; the server READs it and says go.
        rig.send_bytes(&info(&start_buf))?;
        if !rig.wait_for(SEND_ID)? || !rig.wait_for(RECV_ID)? {
            return Err(RpingError::ServerDisconnected);
        }
        rig.post_recv()?;
        // Advertise where the server WRITEs the echo.
        rig.send_bytes(&info(&rdma_buf))?;
        if !rig.wait_for(SEND_ID)? || !rig.wait_for(RECV_ID)? {
            return Err(RpingError::ServerDisconnected);
        }
        rig.post_recv()?;
        let echo = rdma_buf.to_vec()?;
        if args.validate && c_str(&echo) != c_str(&text) {
            return Err(RpingError::Mismatch {
                ping,
                sent: c_str(&text),
                got: c_str(&echo),
            });
        }
        if args.verbose {
            println!("ping data: {}", c_str(&echo));
        }
        ping += 1;
    }
    conn.disconnect(rig.wait).map_err(RpingError::Disconnect)?;
    Ok(())
}

fn server(args: &RpingArgs) -> Result<(), RpingError> {
    // rping listens on every address; this stack listens on one: with
    // none given, this host's loopback, where a client on this host finds
    // it (or, where a stack that does not share it holds its port, the
    // next free loopback address).
    let lo = IpAddr::V4(Ipv4Addr::LOCALHOST);
    let (local, moves) = match (args.bind, args.addr) {
        (Some(b), _) => (b, false),
        (None, Some(a)) if a.is_unspecified() => return Err(RpingError::NeedAddress),
        (None, Some(a)) => (a, false),
        (None, None) => (
            crate::device::loopback_server_local("rping", lo, None, args.roce_port, true, None),
            true,
        ),
    };
    let (mut rig, at) = Rig::open(local, args.roce_port, args.faults.as_deref(), moves, true)?;
    if moves && at == lo {
        eprintln!("roce rping: listening on {lo} (this host only; -a ADDR serves others)");
    } else if moves {
        eprintln!(
            "roce rping: {lo}:{} is taken (another RoCE stack on this host); listening on {at}: roce rping -c -a {at}",
            args.roce_port
        );
    }
    rig.wait = wait(args);
    rig.silence = silence(args);
    rig.peer = "the client";
    let mut size = args.size as usize;
    let mut rdma_buf = rig.pd.reg_mr(vec![0u8; size], Access::LOCAL_WRITE)?;
    let ctx = rig.pd.context().clone();
    let listener = ctx
        .cm_listen(args.port)
        .map_err(|error| RpingError::Listen {
            port: args.port,
            error,
        })?;
    let (conn, cq, qp) = first_client(&rig, &ctx, &listener)?;
    (rig.cq, rig.qp) = (cq, qp);
    let mut pings = 0u64;
    loop {
        // The client's start buffer, or its disconnect.
        if !rig.wait_for(RECV_ID)? {
            break;
        }
        let (addr, rkey, len) = parse_info(&rig.recv.to_vec()?);
        rig.post_recv()?;
        if len as usize > size {
            // The client pings with more than our -S: grow the buffer (up
            // to rping's 16 MiB limit) rather than cut its string.
            size = (len as usize).min(1 << 24);
            rdma_buf = rig.pd.reg_mr(vec![0u8; size], Access::LOCAL_WRITE)?;
        }
        let len = len.min(size as u32);
        let read = SendWr::read(RDMA_ID, [rdma_buf.sge(0, len)], RemoteAddr::new(addr, rkey));
        rig.qp
            .post_send(read)
            .map_err(|e| RpingError::Post("post read", e))?;
        if !rig.wait_for(RDMA_ID)? {
            break;
        }
        let data = rdma_buf.to_vec()?;
        if args.verbose {
            println!("server ping data: {}", c_str(&data));
        }
        rig.send_bytes(&[0u8; 16])?;
        if !rig.wait_for(SEND_ID)? || !rig.wait_for(RECV_ID)? {
            break;
        }
        let (addr, rkey, _) = parse_info(&rig.recv.to_vec()?);
        rig.post_recv()?;
        let n = (c_str(&data).len() + 1).min(size) as u32;
        let write = SendWr::write(RDMA_ID, [rdma_buf.sge(0, n)], RemoteAddr::new(addr, rkey));
        rig.qp
            .post_send(write)
            .map_err(|e| RpingError::Post("post write", e))?;
        if !rig.wait_for(RDMA_ID)? {
            break;
        }
        rig.send_bytes(&[0u8; 16])?;
        if !rig.wait_for(SEND_ID)? {
            break;
        }
        pings += 1;
    }
    // The receive flushed: the client disconnected (or is about to).
    if !conn.wait_disconnect(Duration::from_secs(5)) {
        return Err(RpingError::NoDisconnect);
    }
    println!("server DISCONNECT EVENT... ({pings} pings served)");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ping_text_is_rpings() {
        // The first ping of `rping -S 64` as captured from Linux rping.
        let t = ping_text(0, b'A', 64);
        assert_eq!(
            t,
            b"rdma-ping-0: ABCDEFGHIJKLMNOPQRSTUVWXYZ[\\]^_`abcdefghijklmnopqr\0".to_vec()
        );
        assert_eq!(ping_text(7, b'z', 18), b"rdma-ping-7: zABC\0".to_vec());
        assert_eq!(ping_text(123, b'A', 16), b"rdma-ping-123: \0".to_vec());
    }
}
