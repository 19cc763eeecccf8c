//! `roce inspect` end to end: the real binary on the lab captures and on
//! captures this test builds (corrupted, truncated, PFC, VLAN, CE, IPv6).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use roce_capture::PcapWriter;
use roce_testkit::frames;
use roce_wire::*;

fn testdata(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../testdata")
        .join(rel)
}

fn roce(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_roce"))
        .args(args)
        .output()
        .expect("run roce")
}

fn stdout(o: &Output) -> String {
    String::from_utf8(o.stdout.clone()).unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8(o.stderr.clone()).unwrap()
}

fn path_str(p: &Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn rc_send_lines_and_summary() {
    let f = testdata("captures/rc_send_64B.pcap");
    let o = roce(&["inspect", path_str(&f)]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = stdout(&o);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines[0],
        "15 0.118115 10.77.0.12:49441 > 10.77.0.11:4791 RC SEND_ONLY qp=0x000011 psn=0xa179e0 ackreq payload=64 icrc=ok"
    );
    assert_eq!(
        lines[1],
        "16 0.129384 10.77.0.11:49441 > 10.77.0.12:4791 RC ACKNOWLEDGE qp=0x000011 psn=0xa179e0 ACK credits=unlimited msn=1 icrc=ok"
    );
    assert_eq!(
        out.lines().filter(|l| l.contains(" RC SEND_ONLY ")).count(),
        8
    );
    assert_eq!(out.lines().filter(|l| l.ends_with("icrc=ok")).count(), 16);
    let row = out
        .lines()
        .find(|l| l.starts_with("10.77.0.12 > 10.77.0.11"))
        .unwrap();
    let cols: Vec<&str> = row.split_whitespace().collect();
    // flow(3) qp packets payload messages retx acks naks rnr cnp ce icrc
    assert_eq!(
        &cols[3..],
        &["0x11", "8", "256", "send=4", "0", "4", "0", "0", "0", "0", "0"]
    );
    assert!(out.contains("16 RoCE packets in 2 flows, 0 ICRC failures, 0 malformed"));
}

#[test]
fn atomics_reads_ud_and_naks_decode() {
    let o = roce(&[
        "inspect",
        path_str(&testdata("captures/atomic_fetch_add.pcap")),
    ]);
    let out = stdout(&o);
    assert!(out.contains(
        "RC FETCH_ADD qp=0x00001b psn=0xa3f7a9 ackreq va=0x55f01caa5000 rkey=0xb8b add=0x1 icrc=ok"
    ));
    assert!(out.contains("RC ATOMIC_ACKNOWLEDGE qp=0x00001b psn=0xa3f7a9 ACK credits=unlimited msn=1 orig=0x94a746dfe51da017 icrc=ok"));

    let o = roce(&[
        "inspect",
        path_str(&testdata("captures/rdma_read_4096B.pcap")),
    ]);
    let out = stdout(&o);
    assert!(out.contains("RC RDMA_READ_REQUEST qp=0x000019 psn=0x7cc3f6 ackreq va=0x55a07710b000 rkey=0x939 len=4096 icrc=ok"));
    assert!(
        out.contains("RC RDMA_READ_RESPONSE_MIDDLE qp=0x000019 psn=0x7cc3f7 payload=1024 icrc=ok")
    );

    let o = roce(&[
        "inspect",
        path_str(&testdata("captures/ud_send_1024B.pcap")),
    ]);
    assert!(stdout(&o).contains(
        "UD SEND_ONLY qp=0x000014 psn=0xf80234 qkey=0x11111111 srcqp=0x000014 payload=1024 icrc=ok"
    ));

    let o = roce(&[
        "inspect",
        "--summary",
        path_str(&testdata("captures/rc_write_bw_loss3pct_nak.pcap")),
    ]);
    assert_eq!(o.status.code(), Some(0));
    let out = stdout(&o);
    assert!(
        !out.contains(" icrc=ok"),
        "--summary prints no packet lines"
    );
    let nak_row = out
        .lines()
        .find(|l| l.starts_with("10.77.0.11 > 10.77.0.12"))
        .unwrap();
    assert!(nak_row.contains("psn-seq-err=20"), "{nak_row}");
    let data_row = out
        .lines()
        .find(|l| l.starts_with("10.77.0.12 > 10.77.0.11"))
        .unwrap();
    let cols: Vec<&str> = data_row.split_whitespace().collect();
    assert_eq!(cols[4], "2550");
    // 2550 packets carry 800 distinct PSNs minus the originals lost before
    // the capture point; everything else is go-back-N retransmission.
    let retx: u64 = cols[7].parse().unwrap();
    assert!((1750..=1800).contains(&retx), "retx {retx}");
}

#[test]
fn cm_mads_decode_in_lines_and_json() {
    let f = testdata("captures/rdmacm_rping.pcap");
    let out = stdout(&roce(&["inspect", path_str(&f)]));
    let cm: Vec<&str> = out.lines().filter(|l| l.contains(" CM ")).collect();
    assert_eq!(cm.len(), 5, "{out}");
    assert!(cm[0].contains(
        "CM REQ comm=0x0d453e89 svc=0x1061c06 qpn=0x000021 psn=0x3913cf mtu=1024 rd=1/1 \
         ip=10.77.0.12:55234 > 10.77.0.11 retry=7 rnr_retry=7"
    ));
    assert!(cm[1].contains(
        "CM REP comm=0xc438770a remote=0x0d453e89 qpn=0x000021 psn=0x5d9733 rd=1/1 rnr_retry=7"
    ));
    assert!(cm[2].contains("CM RTU"));
    assert!(cm[3].contains("CM DREQ comm=0x0d453e89 remote=0xc438770a qpn=0x000021"));
    assert!(cm[4].contains("CM DREP"));
    let o = roce(&[
        "inspect",
        "--json",
        path_str(&testdata("captures/rdmacm_udaddy_sidr.pcap")),
    ]);
    let v: Vec<serde_json::Value> = stdout(&o)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(v[0]["cm"]
        .as_str()
        .unwrap()
        .starts_with("SIDR_REQ req=0x0f453e89"));
    assert_eq!(
        v[1]["cm"],
        "SIDR_REP req=0x0f453e89 status=0 qpn=0x000023 qkey=0x01234567"
    );
    assert!(v[2].get("cm").is_none(), "UD data packets are not CM");
}

#[test]
fn qp_filter_and_json() {
    let f = testdata("captures/rdmacm_udaddy_sidr.pcap");
    let all = stdout(&roce(&["inspect", path_str(&f)]));
    let o = roce(&["inspect", "--qp", "1", path_str(&f)]);
    let filtered = stdout(&o);
    let pkt_lines: Vec<&str> = filtered
        .lines()
        .filter(|l| l.contains(" > ") && l.contains("psn="))
        .collect();
    assert!(!pkt_lines.is_empty());
    assert!(pkt_lines
        .iter()
        .all(|l| l.contains("qp=0x000001") || l.contains("srcqp=0x000001")));
    assert!(pkt_lines.len() < all.lines().filter(|l| l.contains("psn=")).count());

    let o = roce(&[
        "inspect",
        "--json",
        path_str(&testdata("captures/rc_send_64B.pcap")),
    ]);
    assert_eq!(o.status.code(), Some(0));
    let values: Vec<serde_json::Value> = stdout(&o)
        .lines()
        .map(|l| serde_json::from_str(l).expect("each line is JSON"))
        .collect();
    assert_eq!(values.len(), 17);
    assert_eq!(values[0]["opcode"], "SEND_ONLY");
    assert_eq!(values[0]["qp"], 0x11);
    assert_eq!(values[0]["icrc_ok"], true);
    assert_eq!(values[1]["aeth"]["type"], "ack");
    let s = &values[16]["summary"];
    assert_eq!(s["roce_packets"], 16);
    assert_eq!(s["flows"].as_array().unwrap().len(), 2);
    assert_eq!(s["flows"][0]["messages"]["send"], 4);
}

#[test]
fn corrupted_packet_fails_with_exit_1() {
    let src = std::fs::read(testdata("captures/rc_send_64B.pcap")).unwrap();
    // Corrupt the last payload byte before the ICRC of every 64-byte SEND:
    // find the frames by their opcode in a fresh capture written here.
    let mut reader = roce_capture::CaptureReader::new(&src[..]).unwrap();
    let mut w = PcapWriter::new(Vec::new()).unwrap();
    let mut corrupted = 0;
    while let Some(p) = reader.next_packet() {
        let p = p.unwrap();
        let mut frame = p.data.to_vec();
        if let Ok(Frame::Roce(r)) = Frame::parse_ethernet(&frame) {
            if r.bth.opcode == Opcode::RC_SEND_ONLY && corrupted == 0 {
                let n = frame.len();
                frame[n - 5] ^= 0x01;
                corrupted += 1;
            }
        }
        w.write_packet(p.ts_ns, &frame).unwrap();
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("corrupt.pcap");
    std::fs::write(&path, w.into_inner().unwrap()).unwrap();
    let o = roce(&["inspect", path_str(&path)]);
    assert_eq!(o.status.code(), Some(1));
    let out = stdout(&o);
    let bad: Vec<&str> = out
        .lines()
        .filter(|l| l.contains("icrc=BAD(expected "))
        .collect();
    assert_eq!(bad.len(), 1, "{out}");
    // The expected value printed is the CRC of the bytes as they now are.
    assert!(bad[0].starts_with("15 "), "{}", bad[0]);
    assert!(out.contains("1 ICRC failures"));
    // --summary still exits 1.
    assert_eq!(
        roce(&["inspect", "--summary", path_str(&path)])
            .status
            .code(),
        Some(1)
    );
}

/// Frames the capture cut at its snap length (captured < on-the-wire
/// length) are shown as truncated and not counted as malformed: the rest
/// of the file still decides the exit status.
#[test]
fn frames_cut_by_the_snap_length_are_not_malformed() {
    let src = std::fs::read(testdata("captures/rc_send_64B.pcap")).unwrap();
    let mut reader = roce_capture::CaptureReader::new(&src[..]).unwrap();
    // A classic little-endian pcap written here, one frame cut to 60 bytes
    // (Ethernet, IPv4, UDP and part of the BTH).
    let mut out = Vec::new();
    for v in [0xa1b2_c3d4u32, 0x0004_0002, 0, 0, 60, 1] {
        out.extend_from_slice(&v.to_le_bytes());
    }
    let mut cut = false;
    while let Some(p) = reader.next_packet() {
        let p = p.unwrap();
        // The first RoCE-sized frame (the capture starts with ARP and such).
        let keep = if !cut && p.data.len() > 100 {
            cut = true;
            60
        } else {
            p.data.len()
        };
        let ts_us = p.ts_ns / 1000;
        for v in [
            (ts_us / 1_000_000) as u32,
            (ts_us % 1_000_000) as u32,
            keep as u32,
            p.data.len() as u32,
        ] {
            out.extend_from_slice(&v.to_le_bytes());
        }
        out.extend_from_slice(&p.data[..keep]);
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("snap.pcap");
    std::fs::write(&path, out).unwrap();
    let o = roce(&["inspect", path_str(&path)]);
    let text = stdout(&o);
    assert_eq!(o.status.code(), Some(0), "{text} {}", stderr(&o));
    assert!(
        text.contains(" TRUNCATED by the capture: 60 of 118 bytes"),
        "{text}"
    );
    assert!(text.contains(" 0 malformed"), "{text}");
    assert!(
        text.contains("1 cut short by the capture's snap length"),
        "{text}"
    );
    let o = roce(&["inspect", "--summary", "--json", path_str(&path)]);
    let v: serde_json::Value = serde_json::from_str(stdout(&o).trim()).unwrap();
    assert_eq!(v["summary"]["truncated"], 1);
    assert_eq!(v["summary"]["malformed"], 0);
}

#[test]
fn truncated_and_unreadable_files_exit_2_with_one_line() {
    let src = std::fs::read(testdata("captures/rc_send_64B.pcap")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let cut = dir.path().join("cut.pcap");
    std::fs::write(&cut, &src[..src.len() - 10]).unwrap();
    let o = roce(&["inspect", path_str(&cut)]);
    assert_eq!(o.status.code(), Some(2));
    let err = stderr(&o);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("cut.pcap") && err.contains("offset") && err.contains("truncated"),
        "{err}"
    );
    assert!(!err.contains("panicked"));
    // What was readable is still shown.
    assert!(stdout(&o).contains("RC SEND_ONLY"));

    let junk = dir.path().join("junk.pcap");
    std::fs::write(&junk, b"this is not a capture file at all").unwrap();
    let o = roce(&["inspect", path_str(&junk)]);
    assert_eq!(o.status.code(), Some(2));
    assert_eq!(stderr(&o).lines().count(), 1);

    let o = roce(&["inspect", "/nonexistent/file.pcap"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("/nonexistent/file.pcap: No such file"));
    // Nothing was read: no (empty) summary either.
    assert_eq!(stdout(&o), "");
    let o = roce(&["inspect", path_str(dir.path())]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("is a directory"), "{}", stderr(&o));
    assert_eq!(stdout(&o), "");

    let o = roce(&["inspect", "--qp", "0x1000000", path_str(&cut)]);
    assert_eq!(o.status.code(), Some(2), "bad flag value is a usage error");
}

#[test]
fn other_container_formats_give_the_same_packets() {
    let base = stdout(&roce(&[
        "inspect",
        path_str(&testdata("captures/rc_send_64B.pcap")),
    ]));
    let dir = testdata("capture-formats");
    let mut checked = 0;
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        let name = p.file_name().unwrap().to_string_lossy().into_owned();
        if !name.starts_with("rc_send_64B.") || name.ends_with(".py") || name.contains("multi") {
            continue;
        }
        let o = roce(&["inspect", path_str(&p)]);
        assert_eq!(o.status.code(), Some(0), "{name}: {}", stderr(&o));
        let got = stdout(&o);
        // Raw IP captures hold only the IP frames (no ARP), so frame
        // numbers and times relative to the first frame differ; the rest of
        // every RoCE line is identical.
        let roce_lines = |s: &str| -> Vec<String> {
            s.lines()
                .filter(|l| l.contains("icrc="))
                .map(|l| l.splitn(3, ' ').nth(2).unwrap().to_string())
                .collect()
        };
        assert_eq!(roce_lines(&got), roce_lines(&base), "{name}");
        checked += 1;
    }
    assert!(checked >= 8, "only {checked} container variants checked");
}

/// A capture with PFC, PAUSE, a VLAN-tagged ECN-CE packet over IPv4, an
/// IPv6 packet, a CNP and a malformed RoCE packet.
#[test]
fn pfc_vlan_ecn_ipv6_cnp_and_malformed() {
    let mut w = PcapWriter::new(Vec::new()).unwrap();
    let mut buf = [0u8; 2048];
    let src = MacAddr([2, 0, 0, 0, 0, 1]);
    let pfc = MacControl::Pfc {
        enable: 0b1000_1000,
        quanta: [0, 0, 0, 0xffff, 0, 0, 0, 0],
    };
    let n = pfc.emit_frame(src, &mut buf).unwrap();
    w.write_packet(1_000, &buf[..n]).unwrap();
    let n = MacControl::Pause { quanta: 0 }
        .emit_frame(src, &mut buf)
        .unwrap();
    w.write_packet(2_000, &buf[..n]).unwrap();

    let eth = EthernetRepr {
        dst: MacAddr([2, 0, 0, 0, 0, 2]),
        src,
        vlan: Some(VlanTag {
            pcp: 3,
            dei: false,
            vid: 100,
        }),
        ethertype: 0,
    };
    let v4 = IpRepr::V4(Ipv4Repr {
        dscp: 26,
        ecn: Ecn::Ce,
        ..frames::ipv4([10, 0, 0, 1].into(), [10, 0, 0, 2].into())
    });
    let udp = frames::udp(0xc001);
    let payload = [0x5au8; 1024];
    let mut bth = BthRepr::new(
        Opcode::from_u8(0x06).unwrap(),
        Qpn::new(0x11),
        Psn::new(0x3a2b1c),
    );
    bth.ack_req = true;
    let ext = ExtHeaders {
        reth: Some(RethRepr {
            va: 0x7f00_0000_1000,
            rkey: Rkey::new(0x1a2b),
            dma_len: 65536,
        }),
        ..Default::default()
    };
    let write_first = FrameRepr {
        eth: Some(eth),
        ip: v4,
        udp,
        bth,
        ext,
        payload: &payload,
    };
    w.write_packet(153_000, &frames::emit(&write_first))
        .unwrap();

    let v6 = IpRepr::V6(Ipv6Repr {
        src: "fd00::1".parse().unwrap(),
        dst: "fd00::2".parse().unwrap(),
        dscp: 48,
        ecn: Ecn::NotEct,
        flow_label: 0,
        hop_limit: 64,
        payload_len: 0,
    });
    let mut cnp_bth = BthRepr::new(Opcode::CNP, Qpn::new(0x11), Psn::new(0));
    cnp_bth.becn = true;
    let cnp = FrameRepr {
        eth: Some(EthernetRepr { vlan: None, ..eth }),
        ip: v6,
        udp,
        bth: cnp_bth,
        ext: ExtHeaders::default(),
        payload: &[],
    };
    w.write_packet(200_000, &frames::emit(&cnp)).unwrap();

    // A RoCE packet whose BTH TVer is 1: malformed.
    let mut bad = frames::emit(&write_first);
    bad[18 + 20 + 8 + 1] |= 1;
    w.write_packet(300_000, &bad).unwrap();

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("mixed.pcap");
    std::fs::write(&path, w.into_inner().unwrap()).unwrap();
    let o = roce(&["inspect", path_str(&path)]);
    let out = stdout(&o);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines[0],
        "1 0.000000 02:00:00:00:00:01 > 01:80:c2:00:00:01 PFC prio3=65535 prio7=xon"
    );
    assert_eq!(
        lines[1],
        "2 0.000001 02:00:00:00:00:01 > 01:80:c2:00:00:01 PAUSE quanta=0 (resume)"
    );
    assert_eq!(
        lines[2],
        "3 0.000152 10.0.0.1:49153 > 10.0.0.2:4791 RC RDMA_WRITE_FIRST qp=0x000011 psn=0x3a2b1c ackreq va=0x7f0000001000 rkey=0x1a2b len=65536 payload=1024 ecn=ce vlan=100 pcp=3 icrc=ok"
    );
    assert_eq!(
        lines[3],
        "4 0.000199 [fd00::1]:49153 > [fd00::2]:4791 CNP qp=0x000011 psn=0x000000 icrc=ok"
    );
    assert_eq!(lines[4], "5 0.000299 MALFORMED BTH TVer 1 (must be 0)");
    assert_eq!(
        o.status.code(),
        Some(1),
        "a malformed RoCE packet fails the run"
    );
    let row = out
        .lines()
        .find(|l| l.starts_with("10.0.0.1 > 10.0.0.2"))
        .unwrap();
    let cols: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(cols[12], "1", "one CE-marked packet: {row}");
    let cnp_row = out
        .lines()
        .find(|l| l.starts_with("fd00::1 > fd00::2"))
        .unwrap();
    assert_eq!(
        cnp_row.split_whitespace().nth(11),
        Some("1"),
        "one CNP: {cnp_row}"
    );
    assert!(out.contains("2 PAUSE/PFC frames"));
    assert!(out.contains("1 malformed"));
}
