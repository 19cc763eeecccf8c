//! Opening the device a run uses: the backend the flags choose (UDP,
//! AF_PACKET on the interface that holds the local address, or the
//! in-memory fabric), with `--pcap` and `--faults` middleware; the GID
//! table lookup of `-x`; the path MTU the link carries.

use std::net::IpAddr;

use roce_verbs::{Context, DeviceConfig};

use super::control::Endpoint;
use super::{BackendKind, PerfArgs};

/// The interface that holds `local` (or the one `--dev` names, which must
/// hold it).
pub(crate) fn interface_for(
    local: IpAddr,
    dev: Option<&str>,
) -> Result<roce_io::InterfaceInfo, String> {
    let all = roce_io::interfaces().map_err(|e| format!("cannot list interfaces: {e}"))?;
    match dev {
        Some(name) => {
            let i = all
                .into_iter()
                .find(|i| i.name == name)
                .ok_or(format!("no interface {name}"))?;
            if local.is_unspecified() || i.addrs.contains(&local) {
                Ok(i)
            } else {
                Err(format!(
                    "{local} is not an address of {name} (use --bind with one of its addresses)"
                ))
            }
        }
        None => all
            .into_iter()
            .find(|i| i.addrs.contains(&local))
            .ok_or(format!("{local} is not an address of this host")),
    }
}

/// The local RoCE address: `tcp_local` (the control connection's), or
/// with `-x N` entry N of the GID table of its interface (or `--dev`'s),
/// as `roce devinfo` numbers it.
pub(crate) fn gid_address(args: &PerfArgs, tcp_local: IpAddr) -> Result<IpAddr, String> {
    let Some(x) = args.gid_index else {
        return Ok(tcp_local);
    };
    let info = match args.dev.as_deref() {
        Some(dev) => interface_for(IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED), Some(dev))?,
        None => interface_for(tcp_local, None)?,
    };
    info.addrs.get(usize::from(x)).copied().ok_or(format!(
        "GID index {x} is not in the GID table of {} ({} entries; see roce devinfo -d {})",
        info.name,
        info.addrs.len(),
        info.name
    ))
}

/// The largest path MTU the link of `local` carries (rxe's rule: the IB
/// MTU plus 80 bytes of headers must fit the netdev MTU); 4096 when the
/// interface is not known (the fabric).
pub(crate) fn link_path_mtu(args: &PerfArgs, local: IpAddr) -> Result<u32, String> {
    if args.backend == BackendKind::Fabric {
        return Ok(4096);
    }
    let iface = interface_for(local, args.dev.as_deref());
    // A named interface must exist and hold the address; without one, an
    // address no interface lists (it may be routed) keeps the default.
    let iface = if args.dev.is_some() {
        Some(iface?)
    } else {
        iface.ok()
    };
    Ok(iface
        .and_then(|i| i.mtu)
        .map_or(4096, roce_verbs::roce_core::qp::path_mtu_for_link))
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

/// Wall-clock nanoseconds, for pcap timestamps.
fn unix_nanos() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// Checks a `--faults` specification (kept as text: the flags stay small).
pub(crate) fn check_faults(spec: &str) -> Result<String, String> {
    parse_faults(spec).map(|_| spec.to_string())
}

/// Parses a `--faults` specification.
pub(crate) fn parse_faults(spec: &str) -> Result<roce_io::FaultConfig, String> {
    fn prob(v: &str) -> Result<f64, String> {
        let (num, scale) = match v.strip_suffix('%') {
            Some(n) => (n, 0.01),
            None => (v, 1.0),
        };
        let p = num
            .parse::<f64>()
            .map_err(|_| format!("'{v}' is not a probability"))?
            * scale;
        if (0.0..=1.0).contains(&p) {
            Ok(p)
        } else {
            Err(format!("'{v}' is not between 0 and 1 (0% and 100%)"))
        }
    }
    fn nanos(v: &str) -> Result<u64, String> {
        let split = v.find(|c: char| c.is_ascii_alphabetic()).unwrap_or(v.len());
        let (num, unit) = v.split_at(split);
        let scale = match unit {
            "" | "ns" => 1.0,
            "us" => 1e3,
            "ms" => 1e6,
            "s" => 1e9,
            _ => return Err(format!("'{v}': the unit must be ns, us, ms or s")),
        };
        let n = num
            .parse::<f64>()
            .ok()
            .filter(|n| *n >= 0.0 && *n * scale <= 60e9)
            .ok_or(format!("'{v}' is not a duration up to 60 s"))?;
        Ok((n * scale) as u64)
    }
    let mut c = roce_io::FaultConfig::new(0x0fa1_7000 ^ u64::from(std::process::id()));
    let (mut delay, mut jitter) = (0, 0);
    for item in spec.split(',').filter(|i| !i.is_empty()) {
        let (k, v) = item
            .split_once('=')
            .ok_or(format!("'{item}' is not KEY=VALUE"))?;
        c = match k {
            "loss" => c.loss(prob(v)?),
            "duplicate" | "dup" => c.duplicate(prob(v)?),
            "reorder" => c.reorder(prob(v)?),
            "corrupt" => c.corrupt(prob(v)?),
            "ce" => c.ce_mark(prob(v)?),
            "seed" => c.seed(v.parse().map_err(|_| format!("'{v}' is not a seed"))?),
            "delay" => {
                delay = nanos(v)?;
                c
            }
            "jitter" => {
                jitter = nanos(v)?;
                c
            }
            _ => return Err(format!("unknown fault '{k}'")),
        };
    }
    Ok(c.delay(delay, jitter))
}

/// Opens `backend` with the middleware the flags ask for: `--faults`
/// outermost, so that a `--pcap` tap under it records what goes on the
/// wire (as `tc netem` before tcpdump would).
fn open_on<B: roce_io::Backend + Send + 'static>(
    args: &PerfArgs,
    backend: B,
    cfg: DeviceConfig,
    local: IpAddr,
) -> Result<Context, String> {
    let mut b: Box<dyn roce_io::Backend + Send> = Box::new(backend);
    if let Some(path) = &args.pcap {
        // Datagrams are recorded with synthetic Ethernet headers (the
        // backend's view: what it sent and what it received).
        let tap = roce_io::PcapTap::create(b, path)
            .map_err(|e| format!("cannot create {}: {e}", path.display()))?
            .with_time_offset(unix_nanos());
        b = Box::new(tap);
    }
    if let Some(spec) = &args.faults {
        b = Box::new(roce_io::FaultInjector::new(b, parse_faults(spec)?));
    }
    crate::tuning::open(b, cfg).map_err(|e| format!("cannot open a device on {local}: {e}"))
}

