//! `roce`: tools for RoCE v2 (RDMA over Converged Ethernet).

mod devinfo;
mod inspect;
mod perf;
mod pin;
mod pingpong;
mod rping;
mod sim;
mod tuning;
mod udaddy;

use clap::{Parser, Subcommand};

/// Tools for RoCE v2: decode and verify captures, measure bandwidth and latency.
#[derive(Parser, Debug)]
#[command(name = "roce", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Decode RoCE v2 packets in pcap/pcapng files, verify every ICRC, and
    /// summarise the traffic per QP.
    ///
    /// Exit status: 0 all ICRCs valid, 1 an ICRC failed or a RoCE packet was
    /// malformed, 2 a file was unreadable or truncated.
    Inspect(inspect::InspectArgs),
    /// Bandwidth and latency tests between two RoCE endpoints, in the manner
    /// of perftest: `roce perf write-bw` waits as the server, `roce perf
    /// write-bw SERVER` runs the client; `--loopback` runs both here.
    Perf(perf::PerfArgs),
    /// Ping-pong SENDs in the manner of rdma-core's ibv_{rc,uc,ud,srq}_pingpong,
    /// speaking their TCP exchange: `roce pingpong [--transport rc|uc|ud|srq]
    /// [SERVER]` (see `roce pingpong --help` for the flags).
    Pingpong(pingpong::RawArgs),
    /// The RoCE v2 devices (network interfaces) this stack can open, their
    /// GID tables and capabilities, in the manner of `ibv_devinfo -v`.
    Devinfo(devinfo::DevinfoArgs),
    /// librdmacm's rping over this stack: connect through the IB CM
    /// (rdma_cm addressing), then per ping a SEND, an RDMA READ, a SEND, an
    /// RDMA WRITE and a SEND. `-s` serves, `-c -a SERVER` pings; either
    /// side may be the Linux tool.
    Rping(rping::RpingArgs),
    /// librdmacm's udaddy over this stack: the client resolves the
    /// server's UD QP through the CM (SIDR), then datagrams go both ways.
    /// Without `-s SERVER` it serves (`-b ADDR`); either side may be the
    /// Linux tool.
    Udaddy(udaddy::UdaddyArgs),
    /// Run a fabric scenario (TOML) in the discrete-event simulator whose
    /// hosts run this stack's engine: PFC, ETS, ECN, DCQCN. Prints a
    /// summary; `--csv`/`--plots DIR` write tables and SVG plots.
    ///
    /// Exit status: 0 ran, 1 an output could not be written, 2 the scenario
    /// was unreadable or invalid.
    Sim(sim::SimArgs),
}

fn main() {
    let cli = Cli::parse();
    let code = match &cli.command {
        Command::Inspect(args) => inspect::run(args),
        Command::Perf(args) => perf::run(args),
        Command::Pingpong(args) => pingpong::run(args),
        Command::Devinfo(args) => devinfo::run(args),
        Command::Rping(args) => rping::run(args),
        Command::Udaddy(args) => udaddy::run(args),
        Command::Sim(args) => sim::run(args),
    };
    std::process::exit(code);
}
