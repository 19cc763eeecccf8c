//! The rsocket API over the drop-in libraries: Debian's unmodified
//! `rstream` (rdmacm-utils) as server (`-b ADDR`) and client (`-s ADDR`)
//! in two processes on loopback, blocking (`-T b`), non-blocking (the
//! default) and asynchronous with `rpoll` (`-T a`), with data verified
//! (`-T v`) at a few sizes; `riostream` (direct placement: `riomap`,
//! `riowrite`); and `tests/c/rsocket.c` for EAGAIN, EOF, `rpoll` over an
//! rsocket and a pipe, and the errors of what is not supported.
//!
//! Each test takes loopback addresses of its own (`127.B.N.1` for the
//! server, `.2` for the client, through `ROCE_ADDR`), as `tests/rdmacm.rs`
//! does. Skipped when rstream (or librdmacm-dev, for the C program) is
//! missing, unless CI requires them.

mod common;

use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::Duration;

use common::have;
use roce_testkit::{text_of, Guard};

/// A pair of loopback addresses no other test of this binary uses.
fn addrs() -> (String, String) {
    static N: AtomicU8 = AtomicU8::new(1);
    let n = N.fetch_add(1, Ordering::Relaxed);
    let base = 150 + (std::process::id() % 60) as u8;
    (format!("127.{base}.{n}.1"), format!("127.{base}.{n}.2"))
}

fn command(prog: &str, args: &[&str], addr: &str) -> Command {
    let mut c = Command::new(prog);
    c.args(args)
        .env("LD_LIBRARY_PATH", common::dropin("rsocket-dropin"))
        .env("ROCE_ADDR", addr)
        .env("ROCE_DEVICES", "lo");
    c
}

/// Runs `prog` as server (on `s`) and client (on `c`) with `server` and
/// `client` arguments; both must exit 0. Returns their output.
fn pair(prog: &str, server: &[&str], client: &[&str], s: &str, c: &str) -> (String, String) {
    let limit = Duration::from_secs(120);
    let srv = Guard::spawn_roce_server(command(prog, server, s), s.parse().unwrap());
    let co = Guard::spawn(command(prog, client, c)).wait(limit);
    let so = srv.wait(limit);
    let (st, ct) = (text_of(&so), text_of(&co));
    assert!(
        so.status.success() && co.status.success(),
        "server {server:?} {:?}, client {client:?} {:?}\nserver:\n{st}\nclient:\n{ct}",
        so.status,
        co.status
    );
    (st, ct)
}

/// Runs `prog` (rstream or riostream) with `opts` (and `-S size -C count`) on both sides and
/// checks the throughput table each prints.
fn stream(prog: &str, opts: &[&str], size: &str, count: &str) {
    if !have(prog) {
        return;
    }
    let (s, c) = addrs();
    let mut server = vec!["-b", &s, "-p", "7480", "-S", size, "-C", count];
    server.extend_from_slice(opts);
    let mut client = vec!["-s", &s, "-p", "7480", "-S", size, "-C", count];
    client.extend_from_slice(opts);
    let (st, ct) = pair(prog, &server, &client, &s, &c);
    for out in [&st, &ct] {
        assert!(out.contains("Gb/sec") && out.contains("usec/xfer"), "{out}");
        let row = out
            .lines()
            .find(|l| l.starts_with("custom"))
            .unwrap_or_else(|| panic!("no result row:\n{out}"));
        assert!(row.contains(&format!(" {count} ")), "{row}");
    }
    eprintln!(
        "{prog} {opts:?} -S {size}: {}",
        ct.lines().last().unwrap_or("")
    );
}

fn rstream(opts: &[&str], size: &str, count: &str) {
    stream("rstream", opts, size, count);
}

#[test]
fn rstream_blocking_4k() {
    rstream(&["-T", "b", "-T", "v"], "4096", "200");
}

#[test]
fn rstream_blocking_1m() {
    rstream(&["-T", "b"], "1000000", "10");
}

#[test]
fn rstream_nonblocking_100k() {
    rstream(&["-T", "n", "-T", "v"], "100000", "20");
}

#[test]
fn rstream_async_rpoll_64() {
    rstream(&["-T", "a"], "64", "500");
}

#[test]
fn rstream_async_rpoll_64k_verified() {
    rstream(&["-T", "a", "-T", "v"], "65536", "50");
}

/// riostream: data by `riowrite` straight into the peer's `riomap`ped
/// buffer, verified, blocking.
#[test]
fn riostream_blocking_64k_verified() {
    stream("riostream", &["-T", "b", "-T", "v"], "65536", "20");
}

/// riostream with `rpoll` (its sync messages by rsend/rrecv).
#[test]
fn riostream_async_4k() {
    stream("riostream", &["-T", "a"], "4096", "100");
}

/// `tests/c/rsocket.c`, built once.
fn program() -> Option<PathBuf> {
    common::c_program("rsocket", "rdma/rsocket.h")
}

