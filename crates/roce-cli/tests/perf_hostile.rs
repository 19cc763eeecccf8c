//! `roce perf`'s control channel against a hostile peer (issue 18): a
//! line without end, a hello asking for gigabytes or aiming the server's
//! QPs at another host, a peer that says nothing. Each ends the server
//! cleanly: an error, exit status 1, bounded memory, no hang.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use common::roce;
use roce_testkit::free_ports;

/// A `roce perf` server on 127.0.0.1 with a connection to it, and its
/// control and RoCE ports ([`free_ports`]). A server that ends before
/// listening (a port another program took since) is started again on
/// other ports, three times at most; then the test fails with what it
/// printed.
#[allow(clippy::zombie_processes)] // finish() or the test waits for it
fn server(test: &str) -> (Child, TcpStream, u16, u16) {
    let mut said = String::new();
    for _ in 0..3 {
        let [port, rport] = free_ports();
        let mut child = roce()
            .args(["perf", test, "--bind", "127.0.0.1", "-p", &port.to_string()])
            .args(["--roce-port", &rport.to_string()])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let connected = roce_testkit::connect_when_listening(&mut child, port);
        if let Ok(s) = connected {
            return (child, s, port, rport);
        }
        let o = child.wait_with_output().unwrap();
        said = String::from_utf8_lossy(&o.stderr).into_owned();
    }
    panic!("the server ended before listening, three times; last: {said}");
}

