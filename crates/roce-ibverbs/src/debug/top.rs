//! What `roce top` shows of this process (docs/debugging.md, "roce
//! top"): every ~500 ms a thread of the library writes a snapshot of its
//! contexts, QPs and CQs (the counters the engine keeps anyway, and rates
//! from the previous snapshot) into `roce-top-<uid>-<pid>` in the
//! directory of the host tables (`$XDG_RUNTIME_DIR` or `/dev/shm`,
//! docs/host.md, "The file"), and removes it at exit. Nothing on the data
//! path: the thread reads the counters under the engines' locks twice a
//! second.
//!
//! The file is written as the host tables are opened: a temporary file
//! made with `O_NOFOLLOW`, mode 0600, checked to be a regular file of
//! this user that no other may read, then renamed over the name (a reader
//! sees one whole snapshot or the previous one). `ROCE_TOP=0` turns it
//! off. An error is said once on stderr and ends the publishing; the
//! program goes on.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::fs::OpenOptions;
use std::io::Write as _;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use roce_core::QpState;

use super::{each_seen, Seen};
use crate::config::say;

/// How often the snapshot is written.
const PERIOD: Duration = Duration::from_millis(500);

/// The prefix of the files (`roce-top-<uid>-<pid>`).
pub(crate) const PREFIX: &str = "roce-top-";

/// This process's publishing.
pub(crate) struct Top {
    path: PathBuf,
    tmp: PathBuf,
    /// `None` once stopped (at exit, or after an error); held while the
    /// file is written, so that the exit's removal comes after.
    state: Mutex<Option<Previous>>,
}

/// The previous snapshot's counters, for the rates.
#[derive(Default)]
struct Previous {
    at: Option<Instant>,
    qps: HashMap<(usize, u32), [u64; 4]>,
}

fn uid() -> u32 {
    // SAFETY: getuid has no preconditions and cannot fail.
    unsafe { libc::getuid() }
}

/// Whether process `pid` exists (`kill(pid, 0)`: `EPERM` is another
/// user's live process).
pub(crate) fn alive(pid: i32) -> bool {
    // SAFETY: signal 0 sends nothing; it only checks the process.
    let r = unsafe { libc::kill(pid, 0) };
    r == 0 || std::io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH)
}

impl Top {
    /// The publishing of this process, unless `ROCE_TOP=0`; its thread
    /// started. Files that dead processes of this user left are removed.
    pub(crate) fn start() -> Option<Top> {
        if std::env::var("ROCE_TOP").is_ok_and(|v| v.trim() == "0") {
            return None;
        }
        let dir = roce_io::host::default_dir();
        let (uid, pid) = (uid(), std::process::id());
        sweep(&dir, uid);
        let top = Top {
            path: dir.join(format!("{PREFIX}{uid}-{pid}")),
            tmp: dir.join(format!(".{PREFIX}{uid}-{pid}.tmp")),
            state: Mutex::new(Some(Previous::default())),
        };
        let spawned = std::thread::Builder::new()
            .name("roce-top".into())
            .spawn(|| loop {
                std::thread::sleep(PERIOD);
                let Some(t) = super::DEBUG.get().and_then(|d| d.top.as_ref()) else {
                    continue;
                };
                if !t.publish() {
                    return;
                }
            });
        spawned.ok().map(|_| top)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Previous>> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Writes a snapshot; false once stopped.
    fn publish(&self) -> bool {
        let mut g = self.lock();
        let Some(prev) = g.as_mut() else {
            return false;
        };
        let text = snapshot(prev);
        if let Err(e) = self.write(&text) {
            say(format_args!(
                "roce top: cannot write {}: {e}; this process is not shown (ROCE_TOP=0 turns this off)",
                self.path.display()
            ));
            let _ = std::fs::remove_file(&self.tmp);
            *g = None;
            return false;
        }
        true
    }

    fn write(&self, text: &str) -> std::io::Result<()> {
        let _ = std::fs::remove_file(&self.tmp);
        let mut f = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&self.tmp)?;
        let st = f.metadata()?;
        if !st.file_type().is_file() || st.uid() != uid() || st.mode() & 0o077 != 0 {
            return Err(std::io::Error::other("not a private file of this user"));
        }
        f.write_all(text.as_bytes())?;
        std::fs::rename(&self.tmp, &self.path)
    }

    /// At exit: no more snapshots, and the file removed.
    pub(crate) fn stop(&self) {
        let mut g = self.lock();
        *g = None;
        let _ = std::fs::remove_file(&self.path);
        let _ = std::fs::remove_file(&self.tmp);
    }
}

