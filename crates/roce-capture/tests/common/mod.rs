//! Helpers shared by the integration tests.
#![allow(dead_code, unreachable_pub)]

use std::io::{self, Read};
use std::path::PathBuf;

use roce_capture::{CaptureError, CaptureReader, LinkType, Payload};

/// Path of a file under the repository's `testdata/`.
pub fn testdata(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../testdata")
        .join(rel)
}

pub fn bytes(rel: &str) -> Vec<u8> {
    std::fs::read(testdata(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

/// An owned copy of a packet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rec {
    pub index: u64,
    pub ts_ns: u64,
    pub orig_len: u32,
    pub link: LinkType,
    pub data: Vec<u8>,
    pub file_offset: u64,
}

/// Reads every packet; the error, if reading stopped on one.
pub fn read_all<R: Read>(r: R) -> Result<(Vec<Rec>, Option<CaptureError>), CaptureError> {
    let mut reader = CaptureReader::new(r)?;
    let mut out = Vec::new();
    let mut err = None;
    while let Some(p) = reader.next_packet() {
        match p {
            Ok(p) => out.push(Rec {
                index: p.index,
                ts_ns: p.ts_ns,
                orig_len: p.orig_len,
                link: p.link,
                data: p.data.to_vec(),
                file_offset: p.file_offset,
            }),
            Err(e) => {
                err = Some(e);
                break;
            }
        }
    }
    assert!(
        reader.next_packet().is_none(),
        "None after the end or an error"
    );
    Ok((out, err))
}

/// Reads a file that must read cleanly.
pub fn read_ok(data: &[u8]) -> Vec<Rec> {
    let (recs, err) = read_all(data).expect("header");
    assert_eq!(err, None);
    recs
}

/// (timestamp, EtherType, layer-3 bytes) of a packet, whatever the encapsulation.
pub fn l3(rec: &Rec) -> (u64, u16, Vec<u8>) {
    let p = roce_capture::Packet {
        index: rec.index,
        ts_ns: rec.ts_ns,
        orig_len: rec.orig_len,
        link: rec.link,
        data: &rec.data,
        file_offset: rec.file_offset,
    };
    let (proto, bytes) = match p.payload().expect("payload") {
        Payload::Ethernet(f) => (u16::from_be_bytes([f[12], f[13]]), &f[14..]),
        Payload::Ip(d) => (if d[0] >> 4 == 6 { 0x86dd } else { 0x0800 }, d),
        Payload::Cooked { protocol, data } => (protocol, data),
        Payload::Unsupported(v) => panic!("unsupported link type {v}"),
    };
    (rec.ts_ns, proto, bytes.to_vec())
}

/// A reader that returns at most `chunk` bytes per call and fails with
/// `Interrupted` every third call.
pub struct Trickle<'a> {
    pub data: &'a [u8],
    pub chunk: usize,
    pub calls: usize,
}

impl Read for Trickle<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.calls += 1;
        if self.calls.is_multiple_of(3) {
            return Err(io::ErrorKind::Interrupted.into());
        }
        let n = self.chunk.min(buf.len()).min(self.data.len());
        buf[..n].copy_from_slice(&self.data[..n]);
        self.data = &self.data[n..];
        Ok(n)
    }
}

/// Offsets of the records (pcap) or blocks (pcapng) of a well-formed file, and
/// the length of the file header (pcap) or first SHB (pcapng).
pub fn record_offsets(data: &[u8]) -> (usize, Vec<usize>) {
    let u32_at = |off: usize, be: bool| {
        let b: [u8; 4] = data[off..off + 4].try_into().unwrap();
        if be {
            u32::from_be_bytes(b)
        } else {
            u32::from_le_bytes(b)
        }
    };
    let mut offs = Vec::new();
    if data[..4] == [0x0a, 0x0d, 0x0d, 0x0a] {
        let mut off = 0;
        let mut be = false;
        while off < data.len() {
            if data[off..off + 4] == [0x0a, 0x0d, 0x0d, 0x0a] {
                be = data[off + 8..off + 12] == [0x1a, 0x2b, 0x3c, 0x4d];
            }
            offs.push(off);
            off += u32_at(off + 4, be) as usize;
        }
        let first = offs.remove(0);
        assert_eq!(first, 0);
        (u32_at(4, data[8] == 0x1a) as usize, offs)
    } else {
        let be = data[0] == 0xa1;
        let mut off = 24;
        while off < data.len() {
            offs.push(off);
            off += 16 + u32_at(off + 8, be) as usize;
        }
        (24, offs)
    }
}
