//! Opening the device a run uses, through roce-verbs' [`OpenOptions`]:
//! the backend the flags choose (UDP, AF_PACKET on the interface that
//! holds the local address, or the in-memory fabric), with `--pcap` and
//! `--faults` middleware; the GID table lookup of `-x`; the path MTU the
//! link carries.

use std::net::{IpAddr, UdpSocket};
use std::sync::{Arc, Mutex, PoisonError};

use roce_verbs::{Context, Device, OpenError, OpenOptions};

use super::args::{BackendKind, CcChoice, Held, PerfArgs};
use super::control::Endpoint;
use super::error::PerfError;

/// The device that holds `local` (or the one `--dev` names, which must
/// hold it).
pub(crate) fn device_for(local: IpAddr, dev: Option<&str>) -> Result<Device, PerfError> {
    let o = OpenOptions::new(roce_verbs::BackendKind::Udp, local).interface(dev);
    o.device()
        .map_err(|e| PerfError::Failed(e.to_string()))?
        .ok_or_else(|| PerfError::Failed(format!("{local} is not an address of this host")))
}

/// The local RoCE address: `tcp_local` (the control connection's), or
/// with `-x N` entry N of the GID table of its interface (or `--dev`'s),
/// as `roce devinfo` numbers it.
pub(crate) fn gid_address(args: &PerfArgs, tcp_local: IpAddr) -> Result<IpAddr, PerfError> {
    let Some(x) = args.gid_index else {
        return Ok(tcp_local);
    };
    let dev = match args.dev.as_deref() {
        Some(dev) => Device::by_name(dev).map_err(|e| PerfError::Failed(e.to_string()))?,
        None => device_for(tcp_local, None)?,
    };
    dev.gid(usize::from(x))
        .map_err(|e| PerfError::Failed(e.to_string()))
}

/// The largest path MTU the link of `local` carries (rxe's rule: the IB
/// MTU plus 80 bytes of headers must fit the netdev MTU); 4096 when the
/// interface is not known (the fabric).
pub(crate) fn link_path_mtu(args: &PerfArgs, local: IpAddr) -> Result<u32, PerfError> {
    if args.backend == BackendKind::Fabric {
        return Ok(4096);
    }
    // A named interface must exist and hold the address; without one, an
    // address no interface lists (it may be routed) keeps the default.
    OpenOptions::new(roce_verbs::BackendKind::Udp, local)
        .interface(args.dev.as_deref())
        .link_mtu()
        .map_err(|e| PerfError::Failed(e.to_string()))
}

/// Has the kernel resolve the peers' MAC addresses before the first RoCE
/// frame: the packet backend reads the neighbour table and drops (for
/// retransmission to recover) what it cannot address yet, which would
/// cost the first latency sample a retransmission timeout. A one-byte
/// datagram to the discard port makes the kernel resolve the address; the
/// barrier that follows gives it a round trip to do so.
pub(crate) fn prime_neighbours(local: IpAddr, remote: &[Endpoint]) {
    let Ok(sock) = std::net::UdpSocket::bind((local, 0)) else {
        return;
    };
    let mut done: Vec<IpAddr> = Vec::new();
    for r in remote {
        if !done.contains(&r.addr) {
            let _ = sock.send_to(&[0], (r.addr, 9));
            done.push(r.addr);
        }
    }
}

/// A server given an explicit address (`--bind`, not 0.0.0.0) holds it
/// from its start: its RoCE UDP port on it is bound now, before the
/// server waits for a client, and released just before the device binds
/// it ([`open_context`]: a window of microseconds, inside this process;
/// the backend opens its own sockets). Another stack on this host (a drop-in client
/// started meanwhile) then finds the address taken and moves to another,
/// where before the server opened its device only when its client came,
/// and failed if the address had been taken meanwhile. Only with
/// `ROCE_SHM=0`: a server that shares its address
/// ([`crate::device::sharing`]) joins it when it opens whoever came
/// meanwhile, and a hold of its own would shut the other processes of
/// the address out. None for a client, a server without an address, the
/// fabric, and `-R` (whose server opens its device at once).
pub(crate) fn hold_address(args: &PerfArgs) -> Result<Option<Held>, PerfError> {
    let Some(bind) = args.bind.filter(|b| !b.is_unspecified()) else {
        return Ok(None);
    };
    if args.server.is_some()
        || args.loopback
        || args.rdma_cm
        || args.backend == BackendKind::Fabric
        || (args.backend == BackendKind::Udp && crate::device::sharing())
    {
        return Ok(None);
    }
    let local = gid_address(args, bind)?;
    match UdpSocket::bind((local, args.roce_port)) {
        Ok(s) => Ok(Some(Arc::new(Mutex::new(Some(s))))),
        Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => Err(PerfError::Failed(format!(
            "{local}:{} (UDP) is taken: another RoCE stack on this host holds the address; give this server another --bind or --roce-port",
            args.roce_port
        ))),
        Err(e) => Err(PerfError::Failed(format!("cannot hold {local}:{} (UDP): {e}", args.roce_port))),
    }
}

