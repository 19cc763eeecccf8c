//! Reading real and generated captures in every supported container form.

mod common;

use common::{bytes, l3, read_all, read_ok, testdata, Trickle};
use roce_capture::{
    CaptureReader, ErrorKind, Format, LinkType, Payload, PcapWriter, MAX_RECORD_LEN,
};

const ORIGINAL: &str = "captures/rc_send_64B.pcap";

fn variant(suffix: &str) -> String {
    format!("capture-formats/rc_send_64B.{suffix}")
}

#[test]
fn reads_the_real_ethernet_capture() {
    let mut reader = CaptureReader::open(&testdata(ORIGINAL)).unwrap();
    assert_eq!(reader.format(), Format::Pcap);
    let first = reader.next_packet().unwrap().unwrap();
    assert_eq!(first.index, 1);
    assert_eq!(first.ts_ns, 1_795_982_760_018_313_000);
    assert_eq!(first.link, LinkType::Ethernet);
    assert_eq!(first.orig_len, 42);
    assert_eq!(first.file_offset, 24);
    assert_eq!(
        &first.data[..14],
        &[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x52, 0x54, 0x00, 0x77, 0x00, 0x12, 0x08, 0x06]
    );
    assert_eq!(first.payload().unwrap(), Payload::Ethernet(first.data));

    let recs = read_ok(&bytes(ORIGINAL));
    assert_eq!(recs.len(), 30);
    assert!(recs
        .iter()
        .enumerate()
        .all(|(i, r)| r.index == i as u64 + 1));
    assert_eq!(recs[1].file_offset, 24 + 16 + 42);
    assert_eq!(recs[29].ts_ns, 1_795_982_760_181_156_000);
    let ip = recs.iter().filter(|r| l3(r).1 == 0x0800).count();
    assert_eq!(ip, 28);
}

#[test]
fn writer_round_trip() {
    let recs = read_ok(&bytes(ORIGINAL));
    let mut w = PcapWriter::new(Vec::new()).unwrap();
    for (i, r) in recs.iter().enumerate() {
        // add sub-microsecond digits: the writer keeps nanoseconds
        w.write_packet(r.ts_ns + i as u64, &r.data).unwrap();
    }
    w.flush().unwrap();
    let out = w.into_inner().unwrap();
    assert_eq!(&out[..4], &[0x4d, 0x3c, 0xb2, 0xa1]);
    let back = read_ok(&out);
    assert_eq!(back.len(), recs.len());
    for (i, (a, b)) in recs.iter().zip(&back).enumerate() {
        assert_eq!(b.ts_ns, a.ts_ns + i as u64);
        assert_eq!(
            (b.data.as_slice(), b.orig_len, b.link),
            (a.data.as_slice(), a.orig_len, a.link)
        );
        assert_eq!(b.file_offset, a.file_offset, "same layout as the original");
    }
}

