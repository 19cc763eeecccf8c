//! One device address shared by many processes (issue 32, item 7;
//! docs/dropin.md "Devices and addresses", docs/host.md): unmodified
//! programs on the drop-in libraries in two network namespaces joined by
//! a veth, every process of a side on that side's one address.
//!
//! * eight `ib_write_bw` / `ibv_rc_pingpong -c` pairs (QPs exchanged over
//!   TCP), and eight `rping -V` pairs (rdma_cm: each REQ must reach the
//!   process listening on its port), all at once, data verified;
//! * a process killed with SIGKILL in the middle of the traffic of four
//!   pairs: the other pairs finish, the killed one's peer fails in
//!   bounded time, and a new process takes the address at once;
//! * a process of another user (`nobody`) cannot join the address a root
//!   process holds (`EADDRINUSE`; on loopback it moves to 127.0.0.2) nor
//!   read the table, which is mode 0600;
//! * a process with `ROCE_SHM=0` and a sharing one exclude each other.
//!
//! Needs root and `ip netns` (skips with the reason otherwise) and the
//! programs (required in CI: `ROCE_REQUIRE_RDMA_TOOLS`,
//! `ROCE_REQUIRE_C_HEADERS`).

mod common;

use std::net::Ipv4Addr;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use common::have;
use roce_testkit::netns::VethPair;
use roce_testkit::{text_of, Group};

/// One test at a time: each runs up to 18 processes of the debug build.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// Namespaces `a` and `b` joined by a veth, one address at each end, and
/// the directory with the drop-in libraries.
struct Lab {
    pair: VethPair,
    libs: PathBuf,
}

impl std::ops::Deref for Lab {
    type Target = VethPair;
    fn deref(&self) -> &VethPair {
        &self.pair
    }
}

impl Lab {
    /// `None` (a printed skip) without root or `ip netns`.
    fn new(tag: &str) -> Option<Lab> {
        match VethPair::new(tag, 97, 1) {
            Ok(pair) => Some(Lab {
                pair,
                libs: common::dropin("dropin-shared-device"),
            }),
            Err(e) => {
                eprintln!("skipped: {e}");
                None
            }
        }
    }

    fn dev_a(&self) -> String {
        format!("roce_{}", self.va)
    }

    fn dev_b(&self) -> String {
        format!("roce_{}", self.vb)
    }

    fn ip_a(&self) -> Ipv4Addr {
        self.pair.ip_a.parse().unwrap()
    }

    /// `prog ARGS` in namespace `ns` on the drop-in, its devices `devices`
    /// (an interface name), logging which address each context took.
    fn command(&self, ns: &str, devices: &str, prog: &str, args: &[String]) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", ns, prog])
            .args(args)
            .env("LD_LIBRARY_PATH", &self.libs)
            .env("ROCE_DEVICES", devices)
            .env("ROCE_LOG", "1")
            // Tables in /dev/shm, whoever runs the program.
            .env_remove("XDG_RUNTIME_DIR");
        for v in [
            "ROCE_ADDR",
            "ROCE_PORT",
            "ROCE_SHM",
            "ROCE_BACKEND",
            "ROCE_ACK_DELAY",
        ] {
            c.env_remove(v);
        }
        c
    }

    fn in_a(&self, prog: &str, args: &[String]) -> Command {
        self.command(&self.a, &self.va, prog, args)
    }

    fn in_b(&self, prog: &str, args: &[String]) -> Command {
        self.command(&self.b, &self.vb, prog, args)
    }

    /// The inode of namespace `a` (host table names carry it).
    fn netns_inode_a(&self) -> u64 {
        std::fs::metadata(format!("/run/netns/{}", self.a))
            .unwrap()
            .ino()
    }
}

