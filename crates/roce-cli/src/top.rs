//! `roce top`: every process of this user on this host that uses the
//! stack, its contexts, QPs (state, peer, rates, retransmissions, errors)
//! and CQs, refreshed every second (docs/debugging.md, "roce top").
//!
//! It reads the snapshots the drop-in library publishes
//! (`crates/roce-ibverbs/src/debug/top.rs`): `roce-top-<uid>-<pid>` in
//! the host tables' directory (`$XDG_RUNTIME_DIR`, else `/dev/shm`,
//! docs/host.md), each opened with `O_NOFOLLOW` and read only if it is a
//! regular file of this user that no other user may access. A file whose
//! process is gone (killed before its exit could remove it) is removed.

use std::fmt::Write as _;
use std::io::Read as _;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::Args;
use serde_json::Value;

/// `roce top` options.
#[derive(Args, Debug)]
pub(crate) struct TopArgs {
    /// Print one snapshot as JSON and exit.
    #[arg(long)]
    json: bool,
    /// Print one snapshot as text and exit.
    #[arg(long)]
    once: bool,
    /// Seconds between refreshes.
    #[arg(long, default_value_t = 1.0, value_name = "SECONDS")]
    interval: f64,
}

/// The prefix of the published files (the library's `PREFIX`).
const PREFIX: &str = "roce-top-";

/// Whether process `pid` exists (`EPERM`: it does, another user's).
fn alive(pid: i32) -> bool {
    use nix::sys::signal::kill;
    !matches!(
        kill(nix::unistd::Pid::from_raw(pid), None),
        Err(nix::errno::Errno::ESRCH)
    )
}

/// Reads one published file if it is a private regular file of `uid`.
fn read_private(path: &Path, uid: u32) -> Option<String> {
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc_o_nofollow())
        .open(path)
        .ok()?;
    let st = f.metadata().ok()?;
    if !st.file_type().is_file() || st.uid() != uid || st.mode() & 0o077 != 0 {
        return None;
    }
    let mut s = String::new();
    f.take(16 << 20).read_to_string(&mut s).ok()?;
    Some(s)
}

/// `O_NOFOLLOW`, from nix's flags (no libc dependency here).
fn libc_o_nofollow() -> i32 {
    nix::fcntl::OFlag::O_NOFOLLOW.bits()
}

/// The snapshots of this user's live processes, by PID; the files of
/// dead ones removed.
pub(crate) fn snapshots(dir: &Path) -> Vec<Value> {
    let uid = nix::unistd::getuid().as_raw();
    let mine = format!("{PREFIX}{uid}-");
    let Ok(rd) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut out: Vec<(i32, Value)> = Vec::new();
    for e in rd.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(pid) = name
            .strip_prefix(&mine)
            .and_then(|p| p.parse::<i32>().ok())
            .filter(|p| *p > 0)
        else {
            continue;
        };
        let path = e.path();
        let owned = e
            .metadata()
            .is_ok_and(|m| m.uid() == uid && m.file_type().is_file());
        if !owned {
            continue;
        }
        if !alive(pid) {
            let _ = std::fs::remove_file(&path);
            continue;
        }
        if let Some(v) = read_private(&path, uid).and_then(|t| serde_json::from_str(&t).ok()) {
            out.push((pid, v));
        }
    }
    out.sort_by_key(|(p, _)| *p);
    out.into_iter().map(|(_, v)| v).collect()
}

fn rate(bits: f64) -> String {
    if bits >= 1e9 {
        format!("{:.2}G", bits / 1e9)
    } else if bits >= 1e6 {
        format!("{:.1}M", bits / 1e6)
    } else if bits >= 1e3 {
        format!("{:.1}k", bits / 1e3)
    } else {
        format!("{bits:.0}")
    }
}

fn u(v: &Value, k: &str) -> u64 {
    v[k].as_u64().unwrap_or(0)
}

fn f(v: &Value, k: &str) -> f64 {
    v[k].as_f64().unwrap_or(0.0)
}