/// Every container form yields the same layer-3 bytes and timestamps.
#[test]
fn every_form_yields_the_same_datagrams() {
    let reference: Vec<_> = read_ok(&bytes(ORIGINAL)).iter().map(l3).collect();
    let ip_only: Vec<_> = reference
        .iter()
        .filter(|(_, proto, _)| *proto == 0x0800)
        .cloned()
        .collect();
    let cases: &[(&str, Format, &[LinkType])] = &[
        ("le-ns.pcap", Format::Pcap, &[LinkType::Ethernet]),
        ("be-us.pcap", Format::Pcap, &[LinkType::Ethernet]),
        ("be-ns.pcap", Format::Pcap, &[LinkType::Ethernet]),
        ("raw.pcap", Format::Pcap, &[LinkType::RawIp]),
        ("sll.pcap", Format::Pcap, &[LinkType::LinuxSll]),
        ("sll2.pcap", Format::Pcap, &[LinkType::LinuxSll2]),
        ("le.pcapng", Format::PcapNg, &[LinkType::Ethernet]),
        ("be.pcapng", Format::PcapNg, &[LinkType::Ethernet]),
        ("editcap.pcapng", Format::PcapNg, &[LinkType::Ethernet]),
        (
            "multi.pcapng",
            Format::PcapNg,
            &[
                LinkType::Ethernet,
                LinkType::RawIp,
                LinkType::LinuxSll2,
                LinkType::LinuxSll,
            ],
        ),
    ];
    for &(suffix, format, links) in cases {
        let data = bytes(&variant(suffix));
        assert_eq!(
            CaptureReader::new(&data[..]).unwrap().format(),
            format,
            "{suffix}"
        );
        let recs = read_ok(&data);
        let got: Vec<_> = recs.iter().map(l3).collect();
        let want = if suffix == "raw.pcap" {
            &ip_only
        } else {
            &reference
        };
        assert_eq!(&got, want, "{suffix}");
        assert!(
            recs.iter()
                .enumerate()
                .all(|(i, r)| r.index == i as u64 + 1),
            "{suffix}"
        );
        assert!(
            recs.windows(2).all(|w| w[0].file_offset < w[1].file_offset),
            "{suffix}"
        );
        for link in links {
            assert!(
                recs.iter().any(|r| r.link == *link),
                "{suffix}: no {link:?}"
            );
        }
        assert!(recs.iter().all(|r| links.contains(&r.link)), "{suffix}");
        // The same through a reader that returns a few bytes at a time.
        let trickle = Trickle {
            data: &data,
            chunk: 7,
            calls: 0,
        };
        let (slow, err) = read_all(trickle).unwrap();
        assert_eq!(err, None, "{suffix}");
        assert_eq!(slow, recs, "{suffix}");
    }
}

#[test]
fn multi_section_pcapng_switches_interfaces() {
    let recs = read_ok(&bytes(&variant("multi.pcapng")));
    assert_eq!(recs.len(), 30);
    let links: Vec<_> = recs.iter().map(|r| r.link).collect();
    assert_eq!(
        &links[..3],
        &[LinkType::Ethernet, LinkType::Ethernet, LinkType::RawIp]
    );
    assert_eq!(
        &links[15..19],
        &[
            LinkType::LinuxSll2,
            LinkType::LinuxSll,
            LinkType::LinuxSll2,
            LinkType::LinuxSll
        ]
    );
}

#[test]
fn simple_packet_blocks_have_no_timestamp() {
    let reference: Vec<_> = read_ok(&bytes(ORIGINAL)).iter().map(l3).collect();
    let recs = read_ok(&bytes(&variant("spb.pcapng")));
    let got: Vec<_> = recs.iter().map(l3).collect();
    assert_eq!(got.len(), reference.len());
    for (g, r) in got.iter().zip(&reference) {
        assert_eq!(g.0, 0);
        assert_eq!((g.1, &g.2), (r.1, &r.2));
    }
}

/// A classic pcap header with the given link type, then one record per frame.
fn pcap_with(link: u32, frames: &[&[u8]]) -> Vec<u8> {
    let mut v = Vec::new();
    for x in [0xa1b2_c3d4u32, 0x0004_0002, 0, 0, 262_144, link] {
        v.extend_from_slice(&x.to_le_bytes());
    }
    for (i, f) in frames.iter().enumerate() {
        for x in [i as u32, 0, f.len() as u32, f.len() as u32] {
            v.extend_from_slice(&x.to_le_bytes());
        }
        v.extend_from_slice(f);
    }
    v
}