#[test]
fn eagain_eof_rpoll_and_errors() {
    let Some(exe) = program() else { return };
    let exe = exe.to_str().unwrap();
    let (s, c) = addrs();
    let (st, ct) = pair(
        exe,
        &["server", &s, "7481"],
        &["client", &s, "7481"],
        &s,
        &c,
    );
    for check in [
        "non-blocking rrecv with no data: EAGAIN",
        "rpoll on an rsocket and a pipe",
        "rrecv MSG_WAITALL",
        "rrecv after the peer's rclose: EOF",
        "rsend after the peer's rclose: ECONNRESET",
        "rrecv after the peer exited without rclose: EOF",
        "SOCK_DGRAM: EOPNOTSUPP",
        "riomap before a connection: EINVAL",
    ] {
        assert!(st.contains(&format!("ok: {check}")), "{check}:\n{st}");
    }
    assert!(ct.contains("ok: rselect: readable once data came"), "{ct}");
}

/// Runs the C program `tests/c/NAME.c` as server and client on a pair of
/// addresses of its own and port `port`; their outputs (None when the
/// program cannot be built here and CI does not require it).
fn c_pair(name: &'static str, port: &str) -> Option<(String, String)> {
    let exe = common::c_program(name, "rdma/rsocket.h")?;
    let exe = exe.to_str().unwrap();
    let (s, c) = addrs();
    Some(pair(
        exe,
        &["server", &s, port],
        &["client", &s, port],
        &s,
        &c,
    ))
}

/// A hostile rsocket peer (`tests/c/rsocket_hostile.c`: librdmacm and
/// verbs by hand) writes one data message claiming 0x1fffffff bytes, more
/// than the half-ring a message may fill: the victim's `rrecv` fails with
/// EPROTO and returns nothing; neither side crashes.
#[test]
fn a_peer_claiming_an_oversized_message_gets_eproto() {
    let Some((st, ct)) = c_pair("rsocket_hostile", "7482") else {
        return;
    };
    assert!(
        st.contains("ok: the oversized message was delivered"),
        "{st}"
    );
    assert!(
        ct.contains("ok: rpoll wakes for the hostile message"),
        "{ct}"
    );
    assert!(
        ct.contains("ok: rrecv of an oversized message: EPROTO"),
        "{ct}"
    );
}

/// A close right after a send waits for the peer to read the data (its
/// credit update or its own DISCONNECT), at most a second, before the
/// DISCONNECT goes (`tests/c/rsocket_linger.c`): the client reads 300 ms
/// after the server's rclose began, so that rclose takes at least that
/// long (without the linger it took no time, and Linux's `rstream -T a`
/// client, slower than our server, saw the data and the hang-up in one
/// `rpoll` and failed).
#[test]
fn a_close_after_a_send_waits_for_the_peer_to_read() {
    let Some((st, ct)) = c_pair("rsocket_linger", "7483") else {
        return;
    };
    assert!(ct.contains("ok: 4096 bytes read"), "{ct}");
    let ms: f64 = st
        .lines()
        .find_map(|l| {
            l.strip_prefix("rclose took ")?
                .strip_suffix(" ms")?
                .parse()
                .ok()
        })
        .unwrap_or_else(|| panic!("no rclose time:\n{st}"));
    assert!(
        (250.0..1500.0).contains(&ms),
        "rclose took {ms} ms (the client read after 300 ms)"
    );
}

/// A plain sockets program of ours (`tests/c/sock_echo.c`: socket, bind,
/// listen, accept, connect, send and recv in uneven pieces), unaware of
/// RDMA, under rdma-core's `librspreload.so`: its TCP sockets become
/// rsockets over the drop-in librdmacm. Both ends on one shared address;
/// a megabyte echoed and compared byte for byte, and `ROCE_LOG` shows the
/// connection went through this stack, not the kernel's TCP.
#[test]
fn a_plain_sockets_program_under_rspreload() {
    const PRELOAD: &str = "/usr/lib/x86_64-linux-gnu/rsocket/librspreload.so";
    if !std::path::Path::new(PRELOAD).exists() {
        assert!(
            std::env::var_os("ROCE_REQUIRE_RDMA_TOOLS").is_none(),
            "{PRELOAD} is missing (apt-get install librdmacm1)"
        );
        eprintln!("skipped: {PRELOAD} is missing (apt-get install librdmacm1)");
        return;
    }
    let Some(exe) = common::c_program("sock_echo", "rdma/rdma_cma.h") else {
        return;
    };
    let (s, _) = addrs();
    let run = |args: &[&str]| {
        let mut c = command(exe.to_str().unwrap(), args, &s);
        c.env("LD_PRELOAD", PRELOAD).env("ROCE_LOG", "1");
        c
    };
    let srv = Guard::spawn_roce_server(run(&["serve", &s, "7894"]), s.parse().unwrap());
    let limit = Duration::from_secs(60);
    let co = Guard::spawn(run(&["send", &s, "7894", "1000000"])).wait(limit);
    let so = srv.wait(limit);
    let (st, ct) = (text_of(&so), text_of(&co));
    assert!(
        so.status.success() && co.status.success(),
        "server:\n{st}\nclient:\n{ct}"
    );
    assert!(ct.contains("ECHOED 1000000"), "{ct}");
    assert!(st.contains("SERVED 1000000"), "{st}");
    assert!(
        ct.contains(&format!("librdmacm: connecting from {s} to {s}:7894")),
        "{ct}"
    );
    assert!(st.contains("librdmacm: listening on port 7894"), "{st}");
}
