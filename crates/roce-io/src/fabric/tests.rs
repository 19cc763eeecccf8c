use super::*;
use crate::testutil::{psn, v4_frame, v6_frame};
use roce_wire::Ecn;

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn batch_of(frames: &[Vec<u8>]) -> PacketBatch {
    let mut b = PacketBatch::new(frames.len().max(1), 4096 + 128);
    for f in frames {
        assert!(b.push(f));
    }
    b
}

fn recv_all(p: &mut FabricPort, now: Nanos) -> Vec<Vec<u8>> {
    let mut b = PacketBatch::new(64, 4096 + 128);
    let mut out = Vec::new();
    while p.recv(now, &mut b).unwrap() > 0 {
        out.extend(b.iter().map(<[u8]>::to_vec));
    }
    out
}

#[test]
fn routes_by_destination_between_three_endpoints() {
    let fabric = Fabric::new();
    let mut a = fabric.endpoint(ip("10.0.0.1")).unwrap();
    let mut b = fabric.endpoint(ip("10.0.0.2")).unwrap();
    let mut c = fabric.endpoint(ip("10.0.0.3")).unwrap();
    c.add_addr(ip("fd00::3")).unwrap();
    assert_eq!(c.local_addrs(), &[ip("10.0.0.3"), ip("fd00::3")]);

    let to_b = v4_frame("10.0.0.1", "10.0.0.2", 1, 64, Ecn::NotEct);
    let to_c = v4_frame("10.0.0.1", "10.0.0.3", 2, 64, Ecn::NotEct);
    let to_c6 = v6_frame("fd00::1", "fd00::3", 3, 64);
    let nowhere = v4_frame("10.0.0.1", "10.0.0.9", 4, 64, Ecn::NotEct);
    let batch = batch_of(&[to_b.clone(), to_c.clone(), nowhere, to_c6.clone()]);
    assert_eq!(a.send(0, &batch).unwrap(), 4);
    // A datagram to itself and one that is not IP at all.
    let self_and_junk = batch_of(&[to_b.clone(), vec![0x15; 30]]);
    assert_eq!(b.send(0, &self_and_junk).unwrap(), 2);

    assert_eq!(recv_all(&mut b, 0), vec![to_b.clone(), to_b]);
    assert_eq!(recv_all(&mut c, 0), vec![to_c, to_c6]);
    assert!(recv_all(&mut a, 0).is_empty());

    let sa = a.stats();
    assert_eq!((sa.sent, sa.dropped_no_route, sa.received), (4, 1, 0));
    let sb = b.stats();
    assert_eq!((sb.sent, sb.dropped_malformed, sb.received), (2, 1, 2));
    assert_eq!(c.stats().received, 2);
    let total = fabric.stats();
    assert_eq!(
        (
            total.sent,
            total.received,
            total.dropped_no_route,
            total.dropped_malformed
        ),
        (6, 4, 1, 1)
    );
    let counters = b.counters();
    assert!(counters.contains(&("dropped_malformed", 1)));
    assert!(counters.contains(&("received", 2)));
}

#[test]
fn receive_metadata_says_full_ip_header() {
    let fabric = Fabric::new();
    let mut a = fabric.endpoint(ip("10.0.0.1")).unwrap();
    let f = v4_frame("10.0.0.1", "10.0.0.1", 1, 8, Ecn::NotEct);
    a.send(0, &batch_of(&[f])).unwrap();
    let mut b = PacketBatch::new(4, 256);
    assert_eq!(a.recv(0, &mut b).unwrap(), 1);
    assert!(b.meta(0).header_exact);
}

#[test]
fn addresses_are_exclusive_and_freed_on_drop() {
    let fabric = Fabric::new();
    let a = fabric.endpoint(ip("10.0.0.1")).unwrap();
    assert_eq!(
        fabric.endpoint(ip("10.0.0.1")).unwrap_err(),
        FabricError::AddrInUse(ip("10.0.0.1"))
    );
    let mut b = fabric.endpoint(ip("10.0.0.2")).unwrap();
    assert_eq!(
        b.add_addr(ip("10.0.0.1")),
        Err(FabricError::AddrInUse(ip("10.0.0.1")))
    );
    drop(a);
    assert_eq!(
        fabric.set_link(ip("10.0.0.1"), LinkConfig::new()),
        Err(FabricError::UnknownAddr(ip("10.0.0.1")))
    );
    let f = v4_frame("10.0.0.2", "10.0.0.1", 1, 8, Ecn::NotEct);
    b.send(0, &batch_of(std::slice::from_ref(&f))).unwrap();
    assert_eq!(b.stats().dropped_no_route, 1);
    let mut a2 = fabric.endpoint(ip("10.0.0.1")).unwrap();
    b.send(0, &batch_of(std::slice::from_ref(&f))).unwrap();
    assert_eq!(recv_all(&mut a2, 0), vec![f]);
}

