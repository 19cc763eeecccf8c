//! `roce exec -- PROGRAM [ARGS...]`: runs an unmodified RDMA program on
//! this stack, with the drop-in `libibverbs.so.1` (crates/roce-ibverbs)
//! and `librdmacm.so.1` (crates/roce-rdmacm) found first by the dynamic
//! loader (`docs/dropin.md`).
//!
//! The libraries are built beside the `roce` binary (`target/release/
//! libibverbs.so`, as cargo names a cdylib); the loader looks for
//! `libibverbs.so.1` and `librdmacm.so.1`, so `roce exec` keeps a
//! directory holding those names as links to them, and puts the
//! directory first on `LD_LIBRARY_PATH`. The options become the
//! library's environment variables. Unless `--no-device-files`, the
//! program also sees `/dev/infiniband/uverbs_<device>` files, in a mount
//! namespace of its own ([`crate::devfiles`]).

mod error;

use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};

use clap::Args;

use error::ExecError;

/// `roce exec` options.
#[derive(Args, Debug)]
pub(crate) struct ExecArgs {
    /// Show only these devices (`roce_lo`, `eth0`, comma-separated):
    /// ROCE_DEVICES.
    #[arg(long, value_name = "NAMES")]
    devices: Option<String>,
    /// Open contexts on this local address (one of the device's; any
    /// 127/8 address for loopback): ROCE_ADDR. Default: the device's
    /// first IPv4 address, or on loopback the first free one from
    /// 127.0.0.1.
    #[arg(long, value_name = "ADDR")]
    addr: Option<std::net::IpAddr>,
    /// The UDP port to listen on and send to (default 4791; every
    /// process of the exchange must use the same; the udp backend only):
    /// ROCE_PORT. For running beside a kernel RoCE device such as rxe,
    /// which holds 4791 on every address of its host.
    #[arg(long, value_name = "PORT")]
    port: Option<u16>,
    /// udp (the default: no privilege) or packet (AF_PACKET, needs
    /// CAP_NET_RAW): ROCE_BACKEND.
    #[arg(long, value_name = "udp|packet")]
    backend: Option<String>,
    /// Say which address each context took, on stderr: ROCE_LOG.
    #[arg(long)]
    log: bool,
    /// Record every RoCE datagram the program's contexts send and
    /// receive (the same-host shared-memory path too) into this pcap
    /// file, one per process (`%p` becomes the process ID):
    /// ROCE_PCAP (docs/debugging.md).
    #[arg(long, value_name = "FILE")]
    pcap: Option<PathBuf>,
    /// Inject faults: seeded ones as `roce perf --faults` (`loss=1%,seed=7`)
    /// and targeted rules after `;` (`drop qp=#1 op=send nth=3`,
    /// `drop-acks at=100ms for=50ms`, `rnr for=200ms`, `freeze at=1s
    /// for=300ms`, `link-down at=2s for=200ms`): ROCE_FAULTS
    /// (docs/debugging.md).
    #[arg(long, value_name = "SPEC")]
    faults: Option<String>,
    /// At exit, each context's per-QP and per-CQ counters, on stderr or
    /// into FILE (`%p` becomes the process ID): ROCE_STATS.
    #[arg(long, value_name = "FILE", num_args = 0..=1, default_missing_value = "-")]
    stats: Option<String>,
    /// Write every verbs and rdma_cm call the program makes (arguments,
    /// result, errno), the completions it polls and the events it takes,
    /// as JSON lines into FILE (`%p` becomes the process ID): ROCE_TRACE
    /// (docs/debugging.md, "Tracing").
    #[arg(long, value_name = "FILE")]
    trace: Option<PathBuf>,
    /// The --stats summary as JSON: ROCE_STATS_JSON.
    #[arg(long, requires = "stats")]
    json: bool,
    /// Do not show the program `/dev/infiniband/uverbs_<device>` files
    /// (by default they exist in a private mount namespace, for programs
    /// such as UCX that look for them: docs/dropin.md, "UCX").
    #[arg(long)]
    no_device_files: bool,
    /// Print the directory to put on LD_LIBRARY_PATH and exit (for
    /// running programs without `roce exec`).
    #[arg(long, conflicts_with = "program")]
    print_path: bool,
    /// The program and its arguments (after `--`).
    #[arg(
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "PROGRAM"
    )]
    program: Vec<OsString>,
}

/// The libraries `roce exec` puts in place, by the name cargo gives
/// their files (`<name>.so`); the loader looks for `<name>.so.1`.
const LIBRARIES: [&str; 2] = ["libibverbs", "librdmacm"];

/// Where the libraries are: `ROCE_LIB_DIR`, else beside this executable.
fn library_dir() -> Result<PathBuf, ExecError> {
    match std::env::var_os("ROCE_LIB_DIR") {
        Some(d) => Ok(PathBuf::from(d)),
        None => Ok(std::env::current_exe()
            .map_err(ExecError::CurrentExe)?
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_default()),
    }
}

