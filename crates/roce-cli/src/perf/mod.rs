//! `roce perf`: perftest-style bandwidth and latency tests between two
//! `roce` processes (or two contexts of one process with `--loopback`).
//!
//! Roles follow perftest: `roce perf write-bw` waits as the server,
//! `roce perf write-bw SERVER` connects as the client. The client decides
//! the parameters and sends them to the server over the TCP control
//! connection ([`control`]); both sides print the result table. Every run
//! verifies the transferred data unless `--no-verify`.

pub(crate) mod backend;
mod bw;
mod control;
mod lat;
pub(crate) mod messages;
mod perftest;
mod perftest_cm;
mod perftest_peer;
mod perftest_session;
mod perftest_traffic;
pub(crate) mod perftest_wire;
mod progress;
mod report;
mod setup;

use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};

use crate::stop::Stop;
use control::Control;
pub(crate) use messages::{Params, Test, MAX_ITERS};

/// How a run is cut short: by Ctrl-C here (the [`Stop`] the command was
/// given) or by the peer, and whether the session is still being set
/// up. Clones share it; both sides of `--loopback` get the same one, as
/// they share the process's Ctrl-C.
#[derive(Clone, Debug)]
pub(crate) struct Interrupts {
    /// Requested by Ctrl-C: loops stop and report what they measured.
    here: Stop,
    /// Set when the peer says it was interrupted (a `stop` message): this
    /// side's loops end as for Ctrl-C, and it reports what it measured.
    peer: Arc<AtomicBool>,
    /// Cleared once a session is connected: from then on Ctrl-C cuts the
    /// run short and the sides still exchange their reports, so waits on
    /// the peer no longer end at Ctrl-C.
    setting_up: Arc<AtomicBool>,
    /// The control connections open, told at Ctrl-C that this side stops.
    peers: control::Peers,
}

impl Interrupts {
    /// The run's state, cut short by `stop`: at its request every control
    /// connection's peer is told ([`control::Peers::announce_stop`]).
    pub(crate) fn new(stop: &Stop) -> Interrupts {
        let peers = control::Peers::default();
        let announce = peers.clone();
        stop.on_request(move || announce.announce_stop());
        Interrupts {
            here: stop.clone(),
            peer: Arc::new(AtomicBool::new(false)),
            setting_up: Arc::new(AtomicBool::new(true)),
            peers,
        }
    }

    /// Whether Ctrl-C was pressed here.
    pub(crate) fn here(&self) -> bool {
        self.here.requested()
    }

    /// Whether the peer said it was interrupted.
    pub(crate) fn by_peer(&self) -> bool {
        self.peer.load(Ordering::SeqCst)
    }

    /// The peer said it was interrupted (its `stop` message).
    pub(crate) fn peer_stopped(&self) {
        self.peer.store(true, Ordering::SeqCst);
    }

    /// The session is connected: see [`Interrupts::waits_end_at_stop`].
    pub(crate) fn set_up(&self) {
        self.setting_up.store(false, Ordering::SeqCst);
    }

    /// Whether a wait on the peer should end at Ctrl-C (until the session
    /// is connected; afterwards the sides still exchange their reports).
    pub(crate) fn waits_end_at_stop(&self) -> bool {
        self.setting_up.load(Ordering::SeqCst)
    }

    /// Whether the run is being cut short, here or by the peer.
    pub(crate) fn stopping(&self) -> bool {
        self.here() || self.by_peer()
    }
}

impl clap::ValueEnum for Test {
    fn value_variants<'a>() -> &'a [Self] {
        &Test::ALL
    }

    fn to_possible_value(&self) -> Option<clap::builder::PossibleValue> {
        let help = match self {
            Test::WriteBw => "RDMA WRITE bandwidth (ib_write_bw)",
            Test::ReadBw => "RDMA READ bandwidth (ib_read_bw)",
            Test::SendBw => "SEND bandwidth (ib_send_bw)",
            Test::AtomicBw => "FETCH_ADD bandwidth (ib_atomic_bw)",
            Test::WriteLat => "RDMA WRITE latency (ib_write_lat)",
            Test::ReadLat => "RDMA READ latency (ib_read_lat)",
            Test::SendLat => "SEND latency (ib_send_lat)",
            Test::AtomicLat => "FETCH_ADD latency (ib_atomic_lat)",
        };
        Some(clap::builder::PossibleValue::new(self.name()).help(help))
    }
}

impl Test {
    /// The perftest tool of this test (`ib_write_bw`).
    pub(crate) fn perftest_tool(self) -> String {
        format!("ib_{}", self.name().replace('-', "_"))
    }