#[test]
fn latency_and_rate_give_exact_delivery_times() {
    let fabric = Fabric::new();
    // 8 Gb/s: one byte per nanosecond.
    let mut a = fabric
        .endpoint_with(
            ip("10.0.0.1"),
            LinkConfig::new().latency(1_000).rate(8_000_000_000),
        )
        .unwrap();
    let mut b = fabric
        .endpoint_with(
            ip("10.0.0.2"),
            LinkConfig::new().latency(2_000).rate(8_000_000_000),
        )
        .unwrap();
    let f: Vec<Vec<u8>> = (0..3)
        .map(|i| v4_frame("10.0.0.1", "10.0.0.2", i, 1000, Ecn::NotEct))
        .collect();
    let len = f[0].len() as u64;
    assert_eq!(len, 20 + 8 + 12 + 1000 + 4);
    a.send(100, &batch_of(&f[..2])).unwrap();
    // First: uplink 100..100+L, +1 µs, downlink L more, +2 µs.
    let t0 = 100 + len + 1_000 + len + 2_000;
    // Second: queued behind the first on both links.
    let t1 = t0 + len;
    assert_eq!(b.poll_at(), Some(t0));
    let mut batch = PacketBatch::new(8, 2048);
    assert_eq!(b.recv(t0 - 1, &mut batch).unwrap(), 0);
    assert_eq!(b.recv(t0, &mut batch).unwrap(), 1);
    assert_eq!(psn(batch.get(0)), 0);
    assert_eq!(b.poll_at(), Some(t1));
    assert_eq!(b.recv(t1 - 1, &mut batch).unwrap(), 0);
    assert_eq!(b.recv(t1, &mut batch).unwrap(), 1);
    assert_eq!(b.poll_at(), None);
    // Once the links are idle, a later datagram sees only its own delays.
    let late = 1_000_000;
    a.send(late, &batch_of(&f[2..])).unwrap();
    assert_eq!(b.poll_at(), Some(late + 2 * len + 3_000));
}

#[test]
fn serialization_rounds_up() {
    let link = LinkConfig::new().rate(3_000_000_000);
    // 100 bytes = 800 bits at 3 Gb/s = 266.67 ns.
    assert_eq!(link.serialization_ns(100), 267);
    assert_eq!(LinkConfig::new().serialization_ns(100), 0);
    assert_eq!(LinkConfig::new().rate(0).rate_bps, None);
    assert_eq!(
        LinkConfig::new().rate(1).serialization_ns(usize::MAX),
        u64::MAX
    );
}

#[test]
fn queue_limit_tail_drops_and_counts() {
    let fabric = Fabric::new();
    let mut a = fabric.endpoint(ip("10.0.0.1")).unwrap();
    let mut b = fabric
        .endpoint_with(ip("10.0.0.2"), LinkConfig::new().queue_limit(4))
        .unwrap();
    let frames: Vec<Vec<u8>> = (0..10)
        .map(|i| v4_frame("10.0.0.1", "10.0.0.2", i, 16, Ecn::NotEct))
        .collect();
    assert_eq!(a.send(0, &batch_of(&frames)).unwrap(), 10);
    assert_eq!(b.queued(), 4);
    assert_eq!(b.stats().dropped_queue_full, 6);
    assert_eq!(fabric.stats().dropped_queue_full, 6);
    let got: Vec<u32> = recv_all(&mut b, 0).iter().map(|d| psn(d)).collect();
    assert_eq!(got, vec![0, 1, 2, 3], "tail drop keeps the head");
    // Room again once received.
    a.send(0, &batch_of(&frames[..2])).unwrap();
    assert_eq!(b.queued(), 2);
}

#[test]
fn recv_respects_capacity_order_and_slot_size() {
    let fabric = Fabric::new();
    let mut a = fabric.endpoint(ip("10.0.0.1")).unwrap();
    let mut b = fabric.endpoint(ip("10.0.0.2")).unwrap();
    let frames: Vec<Vec<u8>> = (0..5)
        .map(|i| {
            v4_frame(
                "10.0.0.1",
                "10.0.0.2",
                i,
                16 + 100 * (i as usize % 2),
                Ecn::NotEct,
            )
        })
        .collect();
    a.send(0, &batch_of(&frames)).unwrap();
    let mut small = PacketBatch::new(2, 100);
    // PSN 0 fits, PSN 1 (116-byte payload) is too long for the slots.
    assert_eq!(b.recv(0, &mut small).unwrap(), 2);
    assert_eq!((psn(small.get(0)), psn(small.get(1))), (0, 2));
    assert_eq!(b.stats().dropped_oversize, 1);
    assert_eq!(b.recv(0, &mut small).unwrap(), 1);
    assert_eq!(psn(small.get(0)), 4);
    assert_eq!(b.stats().dropped_oversize, 2);
}