#[test]
fn other_link_types_are_returned_for_counting() {
    let recs = read_ok(&pcap_with(147, &[b"abc"]));
    assert_eq!(recs[0].link, LinkType::Other(147));
    let data = pcap_with(147, &[b"abc"]);
    let mut reader = CaptureReader::new(&data[..]).unwrap();
    let p = reader.next_packet().unwrap().unwrap();
    assert_eq!(p.payload().unwrap(), Payload::Unsupported(147));
    // DLT_RAW values 12 and 14 are raw IP; FCS bits above the link type are ignored
    assert_eq!(read_ok(&pcap_with(12, &[b"E"]))[0].link, LinkType::RawIp);
    assert_eq!(read_ok(&pcap_with(14, &[b"E"]))[0].link, LinkType::RawIp);
    assert_eq!(
        read_ok(&pcap_with(0x2400_0001, &[b"x"]))[0].link,
        LinkType::Ethernet
    );
}

#[test]
fn short_cooked_header_is_an_error_at_the_packet() {
    let data = pcap_with(113, &[&[0u8; 16], &[0u8; 15]]);
    let mut reader = CaptureReader::new(&data[..]).unwrap();
    let p = reader.next_packet().unwrap().unwrap();
    assert!(matches!(
        p.payload(),
        Ok(Payload::Cooked {
            protocol: 0,
            data: []
        })
    ));
    let p = reader.next_packet().unwrap().unwrap();
    let e = p.payload().unwrap_err();
    assert_eq!(e.offset, 24 + 16 + 16);
    assert!(matches!(e.kind, ErrorKind::Malformed(_)));
    let data = pcap_with(276, &[&[0u8; 19]]);
    let mut reader = CaptureReader::new(&data[..]).unwrap();
    let p = reader.next_packet().unwrap().unwrap();
    assert_eq!(p.payload().unwrap_err().offset, 24);
}

/// Records larger than the initial 64 KiB buffer make it grow.
#[test]
fn large_records_grow_the_buffer() {
    let big = vec![0x5au8; 3 << 20];
    let data = pcap_with(1, &[b"small", &big, b"tail"]);
    let recs = read_ok(&data);
    assert_eq!(recs.len(), 3);
    assert_eq!(recs[1].data, big);
    assert_eq!(recs[2].data, b"tail");
    let (recs, err) = read_all(Trickle {
        data: &data,
        chunk: 100_000,
        calls: 0,
    })
    .unwrap();
    assert_eq!((recs.len(), err), (3, None));
    assert!(big.len() < MAX_RECORD_LEN);
}

#[test]
fn open_reports_missing_files() {
    let e = CaptureReader::open(&testdata("no/such/file.pcap")).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Io(std::io::ErrorKind::NotFound));
}

/// A Section Header Block larger than the initial buffer (two 50 kB comments).
#[test]
fn large_section_header() {
    let ng = bytes(&variant("le.pcapng"));
    let shb_len = u32::from_le_bytes(ng[4..8].try_into().unwrap()) as usize;
    let mut body = ng[8..24].to_vec(); // BOM, version, section length
    for c in [b'c', b'd'] {
        body.extend_from_slice(&1u16.to_le_bytes()); // opt_comment
        body.extend_from_slice(&50_000u16.to_le_bytes());
        body.extend_from_slice(&[c; 50_000]);
    }
    body.extend_from_slice(&[0; 4]); // opt_endofopt
    let len = (12 + body.len()) as u32;
    let mut big = ng[..4].to_vec();
    big.extend_from_slice(&len.to_le_bytes());
    big.extend_from_slice(&body);
    big.extend_from_slice(&len.to_le_bytes());
    big.extend_from_slice(&ng[shb_len..]);
    let recs = read_ok(&big);
    let orig = read_ok(&ng);
    assert_eq!(recs.len(), 30);
    let moved = len as u64 - shb_len as u64;
    assert!(recs
        .iter()
        .zip(&orig)
        .all(|(a, b)| a.file_offset == b.file_offset + moved));
    let e = read_all(&big[..60_000]).unwrap_err();
    assert_eq!((e.offset, e.kind), (0, ErrorKind::Truncated));
}

#[test]
fn reader_is_send() {
    fn send<T: Send>() {}
    send::<CaptureReader<std::io::BufReader<std::fs::File>>>();
    send::<PcapWriter<Vec<u8>>>();
}