/// The server's resident memory in KiB (0 once it has gone).
fn rss_kib(pid: u32) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    s.lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// Waits (at most `limit`) for the server to end, sampling its memory;
/// returns its exit status, stderr and peak resident KiB.
fn finish(mut c: Child, limit: Duration) -> (Option<i32>, String, u64) {
    let end = Instant::now() + limit;
    let mut peak = 0;
    while c.try_wait().unwrap().is_none() {
        peak = peak.max(rss_kib(c.id()));
        if Instant::now() > end {
            let _ = c.kill();
            panic!("the server did not end in {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let o = c.wait_with_output().unwrap();
    (
        o.status.code(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
        peak,
    )
}

/// 200 MiB without a newline: the server stops reading at 64 KiB and
/// ends with an error (it used to hold the whole line: 415 MB resident
/// for 400 MiB).
#[test]
fn an_endless_line_is_cut_off() {
    let (c, mut s, _, _) = server("write-bw");
    let writer = std::thread::spawn(move || {
        let chunk = vec![b'a'; 1 << 20];
        let _ = s.write_all(b"{\"type\":\"hello\",\"x\":\"");
        for _ in 0..200 {
            if s.write_all(&chunk).is_err() {
                return;
            }
        }
    });
    let (code, err, peak) = finish(c, Duration::from_secs(20));
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("longer than 64 KiB"), "{err}");
    assert!(peak < 64 << 10, "peak resident {peak} KiB");
    writer.join().unwrap();
}

/// Sends `hello` and returns the server's answer (a line).
fn answer(s: &mut TcpStream, hello: &str) -> String {
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(hello.as_bytes()).unwrap();
    s.write_all(b"\n").unwrap();
    let mut line = String::new();
    let _ = BufReader::new(s).read_line(&mut line);
    line
}

/// Hellos asking for 1.5 GiB, 100,000 QPs, a million sizes or 2^40
/// iterations are refused before anything is allocated, the error naming
/// the field, sent to the peer and printed by the server.
#[test]
fn a_hostile_hello_is_refused_before_allocating() {
    let base = r#""type":"hello","version":1,"test":"write-bw","iters":10,"tx_depth":16,"mtu":4096,"seed":1"#;
    let many: Vec<String> = (0..1_000).map(|_| "4096".to_string()).collect();
    for (fields, want) in [
        (r#""sizes":[268435456],"qps":2"#.to_string(), "MiB"),
        (r#""sizes":[4096],"qps":100000"#.to_string(), "'qps'"),
        (format!(r#""sizes":[{}],"qps":1"#, many.join(",")), "sizes"),
    ] {
        let (c, mut s, _, _) = server("write-bw");
        let a = answer(&mut s, &format!("{{{base},{fields}}}"));
        let (code, err, peak) = finish(c, Duration::from_secs(15));
        assert!(a.contains("\"error\"") && a.contains(want), "{want}: {a}");
        assert_eq!(code, Some(1), "{err}");
        assert!(err.contains(want), "{want}: {err}");
        assert!(peak < 100 << 10, "{want}: peak resident {peak} KiB");
    }
    let (c, mut s, _, _) = server("write-lat");
    let a = answer(
        &mut s,
        r#"{"type":"hello","version":1,"test":"write-lat","sizes":[2],"iters":1099511627776,"qps":1,"tx_depth":1,"mtu":4096,"seed":1}"#,
    );
    let (code, err, _) = finish(c, Duration::from_secs(15));
    assert!(a.contains("'iters'"), "{a}");
    assert_eq!(code, Some(1), "{err}");
}

/// A client whose endpoints name another host (192.0.2.9, not its own
/// 127.0.0.1 of the control connection) is refused: a hello must not aim
/// the server's QPs at a third party. (Another loopback address is this
/// host: a client on loopback may have moved to one.)
#[test]
fn endpoints_at_another_host_are_refused() {
    let (c, mut s, _, _) = server("write-bw");
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(
        br#"{"type":"hello","version":1,"test":"write-bw","sizes":[4096],"iters":10,"qps":1,"tx_depth":16,"mtu":4096,"seed":1,"roce_port":0}
"#,
    )
    .unwrap();
    // roce_port 0 differs: the server must refuse that first.
    let mut r = BufReader::new(s.try_clone().unwrap());
    let mut line = String::new();
    let _ = r.read_line(&mut line);
    assert!(line.contains("--roce-port"), "{line}");
    let _ = finish(c, Duration::from_secs(15));

    let (c, mut s, _, rport) = server("write-bw");
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let hello = format!(
        r#"{{"type":"hello","version":1,"test":"write-bw","sizes":[4096],"iters":10,"qps":1,"tx_depth":16,"mtu":4096,"seed":1,"roce_port":{rport}}}"#
    );
    writeln!(s, "{hello}").unwrap();
    let mut r = BufReader::new(s.try_clone().unwrap());
    let mut line = String::new();
    r.read_line(&mut line).unwrap();
    assert!(line.contains("\"endpoints\""), "{line}");
    writeln!(
        s,
        r#"{{"type":"endpoints","mtu":4096,"qps":[{{"qpn":17,"psn":1,"addr":"192.0.2.9","rkey":1,"vaddr":4096,"len":8192}}]}}"#
    )
    .unwrap();
    line.clear();
    let _ = r.read_line(&mut line);
    let (code, err, _) = finish(c, Duration::from_secs(15));
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("192.0.2.9") && err.contains("not at the peer's address"),
        "{err}"
    );
    assert!(line.contains("192.0.2.9"), "{line}");
}

/// The same over perftest's exchange: a client whose key string puts its
/// QP at a third host (GID ::ffff:192.0.2.9, not its TCP address) is
/// refused once its keys arrive, before any QP is connected to them.
#[test]
fn perftest_keys_at_another_host_are_refused() {
    let (c, mut s, _, _) = server("write-bw");
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut xchg = |mine: &[u8], n: usize| {
        s.write_all(mine).unwrap();
        let mut theirs = vec![0u8; n];
        std::io::Read::read_exact(&mut s, &mut theirs).map(|_| theirs)
    };
    let mut version = b"6.06".to_vec();
    version.resize(16, 0);
    assert_eq!(&xchg(&version, 16).unwrap()[..4], b"6.06");
    xchg(&4096u32.to_be_bytes(), 4).unwrap();
    xchg(&64u32.to_be_bytes(), 4).unwrap();
    xchg(b"5\0", 2).unwrap();
    // LID:OUT_READS:QPN:PSN:RKEY:VADDR:16 GID bytes:SRQN:, as perftest 4.5.
    let mut key = b"0000:0001:000017:000001:00000001:0000000000001000:".to_vec();
    for b in std::net::Ipv4Addr::new(192, 0, 2, 9)
        .to_ipv6_mapped()
        .octets()
    {
        key.extend(format!("{b:02x}:").bytes());
    }
    key.extend(b"00000000:\0");
    assert_eq!(key.len(), 108);
    let _ = xchg(&key, 108);
    let (code, err, _) = finish(c, Duration::from_secs(15));
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("192.0.2.9") && err.contains("not at the peer's address"),
        "{err}"
    );
}

/// A peer that connects and says nothing is dropped after 10 s, with an
/// error, instead of holding the server forever.
#[test]
fn a_silent_peer_times_out() {
    let (c, s, _, _) = server("write-bw");
    let start = Instant::now();
    let (code, err, _) = finish(c, Duration::from_secs(20));
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("sent nothing"), "{err}");
    assert!(start.elapsed() < Duration::from_secs(15));
    drop(s);
}

/// `--bind 127.0.0.1` listens there only: 127.0.0.3 is refused.
#[test]
fn the_server_listens_on_the_bound_address_only() {
    let (mut c, s, port, _) = server("write-bw");
    assert!(TcpStream::connect(("127.0.0.3", port)).is_err());
    drop(s);
    let _ = c.kill();
    let _ = c.wait();
}
