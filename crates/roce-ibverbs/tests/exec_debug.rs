//! `roce exec --pcap/--faults/--stats` as the library sees them
//! (`ROCE_PCAP`, `ROCE_FAULTS`, `ROCE_STATS`, docs/debugging.md), on
//! unmodified programs (Debian's perftest and ibverbs-utils) run in
//! pairs on 127.0.0.1: both processes share the address, so every
//! datagram between them goes through the same-host shared-memory rings
//! (docs/shm.md). A missing program is a printed skip (a failure in CI,
//! `ROCE_REQUIRE_RDMA_TOOLS`).

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use common::{free_port, have, listening};
use roce_testkit::Guard;
use roce_wire::RocePacket;

const LIMIT: Duration = Duration::from_secs(60);

fn command(prog: &str, args: &[String], env: &[(&str, String)]) -> Command {
    let mut c = Command::new(prog);
    c.args(args)
        .env("LD_LIBRARY_PATH", common::dropin("exec-debug-dropin"))
        .env_remove("ROCE_ADDR")
        .env_remove("ROCE_PCAP")
        .env_remove("ROCE_FAULTS")
        .env_remove("ROCE_STATS")
        .env_remove("ROCE_STATS_JSON")
        .env("ROCE_DEVICES", "lo");
    for (k, v) in env {
        c.env(k, v);
    }
    c
}

fn text(o: &Output) -> String {
    roce_testkit::text_of(o)
}

/// Runs `prog` as server (`sargs`, `senv`) and client (the same
/// arguments and the server's address, `cenv`); both must exit 0.
/// Returns (server, client) outputs.
fn pair(
    prog: &str,
    args: &[&str],
    client_args: &[&str],
    senv: &[(&str, String)],
    cenv: &[(&str, String)],
) -> (Output, Output) {
    let port = free_port();
    let mut a: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    a.extend(["-p".to_string(), port.to_string()]);
    let server = Guard::spawn(command(prog, &a, senv));
    let end = Instant::now() + LIMIT;
    while !listening(port) {
        assert!(Instant::now() < end, "{prog}: the server did not listen");
        std::thread::sleep(Duration::from_millis(10));
    }
    let mut ca = a.clone();
    ca.extend(client_args.iter().map(|s| s.to_string()));
    ca.push("127.0.0.1".into());
    let client = Guard::spawn(command(prog, &ca, cenv)).wait(LIMIT);
    let server = server.wait(LIMIT);
    assert!(
        client.status.success() && server.status.success(),
        "{prog}: server:\n{}\nclient:\n{}",
        text(&server),
        text(&client)
    );
    (server, client)
}

/// One captured RoCE datagram.
#[derive(Debug, PartialEq, Eq, Clone)]
struct Rec {
    ts: u64,
    icrc_ok: bool,
    opcode: u8,
    dest_qpn: u32,
    psn: u32,
    payload: usize,
}

fn capture(path: &Path) -> Vec<Rec> {
    let mut r = roce_capture::CaptureReader::open(path).unwrap();
    let mut out = Vec::new();
    while let Some(p) = r.next_packet() {
        let p = p.unwrap();
        let roce_capture::Payload::Ethernet(f) = p.payload().unwrap() else {
            panic!("not Ethernet")
        };
        let rp = RocePacket::parse_ethernet(f).unwrap();
        out.push(Rec {
            ts: p.ts_ns,
            icrc_ok: rp.computed_icrc() == rp.icrc,
            opcode: rp.bth.opcode.value(),
            dest_qpn: rp.bth.dest_qp.value(),
            psn: rp.bth.psn.value(),
            payload: rp.payload.len(),
        });
    }
    out
}

/// `"key":N` of the first QP in a `ROCE_STATS_JSON` summary.
fn field(json: &str, key: &str) -> u64 {
    let at = json
        .find(&format!("\"{key}\":"))
        .unwrap_or_else(|| panic!("no {key} in {json}"));
    json[at + key.len() + 3..]
        .split(|c: char| !c.is_ascii_digit())
        .next()
        .unwrap()
        .parse()
        .unwrap()
}

fn tmp(name: &str) -> PathBuf {
    let d = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("exec-debug");
    std::fs::create_dir_all(&d).unwrap();
    let p = d.join(name);
    let _ = std::fs::remove_file(&p);
    p
}

fn env_for(pcap: &Path, stats: &Path) -> Vec<(&'static str, String)> {
    vec![
        ("ROCE_PCAP", pcap.display().to_string()),
        ("ROCE_STATS", stats.display().to_string()),
        ("ROCE_STATS_JSON", "1".into()),
    ]
}

