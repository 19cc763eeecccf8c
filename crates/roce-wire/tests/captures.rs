//! Every RoCE v2 packet in the captures of real rxe peers (testdata/captures,
//! made between two rxe VMs like those of interop/lab) parses, verifies its ICRC, and re-emits
//! byte-identical from its reprs; per-opcode counts match the Wireshark
//! tallies recorded next to each capture.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use roce_capture::{CaptureReader, Payload};
use roce_wire::{Frame, RocePacket};

fn captures() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/captures");
    let mut v: Vec<_> = std::fs::read_dir(&dir)
        .expect("testdata/captures")
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "pcap"))
        // The rxe lab's captures; `lo_tcpdump_*` is this stack's own
        // traffic as tcpdump sees it on loopback (unfinished UDP checksums,
        // GSO batches), which roce-cli's inspect tests read.
        .filter(|p| {
            !p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("lo_tcpdump"))
        })
        .collect();
    v.sort();
    v
}

/// From the capture's .txt: total RoCE packets and count per opcode value.
fn expected_counts(pcap: &Path) -> (usize, BTreeMap<u8, usize>) {
    let txt = std::fs::read_to_string(pcap.with_extension("txt")).expect("capture notes");
    let mut total = None;
    let mut per_op = BTreeMap::new();
    let mut in_table = false;
    for line in txt.lines() {
        if let Some(rest) = line.strip_prefix("frames: ") {
            // "frames: 30 total, 16 RoCE v2 (UDP 4791); ..."
            let n = rest.split(", ").nth(1).and_then(|s| s.split(' ').next());
            total = n.map(|n| n.parse().unwrap());
        } else if line.starts_with("RoCE packets per BTH opcode") {
            in_table = true;
        } else if in_table {
            let mut it = line.split_whitespace();
            match (
                it.next().map(str::parse::<usize>),
                it.next().map(str::parse::<u8>),
            ) {
                (Some(Ok(n)), Some(Ok(op))) => {
                    // Wireshark splits some opcodes by what they carry (CM MADs).
                    *per_op.entry(op).or_insert(0) += n;
                }
                _ => in_table = false,
            }
        }
    }
    (total.expect("frames: line"), per_op)
}

#[test]
fn every_capture_packet_verifies_and_reemits_identically() {
    let files = captures();
    assert!(
        files.len() >= 12,
        "expected the 12 lab captures, found {}",
        files.len()
    );
    let mut grand_total = 0;
    for path in files {
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let mut reader = CaptureReader::open(&path).unwrap();
        let mut per_op = BTreeMap::new();
        let mut roce = 0;
        while let Some(pkt) = reader.next_packet() {
            let pkt = pkt.unwrap();
            let Payload::Ethernet(frame) = pkt.payload().unwrap() else {
                panic!("{name}: lab captures are Ethernet");
            };
            let p = match Frame::parse_ethernet(frame) {
                Ok(Frame::Roce(p)) => p,
                Ok(_) => continue,
                Err(e) => panic!("{name} frame {}: {e}", pkt.index),
            };
            roce += 1;
            *per_op.entry(p.bth.opcode.value()).or_insert(0) += 1;
            p.check_icrc()
                .unwrap_or_else(|e| panic!("{name} frame {}: {e}", pkt.index));
            let repr = p.to_repr();
            let mut out = vec![0u8; repr.len()];
            let n = repr.emit(&mut out).unwrap();
            assert_eq!(
                &out[..],
                &frame[..n],
                "{name} frame {}: re-emit differs",
                pkt.index
            );
            // The same packet parsed from its IP datagram is the same packet.
            let hdr = frame.len() - (frame.len() - n) - p.ip_len();
            let q = RocePacket::parse_ip(&frame[hdr..]).unwrap();
            assert_eq!(q.bth, p.bth);
            assert_eq!(q.payload, p.payload);
        }
        let (want_total, want_ops) = expected_counts(&path);
        assert_eq!(roce, want_total, "{name}: RoCE packet count");
        assert_eq!(per_op, want_ops, "{name}: packets per opcode");
        grand_total += roce;
    }
    assert!(
        grand_total > 3000,
        "only {grand_total} RoCE packets checked"
    );
}
