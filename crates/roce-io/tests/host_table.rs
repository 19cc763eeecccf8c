//! The host table between processes (docs/host.md): this test binary runs
//! itself as the other processes, the role chosen by an environment
//! variable (`child_role` does nothing without it). Every wait is
//! bounded, and every child is killed when its test ends.

#![cfg(target_os = "linux")]

use std::collections::HashSet;
use std::net::IpAddr;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use roce_io::host::{table_path, PortError, PortHolder, NAME_MAX};
use roce_io::{HostError, HostTable};

const ROLE: &str = "ROCE_HOST_TEST_ROLE";
const DIR: &str = "ROCE_HOST_TEST_DIR";
const TCP: u32 = 0x0106;

fn addr() -> IpAddr {
    "127.0.0.1".parse().unwrap()
}

/// 10,000 distinct random 24-bit QPNs, the same in every process.
fn qpns() -> Vec<u32> {
    let mut x = 0x2545_f491_4f6c_dd1du64;
    let mut seen = HashSet::new();
    let mut v = Vec::new();
    while v.len() < 10_000 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let q = (x >> 20) as u32 & 0xff_ffff;
        if seen.insert(q) {
            v.push(q);
        }
    }
    v
}

/// Waits until `path` exists; `false` after `limit`.
fn wait_for(path: &Path, limit: Duration) -> bool {
    let t = Instant::now();
    while !path.exists() {
        if t.elapsed() > limit {
            return false;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    true
}

/// Writes `text` to `path` whole (a rename), so a reader never sees half.
fn publish(path: &Path, text: &str) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

/// A child process, killed (SIGKILL) and reaped when dropped.
struct Kid(Child);

impl Kid {
    fn spawn(role: &str, dir: &Path) -> Kid {
        let exe = std::env::current_exe().unwrap();
        Kid(Command::new(exe)
            .args(["--exact", "child_role", "--nocapture", "--test-threads=1"])
            .env(ROLE, role)
            .env(DIR, dir)
            .stdout(Stdio::null())
            .spawn()
            .unwrap())
    }

    fn pid(&self) -> u32 {
        self.0.id()
    }

    /// Waits for a clean exit, for at most `limit`.
    fn join(&mut self, limit: Duration) {
        let t = Instant::now();
        loop {
            if let Some(st) = self.0.try_wait().unwrap() {
                assert!(st.success(), "child {} failed: {st}", self.pid());
                return;
            }
            assert!(t.elapsed() < limit, "child {} did not end", self.pid());
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

impl Drop for Kid {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The other processes' side. Without the role variable: nothing.
#[test]
fn child_role() {
    let Ok(role) = std::env::var(ROLE) else {
        return;
    };
    let dir = PathBuf::from(std::env::var_os(DIR).unwrap());
    let me = std::process::id();
    let t = HostTable::attach_in(&dir, addr(), 4791, format!("kid-{me}").as_bytes()).unwrap();
    match role.as_str() {
        "race" => {
            publish(&dir.join(format!("ready-{me}")), "");
            assert!(wait_for(&dir.join("go"), Duration::from_secs(20)));
            let mut won = Vec::new();
            for q in qpns() {
                match t.claim_qpn(q) {
                    Ok(()) => won.push(q.to_string()),
                    Err(HostError::Taken(_)) => {}
                    Err(e) => panic!("{e}"),
                }
            }
            publish(&dir.join(format!("won-{me}")), &won.join("\n"));
            // Stay attached (holding the QPNs) until the parent has
            // looked.
            assert!(wait_for(&dir.join("done"), Duration::from_secs(30)));
        }
        "hold" => {
            for q in 1..=100 {
                t.claim_qpn(q).unwrap();
            }
            t.claim_listener(0x0106_0000_0000_4242).unwrap();
            t.claim_comm_id(0x7777).unwrap();
            let h = PortHolder {
                slot: 0,
                id: 1,
                addr: addr(),
                reuse: false,
                afonly: false,
            };
            assert_eq!(t.bind_port(TCP, 7000, h).unwrap(), 7000);
            publish(&dir.join(format!("ready-{me}")), &t.slot().to_string());
            // Killed by the parent; never longer than this.
            std::thread::sleep(Duration::from_secs(30));
        }
        r => panic!("unknown role {r}"),
    }
}

#[test]
fn two_processes_racing_for_10000_qpns_each_get_every_one_once() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let mut kids = [Kid::spawn("race", d), Kid::spawn("race", d)];
    for k in &kids {
        assert!(wait_for(
            &d.join(format!("ready-{}", k.pid())),
            Duration::from_secs(20)
        ));
    }
    publish(&d.join("go"), "");
    let mut won: Vec<HashSet<u32>> = Vec::new();
    for k in &kids {
        let f = d.join(format!("won-{}", k.pid()));
        assert!(
            wait_for(&f, Duration::from_secs(60)),
            "child {} finished",
            k.pid()
        );
        let text = std::fs::read_to_string(&f).unwrap();
        won.push(text.lines().map(|l| l.parse().unwrap()).collect());
    }
    let all: HashSet<u32> = qpns().into_iter().collect();
    assert!(won[0].is_disjoint(&won[1]), "a QPN claimed by both");
    let union: HashSet<u32> = won[0].union(&won[1]).copied().collect();
    assert_eq!(union, all, "a QPN claimed by neither");
    eprintln!("won: {} and {}", won[0].len(), won[1].len());
    // The table agrees: every QPN's owner is the child that won it.
    let t = HostTable::attach_in(d, addr(), 4791, b"parent").unwrap();
    for (k, set) in kids.iter().zip(&won) {
        for &q in set {
            assert_eq!(
                t.owner_of_qpn(q).map(|o| o.pid),
                Some(k.pid()),
                "QPN {q:#x}"
            );
        }
    }
    assert!(matches!(
        t.claim_qpn(*all.iter().next().unwrap()),
        Err(HostError::Taken(_))
    ));
    publish(&d.join("done"), "");
    for k in &mut kids {
        k.join(Duration::from_secs(20));
    }
    // Detached: all free again.
    assert_eq!(t.live_slots().unwrap().len(), 1);
    assert!(all.iter().all(|&q| t.owner_of_qpn(q).is_none()));
}

#[test]
fn a_killed_processes_slot_and_entries_are_reclaimed() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let mut kid = Kid::spawn("hold", d);
    let ready = d.join(format!("ready-{}", kid.pid()));
    assert!(wait_for(&ready, Duration::from_secs(20)));
    let slot: u16 = std::fs::read_to_string(&ready).unwrap().parse().unwrap();
    let t = HostTable::attach_in(d, addr(), 4791, b"parent").unwrap();
    let info = t.owner_of_qpn(50).unwrap();
    assert_eq!((info.pid, info.slot), (kid.pid(), slot));
    assert_eq!(
        info.name.as_bytes(),
        format!("kid-{}", kid.pid()).as_bytes()
    );
    assert!(info.start_time > 0);
    assert!(matches!(t.claim_qpn(50), Err(HostError::Taken(s)) if s == slot));
    assert!(matches!(
        t.claim_listener(0x0106_0000_0000_4242),
        Err(HostError::Taken(_))
    ));
    let h = PortHolder {
        slot: 0,
        id: 1,
        addr: addr(),
        reuse: false,
        afonly: false,
    };
    assert!(matches!(
        t.bind_port(TCP, 7000, h),
        Err(HostError::Port(PortError::AddrInUse))
    ));
    assert!(!t.reap(slot).unwrap(), "alive");
    assert!(t.is_live(slot).unwrap());
    assert_eq!(t.live_slots().unwrap().len(), 2);

    kid.0.kill().unwrap();
    kid.0.wait().unwrap();
    let killed = Instant::now();
    // The kernel let go of its liveness lock with its files.
    while t.is_live(slot).unwrap() {
        assert!(killed.elapsed() < Duration::from_secs(2), "still live");
        std::thread::sleep(Duration::from_millis(1));
    }
    // Lookups still name the dead slot until someone reclaims it...
    assert_eq!(t.owner_of_qpn(50).map(|o| o.slot), Some(slot));
    // ... which a new attachment does at once.
    let t2 = HostTable::attach_in(d, addr(), 4791, b"second").unwrap();
    assert_eq!(t2.owner_of_qpn(50), None);
    assert_eq!(
        t.slot_info(slot).map(|s| s.pid),
        t2.slot_info(slot).map(|s| s.pid)
    );
    assert_ne!(t.slot_info(slot).map(|s| s.pid), Some(kid.pid()));
    t.claim_qpn(50).unwrap();
    t.claim_listener(0x0106_0000_0000_4242).unwrap();
    t.claim_comm_id(0x7777).unwrap();
    assert_eq!(t.bind_port(TCP, 7000, h).unwrap(), 7000);
    assert!(
        killed.elapsed() < Duration::from_secs(2),
        "{:?}",
        killed.elapsed()
    );
    assert_eq!(t.live_slots().unwrap().len(), 2);
    assert!((1..=100)
        .filter(|&q| q != 50)
        .all(|q| t.owner_of_qpn(q).is_none()));
}

#[test]
fn a_killed_process_is_reclaimed_by_a_claim_too() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let t = HostTable::attach_in(d, addr(), 4791, b"parent").unwrap();
    let mut kid = Kid::spawn("hold", d);
    let ready = d.join(format!("ready-{}", kid.pid()));
    assert!(wait_for(&ready, Duration::from_secs(20)));
    let slot: u16 = std::fs::read_to_string(&ready).unwrap().parse().unwrap();
    assert!(matches!(t.claim_comm_id(0x7777), Err(HostError::Taken(_))));
    kid.0.kill().unwrap();
    kid.0.wait().unwrap();
    // No attach in between: the claim meets the dead owner and reclaims.
    t.claim_comm_id(0x7777).unwrap();
    assert_eq!(t.slot_info(slot), None);
    assert_eq!(t.owner_of_qpn(1), None);
    assert!(!t.reap(slot).unwrap());
}

#[test]
fn a_file_of_another_user_or_open_to_others_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let uid = nix::unistd::geteuid().as_raw();
    let path = table_path(d, uid, addr(), 4791);

    // Open to the group: refused, left as it was.
    std::fs::write(&path, b"").unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o660)).unwrap();
    let e = HostTable::attach_in(d, addr(), 4791, b"x").unwrap_err();
    assert!(
        matches!(e, HostError::Permissions { mode: 0o660, .. }),
        "{e}"
    );
    assert_eq!(std::fs::metadata(&path).unwrap().len(), 0, "not touched");
    std::fs::remove_file(&path).unwrap();

    // A symbolic link (to a file of this user's, even): refused.
    let target = d.join("elsewhere");
    std::fs::write(&target, b"").unwrap();
    std::os::unix::fs::symlink(&target, &path).unwrap();
    let e = HostTable::attach_in(d, addr(), 4791, b"x").unwrap_err();
    assert!(matches!(e, HostError::Open(..)), "{e}");
    assert_eq!(std::fs::metadata(&target).unwrap().len(), 0);
    std::fs::remove_file(&path).unwrap();

    // A directory: refused.
    std::fs::create_dir(&path).unwrap();
    assert!(HostTable::attach_in(d, addr(), 4791, b"x").is_err());
    std::fs::remove_dir(&path).unwrap();

    // Pre-created by another user (possible to set up as root only).
    if uid == 0 {
        let bytes = vec![0u8; 4096];
        std::fs::write(&path, &bytes).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        nix::unistd::chown(&path, Some(65534.into()), Some(65534.into())).unwrap();
        let e = HostTable::attach_in(d, addr(), 4791, b"x").unwrap_err();
        assert!(matches!(e, HostError::Foreign { owner: 65534, .. }), "{e}");
        assert!(e.to_string().contains("belongs to user 65534"), "{e}");
        let st = std::fs::metadata(&path).unwrap();
        assert_eq!((st.len(), st.uid()), (4096, 65534), "not touched");
        assert_eq!(std::fs::read(&path).unwrap(), bytes);
    } else {
        eprintln!("not root: the other-user case needs chown, skipped");
    }
}