    /// perftest's title line.
    pub(crate) fn title(self) -> &'static str {
        match self {
            Test::WriteBw => "RDMA_Write BW Test",
            Test::ReadBw => "RDMA_Read BW Test",
            Test::SendBw => "Send BW Test",
            Test::AtomicBw => "Atomic FETCH_AND_ADD BW Test",
            Test::WriteLat => "RDMA_Write Latency Test",
            Test::ReadLat => "RDMA_Read Latency Test",
            Test::SendLat => "Send Latency Test",
            Test::AtomicLat => "Atomic FETCH_AND_ADD Latency Test",
        }
    }
}

/// Congestion control of `--cc`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum CcChoice {
    /// None (data not ECN-capable).
    None,
    /// DCQCN as in the paper (Zhu et al., SIGCOMM 2015).
    Dcqcn,
    /// DCQCN as NVIDIA's mlx5 firmware runs it (rpg_*/dce_tcp_* defaults).
    DcqcnMlx5,
}

/// Packet I/O backend.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum BackendKind {
    /// UDP sockets on port 4791 (unprivileged).
    Udp,
    /// AF_PACKET raw frames (needs CAP_NET_RAW).
    Packet,
    /// The in-memory fabric (with --loopback only; for testing the tool).
    Fabric,
}

/// Options of `roce perf`.
#[derive(clap::Args, Debug, Clone)]
pub(crate) struct PerfArgs {
    /// The test to run.
    #[arg(value_enum)]
    test: Test,
    /// Server to connect to (omit to wait as the server).
    server: Option<String>,
    /// Message size in bytes [default: 65536 for BW tests, 2 for latency; 8 for atomics].
    #[arg(short = 's', long)]
    size: Option<u64>,
    /// Iterations per size [default: 5000 for BW, 1000 for latency].
    #[arg(short = 'n', long = "iters")]
    iters: Option<u64>,
    /// Run for this many seconds instead of a number of iterations.
    #[arg(short = 'D', long)]
    duration: Option<f64>,
    /// Number of queue pairs (BW tests).
    #[arg(short = 'q', long = "qp", default_value_t = 1)]
    qps: u32,
    /// Work requests in flight per QP.
    #[arg(short = 't', long = "tx-depth")]
    tx_depth: Option<u32>,
    /// Path MTU (256, 512, 1024, 2048, 4096).
    #[arg(short = 'm', long, default_value_t = 4096)]
    mtu: u32,
    /// Run every size from 2 bytes to 8 MiB (powers of two).
    #[arg(short = 'a', long = "all")]
    all: bool,
    /// Both sides send at once (BW tests).
    #[arg(short = 'b', long = "bidirectional")]
    bidir: bool,
    /// Local GID index to use: the RoCE address is entry N of the GID
    /// table `roce devinfo` prints for the interface (default: the address
    /// of the control connection).
    #[arg(short = 'x', long = "gid-index")]
    gid_index: Option<u8>,
    /// TCP port of the control connection.
    #[arg(short = 'p', long, default_value_t = 18515)]
    port: u16,
    /// Report bandwidth in Gb/sec instead of MB/sec.
    #[arg(long = "report_gbits", alias = "report-gbits")]
    gbits: bool,
    /// perftest's `-F` (do not fail on CPU frequency warnings): accepted;
    /// this tool measures with a monotonic clock, not the cycle counter.
    #[arg(short = 'F', long = "CPU-freq")]
    #[allow(dead_code)]
    cpu_freq: bool,
    /// Connection type, as perftest's `-c`: only RC (the default) is
    /// implemented.
    #[arg(
        short = 'c',
        long = "connection",
        value_name = "TYPE",
        default_value = "RC"
    )]
    connection: String,
    /// Port of the device, as perftest's `-i`: a RoCE interface has one, 1.
    #[arg(short = 'i', long = "ib-port", default_value_t = 1)]
    ib_port: u8,
    /// Packet I/O backend.
    #[arg(long, value_enum, default_value_t = BackendKind::Udp)]
    backend: BackendKind,
    /// Network interface of the packet backend (default: the one that holds
    /// the local address); the UDP backend reads its MTU.
    #[arg(short = 'd', long = "ib-dev", alias = "dev", value_name = "IFACE")]
    dev: Option<String>,
    /// Tag frames with this 802.1Q VLAN id (packet backend; 0 = priority
    /// tag only), PCP from the DSCP.
    #[arg(long, value_name = "VID", value_parser = clap::value_parser!(u16).range(0..4095))]
    vlan: Option<u16>,
    /// Record this side's RoCE datagrams (sent and received, as the
    /// backend sees them, with synthetic Ethernet headers) to a pcap file.
    #[arg(long, value_name = "FILE")]
    pcap: Option<std::path::PathBuf>,
    /// Inject faults into the datagrams this side sends (like `tc netem`,
    /// seeded and reproducible): comma-separated `loss=P`, `duplicate=P`,
    /// `reorder=P`, `corrupt=P`, `ce=P` (P as 0.02 or 2%), `delay=TIME`,
    /// `jitter=TIME` (ns, us, ms), `seed=N`.
    #[arg(long, value_name = "SPEC", value_parser = crate::device::check_faults)]
    faults: Option<String>,
    /// Run the server and the client in this process, both on 127.0.0.1
    /// (two contexts of one device; with ROCE_SHM=0 the client takes a
    /// free loopback address); in latency tests each side on a CPU of its
    /// own when the process may use two or more.
    #[arg(long)]
    loopback: bool,
    /// Speak perftest 4.5's out-of-band exchange (Debian's perftest 4.5
    /// package, which reports version 6.06) instead of this tool's own, to
    /// run against any of its eight tools: ib_{write,read,send,atomic}_bw
    /// and ib_{write,read,send,atomic}_lat. A server without it recognises
    /// a perftest client by itself; the client needs it.
    #[arg(long)]
    perftest: bool,
    /// With --perftest: perftest's rdma_cm mode (`-R`): the control
    /// channel and the data QP are RDMA CM connections, no TCP.
    #[arg(short = 'R', long = "rdma-cm", requires = "perftest")]
    rdma_cm: bool,
    /// Local address to use (default: the address that reaches the peer);
    /// a server listens on it only (default: the control port on every
    /// IPv4 address, as perftest, and RoCE on the address the client
    /// reached).
    #[arg(long)]
    bind: Option<IpAddr>,
    /// UDP port of the RoCE traffic (4791 is the standard; the peer must match).
    #[arg(long, default_value_t = 4791, value_parser = clap::value_parser!(u16).range(1..))]
    roce_port: u16,
    /// Congestion control: ECN-capable data, CNPs on CE, and the DCQCN
    /// reaction point (the paper's version or NVIDIA's mlx5 variant).
    #[arg(long, value_enum, default_value_t = CcChoice::None)]
    pub(crate) cc: CcChoice,
    /// Line rate DCQCN starts from and recovers to, in Gbit/s.
    #[arg(long = "link-gbps", default_value_t = 100.0)]
    pub(crate) link_gbps: f64,
    /// Skip data verification.
    #[arg(long)]
    no_verify: bool,
    /// For tests of the verification itself: expect the peer's data to
    /// be a pattern salted with this value, so that correct data fails
    /// the check.
    #[arg(long, hide = true, default_value_t = 0)]
    pub(crate) verify_salt: u64,
    /// Print results as JSON.
    #[arg(long)]
    json: bool,
    /// Seconds between the progress lines printed when stderr is not a
    /// terminal (for the tests of those lines).
    #[arg(long, hide = true, default_value_t = 5.0)]
    progress_every: f64,
    /// The line saying that this client took a free loopback address
    /// (`client_on_loopback`, with `ROCE_SHM=0`), printed once it
    /// reaches its server.
    #[arg(skip)]
    pub(crate) moved_note: Option<String>,
    /// This side chose its loopback address itself (`client_on_loopback`):
    /// it moves on to the next free one if another pair takes it first.
    #[arg(skip)]
    pub(crate) local_moves: bool,
    /// A server given `--bind` holds its RoCE address (the UDP port on
    /// it) from its start with this socket, until its device opens there
    /// ([`backend::hold_address`]).
    #[arg(skip)]
    pub(crate) held: Option<backend::Held>,
}

