//! Wire-format benchmarks: the ICRC over a 4 KiB payload (target ≥ 10 GB/s,
//! next to raw crc32fast over the same bytes), parse + ICRC verify of an RC
//! packet with 1 KiB payload (target ≤ 150 ns), and emit of the same packet.
//!
//! Run: `cargo bench -p roce-wire --bench wire`

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use roce_wire::*;

fn rc_write(payload: &[u8]) -> Vec<u8> {
    let mut bth = BthRepr::new(
        Opcode::from_u8(0x0a).unwrap(),
        Qpn::new(0x11),
        Psn::new(0x3a2b1c),
    );
    bth.ack_req = true;
    let repr = FrameRepr {
        eth: Some(EthernetRepr {
            dst: MacAddr([2, 0, 0, 0, 0, 2]),
            src: MacAddr([2, 0, 0, 0, 0, 1]),
            vlan: None,
            ethertype: 0,
        }),
        ip: IpRepr::V4(Ipv4Repr {
            src: "10.0.0.1".parse().unwrap(),
            dst: "10.0.0.2".parse().unwrap(),
            dscp: 26,
            ecn: Ecn::Ect0,
            ident: 0,
            dont_frag: true,
            ttl: 64,
            payload_len: 0,
        }),
        udp: UdpRepr {
            src_port: 0xc011,
            dst_port: ROCE_V2_PORT,
            checksum: UdpChecksum::Zero,
        },
        bth,
        ext: ExtHeaders {
            reth: Some(RethRepr {
                va: 0x7f00_0000_0000,
                rkey: Rkey::new(0x1234),
                dma_len: payload.len() as u32,
            }),
            ..Default::default()
        },
        payload,
    };
    let mut buf = vec![0u8; repr.len()];
    repr.emit(&mut buf).unwrap();
    buf
}

fn icrc(c: &mut Criterion) {
    let payload: Vec<u8> = (0..4096u32).map(|i| (i * 7) as u8).collect();
    let frame = rc_write(&payload);
    let p = RocePacket::parse_ethernet(&frame).unwrap();
    let covered = p.icrc_covered().to_vec();
    let mut g = c.benchmark_group("icrc");
    g.throughput(Throughput::Bytes(covered.len() as u64));
    g.bench_function("icrc_4KiB_payload", |b| {
        b.iter(|| icrc::compute(black_box(&covered)))
    });
    g.bench_function("crc32fast_raw_same_bytes", |b| {
        b.iter(|| crc32fast::hash(black_box(&covered)))
    });
    g.finish();
    // A latency test's packet: a 2-byte RDMA WRITE (60 covered bytes).
    let small = rc_write(&[7u8, 9]);
    let p = RocePacket::parse_ethernet(&small).unwrap();
    let covered = p.icrc_covered().to_vec();
    let mut g = c.benchmark_group("icrc_small");
    g.bench_function("icrc_2B_write", |b| {
        b.iter(|| icrc::compute(black_box(&covered)))
    });
    g.finish();
}

fn parse(c: &mut Criterion) {
    let payload = vec![0xa5u8; 1024];
    let frame = rc_write(&payload);
    let mut g = c.benchmark_group("packet");
    g.throughput(Throughput::Elements(1));
    g.bench_function("parse_verify_rc_write_1KiB", |b| {
        b.iter(|| {
            let p = RocePacket::parse_ethernet(black_box(&frame)).unwrap();
            p.check_icrc().unwrap();
            p.bth.psn
        })
    });
    g.bench_function("parse_only_rc_write_1KiB", |b| {
        b.iter(|| {
            RocePacket::parse_ethernet(black_box(&frame))
                .unwrap()
                .bth
                .psn
        })
    });
    let repr = RocePacket::parse_ethernet(&frame).unwrap().to_repr();
    let mut out = vec![0u8; frame.len()];
    g.bench_function("emit_rc_write_1KiB", |b| {
        b.iter(|| black_box(&repr).emit(black_box(&mut out)).unwrap())
    });
    g.finish();
}

criterion_group!(benches, icrc, parse);
criterion_main!(benches);
