//! `roce perf` between two processes on two "hosts": two network
//! namespaces joined by a veth pair that each test creates (and removes,
//! with everything in them, on drop — also on panic). Every operation runs
//! over both backends (UDP and AF_PACKET) with data verification, then
//! again with `tc netem` loss, reordering, duplication and delay on the
//! veth. The AF_PACKET runs are captured on the wire (tcpdump, when
//! installed) and through `--pcap`, and `roce inspect` must find every
//! ICRC valid in both directions. `roce devinfo` is checked against a veth
//! with known MTUs and addresses.
//!
//! Needs root and `ip netns`; skips with a printed reason otherwise.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::Value;

const ROCE: &str = env!("CARGO_BIN_EXE_roce");
const ALL_TESTS: [&str; 8] = [
    "write-bw",
    "read-bw",
    "send-bw",
    "atomic-bw",
    "write-lat",
    "read-lat",
    "send-lat",
    "atomic-lat",
];
/// Longest a single `roce perf` process may take.
const RUN_LIMIT: Duration = Duration::from_secs(40);

fn sh(cmd: &str, args: &[&str]) -> Result<(), String> {
    let o = Command::new(cmd)
        .args(args)
        .output()
        .map_err(|e| format!("{cmd}: {e}"))?;
    if o.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{cmd} {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&o.stderr).trim()
        ))
    }
}

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .and_then(|l| l.split_whitespace().nth(2).map(|e| e == "0"))
        })
        .unwrap_or(false)
}

/// A network namespace, deleted on drop.
struct Netns {
    name: String,
}

impl Netns {
    fn new(name: String) -> Result<Netns, String> {
        sh("ip", &["netns", "add", &name])?;
        Ok(Netns { name })
    }

    fn exec(&self, args: &[&str]) -> Result<(), String> {
        let mut all = vec!["netns", "exec", &self.name];
        all.extend_from_slice(args);
        sh("ip", &all)
    }

    fn command(&self, program: &str) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.name, program]);
        c
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = sh("ip", &["netns", "del", &self.name]);
    }
}

/// Two namespaces `a` (the server, `.1`) and `b` (the client, `.2`) on
/// one /24 of 10.99.0.0/16, joined by veth `va` — `vb`.
struct Lab {
    a: Netns,
    b: Netns,
    va: String,
    vb: String,
    ip_a: String,
    ip_b: String,
}

impl Lab {
    /// Creates the pair, or says why it cannot (the caller skips).
    fn new() -> Result<Lab, String> {
        if !is_root() {
            return Err("not root".into());
        }
        static N: AtomicU32 = AtomicU32::new(0);
        let n = N.fetch_add(1, Ordering::SeqCst);
        let id = format!("{}{n}", std::process::id() % 100_000);
        let a =
            Netns::new(format!("rpa{id}")).map_err(|e| format!("ip netns unavailable ({e})"))?;
        let b = Netns::new(format!("rpb{id}"))?;
        let (va, vb) = (format!("rva{id}"), format!("rvb{id}"));
        let net = 1 + (std::process::id() + n) % 250;
        let (ip_a, ip_b) = (format!("10.99.{net}.1"), format!("10.99.{net}.2"));
        sh(
            "ip",
            &[
                "link", "add", &va, "netns", &a.name, "type", "veth", "peer", "name", &vb, "netns",
                &b.name,
            ],
        )?;
        for (ns, dev, ip, ip6) in [
            (&a, &va, &ip_a, format!("fd99:{net:x}::1/64")),
            (&b, &vb, &ip_b, format!("fd99:{net:x}::2/64")),
        ] {
            ns.exec(&["ip", "addr", "add", &format!("{ip}/24"), "dev", dev])?;
            ns.exec(&["ip", "-6", "addr", "add", &ip6, "dev", dev, "nodad"])?;
            ns.exec(&["ip", "link", "set", dev, "up"])?;
            ns.exec(&["ip", "link", "set", "lo", "up"])?;
        }
        Ok(Lab {
            a,
            b,
            va,
            vb,
            ip_a,
            ip_b,
        })
    }

