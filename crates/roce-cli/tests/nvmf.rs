//! `roce nvmf` end to end on loopback (UDP backend): our target in one
//! process, our host in another; the host writes a pattern, reads it back
//! and compares, reads the discovery log and runs `perf` for a second; a
//! host not on the allow-list is refused.

mod common;

use std::time::Duration;

use common::{roce, text, Guard};
use roce_testkit::free_port;

#[test]
fn check_and_discover_against_our_target() {
    let rp = free_port().to_string();
    // Killed when the guard drops (the target serves until Ctrl-C).
    let _target = Guard::spawn({
        let mut c = roce();
        c.args(["nvmf", "target", "--bind", "127.0.0.1", "--mem", "1024"])
            .args(["--allow-host", "nqn.2026-01.test:host", "--roce-port", &rp]);
        c
    });
    std::thread::sleep(Duration::from_millis(500));
    let host = |args: &[&str]| {
        let mut c = roce();
        c.args(["nvmf"])
            .args(args)
            .args(["127.0.0.1", "--bind", "127.0.0.2", "--roce-port", &rp]);
        Guard::spawn(c).wait(Duration::from_secs(30))
    };
    let c = host(&[
        "check",
        "--hostnqn",
        "nqn.2026-01.test:host",
        "--blocks",
        "200",
    ]);
    let (o, e) = text(&c);
    assert_eq!(c.status.code(), Some(0), "check: {o}{e}");
    assert!(
        o.contains("200 blocks of 512 bytes written and read back identical"),
        "{o}"
    );
    // `roce inspect` decodes the capsules of a recorded check.
    let dir = tempfile::tempdir().unwrap();
    let pcap = dir.path().join("nvmf.pcap");
    let pcap_s = pcap.to_str().unwrap();
    let c = host(&[
        "check",
        "--hostnqn",
        "nqn.2026-01.test:host",
        "--blocks",
        "8",
        "--pcap",
        pcap_s,
    ]);
    assert_eq!(c.status.code(), Some(0), "check --pcap: {}", text(&c).1);
    let i = Guard::spawn({
        let mut c = roce();
        c.args(["inspect", "--json", pcap_s]);
        c
    })
    .wait(Duration::from_secs(30));
    let (o, e) = text(&i);
    assert_eq!(i.status.code(), Some(0), "inspect: {e}");
    let nvmf: Vec<String> = o
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter_map(|v| v["nvmf"].as_str().map(String::from))
        .collect();
    for want in [
        "CM request qid=0 hrqsize=32 hsqsize=31",
        "qid=0 Connect cid=0 qid=0 sqsize=31 kato=5000 sgl=keyed(",
        "qid=0 Identify cid=",
        "qid=1 Connect cid=0 qid=1 sqsize=31 kato=0 sgl=incapsule(off=0 len=1024) data=1024",
        "qid=1 Write cid=1 nsid=1 slba=0 nlb=8 sgl=keyed(",
        "qid=1 Read cid=2 nsid=1 slba=0 nlb=8 sgl=keyed(",
        "qid=1 response cid=2 sqhd=3 success",
    ] {
        assert!(
            nvmf.iter().any(|l| l.starts_with(want)),
            "no {want:?} in {nvmf:#?}"
        );
    }
    let d = host(&["discover", "--hostnqn", "nqn.2026-01.test:host"]);
    let (o, e) = text(&d);
    assert_eq!(d.status.code(), Some(0), "discover: {o}{e}");
    assert!(
        o.contains("Number of Records 1") && o.contains("subnqn:  nqn.2026-01.org.roce:nvmf"),
        "{o}"
    );
    let p = host(&[
        "perf",
        "--hostnqn",
        "nqn.2026-01.test:host",
        "--rw",
        "randwrite",
        "--time",
        "1",
        "--qd",
        "8",
        "--json",
    ]);
    let (o, e) = text(&p);
    assert_eq!(p.status.code(), Some(0), "perf: {o}{e}");
    let v: serde_json::Value = serde_json::from_str(o.trim()).unwrap();
    assert_eq!(v["errors"], 0, "{o}");
    assert!(v["ios"].as_u64().unwrap() > 0, "{o}");
    assert!(
        v["lat_us"]["p99"].as_u64().unwrap() >= v["lat_us"]["p50"].as_u64().unwrap(),
        "{o}"
    );
    let r = host(&["check", "--hostnqn", "nqn.2026-01.test:intruder"]);
    let (o, e) = text(&r);
    assert_eq!(r.status.code(), Some(1), "{o}{e}");
}