impl Params {
    fn from_args(a: &PerfArgs) -> Result<Params, String> {
        let t = a.test;
        if !matches!(a.mtu, 256 | 512 | 1024 | 2048 | 4096) {
            return Err(format!(
                "MTU {} is not one of 256, 512, 1024, 2048, 4096",
                a.mtu
            ));
        }
        if a.qps == 0 || a.qps > 256 {
            return Err("the number of QPs must be between 1 and 256".into());
        }
        if !t.is_bw() && a.qps > 1 {
            return Err("latency tests use one QP".into());
        }
        if !t.is_bw() && a.bidir {
            return Err("-b applies to bandwidth tests only".into());
        }
        if let Some(d) = a.duration {
            if !(d > 0.0 && d <= 86_400.0) {
                return Err("the duration must be between 0 and 86400 seconds".into());
            }
            if a.all {
                return Err("-D and -a cannot be combined".into());
            }
        }
        let sizes = if t.is_atomic() {
            if a.size.is_some_and(|s| s != 8) || a.all {
                return Err("atomic tests move 8 bytes".into());
            }
            vec![8]
        } else if a.all {
            (1..=23).map(|k| 1u64 << k).collect()
        } else {
            let s = a.size.unwrap_or(if t.is_bw() { 65536 } else { 2 });
            if s == 0 || s > (1 << 30) {
                return Err("the size must be between 1 byte and 1 GiB".into());
            }
            vec![s]
        };
        let iters = a.iters.unwrap_or(if t.is_bw() { 5000 } else { 1000 });
        if iters == 0 || iters > MAX_ITERS {
            return Err(format!(
                "the number of iterations (-n) must be between 1 and {MAX_ITERS}"
            ));
        }
        let tx_depth = a.tx_depth.unwrap_or(if t.is_bw() { 128 } else { 1 });
        if tx_depth == 0 || tx_depth > 4096 {
            return Err("the TX depth must be between 1 and 4096".into());
        }
        let p = Params {
            test: t,
            sizes,
            iters,
            duration: a.duration,
            qps: a.qps,
            tx_depth,
            mtu: a.mtu,
            bidir: a.bidir,
            verify: !a.no_verify,
            seed: 0x5eed_0000 ^ std::process::id() as u64,
        };
        messages::check_memory(&p)?;
        Ok(p)
    }
}

