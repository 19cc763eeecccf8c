//! What every command shares to open its device: the `--faults` and
//! `--pcap` middleware over the backend that roce-verbs opens
//! ([`roce_verbs::OpenOptions`]).

use std::fmt;
use std::net::{IpAddr, Ipv4Addr};
use std::path::Path;

/// Why a helper of this module refused: a flag or setting it cannot take,
/// or addresses that do not go together. The text is what the user sees.
#[derive(Debug)]
pub(crate) enum DeviceError {
    /// A `--faults` specification refused (roce-io's reason).
    Faults(String),
    /// `ROCE_SHM` has a value other than 0 or 1: the value.
    Sharing(String),
    /// A device named by `--dev` or holding the address cannot be read.
    Device(roce_verbs::OpenError),
    /// No loopback address is free for the RoCE UDP port.
    NoFreeLoopback { port: u16 },
    /// A GID index beyond every device's table.
    GidIndex { index: usize, most: usize },
    /// The peer put a QP away from its own address (docs/security.md §2).
    PeerQpElsewhere {
        qpn: u32,
        addr: IpAddr,
        peer: IpAddr,
        flag: String,
    },
}

impl fmt::Display for DeviceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DeviceError::Faults(m) => f.write_str(m),
            DeviceError::Sharing(value) => write!(f, "ROCE_SHM={value}: use 1 or 0"),
            DeviceError::Device(e) => write!(f, "{e}"),
            DeviceError::NoFreeLoopback { port } => write!(
                f,
                "UDP port {port} is taken on every loopback address tried (a kernel rxe device, or \
                 another RoCE stack, holds it?): give this side an address with --bind"
            ),
            DeviceError::GidIndex { index, most } => write!(
                f,
                "GID index {index} is not in the GID table of any device (the largest has {most} entries; \
                 roce devinfo lists them)"
            ),
            DeviceError::PeerQpElsewhere {
                qpn,
                addr,
                peer,
                flag,
            } => write!(
                f,
                "the peer's QP {qpn:#x} is at {addr}, not at the peer's address {peer} (with {flag} on both sides the addresses may differ)"
            ),
        }
    }
}

impl std::error::Error for DeviceError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            DeviceError::Device(e) => Some(e),
            _ => None,
        }
    }
}

/// The middleware the flags ask for: `--faults` outermost, so that a
/// `--pcap` tap under it records what goes on the wire (as `tc netem`
/// before tcpdump would). `None` when neither is asked for.
pub(crate) fn middleware(
    pcap: Option<&Path>,
    faults: Option<&str>,
) -> Result<Option<roce_verbs::Wrap>, DeviceError> {
    if pcap.is_none() && faults.is_none() {
        return Ok(None);
    }
    let faults = faults.map(parse_faults).transpose()?;
    let pcap = pcap.map(Path::to_path_buf);
    Ok(Some(Box::new(
        move |mut b: Box<dyn roce_io::Backend + Send>| {
            if let Some(path) = &pcap {
                // Datagrams are recorded with synthetic Ethernet headers (the
                // backend's view: what it sent and what it received).
                let tap = roce_io::PcapTap::create(b, path)
                    .map_err(|e| format!("cannot create {}: {e}", path.display()))?
                    .with_time_offset(unix_nanos());
                b = Box::new(tap);
            }
            if let Some(f) = faults {
                b = Box::new(roce_io::FaultInjector::new(b, f));
            }
            Ok(b)
        },
    )))
}

/// Wall-clock nanoseconds, for pcap timestamps.
fn unix_nanos() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// Checks a `--faults` specification (kept as text: the flags stay small).
pub(crate) fn check_faults(spec: &str) -> Result<String, DeviceError> {
    parse_faults(spec).map(|_| spec.to_string())
}

/// What a `--faults` specification with loss does to a reliable
/// connection's throughput, said before the run: every lost packet makes
/// go-back-N resend what followed it, and a lost last packet of a burst
/// waits for the retransmission timer. `None` without loss.
pub(crate) fn loss_warning(spec: &str) -> Option<String> {
    let (_, loss) = spec
        .split(',')
        .filter_map(|i| i.split_once('='))
        .find(|(k, v)| {
            *k == "loss"
                && roce_io::FaultConfig::parse(&format!("loss={v}"), 0).is_ok_and(|c| c.loss > 0.0)
        })?;
    Some(format!(
        "--faults loss={loss}: each lost packet makes go-back-N resend what followed it, and a lost \
         last packet waits for the retransmission timer (268 ms; 67 ms with --perftest): expect a few MB/s, not line rate \
         (64 KiB messages on loopback: 30 to 60 MB/s at 1% loss, 2 to 4 MB/s at 5%); progress \
         is shown while it runs"
    ))
}