    /// Loss, reordering, duplication and delay on both ends of the veth
    /// with `tc netem`. Returns the `roce perf` flags that inject the same
    /// faults instead when this kernel has no netem (`sch_netem`).
    fn netem(&self) -> Vec<&'static str> {
        match self.try_netem() {
            Ok(()) => vec![],
            Err(e) if e.contains("qdisc kind is unknown") => {
                println!(
                    "tc netem is not available in this kernel ({e}): injecting the same faults with roce perf --faults"
                );
                vec!["--faults", "loss=2%,reorder=5%,delay=1ms,duplicate=1%"]
            }
            Err(e) => panic!("tc netem: {e}"),
        }
    }

    fn try_netem(&self) -> Result<(), String> {
        for (ns, dev) in [(&self.a, &self.va), (&self.b, &self.vb)] {
            ns.exec(&[
                "tc",
                "qdisc",
                "add",
                "dev",
                dev,
                "root",
                "netem",
                "loss",
                "2%",
                "reorder",
                "5%",
                "delay",
                "1ms",
                "duplicate",
                "1%",
            ])?;
        }
        Ok(())
    }
}

macro_rules! lab_or_skip {
    () => {
        match Lab::new() {
            Ok(l) => l,
            Err(why) => {
                println!("skipped: {why}");
                return;
            }
        }
    };
}

/// A child process killed on drop (a failing test leaves nothing behind).
struct Guard(Child);

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Guard {
    /// Waits for the exit, killing the process after `limit`.
    fn wait_output(mut self, limit: Duration) -> Result<Output, String> {
        let end = Instant::now() + limit;
        loop {
            match self.0.try_wait() {
                Ok(Some(_)) => break,
                Ok(None) if Instant::now() < end => std::thread::sleep(Duration::from_millis(5)),
                Ok(None) => return Err(format!("still running after {limit:?}: killed")),
                Err(e) => return Err(e.to_string()),
            }
        }
        let mut out = Vec::new();
        let mut err = Vec::new();
        if let Some(mut o) = self.0.stdout.take() {
            std::io::Read::read_to_end(&mut o, &mut out).map_err(|e| e.to_string())?;
        }
        if let Some(mut e) = self.0.stderr.take() {
            std::io::Read::read_to_end(&mut e, &mut err).map_err(|e| e.to_string())?;
        }
        let status = self.0.wait().map_err(|e| e.to_string())?;
        Ok(Output {
            status,
            stdout: out,
            stderr: err,
        })
    }
}

