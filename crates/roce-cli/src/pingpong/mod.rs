//! `roce pingpong`: rdma-core's `ibv_rc_pingpong`, `ibv_uc_pingpong`,
//! `ibv_ud_pingpong` and `ibv_srq_pingpong` over this stack, speaking their
//! TCP exchange ([`wire`]) so either side can be the rdma-core tool.
//!
//! `roce pingpong [--transport rc|uc|ud|srq] [flags] [SERVER]`: without
//! SERVER it waits as the server. Flags keep the tools' letters and
//! defaults. The exit status is 0 only when every iteration completed (and,
//! with `-c`, every buffer checked out), 1 on a failure at run time, 2 on
//! bad flags (one line on stderr).

mod error;
mod run;
mod traffic;
mod wire;
mod wire_error;

use std::net::IpAddr;
use std::time::Duration;

use clap::Parser;

use error::PingpongError;

/// Transport, as the four tools.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Transport {
    /// Reliable connected (ibv_rc_pingpong).
    Rc,
    /// Unreliable connected (ibv_uc_pingpong).
    Uc,
    /// Unreliable datagram (ibv_ud_pingpong).
    Ud,
    /// RC QPs sharing one receive queue (ibv_srq_pingpong).
    Srq,
}

/// The raw arguments: parsed by [`PingpongArgs`] here so that a bad flag
/// gives one line, not clap's usage block.
#[derive(clap::Args, Debug)]
#[command(disable_help_flag = true)]
pub(crate) struct RawArgs {
    /// Arguments (see `roce pingpong --help`).
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, num_args = 0..)]
    args: Vec<String>,
}

fn num<T: TryFrom<u64>>(s: &str) -> Result<T, PingpongError> {
    // strtoul(..., 0) as the tools: decimal, or hex with 0x.
    let v = match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(h) => u64::from_str_radix(h, 16),
        None => s.parse::<u64>(),
    }
    .map_err(|_| PingpongError::NotANumber(s.to_string()))?;
    T::try_from(v).map_err(|_| PingpongError::OutOfRange(s.to_string()))
}

/// Ping-pong SENDs with an rdma-core `ibv_*_pingpong` peer (or another
/// `roce pingpong`), speaking the tools' TCP exchange.
#[derive(Parser, Debug, Clone)]
#[command(
    name = "roce pingpong",
    disable_help_flag = true,
    after_help = "Without SERVER, waits for a client. Either side may be rdma-core's \
                  ibv_{rc,uc,ud,srq}_pingpong. Exit status: 0 every iteration completed, \
                  1 a failure, 2 bad flags."
)]
pub(crate) struct PingpongArgs {
    /// Server to connect to (omit to wait as the server).
    pub(crate) server: Option<String>,
    /// Transport: rc, uc, ud or srq (which rdma-core tool this is).
    #[arg(long, value_enum, default_value_t = Transport::Rc)]
    pub(crate) transport: Transport,
    /// Listen on / connect to this TCP port.
    #[arg(short = 'p', long, default_value_t = 18515, value_parser = num::<u16>)]
    pub(crate) port: u16,
    /// Device name, as the tools' -d (accepted and ignored: the device is
    /// this stack on --bind).
    #[arg(short = 'd', long = "ib-dev")]
    pub(crate) ib_dev: Option<String>,
    /// Port of the device (only 1).
    #[arg(short = 'i', long = "ib-port", default_value_t = 1, value_parser = num::<u8>)]
    pub(crate) ib_port: u8,
    /// Message size [default: 4096; ud: 2048].
    #[arg(short = 's', long, value_parser = num::<u32>)]
    pub(crate) size: Option<u32>,
    /// Path MTU: 256, 512, 1024, 2048, 4096 [default: 1024; ud: the port
    /// MTU, 4096].
    #[arg(short = 'm', long, value_parser = num::<u32>)]
    pub(crate) mtu: Option<u32>,
    /// Receives posted at a time.
    #[arg(short = 'r', long = "rx-depth", default_value_t = 500, value_parser = num::<u32>)]
    pub(crate) rx_depth: u32,
    /// Number of exchanges (srq: in total over all QPs, as the tool).
    #[arg(short = 'n', long, default_value_t = 1000, value_parser = num::<u32>)]
    pub(crate) iters: u32,
    /// Service level (accepted; the UDP backend cannot set a VLAN priority).
    #[arg(short = 'l', long, default_value_t = 0, value_parser = num::<u8>)]
    pub(crate) sl: u8,
    /// Sleep on CQ events (a completion channel) instead of polling.
    #[arg(short = 'e', long)]
    pub(crate) events: bool,
    /// Local GID index: the RoCE address is entry N of the GID table
    /// `roce devinfo` prints for the interface of --bind (or of the TCP
    /// connection's address), e.g. on lo 0 = ::ffff:127.0.0.1, 1 = ::1
    /// [default: the TCP connection's address].
    #[arg(short = 'g', long = "gid-idx", value_parser = num::<u8>)]
    pub(crate) gid_idx: Option<u8>,
    /// Validate every received buffer (and fail on a mismatch).
    #[arg(short = 'c', long = "chk")]
    pub(crate) chk: bool,
    /// Number of QPs (srq).
    #[arg(short = 'q', long = "num-qp", default_value_t = 16, value_parser = num::<u32>)]
    pub(crate) num_qp: u32,
    /// Local address (the RoCE device's IP); a server listens on it only
    /// [default: the address of the TCP connection; a server listens on
    /// every IPv4 address, as ibv_*_pingpong].
    #[arg(long)]
    pub(crate) bind: Option<IpAddr>,
    /// UDP port of the RoCE traffic, both ends (4791 is the standard).
    #[arg(long, default_value_t = 4791, value_parser = clap::value_parser!(u16).range(1..))]
    pub(crate) roce_port: u16,
    /// Give up after this many seconds without progress (connecting, the
    /// exchange, or a completion); 0 waits forever, as the tools do. At
    /// most 10^9 (31 years). Once the ping-pong runs, a peer silent for
    /// 10 s is taken as gone (a killed peer sends nothing), less with a
    /// shorter --timeout.
    #[arg(long, default_value_t = 60, value_parser = clap::value_parser!(u64).range(0..=1_000_000_000))]
    pub(crate) timeout: u64,
    /// Print the device's and the backend's counters to stderr at the end.
    #[arg(long)]
    pub(crate) stats: bool,
    /// Print help.
    #[arg(short = 'h', long, action = clap::ArgAction::Help)]
    help: Option<bool>,
}