#[test]
fn garbage_in_the_file_is_an_error_at_attach_and_never_a_panic_after() {
    use std::os::unix::fs::FileExt;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let uid = nix::unistd::geteuid().as_raw();
    let path = table_path(d, uid, addr(), 4791);
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let mut rnd = |n: usize| -> Vec<u8> {
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect()
    };
    // A valid table's length, for the header-only garbage below (its
    // file goes with its last process: docs/host.md, "The file's life").
    let len = {
        let t = HostTable::attach_in(d, addr(), 4791, b"probe").unwrap();
        std::fs::metadata(t.path()).unwrap().len()
    };
    assert!(!path.exists());
    // Garbage of any length, or garbage in the header of the right
    // length: an error, every time.
    for round in 0..64 {
        let f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(&path)
            .unwrap();
        if round % 2 == 0 {
            f.set_len(0).unwrap();
            f.write_all_at(&rnd(round * 97 + 1), 0).unwrap();
        } else {
            f.set_len(len).unwrap();
            f.write_all_at(&rnd(8 + round), 0).unwrap();
        }
        drop(f);
        match HostTable::attach_in(d, addr(), 4791, b"x") {
            Err(HostError::Corrupt(_)) => {}
            other => panic!("round {round}: {other:?}"),
        }
    }
    // A valid table whose body another process fills with garbage while
    // this one uses it: lookups, claims and reclaims answer something,
    // never panic, and stay bounded.
    std::fs::remove_file(&path).unwrap();
    let t = HostTable::attach_in(d, addr(), 4791, b"victim").unwrap();
    let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    let start = Instant::now();
    for round in 0..12 {
        // Keep the 128-byte header, so the table stays attachable.
        f.write_all_at(&rnd(len as usize - 128), 128).unwrap();
        for i in 0..2000u32 {
            let q = i.wrapping_mul(0x9e37_79b9) & 0xff_ffff;
            let _ = t.owner_of_qpn(q);
            let _ = t.owner_of_listener(u64::from(q) << 20);
            let _ = t.owner_of_comm_id(q);
            let _ = t.slot_info(i as u16);
        }
        for q in 0..50 {
            let _ = t.claim_qpn(q);
            let _ = t.release_qpn(q ^ 1);
        }
        let h = PortHolder {
            slot: 0,
            id: round,
            addr: addr(),
            reuse: round % 2 == 0,
            afonly: false,
        };
        let _ = t.bind_port(TCP, 0, h);
        let _ = t.bind_port(TCP, 9000, h);
        let _ = t.listen_port(TCP, 9000, round);
        let _ = t.release_ports(round);
        // Every garbage slot is dead (no process holds its lock): gone.
        let live = t.live_slots().unwrap();
        assert!(live.len() <= 1, "round {round}: {} live", live.len());
        let _ = HostTable::attach_in(d, addr(), 4791, &[b'n'; NAME_MAX]);
    }
    assert!(start.elapsed() < Duration::from_secs(60));
}