/// The current file of library `name` in `dir`.
fn library(dir: &Path, name: &'static str) -> Result<PathBuf, ExecError> {
    // Cargo builds the library of a dependency in `deps/` and copies it
    // beside the binaries only when its own crate is built: the newer
    // of the two is the current one.
    let newest = [
        dir.join(format!("{name}.so")),
        dir.join("deps").join(format!("{name}.so")),
        dir.join(format!("{name}.so.1")),
    ]
    .into_iter()
    .filter_map(|p| Some((std::fs::metadata(&p).ok()?.modified().ok()?, p)))
    .max_by_key(|(t, _)| *t);
    match newest {
        Some((_, p)) => Ok(p),
        None => Err(ExecError::NoLibrary {
            name,
            dir: dir.to_path_buf(),
        }),
    }
}

/// The directory holding `<name>.so.1` → each library: beside them when
/// writable, else in the temporary directory. The links are replaced
/// atomically, so concurrent `roce exec`s never see one missing.
fn dropin_dir(dir: &Path) -> Result<PathBuf, ExecError> {
    let mut targets = Vec::new();
    for name in LIBRARIES {
        let lib = library(dir, name)?;
        let t = lib
            .canonicalize()
            .map_err(|error| ExecError::Resolve { path: lib, error })?;
        targets.push((format!("{name}.so.1"), t));
    }
    let uid = nix::unistd::getuid();
    let mut tried = Vec::new();
    for base in [
        dir.join("roce-dropin"),
        std::env::temp_dir().join(format!("roce-dropin-{uid}")),
    ] {
        let made = targets.iter().try_for_each(|(soname, target)| {
            let link = base.join(soname);
            if std::fs::read_link(&link).is_ok_and(|t| t == *target) {
                return Ok(());
            }
            std::fs::create_dir_all(&base)?;
            let tmp = base.join(format!(".{soname}.{}", std::process::id()));
            let _ = std::fs::remove_file(&tmp);
            std::os::unix::fs::symlink(target, &tmp)?;
            std::fs::rename(&tmp, &link)
        });
        match made {
            Ok(()) => return Ok(base),
            Err(e) => tried.push((base, e)),
        }
    }
    Err(ExecError::LinkDir(tried))
}

/// Runs `roce exec`; returns only on failure.
pub(crate) fn run(args: &ExecArgs) -> i32 {
    let dir = match library_dir().and_then(|d| dropin_dir(&d)) {
        Ok(d) => d,
        Err(e) => return crate::fail("exec", false, &e.to_string(), 2),
    };
    if args.print_path {
        println!("{}", dir.display());
        return 0;
    }
    let Some((prog, rest)) = args.program.split_first() else {
        return crate::fail(
            "exec",
            false,
            "name a program to run: roce exec -- PROGRAM [ARGS...]",
            2,
        );
    };
    if let Some(b) = &args.backend {
        if b != "udp" && b != "packet" {
            return crate::fail(
                "exec",
                false,
                &format!("--backend {b}: use udp or packet"),
                2,
            );
        }
    }
    if let Some(f) = &args.faults {
        if let Err(e) = roce_io::FaultPlan::parse(f) {
            return crate::fail("exec", false, &format!("--faults: {e}"), 2);
        }
    }
    let mut path = OsString::from(dir.as_os_str());
    if let Some(old) = std::env::var_os("LD_LIBRARY_PATH").filter(|o| !o.is_empty()) {
        path.push(":");
        path.push(old);
    }
    let mut cmd = std::process::Command::new(prog);
    cmd.args(rest).env("LD_LIBRARY_PATH", path);
    if let Some(d) = &args.devices {
        cmd.env("ROCE_DEVICES", d);
    }
    if let Some(a) = &args.addr {
        cmd.env("ROCE_ADDR", a.to_string());
    }
    if let Some(p) = args.port {
        cmd.env("ROCE_PORT", p.to_string());
    }
    if let Some(b) = &args.backend {
        cmd.env("ROCE_BACKEND", b);
    }
    if args.log {
        cmd.env("ROCE_LOG", "1");
    }
    if let Some(p) = &args.pcap {
        cmd.env("ROCE_PCAP", p);
    }
    if let Some(f) = &args.faults {
        cmd.env("ROCE_FAULTS", f);
    }
    if let Some(t) = &args.trace {
        cmd.env("ROCE_TRACE", t);
    }
    if let Some(s) = &args.stats {
        cmd.env("ROCE_STATS", s);
        if args.json {
            cmd.env("ROCE_STATS_JSON", "1");
        }
    }
    if !args.no_device_files {
        if let Err(e) = crate::devfiles::provide(&crate::devfiles::wanted()) {
            eprintln!(
                "roce exec: no /dev/infiniband files for the devices ({e}); \
                 programs that look for them (UCX) will not see the devices"
            );
        }
    }
    let e = cmd.exec();
    let code = if e.kind() == std::io::ErrorKind::NotFound {
        127
    } else {
        126
    };
    crate::fail(
        "exec",
        false,
        &format!("cannot run {}: {e}", Path::new(prog).display()),
        code,
    )
}
