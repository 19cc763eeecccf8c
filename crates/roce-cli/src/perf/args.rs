//! The arguments of `roce perf`: the clap structs, their validation,
//! and the parameters a client derives from them.

use std::net::{IpAddr, UdpSocket};
use std::sync::{Arc, Mutex};

use super::error::PerfError;
use super::messages::{self, Params, Test, MAX_ITERS};
use super::net::resolve;

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

/// The UDP socket with which a server given `--bind` holds its RoCE
/// address until its device opens there (taken by `hold_address` in
/// backend.rs, which depends on this module, not the other way round).
pub(crate) type Held = Arc<Mutex<Option<UdpSocket>>>;

/// Options of `roce perf`.
#[derive(clap::Args, Debug, Clone)]
pub(crate) struct PerfArgs {
    /// The test to run.
    #[arg(value_enum)]
    pub(crate) test: Test,
    /// Server to connect to (omit to wait as the server).
    pub(crate) server: Option<String>,
    /// Message size in bytes [default: 65536 for BW tests, 2 for latency; 8 for atomics].
    #[arg(short = 's', long)]
    pub(crate) size: Option<u64>,
    /// Iterations per size [default: 5000 for BW, 1000 for latency].
    #[arg(short = 'n', long = "iters")]
    pub(crate) iters: Option<u64>,
    /// Run for this many seconds instead of a number of iterations.
    #[arg(short = 'D', long)]
    pub(crate) duration: Option<f64>,
    /// Number of queue pairs (BW tests).
    #[arg(short = 'q', long = "qp", default_value_t = 1)]
    pub(crate) qps: u32,
    /// Work requests in flight per QP.
    #[arg(short = 't', long = "tx-depth")]
    pub(crate) tx_depth: Option<u32>,
    /// Path MTU (256, 512, 1024, 2048, 4096).
    #[arg(short = 'm', long, default_value_t = 4096)]
    pub(crate) mtu: u32,
    /// Run every size from 2 bytes to 8 MiB (powers of two).
    #[arg(short = 'a', long = "all")]
    pub(crate) all: bool,
    /// Both sides send at once (BW tests).
    #[arg(short = 'b', long = "bidirectional")]
    pub(crate) bidir: bool,
    /// Local GID index to use: the RoCE address is entry N of the GID
    /// table `roce devinfo` prints for the interface (default: the address
    /// of the control connection).
    #[arg(short = 'x', long = "gid-index")]
    pub(crate) gid_index: Option<u8>,
    /// TCP port of the control connection.
    #[arg(short = 'p', long, default_value_t = 18515)]
    pub(crate) port: u16,
    /// Report bandwidth in Gb/sec instead of MB/sec.
    #[arg(long = "report_gbits", alias = "report-gbits")]
    pub(crate) gbits: bool,
    /// perftest's `-F` (do not fail on CPU frequency warnings): accepted;
    /// this tool measures with a monotonic clock, not the cycle counter.
    #[arg(short = 'F', long = "CPU-freq")]
    #[allow(dead_code)]
    pub(crate) cpu_freq: bool,
    /// Connection type, as perftest's `-c`: only RC (the default) is
    /// implemented.
    #[arg(
        short = 'c',
        long = "connection",
        value_name = "TYPE",
        default_value = "RC"
    )]
    pub(crate) connection: String,
    /// Port of the device, as perftest's `-i`: a RoCE interface has one, 1.
    #[arg(short = 'i', long = "ib-port", default_value_t = 1)]
    pub(crate) ib_port: u8,
    /// Packet I/O backend.
    #[arg(long, value_enum, default_value_t = BackendKind::Udp)]
    pub(crate) backend: BackendKind,
    /// Network interface of the packet backend (default: the one that holds
    /// the local address); the UDP backend reads its MTU.
    #[arg(short = 'd', long = "ib-dev", alias = "dev", value_name = "IFACE")]
    pub(crate) dev: Option<String>,
    /// Tag frames with this 802.1Q VLAN id (packet backend; 0 = priority
    /// tag only), PCP from the DSCP.
    #[arg(long, value_name = "VID", value_parser = clap::value_parser!(u16).range(0..4095))]
    pub(crate) vlan: Option<u16>,
    /// Record this side's RoCE datagrams (sent and received, as the
    /// backend sees them, with synthetic Ethernet headers) to a pcap file.
    #[arg(long, value_name = "FILE")]
    pub(crate) pcap: Option<std::path::PathBuf>,
    /// Inject faults into the datagrams this side sends (like `tc netem`,
    /// seeded and reproducible): comma-separated `loss=P`, `duplicate=P`,
    /// `reorder=P`, `corrupt=P`, `ce=P` (P as 0.02 or 2%), `delay=TIME`,
    /// `jitter=TIME` (ns, us, ms), `seed=N`.
    #[arg(long, value_name = "SPEC", value_parser = crate::device::check_faults)]
    pub(crate) faults: Option<String>,
    /// Run the server and the client in this process, both on 127.0.0.1
    /// (two contexts of one device; with ROCE_SHM=0 the client takes a
    /// free loopback address); in latency tests each side on a CPU of its
    /// own when the process may use two or more.
    #[arg(long)]
    pub(crate) loopback: bool,
    /// Speak perftest 4.5's out-of-band exchange (Debian's perftest 4.5
    /// package, which reports version 6.06) instead of this tool's own, to
    /// run against any of its eight tools: ib_{write,read,send,atomic}_bw
    /// and ib_{write,read,send,atomic}_lat. A server without it recognises
    /// a perftest client by itself; the client needs it.
    #[arg(long)]
    pub(crate) perftest: bool,
    /// With --perftest: perftest's rdma_cm mode (`-R`): the control
    /// channel and the data QP are RDMA CM connections, no TCP.
    #[arg(short = 'R', long = "rdma-cm", requires = "perftest")]
    pub(crate) rdma_cm: bool,
    /// Local address to use (default: the address that reaches the peer);
    /// a server listens on it only (default: the control port on every
    /// IPv4 address, as perftest, and RoCE on the address the client
    /// reached).
    #[arg(long)]
    pub(crate) bind: Option<IpAddr>,
    /// UDP port of the RoCE traffic (4791 is the standard; the peer must match).
    #[arg(long, default_value_t = 4791, value_parser = clap::value_parser!(u16).range(1..))]
    pub(crate) roce_port: u16,
    /// Congestion control: ECN-capable data, CNPs on CE, and the DCQCN
    /// reaction point (the paper's version or NVIDIA's mlx5 variant).
    #[arg(long, value_enum, default_value_t = CcChoice::None)]
    pub(crate) cc: CcChoice,
    /// Line rate DCQCN starts from and recovers to, in Gbit/s.
    #[arg(long = "link-gbps", default_value_t = 100.0)]
    pub(crate) link_gbps: f64,
    /// Skip data verification.
    #[arg(long)]
    pub(crate) no_verify: bool,
    /// For tests of the verification itself: expect the peer's data to
    /// be a pattern salted with this value, so that correct data fails
    /// the check.
    #[arg(long, hide = true, default_value_t = 0)]
    pub(crate) verify_salt: u64,
    /// Print results as JSON.
    #[arg(long)]
    pub(crate) json: bool,
    /// Seconds between the progress lines printed when stderr is not a
    /// terminal (for the tests of those lines).
    #[arg(long, hide = true, default_value_t = 5.0)]
    pub(crate) progress_every: f64,
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
    /// ([`Held`]).
    #[arg(skip)]
    pub(crate) held: Option<Held>,
}