impl Drop for Lab {
    /// Removes the host tables of this lab's namespaces (their names
    /// carry the namespace's inode, which a later namespace may reuse).
    fn drop(&mut self) {
        let mut inodes = Vec::new();
        for ns in [&self.pair.a, &self.pair.b] {
            if let Ok(m) = std::fs::metadata(format!("/run/netns/{ns}")) {
                inodes.push(format!("-net{}-", m.ino()));
            }
        }
        for f in tables() {
            let name = f.file_name().unwrap().to_string_lossy().into_owned();
            if inodes.iter().any(|i| name.contains(i.as_str())) {
                let _ = std::fs::remove_file(&f);
            }
        }
    }
}

/// The host tables in /dev/shm.
fn tables() -> Vec<PathBuf> {
    std::fs::read_dir("/dev/shm")
        .map(|d| {
            d.filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| {
                    p.file_name()
                        .is_some_and(|n| n.to_string_lossy().starts_with("roce-host-"))
                })
                .collect()
        })
        .unwrap_or_default()
}

fn strings(a: &[&str]) -> Vec<String> {
    a.iter().map(|s| s.to_string()).collect()
}

/// Whether process `pid`'s network namespace has a TCP listener on `port`.
fn listening_in(pid: u32, port: u16) -> bool {
    let want = format!(":{port:04X}");
    ["tcp", "tcp6"].iter().any(|f| {
        std::fs::read_to_string(format!("/proc/{pid}/net/{f}"))
            .unwrap_or_default()
            .lines()
            .any(|l| {
                let cols: Vec<&str> = l.split_whitespace().collect();
                cols.len() > 3 && cols[1].ends_with(&want) && cols[3] == "0A"
            })
    })
}

/// How many UDP sockets of process `pid`'s network namespace are bound
/// to `addr`, port 4791.
fn roce_sockets_in(pid: u32, addr: Ipv4Addr) -> usize {
    let want = format!("{:08X}:12B7", u32::from_le_bytes(addr.octets()));
    std::fs::read_to_string(format!("/proc/{pid}/net/udp"))
        .unwrap_or_default()
        .lines()
        .filter(|l| l.split_whitespace().nth(1) == Some(want.as_str()))
        .count()
}

