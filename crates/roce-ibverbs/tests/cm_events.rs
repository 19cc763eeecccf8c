//! What an rdma_cm program sees when a connection fails, over the drop-in
//! libraries, as the kernel's librdmacm reports it: a port nobody listens
//! on (REJECTED, status 8), a listener destroyed with requests waiting
//! (REJECTED, status 28), a peer that does not answer (UNREACHABLE,
//! -ETIMEDOUT), a peer process that exits with its connection up
//! (DISCONNECTED), a destination without a route (`rdma_resolve_addr`
//! fails with ENETUNREACH). `tests/c/cm_events.c`, built against
//! rdma-core's header and libraries as any program is, runs each case.
//!
//! Needs a C compiler and `librdmacm-dev` (`.ci/run` installs it and sets
//! `ROCE_REQUIRE_C_HEADERS`; elsewhere a missing header is a skip).

mod common;

use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use common::finish;

/// The test program, built once.
fn program() -> Option<PathBuf> {
    static BUILT: OnceLock<Option<PathBuf>> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            if !std::path::Path::new("/usr/include/rdma/rdma_cma.h").exists() {
                assert!(
                    std::env::var_os("ROCE_REQUIRE_C_HEADERS").is_none(),
                    "<rdma/rdma_cma.h> is missing (apt-get install librdmacm-dev)"
                );
                eprintln!("skipped: <rdma/rdma_cma.h> is missing (apt-get install librdmacm-dev)");
                return None;
            }
            let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("cm_events");
            std::fs::create_dir_all(&dir).unwrap();
            let exe = dir.join("cm_events");
            let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/c/cm_events.c");
            let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
            let out = Command::new(&cc)
                .args(["-O1", "-Wall", "-o"])
                .arg(&exe)
                .arg(&src)
                .args(["-lrdmacm", "-libverbs"])
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "cm_events.c did not build:\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
            Some(exe)
        })
        .clone()
}

/// A loopback address block of this test's own: 127.B.N.x.
fn block() -> String {
    static N: AtomicU8 = AtomicU8::new(1);
    let n = N.fetch_add(1, Ordering::Relaxed);
    format!("127.{}.{n}", 20 + std::process::id() % 40)
}

fn run(exe: &PathBuf, addr: &str, args: &[&str]) -> Child {
    Command::new(exe)
        .args(args)
        .env("LD_LIBRARY_PATH", common::dropin("cm-events-dropin"))
        .env("ROCE_ADDR", addr)
        .env("ROCE_DEVICES", "lo")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Whether UDP port 4791 is bound on `addr`.
fn bound(addr: &str) -> bool {
    let ip: std::net::Ipv4Addr = addr.parse().unwrap();
    let want = format!("{:08X}:12B7", u32::from_le_bytes(ip.octets()));
    std::fs::read_to_string("/proc/net/udp")
        .unwrap_or_default()
        .lines()
        .any(|l| l.split_whitespace().nth(1) == Some(want.as_str()))
}

/// Starts a server on `addr` and waits until it listens.
struct Server(Option<Child>);

impl Server {
    fn start(exe: &PathBuf, addr: &str, args: &[&str]) -> Server {
        let s = Server(Some(run(exe, addr, args)));
        let end = Instant::now() + Duration::from_secs(20);
        while !bound(addr) {
            assert!(Instant::now() < end, "the server never opened {addr}");
            std::thread::sleep(Duration::from_millis(10));
        }
        std::thread::sleep(Duration::from_millis(300));
        s
    }

    fn output(mut self, limit: Duration) -> Output {
        finish(self.0.take().unwrap(), limit, "server")
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(mut c) = self.0.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// The "EVENT <name> <status>" line a run printed.
fn event(o: &Output) -> String {
    let t = text(o);
    assert!(o.status.success(), "{:?}\n{t}", o.status);
    t.lines()
        .find(|l| l.starts_with("EVENT ") || l.starts_with("ERRNO "))
        .unwrap_or_else(|| panic!("no outcome in\n{t}"))
        .to_string()
}

#[test]
fn a_port_nobody_listens_on_is_rejected_with_status_8() {
    let Some(exe) = program() else { return };
    let b = block();
    let (s, c) = (format!("{b}.1"), format!("{b}.2"));
    let _server = Server::start(&exe, &s, &["serve", &s, "7001"]);
    let o = finish(
        run(&exe, &c, &["connect", &s, "7002"]),
        Duration::from_secs(30),
        "client",
    );
    assert_eq!(event(&o), "EVENT RDMA_CM_EVENT_REJECTED 8");
}

#[test]
fn a_destroyed_listener_rejects_the_requests_it_had() {
    let Some(exe) = program() else { return };
    let b = block();
    let (s, c) = (format!("{b}.1"), format!("{b}.2"));
    let server = Server::start(&exe, &s, &["drop_listener", &s, "7003", "3"]);
    let o = finish(
        run(&exe, &c, &["connect", &s, "7003"]),
        Duration::from_secs(30),
        "client",
    );
    assert_eq!(event(&o), "EVENT RDMA_CM_EVENT_REJECTED 28");
    let so = server.output(Duration::from_secs(10));
    assert!(text(&so).contains("DESTROYED"), "{}", text(&so));
}

#[test]
fn a_silent_peer_is_unreachable() {
    let Some(exe) = program() else { return };
    let b = block();
    // Nobody owns {b}.1: the REQ is resent until the CM gives up.
    let (s, c) = (format!("{b}.1"), format!("{b}.2"));
    let t = Instant::now();
    let o = finish(
        run(&exe, &c, &["connect", &s, "7004"]),
        Duration::from_secs(60),
        "client",
    );
    assert_eq!(event(&o), "EVENT RDMA_CM_EVENT_UNREACHABLE -110");
    // Every retry ran: 15 resends a second or so apart.
    assert!(t.elapsed() > Duration::from_secs(10), "{:?}", t.elapsed());
}

#[test]
fn a_peer_that_exits_connected_disconnects() {
    let Some(exe) = program() else { return };
    let b = block();
    let (s, c) = (format!("{b}.1"), format!("{b}.2"));
    let server = Server::start(&exe, &s, &["serve", &s, "7005"]);
    let o = finish(
        run(&exe, &c, &["connect_exit", &s, "7005"]),
        Duration::from_secs(30),
        "client",
    );
    assert_eq!(event(&o), "EVENT RDMA_CM_EVENT_ESTABLISHED 0");
    let so = server.output(Duration::from_secs(30));
    assert_eq!(event(&so), "EVENT RDMA_CM_EVENT_DISCONNECTED 0");
}

/// In a network namespace with no route (needs root and `ip netns`).
#[test]
fn a_destination_without_a_route_fails_resolution() {
    let Some(exe) = program() else { return };
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: not root");
        return;
    }
    let ns = format!("roce-cmev-{}", std::process::id());
    let ok = Command::new("ip").args(["netns", "add", &ns]).status();
    if !ok.is_ok_and(|s| s.success()) {
        eprintln!("skipped: ip netns unavailable");
        return;
    }
    let o = Command::new("ip")
        .args(["netns", "exec", &ns])
        .arg(&exe)
        .args(["noroute", "192.0.2.1"])
        .env("LD_LIBRARY_PATH", common::dropin("cm-events-dropin"))
        .output()
        .unwrap();
    let _ = Command::new("ip").args(["netns", "del", &ns]).status();
    assert_eq!(event(&o), format!("ERRNO {}", libc::ENETUNREACH));
}
