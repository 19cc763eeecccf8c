//! `roce perf --perftest` speaks perftest 4.5's out-of-band exchange in
//! the order the real tools do, with `-a`, `-q 4` and `-b`: each case runs
//! our server and client through a recording TCP relay and compares the
//! sequence of control messages (direction and length) with a capture of
//! two Debian perftest 4.5 peers running the same tool and flags
//! (testdata/perftest, captured on lo inside the lab VM; see its README).

mod common;

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{roce, Guard};
use roce_capture::{CaptureReader, Payload};
use roce_testkit::free_ports;

/// Control messages in order: (sent by the client, length), with
/// consecutive segments of one direction merged and the closing "done"
/// messages (written by both sides at once, so in any order) removed;
/// and how many sides wrote "done".
type Seq = Vec<(bool, usize)>;

fn normalize(mut segs: Vec<(bool, Vec<u8>)>) -> (Seq, usize) {
    let mut dones = 0;
    for dir in [true, false] {
        if let Some(last) = segs.iter_mut().rev().find(|s| s.0 == dir) {
            if last.1.ends_with(b"done\0") {
                last.1.truncate(last.1.len() - 5);
                dones += 1;
            }
        }
    }
    let mut out: Seq = Vec::new();
    for (c, d) in segs.iter().filter(|s| !s.1.is_empty()) {
        match out.last_mut() {
            Some((lc, ln)) if lc == c => *ln += d.len(),
            _ => out.push((*c, d.len())),
        }
    }
    (out, dones)
}

/// The TCP payload segments of a capture of one perftest run on lo.
fn captured(name: &str) -> (Seq, usize) {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../testdata/perftest")
        .join(format!("{name}.pcap"));
    let mut r = CaptureReader::open(&path).unwrap();
    let mut segs = Vec::new();
    let mut server_port = None;
    while let Some(p) = r.next_packet() {
        let p = p.unwrap();
        let Ok(Payload::Ethernet(f)) = p.payload() else {
            panic!("{name}: not Ethernet");
        };
        // Ethernet, IPv4 (lo), TCP.
        assert_eq!(&f[12..14], &[0x08, 0x00], "{name}: IPv4 only");
        let ip = &f[14..];
        let ihl = usize::from(ip[0] & 0x0f) * 4;
        let total = usize::from(u16::from_be_bytes([ip[2], ip[3]]));
        let tcp = &ip[ihl..];
        let doff = usize::from(tcp[12] >> 4) * 4;
        let len = total - ihl - doff;
        if len == 0 {
            continue;
        }
        let (sport, dport) = (
            u16::from_be_bytes([tcp[0], tcp[1]]),
            u16::from_be_bytes([tcp[2], tcp[3]]),
        );
        // The client speaks first.
        let server = *server_port.get_or_insert(dport);
        let data = &tcp[doff..doff + len];
        segs.push((sport != server, data.to_vec()));
    }
    normalize(segs)
}

/// A relay from `listen` to `to` that records every read chunk.
type Log = Arc<Mutex<Vec<(bool, Vec<u8>)>>>;

fn relay(listen: TcpListener, to: String, log: Log) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let (a, _) = listen.accept().unwrap();
        let b = TcpStream::connect(&to).unwrap();
        let _ = a.set_nodelay(true);
        let _ = b.set_nodelay(true);
        let pipe = |mut from: TcpStream, mut to: TcpStream, client: bool, log: Log| {
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                loop {
                    match from.read(&mut buf) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => {
                            // Recorded before it is forwarded, so before the answer.
                            log.lock().unwrap().push((client, buf[..n].to_vec()));
                            if to.write_all(&buf[..n]).is_err() {
                                break;
                            }
                        }
                    }
                }
                let _ = to.shutdown(Shutdown::Write);
            })
        };
        let t1 = pipe(
            a.try_clone().unwrap(),
            b.try_clone().unwrap(),
            true,
            log.clone(),
        );
        let t2 = pipe(b, a, false, log);
        let _ = t1.join();
        let _ = t2.join();
    })
}