/// Removes the files of this user's dead processes (at most 256 looked
/// at).
pub(crate) fn sweep(dir: &Path, uid: u32) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    let mine = format!("{PREFIX}{uid}-");
    for e in rd
        .flatten()
        .take(4096)
        .filter(|e| e.file_name().to_string_lossy().starts_with(&mine))
        .take(256)
    {
        let name = e.file_name().to_string_lossy().into_owned();
        let Ok(pid) = name[mine.len()..].parse::<i32>() else {
            continue;
        };
        let owned = e
            .metadata()
            .is_ok_and(|m| m.uid() == uid && m.file_type().is_file());
        if owned && pid > 0 && !alive(pid) {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

fn state_name(s: QpState) -> &'static str {
    match s {
        QpState::Reset => "RESET",
        QpState::Init => "INIT",
        QpState::Rtr => "RTR",
        QpState::Rts => "RTS",
        QpState::Sqd => "SQD",
        QpState::Sqe => "SQE",
        _ => "ERR",
    }
}

/// This process's snapshot, as one JSON object.
fn snapshot(prev: &mut Previous) -> String {
    let now = Instant::now();
    let secs = prev.at.map(|t| now.duration_since(t).as_secs_f64());
    let mut next = HashMap::new();
    let unix_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    let comm = std::fs::read_to_string("/proc/self/comm").unwrap_or_default();
    let mut s = format!(
        "{{\"pid\":{},\"program\":\"{}\",\"updated_ms\":{unix_ms},\"period_ms\":{},\"contexts\":[",
        std::process::id(),
        comm.trim().replace(['"', '\\'], "_"),
        PERIOD.as_millis()
    );
    let mut first_ctx = true;
    each_seen(|c: &Seen<'_>| {
        let key = c.key;
        let _ = write!(
            s,
            "{}{{\"device\":\"{}\",\"addr\":\"{}\",\"qps\":[",
            if first_ctx { "" } else { "," },
            c.device,
            c.local
        );
        first_ctx = false;
        let mut first = true;
        for q in &c.qps {
            let qpn = q.qpn().value();
            let k = q.counters();
            let cc = q.cc_counters();
            let now4 = [k.tx_packets, k.tx_bytes, k.rx_packets, k.rx_bytes];
            let rate = |i: usize| match (secs, prev.qps.get(&(key, qpn))) {
                (Some(dt), Some(p)) if dt > 0.0 => now4[i].saturating_sub(p[i]) as f64 / dt,
                _ => 0.0,
            };
            let (state, peer, peer_qpn) = match q.query() {
                Ok(a) => {
                    let connected = !matches!(a.qp_state, QpState::Reset | QpState::Init)
                        && a.dest_qp_num.value() != 0;
                    (
                        state_name(a.qp_state),
                        connected.then(|| a.ah_attr.dest.to_string()),
                        a.dest_qp_num.value(),
                    )
                }
                Err(_) => ("ERR", None, 0),
            };
            let _ = write!(
                s,
                "{}{{\"qpn\":{qpn},\"type\":\"{}\",\"state\":\"{state}\",\"peer\":{},\"peer_qpn\":{},\
                 \"tx_packets\":{},\"tx_bytes\":{},\"rx_packets\":{},\"rx_bytes\":{},\
                 \"tx_pps\":{:.1},\"tx_bps\":{:.1},\"rx_pps\":{:.1},\"rx_bps\":{:.1},\
                 \"retransmitted\":{},\"timeouts\":{},\"rnr_naks_sent\":{},\"rnr_naks_received\":{},\
                 \"seq_naks_sent\":{},\"seq_naks_received\":{},\"error_naks_sent\":{},\"error_naks_received\":{},\
                 \"cnps_sent\":{},\"cnps_received\":{},\"duplicates\":{}}}",
                if first { "" } else { "," },
                format!("{:?}", q.qp_type()).to_uppercase(),
                peer.as_ref().map_or("null".to_string(), |p| format!("\"{p}\"")),
                if peer.is_some() { peer_qpn } else { 0 },
                k.tx_packets, k.tx_bytes, k.rx_packets, k.rx_bytes,
                rate(0), rate(1) * 8.0, rate(2), rate(3) * 8.0,
                k.retransmitted, k.timeouts, k.rnr_naks_sent, k.rnr_naks_received,
                k.seq_naks_sent, k.seq_naks_received, k.error_naks_sent, k.error_naks_received,
                cc.cnp_sent, cc.cnp_received, k.duplicates
            );
            first = false;
            next.insert((key, qpn), now4);
        }
        s.push_str("],\"cqs\":[");
        let mut first = true;
        for &(id, by_status) in &c.cqs {
            let by = super::stats::status_snapshot(by_status);
            let errors: u64 = by.iter().skip(1).sum();
            let _ = write!(
                s,
                "{}{{\"cq\":{},\"completions\":{},\"errors\":{errors}}}",
                if first { "" } else { "," },
                id,
                by.iter().sum::<u64>()
            );
            first = false;
        }
        s.push_str("]}");
    });
    s.push_str("]}\n");
    prev.at = Some(now);
    prev.qps = next;
    s
}