/// Starts `program` in `ns` and waits until a line of its stderr contains
/// `ready`; the rest of stderr is collected and handed back at the end.
fn spawn_ready(
    ns: &Netns,
    program: &str,
    args: &[&str],
    ready: &str,
) -> Result<(Guard, mpsc::Receiver<String>), String> {
    let mut c = ns
        .command(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("{program}: {e}"))?;
    let stderr = c.stderr.take().expect("piped");
    let guard = Guard(c);
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let end = Instant::now() + Duration::from_secs(10);
    let mut seen = String::new();
    while Instant::now() < end {
        match rx.recv_timeout(Duration::from_millis(50)) {
            Ok(l) if l.contains(ready) => return Ok((guard, rx)),
            Ok(l) => {
                seen.push_str(&l);
                seen.push('\n');
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        }
    }
    Err(format!("{program} {args:?} never became ready: {seen}"))
}

/// One `roce perf` run: server in `a`, client in `b`; returns the client's
/// JSON after checking that both ends succeeded and verified the data.
fn perf(lab: &Lab, test: &str, backend: &str, extra: &[&str], client_extra: &[&str]) -> Value {
    let iters = if test.ends_with("bw") { "64" } else { "40" };
    perf_n(lab, test, backend, iters, extra, client_extra)
}

/// [`perf`] with `iters` iterations.
fn perf_n(
    lab: &Lab,
    test: &str,
    backend: &str,
    iters: &str,
    extra: &[&str],
    client_extra: &[&str],
) -> Value {
    let size_args: &[&str] = if test.starts_with("atomic") {
        &[]
    } else if test.ends_with("bw") {
        &["-s", "8192"]
    } else {
        &["-s", "100"]
    };
    let mut common = vec![test, "--backend", backend, "-n", iters];
    common.extend_from_slice(size_args);
    common.extend_from_slice(extra);
    let (server, server_err) = spawn_ready(
        &lab.a,
        ROCE,
        &[&["perf"], &common[..]].concat(),
        "waiting for a client",
    )
    .unwrap_or_else(|e| panic!("{test}/{backend}: {e}"));
    let client = Guard(
        lab.b
            .command(ROCE)
            .arg("perf")
            .args(&common[..1])
            .arg(&lab.ip_a)
            .args(&common[1..])
            .args(client_extra)
            .arg("--json")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn the client"),
    );
    let c = client.wait_output(RUN_LIMIT);
    let s = server.wait_output(RUN_LIMIT);
    let server_err: Vec<String> = server_err.try_iter().collect();
    let c = c.unwrap_or_else(|e| panic!("{test}/{backend} client: {e}"));
    let s = s.unwrap_or_else(|e| panic!("{test}/{backend} server: {e}"));
    let (cout, cerr) = (
        String::from_utf8_lossy(&c.stdout),
        String::from_utf8_lossy(&c.stderr),
    );
    let sout = String::from_utf8_lossy(&s.stdout);
    assert!(
        c.status.success() && s.status.success(),
        "{test}/{backend}: client {:?} {cout} {cerr}\nserver {:?} {sout} {server_err:?}",
        c.status,
        s.status
    );
    assert!(sout.contains("Data verified  : yes"), "server: {sout}");
    let v: Value = serde_json::from_str(cout.lines().last().unwrap_or(""))
        .unwrap_or_else(|e| panic!("{test}/{backend}: not JSON ({e}): {cout}"));
    assert_eq!(v["test"], test);
    assert_eq!(v["verified"], true, "{v}");
    // The default MTU 4096 does not fit a 1500-byte link: both sides use
    // the largest path MTU that does.
    assert_eq!(v["mtu"], 1024, "{v}");
    let r = &v["results"][0];
    assert_eq!(r["iterations"].as_u64(), iters.parse().ok(), "{v}");
    v
}

/// Runs every test over `backend` (capturing on the wire and with
/// `--pcap` for AF_PACKET); returns the seconds each took.
fn every_test(lab: &Lab, backend: &str, extra: &[&str]) -> Vec<(String, f64)> {
    let dir = tempfile::tempdir().unwrap();
    let capture = backend == "packet";
    let mut times = Vec::new();
    for test in ALL_TESTS {
        let t0 = Instant::now();
        let wire = dir.path().join(format!("{test}-wire.pcap"));
        let tap = dir.path().join(format!("{test}-tap.pcap"));
        let dump = if capture { tcpdump(lab, &wire) } else { None };
        let tap_s = tap.to_string_lossy().to_string();
        let client_extra: Vec<&str> = if capture {
            vec!["--pcap", &tap_s]
        } else {
            vec![]
        };
        perf(lab, test, backend, extra, &client_extra);
        if let Some(d) = dump {
            stop_tcpdump(d);
            inspect_ok(&wire, &lab.ip_a, &lab.ip_b);
        }
        if capture {
            inspect_ok(&tap, &lab.ip_a, &lab.ip_b);
        }
        times.push((test.to_string(), t0.elapsed().as_secs_f64()));
    }
    times
}

/// Starts tcpdump on `va` (in `a`), RoCE only, or `None` if not installed.
fn tcpdump(lab: &Lab, file: &Path) -> Option<Guard> {
    static WARNED: std::sync::Once = std::sync::Once::new();
    if Command::new("tcpdump").arg("--version").output().is_err() {
        WARNED.call_once(|| println!("tcpdump not installed: checking the --pcap captures only"));
        return None;
    }
    let f = file.to_string_lossy();
    let args = [
        "-i",
        &lab.va,
        "-w",
        &f,
        "-U",
        "--immediate-mode",
        // A 64 MiB ring: at AF_PACKET rates the default 2 MiB drops most
        // of a run, and with it the few ACKs of the passive side.
        "-B",
        "65536",
        "-s",
        "0",
        "-Z",
        "root",
        "udp",
        "port",
        "4791",
    ];
    let (g, _) = spawn_ready(&lab.a, "tcpdump", &args, "listening on")
        .unwrap_or_else(|e| panic!("tcpdump: {e}"));
    Some(g)
}

fn stop_tcpdump(g: Guard) {
    // Let the last frames through the ring, then stop it cleanly (SIGINT
    // flushes the file).
    std::thread::sleep(Duration::from_millis(100));
    let _ = Command::new("kill")
        .args(["-INT", &g.0.id().to_string()])
        .status();
    let _ = g.wait_output(Duration::from_secs(5));
}

/// `roce inspect` exits 0 (every ICRC valid) and saw RoCE traffic from
/// both ends.
fn inspect_ok(file: &Path, ip_a: &str, ip_b: &str) {
    let o = Command::new(ROCE)
        .arg("inspect")
        .arg(file)
        .arg("--json")
        .output()
        .expect("run roce inspect");
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}: {}\n{}",
        file.display(),
        out.lines().last().unwrap_or(""),
        String::from_utf8_lossy(&o.stderr)
    );
    let v: Value = serde_json::from_str(out.lines().last().unwrap_or("")).expect("JSON summary");
    let s = &v["summary"];
    assert_eq!(s["icrc_failures"], 0, "{s}");
    assert_eq!(s["malformed"], 0, "{s}");
    assert!(s["roce_packets"].as_u64().unwrap_or(0) > 0, "{s}");
    for src in [ip_a, ip_b] {
        assert!(
            s["flows"]
                .as_array()
                .is_some_and(|f| f.iter().any(|f| f["src"] == src)),
            "{}: no packets from {src}: {s}",
            file.display()
        );
    }
}