pub(crate) fn open_context(
    args: &PerfArgs,
    local: IpAddr,
    mtu: u32,
    fabric: Option<&roce_io::Fabric>,
) -> Result<Context, String> {
    let mut cfg = crate::tuning::device_config(local);
    cfg.active_mtu = mtu;
    // From 1 Mbit/s: DCQCN's rates are whole bits per second.
    if !(args.link_gbps >= 0.001 && args.link_gbps <= 10_000.0) {
        return Err("--link-gbps must be between 0.001 and 10000".into());
    }
    cfg.link_bps = (args.link_gbps * 1e9) as u64;
    let cc = match args.cc {
        super::CcChoice::None => None,
        super::CcChoice::Dcqcn => Some(roce_verbs::roce_core::cc::CcConfig::dcqcn()),
        super::CcChoice::DcqcnMlx5 => Some(roce_verbs::roce_core::cc::CcConfig::dcqcn_mlx5()),
    };
    if let Some(cc) = cc {
        cfg.cc = cc;
        cfg.ecn = roce_wire::Ecn::Ect0;
    }
    match args.backend {
        BackendKind::Fabric => {
            let f = fabric.ok_or("the fabric backend needs --loopback")?;
            if args.pcap.is_some() || args.faults.is_some() {
                return Err("--pcap and --faults need the udp or packet backend".into());
            }
            Context::open_fabric_with(f, cfg, |ep| ep)
                .map_err(|e| format!("cannot open a device on {local}: {e}"))
        }
        BackendKind::Udp => {
            let mut ucfg = crate::tuning::udp_config(local)
                .port(args.roce_port)
                .remote_port(args.roce_port);
            if !args.perftest {
                // The peer is this stack, whose IPv4 IDs the receiver can
                // work out: a datagram whose ICRC matches none is damaged
                // and dropped (for retransmission to replace), not handed
                // on as unverifiable. A perftest peer may be rxe, whose
                // kernel numbers IDs as it likes: there they are counted.
                ucfg = ucfg.icrc_check(roce_io::IcrcCheck::Require);
            }
            let backend = roce_io::UdpBackend::bind(ucfg).map_err(|e| match e.kind() {
                std::io::ErrorKind::AddrInUse => {
                    format!("UDP port {} on {local} is in use (another RoCE stack, or a kernel rxe device?)", args.roce_port)
                }
                std::io::ErrorKind::AddrNotAvailable => format!("{local} is not an address of this host"),
                _ => format!("cannot open UDP {local}:{}: {e}", args.roce_port),
            })?;
            open_on(args, backend, cfg, local)
        }
        BackendKind::Packet => {
            if args.roce_port != roce_wire::ROCE_V2_PORT {
                return Err(format!(
                    "the packet backend carries UDP port {} only",
                    roce_wire::ROCE_V2_PORT
                ));
            }
            let info = interface_for(local, args.dev.as_deref())?;
            if info.loopback {
                // No neighbour table on a loopback interface, and both
                // sides' sockets would see every frame.
                return Err(format!(
                    "the packet backend needs an Ethernet interface, not {} (use the udp backend on loopback)",
                    info.name
                ));
            }
            let pcfg = roce_io::PacketConfig::new(info.name.clone())
                .vlan(args.vlan)
                .local_addrs(vec![local]);
            let backend = roce_io::PacketBackend::open(pcfg).map_err(|e| match e.kind() {
                std::io::ErrorKind::PermissionDenied => format!(
                    "the packet backend needs CAP_NET_RAW (run as root, or setcap cap_net_raw+ep on roce): {e}"
                ),
                _ => format!("cannot open AF_PACKET on {}: {e}", info.name),
            })?;
            open_on(args, backend, cfg, local)
        }
    }
}