/// Flags every mode shares, and combinations no mode takes.
fn check_modes(args: &PerfArgs) -> Result<(), String> {
    if args.duration.is_some() && args.iters.is_some() {
        return Err(
            "-n and -D cannot be combined: -D runs for a time, -n for a number of iterations (give one)"
                .into(),
        );
    }
    if !args.connection.eq_ignore_ascii_case("RC") {
        return Err(format!(
            "connection type {}: roce perf runs RC only (drop -c, or use roce pingpong --transport uc|ud)",
            args.connection
        ));
    }
    if args.ib_port != 1 {
        return Err(format!(
            "device port {}: a RoCE interface has one port, 1 (drop -i)",
            args.ib_port
        ));
    }
    if args.vlan.is_some() && args.backend != BackendKind::Packet {
        return Err("--vlan tags raw frames: it needs --backend packet".into());
    }
    if args.perftest && args.loopback {
        return Err(
            "--perftest talks to another program's endpoint; it cannot be combined with --loopback"
                .into(),
        );
    }
    Ok(())
}

/// Runs `roce perf`; returns the exit status. `stop` (Ctrl-C) cuts the
/// run short: both sides report what they measured.
pub(crate) fn run(args: &PerfArgs, stop: &Stop) -> i32 {
    let int = Interrupts::new(stop);
    let moved;
    let args = match client_on_loopback(args) {
        Ok(Some(a)) => {
            moved = a;
            &moved
        }
        Ok(None) => args,
        Err(e) => return crate::fail("perf", args.json, &e, 1),
    };
    let checked = check_modes(args).and_then(|()| check_gid_index(args));
    // What loss costs, said once the flags are known to be good.
    if checked.is_ok() && !args.json {
        if let Some(w) = args.faults.as_deref().and_then(crate::device::loss_warning) {
            eprintln!("roce perf: {w}");
        }
    }
    let held;
    let args = match checked.as_ref().map(|()| backend::hold_address(args)) {
        Ok(Ok(Some(h))) => {
            held = PerfArgs {
                held: Some(h),
                ..args.clone()
            };
            &held
        }
        Ok(Ok(None)) | Err(_) => args,
        Ok(Err(e)) => return crate::fail("perf", args.json, &e, 1),
    };
    let res = if let Err(e) = checked {
        Err(e)
    } else if args.perftest && args.rdma_cm {
        perftest_cm::run(args)
    } else if args.perftest {
        perftest::run(args, stop)
    } else if args.loopback {
        run_loopback(args, &int)
    } else if args.server.is_some() {
        run_client(args, None, &int).map(|_| ())
    } else {
        run_server(args, None, &int)
    };
    match res {
        Ok(()) if int.here() => 130,
        Ok(()) => 0,
        Err(e) => {
            // Cut short by Ctrl-C before there was anything to report.
            let code = if int.here() { 130 } else { 1 };
            crate::fail("perf", args.json, &e, code)
        }
    }
}

/// A client given no local address (no `--bind`, no `-x`) whose server
/// is on this host's loopback, with `ROCE_SHM=0` (otherwise it shares the
/// server's address): the arguments with the free loopback address it
/// takes instead of the server's as `--bind`, for the control connection
/// and the RoCE traffic alike, so that the server sees the address the
/// QPs use ([`crate::device::loopback_client_local`]).
fn client_on_loopback(args: &PerfArgs) -> Result<Option<PerfArgs>, String> {
    let Some(server) = args.server.as_deref() else {
        return Ok(None);
    };
    if args.loopback || args.bind.is_some() {
        return Ok(None);
    }
    if args.backend != BackendKind::Udp {
        return Ok(None);
    }
    let Ok(addr) = resolve(server, args.port) else {
        // Said by the run itself.
        return Ok(None);
    };
    let Some(route) = crate::rping::route_source(addr.ip()) else {
        return Ok(None);
    };
    // With `-x N` (perftest's habit on both ends of one host), entry N
    // of the GID table, which may be the very address the server holds.
    // A perftest server keeps its address, so the client gives way; a
    // roce perf server gives way itself when the client uses its address
    // (the exchange tells it), so without --perftest the client keeps
    // the GID it was given.
    if args.gid_index.is_some() && !args.perftest {
        return Ok(None);
    }
    let local = match args.gid_index {
        None => route,
        Some(_) => match backend::gid_address(args, route) {
            Ok(g) if g.is_loopback() => g,
            // Not a loopback GID, or a bad index (said by the run).
            _ => return Ok(None),
        },
    };
    let moved = crate::device::loopback_client_local("perf", addr.ip(), local, args.roce_port)?
        .map(|(b, note)| match args.gid_index {
            Some(x) => (
                b,
                format!(
                    "roce perf: GID {x} is {local}, which the server uses too (both ends on this host); using {b}"
                ),
            ),
            None => (b, note),
        });
    // The moved client's address is its GID: the index no longer applies.
    Ok(moved.map(|(b, note)| PerfArgs {
        bind: Some(b),
        gid_index: None,
        moved_note: (!args.json).then_some(note),
        local_moves: true,
        ..args.clone()
    }))
}

