//! One run of `roce pingpong`: the context on the UDP backend, the QPs, the
//! TCP exchange, and the ping-pong loop of the rdma-core tools.
//!
//! The loop is theirs: `rx_depth` receives are posted up front (to the QP,
//! or to the SRQ) and topped up when at most 1 (SRQ: `num_qp`) remain; the
//! client posts one SEND per QP at the start; per QP a new SEND is posted
//! when both the previous SEND and a receive have completed, while fewer
//! than `iters` SENDs have completed; the run ends when `iters` SENDs and
//! `iters` receives have completed (for SRQ, in total over the QPs). Every
//! side sends back what it last received on that QP.

use std::io::ErrorKind;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use roce_verbs::{
    Access, AddressHandle, AhAttr, BackendKind, Completion, CompletionChannel, CompletionQueue,
    ConnectOptions, Context, MemoryRegion, OpenError, OpenOptions, ProtectionDomain, Psn, Qkey,
    QpCaps, QpEndpoint, QpInitAttr, QpType, Qpn, QueuePair, RecvWr, SendWr, SharedReceiveQueue,
};

use super::wire::{self, Dest};
use super::{Params, Transport};

const RECV: u64 = 1;
const SEND: u64 = 2;
/// Room for the GRH in front of a UD receive.
const GRH: u32 = 40;
/// The UD Q_Key of the tools.
const QKEY: u32 = 0x1111_1111;
/// Page size the tools' `-c` works in (the first byte of each page).
const PAGE: usize = 4096;

/// What `-c` expects a sender's buffer to hold: zero at the start of each
/// page (what rdma-core's `-c` checks) and bytes that change with `k`
/// elsewhere.
pub(crate) fn pattern(k: u64, len: usize) -> Vec<u8> {
    (0..len)
        .map(|j| {
            if j % PAGE == 0 {
                0
            } else {
                (j as u64)
                    .wrapping_mul(31)
                    .wrapping_add(k.wrapping_mul(101))
                    .wrapping_add(0x5a) as u8
            }
        })
        .collect()
}

/// True for what an rdma-core client's buffer holds: one byte value
/// throughout (0x7b, or 0 for srq), the start of each page possibly 0
/// (their `-c`).
fn rdma_core_content(b: &[u8]) -> bool {
    let fill = b.get(1).or(b.first()).copied().unwrap_or(0);
    b.iter()
        .enumerate()
        .all(|(j, &x)| x == fill || (j % PAGE == 0 && x == 0))
}

/// A random 24-bit PSN from the operating system (the tools use
/// `lrand48() & 0xffffff`; a clock- or pid-derived one helps a blind
/// attacker guess the connection's window).
fn random_psn() -> Result<u32, String> {
    roce_verbs::random_psn()
        .map(|p| p.value())
        .map_err(|e| e.to_string())
}

fn deadline(t: Option<Duration>) -> Option<Instant> {
    t.map(|t| Instant::now() + t)
}