#[test]
fn same_calls_same_deliveries() {
    fn run() -> Vec<(Nanos, Vec<u8>)> {
        let fabric = Fabric::new();
        let link = LinkConfig::new()
            .latency(700)
            .rate(10_000_000_000)
            .queue_limit(6);
        let mut ports: Vec<FabricPort> = (1..=3)
            .map(|i| {
                fabric
                    .endpoint_with(ip(&format!("10.0.0.{i}")), link)
                    .unwrap()
            })
            .collect();
        for (k, t) in [0u64, 50, 120, 900].into_iter().enumerate() {
            for (i, p) in ports.iter_mut().enumerate() {
                let frames: Vec<Vec<u8>> = (0..3)
                    .map(|j| {
                        let dst = format!("10.0.0.{}", (i + j) % 3 + 1);
                        v4_frame(
                            &format!("10.0.0.{}", i + 1),
                            &dst,
                            (k * 10 + j) as u32,
                            200,
                            Ecn::NotEct,
                        )
                    })
                    .collect();
                p.send(t, &batch_of(&frames)).unwrap();
            }
        }
        let mut out = Vec::new();
        let mut b = PacketBatch::new(4, 512);
        while let Some(t) = ports.iter().filter_map(|p| p.poll_at()).min() {
            for p in &mut ports {
                p.recv(t, &mut b).unwrap();
                out.extend(b.iter().map(|d| (t, d.to_vec())));
            }
        }
        out
    }
    let first = run();
    // Each endpoint is offered 12 datagrams and holds at most 6.
    assert_eq!(first.len(), 18);
    assert_eq!(first, run());
}

#[test]
fn endpoints_work_across_threads() {
    let fabric = Fabric::new();
    let mut a = fabric.endpoint(ip("10.0.0.1")).unwrap();
    let mut b = fabric.endpoint(ip("10.0.0.2")).unwrap();
    let sender = std::thread::spawn(move || {
        let frames: Vec<Vec<u8>> = (0..100)
            .map(|i| v4_frame("10.0.0.1", "10.0.0.2", i, 8, Ecn::NotEct))
            .collect();
        for f in &frames {
            a.send(0, &batch_of(std::slice::from_ref(f))).unwrap();
        }
        a.stats().sent
    });
    assert_eq!(sender.join().unwrap(), 100);
    let got: Vec<u32> = recv_all(&mut b, 0).iter().map(|d| psn(d)).collect();
    assert_eq!(got, (0..100).collect::<Vec<_>>());
}

#[test]
fn arbitrary_bytes_never_panic() {
    let fabric = Fabric::new();
    let mut a = fabric.endpoint(ip("10.0.0.1")).unwrap();
    let mut b = PacketBatch::new(64, 128);
    let mut x = 0x1234_5678_9abc_def0u64;
    for n in 0..128usize {
        let mut d = vec![0u8; n];
        for byte in &mut d {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            *byte = x as u8;
        }
        if let Some(first) = d.first_mut() {
            *first = [0x45, 0x60, 0x4f, 0x00][n % 4];
        }
        b.clear();
        b.push(&d);
        a.send(n as u64, &b).unwrap();
    }
    a.recv(u64::MAX, &mut b).unwrap();
    assert_eq!(a.stats().sent, 127);
}

#[test]
fn wakers_ring_only_for_their_own_endpoint() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    // Two fabrics that reuse the same addresses: a send on one never
    // wakes an endpoint of the other.
    let (f1, f2) = (Fabric::new(), Fabric::new());
    let a1 = "10.0.0.1".parse().unwrap();
    let b1 = "10.0.0.2".parse().unwrap();
    let mut x = f1.endpoint(a1).unwrap();
    let y = f1.endpoint(b1).unwrap();
    let z = f2.endpoint(b1).unwrap();
    let (hits_y, hits_z) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let h = hits_y.clone();
    y.set_waker(move || {
        h.fetch_add(1, Ordering::SeqCst);
    });
    let h = hits_z.clone();
    z.set_waker(move || {
        h.fetch_add(1, Ordering::SeqCst);
    });
    let mut ip = [0u8; 20];
    ip[0] = 0x45;
    ip[16..20].copy_from_slice(&[10, 0, 0, 2]);
    let mut batch = PacketBatch::new(4, 64);
    for _ in 0..3 {
        batch.push(&ip);
    }
    x.send(0, &batch).unwrap();
    assert_eq!(hits_y.load(Ordering::SeqCst), 1, "one ring per send call");
    assert_eq!(hits_z.load(Ordering::SeqCst), 0, "another fabric's port");
    // No ring for a datagram that was not queued (no route).
    ip[19] = 9;
    batch.clear();
    batch.push(&ip);
    x.send(0, &batch).unwrap();
    assert_eq!(hits_y.load(Ordering::SeqCst), 1);
    y.clear_waker();
    ip[19] = 2;
    batch.clear();
    batch.push(&ip);
    x.send(0, &batch).unwrap();
    assert_eq!(hits_y.load(Ordering::SeqCst), 1, "cleared");
}