#[test]
fn target_from_an_nvmetcli_json_file() {
    let rp = free_port().to_string();
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("nvmet.json");
    std::fs::write(
        &cfg,
        r#"{"ports": [{"addr": {"adrfam": "ipv4", "traddr": "127.0.0.1", "trsvcid": "4420",
                             "trtype": "rdma"}, "portid": 1, "subsystems": ["nqn.2026-01.test:json"]}],
           "subsystems": [{"nqn": "nqn.2026-01.test:json",
                           "attr": {"allow_any_host": "0"},
                           "allowed_hosts": ["nqn.2026-01.test:host"],
                           "namespaces": [{"nsid": 1, "enable": 1,
                                           "device": {"mem_blocks": 256, "block_size": 4096}}]}]}"#,
    )
    .unwrap();
    let _target = Guard::spawn({
        let mut c = roce();
        c.args([
            "nvmf",
            "target",
            "--config",
            cfg.to_str().unwrap(),
            "--roce-port",
            &rp,
        ]);
        c
    });
    std::thread::sleep(Duration::from_millis(500));
    let mut c = roce();
    c.args([
        "nvmf",
        "check",
        "127.0.0.1",
        "--bind",
        "127.0.0.2",
        "--roce-port",
        &rp,
    ])
    .args([
        "--nqn",
        "nqn.2026-01.test:json",
        "--hostnqn",
        "nqn.2026-01.test:host",
        "--blocks",
        "32",
    ]);
    let o = Guard::spawn(c).wait(Duration::from_secs(30));
    let (out, err) = text(&o);
    assert_eq!(o.status.code(), Some(0), "{out}{err}");
    assert!(
        out.contains("32 blocks of 4096 bytes written and read back identical"),
        "{out}"
    );
}

/// `perf --verify`: a write pass leaves the pattern on a file-backed
/// namespace and reads it back; a read pass checks it; then a byte is
/// flipped and a block copied over another in the file, behind the
/// target's back, and the next read pass reports both blocks by LBA,
/// counts them and fails.
#[test]
fn perf_verify_finds_corrupt_and_misplaced_blocks() {
    const BS: u64 = 4096;
    const BLOCKS: u64 = 128;
    let rp = free_port().to_string();
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("ns.img");
    std::fs::File::create(&img)
        .unwrap()
        .set_len(BS * BLOCKS)
        .unwrap();
    let _target = Guard::spawn({
        let mut c = roce();
        c.args(["nvmf", "target", "--bind", "127.0.0.1", "--file"])
            .arg(&img)
            .args(["--block-size", "4096", "--roce-port", &rp]);
        c
    });
    std::thread::sleep(Duration::from_millis(500));
    let perf = |args: &[&str]| {
        let mut c = roce();
        c.args(["nvmf", "perf", "127.0.0.1", "--bind", "127.0.0.2"])
            .args(["--roce-port", &rp, "--qd", "8", "--time", "30", "--json"])
            .args(args);
        let o = Guard::spawn(c).wait(Duration::from_secs(60));
        let (out, err) = text(&o);
        let v: serde_json::Value =
            serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("{e}: {out}{err}"));
        (o.status.code(), v, err)
    };
    let all = BLOCKS.to_string();
    // Write pass: every block once, read back and checked after it.
    let (code, v, err) = perf(&["--rw", "write", "--ios", &all, "--verify"]);
    assert_eq!(code, Some(0), "{v}{err}");
    assert_eq!(v["ios"], BLOCKS, "{v}");
    assert_eq!(v["verify"]["enabled"], true, "{v}");
    assert_eq!(v["verify"]["blocks_checked"], BLOCKS, "{v}");
    assert_eq!(v["verify"]["mismatches"], 0, "{v}");
    // Read pass, random, with the same seed: clean.
    let (code, v, err) = perf(&["--rw", "randread", "--ios", "300", "--verify"]);
    assert_eq!(code, Some(0), "{v}{err}");
    assert_eq!(v["verify"]["blocks_checked"], 300, "{v}");
    // Another seed's pattern is not this one.
    let (code, v, _) = perf(&[
        "--rw",
        "read",
        "--ios",
        "4",
        "--verify",
        "--verify-seed",
        "2",
    ]);
    assert_eq!(code, Some(1), "{v}");
    assert_eq!(v["verify"]["mismatches"], 4, "{v}");
    // Behind the target's back: a flipped byte in block 77, block 5 over block 9.
    let mut b = std::fs::read(&img).unwrap();
    b[(77 * BS + 1000) as usize] ^= 0x5a;
    let five = b[(5 * BS) as usize..(6 * BS) as usize].to_vec();
    b[(9 * BS) as usize..(10 * BS) as usize].copy_from_slice(&five);
    std::fs::write(&img, &b).unwrap();
    let (code, v, err) = perf(&["--rw", "read", "--ios", &all, "--verify"]);
    assert_eq!(code, Some(1), "{v}{err}");
    assert_eq!(v["errors"], 0, "{v}");
    assert_eq!(v["verify"]["blocks_checked"], BLOCKS, "{v}");
    assert_eq!(v["verify"]["mismatches"], 2, "{v}");
    let mut first: Vec<u64> = v["verify"]["first"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l.as_u64().unwrap())
        .collect();
    first.sort_unstable();
    assert_eq!(first, [9, 77], "{v}");
    assert!(
        err.contains("verify: LBA 77: byte 1000 differs; its header is right, its data is not"),
        "{err}"
    );
    assert!(
        err.contains("verify: LBA 9: byte 0 differs; its header names LBA 5 seed 1"),
        "{err}"
    );
    assert!(err.contains("2 blocks failed verification"), "{err}");
}