#[test]
fn every_test_over_udp_between_namespaces() {
    let lab = lab_or_skip!();
    let t = every_test(&lab, "udp", &[]);
    println!("udp: {t:?}");
}

#[test]
fn every_test_over_af_packet_between_namespaces_captured() {
    let lab = lab_or_skip!();
    let t = every_test(&lab, "packet", &[]);
    println!("packet: {t:?}");
}

/// The liveness matrix's packet-backend rows (the UDP and fabric rows
/// are roce-verbs' `tests/liveness.rs`): every ping-pong (SEND, WRITE,
/// READ, FETCH_ADD) and the streams, 20,000 iterations between two
/// namespaces over AF_PACKET and over UDP, each bounded in time, data
/// verified.
#[test]
fn twenty_thousand_iterations_of_every_test_between_namespaces() {
    let lab = lab_or_skip!();
    for backend in ["packet", "udp"] {
        for test in ALL_TESTS {
            let t0 = Instant::now();
            perf_n(&lab, test, backend, "20000", &[], &[]);
            println!("{backend} {test}: 20000 iterations in {:.2?}", t0.elapsed());
        }
    }
}

#[test]
fn every_test_over_udp_with_netem() {
    let lab = lab_or_skip!();
    let faults = lab.netem();
    let t = every_test(&lab, "udp", &faults);
    println!("udp + netem: {t:?}");
}

#[test]
fn every_test_over_af_packet_with_netem_captured() {
    let lab = lab_or_skip!();
    let faults = lab.netem();
    let t = every_test(&lab, "packet", &faults);
    println!("packet + netem: {t:?}");
}