/// `-x N` past the GID table is refused at start-up, as perftest does,
/// not once a peer connects ([`crate::device::check_gid_index`]).
fn check_gid_index(args: &PerfArgs) -> Result<(), String> {
    let Some(x) = args.gid_index else {
        return Ok(());
    };
    if args.backend == BackendKind::Fabric || args.loopback {
        return Ok(());
    }
    let local = args.bind.filter(|b| !b.is_unspecified()).or_else(|| {
        let server = args.server.as_deref()?;
        let addr = resolve(server, args.port).ok()?;
        crate::rping::route_source(addr.ip())
    });
    crate::device::check_gid_index(usize::from(x), local, args.dev.as_deref())
}

/// Where the loopback server listens, and the address both sides use
/// (two contexts of one device, as a NIC allows; with `ROCE_SHM=0` the
/// client moves to a free one: [`crate::device::loopback_client_local`]).
const LOOP_SERVER: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 1);
/// The client's address on the in-memory fabric, a wire between two
/// hosts with one address each (the control connection uses it too).
const FABRIC_CLIENT: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 2);

fn run_loopback(args: &PerfArgs, int: &Interrupts) -> Result<(), String> {
    if args.server.is_some() {
        return Err("--loopback runs both sides; do not name a server".into());
    }
    if args.backend == BackendKind::Packet {
        return Err(
            "--loopback runs over the udp or fabric backend; the packet backend needs an Ethernet link (two hosts or namespaces)".into(),
        );
    }
    if args.gid_index.is_some() {
        return Err("--loopback chooses its addresses; -x does not apply".into());
    }
    // Refuse bad parameters before a server thread starts waiting.
    Params::from_args(args)?;
    let listener = TcpListener::bind((LOOP_SERVER, args.port))
        .map_err(|e| format!("cannot listen on {LOOP_SERVER}:{}: {e}", args.port))?;
    let fabric = (args.backend == BackendKind::Fabric).then(roce_io::Fabric::new);
    let mut server_args = args.clone();
    server_args.json = false;
    // The client's side records both directions; one writer per file.
    server_args.pcap = None;
    let fabric2 = fabric.clone();
    let server_int = int.clone();
    // In a latency test each side (and the progress thread its context
    // starts) on a CPU of its own, when there are two: left to the
    // scheduler, both sides could share one CPU for the first ~12 ms of a
    // run, each polling through the other's time slice (see
    // crate::pin). Bandwidth tests are left to the scheduler: pinned,
    // they were no faster here (and slower in the emulated lab guest,
    // though builds there also differ by code placement alone: README).
    let cpus = crate::pin::allowed_cpus().unwrap_or_default();
    let placement = (!args.test.is_bw() && cpus.len() >= 2).then(|| (cpus[0], cpus[1]));
    let server = std::thread::spawn(move || {
        if let Some((_, cpu)) = placement {
            let _ = crate::pin::pin_current_thread(cpu);
        }
        serve(&server_args, listener, fabric2.as_ref(), true, &server_int)
    });
    if let Some((cpu, _)) = placement {
        let _ = crate::pin::pin_current_thread(cpu);
    }
    let mut client_args = args.clone();
    client_args.server = Some(LOOP_SERVER.to_string());
    let lo = IpAddr::V4(LOOP_SERVER);
    match args.backend {
        BackendKind::Fabric => client_args.bind = Some(IpAddr::V4(FABRIC_CLIENT)),
        _ => {
            let moved = crate::device::loopback_client_local("perf", lo, lo, args.roce_port)?;
            if let Some((a, _)) = moved {
                client_args.bind = Some(a);
                client_args.local_moves = true;
            }
        }
    }
    let client = run_client(&client_args, fabric.as_ref(), int);
    if let Err(e) = &client {
        if !server.is_finished() {
            // The server may still wait for a connection that will never
            // come; the process ends with the client's error.
            std::thread::sleep(Duration::from_millis(200));
            if !server.is_finished() {
                return Err(e.clone());
            }
        }
    }
    let server = server
        .join()
        .map_err(|_| "the server thread panicked".to_string())?;
    match (client, server) {
        (Ok(_), Ok(())) => Ok(()),
        (Err(c), Ok(())) => Err(c),
        (Ok(_), Err(s)) => Err(format!("server side: {s}")),
        // The side that failed first usually explains the other.
        (Err(c), Err(s)) if s.starts_with("peer:") => Err(c),
        (Err(c), Err(s)) if c.starts_with("peer:") => Err(format!("server side: {s}")),
        (Err(c), Err(s)) => Err(format!("{c} (server side: {s})")),
    }
}

