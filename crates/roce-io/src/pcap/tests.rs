use super::*;
use crate::testutil::{psn, v4_frame, v6_frame};
use crate::{Fabric, FabricPort};
use roce_capture::{CaptureReader, Payload};
use roce_wire::{Ecn, RocePacket};

/// (timestamp, Ethernet frame) of every record in a pcap file.
fn read_back(bytes: &[u8]) -> Vec<(u64, Vec<u8>)> {
    let mut r = CaptureReader::new(std::io::Cursor::new(bytes)).expect("pcap header");
    let mut out = Vec::new();
    while let Some(p) = r.next_packet() {
        let p = p.expect("record");
        match p.payload().unwrap() {
            Payload::Ethernet(f) => out.push((p.ts_ns, f.to_vec())),
            other => panic!("not Ethernet: {other:?}"),
        }
    }
    out
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn pair() -> (Fabric, FabricPort, FabricPort) {
    let fabric = Fabric::new();
    let mut a = fabric.endpoint(ip("10.0.0.1")).unwrap();
    a.add_addr(ip("fd00::1")).unwrap();
    let mut b = fabric.endpoint(ip("10.0.0.2")).unwrap();
    b.add_addr(ip("fd00::2")).unwrap();
    (fabric, a, b)
}

#[test]
fn records_sent_and_received_datagrams_as_roce_frames() {
    let (_fabric, a, b) = pair();
    let mut tx = PcapTap::new(a, Vec::new()).unwrap();
    let mut rx = PcapTap::new(b, Vec::new()).unwrap();
    let frames = [
        v4_frame("10.0.0.1", "10.0.0.2", 1, 64, Ecn::Ect0),
        v6_frame("fd00::1", "fd00::2", 2, 100),
        v4_frame("10.0.0.1", "10.0.0.2", 3, 0, Ecn::NotEct),
    ];
    let mut batch = PacketBatch::new(4, 512);
    for (i, f) in frames.iter().enumerate() {
        batch.clear();
        batch.push(f);
        tx.send(1_000 * (i as u64 + 1), &batch).unwrap();
    }
    assert_eq!(rx.recv(5_000_000_123, &mut batch).unwrap(), 3);
    assert_eq!(tx.stats().written, 3);
    assert!(tx.counters().starts_with(&[("pcap_written", 3)]));
    assert!(
        tx.counters().contains(&("sent", 3)),
        "inner counters follow"
    );

    let (_, sent) = tx.finish().unwrap();
    let (_, received) = rx.finish().unwrap();
    let sent = read_back(&sent);
    let received = read_back(&received);
    assert_eq!(sent.len(), 3);
    assert_eq!(received.len(), 3);
    for (i, ((ts, frame), want)) in sent.iter().zip(&frames).enumerate() {
        assert_eq!(*ts, 1_000 * (i as u64 + 1));
        let p = RocePacket::parse_ethernet(frame).expect("RoCE over Ethernet");
        assert!(p.check_icrc().is_ok());
        assert_eq!(&frame[14..], &want[..], "datagram recorded unchanged");
        let eth = p.eth.unwrap();
        assert_eq!(eth.src.0, mac_for(p.ip.src()));
        assert_eq!(eth.dst.0, mac_for(p.ip.dst()));
    }
    assert_eq!(&sent[0].1[..12], &[2, 0, 10, 0, 0, 2, 2, 0, 10, 0, 0, 1]);
    assert_eq!(&sent[1].1[12..14], &[0x86, 0xdd]);
    for (ts, frame) in &received {
        assert_eq!(*ts, 5_000_000_123);
        assert!(RocePacket::parse_ethernet(frame)
            .unwrap()
            .check_icrc()
            .is_ok());
    }
    let got: Vec<u32> = received.iter().map(|(_, f)| psn(&f[14..])).collect();
    assert_eq!(got, vec![1, 2, 3]);
}

#[test]
fn mac_addresses() {
    assert_eq!(mac_for(ip("192.168.1.7")), [2, 0, 192, 168, 1, 7]);
    assert_eq!(mac_for(ip("fd00::a:b:c")), [2, 0x0a, 0, 0x0b, 0, 0x0c]);
}

/// Takes one datagram per call.
struct OneAtATime(Vec<Vec<u8>>);

impl Backend for OneAtATime {
    fn local_addrs(&self) -> &[IpAddr] {
        &[]
    }
    fn send(&mut self, _: Nanos, batch: &PacketBatch) -> io::Result<usize> {
        match batch.iter().next() {
            Some(d) => {
                self.0.push(d.to_vec());
                Ok(1)
            }
            None => Ok(0),
        }
    }
    fn recv(&mut self, _: Nanos, batch: &mut PacketBatch) -> io::Result<usize> {
        batch.clear();
        Ok(0)
    }
}

#[test]
fn records_only_what_the_backend_took() {
    let mut tap = PcapTap::new(OneAtATime(Vec::new()), Vec::new()).unwrap();
    let mut batch = PacketBatch::new(4, 512);
    for i in 0..3 {
        batch.push(&v4_frame("10.0.0.1", "10.0.0.2", i, 8, Ecn::NotEct));
    }
    let mut t = 0;
    while !batch.is_empty() {
        let n = tap.send(t, &batch).unwrap();
        batch.drain_front(n);
        t += 1;
    }
    let (inner, bytes) = tap.finish().unwrap();
    assert_eq!(inner.0.len(), 3);
    let recs = read_back(&bytes);
    let got: Vec<(u64, u32)> = recs.iter().map(|(t, f)| (*t, psn(&f[14..]))).collect();
    assert_eq!(got, vec![(0, 0), (1, 1), (2, 2)]);
}

#[test]
fn create_writes_a_file_that_is_flushed_on_drop() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tap.pcap");
    let (_fabric, a, mut b) = pair();
    {
        let mut tap = PcapTap::create(a, &path)
            .unwrap()
            .with_time_offset(1_700_000_000_000_000_000);
        let mut batch = PacketBatch::new(2, 512);
        batch.push(&v4_frame("10.0.0.1", "10.0.0.2", 9, 32, Ecn::NotEct));
        tap.send(42, &batch).unwrap();
        // Dropped without finish().
    }
    let recs = read_back(&std::fs::read(&path).unwrap());
    assert_eq!(recs.len(), 1);
    assert_eq!(recs[0].0, 1_700_000_000_000_000_042);
    let mut batch = PacketBatch::new(2, 512);
    assert_eq!(b.recv(42, &mut batch).unwrap(), 1, "traffic went through");
    assert!(CaptureReader::open(&path).is_ok());
}