#[test]
fn packet_backend_with_dev_gid_index_and_vlan_flags() {
    let lab = lab_or_skip!();
    // -x 1 is the IPv6 address (GID 1: IPv4 first); --dev names the veth.
    let (da, db) = (lab.va.clone(), lab.vb.clone());
    let (server, _) = spawn_ready(
        &lab.a,
        ROCE,
        &[
            "perf",
            "write-bw",
            "--backend",
            "packet",
            "-n",
            "16",
            "-s",
            "3000",
            "-x",
            "1",
            "--dev",
            &da,
            "--vlan",
            "0",
        ],
        "waiting for a client",
    )
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let tap = dir.path().join("v6.pcap");
    let o = Guard(
        lab.b
            .command(ROCE)
            .args(["perf", "write-bw", &lab.ip_a, "--backend", "packet"])
            .args(["-n", "16", "-s", "3000", "-x", "1", "--dev", &db, "--json"])
            .args(["--vlan", "0", "--pcap"])
            .arg(&tap)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    )
    .wait_output(RUN_LIMIT)
    .unwrap();
    let s = server.wait_output(RUN_LIMIT).unwrap();
    assert!(
        o.status.success() && s.status.success(),
        "{}\n{}\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr),
        String::from_utf8_lossy(&s.stderr)
    );
    // The RoCE traffic went over IPv6 (GID 1), priority-tagged.
    let net: u32 = lab.ip_a.split('.').nth(2).unwrap().parse().unwrap();
    let (a6, b6) = (format!("fd99:{net:x}::1"), format!("fd99:{net:x}::2"));
    inspect_ok(&tap, &a6, &b6);
    // Flags refused with a one-line error.
    for (args, want) in [
        (
            vec!["perf", "write-bw", "--loopback", "--backend", "packet"],
            "packet backend",
        ),
        (vec!["perf", "write-bw", "--loopback", "-x", "1"], "-x"),
    ] {
        let o = Command::new(ROCE).args(&args).output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{args:?}: {err}");
        assert!(err.contains(want) && err.lines().count() == 1, "{err}");
    }
    // A GID index out of the table ends the tool at start-up, before it
    // connects (as perftest does): the client...
    let (server, server_err) = spawn_ready(
        &lab.a,
        ROCE,
        &["perf", "write-bw", "--backend", "packet"],
        "waiting for a client",
    )
    .unwrap();
    let o = lab
        .b
        .command(ROCE)
        .args([
            "perf",
            "write-bw",
            &lab.ip_a,
            "--backend",
            "packet",
            "-x",
            "9",
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("GID index 9 is not in the GID table"), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    // ... which never reached the server, still waiting.
    std::thread::sleep(Duration::from_millis(200));
    let server_err: Vec<String> = server_err.try_iter().collect();
    assert!(server_err.is_empty(), "{server_err:?}");
    drop(server);
    // ... and the server, before any client comes.
    let o = lab
        .a
        .command(ROCE)
        .args(["perf", "write-bw", "--backend", "packet", "-x", "9"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("GID index 9 is not in the GID table"), "{err}");
}

#[test]
fn devinfo_shows_veth_mtus_and_gids() {
    let lab = lab_or_skip!();
    lab.a
        .exec(&["ip", "link", "set", &lab.va, "mtu", "2128"])
        .unwrap();
    lab.b
        .exec(&["ip", "link", "set", &lab.vb, "mtu", "9000"])
        .unwrap();
    let devinfo = |ns: &Netns, args: &[&str]| {
        let o = ns.command(ROCE).arg("devinfo").args(args).output().unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8_lossy(&o.stdout).to_string()
    };
    // 2128 - 80 holds 2048 exactly; 9000 holds 4096.
    for (ns, dev, ip, mtu, active) in [
        (&lab.a, &lab.va, &lab.ip_a, 2128, 2048),
        (&lab.b, &lab.vb, &lab.ip_b, 9000, 4096),
    ] {
        let v: Value = serde_json::from_str(&devinfo(ns, &["--json"])).unwrap();
        let devs = v["devices"].as_array().unwrap();
        // The namespace's lo and the veth.
        assert_eq!(devs.len(), 2, "lo and the veth: {v}");
        let d = devs
            .iter()
            .find(|d| d["name"] == dev.as_str())
            .unwrap_or_else(|| panic!("no {dev}: {v}"));
        assert_eq!(d["name"], dev.as_str());
        assert_eq!(d["mtu"], mtu);
        assert_eq!(d["active_mtu"], active);
        assert_eq!(d["state"], "PORT_ACTIVE");
        let gids: Vec<&str> = d["gids"]
            .as_array()
            .unwrap()
            .iter()
            .map(|g| g["gid"].as_str().unwrap())
            .collect();
        assert_eq!(gids[0], format!("::ffff:{ip}"), "{d}");
        assert!(gids[1].starts_with("fd99:"), "{d}");
        assert!(gids.iter().any(|g| g.starts_with("fe80::")), "{d}");
        assert!(d["gids"]
            .as_array()
            .unwrap()
            .iter()
            .all(|g| g["type"] == "RoCE v2"));
        let text = devinfo(ns, &["-v", "-d", dev]);
        assert!(text.contains(&format!("hca_id:\troce_{dev}")), "{text}");
        assert!(
            text.contains(&format!("active_mtu:\t\t{active} (")),
            "{text}"
        );
        assert!(text.contains(&format!("GID[  0]:\t\t::ffff:{ip}, RoCE v2")));
        assert!(text.contains("max_qp_rd_atom:\t\t\t128"), "{text}");
    }
    // One byte less and 2048 no longer fits.
    lab.a
        .exec(&["ip", "link", "set", &lab.va, "mtu", "2127"])
        .unwrap();
    let v: Value = serde_json::from_str(&devinfo(&lab.a, &["-d", &lab.va, "--json"])).unwrap();
    assert_eq!(v["devices"][0]["active_mtu"], 1024, "{v}");
    // A down interface is listed only when named (lo stays).
    lab.a.exec(&["ip", "link", "set", &lab.va, "down"]).unwrap();
    let v: Value = serde_json::from_str(&devinfo(&lab.a, &["--json"])).unwrap();
    let names: Vec<&str> = v["devices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["lo"], "{v}");
    let v: Value = serde_json::from_str(&devinfo(&lab.a, &["--json", "-d", &lab.va])).unwrap();
    assert_eq!(v["devices"][0]["state"], "PORT_DOWN", "{v}");
}

/// Debian's `ib_write_bw -R` on the drop-in libraries (`roce exec --addr`)
/// as server, `roce perf --perftest -R` as client, between namespaces.
/// perftest opens the device itself, then listens through the RDMA CM on
/// the same address: the CM must use the program's context there (the
/// address's UDP port can be bound once; a second open failed with "UDP
/// port 4791 on ... is in use" and the server never listened). The client
/// is `roce perf`,
/// which retries while perftest's server is not yet listening for the
/// data connection (Debian's perftest client does not: against a fast
/// peer it gets REJ reason 8, docs/interop.md).
#[test]
fn dropin_perftest_over_rdma_cm_serves_roce_perf() {
    let have = |p: &str| {
        std::env::var_os("PATH")
            .is_some_and(|path| std::env::split_paths(&path).any(|d| d.join(p).is_file()))
    };
    if !have("ib_write_bw") {
        assert!(
            std::env::var_os("ROCE_REQUIRE_RDMA_TOOLS").is_none(),
            "ib_write_bw is not installed (apt-get install perftest)"
        );
        println!("skipped: ib_write_bw is not installed");
        return;
    }
    let lab = lab_or_skip!();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
        .to_string();
    let dev = format!("roce_{}", lab.va);
    let flags = ["-s", "4096", "-n", "200", "-p", &port];
    let server = Guard(
        lab.a
            .command(ROCE)
            .args([
                "exec",
                "--addr",
                &lab.ip_a,
                "--",
                "ib_write_bw",
                "-R",
                "-d",
                &dev,
            ])
            .args(flags)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    std::thread::sleep(Duration::from_millis(500));
    let client = Guard(
        lab.b
            .command(ROCE)
            .args(["perf", "write-bw", "--perftest", "-R", "--bind", &lab.ip_b])
            .args(flags)
            .arg(&lab.ip_a)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let c = client.wait_output(RUN_LIMIT).unwrap();
    let s = server.wait_output(RUN_LIMIT).unwrap();
    let (st, ct) = (roce_testkit::text_of(&s), roce_testkit::text_of(&c));
    assert!(
        s.status.success() && c.status.success(),
        "server {:?}:\n{st}\nclient {:?}:\n{ct}",
        s.status,
        c.status
    );
    assert!(
        st.lines().any(|l| l.trim_start().starts_with("4096 ")),
        "no result row:\n{st}"
    );
}