impl Params {
    pub(crate) fn from_args(a: &PerfArgs) -> Result<Params, PerfError> {
        let t = a.test;
        if !matches!(a.mtu, 256 | 512 | 1024 | 2048 | 4096) {
            return Err(PerfError::Args(format!(
                "MTU {} is not one of 256, 512, 1024, 2048, 4096",
                a.mtu
            )));
        }
        if a.qps == 0 || a.qps > 256 {
            return Err(PerfError::Args(
                "the number of QPs must be between 1 and 256".into(),
            ));
        }
        if !t.is_bw() && a.qps > 1 {
            return Err(PerfError::Args("latency tests use one QP".into()));
        }
        if !t.is_bw() && a.bidir {
            return Err(PerfError::Args("-b applies to bandwidth tests only".into()));
        }
        if let Some(d) = a.duration {
            if !(d > 0.0 && d <= 86_400.0) {
                return Err(PerfError::Args(
                    "the duration must be between 0 and 86400 seconds".into(),
                ));
            }
            if a.all {
                return Err(PerfError::Args("-D and -a cannot be combined".into()));
            }
        }
        let sizes = if t.is_atomic() {
            if a.size.is_some_and(|s| s != 8) || a.all {
                return Err(PerfError::Args("atomic tests move 8 bytes".into()));
            }
            vec![8]
        } else if a.all {
            (1..=23).map(|k| 1u64 << k).collect()
        } else {
            let s = a.size.unwrap_or(if t.is_bw() { 65536 } else { 2 });
            if s == 0 || s > (1 << 30) {
                return Err(PerfError::Args(
                    "the size must be between 1 byte and 1 GiB".into(),
                ));
            }
            vec![s]
        };
        let iters = a.iters.unwrap_or(if t.is_bw() { 5000 } else { 1000 });
        if iters == 0 || iters > MAX_ITERS {
            return Err(PerfError::Args(format!(
                "the number of iterations (-n) must be between 1 and {MAX_ITERS}"
            )));
        }
        let tx_depth = a.tx_depth.unwrap_or(if t.is_bw() { 128 } else { 1 });
        if tx_depth == 0 || tx_depth > 4096 {
            return Err(PerfError::Args(
                "the TX depth must be between 1 and 4096".into(),
            ));
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
pub(crate) fn check_modes(args: &PerfArgs) -> Result<(), PerfError> {
    if args.duration.is_some() && args.iters.is_some() {
        return Err(PerfError::Args("-n and -D cannot be combined: -D runs for a time, -n for a number of iterations (give one)"
                .into()));
    }
    if !args.connection.eq_ignore_ascii_case("RC") {
        return Err(PerfError::Args(format!(
            "connection type {}: roce perf runs RC only (drop -c, or use roce pingpong --transport uc|ud)",
            args.connection
        )));
    }
    if args.ib_port != 1 {
        return Err(PerfError::Args(format!(
            "device port {}: a RoCE interface has one port, 1 (drop -i)",
            args.ib_port
        )));
    }
    if args.vlan.is_some() && args.backend != BackendKind::Packet {
        return Err(PerfError::Args(
            "--vlan tags raw frames: it needs --backend packet".into(),
        ));
    }
    if args.perftest && args.loopback {
        return Err(PerfError::Args(
            "--perftest talks to another program's endpoint; it cannot be combined with --loopback"
                .into(),
        ));
    }
    Ok(())
}

/// `-x N` past the GID table is refused at start-up, as perftest does,
/// not once a peer connects ([`crate::device::check_gid_index`]).
pub(crate) fn check_gid_index(args: &PerfArgs) -> Result<(), PerfError> {
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
        .map_err(|e| PerfError::Args(e.to_string()))
}

/// The server's own flags the client's parameters override (the client
/// decides, as in perftest), said rather than silently adopted.
pub(crate) fn adopted_note(args: &PerfArgs, p: &Params) -> Option<String> {
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

impl PerfArgs {
    /// Says that this client took a free loopback address (once it has
    /// reached its server).
    pub(crate) fn say_moved(&self) {
        if let Some(n) = &self.moved_note {
            eprintln!("{n}");
        }
    }

    pub(crate) fn backend_name(&self) -> &'static str {
        match self.backend {
            BackendKind::Udp => "UDP",
            BackendKind::Packet => "AF_PACKET",
            BackendKind::Fabric => "in-memory fabric",
        }
    }
}
