//! `roce`: tools for RoCE v2 (RDMA over Converged Ethernet).

mod inspect;
mod perf;

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
}

fn main() {
    let cli = Cli::parse();
    let code = match &cli.command {
        Command::Inspect(args) => inspect::run(args),
        Command::Perf(args) => perf::run(args),
    };
    std::process::exit(code);
}
