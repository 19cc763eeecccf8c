//! rdma_cm's port spaces are the host's, as in the kernel: ids of two
//! processes on one address and port conflict (`EADDRINUSE`), unless both
//! set `RDMA_OPTION_ID_REUSEADDR` and neither listens; the wildcard meets
//! every address (`EADDRNOTAVAIL`); another port or address is free; and
//! a killed holder's ports are free again. `tests/c/cm_ports.c` over the
//! drop-in, several processes at once (docs/host.md, "Port spaces").
//!
//! Needs a C compiler and `librdmacm-dev` (`.ci/run` installs it and sets
//! `ROCE_REQUIRE_C_HEADERS`; elsewhere a missing header is a skip).

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use roce_testkit::{text_of, Guard};

fn program() -> Option<PathBuf> {
    common::c_program("cm_ports", "rdma/rdma_cma.h")
}

/// A loopback address and a port of this test's own.
fn place(n: u16) -> (String, u16) {
    let pid = std::process::id();
    (
        format!("127.{}.{}.1", 60 + pid % 40, 1 + n),
        20_000 + (pid % 2000) as u16 * 8 + n,
    )
}

fn cmd(exe: &Path, args: &[&str]) -> Command {
    let mut c = Command::new(exe);
    c.args(args)
        .env("LD_LIBRARY_PATH", common::dropin("cm-ports-dropin"))
        .env("ROCE_DEVICES", "lo")
        .env_remove("ROCE_ADDR");
    c
}

/// One bind (and listen) run to its end: its "BIND" and "LISTEN" lines.
fn once(exe: &Path, addr: &str, port: u16, reuse: bool, listen: bool) -> String {
    let p = port.to_string();
    let args = [
        addr,
        &p,
        if reuse { "1" } else { "0" },
        if listen { "1" } else { "0" },
    ];
    let o = Guard::spawn(cmd(exe, &args)).wait(Duration::from_secs(20));
    assert!(o.status.success(), "{}", text_of(&o));
    String::from_utf8_lossy(&o.stdout).trim().to_string()
}

/// A process holding a bind (and listen) until dropped, once it has it.
fn holder(exe: &Path, addr: &str, port: u16, reuse: bool, listen: bool) -> (Guard, String) {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("cm-ports");
    std::fs::create_dir_all(&dir).unwrap();
    let ready = dir.join(format!("ready-{}-{addr}-{port}", std::process::id()));
    let _ = std::fs::remove_file(&ready);
    let p = port.to_string();
    let r = if reuse { "1" } else { "0" };
    let l = if listen { "1" } else { "0" };
    let mut g = Guard::spawn(cmd(exe, &[addr, &p, r, l, ready.to_str().unwrap()]));
    let end = Instant::now() + Duration::from_secs(20);
    loop {
        if let Ok(s) = std::fs::read_to_string(&ready) {
            return (g, s.trim().to_string());
        }
        let c = g.0.as_mut().unwrap();
        if c.try_wait().unwrap().is_some() {
            let o = g.0.take().unwrap().wait_with_output().unwrap();
            panic!("the holder exited: {}", text_of(&o));
        }
        assert!(Instant::now() < end, "the holder never bound");
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn two_processes_on_one_address_and_port_conflict() {
    let Some(exe) = program() else { return };
    let (addr, port) = place(0);
    let (h, got) = holder(&exe, &addr, port, false, true);
    assert_eq!(got, format!("BIND 0 {port}\nLISTEN 0"));
    // The same address and port: in use; the wildcard: not available.
    assert_eq!(once(&exe, &addr, port, false, false), "BIND 98 0");
    assert_eq!(once(&exe, "0.0.0.0", port, false, false), "BIND 99 0");
    // Another port on that address, or that port on another address.
    assert_eq!(
        once(&exe, &addr, port + 1, false, true),
        format!("BIND 0 {}\nLISTEN 0", port + 1)
    );
    let (other, _) = place(1);
    assert_eq!(
        once(&exe, &other, port, false, false),
        format!("BIND 0 {port}")
    );
    // Port 0 takes a free port of the local range.
    let any = once(&exe, &addr, 0, false, false);
    let p: u16 = any
        .strip_prefix("BIND 0 ")
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("{any}"));
    assert!((32768..=60999).contains(&p) && p != port, "{p}");
    // A killed holder's port is free again.
    drop(h);
    assert_eq!(
        once(&exe, &addr, port, false, false),
        format!("BIND 0 {port}")
    );
}

#[test]
fn reuse_shares_a_port_between_processes_until_one_listens() {
    let Some(exe) = program() else { return };
    let (addr, port) = place(2);
    let (_a, got) = holder(&exe, &addr, port, true, false);
    assert_eq!(got, format!("BIND 0 {port}"));
    // Both ask for reuse: shared. One listening: unique, so refused.
    assert_eq!(
        once(&exe, &addr, port, true, false),
        format!("BIND 0 {port}")
    );
    assert_eq!(once(&exe, &addr, port, false, false), "BIND 98 0");
    assert_eq!(
        once(&exe, &addr, port, true, true),
        format!("BIND 0 {port}\nLISTEN 98")
    );
}