fn run_server(
    args: &PerfArgs,
    fabric: Option<&roce_io::Fabric>,
    int: &Interrupts,
) -> Result<(), String> {
    if args.backend == BackendKind::Fabric {
        return Err("the fabric backend needs --loopback".into());
    }
    let bind = args.bind.unwrap_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED));
    let listener = TcpListener::bind((bind, args.port))
        .map_err(|e| format!("cannot listen on port {}: {e}", args.port))?;
    if !args.json {
        eprintln!(
            "roce perf: waiting for a client on port {} ({}: roce perf {} HOST, or perftest's {} HOST)",
            args.port,
            args.test.name(),
            args.test.name(),
            args.test.perftest_tool()
        );
    }
    serve(args, listener, fabric, false, int)
}

/// The server's own flags the client's parameters override (the client
/// decides, as in perftest), said rather than silently adopted.
fn adopted_note(args: &PerfArgs, p: &Params) -> Option<String> {
    let mut over = Vec::new();
    let sizes = if p.sizes.len() > 1 {
        "-a".to_string()
    } else {
        format!("-s {}", p.sizes[0])
    };
    if args.size.is_some_and(|s| p.sizes != [s]) || (args.all && p.sizes.len() == 1) {
        over.push((
            sizes,
            if args.all {
                "-a".to_string()
            } else {
                format!("-s {}", args.size.unwrap_or(0))
            },
        ));
    }
    if let Some(n) = args.iters.filter(|&n| n != p.iters || p.duration.is_some()) {
        let theirs = p
            .duration
            .map_or(format!("-n {}", p.iters), |d| format!("-D {d}"));
        over.push((theirs, format!("-n {n}")));
    }
    if let Some(d) = args.duration.filter(|&d| Some(d) != p.duration) {
        over.push((format!("-n {}", p.iters), format!("-D {d}")));
    }
    if args.qps != p.qps && args.qps != 1 {
        over.push((format!("-q {}", p.qps), format!("-q {}", args.qps)));
    }
    if let Some(t) = args.tx_depth.filter(|&t| t != p.tx_depth) {
        over.push((format!("-t {}", p.tx_depth), format!("-t {t}")));
    }
    if args.bidir != p.bidir && args.bidir {
        over.push(("no -b".into(), "-b".into()));
    }
    if over.is_empty() {
        return None;
    }
    let (theirs, mine): (Vec<String>, Vec<String>) = over.into_iter().unzip();
    Some(format!(
        "the client's parameters apply, as in perftest: {} (this server's {} ignored)",
        theirs.join(" "),
        mine.join(" ")
    ))
}

