//! Throughput check on a 1-million-packet capture (about 120 MB), written to the
//! temp directory. Ignored by default; run with
//! `cargo test --release -p roce-capture --test perf -- --ignored --nocapture`.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::PathBuf;
use std::time::Instant;

use roce_capture::{CaptureReader, Payload, PcapWriter};

const PACKETS: u64 = 1_000_000;
const FRAME_LEN: usize = 100;

fn frame(i: u64) -> [u8; FRAME_LEN] {
    let mut f = [0u8; FRAME_LEN];
    f[12] = 0x08;
    f[14] = 0x45;
    f[20..28].copy_from_slice(&i.to_le_bytes());
    f
}

fn write_pcap(path: &PathBuf) {
    let mut w = PcapWriter::new(BufWriter::new(File::create(path).unwrap())).unwrap();
    for i in 0..PACKETS {
        w.write_packet(1_700_000_000_000_000_000 + i * 1000, &frame(i))
            .unwrap();
    }
    w.into_inner().unwrap();
}

fn write_pcapng(path: &PathBuf) {
    let mut w = BufWriter::new(File::create(path).unwrap());
    let block = |w: &mut BufWriter<File>, ty: u32, body: &[u8]| {
        let len = (12 + body.len()) as u32;
        w.write_all(&ty.to_le_bytes()).unwrap();
        w.write_all(&len.to_le_bytes()).unwrap();
        w.write_all(body).unwrap();
        w.write_all(&len.to_le_bytes()).unwrap();
    };
    let mut shb = 0x1a2b_3c4du32.to_le_bytes().to_vec();
    shb.extend_from_slice(&[1, 0, 0, 0]);
    shb.extend_from_slice(&(-1i64).to_le_bytes());
    block(&mut w, 0x0a0d_0d0a, &shb);
    // Ethernet, snaplen 0, if_tsresol = 9, end of options
    block(
        &mut w,
        1,
        &[1, 0, 0, 0, 0, 0, 0, 0, 9, 0, 1, 0, 9, 0, 0, 0, 0, 0, 0, 0],
    );
    for i in 0..PACKETS {
        let ts = 1_700_000_000_000_000_000 + i * 1000;
        let mut body = Vec::with_capacity(20 + FRAME_LEN);
        for x in [
            0,
            (ts >> 32) as u32,
            ts as u32,
            FRAME_LEN as u32,
            FRAME_LEN as u32,
        ] {
            body.extend_from_slice(&x.to_le_bytes());
        }
        body.extend_from_slice(&frame(i));
        block(&mut w, 6, &body);
    }
    w.flush().unwrap();
}

fn read(path: &PathBuf) {
    let start = Instant::now();
    let mut reader = CaptureReader::open(path).unwrap();
    let (mut n, mut bytes, mut sum) = (0u64, 0usize, 0u64);
    while let Some(p) = reader.next_packet() {
        let p = p.unwrap();
        if let Ok(Payload::Ethernet(f)) = p.payload() {
            bytes += f.len();
            sum = sum.wrapping_add(u64::from(f[20]) + p.ts_ns);
        }
        n += 1;
    }
    let secs = start.elapsed().as_secs_f64();
    let size = std::fs::metadata(path).unwrap().len();
    println!(
        "{}: {n} packets, {:.1} MB in {secs:.3} s ({:.0} MB/s, {:.0} ns/packet) [{sum}]",
        path.display(),
        size as f64 / 1e6,
        size as f64 / 1e6 / secs,
        secs * 1e9 / n as f64
    );
    assert_eq!((n, bytes), (PACKETS, PACKETS as usize * FRAME_LEN));
}

#[test]
#[ignore = "writes ~240 MB to the temp directory; run in release"]
fn read_one_million_packets() {
    let dir = std::env::temp_dir();
    let pcap = dir.join("roce-capture-perf.pcap");
    let ng = dir.join("roce-capture-perf.pcapng");
    write_pcap(&pcap);
    write_pcapng(&ng);
    for _ in 0..2 {
        read(&pcap);
        read(&ng);
    }
    std::fs::remove_file(pcap).unwrap();
    std::fs::remove_file(ng).unwrap();
}