/// The text of one snapshot.
pub(crate) fn render(all: &[Value], dir: &Path) -> String {
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    let mut s = String::new();
    let _ = writeln!(
        s,
        "roce top: {} process{} using the stack (files in {})",
        all.len(),
        if all.len() == 1 { "" } else { "es" },
        dir.display()
    );
    let _ = writeln!(
        s,
        "{:<8} {:<16} {:<22} {:>9} {:<4} {:<5} {:<24} {:>8} {:>8} {:>8} {:>8} {:>7} {:>7} {:>6} {:>6} {:>5}",
        "PID", "PROGRAM", "CONTEXT", "QP", "TYPE", "STATE", "PEER", "TX pps", "TX b/s", "RX pps",
        "RX b/s", "RETX", "TMOUT", "RNR", "NAK", "ERR"
    );
    for p in all {
        let age = now_ms.saturating_sub(u(p, "updated_ms"));
        let prog = p["program"].as_str().unwrap_or("?");
        let pid = u(p, "pid");
        let ctxs = p["contexts"].as_array().cloned().unwrap_or_default();
        if ctxs.is_empty() {
            let _ = writeln!(s, "{pid:<8} {prog:<16} (no context open)");
        }
        for c in &ctxs {
            let ctx = format!(
                "{} {}",
                c["device"].as_str().unwrap_or("?"),
                c["addr"].as_str().unwrap_or("?")
            );
            let qps = c["qps"].as_array().cloned().unwrap_or_default();
            if qps.is_empty() {
                let _ = writeln!(s, "{pid:<8} {prog:<16} {ctx:<22} (no QP)");
            }
            for q in &qps {
                let peer = match q["peer"].as_str() {
                    Some(a) => format!("{a} QP {:#x}", u(q, "peer_qpn")),
                    None => "-".into(),
                };
                let _ = writeln!(
                    s,
                    "{pid:<8} {prog:<16} {ctx:<22} {:>#9x} {:<4} {:<5} {peer:<24} {:>8.0} {:>8} {:>8.0} {:>8} {:>7} {:>7} {:>6} {:>6} {:>5}",
                    u(q, "qpn"),
                    q["type"].as_str().unwrap_or("?"),
                    q["state"].as_str().unwrap_or("?"),
                    f(q, "tx_pps"),
                    rate(f(q, "tx_bps")),
                    f(q, "rx_pps"),
                    rate(f(q, "rx_bps")),
                    u(q, "retransmitted"),
                    u(q, "timeouts"),
                    u(q, "rnr_naks_sent") + u(q, "rnr_naks_received"),
                    u(q, "seq_naks_sent") + u(q, "seq_naks_received"),
                    u(q, "error_naks_sent") + u(q, "error_naks_received"),
                );
            }
            let cqs = c["cqs"].as_array().cloned().unwrap_or_default();
            let (n, e) = cqs.iter().fold((0, 0), |(n, e), q| {
                (n + u(q, "completions"), e + u(q, "errors"))
            });
            let _ = writeln!(
                s,
                "{:<8} {:<16} {ctx:<22} {} CQs: {n} completions, {e} with an error status{}",
                "",
                "",
                cqs.len(),
                if age > 3000 {
                    format!(" (snapshot {:.1} s old)", age as f64 / 1e3)
                } else {
                    String::new()
                }
            );
        }
    }
    s
}

/// Runs `roce top`.
pub(crate) fn run(args: &TopArgs) -> i32 {
    let dir: PathBuf = roce_io::host::default_dir();
    if args.json {
        let v =
            serde_json::json!({ "dir": dir.display().to_string(), "processes": snapshots(&dir) });
        println!("{v}");
        return 0;
    }
    if args.once {
        print!("{}", render(&snapshots(&dir), &dir));
        return 0;
    }
    let every = Duration::from_secs_f64(args.interval.clamp(0.1, 3600.0));
    loop {
        // Home and clear, then the snapshot: a plain ANSI redraw.
        print!("\x1b[H\x1b[2J{}", render(&snapshots(&dir), &dir));
        use std::io::Write as _;
        let _ = std::io::stdout().flush();
        std::thread::sleep(every);
    }
}