/// Parses a `--faults` specification.
fn parse_faults(spec: &str) -> Result<roce_io::FaultConfig, DeviceError> {
    roce_io::FaultConfig::parse(spec, 0x0fa1_7000 ^ u64::from(std::process::id()))
        .map_err(DeviceError::Faults)
}

/// Whether this process shares its addresses with the other processes
/// of its user on this host (`ROCE_SHM`, on unless `0`, as in the drop-in
/// library; docs/host.md): then a client on the server's host opens on
/// the server's address, as two processes share a NIC's port. A bad
/// value counts as on here; the open reports it.
pub(crate) fn sharing() -> bool {
    shm_setting().unwrap_or(true)
}

/// `ROCE_SHM`, read as the drop-in library reads it (docs/shm.md): unset,
/// empty or `1` turn the same-host path on, `0` off; anything else is an
/// error naming the value.
fn shm_setting() -> Result<bool, DeviceError> {
    match std::env::var("ROCE_SHM").ok().as_deref().map(str::trim) {
        None | Some("") | Some("1") => Ok(true),
        Some("0") => Ok(false),
        Some(other) => Err(DeviceError::Sharing(other.to_string())),
    }
}

/// A client's RoCE address when it was given none (no `--bind`, no GID
/// index) and would use `local`, the kernel's source address towards
/// `server`, with `ROCE_SHM=0` (otherwise it shares the address:
/// [`sharing`]): each process then holds its address alone, so when both
/// ends are on this host's IPv4 loopback, the server's address is the
/// server's (it binds it once this client connects), and a client that
/// would use it, or finds its UDP `port` taken by another stack, takes a
/// free address of 127.0.0.0/8 instead. `None`: keep `local`. With the
/// address comes the one line that says so, for stderr once the client
/// has reached its server (a client that reaches nobody has only its
/// error to say). The side that finds its address taken moves: the
/// server keeps the address the client dials.
pub(crate) fn loopback_client_local(
    tool: &str,
    server: IpAddr,
    local: IpAddr,
    port: u16,
) -> Result<Option<(IpAddr, String)>, DeviceError> {
    if sharing() {
        return Ok(None);
    }
    let (IpAddr::V4(local4), server) = (local.to_canonical(), server.to_canonical()) else {
        return Ok(None);
    };
    if !local4.is_loopback() {
        return Ok(None);
    }
    let servers = local.to_canonical() == server;
    if !servers && roce_verbs::loopback::udp_port_free(local, port) {
        return Ok(None);
    }
    let mut avoid = vec![local4];
    if let IpAddr::V4(s) = server {
        avoid.push(s);
    }
    let Some(a) =
        roce_verbs::loopback::free_loopback_v4_avoiding(port, Ipv4Addr::new(127, 0, 0, 2), &avoid)
    else {
        return Err(DeviceError::NoFreeLoopback { port });
    };
    let note = if servers {
        format!("roce {tool}: {local}:{port} is the server's (both ends on this host); using {a}")
    } else {
        format!("roce {tool}: {local}:{port} is taken; using {a} (another RoCE stack on this host)")
    };
    Ok(Some((IpAddr::V4(a), note)))
}

/// A server's RoCE address when it was given none and would use `local`
/// (the address its client dialled, or entry `index` of the GID table
/// when given one), with `ROCE_SHM=0` (otherwise `local`, which it
/// shares: [`sharing`]): on this host's IPv4 loopback, a free address of
/// 127.0.0.0/8 (never the client's, `peer`) when the client uses `local`
/// too (both ends on this host, the client given that address or GID
/// index) or, with no index, when another stack holds its UDP `port`.
/// The move is said in one line on stderr unless `quiet`; the client
/// learns the address in the exchange. Otherwise, and when no address is
/// free, `local` (whose open then names the busy port).
pub(crate) fn loopback_server_local(
    tool: &str,
    local: IpAddr,
    peer: Option<IpAddr>,
    port: u16,
    quiet: bool,
    index: Option<usize>,
) -> IpAddr {
    let IpAddr::V4(local4) = local.to_canonical() else {
        return local;
    };
    if !local4.is_loopback() || sharing() {
        return local;
    }
    let peer4 = match peer.map(|p| p.to_canonical()) {
        Some(IpAddr::V4(p)) => Some(p),
        _ => None,
    };
    let shared = peer4 == Some(local4);
    if !shared && (index.is_some() || roce_verbs::loopback::udp_port_free(local, port)) {
        return local;
    }
    let mut avoid = vec![local4];
    avoid.extend(peer4);
    match roce_verbs::loopback::free_loopback_v4_avoiding(port, Ipv4Addr::new(127, 0, 0, 2), &avoid)
    {
        Some(a) => {
            if !quiet {
                let line = match (shared, index) {
                    (true, Some(x)) => format!(
                        "GID {x} is {local}, which the client uses too (both ends on this host); using {a}"
                    ),
                    (true, None) => {
                        format!("the client uses {local} too (both ends on this host); using {a}")
                    }
                    (false, _) => format!(
                        "{local}:{port} is taken; using {a} (another RoCE stack on this host)"
                    ),
                };
                eprintln!("roce {tool}: {line}");
            }
            IpAddr::V4(a)
        }
        None => local,
    }
}