/// Waits (at most 20 s) until `ready` holds, failing if one of `procs`
/// exits first.
fn wait_ready(
    procs: &mut [(String, Group)],
    what: &str,
    ready: impl Fn(&[(String, Group)]) -> bool,
) {
    let end = Instant::now() + Duration::from_secs(20);
    while !ready(procs) {
        for (name, g) in procs.iter_mut() {
            assert!(!g.exited(), "{name} exited before {what}");
        }
        assert!(Instant::now() < end, "{what}: not within 20 s");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits for every process until `end`: (name, output, timed out).
fn wait_all(procs: Vec<(String, Group)>, end: Instant) -> Vec<(String, Output, bool)> {
    procs
        .into_iter()
        .map(|(name, g)| {
            let (o, late) = g.wait(end);
            (name, o, late)
        })
        .collect()
}

/// Everything each process printed, for a failure's message.
fn report(all: &[(String, Output, bool)]) -> String {
    all.iter()
        .map(|(n, o, late)| {
            format!(
                "=== {n}: {:?}{}\n{}",
                o.status,
                if *late { " (timed out)" } else { "" },
                text_of(o)
            )
        })
        .collect()
}

/// The bandwidth on perftest's result row for `size`, if it printed one.
fn result_row(out: &str, size: &str) -> Option<f64> {
    let row = out.lines().find(|l| l.trim_start().starts_with(size))?;
    row.split_whitespace().nth(3)?.parse().ok()
}

/// Asserts each process said (ROCE_LOG) it opened on `addr`, and on no
/// other address.
fn all_opened_on(all: &[(String, Output, bool)], addr: &str) {
    for (name, o, _) in all {
        let text = text_of(o);
        let opened: Vec<&str> = text.lines().filter(|l| l.contains(" opened on ")).collect();
        assert!(
            !opened.is_empty()
                && opened
                    .iter()
                    .all(|l| l.contains(&format!(" opened on {addr}"))),
            "{name} did not open on {addr} alone: {opened:?}\n{}",
            report(all)
        );
    }
}

/// Eight pairs at once, QPs exchanged over TCP: four `ib_write_bw` and
/// four `ibv_rc_pingpong -c` (the server validates what it received);
/// every server on namespace `a`'s one address, every client on `b`'s.
#[test]
fn eight_verbs_pairs_share_one_address_per_namespace() {
    if !have("ib_write_bw") || !have("ibv_rc_pingpong") {
        return;
    }
    let _one = serial();
    let Some(lab) = Lab::new("sv") else {
        return;
    };
    let t0 = Instant::now();
    let (da, db) = (lab.dev_a(), lab.dev_b());
    let prog = |i: usize| {
        if i < 4 {
            "ib_write_bw"
        } else {
            "ibv_rc_pingpong"
        }
    };
    let args = |i: usize, dev: &str| -> Vec<String> {
        let port = (18515 + i).to_string();
        if i < 4 {
            strings(&[
                "-d", dev, "-x", "0", "-p", &port, "-n", "300", "-s", "65536",
            ])
        } else {
            strings(&["-d", dev, "-g", "0", "-p", &port, "-n", "200", "-c"])
        }
    };
    let mut servers: Vec<(String, Group)> = (0..8)
        .map(|i| {
            let c = lab.in_a(prog(i), &args(i, &da));
            (format!("server {i} ({})", prog(i)), Group::spawn(c))
        })
        .collect();
    wait_ready(&mut servers, "all eight servers listen", |s| {
        s.iter()
            .enumerate()
            .all(|(i, (_, g))| listening_in(g.id(), 18515 + i as u16))
    });
    let clients: Vec<(String, Group)> = (0..8)
        .map(|i| {
            let mut a = args(i, &db);
            a.push(lab.ip_a.clone());
            (
                format!("client {i} ({})", prog(i)),
                Group::spawn(lab.in_b(prog(i), &a)),
            )
        })
        .collect();
    let end = Instant::now() + Duration::from_secs(60);
    let clients = wait_all(clients, end);
    let servers = wait_all(servers, end);
    let all: Vec<_> = servers.into_iter().chain(clients).collect();
    for (name, o, late) in &all {
        assert!(
            o.status.success() && !late,
            "{name} failed\n{}",
            report(&all)
        );
    }
    let (servers, clients) = all.split_at(8);
    for i in 0..8 {
        let (st, ct) = (text_of(&servers[i].1), text_of(&clients[i].1));
        if i < 4 {
            let bw = result_row(&ct, "65536");
            assert!(bw.is_some_and(|b| b > 0.0), "no result row:\n{ct}");
        } else {
            for out in [&st, &ct] {
                assert!(out.contains("200 iters in"), "{out}");
                assert!(!out.contains("invalid data"), "{out}");
                assert!(out.contains(&format!("GID ::ffff:{}", lab.ip_a)), "{out}");
            }
        }
    }
    all_opened_on(servers, &lab.ip_a);
    all_opened_on(clients, &lab.ip_b);
    eprintln!("eight verbs pairs: {:?}", t0.elapsed());
}

/// Whether an `rping` client verified all `count` pings and ended well:
/// exit 0, or rping's own race at its end (its CM thread, woken by the
/// DISCONNECTED event, calls `rdma_get_cm_event` again on the channel
/// `main` is destroying, fails with EBADF and calls `exit(-1)`; it has
/// nothing to do with the transfer, and happens with the kernel's
/// librdmacm too, only more rarely).
fn rping_client_ok(o: &Output, count: usize) -> bool {
    let text = text_of(o);
    let all = text.contains(&format!("ping data: rdma-ping-{}: ", count - 1));
    let racy_end = o.status.code() == Some(255)
        && text.contains("client DISCONNECT EVENT")
        && text.contains("rdma_get_cm_event: Bad file descriptor");
    all && (o.status.success() || racy_end)
}

/// Eight `rping -V` clients at once over rdma_cm, each to its own
/// server (`persistent`: `-P`, which serves connections until killed)
/// listening on its own port of namespace `a`'s one address: each
/// connection request reaches the process listening on its port,
/// whichever process the kernel handed it to, and each client checks
/// every ping's data. Returns every process's output (servers first).
fn eight_rping_pairs(lab: &Lab, persistent: bool) -> Vec<(String, Output, bool)> {
    const COUNT: usize = 50;
    let port = |i: usize| (7471 + i).to_string();
    let mut servers: Vec<(String, Group)> = (0..8)
        .map(|i| {
            let mut a = strings(&["-s", "-a", &lab.ip_a, "-p", &port(i), "-V", "-C", "50"]);
            if persistent {
                a.push("-P".into());
            }
            (
                format!("rping server {i}"),
                Group::spawn(lab.in_a("rping", &a)),
            )
        })
        .collect();
    let ip_a = lab.ip_a();
    wait_ready(&mut servers, "all eight servers bind the address", |s| {
        roce_sockets_in(s[0].1.id(), ip_a) == 8
    });
    // From binding to listening a server makes no network round trip.
    std::thread::sleep(Duration::from_millis(500));
    let clients: Vec<(String, Group)> = (0..8)
        .map(|i| {
            let a = strings(&[
                "-c",
                "-a",
                &lab.ip_a,
                "-p",
                &port(i),
                "-v",
                "-V",
                "-C",
                "50",
            ]);
            (
                format!("rping client {i}"),
                Group::spawn(lab.in_b("rping", &a)),
            )
        })
        .collect();
    let end = Instant::now() + Duration::from_secs(60);
    let clients = wait_all(clients, end);
    let servers = if persistent {
        for (name, g) in servers.iter_mut() {
            assert!(!g.exited(), "persistent {name} ended");
        }
        // Served everyone: end them (through their process groups).
        wait_all(servers, Instant::now())
    } else {
        wait_all(servers, end)
    };
    let all: Vec<_> = servers.into_iter().chain(clients).collect();
    for (name, o, late) in &all[8..] {
        assert!(
            rping_client_ok(o, COUNT) && !late,
            "{name} failed\n{}",
            report(&all)
        );
    }
    if !persistent {
        for (name, o, late) in &all[..8] {
            assert!(
                o.status.success() && !late,
                "{name} failed\n{}",
                report(&all)
            );
        }
    }
    let (servers, clients) = all.split_at(8);
    all_opened_on(servers, &lab.ip_a);
    all_opened_on(clients, &lab.ip_b);
    all
}

/// [`eight_rping_pairs`] with servers that stay: the CM's demultiplexing
/// (REQ to the listener's process, every later MAD to the connection's)
/// and the data path under eight concurrent connections, no process of
/// the shared address leaving meanwhile.
#[test]
fn eight_rdma_cm_pairs_share_one_address_per_namespace() {
    if !have("rping") {
        return;
    }
    let _one = serial();
    let Some(lab) = Lab::new("sc") else {
        return;
    };
    let t0 = Instant::now();
    eight_rping_pairs(&lab, true);
    eprintln!("eight rdma_cm pairs: {:?}", t0.elapsed());
}

/// [`eight_rping_pairs`] with servers that exit when their client
/// disconnects, so that members leave the shared address while other
/// clients' DREQs arrive. A process leaves the kernel's `SO_REUSEPORT`
/// selection first at exit and hands on what it had taken
/// (`Backend::leave`): otherwise a datagram the kernel handed to a
/// process that stopped reading would be lost, and a client that sends
/// its one DREQ and exits never resends it, so the server it named would
/// wait for DISCONNECTED forever (about one run in eight).
#[test]
fn eight_rdma_cm_pairs_with_leaving_servers() {
    if !have("rping") {
        return;
    }
    let _one = serial();
    let Some(lab) = Lab::new("sl") else {
        return;
    };
    let t0 = Instant::now();
    eight_rping_pairs(&lab, false);
    eprintln!("eight rdma_cm pairs, servers leaving: {:?}", t0.elapsed());
}

/// Four `ib_write_bw` pairs running for a few seconds, their servers on
/// one address; one server is killed with SIGKILL mid-run. The other
/// three pairs finish with their results, the killed server's client
/// fails in bounded time, and meanwhile a new server takes the address
/// and completes a run with a new client.
#[test]
fn killed_process_leaves_the_others_on_the_address_running() {
    if !have("ib_write_bw") {
        return;
    }
    let _one = serial();
    let Some(lab) = Lab::new("sk") else {
        return;
    };
    let t0 = Instant::now();
    let (da, db) = (lab.dev_a(), lab.dev_b());
    let args = |i: usize, dev: &str, run: &[&str]| -> Vec<String> {
        let port = (18515 + i).to_string();
        let mut a = strings(&["-d", dev, "-x", "0", "-p", &port, "-s", "65536"]);
        a.extend(strings(run));
        a
    };
    let long = ["-D", "6"];
    let mut servers: Vec<(String, Group)> = (0..4)
        .map(|i| {
            let c = lab.in_a("ib_write_bw", &args(i, &da, &long));
            (format!("server {i}"), Group::spawn(c))
        })
        .collect();
    wait_ready(&mut servers, "all four servers listen", |s| {
        s.iter()
            .enumerate()
            .all(|(i, (_, g))| listening_in(g.id(), 18515 + i as u16))
    });
    let mut clients: Vec<(String, Group)> = (0..4)
        .map(|i| {
            let mut a = args(i, &db, &long);
            a.push(lab.ip_a.clone());
            (
                format!("client {i}"),
                Group::spawn(lab.in_b("ib_write_bw", &a)),
            )
        })
        .collect();
    // Well into the transfers (perftest's duration mode warms up first).
    std::thread::sleep(Duration::from_millis(2500));
    for (name, g) in servers.iter_mut().chain(clients.iter_mut()) {
        assert!(!g.exited(), "{name} ended before the kill");
    }
    let victim = servers.remove(0);
    let killed_at = Instant::now();
    let kill = Command::new("kill")
        .args(["-KILL", &victim.1.id().to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
    let (vo, _) = victim.1.wait(Instant::now() + Duration::from_secs(5));
    assert!(!vo.status.success(), "{}", text_of(&vo));

    // A new process on the address, while the others run.
    let mut fresh = vec![(
        "new server".to_string(),
        Group::spawn(lab.in_a("ib_write_bw", &args(4, &da, &["-n", "300"]))),
    )];
    wait_ready(&mut fresh, "the new server listens", |s| {
        listening_in(s[0].1.id(), 18519)
    });
    let mut a = args(4, &db, &["-n", "300"]);
    a.push(lab.ip_a.clone());
    fresh.push((
        "new client".to_string(),
        Group::spawn(lab.in_b("ib_write_bw", &a)),
    ));
    let end = Instant::now() + Duration::from_secs(40);
    let fresh = wait_all(fresh, end);
    let orphan = clients.remove(0);
    let rest = wait_all(servers.into_iter().chain(clients).collect(), end);
    let (orphan_out, orphan_late) = orphan.1.wait(killed_at + Duration::from_secs(30));
    let all: Vec<_> = fresh
        .into_iter()
        .chain(rest)
        .chain([(
            "client 0 (of the killed server)".to_string(),
            orphan_out,
            orphan_late,
        )])
        .collect();
    let n = all.len();
    for (name, o, late) in &all[..n - 1] {
        assert!(
            o.status.success() && !late,
            "{name} failed\n{}",
            report(&all)
        );
    }
    for (name, o, _) in all.iter().filter(|(n, _, _)| n.contains("client")).take(4) {
        let ct = text_of(o);
        assert!(
            result_row(&ct, "65536").is_some_and(|b| b > 0.0),
            "{name}: no result row\n{ct}"
        );
    }
    let (_, o, late) = &all[n - 1];
    assert!(
        !late && !o.status.success(),
        "the killed server's client did not fail within 30 s\n{}",
        report(&all)
    );
    all_opened_on(&all[..n - 1], "10.97.");
    eprintln!(
        "kill: {:?}; the orphaned client failed after {:?}",
        t0.elapsed(),
        killed_at.elapsed()
    );
}

/// A directory every user can read holding the drop-in libraries and
/// `exe`, removed on drop.
struct Public(PathBuf);

impl Public {
    fn new(libs: &Path, exe: &Path) -> Public {
        let dir = std::env::temp_dir().join(format!("roce-shared-device-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        for lib in ["libibverbs.so.1", "librdmacm.so.1"] {
            std::fs::copy(libs.join(lib), dir.join(lib)).unwrap();
        }
        std::fs::copy(exe, dir.join(exe.file_name().unwrap())).unwrap();
        for f in std::fs::read_dir(&dir).unwrap() {
            let f = f.unwrap().path();
            std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        Public(dir)
    }
}

impl Drop for Public {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `tests/c/shared_open.c`, or `None` (a printed skip).
fn shared_open() -> Option<PathBuf> {
    common::c_program_linked(
        "shared_open",
        "infiniband/verbs.h",
        &["-libverbs"],
        "libibverbs-dev",
    )
}

/// Runs `shared_open DEVICE` (bounded) as `cmd` built it.
fn probe(cmd: Command) -> String {
    let (o, late) = Group::spawn(cmd).wait(Instant::now() + Duration::from_secs(20));
    assert!(!late, "shared_open did not finish: {}", text_of(&o));
    text_of(&o)
}

/// Starts `shared_open DEVICE 60` as `cmd` built it and waits until it
/// holds `addr` in its namespace.
fn holder(cmd: Command, addr: Ipv4Addr) -> Group {
    let mut h = vec![("holder".to_string(), Group::spawn(cmd))];
    wait_ready(&mut h, "the holder binds its address", |h| {
        roce_sockets_in(h[0].1.id(), addr) > 0
    });
    h.pop().unwrap().1
}

/// While root processes hold the veth address and 127.0.0.1 in namespace
/// `a`, a process of `nobody` cannot join either: on the veth address its
/// open fails with EADDRINUSE, on loopback it moves to 127.0.0.2. Root's
/// table of the address is mode 0600, owned by root, and `nobody` cannot
/// read it; a second root process does join (GID 0 the same address).
#[test]
fn another_user_cannot_join_a_shared_address() {
    let Some(exe) = shared_open() else {
        return;
    };
    let _one = serial();
    let Some(lab) = Lab::new("su") else {
        return;
    };
    let t0 = Instant::now();
    let public = Public::new(&lab.libs, &exe);
    let exe = public.0.join("shared_open");
    let exe = exe.to_str().unwrap();
    let mut lab = lab;
    lab.libs = public.0.clone();
    let lab = lab;
    let (da, ip_a) = (lab.dev_a(), lab.ip_a());
    let as_nobody = |dev: &str, devices: &str| {
        let mut c = lab.command(
            &lab.a,
            devices,
            "setpriv",
            &strings(&["--reuid=65534", "--regid=65534", "--clear-groups", exe, dev]),
        );
        c.current_dir(&public.0);
        c
    };
    let _veth = holder(lab.in_a(exe, &strings(&[&da, "60"])), ip_a);
    let _lo = holder(
        lab.command(&lab.a, "lo", exe, &strings(&["roce_lo", "60"])),
        Ipv4Addr::LOCALHOST,
    );

    // The same user joins.
    let out = probe(lab.in_a(exe, &strings(&[&da])));
    assert!(
        out.contains(&format!("opened gid0 ::ffff:{ip_a}\n")),
        "{out}"
    );
    let out = probe(lab.command(&lab.a, "lo", exe, &strings(&["roce_lo"])));
    assert!(out.contains("opened gid0 ::ffff:127.0.0.1\n"), "{out}");

    // Another user does not.
    let out = probe(as_nobody(&da, &lab.va));
    assert!(
        out.contains(&format!("open failed: errno {}", libc::EADDRINUSE)),
        "{out}"
    );
    assert!(out.contains("in use"), "{out}");
    let out = probe(as_nobody("roce_lo", "lo"));
    assert!(out.contains("opened gid0 ::ffff:127.0.0.2\n"), "{out}");

    // Nor read the table.
    let name = format!("roce-host-0-net{}-{ip_a}-4791", lab.netns_inode_a());
    let table = Path::new("/dev/shm").join(&name);
    let m = std::fs::metadata(&table)
        .unwrap_or_else(|e| panic!("{}: {e}; tables: {:?}", table.display(), tables()));
    assert_eq!(m.mode() & 0o777, 0o600, "{name}");
    assert_eq!(m.uid(), 0, "{name}");
    let mut cat = Command::new("setpriv");
    cat.args(["--reuid=65534", "--regid=65534", "--clear-groups", "cat"])
        .arg(&table);
    let (o, late) = Group::spawn(cat).wait(Instant::now() + Duration::from_secs(10));
    assert!(!late && !o.status.success(), "{}", text_of(&o));
    assert!(text_of(&o).contains("Permission denied"), "{}", text_of(&o));
    eprintln!("another user: {:?}", t0.elapsed());
}

/// `ROCE_SHM=0` holds its address alone: a sharing process's open on an
/// address such a process holds fails with EADDRINUSE (on loopback it
/// moves to 127.0.0.2), and the other way round.
#[test]
fn unshared_and_shared_processes_exclude_each_other() {
    let Some(exe) = shared_open() else {
        return;
    };
    let _one = serial();
    let Some(lab) = Lab::new("sn") else {
        return;
    };
    let t0 = Instant::now();
    let exe = exe.to_str().unwrap();
    let (da, ip_a) = (lab.dev_a(), lab.ip_a());
    let on = |dev: &str, devices: &str, shm: bool, hold: bool| {
        let mut a = strings(&[dev]);
        if hold {
            a.push("60".into());
        }
        let mut c = lab.command(&lab.a, devices, exe, &a);
        if !shm {
            c.env("ROCE_SHM", "0");
        }
        c
    };
    let in_use = format!("open failed: errno {}", libc::EADDRINUSE);
    for holder_shares in [true, false] {
        let h_veth = holder(on(&da, &lab.va, holder_shares, true), ip_a);
        let h_lo = holder(
            on("roce_lo", "lo", holder_shares, true),
            Ipv4Addr::LOCALHOST,
        );
        // Neither an unshared process nor (when the holder does not
        // share) a sharing one gets the address.
        let mut others = vec![false];
        if !holder_shares {
            others.push(true);
        }
        for shm in others {
            let what = format!("holder shares: {holder_shares}, prober shares: {shm}");
            let out = probe(on(&da, &lab.va, shm, false));
            assert!(out.contains(&in_use), "{what}\n{out}");
            let out = probe(on("roce_lo", "lo", shm, false));
            assert!(
                out.contains("opened gid0 ::ffff:127.0.0.2\n"),
                "{what}\n{out}"
            );
        }
        drop((h_veth, h_lo));
    }
    eprintln!("ROCE_SHM=0: {:?}", t0.elapsed());
}
