//! `roce exec -- PROGRAM [ARGS...]`: runs an unmodified RDMA program on
//! this stack, with the drop-in `libibverbs.so.1` (crates/roce-ibverbs)
//! found first by the dynamic loader (`docs/dropin.md`).
//!
//! The library is built beside the `roce` binary (`target/release/
//! libibverbs.so`, as cargo names the cdylib); the loader looks for
//! `libibverbs.so.1`, so `roce exec` keeps a directory holding that name
//! as a link to it, and puts the directory first on `LD_LIBRARY_PATH`.
//! The options become the library's environment variables.

use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};

use clap::Args;

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

/// Where the library is: `ROCE_LIB_DIR`, else beside this executable;
/// and that directory.
fn library() -> Result<(PathBuf, PathBuf), String> {
    let dir = match std::env::var_os("ROCE_LIB_DIR") {
        Some(d) => PathBuf::from(d),
        None => std::env::current_exe()
            .map_err(|e| format!("cannot find this executable: {e}"))?
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_default(),
    };
    // Cargo builds the library of a dependency in `deps/` and copies it
    // beside the binaries only when roce-ibverbs itself is built: the
    // newer of the two is the current one.
    let newest = [
        dir.join("libibverbs.so"),
        dir.join("deps").join("libibverbs.so"),
        dir.join("libibverbs.so.1"),
    ]
    .into_iter()
    .filter_map(|p| Some((std::fs::metadata(&p).ok()?.modified().ok()?, p)))
    .max_by_key(|(t, _)| *t);
    if let Some((_, p)) = newest {
        return Ok((dir, p));
    }
    Err(format!(
        "no libibverbs.so in {} (build it with `cargo build --release -p roce-ibverbs`, or set ROCE_LIB_DIR)",
        dir.display()
    ))
}

/// The directory holding `libibverbs.so.1` → the library: beside it when
/// writable, else in the temporary directory. The link is replaced
/// atomically, so concurrent `roce exec`s never see it missing.
fn dropin_dir(dir: &Path, lib: &Path) -> Result<PathBuf, String> {
    let target = lib
        .canonicalize()
        .map_err(|e| format!("{}: {e}", lib.display()))?;
    let uid = nix::unistd::getuid();
    let mut tried = Vec::new();
    for base in [
        Some(dir.join("roce-dropin")),
        Some(std::env::temp_dir().join(format!("roce-dropin-{uid}"))),
    ]
    .into_iter()
    .flatten()
    {
        let link = base.join("libibverbs.so.1");
        if std::fs::read_link(&link).is_ok_and(|t| t == target) {
            return Ok(base);
        }
        let made = std::fs::create_dir_all(&base).and_then(|()| {
            let tmp = base.join(format!(".libibverbs.so.1.{}", std::process::id()));
            let _ = std::fs::remove_file(&tmp);
            std::os::unix::fs::symlink(&target, &tmp)?;
            std::fs::rename(&tmp, &link)
        });
        match made {
            Ok(()) => return Ok(base),
            Err(e) => tried.push(format!("{}: {e}", base.display())),
        }
    }
    Err(format!(
        "cannot make the library directory ({})",
        tried.join("; ")
    ))
}

/// Runs `roce exec`; returns only on failure.
pub(crate) fn run(args: &ExecArgs) -> i32 {
    let dir = match library().and_then(|(d, l)| dropin_dir(&d, &l)) {
        Ok(d) => d,
        Err(e) => return crate::fail("exec", false, &e, 2),
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
