//! Two network namespaces of a test's own joined by a veth pair, each
//! end with its addresses, removed when the value is dropped: the hosts
//! of the tests that cross a network (needs root and `ip netns`).

use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

/// Namespaces `a` and `b`, veth ends `va` (in `a`) and `vb` (in `b`), on
/// `10.<second>.<n>.0/24` with a per-process, per-pair `n`: end `a` has
/// hosts 1, 3, 5 ... and end `b` hosts 2, 4, 6 ..., `ip_a` and `ip_b`
/// the first of each.
pub struct VethPair {
    /// The first namespace.
    pub a: String,
    /// The second namespace.
    pub b: String,
    /// The veth end in `a`.
    pub va: String,
    /// The veth end in `b`.
    pub vb: String,
    /// The first address of `va` (host 1).
    pub ip_a: String,
    /// The first address of `vb` (host 2).
    pub ip_b: String,
}

/// Runs `ip ARGS`; its stderr as the error.
pub fn ip(args: &[&str]) -> Result<(), String> {
    let o = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| format!("ip: {e}"))?;
    if o.status.success() {
        Ok(())
    } else {
        Err(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&o.stderr).trim()
        ))
    }
}

/// Whether the test runs as root (`ip netns` needs it).
pub fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(2) == Some("0"))
}

impl VethPair {
    /// A new pair named after `tag` (two letters, so that names stay
    /// within the 15 bytes of an interface name), with `per_end`
    /// addresses at each end; `Err` with the reason (not root, no
    /// `ip netns`) for the test to skip on.
    pub fn new(tag: &str, second: u8, per_end: u8) -> Result<VethPair, String> {
        if !is_root() {
            return Err("not root".into());
        }
        static N: AtomicU32 = AtomicU32::new(0);
        let n = N.fetch_add(1, Ordering::SeqCst);
        let id = format!("{}{n}", std::process::id() % 100_000);
        let net = 1 + (std::process::id() + n) % 250;
        let lab = VethPair {
            a: format!("{tag}a{id}"),
            b: format!("{tag}b{id}"),
            va: format!("{tag}va{id}"),
            vb: format!("{tag}vb{id}"),
            ip_a: format!("10.{second}.{net}.1"),
            ip_b: format!("10.{second}.{net}.2"),
        };
        ip(&["netns", "add", &lab.a]).map_err(|e| format!("ip netns unavailable ({e})"))?;
        ip(&["netns", "add", &lab.b])?;
        ip(&[
            "link", "add", &lab.va, "netns", &lab.a, "type", "veth", "peer", "name", &lab.vb,
            "netns", &lab.b,
        ])?;
        for (ns, dev, first) in [(&lab.a, &lab.va, 1), (&lab.b, &lab.vb, 2)] {
            for k in 0..per_end.max(1) {
                let addr = format!("10.{second}.{net}.{}/24", first + 2 * k);
                ip(&["-n", ns, "addr", "add", &addr, "dev", dev])?;
            }
            ip(&["-n", ns, "link", "set", dev, "up"])?;
            ip(&["-n", ns, "link", "set", "lo", "up"])?;
        }
        Ok(lab)
    }
}

impl Drop for VethPair {
    fn drop(&mut self) {
        let _ = ip(&["netns", "del", &self.a]);
        let _ = ip(&["netns", "del", &self.b]);
    }
}
