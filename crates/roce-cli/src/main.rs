//! `roce`: tools for RoCE v2 (RDMA over Converged Ethernet).
//!
//! One command with nine subcommands, at the top of the stack: `perf`
//! (perftest-style bandwidth and latency tests, and perftest's own
//! exchange with `--perftest`), `pingpong`, `rping` and `udaddy` (rdma-core's
//! and librdmacm's tools, interoperating with them), `inspect` (decode and
//! verify captures), `devinfo` (interfaces as RoCE devices), `sim` (the
//! fabric simulator), `exec` (an unmodified program on the drop-in
//! library) and `top` (the processes using it). They use `roce-verbs`
//! over `roce-io`'s backends, `roce-wire` and `roce-capture` for
//! captures, and `roce-sim`. Every
//! subcommand is described with example output in the repository's
//! `docs/tools.md`.
//!
//! This is a binary crate, so its examples are not doc tests; the
//! integration tests in `tests/` run these commands:
//!
//! ```text
//! cargo roce perf write-bw --loopback                 # the main job
//! cargo roce perf write-lat --loopback -s 2 -n 10000
//! cargo roce inspect testdata/captures/atomic_fetch_add.pcap
//! cargo roce pingpong --transport rc & cargo roce pingpong 127.0.0.1
//! cargo roce sim scenarios/incast_8to1_dcqcn.toml
//! ```

/// `wrap_errors!(Target: Inner => Variant, ...)`: each inner error says
/// the same wherever a command meets it, so `?` wraps it as it is in
/// the command's error type (boxed where the variant holds a box).
macro_rules! wrap_errors {
    ($target:path: $($t:ty => $variant:ident),* $(,)?) => {$(
        impl From<$t> for $target {
            fn from(e: $t) -> Self {
                Self::$variant(e.into())
            }
        }
    )*};
}

mod devfiles;
mod device;
mod devinfo;
mod exec;
mod inspect;
mod notice;
mod nvmf;
mod perf;
mod pin;
mod pingpong;
mod rping;
mod sim;
mod stop;
mod top;
mod udaddy;

use clap::{Parser, Subcommand};

use stop::Stop;

/// Tools for RoCE v2: decode and verify captures, perftest-style bandwidth
/// and latency tests, rdma-core's pingpong, librdmacm's rping and udaddy,
/// device listing, and a fabric simulator.
#[derive(Parser, Debug)]
#[command(name = "roce", version, long_about = None)]
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
    /// Run an unmodified RDMA program (ibv_devinfo, ibv_rc_pingpong,
    /// perftest's ib_write_bw ...) on this stack: `roce exec --
    /// PROGRAM [ARGS...]` puts the drop-in libibverbs.so.1 first on its
    /// LD_LIBRARY_PATH (docs/dropin.md).
    ///
    /// Exit status: the program's; 126/127 when it cannot be started, 2
    /// when the library is missing.
    Exec(exec::ExecArgs),
    /// Every process of this user that uses the stack (through the
    /// drop-in library), its contexts and QPs: state, peer, packet and
    /// bit rates, retransmissions, timeouts, NAKs, CQ errors; refreshed
    /// every second, or once with `--once` / `--json`
    /// (docs/debugging.md, "roce top").
    Top(top::TopArgs),
    /// NVMe over Fabrics (RDMA) over this stack: `roce nvmf target` serves
    /// a subsystem on port 4420, `roce nvmf check ADDR` writes and reads
    /// back through it, `roce nvmf discover ADDR` prints its discovery log
    /// (docs/nvmf.md).
    Nvmf(nvmf::NvmfArgs),
}

/// Reports a failure of `roce TOOL`: one line on stderr and, with
/// `--json`, a JSON object on stdout (`{"error": ..., "exit_status": ...}`)
/// so that a script reading stdout sees why it is empty. Returns `code`.
pub(crate) fn fail(tool: &str, json: bool, msg: &str, code: i32) -> i32 {
    eprintln!("roce {tool}: {msg}");
    if json {
        let v = serde_json::json!({"tool": tool, "error": msg, "exit_status": code});
        println!("{v}");
    }
    code
}

/// A [`Stop`] that Ctrl-C requests, for a command that finishes
/// gracefully at Ctrl-C (the others keep the default: Ctrl-C ends them).
///
/// The one place where the process reaches the signal handler: `ctrlc`
/// keeps the closure, and with it a clone of the token, in its own
/// process-wide state and runs it on a thread of its own at each SIGINT.
/// Called at most once per process (a command's entry), as `ctrlc`
/// takes one handler.
fn stop_at_ctrl_c() -> Stop {
    let stop = Stop::new();
    let requested = stop.clone();
    let _ = ctrlc::set_handler(move || requested.request());
    stop
}

fn main() {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            use clap::error::ErrorKind;
            let json = std::env::args().any(|a| a == "--json");
            if json && !matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) {
                // Usage errors too: JSON on stdout, the text on stderr.
                let text = e.render().to_string();
                let first = text.lines().next().unwrap_or("bad arguments");
                let first = first.strip_prefix("error: ").unwrap_or(first);
                let tool = std::env::args().nth(1).unwrap_or_default();
                let v = serde_json::json!({"tool": tool, "error": first, "exit_status": 2});
                println!("{v}");
            }
            if e.kind() == ErrorKind::UnknownArgument {
                // clap's tip ("to pass '-F' as a value, use '-- -F'") sends
                // a perftest user the wrong way: the flag is not one of
                // this tool's, and the help lists those.
                let text = e.render().to_string();
                let kept: Vec<&str> = text
                    .lines()
                    .filter(|l| {
                        let l = l.trim_start();
                        !l.starts_with("tip:") && !l.starts_with("For more information")
                    })
                    .collect();
                let sub = std::env::args().nth(1).unwrap_or_default();
                eprintln!(
                    "{}\n(not a flag of roce {sub}: `roce {sub} --help` lists them)",
                    kept.join("\n").replace("\n\n\n", "\n\n").trim_end()
                );
                std::process::exit(2);
            }
            e.exit()
        }
    };
    let code = match &cli.command {
        Command::Inspect(args) => inspect::run(args),
        Command::Perf(args) => perf::run(args, &stop_at_ctrl_c()),
        Command::Pingpong(args) => pingpong::run(args),
        Command::Devinfo(args) => devinfo::run(args),
        // The client disconnects at Ctrl-C; the server ends as Linux's does.
        Command::Rping(args) if args.client => rping::run(args, &stop_at_ctrl_c()),
        Command::Rping(args) => rping::run(args, &Stop::new()),
        Command::Udaddy(args) => udaddy::run(args),
        Command::Sim(args) => sim::run(args),
        Command::Exec(args) => exec::run(args),
        Command::Top(args) => top::run(args),
        Command::Nvmf(args) => nvmf::run(args, &stop_at_ctrl_c()),
    };
    std::process::exit(code);
}
