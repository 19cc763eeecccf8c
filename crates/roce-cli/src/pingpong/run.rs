//! One run of `roce pingpong`: the context on the UDP backend, the QPs, the
//! TCP exchange, then the ping-pong loop of the rdma-core tools
//! ([`super::traffic`]).

use std::io::ErrorKind;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use roce_verbs::{
    Access, AddressHandle, AhAttr, BackendKind, CompletionChannel, CompletionQueue, ConnectOptions,
    Context, MemoryRegion, OpenError, OpenOptions, ProtectionDomain, Psn, Qkey, QpCaps, QpEndpoint,
    QpInitAttr, QpType, Qpn, QueuePair, RecvWr, SendWr, SharedReceiveQueue,
};

use super::error::PingpongError;
use super::traffic::pingpong;
use super::wire::{self, Dest};
use super::{Params, Transport};

/// The kind of a work request (the low byte of its ID): a receive.
pub(super) const RECV: u64 = 1;
/// The kind of a work request: a SEND.
pub(super) const SEND: u64 = 2;
/// Room for the GRH in front of a UD receive.
pub(super) const GRH: u32 = 40;
/// The UD Q_Key of the tools.
const QKEY: u32 = 0x1111_1111;

/// A random 24-bit PSN from the operating system (the tools use
/// `lrand48() & 0xffffff`; a clock- or pid-derived one helps a blind
/// attacker guess the connection's window).
fn random_psn() -> Result<u32, PingpongError> {
    Ok(roce_verbs::random_psn()?.value())
}

/// `t` from now, if any.
pub(super) fn deadline(t: Option<Duration>) -> Option<Instant> {
    t.map(|t| Instant::now() + t)
}

/// The client's TCP connection, retrying while nothing listens yet.
fn connect_tcp(p: &Params, server: &str, bind: Option<IpAddr>) -> Result<TcpStream, PingpongError> {
    use std::net::ToSocketAddrs;
    let addrs: Vec<SocketAddr> = (server, p.port)
        .to_socket_addrs()
        .map_err(|error| PingpongError::Resolve {
            server: server.to_string(),
            error,
        })?
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
            return Err(PingpongError::Connect {
                server: server.to_string(),
                port: p.port,
                error: last,
            });
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
fn accept_tcp(p: &Params) -> Result<TcpStream, PingpongError> {
    let bind = p.bind.unwrap_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED));
    let l = TcpListener::bind((bind, p.port)).map_err(|error| PingpongError::Listen {
        port: p.port,
        error,
    })?;
    let (s, _) = l.accept().map_err(PingpongError::Accept)?;
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
) -> Result<(Context, IpAddr), PingpongError> {
    let open = |at: IpAddr| -> Result<Context, PingpongError> {
        let mut o = crate::device::tool_options(BackendKind::Udp, at, p.roce_port)?;
        o.config.active_mtu = p.mtu;
        o.open().map_err(|e| match e {
            OpenError::PortInUse { .. } | OpenError::NotLocal(_) => PingpongError::Open(e),
            error => PingpongError::OpenOn { at, error },
        })
    };
    // The UDP port taken: a side that chose its address moves on.
    let taken = |e: &PingpongError| matches!(e, PingpongError::Open(OpenError::PortInUse { .. }));
    let at = (local, p.roce_port);
    crate::device::open_moving("pingpong", at, moves, &[peer], false, open, taken)
}

/// One side's resources: its context, QPs, CQ and buffers.
pub(super) struct Side {
    pub(super) p: Params,
    pub(super) is_client: bool,
    ctx: Context,
    _pd: ProtectionDomain,
    pub(super) cq: CompletionQueue,
    pub(super) channel: Option<CompletionChannel>,
    srq: Option<SharedReceiveQueue>,
    pub(super) qps: Vec<QueuePair>,
    pub(super) mr: MemoryRegion,
    /// Bytes per receive slot (UD: size + 40).
    pub(super) rslot: u32,
    /// Receive slots start here in `mr`; send slots (one per QP) at 0.
    rbase: u64,
    ah: Option<AddressHandle>,
    remote: Vec<Dest>,
}

impl Side {
    /// Where QP `q`'s send buffer is in `mr`.
    pub(super) fn send_off(&self, q: usize) -> u64 {
        q as u64 * u64::from(self.p.size)
    }

    /// Where receive slot `slot` is in `mr`.
    pub(super) fn recv_off(&self, slot: u32) -> u64 {
        self.rbase + u64::from(slot) * u64::from(self.rslot)
    }

    /// Posts receive slot `slot` (to the SRQ, if any).
    pub(super) fn post_recv(&self, slot: u32) -> Result<(), PingpongError> {
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
        .map_err(PingpongError::PostRecv)
    }

