//! Opening the device a run uses, through roce-verbs' [`OpenOptions`]:
//! the backend the flags choose (UDP, AF_PACKET on the interface that
//! holds the local address, or the in-memory fabric), with `--pcap` and
//! `--faults` middleware; the GID table lookup of `-x`; the path MTU the
//! link carries.

use std::net::IpAddr;

use roce_verbs::{Context, Device, OpenError, OpenOptions};

use super::control::Endpoint;
use super::{BackendKind, PerfArgs};

/// The device that holds `local` (or the one `--dev` names, which must
/// hold it).
pub(crate) fn device_for(local: IpAddr, dev: Option<&str>) -> Result<Device, String> {
    let o = OpenOptions::new(roce_verbs::BackendKind::Udp, local).interface(dev);
    o.device()
        .map_err(|e| e.to_string())?
        .ok_or(format!("{local} is not an address of this host"))
}

/// The local RoCE address: `tcp_local` (the control connection's), or
/// with `-x N` entry N of the GID table of its interface (or `--dev`'s),
/// as `roce devinfo` numbers it.
pub(crate) fn gid_address(args: &PerfArgs, tcp_local: IpAddr) -> Result<IpAddr, String> {
    let Some(x) = args.gid_index else {
        return Ok(tcp_local);
    };
    let dev = match args.dev.as_deref() {
        Some(dev) => Device::by_name(dev).map_err(|e| e.to_string())?,
        None => device_for(tcp_local, None)?,
    };
    dev.gid(usize::from(x)).map_err(|e| e.to_string())
}

/// The largest path MTU the link of `local` carries (rxe's rule: the IB
/// MTU plus 80 bytes of headers must fit the netdev MTU); 4096 when the
/// interface is not known (the fabric).
pub(crate) fn link_path_mtu(args: &PerfArgs, local: IpAddr) -> Result<u32, String> {
    if args.backend == BackendKind::Fabric {
        return Ok(4096);
    }
    // A named interface must exist and hold the address; without one, an
    // address no interface lists (it may be routed) keeps the default.
    OpenOptions::new(roce_verbs::BackendKind::Udp, local)
        .interface(args.dev.as_deref())
        .link_mtu()
        .map_err(|e| e.to_string())
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

/// Opens the device a run uses: the backend the flags choose on `local`,
/// with the `--pcap` and `--faults` middleware, the engine configured by
/// `--link-gbps`, `--cc` and the path MTU.
pub(crate) fn open_context(
    args: &PerfArgs,
    local: IpAddr,
    mtu: u32,
    fabric: Option<&roce_io::Fabric>,
) -> Result<Context, String> {
    // From 1 Mbit/s: DCQCN's rates are whole bits per second.
    if !(args.link_gbps >= 0.001 && args.link_gbps <= 10_000.0) {
        return Err("--link-gbps must be between 0.001 and 10000".into());
    }
    let kind = match args.backend {
        BackendKind::Fabric => {
            let f = fabric.ok_or("the fabric backend needs --loopback")?;
            if args.pcap.is_some() || args.faults.is_some() {
                return Err("--pcap and --faults need the udp or packet backend".into());
            }
            roce_verbs::BackendKind::Fabric(f.clone())
        }
        BackendKind::Udp => roce_verbs::BackendKind::Udp,
        BackendKind::Packet => roce_verbs::BackendKind::Packet,
    };
    let mut o = OpenOptions::new(kind, local)
        .cpu(roce_io::CpuTuning::detect())
        .interface(args.dev.as_deref())
        .roce_port(args.roce_port, args.roce_port)
        .vlan(args.vlan);
    if args.perftest {
        // The peer is this stack otherwise, whose IPv4 IDs the receiver
        // can work out (the backend's default: a datagram whose ICRC
        // matches none is dropped). A perftest peer may be rxe, whose
        // kernel numbers IDs as it likes: there they are only counted.
        o = o.icrc_check(roce_io::IcrcCheck::Count);
    }
    if let Some(w) = crate::device::middleware(args.pcap.as_deref(), args.faults.as_deref())? {
        o = o.wrap(w);
    }
    o.config.active_mtu = mtu;
    o.config.link_bps = (args.link_gbps * 1e9) as u64;
    let cc = match args.cc {
        super::CcChoice::None => None,
        super::CcChoice::Dcqcn => Some(roce_verbs::roce_core::cc::CcConfig::dcqcn()),
        super::CcChoice::DcqcnMlx5 => Some(roce_verbs::roce_core::cc::CcConfig::dcqcn_mlx5()),
    };
    if let Some(cc) = cc {
        o.config.cc = cc;
        o.config.ecn = roce_wire::Ecn::Ect0;
    }
    o.open().map_err(|e| match e {
        OpenError::Open(_) | OpenError::Io(..) => format!("cannot open a device on {local}: {e}"),
        e => e.to_string(),
    })
}