/// An unmodified `ib_send_bw` pair through the shared-memory path: each
/// process's capture holds every packet its QP counted, sent and
/// received, each with a valid ICRC, in time order.
#[test]
fn perftest_capture_holds_every_packet() {
    if !have("ib_send_bw") {
        return;
    }
    let (sp, ss, cp, cs) = (
        tmp("bw-server.pcap"),
        tmp("bw-server.json"),
        tmp("bw-client.pcap"),
        tmp("bw-client.json"),
    );
    let args = ["-d", "roce_lo", "-x", "0", "-n", "300", "-s", "8192"];
    pair(
        "ib_send_bw",
        &args,
        &[],
        &env_for(&sp, &ss),
        &env_for(&cp, &cs),
    );
    for (pcap, stats) in [(&sp, &ss), (&cp, &cs)] {
        let json = std::fs::read_to_string(stats).unwrap();
        assert!(json.contains("\"addr\":\"127.0.0.1\""), "{json}");
        let qpn = field(&json, "qpn") as u32;
        let recs = capture(pcap);
        assert!(
            recs.iter().all(|r| r.icrc_ok),
            "{}: a bad ICRC",
            pcap.display()
        );
        assert!(recs.windows(2).all(|w| w[0].ts <= w[1].ts), "out of order");
        let received = recs.iter().filter(|r| r.dest_qpn == qpn).count() as u64;
        let sent = recs.len() as u64 - received;
        assert_eq!(
            sent,
            field(&json, "tx_packets"),
            "{}: {json}",
            pcap.display()
        );
        assert_eq!(
            received,
            field(&json, "rx_packets"),
            "{}: {json}",
            pcap.display()
        );
    }
    // 300 SENDs of 8192 bytes at the 4096-byte MTU: 600 packets of 4096.
    let c = capture(&cp);
    assert_eq!(c.iter().filter(|r| r.payload == 4096).count(), 600);
    assert!(field(&std::fs::read_to_string(&cs).unwrap(), "SUCCESS") >= 1);
}

/// What a capture shows of one run, without what differs between runs
/// (times, QPNs, initial PSNs): per direction, the opcodes, payload
/// lengths and PSNs from the first of their kind (ACKs carry the peer's
/// PSNs, requests the sender's).
/// Per datagram: opcode, payload length, PSN from the first.
type Shape = Vec<(u8, usize, u32)>;

fn shape(recs: &[Rec], qpn: u32) -> (Shape, Shape) {
    let side = |rx: bool| {
        let v: Vec<&Rec> = recs.iter().filter(|r| (r.dest_qpn == qpn) == rx).collect();
        let base = |ack: bool| {
            v.iter()
                .find(|r| (r.opcode == 0x11) == ack)
                .map_or(0, |r| r.psn)
        };
        let (req, ack) = (base(false), base(true));
        v.iter()
            .map(|r| {
                let b = if r.opcode == 0x11 { ack } else { req };
                (r.opcode, r.payload, r.psn.wrapping_sub(b) & 0xff_ffff)
            })
            .collect()
    };
    (side(false), side(true))
}

/// The injections the library said on stderr, without times, QPNs and
/// PSNs.
fn injections(stderr: &str) -> Vec<String> {
    stderr
        .lines()
        .filter_map(|l| l.strip_prefix("libibverbs (roce): fault: "))
        .map(|l| {
            let (action, rest) = l.split_once(" at ").unwrap();
            let what = rest.split_once(": ").unwrap().1;
            let what = what.split(" to QP").next().unwrap();
            format!("{action}: {what}")
        })
        .collect()
}