/// Opens the device a run uses: the backend the flags choose on `local`,
/// with the `--pcap` and `--faults` middleware, the engine configured by
/// `--link-gbps`, `--cc` and the path MTU.
pub(crate) fn open_context(
    args: &PerfArgs,
    local: IpAddr,
    mtu: u32,
    fabric: Option<&roce_io::Fabric>,
) -> Result<Context, OpenFailure> {
    let other = |e: &str| OpenFailure::Other(PerfError::Args(e.to_string()));
    // From 1 Mbit/s: DCQCN's rates are whole bits per second.
    if !(args.link_gbps >= 0.001 && args.link_gbps <= 10_000.0) {
        return Err(other("--link-gbps must be between 0.001 and 10000"));
    }
    let kind = match args.backend {
        BackendKind::Fabric => {
            let f = fabric.ok_or_else(|| other("the fabric backend needs --loopback"))?;
            if args.pcap.is_some() || args.faults.is_some() {
                return Err(other("--pcap and --faults need the udp or packet backend"));
            }
            roce_verbs::BackendKind::Fabric(f.clone())
        }
        BackendKind::Udp => roce_verbs::BackendKind::Udp,
        BackendKind::Packet => roce_verbs::BackendKind::Packet,
    };
    let mut o = crate::device::tool_options(kind, local, args.roce_port)
        .map_err(|e| OpenFailure::Other(e.into()))?
        .interface(args.dev.as_deref())
        .vlan(args.vlan);
    if !args.perftest {
        // The peer is this stack, whose IPv4 IDs the receiver can work
        // out: a datagram whose ICRC matches none is dropped. A perftest
        // peer may be rxe, whose kernel numbers IDs as it likes: there
        // they are only counted (tool_options' choice).
        o = o.icrc_check(roce_verbs::IcrcCheck::Require);
    }
    if let Some(w) = crate::device::middleware(args.pcap.as_deref(), args.faults.as_deref())
        .map_err(|e| OpenFailure::Other(e.into()))?
    {
        o = o.wrap(w);
    }
    o.config.active_mtu = mtu;
    o.config.link_bps = (args.link_gbps * 1e9) as u64;
    let cc = match args.cc {
        CcChoice::None => None,
        CcChoice::Dcqcn => Some(roce_core::cc::CcConfig::dcqcn()),
        CcChoice::DcqcnMlx5 => Some(roce_core::cc::CcConfig::dcqcn_mlx5()),
    };
    if let Some(cc) = cc {
        o.config.cc = cc;
        o.config.ecn = roce_wire::Ecn::Ect0;
    }
    // The address this server held from its start is the device's now.
    if let Some(h) = &args.held {
        drop(h.lock().unwrap_or_else(PoisonError::into_inner).take());
    }
    o.open().map_err(|e| match e {
        OpenError::Open(_) | OpenError::Io(..) => OpenFailure::Other(PerfError::Call(
            format!("cannot open a device on {local}"),
            Box::new(e),
        )),
        OpenError::PortInUse { .. } => OpenFailure::PortInUse(e),
        e => OpenFailure::Other(PerfError::Verbs(Box::new(e))),
    })
}

/// Why [`open_context`] failed: the UDP port taken on the address (a
/// side that chose its loopback address itself moves on), or anything else.
pub(crate) enum OpenFailure {
    /// The RoCE UDP port is held on the address.
    PortInUse(OpenError),
    /// Anything else.
    Other(PerfError),
}

impl From<OpenFailure> for PerfError {
    fn from(f: OpenFailure) -> PerfError {
        match f {
            OpenFailure::PortInUse(e) => PerfError::Verbs(Box::new(e)),
            OpenFailure::Other(e) => e,
        }
    }
}

/// Opens the context on `local`, or, when this side chose `local` itself
/// (`moves`: no `--bind`, no `-x`) and a stack that does not share it
/// holds its UDP port there, on another loopback address
/// ([`crate::device::open_moving`]; never one in `avoid`: the peer's).
/// Returns the context and the address it holds; a move is said on
/// stderr unless `quiet`.
pub(crate) fn open_moving(
    args: &PerfArgs,
    local: IpAddr,
    mtu: u32,
    fabric: Option<&roce_io::Fabric>,
    moves: bool,
    avoid: &[IpAddr],
    quiet: bool,
) -> Result<(Context, IpAddr), PerfError> {
    let moves = moves && args.backend == BackendKind::Udp;
    crate::device::open_moving(
        "perf",
        (local, args.roce_port),
        moves,
        avoid,
        quiet,
        |at| open_context(args, at, mtu, fabric),
        |e| matches!(e, OpenFailure::PortInUse(_)),
    )
    .map_err(PerfError::from)
}