/// Most loopback addresses [`open_moving`] tries after the first.
const MOVES: u32 = 64;

/// Opens a context with `open` on `local`, or, when this side chose its
/// address itself (`moves`: no `--bind`, no GID index) on the IPv4
/// loopback and `taken` says the UDP `port` is held there by a stack
/// that does not share it (a kernel rxe device, a process run with
/// `ROCE_SHM=0`, another user's; or, with `ROCE_SHM=0`, anyone), on the
/// next address of 127.0.0.0/8 (never one in `avoid`: the peer's) where
/// the open succeeds, as the drop-in library does. The bind is the
/// probe: pairs started at once, which may have picked the same free
/// address, each end up with one of their own. Returns what `open`
/// returned and the address it holds; a move is said on stderr unless
/// `quiet`.
pub(crate) fn open_moving<T, E>(
    tool: &str,
    (local, port): (IpAddr, u16),
    moves: bool,
    avoid: &[IpAddr],
    quiet: bool,
    mut open: impl FnMut(IpAddr) -> Result<T, E>,
    taken: impl Fn(&E) -> bool,
) -> Result<(T, IpAddr), E> {
    let first = match local.to_canonical() {
        IpAddr::V4(a) if moves && a.is_loopback() => a,
        _ => return open(local).map(|t| (t, local)),
    };
    let mut at = first;
    let mut tries = 0;
    loop {
        match open(IpAddr::V4(at)) {
            Ok(t) => {
                if at != first && !quiet {
                    eprintln!(
                        "roce {tool}: {first}:{port} is taken (by a RoCE stack that does not share it); using {at}"
                    );
                }
                return Ok((t, IpAddr::V4(at)));
            }
            Err(e) if tries < MOVES && taken(&e) => {
                tries += 1;
                let next = (u32::from(at)..=0x7fff_fffe)
                    .skip(1)
                    .map(Ipv4Addr::from)
                    .find(|a| !avoid.iter().any(|v| v.to_canonical() == IpAddr::V4(*a)));
                match next {
                    Some(n) => at = n,
                    None => return Err(e),
                }
            }
            Err(e) => return Err(e),
        }
    }
}

/// How the tools open a context on `local`: the CPU's code choices
/// probed, the RoCE port `port` both ways, the same-host path as
/// `ROCE_SHM` says (on unless `0`, as in the drop-in library; docs/shm.md),
/// and ICRCs that cannot be verified counted, not dropped: the peer may
/// be Linux (rxe), whose IPv4 identification, which the ICRC covers, a
/// UDP socket never sees (docs/security.md), as the drop-in library does.
pub(crate) fn tool_options(
    kind: roce_verbs::BackendKind,
    local: IpAddr,
    port: u16,
) -> Result<roce_verbs::OpenOptions, DeviceError> {
    let shm = shm_setting()?;
    Ok(roce_verbs::OpenOptions::new(kind, local)
        .cpu(roce_io::CpuTuning::detect())
        .roce_port(port, port)
        .icrc_check(roce_verbs::IcrcCheck::Count)
        .shm(shm))
}

/// A GID index (`perf -x`, `pingpong -g`) checked at start-up, as the
/// rdma-core tools do, not once a peer connects: against the table of
/// the device `dev` names or that holds `local` (`--bind`), or, when the
/// address is not known yet (a server listening on every address),
/// against the largest table of this host's devices, since no connection
/// could make a larger index valid.
pub(crate) fn check_gid_index(
    x: usize,
    local: Option<IpAddr>,
    dev: Option<&str>,
) -> Result<(), DeviceError> {
    let device = match (dev, local) {
        (Some(d), _) => Some(roce_verbs::Device::by_name(d).map_err(DeviceError::Device)?),
        (None, Some(l)) => roce_verbs::OpenOptions::new(roce_verbs::BackendKind::Udp, l)
            .device()
            .ok()
            .flatten(),
        (None, None) => None,
    };
    if let Some(d) = device {
        return d.gid(x).map(|_| ()).map_err(DeviceError::Device);
    }
    let devs = roce_verbs::Device::list().map_err(DeviceError::Device)?;
    let most = devs.iter().map(|d| d.gids().len()).max().unwrap_or(0);
    if x < most {
        return Ok(());
    }
    Err(DeviceError::GidIndex { index: x, most })
}