    /// SENDs `data` on QP `q`.
    pub(super) fn post_send(&self, q: usize, data: &[u8]) -> Result<(), PingpongError> {
        self.mr.write(self.send_off(q), data)?;
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
        r.map_err(PingpongError::PostSend)
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
) -> Result<(Side, IpAddr), PingpongError> {
    let (ctx, local) = open_context(p, local, moves, peer)?;
    let pd = ctx.alloc_pd();
    let nq = p.num_qp as usize;
    let channel = p.events.then(|| ctx.create_comp_channel());
    let cq = ctx
        .create_cq((p.rx_depth + p.num_qp) as usize * 2 + 16, channel.as_ref())
        .map_err(PingpongError::CreateCq)?;
    let srq = if p.transport == Transport::Srq {
        Some(
            pd.create_srq(p.rx_depth as usize)
                .map_err(PingpongError::CreateSrq)?,
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
        .map_err(PingpongError::RegMr)?;
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
        qps.push(pd.create_qp(&a).map_err(PingpongError::CreateQp)?);
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
fn to_init(s: &Side) -> Result<(), PingpongError> {
    let opts = tool_options(&s.p);
    for qp in &s.qps {
        qp.to_init(&opts).map_err(PingpongError::ToInit)?;
    }
    Ok(())
}

/// INIT → RTR → RTS against the peer's `remote` with the tools' attributes
/// (UD: only the state and SQ PSN, then an AH to the peer).
fn connect(
    s: &mut Side,
    mine: &[Dest],
    remote: &[Dest],
    peer: IpAddr,
) -> Result<(), PingpongError> {
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
            .map_err(|error| PingpongError::ToRts { qp: q, error })?;
        if p.transport == Transport::Ud {
            let ah = s
                ._pd
                .create_ah(AhAttr {
                    dest: addr,
                    hop_limit: 1,
                    traffic_class: 0,
                    sgid_index: 0,
                })
                .map_err(PingpongError::CreateAh)?;
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

pub(crate) fn run(p: &Params) -> Result<(), PingpongError> {
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
                crate::device::loopback_client_local("pingpong", addr, local, p.roce_port)?
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
    tcp.set_read_timeout(p.timeout)
        .map_err(PingpongError::Socket)?;
    let peer_ip = canonical(tcp.peer_addr().map_err(PingpongError::Socket)?.ip());
    let tcp_local = match bind {
        Some(b) if !b.is_unspecified() => b,
        _ => tcp.local_addr().map_err(PingpongError::Socket)?.ip(),
    };
    let tcp_local = canonical(tcp_local);
    let local = match p.gid_idx {
        // Entry N of the GID table of the address's device, as `roce
        // devinfo` prints it (an address no interface lists, such as
        // 127.0.0.2, has a table of its own: itself).
        Some(g) => {
            let g = usize::from(g);
            let dev = OpenOptions::new(BackendKind::Udp, tcp_local).device()?;
            match dev {
                Some(d) => d.gid(g)?,
                None if g == 0 => tcp_local,
                None => {
                    return Err(PingpongError::GidIndex {
                        index: g,
                        addr: tcp_local,
                    })
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
        s.cq.req_notify(false)?;
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
        .collect::<Result<_, PingpongError>>()?;
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
) -> Result<(), PingpongError> {
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
            return Err(PingpongError::FamilyMismatch(e));
        }
    }
    Ok(())
}

/// The GIDs of the peer's address message must be its TCP address
/// (unless `-g`): [`crate::device::check_peer_qps`].
fn check_peer(p: &Params, remote: &[Dest], peer: IpAddr) -> Result<(), PingpongError> {
    let at = remote.iter().map(|d| (d.qpn, remote_addr(d, peer)));
    Ok(crate::device::check_peer_qps(
        p.gid_idx.is_some(),
        at,
        Some(peer),
        "-g",
    )?)
}

fn check_remote(p: &Params, theirs: Vec<Dest>) -> Result<Vec<Dest>, PingpongError> {
    let nq = p.num_qp as usize;
    let used = theirs.iter().filter(|d| !d.is_zero()).count();
    if p.transport == Transport::Srq && used != nq {
        return Err(PingpongError::QpCount {
            peer: used,
            mine: nq,
        });
    }
    let remote: Vec<Dest> = theirs.into_iter().take(nq).collect();
    if remote.iter().any(|d| d.qpn == 0) {
        return Err(PingpongError::ZeroQpn);
    }
    Ok(remote)
}

fn print_remote(remote: &[Dest]) {
    for d in remote {
        println!("{}", wire::address_line(true, false, d));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn psn_is_24_bits_and_random() {
        let psns: Vec<u32> = (0..100).map(|_| random_psn().unwrap()).collect();
        assert!(psns.iter().all(|&p| p <= 0xff_ffff));
        assert!(psns.windows(2).any(|w| w[0] != w[1]));
    }
}