#[derive(Debug)]
struct FailingWriter {
    ok_writes: usize,
}

impl Write for FailingWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if self.ok_writes == 0 {
            return Err(io::Error::other("disk full"));
        }
        self.ok_writes -= 1;
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[test]
fn write_errors_do_not_disturb_traffic() {
    let (_fabric, a, mut b) = pair();
    // The header and one record (two writes) succeed, then the disk fills.
    let mut tap = PcapTap::new(a, FailingWriter { ok_writes: 3 }).unwrap();
    let mut batch = PacketBatch::new(4, 512);
    for i in 0..4 {
        batch.push(&v4_frame("10.0.0.1", "10.0.0.2", i, 8, Ecn::NotEct));
    }
    assert_eq!(tap.send(0, &batch).unwrap(), 4);
    assert_eq!(b.recv(0, &mut batch).unwrap(), 4);
    assert_eq!(tap.stats().written, 1);
    assert_eq!(tap.stats().errors, 1, "recording stops at the first error");
    let e = tap.finish().unwrap_err();
    assert_eq!(e.to_string(), "disk full");
}

#[test]
fn unrepresentable_times_and_garbage() {
    let mut tap = PcapTap::new(OneAtATime(Vec::new()), Vec::new()).unwrap();
    let mut batch = PacketBatch::new(1, 64);
    batch.push(&[0x45, 1, 2]);
    tap.send(u64::MAX, &batch).unwrap();
    assert_eq!(tap.stats().skipped, 1);
    batch.clear();
    batch.push(&[0x99, 1, 2]);
    tap.send(7, &batch).unwrap();
    tap.flush().unwrap();
    let (_, bytes) = tap.finish().unwrap();
    let recs = read_back(&bytes);
    assert_eq!(recs.len(), 1);
    assert_eq!(
        recs[0].1,
        [2, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0x88, 0xb5, 0x99, 1, 2]
    );
}

/// Hands out UDP payloads as a UDP socket does: the header's IPv4
/// identification unknown.
struct UdpLike(Vec<Vec<u8>>);

impl Backend for UdpLike {
    fn local_addrs(&self) -> &[IpAddr] {
        &[]
    }
    fn send(&mut self, _: Nanos, _: &PacketBatch) -> io::Result<usize> {
        Ok(0)
    }
    fn recv(&mut self, _: Nanos, batch: &mut PacketBatch) -> io::Result<usize> {
        batch.clear();
        for d in self.0.drain(..) {
            let sport = u16::from_be_bytes([d[20], d[21]]);
            let src = std::net::SocketAddr::new(ip("10.0.0.1"), sport);
            let h = RxHeader::new(src, ip("10.0.0.2"), 0);
            let payload = &d[28..];
            batch.push_payload_with(h, roce_wire::RxMeta::default(), |slot| {
                slot[..payload.len()].copy_from_slice(payload);
                payload.len()
            });
        }
        Ok(batch.len())
    }
}

#[test]
fn received_gso_segments_are_recorded_with_their_ipv4_identification() {
    // A GSO send's segments carry identifications 0, 1, 2, ... that the
    // receiving socket does not tell; the capture finds each from its
    // ICRC, so that every record's ICRC checks (a damaged one stays bad).
    let mut sent = Vec::new();
    for id in [0u16, 1, 2, 77] {
        let mut d = v4_frame("10.0.0.1", "10.0.0.2", u32::from(id), 64, Ecn::NotEct);
        d[4..6].copy_from_slice(&id.to_be_bytes());
        icrc::fill(Code::Fast, &mut d).unwrap();
        sent.push(d);
    }
    let mut damaged = sent[1].clone();
    damaged[40] ^= 1;
    sent.push(damaged);
    let mut tap = PcapTap::new(UdpLike(sent), Vec::new()).unwrap();
    let mut batch = PacketBatch::new(8, 512);
    assert_eq!(tap.recv(1, &mut batch).unwrap(), 5);
    let (_, bytes) = tap.finish().unwrap();
    let recs = read_back(&bytes);
    assert_eq!(recs.len(), 5);
    let ids: Vec<u16> = recs
        .iter()
        .map(|(_, f)| u16::from_be_bytes([f[18], f[19]]))
        .collect();
    assert_eq!(ids, vec![0, 1, 2, 77, 0]);
    let ok: Vec<bool> = recs
        .iter()
        .map(|(_, f)| RocePacket::parse_ethernet(f).unwrap().check_icrc().is_ok())
        .collect();
    assert_eq!(ok, vec![true, true, true, true, false]);
}