/// Waits for a client, ending at `stop` (Ctrl-C: "interrupted before a
/// client came").
pub(crate) fn accept_interruptibly(
    listener: &TcpListener,
    stop: &Stop,
) -> Result<TcpStream, String> {
    listener
        .set_nonblocking(true)
        .map_err(|e| format!("listen: {e}"))?;
    loop {
        match listener.accept() {
            Ok((stream, _)) => {
                stream
                    .set_nonblocking(false)
                    .map_err(|e| format!("accept: {e}"))?;
                return Ok(stream);
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                if stop.requested() {
                    return Err("interrupted before a client came".into());
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => return Err(format!("accept: {e}")),
        }
    }
}

/// How long a connected peer may stay silent before its first message.
pub(crate) const FIRST_MESSAGE_WAIT: Duration = Duration::from_secs(10);

/// The first byte a client sends, without consuming it (waiting at most
/// [`FIRST_MESSAGE_WAIT`]): `{` opens roce perf's JSON hello, an ASCII
/// digit perftest's version string.
pub(crate) fn first_byte(stream: &TcpStream) -> Result<u8, String> {
    let _ = stream.set_read_timeout(Some(FIRST_MESSAGE_WAIT));
    let mut b = [0u8; 1];
    let r = stream.peek(&mut b);
    let _ = stream.set_read_timeout(None);
    match r {
        Ok(1) => Ok(b[0]),
        Ok(_) => Err("the client closed the connection without a word".into()),
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            ) =>
        {
            Err(format!(
                "the client sent nothing for {} s",
                FIRST_MESSAGE_WAIT.as_secs()
            ))
        }
        Err(e) => Err(format!("control connection: {e}")),
    }
}

fn serve(
    args: &PerfArgs,
    listener: TcpListener,
    fabric: Option<&roce_io::Fabric>,
    quiet: bool,
    int: &Interrupts,
) -> Result<(), String> {
    let stream = accept_interruptibly(&listener, &int.here)?;
    match first_byte(&stream)? {
        b'{' => {}
        b'0'..=b'9' if fabric.is_none() => {
            // perftest's exchange opens with its version string: a
            // perftest client (ib_write_bw, roce perf --perftest).
            if !args.json {
                eprintln!("roce perf: the client speaks perftest's exchange");
            }
            return perftest::run_on(args, stream, false);
        }
        _ => return Err("the client speaks neither roce perf's exchange nor perftest's".into()),
    }
    let mut ctl = Control::new(stream, int).map_err(|e| e.to_string())?;
    let hello = ctl.expect("hello")?;
    let params = match Params::from_json(&hello) {
        Ok(p) if p.test == args.test => p,
        Ok(p) => {
            let msg = format!(
                "the client runs {} but this server runs {}",
                p.test.name(),
                args.test.name()
            );
            ctl.send_error(&msg);
            return Err(msg);
        }
        Err(e) => {
            ctl.send_error(&e);
            return Err(e);
        }
    };
    if !args.json {
        if let Some(note) = adopted_note(args, &params) {
            eprintln!("roce perf: {note}");
        }
    }
    // RoCE traffic between different UDP ports never meets: say so now
    // rather than after the retries run out (RETRY_EXC_ERR).
    if let Some(theirs) = hello.get("roce_port").and_then(Value::as_u64) {
        if theirs != u64::from(args.roce_port) {
            let msg = format!(
                "the client's --roce-port is {theirs}, this server's {}: give both sides the same --roce-port",
                args.roce_port
            );
            ctl.send_error(&msg);
            return Err(msg);
        }
    }
    let local = args
        .bind
        .filter(|b| !b.is_unspecified())
        .or(ctl.local_ip())
        .ok_or("no local address")?;
    let local = match backend::gid_address(args, local) {
        Ok(a) => a,
        Err(e) => {
            ctl.send_error(&e);
            return Err(e);
        }
    };
    // With no address given, a loopback address the client uses too (or,
    // with no GID index, another stack holds) gives way to a free one;
    // the client learns it from the endpoints.
    let local = if args.bind.is_none_or(|b| b.is_unspecified()) && args.backend == BackendKind::Udp
    {
        crate::device::loopback_server_local(
            "perf",
            local,
            ctl.peer_ip(),
            args.roce_port,
            args.json || quiet,
            args.gid_index.map(usize::from),
        )
    } else {
        local
    };
    let r = setup::Session::open(args, &params, local, fabric, &mut ctl, false)
        .and_then(|mut s| run_session(&mut s, &mut ctl));
    match r {
        Ok((results, params, counters)) => {
            if !quiet {
                print_results(args, &params, &results, &counters, int);
            }
            pcap_problem(&counters).map_or(Ok(()), Err)
        }
        Err(e) => {
            ctl.send_error(&e);
            Err(e)
        }
    }
}

/// Runs the session's tests. A failure is reported to the peer before the
/// session is torn down (closing the context can take a while, and the
/// peer would go on sending meanwhile).
fn run_session(
    s: &mut setup::Session,
    ctl: &mut Control,
) -> Result<(Vec<Value>, Params, Value), String> {
    match s.run(ctl) {
        Ok(results) => {
            let mut counters = s.counters_json();
            // perftest's local/remote address lines (print_results).
            let eps = |e: &[control::Endpoint]| e.iter().map(|e| e.to_json()).collect::<Vec<_>>();
            counters["endpoints"] = json!({"local": eps(&s.local), "remote": eps(&s.remote)});
            Ok((results, s.params.clone(), counters))
        }
        Err(e) => {
            ctl.send_error(&e);
            Err(e)
        }
    }
}

fn run_client(
    args: &PerfArgs,
    fabric: Option<&roce_io::Fabric>,
    int: &Interrupts,
) -> Result<Vec<Value>, String> {
    let params = Params::from_args(args)?;
    let server = args.server.as_deref().ok_or("no server")?;
    let addr = resolve(server, args.port)?;
    let stream = connect_tcp(addr, args.bind)?;
    args.say_moved();
    let mut ctl = Control::new(stream, int).map_err(|e| e.to_string())?;
    let mut hello = params.to_json();
    hello["roce_port"] = json!(args.roce_port);
    ctl.send(&hello)?;
    let local = args.bind.or(ctl.local_ip()).ok_or("no local address")?;
    let local = match backend::gid_address(args, local) {
        Ok(a) => a,
        Err(e) => {
            ctl.send_error(&e);
            return Err(e);
        }
    };
    let r = setup::Session::open(args, &params, local, fabric, &mut ctl, true)
        .and_then(|mut s| run_session(&mut s, &mut ctl));
    match r {
        Ok((results, params, counters)) => {
            print_results(args, &params, &results, &counters, int);
            pcap_problem(&counters).map_or(Ok(results), Err)
        }
        Err(e) => {
            ctl.send_error(&e);
            Err(e)
        }
    }
}

fn resolve(server: &str, port: u16) -> Result<SocketAddr, String> {
    use std::net::ToSocketAddrs;
    (server, port)
        .to_socket_addrs()
        .map_err(|e| format!("unknown address '{server}': {e}"))?
        .next()
        .ok_or(format!("unknown address '{server}'"))
}

fn connect_tcp(addr: SocketAddr, bind: Option<IpAddr>) -> Result<TcpStream, String> {
    let domain = socket2::Domain::for_address(addr);
    let sock = socket2::Socket::new(domain, socket2::Type::STREAM, Some(socket2::Protocol::TCP))
        .map_err(|e| format!("socket: {e}"))?;
    if let Some(b) = bind {
        sock.bind(&SocketAddr::new(b, 0).into())
            .map_err(|e| format!("cannot use local address {b}: {e}"))?;
    }
    sock.connect_timeout(&addr.into(), Duration::from_secs(5))
        .map_err(|e| format!("cannot reach {addr}: {e}"))?;
    Ok(sock.into())
}

/// A `--pcap` file that could not be written: the run worked, but the
/// capture asked for is incomplete.
fn pcap_problem(counters: &Value) -> Option<String> {
    let n = counters["backend"]["pcap_errors"].as_u64().unwrap_or(0);
    (n > 0).then(|| {
        format!("the pcap file could not be written ({n} write errors): the capture is incomplete")
    })
}

fn print_results(
    args: &PerfArgs,
    params: &Params,
    results: &[Value],
    counters: &Value,
    int: &Interrupts,
) {
    if args.json {
        let v = json!({"test": params.test.name(), "qps": params.qps, "mtu": params.mtu,
                       "bidirectional": params.bidir, "verified": params.verify,
                       "interrupted": int.here(),
                       "peer_interrupted": int.by_peer(), "results": results,
                       "counters": counters});
        println!("{v}");
        return;
    }
    println!("{}", report::RULE);
    println!("                    {}", params.test.title());
    println!(
        " Number of qps   : {:<10} Transport type : RoCE v2 ({})",
        params.qps,
        args.backend_name()
    );
    println!(
        " Connection type : RC         Mtu            : {}[B]",
        params.mtu
    );
    println!(
        " TX depth        : {:<10} Data verified  : {}",
        params.tx_depth,
        if params.verify { "yes" } else { "no" }
    );
    // perftest's address lines: what a mismatch (GID, QPN) shows in.
    for (what, side) in [(" local address", "local"), (" remote address", "remote")] {
        for e in counters["endpoints"][side].as_array().into_iter().flatten() {
            if let Ok(e) = control::Endpoint::from_json(e) {
                let d = perftest::Dest {
                    lid: 0,
                    out_reads: 1,
                    qpn: e.qpn,
                    psn: e.psn,
                    rkey: e.rkey,
                    vaddr: e.vaddr,
                    gid: perftest::gid_of(e.addr),
                    srqn: 0,
                };
                perftest::print_dest(what, &d, params.test);
            }
        }
    }
    println!("{}", report::RULE);
    if params.test.is_bw() {
        println!("{}", report::bw_header(args.gbits));
    } else {
        println!("{}", report::lat_header());
    }
    for r in results {
        if let Some(row) = r.get("row").and_then(Value::as_str) {
            let row = if args.gbits {
                r.get("row_gbits").and_then(Value::as_str).unwrap_or(row)
            } else {
                row
            };
            println!("{row}");
        }
    }
    println!("{}", report::RULE);
    for r in results {
        if let Some(note) = r.get("note").and_then(Value::as_str) {
            println!("{note}");
        }
    }
    if int.here() {
        println!(" (interrupted: partial results)");
    } else if int.by_peer() {
        println!(" (the peer was interrupted: partial results)");
    }
}

impl PerfArgs {
    /// Says that this client took a free loopback address (once it has
    /// reached its server).
    pub(crate) fn say_moved(&self) {
        if let Some(n) = &self.moved_note {
            eprintln!("{n}");
        }
    }

    fn backend_name(&self) -> &'static str {
        match self.backend {
            BackendKind::Udp => "UDP",
            BackendKind::Packet => "AF_PACKET",
            BackendKind::Fabric => "in-memory fabric",
        }
    }
}