/// Runs `test` with `flags` between our two processes through the relay
/// and checks the message sequence against capture `name`.
fn check(name: &str, test: &str, flags: &[&str]) {
    let (want, want_dones) = captured(name);
    let [tcp, relay_port, roce_port] = free_ports();
    let (tcp, relay_port, roce_port) = (tcp.to_string(), relay_port, roce_port.to_string());
    let server = Guard(Some(
        roce()
            .args([
                "perf",
                test,
                "--perftest",
                "--bind",
                "127.0.0.1",
                "-p",
                &tcp,
            ])
            .args(["--roce-port", &roce_port])
            .args(flags)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    ))
    .listening(tcp.parse().unwrap());
    let log = Arc::new(Mutex::new(Vec::new()));
    let l = TcpListener::bind(("127.0.0.1", relay_port)).unwrap();
    let relayed = relay(l, format!("127.0.0.1:{tcp}"), log.clone());
    let c = roce()
        .args([
            "perf",
            test,
            "127.0.0.1",
            "--perftest",
            "--bind",
            "127.0.0.2",
        ])
        .args(["-p", &relay_port.to_string(), "--roce-port", &roce_port])
        .args(flags)
        .output()
        .unwrap();
    let cout = String::from_utf8_lossy(&c.stdout).into_owned();
    assert_eq!(
        c.status.code(),
        Some(0),
        "{name}: {cout}{}",
        String::from_utf8_lossy(&c.stderr)
    );
    let s = server.wait(Duration::from_secs(120));
    let sout = String::from_utf8_lossy(&s.stdout).into_owned();
    assert_eq!(s.status.code(), Some(0), "{name}: {sout}");
    // Both ends have exited: the relay sees both connections close.
    relayed.join().expect("the relay");
    let (got, dones) = normalize(log.lock().unwrap().clone());
    assert_eq!(got, want, "{name}: our exchange differs from perftest's");
    // Both sides' "done", or neither (ib_write_lat).
    assert_eq!(dones, want_dones, "{name}: closing messages");
    // With -a the client printed all 23 sizes; the result rows carry
    // the iterations times the QPs.
    let rows: Vec<Vec<&str>> = cout
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .filter(|f| f.len() >= 5 && f[..2].iter().all(|x| x.parse::<u64>().is_ok()))
        .collect();
    let all = flags.contains(&"-a");
    assert_eq!(rows.len(), if all { 23 } else { 1 }, "{name}: {cout}");
    let arg = |k: &str| {
        flags
            .iter()
            .position(|f| *f == k)
            .map(|i| flags[i + 1].parse::<u64>().unwrap())
    };
    // A timed run (-D) counts what it did.
    let iters = arg("-n").map(|n| n * arg("-q").unwrap_or(1));
    for (i, r) in rows.iter().enumerate() {
        let got = r[1].parse::<u64>().unwrap();
        match iters {
            Some(n) => assert_eq!(got, n, "{name}: {cout}"),
            None => assert!(got > 0, "{name}: {cout}"),
        }
        if all {
            assert_eq!(r[0].parse::<u64>().unwrap(), 2 << i, "{name}: {cout}");
        }
    }
}

#[test]
fn write_bw_flags_follow_perftest() {
    check(
        "write_bw_q4",
        "write-bw",
        &["-q", "4", "-s", "4096", "-n", "20"],
    );
    check("write_bw_a", "write-bw", &["-a", "-n", "3"]);
    check("write_bw_b", "write-bw", &["-b", "-s", "4096", "-n", "20"]);
    check("write_bw_a_b", "write-bw", &["-a", "-b", "-n", "3"]);
    check(
        "write_bw_q4_b",
        "write-bw",
        &["-q", "4", "-b", "-s", "4096", "-n", "20"],
    );
}

#[test]
fn send_bw_flags_follow_perftest() {
    check(
        "send_bw_q4",
        "send-bw",
        &["-q", "4", "-s", "4096", "-n", "20"],
    );
    check("send_bw_a", "send-bw", &["-a", "-n", "3"]);
    check("send_bw_b", "send-bw", &["-b", "-s", "4096", "-n", "20"]);
    check("send_bw_a_b", "send-bw", &["-a", "-b", "-n", "3"]);
}

#[test]
fn read_and_atomic_bw_flags_follow_perftest() {
    check(
        "read_bw_q4",
        "read-bw",
        &["-q", "4", "-s", "4096", "-n", "20"],
    );
    check("read_bw_a", "read-bw", &["-a", "-n", "3"]);
    check("read_bw_b", "read-bw", &["-b", "-s", "4096", "-n", "20"]);
    check("atomic_bw", "atomic-bw", &["-n", "20"]);
    check("atomic_bw_q4", "atomic-bw", &["-q", "4", "-n", "20"]);
    check("atomic_bw_b", "atomic-bw", &["-b", "-n", "20"]);
}

#[test]
fn timed_runs_follow_perftest() {
    check("write_bw_D", "write-bw", &["-D", "1", "-s", "4096"]);
    check("send_bw_D", "send-bw", &["-D", "1", "-s", "4096"]);
    check("read_bw_D", "read-bw", &["-D", "1", "-s", "4096"]);
    check("write_bw_D_b", "write-bw", &["-D", "1", "-b", "-s", "4096"]);
    check("send_bw_D_b", "send-bw", &["-D", "1", "-b", "-s", "4096"]);
    check("write_lat_D", "write-lat", &["-D", "1"]);
    check("send_lat_D", "send-lat", &["-D", "1"]);
    check("read_lat_D", "read-lat", &["-D", "1"]);
}

#[test]
fn latency_tests_follow_perftest() {
    check("write_lat", "write-lat", &["-n", "20"]);
    check("read_lat", "read-lat", &["-n", "20"]);
    check("atomic_lat", "atomic-lat", &["-n", "20"]);
    check("write_lat_a", "write-lat", &["-a", "-n", "5"]);
    check("read_lat_a", "read-lat", &["-a", "-n", "5"]);
    check("send_lat_a", "send-lat", &["-a", "-n", "5"]);
}