/// The same plan twice on `ibv_rc_pingpong` with fixed sizes gives the
/// same faults: the same injections in the same order, and captures of
/// the same shape. Not byte-identical files: QPNs and PSNs are random
/// (the program draws its PSNs from `lrand48`) and timestamps are real.
#[test]
fn same_plan_twice_same_faults() {
    if !have("ibv_rc_pingpong") {
        return;
    }
    let plan = "seed=11,loss=4%; drop op=send nth=5; drop-acks nth=9";
    let run = |n: u32| {
        let (cp, cs) = (tmp(&format!("pp{n}.pcap")), tmp(&format!("pp{n}.json")));
        let mut cenv = env_for(&cp, &cs);
        cenv.push(("ROCE_FAULTS", plan.to_string()));
        cenv.push(("ROCE_ACK_DELAY", "0".into()));
        let senv = vec![("ROCE_ACK_DELAY", "0".to_string())];
        let args = ["-d", "roce_lo", "-g", "0", "-s", "1024", "-n", "40"];
        let (_, c) = pair("ibv_rc_pingpong", &args, &[], &senv, &cenv);
        let err = String::from_utf8_lossy(&c.stderr).to_string();
        let json = std::fs::read_to_string(&cs).unwrap();
        let qpn = field(&json, "qpn") as u32;
        let recs = capture(&cp);
        assert!(recs.iter().all(|r| r.icrc_ok));
        (injections(&err), shape(&recs, qpn), err)
    };
    let (i1, s1, e1) = run(1);
    let (i2, s2, e2) = run(2);
    assert_eq!(i1.len(), 2, "{e1}");
    assert!(i1[0].contains("sent RC SEND_ONLY"), "{e1}");
    assert!(i1[1].contains("received RC ACKNOWLEDGE"), "{e1}");
    assert_eq!(i1, i2, "{e1}\n{e2}");
    let summary = |e: &str| {
        e.lines()
            .find(|l| l.contains("faults injected"))
            .unwrap_or_default()
            .to_string()
    };
    assert!(summary(&e1).contains("seeded (seed 11): tx_lost"), "{e1}");
    assert_eq!(summary(&e1), summary(&e2));
    for (a, b, what) in [(&s1.0, &s2.0, "sent"), (&s1.1, &s2.1, "received")] {
        let first = a.iter().zip(b.iter()).position(|(x, y)| x != y);
        assert!(
            a == b,
            "{what}: {} and {} datagrams, first difference at {first:?}:\n{a:?}\n{b:?}",
            a.len(),
            b.len()
        );
    }
}

/// Targeted faults show in the program's counters: an RNR window on the
/// receiving side makes `ib_send_bw`'s requester take RNR NAKs (and
/// still finish: perftest retries RNR without limit), dropped ACKs make
/// the sender time out and retransmit.
#[test]
fn targeted_faults_show_in_the_stats() {
    if !have("ib_send_bw") {
        return;
    }
    let (ss, cs) = (tmp("rnr-server.json"), tmp("rnr-client.json"));
    // The server refuses every receive for its first 1.5 s (the client
    // starts within it); the client loses every ACK (RNR NAKs too) for
    // its first 300 ms.
    let senv = vec![
        ("ROCE_FAULTS", "rnr at=0 for=1500ms".to_string()),
        ("ROCE_STATS", ss.display().to_string()),
        ("ROCE_STATS_JSON", "1".into()),
    ];
    let cenv = vec![
        ("ROCE_FAULTS", "drop-acks for=300ms".to_string()),
        ("ROCE_STATS", cs.display().to_string()),
        ("ROCE_STATS_JSON", "1".into()),
    ];
    let args = ["-d", "roce_lo", "-x", "0", "-n", "100", "-s", "4096"];
    let (s, c) = pair("ib_send_bw", &args, &[], &senv, &cenv);
    let (sj, cj) = (
        std::fs::read_to_string(&ss).unwrap(),
        std::fs::read_to_string(&cs).unwrap(),
    );
    assert!(field(&sj, "rnr_naks_sent") > 0, "{sj}\n{}", text(&s));
    let rnr = field(&cj, "rnr_naks_received");
    assert!(rnr > 0 && rnr <= field(&sj, "rnr_naks_sent"), "{cj}\n{sj}");
    assert!(field(&cj, "retransmitted") > 0, "{cj}");
    assert!(field(&cj, "timeouts") > 0, "{cj}\n{}", text(&c));
    let err = String::from_utf8_lossy(&c.stderr);
    let said = err
        .lines()
        .find_map(|l| {
            l.strip_prefix(
                "libibverbs (roce): faults injected: [drop op=ack at=0ms for=300ms dir=rx]: ",
            )
        })
        .unwrap_or_else(|| panic!("{err}"));
    let dropped: u64 = said.split(' ').next().unwrap().parse().unwrap();
    assert!(dropped > 0, "{err}");
}

/// A plan that does not parse is said once, and the program runs without
/// faults (never a failed open).
#[test]
fn a_bad_plan_is_said_once() {
    if !have("ibv_devinfo") {
        return;
    }
    let mut c = command(
        "ibv_devinfo",
        &[],
        &[("ROCE_FAULTS", "drop op=nope".into())],
    );
    c.arg("-v");
    let o = Guard::spawn(c).wait(LIMIT);
    assert!(o.status.success(), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(err.matches("running without faults").count(), 1, "{err}");
    assert!(err.contains("op=nope"), "{err}");
}