/// The client's TCP connection, retrying while nothing listens yet.
fn connect_tcp(p: &Params, server: &str, bind: Option<IpAddr>) -> Result<TcpStream, String> {
    use std::net::ToSocketAddrs;
    let addrs: Vec<SocketAddr> = (server, p.port)
        .to_socket_addrs()
        .map_err(|e| format!("{server}: {e}"))?
        .collect();
    let end = deadline(p.timeout);
    let mut told = false;
    loop {
        let mut last = None;
        for a in &addrs {
            let r = match bind {
                Some(b) => (|| {
                    let s = socket2::Socket::new(
                        socket2::Domain::for_address(*a),
                        socket2::Type::STREAM,
                        Some(socket2::Protocol::TCP),
                    )?;
                    s.bind(&SocketAddr::new(b, 0).into())?;
                    s.connect_timeout(&(*a).into(), Duration::from_secs(5))?;
                    Ok::<TcpStream, std::io::Error>(s.into())
                })(),
                None => TcpStream::connect_timeout(a, Duration::from_secs(5)),
            };
            match r {
                Ok(s) => return Ok(s),
                Err(e) => last = Some(e),
            }
        }
        let refused = last
            .as_ref()
            .is_some_and(|e| e.kind() == ErrorKind::ConnectionRefused);
        if !refused || end.is_some_and(|e| Instant::now() >= e) {
            let why = last.map_or("no address".to_string(), |e| e.to_string());
            return Err(format!("Couldn't connect to {server}:{} ({why})", p.port));
        }
        if !told {
            // A server started a moment later is found: say that this
            // is waiting, not hung.
            let limit = end.map_or("until interrupted".to_string(), |e| {
                format!(
                    "for {} s more",
                    e.saturating_duration_since(Instant::now()).as_secs()
                )
            });
            eprintln!(
                "no server at {server}:{} yet; trying again {limit} (--timeout SECONDS sets how long)",
                p.port
            );
            told = true;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The server's TCP connection.
fn accept_tcp(p: &Params) -> Result<TcpStream, String> {
    let bind = p.bind.unwrap_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED));
    let l = TcpListener::bind((bind, p.port))
        .map_err(|e| format!("Couldn't listen to port {} ({e})", p.port))?;
    let (s, _) = l.accept().map_err(|e| format!("accept() failed: {e}"))?;
    Ok(s)
}

/// Opens the context on `local`, or, when this side chose it itself
/// (`moves`) and a stack that does not share it holds it, on another
/// loopback address, never the peer's ([`crate::device::open_moving`]).
fn open_context(
    p: &Params,
    local: IpAddr,
    moves: bool,
    peer: IpAddr,
) -> Result<(Context, IpAddr), String> {
    // The error, and whether it is the UDP port taken.
    let open = |at: IpAddr| -> Result<Context, (bool, String)> {
        let mut o = crate::device::tool_options(BackendKind::Udp, at, p.roce_port)
            .map_err(|e| (false, e.to_string()))?;
        o.config.active_mtu = p.mtu;
        o.open().map_err(|e| match e {
            OpenError::PortInUse { .. } => (true, e.to_string()),
            OpenError::NotLocal(_) => (false, e.to_string()),
            e => (false, format!("Couldn't open the device on {at}: {e}")),
        })
    };
    let at = (local, p.roce_port);
    crate::device::open_moving("pingpong", at, moves, &[peer], false, open, |e| e.0)
        .map_err(|e| e.1)
}

/// How the server's `-c` reads the client's data, decided on the first
/// message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Peer {
    Unknown,
    /// `roce pingpong -c`: `pattern(k)`.
    Ours,
    /// An rdma-core client: its uniform buffer.
    RdmaCore,
}

struct Side {
    p: Params,
    is_client: bool,
    ctx: Context,
    _pd: ProtectionDomain,
    cq: CompletionQueue,
    channel: Option<CompletionChannel>,
    srq: Option<SharedReceiveQueue>,
    qps: Vec<QueuePair>,
    mr: MemoryRegion,
    /// Bytes per receive slot (UD: size + 40).
    rslot: u32,
    /// Receive slots start here in `mr`; send slots (one per QP) at 0.
    rbase: u64,
    ah: Option<AddressHandle>,
    remote: Vec<Dest>,
}

impl Side {
    fn send_off(&self, q: usize) -> u64 {
        q as u64 * u64::from(self.p.size)
    }

    fn recv_off(&self, slot: u32) -> u64 {
        self.rbase + u64::from(slot) * u64::from(self.rslot)
    }

    fn post_recv(&self, slot: u32) -> Result<(), String> {
        let wr = RecvWr {
            wr_id: RECV | u64::from(slot) << 8,
            sgl: [self.mr.sge(self.recv_off(slot), self.rslot)]
                .into_iter()
                .collect(),
        };
        match &self.srq {
            Some(s) => s.post_recv(wr),
            None => self.qps[0].post_recv(wr),
        }
        .map_err(|e| format!("Couldn't post receive: {e}"))
    }

    fn post_send(&self, q: usize, data: &[u8]) -> Result<(), String> {
        self.mr
            .write(self.send_off(q), data)
            .map_err(|e| e.to_string())?;
        let wr = SendWr::send(
            SEND | (q as u64) << 8,
            [self.mr.sge(self.send_off(q), self.p.size)],
        );
        let r = match &self.ah {
            Some(ah) => {
                self.qps[q].post_send_ud(wr, ah, Qpn::new(self.remote[q].qpn), Qkey::new(QKEY))
            }
            None => self.qps[q].post_send(wr),
        };
        r.map_err(|e| format!("Couldn't post send: {e}"))
    }
}