/// An address as a GID (an IPv4 one as `::ffff:a.b.c.d`).
pub(crate) fn gid_text(a: IpAddr) -> String {
    match a.to_canonical() {
        IpAddr::V4(v4) => v4.to_ipv6_mapped().to_string(),
        IpAddr::V6(v6) => v6.to_string(),
    }
}

fn family(a: IpAddr) -> &'static str {
    if a.to_canonical().is_ipv4() {
        "IPv4"
    } else {
        "IPv6"
    }
}

/// This side's GID and the peer's, as the two ends of a connection.
pub(crate) struct GidPair<'a> {
    /// "the client" or "the server".
    pub(crate) me: &'a str,
    /// This side's GID (its RoCE address).
    pub(crate) local: IpAddr,
    /// The GID index this side was given, if any.
    pub(crate) index: Option<usize>,
    /// The peer's GID.
    pub(crate) remote: IpAddr,
    /// The tool's GID index flag (`-x`, `-g`).
    pub(crate) flag: &'a str,
    /// The device this side's flags name (`--dev`), if any.
    pub(crate) dev: Option<&'a str>,
}

/// RoCE v2 carries a packet in the IP family of its GIDs: an IPv6 GID
/// cannot reach an IPv4 one (the QP fails on its first send with
/// LOC_QP_OP_ERR). The error for two GIDs of different families, naming
/// both, and an index of the right family when this side chose one.
pub(crate) fn family_mismatch(g: &GidPair<'_>) -> Option<String> {
    if g.local.to_canonical().is_ipv4() == g.remote.to_canonical().is_ipv4() {
        return None;
    }
    let (me, flag) = (g.me, g.flag);
    let who = if me == "the client" {
        "the server"
    } else {
        "the client"
    };
    let (local, want) = (gid_text(g.local), family(g.remote));
    let mine = match g.index {
        Some(x) => format!("{me}'s GID (index {x}) is {local} ({})", family(g.local)),
        None => format!("{me}'s GID is {local} ({})", family(g.local)),
    };
    let fix = match g.index {
        Some(_) => roce_verbs::OpenOptions::new(roce_verbs::BackendKind::Udp, g.local)
            .interface(g.dev)
            .device()
            .ok()
            .flatten()
            .and_then(|d| {
                let gids = d.gids();
                let k = gids.iter().position(|a| family(*a) == want)?;
                Some(format!(
                    "use {flag} {k} on {me} (GID[{k}] of {} is {})",
                    d.name(),
                    gid_text(gids[k])
                ))
            })
            .unwrap_or(format!(
                "give {me} a {flag} with an {want} GID (roce devinfo lists them)"
            )),
        None => format!(
            "give {who} a GID index with an {} GID, or {me} a {flag} with an {want} one (roce devinfo lists them)",
            family(g.local)
        ),
    };
    Some(format!(
        "{mine} but {who}'s is {} ({want}): both ends of a RoCE v2 connection need the same IP family; {fix}",
        gid_text(g.remote)
    ))
}

/// The peer's QPs are where this side sends: unless this side was given a
/// GID index (`gid_index`; its flag, `-x` or `-g`, is `flag`), they must
/// be at the peer's own address on the control connection (`peer`), or a
/// stranger's exchange could aim this side's traffic at a third host
/// (docs/security.md §2). A peer reached on a loopback address may put its
/// QPs on another loopback address: a side that chose its loopback address
/// itself moves to a free one when another stack holds it
/// ([`loopback_server_local`]). `remote` is (QPN, address) per QP.
pub(crate) fn check_peer_qps(
    gid_index: bool,
    mut remote: impl Iterator<Item = (u32, IpAddr)>,
    peer: Option<IpAddr>,
    flag: &str,
) -> Result<(), DeviceError> {
    let Some(peer) = peer.filter(|_| !gid_index) else {
        return Ok(());
    };
    let loopback = roce_verbs::loopback::is_loopback;
    let ok = |a: IpAddr| a.to_canonical() == peer.to_canonical() || (loopback(peer) && loopback(a));
    match remote.find(|&(_, a)| !ok(a)) {
        None => Ok(()),
        Some((qpn, addr)) => Err(DeviceError::PeerQpElsewhere {
            qpn,
            addr,
            peer,
            flag: flag.to_string(),
        }),
    }
}