/// The checked parameters of a run.
#[derive(Clone, Debug)]
pub(crate) struct Params {
    pub(crate) transport: Transport,
    pub(crate) server: Option<String>,
    pub(crate) port: u16,
    pub(crate) size: u32,
    pub(crate) mtu: u32,
    pub(crate) rx_depth: u32,
    pub(crate) iters: u32,
    pub(crate) events: bool,
    pub(crate) gid_idx: Option<u8>,
    pub(crate) chk: bool,
    pub(crate) num_qp: u32,
    pub(crate) bind: Option<IpAddr>,
    pub(crate) roce_port: u16,
    pub(crate) timeout: Option<Duration>,
    pub(crate) stats: bool,
}

impl PingpongArgs {
    fn check(&self) -> Result<Params, PingpongError> {
        let t = self.transport;
        if self.ib_port != 1 {
            return Err(PingpongError::Args(format!(
                "port {} of the device does not exist (only 1)",
                self.ib_port
            )));
        }
        let mtu = match (self.mtu, t) {
            (Some(m), _) => m,
            (None, Transport::Ud) => 4096,
            (None, _) => 1024,
        };
        if !matches!(mtu, 256 | 512 | 1024 | 2048 | 4096) {
            return Err(PingpongError::Args(format!(
                "MTU {mtu} is not one of 256, 512, 1024, 2048, 4096"
            )));
        }
        let size = self
            .size
            .unwrap_or(if t == Transport::Ud { 2048 } else { 4096 });
        if size == 0 || size > 1 << 30 {
            return Err(PingpongError::Args(
                "the size must be between 1 byte and 1 GiB".into(),
            ));
        }
        if t == Transport::Ud && size > mtu {
            return Err(PingpongError::Args(format!(
                "Requested size larger than port MTU ({mtu})"
            )));
        }
        if self.rx_depth == 0 || self.rx_depth > 1 << 16 {
            return Err(PingpongError::Args(
                "the rx-depth must be between 1 and 65536".into(),
            ));
        }
        if self.iters == 0 {
            return Err(PingpongError::Args(
                "the number of iterations must be at least 1".into(),
            ));
        }
        if self.sl > 15 {
            return Err(PingpongError::Args(
                "the service level must be between 0 and 15".into(),
            ));
        }
        let num_qp = if t == Transport::Srq { self.num_qp } else { 1 };
        if t == Transport::Srq {
            if num_qp == 0 || num_qp as usize > wire::SRQ_SLOTS {
                return Err(PingpongError::Args(format!(
                    "the number of QPs must be between 1 and {}",
                    wire::SRQ_SLOTS
                )));
            }
            if num_qp > self.rx_depth {
                return Err(PingpongError::Args(format!(
                    "rx_depth {} is too small for {} QPs -- must have at least one receive per QP.",
                    self.rx_depth, num_qp
                )));
            }
        }
        // A GID index past the table is wrong whatever address the
        // connection ends up using: say so now, as ibv_rc_pingpong does
        // at start-up, not once a peer connects.
        if let Some(g) = self.gid_idx {
            let bind = self.bind.filter(|b| !b.is_unspecified());
            crate::device::check_gid_index(usize::from(g), bind, None)?;
        }
        let gid_idx = self.gid_idx;
        let slot = u64::from(size) + 40;
        if slot * u64::from(self.rx_depth + num_qp) > 1 << 30 {
            return Err(PingpongError::Args(
                "size × rx-depth needs more than 1 GiB of buffers".into(),
            ));
        }
        Ok(Params {
            transport: t,
            server: self.server.clone(),
            port: self.port,
            size,
            mtu,
            rx_depth: self.rx_depth,
            iters: self.iters,
            events: self.events,
            gid_idx,
            chk: self.chk,
            num_qp,
            bind: self.bind,
            roce_port: self.roce_port,
            timeout: (self.timeout > 0).then(|| Duration::from_secs(self.timeout)),
            stats: self.stats,
        })
    }
}

/// Runs `roce pingpong`; returns the exit status.
pub(crate) fn run(raw: &RawArgs) -> i32 {
    let argv = std::iter::once("roce pingpong".to_string()).chain(raw.args.iter().cloned());
    let args = match PingpongArgs::try_parse_from(argv) {
        Ok(a) => a,
        Err(e) => {
            use clap::error::ErrorKind;
            if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) {
                let _ = e.print();
                return 0;
            }
            let text = e.render().to_string();
            let first = text.lines().next().unwrap_or("bad arguments");
            let first = first.strip_prefix("error: ").unwrap_or(first);
            eprintln!("roce pingpong: {first} (see roce pingpong --help)");
            return 2;
        }
    };
    let params = match args.check() {
        Ok(p) => p,
        Err(e) => {
            eprintln!("roce pingpong: {e}");
            return 2;
        }
    };
    match run::run(&params) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("roce pingpong: {e}");
            1
        }
    }
}