/// This side's resources, on `local` or where [`open_context`] moved
/// (`moves`), and the address they are on.
fn setup(
    p: &Params,
    local: IpAddr,
    is_client: bool,
    moves: bool,
    peer: IpAddr,
) -> Result<(Side, IpAddr), String> {
    let (ctx, local) = open_context(p, local, moves, peer)?;
    let pd = ctx.alloc_pd();
    let nq = p.num_qp as usize;
    let channel = p.events.then(|| ctx.create_comp_channel());
    let cq = ctx
        .create_cq((p.rx_depth + p.num_qp) as usize * 2 + 16, channel.as_ref())
        .map_err(|e| format!("Couldn't create CQ: {e}"))?;
    let srq = if p.transport == Transport::Srq {
        Some(
            pd.create_srq(p.rx_depth as usize)
                .map_err(|e| format!("Couldn't create SRQ: {e}"))?,
        )
    } else {
        None
    };
    let rslot = if p.transport == Transport::Ud {
        p.size + GRH
    } else {
        p.size
    };
    let rbase = nq as u64 * u64::from(p.size);
    let total = rbase + u64::from(p.rx_depth) * u64::from(rslot);
    // The tools' initial buffer: 0x7b (srq: 0).
    let fill = if p.transport == Transport::Srq {
        0
    } else {
        0x7b
    };
    let mr = pd
        .reg_mr(vec![fill; total as usize], Access::LOCAL_WRITE)
        .map_err(|e| format!("Couldn't register MR: {e}"))?;
    let qp_type = match p.transport {
        Transport::Rc | Transport::Srq => QpType::Rc,
        Transport::Uc => QpType::Uc,
        Transport::Ud => QpType::Ud,
    };
    let cap = QpCaps {
        max_send_wr: 4,
        max_recv_wr: if srq.is_some() { 1 } else { p.rx_depth },
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    let mut qps = Vec::with_capacity(nq);
    for _ in 0..nq {
        let mut a = QpInitAttr::new(qp_type, &cq, &cq).cap(cap);
        if let Some(s) = &srq {
            a = a.srq(s);
        }
        qps.push(
            pd.create_qp(&a)
                .map_err(|e| format!("Couldn't create QP: {e}"))?,
        );
    }
    let side = Side {
        p: p.clone(),
        is_client,
        ctx,
        _pd: pd,
        cq,
        channel,
        srq,
        qps,
        mr,
        rslot,
        rbase,
        ah: None,
        remote: Vec::new(),
    };
    Ok((side, local))
}

fn remote_addr(d: &Dest, peer: IpAddr) -> IpAddr {
    // A peer run without -g sends the zero GID: use its TCP address.
    wire::addr_of(d.gid).unwrap_or(peer)
}

/// The tools' QP attributes: no remote access, UD Q_Key 0x11111111; RTR
/// max_dest_rd_atomic 1, min_rnr_timer 12, GRH hop limit 1; RTS timeout 14,
/// retry_cnt 7, rnr_retry 7, max_rd_atomic 1.
fn tool_options(p: &Params) -> ConnectOptions {
    ConnectOptions {
        path_mtu: Some(p.mtu),
        access: Access::NONE,
        timeout: 14,
        retry_cnt: 7,
        rnr_retry: 7,
        min_rnr_timer: 12,
        max_rd_atomic: 1,
        qkey: Qkey::new(QKEY),
        // The context holds one GID, the one -g chose.
        sgid_index: 0,
        hop_limit: 1,
        traffic_class: 0,
    }
}

/// RESET → INIT, as the tools do before posting receives.
fn to_init(s: &Side) -> Result<(), String> {
    let opts = tool_options(&s.p);
    for qp in &s.qps {
        qp.to_init(&opts)
            .map_err(|e| format!("Failed to modify QP to INIT: {e}"))?;
    }
    Ok(())
}

/// INIT → RTR → RTS against the peer's `remote` with the tools' attributes
/// (UD: only the state and SQ PSN, then an AH to the peer).
fn connect(s: &mut Side, mine: &[Dest], remote: &[Dest], peer: IpAddr) -> Result<(), String> {
    let p = &s.p;
    let opts = tool_options(p);
    for (q, qp) in s.qps.iter().enumerate() {
        let r = &remote[q];
        let addr = remote_addr(r, peer);
        let ep = QpEndpoint {
            qpn: Qpn::new(r.qpn),
            psn: Psn::new(r.psn),
            addr,
            mr: None,
        };
        qp.to_rts(Psn::new(mine[q].psn), &ep, &opts)
            .map_err(|e| format!("Failed to modify QP[{q}] to RTR/RTS: {e}"))?;
        if p.transport == Transport::Ud {
            let ah = s
                ._pd
                .create_ah(AhAttr {
                    dest: addr,
                    hop_limit: 1,
                    traffic_class: 0,
                    sgid_index: 0,
                })
                .map_err(|e| format!("Failed to create AH: {e}"))?;
            s.ah = Some(ah);
        }
    }
    s.remote = remote.to_vec();
    Ok(())
}

/// The source address the kernel would use towards `server`.
fn route_source(server: &str, port: u16) -> Option<(IpAddr, IpAddr)> {
    use std::net::ToSocketAddrs;
    let addr = (server, port).to_socket_addrs().ok()?.next()?.ip();
    Some((addr, crate::rping::route_source(addr)?))
}

fn canonical(a: IpAddr) -> IpAddr {
    a.to_canonical()
}

pub(crate) fn run(p: &Params) -> Result<(), String> {
    let is_client = p.server.is_some();
    // No address given (no --bind, no -g): both ends may be on this
    // host's loopback, where they share the address as processes share a
    // NIC's port; with ROCE_SHM=0 the side that finds its address taken
    // moves (the client off the server's address, before it connects, so
    // that the server sees its new address on the TCP connection too).
    let chosen = p.bind.is_some_and(|b| !b.is_unspecified()) || p.gid_idx.is_some();
    let mut bind = p.bind;
    let mut moved = None;
    if let (Some(server), false) = (&p.server, chosen) {
        if let Some((addr, local)) = route_source(server, p.port) {
            if let Some((a, note)) =
                crate::device::loopback_client_local("pingpong", addr, local, p.roce_port)
                    .map_err(|e| e.to_string())?
            {
                bind = Some(a);
                moved = Some(note);
            }
        }
    }
    let mut tcp = match &p.server {
        Some(server) => connect_tcp(p, server, bind)?,
        None => accept_tcp(p)?,
    };
    if let Some(note) = moved {
        eprintln!("{note}");
    }
    let _ = tcp.set_nodelay(true);
    tcp.set_read_timeout(p.timeout).map_err(|e| e.to_string())?;
    let peer_ip = canonical(tcp.peer_addr().map_err(|e| e.to_string())?.ip());
    let tcp_local = match bind {
        Some(b) if !b.is_unspecified() => b,
        _ => tcp.local_addr().map_err(|e| e.to_string())?.ip(),
    };
    let tcp_local = canonical(tcp_local);
    let local = match p.gid_idx {
        // Entry N of the GID table of the address's device, as `roce
        // devinfo` prints it (an address no interface lists, such as
        // 127.0.0.2, has a table of its own: itself).
        Some(g) => {
            let g = usize::from(g);
            let dev = OpenOptions::new(BackendKind::Udp, tcp_local)
                .device()
                .map_err(|e| e.to_string())?;
            match dev {
                Some(d) => d.gid(g).map_err(|e| e.to_string())?,
                None if g == 0 => tcp_local,
                None => {
                    return Err(format!(
                        "GID index {g} is not in the GID table of {tcp_local} (an address no interface lists has one entry, 0)"
                    ))
                }
            }
        }
        None if !is_client && !chosen => crate::device::loopback_server_local(
            "pingpong",
            tcp_local,
            Some(peer_ip),
            p.roce_port,
            false,
            None,
        ),
        None => tcp_local,
    };
    // A server's GID the client uses too (both ends on this host, each
    // given -g 0, say) gives way to a free loopback address, as with no -g.
    let local = match p.gid_idx {
        Some(g) if !is_client && p.bind.is_none_or(|b| b.is_unspecified()) => {
            crate::device::loopback_server_local(
                "pingpong",
                local,
                Some(peer_ip),
                p.roce_port,
                false,
                Some(usize::from(g)),
            )
        }
        _ => local,
    };

    let (mut s, local) = setup(p, local, is_client, !chosen, peer_ip)?;
    to_init(&s)?;
    for slot in 0..p.rx_depth {
        s.post_recv(slot)?;
    }
    if s.channel.is_some() {
        s.cq.req_notify(false).map_err(|e| e.to_string())?;
    }
    let gid = wire::gid_of(local);
    let ud = p.transport == Transport::Ud;
    let mine: Vec<Dest> = s
        .qps
        .iter()
        .map(|qp| {
            Ok(Dest {
                lid: 0,
                qpn: qp.qpn().value(),
                psn: random_psn()?,
                gid,
            })
        })
        .collect::<Result<_, String>>()?;
    for d in &mine {
        println!("{}", wire::address_line(false, ud, d));
    }
    let slots = if p.transport == Transport::Srq {
        wire::SRQ_SLOTS
    } else {
        1
    };
    if is_client {
        let theirs = wire::client_exchange(&mut tcp, &mine, slots)?;
        drop(tcp);
        let remote = check_remote(p, theirs)?;
        print_remote(&remote);
        check_peer(p, &remote, peer_ip)?;
        check_family(p, local, &remote, peer_ip, true)?;
        connect(&mut s, &mine, &remote, peer_ip)?;
    } else {
        let theirs = wire::server_read(&mut tcp, slots)?;
        let remote = check_remote(p, theirs)?;
        check_peer(p, &remote, peer_ip)?;
        if let Err(e) = check_family(p, local, &remote, peer_ip, false) {
            // The tools' exchange has no error message: answer, so that
            // the client finds the mismatch too and says so.
            let _ = wire::server_finish(&mut tcp, &mine, slots);
            return Err(e);
        }
        connect(&mut s, &mine, &remote, peer_ip)?;
        wire::server_finish(&mut tcp, &mine, slots)?;
        drop(tcp);
        print_remote(&remote);
    }
    let r = pingpong(&s);
    if p.stats {
        eprintln!("device: {:?}", s.ctx.counters());
        for (q, qp) in s.qps.iter().enumerate() {
            eprintln!("QP[{q}] {:06x}: {:?}", qp.qpn().value(), qp.counters());
        }
        for (k, v) in s.ctx.backend_counters() {
            eprintln!("backend {k} {v}");
        }
    }
    r
}

/// Both ends' GIDs in one IP family ([`crate::device::family_mismatch`]).
fn check_family(
    p: &Params,
    local: IpAddr,
    remote: &[Dest],
    peer: IpAddr,
    is_client: bool,
) -> Result<(), String> {
    for d in remote {
        let pair = crate::device::GidPair {
            me: if is_client {
                "the client"
            } else {
                "the server"
            },
            local,
            index: p.gid_idx.map(usize::from),
            remote: remote_addr(d, peer),
            flag: "-g",
            dev: None,
        };
        if let Some(e) = crate::device::family_mismatch(&pair) {
            return Err(e);
        }
    }
    Ok(())
}

/// The GIDs of the peer's address message must be its TCP address
/// (unless `-g`): [`crate::device::check_peer_qps`].
fn check_peer(p: &Params, remote: &[Dest], peer: IpAddr) -> Result<(), String> {
    let at = remote.iter().map(|d| (d.qpn, remote_addr(d, peer)));
    crate::device::check_peer_qps(p.gid_idx.is_some(), at, Some(peer), "-g")
        .map_err(|e| e.to_string())
}

fn check_remote(p: &Params, theirs: Vec<Dest>) -> Result<Vec<Dest>, String> {
    let nq = p.num_qp as usize;
    let used = theirs.iter().filter(|d| !d.is_zero()).count();
    if p.transport == Transport::Srq && used != nq {
        return Err(format!(
            "the peer has {used} QPs and this side {nq} (run both with the same -q)"
        ));
    }
    let remote: Vec<Dest> = theirs.into_iter().take(nq).collect();
    if remote.iter().any(|d| d.qpn == 0) {
        return Err("the peer sent QPN 0".into());
    }
    Ok(remote)
}

fn print_remote(remote: &[Dest]) {
    for d in remote {
        println!("{}", wire::address_line(true, false, d));
    }
}

/// How long a connected peer may leave this side without a completion:
/// the tools ping-pong without pause, so a peer silent this long is gone
/// (a killed process sends nothing; its QP just stops answering).
const PEER_SILENCE: Duration = Duration::from_secs(10);

/// Waits for completions: busy-polling, or on the channel with `-e`; at
/// most [`PEER_SILENCE`] (less with a shorter `--timeout`, unbounded with
/// `--timeout 0`).
fn wait(s: &Side, out: &mut Vec<Completion>, events: &mut u64) -> Result<(), String> {
    let limit = s.p.timeout.map(|t| t.min(PEER_SILENCE));
    let end = deadline(limit);
    let idle = || {
        format!(
            "no completion for {} s: {} stopped answering (killed, or unreachable): giving up",
            limit.map_or(0, |t| t.as_secs()),
            if s.is_client {
                "the server"
            } else {
                "the client"
            }
        )
    };
    if let Some(ch) = &s.channel {
        loop {
            // Completions already queued (more than one event's worth).
            if s.cq.poll(out, 64).map_err(|e| e.to_string())? > 0 {
                return Ok(());
            }
            let left = end.map(|e| e.saturating_duration_since(Instant::now()));
            if left.is_some_and(|l| l.is_zero()) {
                return Err(idle());
            }
            let Some(cq) = ch.get_event(left) else {
                return Err(idle());
            };
            *events += 1;
            cq.req_notify(false).map_err(|e| e.to_string())?;
        }
    }
    let mut spins = 0u64;
    loop {
        if s.cq.poll(out, 64).map_err(|e| e.to_string())? > 0 {
            return Ok(());
        }
        spins += 1;
        if spins.is_multiple_of(64) {
            std::thread::yield_now();
            if end.is_some_and(|e| Instant::now() >= e) {
                return Err(idle());
            }
        }
    }
}

fn pingpong(s: &Side) -> Result<(), String> {
    let p = &s.p;
    let nq = s.qps.len();
    let size = p.size as usize;
    let srq = p.transport == Transport::Srq;
    let iters = u64::from(p.iters);
    let refill_at = if srq { p.num_qp } else { 1 };
    // What each QP sends next, and what it last sent (for the client's -c).
    let initial = {
        let mut b = vec![0u8; size];
        s.mr.read(s.send_off(0), &mut b)
            .map_err(|e| e.to_string())?;
        b
    };
    let mut next: Vec<Vec<u8>> = vec![initial; nq];
    let mut last_sent: Vec<Vec<u8>> = vec![Vec::new(); nq];
    let mut sent_k = vec![0u64; nq];
    let mut recv_k = vec![0u64; nq];
    let mut pending = vec![0u64; nq];
    let mut free: Vec<u32> = Vec::new();
    let mut routs = p.rx_depth;
    let (mut scnt, mut rcnt) = (0u64, 0u64);
    let mut peer = Peer::Unknown;
    let mut events = 0u64;
    let qpn_index = |qpn: Qpn| s.qps.iter().position(|q| q.qpn() == qpn);
    let content = |k: u64| pattern(if srq { 0 } else { k }, size);

    let send = |q: usize,
                next: &mut Vec<Vec<u8>>,
                last_sent: &mut Vec<Vec<u8>>,
                sent_k: &mut Vec<u64>|
     -> Result<(), String> {
        if p.chk && s.is_client {
            next[q] = content(sent_k[q]);
        }
        s.post_send(q, &next[q])?;
        last_sent[q] = next[q].clone();
        sent_k[q] += 1;
        Ok(())
    };

    let start = Instant::now();
    if s.is_client {
        for (q, pend) in pending.iter_mut().enumerate() {
            send(q, &mut next, &mut last_sent, &mut sent_k)?;
            *pend = SEND | RECV;
        }
    } else {
        pending.fill(RECV);
    }

    let mut wcs = Vec::with_capacity(64);
    let mut buf = vec![0u8; s.rslot as usize];
    while rcnt < iters || scnt < iters {
        wcs.clear();
        wait(s, &mut wcs, &mut events)?;
        for wc in &wcs {
            if !wc.is_success() {
                return Err(format!(
                    "Failed status {} ({}) for wr_id {}",
                    wc.status().as_str(),
                    wc.status() as u32,
                    wc.wr_id() & 0xff
                ));
            }
            let Some(q) = qpn_index(wc.qp_num()) else {
                return Err(format!("Couldn't find QPN {:06x}", wc.qp_num().value()));
            };
            let kind = wc.wr_id() & 0xff;
            match kind {
                SEND => scnt += 1,
                RECV => {
                    let slot = (wc.wr_id() >> 8) as u32;
                    let off = if p.transport == Transport::Ud {
                        GRH as usize
                    } else {
                        0
                    };
                    let want = off + size;
                    if p.chk && wc.byte_len() as usize != want {
                        return Err(format!(
                            "received {} bytes on QPN {:06x}, expected {want}",
                            wc.byte_len(),
                            wc.qp_num().value()
                        ));
                    }
                    s.mr.read(s.recv_off(slot), &mut buf)
                        .map_err(|e| e.to_string())?;
                    let got = &buf[off..want];
                    if p.chk {
                        let k = recv_k[q];
                        let ok = if s.is_client {
                            got == last_sent[q].as_slice()
                        } else {
                            if peer == Peer::Unknown {
                                peer = if got == content(k).as_slice() {
                                    Peer::Ours
                                } else {
                                    Peer::RdmaCore
                                };
                            }
                            match peer {
                                Peer::Ours => got == content(k).as_slice(),
                                _ => rdma_core_content(got),
                            }
                        };
                        if !ok {
                            let bad = first_diff(got, s.is_client.then(|| last_sent[q].as_slice()));
                            return Err(format!(
                                "invalid data in message {} on QPN {:06x}{bad}",
                                k + 1,
                                wc.qp_num().value()
                            ));
                        }
                    }
                    recv_k[q] += 1;
                    next[q].copy_from_slice(got);
                    free.push(slot);
                    routs -= 1;
                    if routs <= refill_at {
                        for slot in free.drain(..) {
                            s.post_recv(slot)?;
                            routs += 1;
                        }
                        if routs < p.rx_depth {
                            return Err(format!("Couldn't post receive ({routs})"));
                        }
                    }
                    rcnt += 1;
                }
                _ => return Err(format!("Completion for unknown wr_id {}", wc.wr_id())),
            }
            pending[q] &= !kind;
            if scnt < iters && pending[q] == 0 {
                send(q, &mut next, &mut last_sent, &mut sent_k)?;
                pending[q] = SEND | RECV;
            }
        }
    }
    let usec = start.elapsed().as_secs_f64() * 1e6;
    if s.channel.is_some() {
        s.cq.ack_events(events);
    }
    let bytes = u64::from(p.size) * iters * 2;
    println!(
        "{bytes} bytes in {:.2} seconds = {:.2} Mbit/sec",
        usec / 1e6,
        bytes as f64 * 8.0 / usec
    );
    println!(
        "{iters} iters in {:.2} seconds = {:.2} usec/iter",
        usec / 1e6,
        usec / iters as f64
    );
    // The last SENDs may still wait for their ACKs: give the RC peer a
    // moment so it does not retransmit into a closed port.
    linger(s);
    Ok(())
}

/// Keeps the context (and its progress thread, which sends ACKs) alive a
/// moment after the last completion.
fn linger(_s: &Side) {
    std::thread::sleep(Duration::from_millis(200));
}

fn first_diff(got: &[u8], want: Option<&[u8]>) -> String {
    match want {
        Some(w) => match got.iter().zip(w).position(|(a, b)| a != b) {
            Some(i) => format!(" (byte {i}: got 0x{:02x}, sent 0x{:02x})", got[i], w[i]),
            None => String::new(),
        },
        None => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chk_pattern_zero_at_pages_and_varies() {
        let a = pattern(0, 9000);
        let b = pattern(1, 9000);
        assert_eq!((a[0], a[4096], a[8192]), (0, 0, 0));
        assert_ne!(a, b);
        assert!(!rdma_core_content(&a));
        let mut theirs = vec![0x7bu8; 8192];
        assert!(rdma_core_content(&theirs));
        theirs[4096] = 0;
        theirs[0] = 0;
        assert!(rdma_core_content(&theirs));
        theirs[5] = 1;
        assert!(!rdma_core_content(&theirs));
        assert!(rdma_core_content(&[0u8; 64]));
    }

    #[test]
    fn psn_is_24_bits_and_random() {
        let psns: Vec<u32> = (0..100).map(|_| random_psn().unwrap()).collect();
        assert!(psns.iter().all(|&p| p <= 0xff_ffff));
        assert!(psns.windows(2).any(|w| w[0] != w[1]));
    }
}
