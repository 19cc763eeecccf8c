use super::*;
use crate::testutil::{psn, v4_frame, v6_frame};
use crate::{Fabric, FabricPort};
use roce_wire::{Ecn, RocePacket};
use std::collections::VecDeque;

/// A backend that records what it is sent, taking at most `max_per_call`
/// datagrams per call, and replays `inbox` on recv.
#[derive(Default)]
struct Sink {
    sent: Vec<(Nanos, Vec<u8>)>,
    max_per_call: Option<usize>,
    inbox: VecDeque<Vec<u8>>,
    fail: bool,
}

impl Backend for Sink {
    fn local_addrs(&self) -> &[IpAddr] {
        &[]
    }
    fn send(&mut self, now: Nanos, batch: &PacketBatch) -> io::Result<usize> {
        if self.fail {
            return Err(io::Error::other("link down"));
        }
        let n = batch.len().min(self.max_per_call.unwrap_or(usize::MAX));
        self.sent
            .extend(batch.iter().take(n).map(|d| (now, d.to_vec())));
        Ok(n)
    }
    fn recv(&mut self, _now: Nanos, batch: &mut PacketBatch) -> io::Result<usize> {
        batch.clear();
        while !batch.is_full() {
            let Some(d) = self.inbox.pop_front() else {
                break;
            };
            batch.push(&d);
        }
        Ok(batch.len())
    }
    fn counters(&self) -> Vec<(&'static str, u64)> {
        vec![("sink_sent", self.sent.len() as u64)]
    }
}

fn frames(n: u32) -> Vec<Vec<u8>> {
    (0..n)
        .map(|i| v4_frame("10.0.0.1", "10.0.0.2", i, (i % 5) as usize * 3, Ecn::Ect0))
        .collect()
}

/// Sends `frames` one batch of 16 per nanosecond, then drains everything.
fn run(cfg: FaultConfig, frames: &[Vec<u8>]) -> (Vec<(Nanos, Vec<u8>)>, FaultStats) {
    let mut inj = FaultInjector::new(Sink::default(), cfg);
    let mut b = PacketBatch::new(16, 512);
    for (t, chunk) in frames.chunks(16).enumerate() {
        b.clear();
        for f in chunk {
            assert!(b.push(f));
        }
        assert_eq!(inj.send(t as Nanos, &b).unwrap(), chunk.len());
    }
    while let Some(t) = inj.poll_at() {
        inj.recv(t, &mut b).unwrap();
    }
    assert_eq!(inj.held(), 0);
    let stats = inj.stats();
    (inj.into_inner().sent, stats)
}

fn psns(out: &[(Nanos, Vec<u8>)]) -> Vec<u32> {
    out.iter().map(|(_, d)| psn(d)).collect()
}

#[test]
fn loss_rate_is_within_bounds() {
    let sent = frames(10_000);
    let (out, st) = run(FaultConfig::new(7).loss(0.1), &sent);
    assert_eq!(st.packets, 10_000);
    // Binomial(10000, 0.1): sd 30; 4 sd either side.
    assert!((880..=1120).contains(&st.lost), "lost {}", st.lost);
    assert_eq!(out.len() as u64, 10_000 - st.lost);
    let got = psns(&out);
    assert!(
        got.windows(2).all(|w| w[0] < w[1]),
        "loss alone keeps order"
    );
}

#[test]
fn raising_loss_drops_a_superset() {
    let sent = frames(2_000);
    let kept = |p| -> std::collections::HashSet<u32> {
        psns(&run(FaultConfig::new(3).loss(p), &sent).0)
            .into_iter()
            .collect()
    };
    let (low, high) = (kept(0.05), kept(0.2));
    assert!(high.is_subset(&low));
    assert!(high.len() < low.len());
}

#[test]
fn duplicates_follow_their_original() {
    let sent = frames(10_000);
    let (out, st) = run(FaultConfig::new(11).duplicate(0.05), &sent);
    assert!((400..=600).contains(&st.duplicated), "{}", st.duplicated);
    assert_eq!(out.len() as u64, 10_000 + st.duplicated);
    let got = psns(&out);
    let twins = got.windows(2).filter(|w| w[0] == w[1]).count() as u64;
    assert_eq!(twins, st.duplicated);
    let mut dedup = got.clone();
    dedup.dedup();
    assert_eq!(dedup, (0..10_000).collect::<Vec<_>>());
}

#[test]
fn reordered_packets_are_overtaken_by_the_next() {
    let sent = frames(10_000);
    let (out, st) = run(FaultConfig::new(5).reorder(0.1), &sent);
    let held = st.reordered + st.reorder_timeouts;
    assert!((880..=1120).contains(&held), "{held}");
    let got = psns(&out);
    let mut sorted = got.clone();
    sorted.sort_unstable();
    assert_eq!(sorted, (0..10_000).collect::<Vec<_>>(), "nothing lost");
    let inversions = got.windows(2).filter(|w| w[0] > w[1]).count() as u64;
    // A run of held packets is overtaken by the one packet after it: one
    // inversion per run.
    assert!(inversions > 500 && inversions <= held, "{inversions}");
    // Each packet moves by at most the length of such a run.
    let moved = got
        .iter()
        .enumerate()
        .map(|(i, &p)| (i as i64 - i64::from(p)).abs());
    assert!(moved.max().unwrap() <= 6);
}

#[test]
fn reorder_depth_and_timeout() {
    let sent = frames(4);
    // Reorder everything with depth 2: held packets wait for two that are
    // not held, which never come; the timeout releases them in order.
    let cfg = FaultConfig::new(1).reorder(1.0).reorder_shape(2, 1_000);
    let mut inj = FaultInjector::new(Sink::default(), cfg);
    let mut b = PacketBatch::new(4, 512);
    for f in &sent {
        b.push(f);
    }
    inj.send(10, &b).unwrap();
    assert_eq!(inj.held(), 4);
    assert_eq!(inj.poll_at(), Some(1_010));
    inj.recv(1_009, &mut b).unwrap();
    assert!(inj.get_ref().sent.is_empty());
    inj.recv(1_010, &mut b).unwrap();
    assert_eq!(psns(&inj.get_ref().sent), vec![0, 1, 2, 3]);
    assert_eq!(inj.stats().reorder_timeouts, 4);
    assert_eq!(inj.poll_at(), None);

    // Depth 2 with one held packet: it goes out after the next two.
    let cfg = FaultConfig::new(1).reorder_shape(2, 1_000);
    let mut inj = FaultInjector::new(Sink::default(), cfg);
    inj.cfg.reorder = 1.0;
    b.clear();
    b.push(&sent[0]);
    inj.send(0, &b).unwrap();
    inj.cfg.reorder = 0.0;
    b.clear();
    for f in &sent[1..] {
        b.push(f);
    }
    inj.send(0, &b).unwrap();
    assert_eq!(psns(&inj.get_ref().sent), vec![1, 2, 0, 3]);
    assert_eq!(inj.stats().reordered, 1);
}

#[test]
fn corruption_is_always_caught_by_the_icrc() {
    let sent: Vec<Vec<u8>> = (0..3_000u32)
        .map(|i| match i % 3 {
            0 => v4_frame("10.0.0.1", "10.0.0.2", i, (i % 64) as usize, Ecn::NotEct),
            1 => v6_frame("fd00::1", "fd00::2", i, (i % 200) as usize),
            _ => v4_frame("10.0.0.1", "10.0.0.2", i, 0, Ecn::Ect1),
        })
        .collect();
    let (out, st) = run(FaultConfig::new(99).corrupt(0.3), &sent);
    assert_eq!(
        out.len(),
        sent.len(),
        "corruption alone keeps every packet in order"
    );
    let mut changed = 0;
    for ((_, got), want) in out.iter().zip(&sent) {
        let ok = RocePacket::parse_ip(got).is_ok_and(|p| p.check_icrc().is_ok());
        if got == want {
            assert!(ok, "untouched packets still verify");
        } else {
            changed += 1;
            let diff: u32 = got
                .iter()
                .zip(want)
                .map(|(a, b)| (a ^ b).count_ones())
                .sum();
            assert_eq!(diff, 1, "exactly one bit flipped");
            assert!(!ok, "a corrupted packet passed parse and ICRC");
        }
    }
    assert_eq!(changed, st.corrupted);
    assert!((800..=1000).contains(&changed), "{changed}");
}

#[test]
fn ce_marking_keeps_icrc_and_ipv4_checksum() {
    let mut sent = Vec::new();
    for i in 0..600u32 {
        sent.push(match i % 3 {
            0 => v4_frame("10.0.0.1", "10.0.0.2", i, 8, Ecn::Ect0),
            1 => v6_frame("fd00::1", "fd00::2", i, 8),
            _ => v4_frame("10.0.0.1", "10.0.0.2", i, 8, Ecn::NotEct),
        });
    }
    let (out, st) = run(FaultConfig::new(2).ce_mark(0.5), &sent);
    let mut marked = 0;
    for ((_, got), want) in out.iter().zip(&sent) {
        let p = RocePacket::parse_ip(got).expect("IPv4 checksum and UDP checksum valid");
        assert!(p.check_icrc().is_ok());
        let orig = RocePacket::parse_ip(want).unwrap().ip.ecn();
        match (orig, p.ip.ecn()) {
            (Ecn::NotEct, e) => assert_eq!(e, Ecn::NotEct),
            (Ecn::Ect0, Ecn::Ce) => marked += 1,
            (a, b) => assert_eq!(a, b),
        }
    }
    assert_eq!(marked, st.ce_marked);
    assert!((150..=250).contains(&marked), "{marked}");
}

#[test]
fn delay_and_jitter_hold_packets_until_due() {
    let sent = frames(200);
    let cfg = FaultConfig::new(8).delay(1_000, 500);
    let mut inj = FaultInjector::new(Sink::default(), cfg);
    let mut b = PacketBatch::new(200, 512);
    for f in &sent {
        b.push(f);
    }
    inj.send(100, &b).unwrap();
    assert!(inj.get_ref().sent.is_empty());
    assert_eq!(inj.held(), 200);
    let first = inj.poll_at().unwrap();
    assert!((1_100..=1_600).contains(&first));
    // A send with an empty batch also releases what is due.
    b.clear();
    inj.send(first, &b).unwrap();
    assert!(!inj.get_ref().sent.is_empty());
    while let Some(t) = inj.poll_at() {
        inj.recv(t, &mut b).unwrap();
    }
    let out = &inj.get_ref().sent;
    assert_eq!(out.len(), 200);
    assert!(out.iter().all(|(t, _)| (1_100..=1_600).contains(t)));
    assert!(
        out.windows(2).all(|w| w[0].0 <= w[1].0),
        "released in time order"
    );
    let got = psns(out);
    assert!(got.windows(2).any(|w| w[0] > w[1]), "jitter reorders");
    assert_eq!(inj.stats().delayed, 200);

    // Without jitter the delay is exact and order is kept.
    let (out, _) = run(FaultConfig::new(8).delay(250, 0), &frames(40));
    for (i, (t, d)) in out.iter().enumerate() {
        assert_eq!(*t, (i / 16) as Nanos + 250);
        assert_eq!(psn(d), i as u32);
    }
}

#[test]
fn same_seed_same_faults_different_seed_different() {
    let sent = frames(3_000);
    let cfg = |seed| {
        FaultConfig::new(seed)
            .loss(0.05)
            .duplicate(0.05)
            .reorder(0.05)
            .corrupt(0.05)
            .ce_mark(0.3)
            .delay(100, 300)
    };
    let a = run(cfg(1234), &sent);
    let b = run(cfg(1234), &sent);
    let c = run(cfg(1235), &sent);
    assert_eq!(a.0, b.0);
    assert_eq!(a.1, b.1);
    assert_ne!(a.0, c.0);
    let inj = FaultInjector::new(Sink::default(), cfg(1234));
    assert_eq!(inj.seed(), 1234);
}

#[test]
fn backpressure_keeps_order_and_takes_nothing_new() {
    let sent = frames(10);
    let sink = Sink {
        max_per_call: Some(2),
        ..Sink::default()
    };
    let mut inj = FaultInjector::new(sink, FaultConfig::new(0));
    let mut b = PacketBatch::new(5, 512);
    for f in &sent[..5] {
        b.push(f);
    }
    // Taken: the sink took two, the injector keeps three.
    assert_eq!(inj.send(0, &b).unwrap(), 5);
    assert_eq!(inj.held(), 3);
    assert_eq!(inj.poll_at(), Some(0), "work to do right away");
    b.clear();
    for f in &sent[5..] {
        b.push(f);
    }
    // Two of the three go; one is still waiting, so nothing new is taken.
    assert_eq!(
        inj.send(1, &b).unwrap(),
        0,
        "backlog not flushed: take nothing"
    );
    assert_eq!(inj.send(2, &b).unwrap(), 5);
    for t in 3..10 {
        inj.send(t, &PacketBatch::new(0, 0)).unwrap();
    }
    assert_eq!(psns(&inj.get_ref().sent), (0..10).collect::<Vec<_>>());
    assert_eq!(inj.held(), 0);
    assert_eq!(inj.poll_at(), None);
}

#[test]
fn errors_after_taking_are_counted_and_retried() {
    let mut inj = FaultInjector::new(Sink::default(), FaultConfig::new(0));
    inj.get_mut().fail = true;
    let mut b = PacketBatch::new(2, 512);
    b.push(&frames(1)[0]);
    // Nothing pending: the batch is taken, the error counted.
    assert_eq!(inj.send(0, &b).unwrap(), 1);
    assert_eq!(inj.stats().errors, 1);
    // Pending now: the next send reports the error and takes nothing.
    assert!(inj.send(1, &b).is_err());
    inj.get_mut().fail = false;
    assert_eq!(inj.send(2, &b).unwrap(), 1);
    assert_eq!(inj.get_ref().sent.len(), 2);
}

#[test]
fn receive_path_faults_use_their_own_stream() {
    let sent = frames(1_000);
    let tx_only = run(FaultConfig::new(77).loss(0.2), &sent);
    let both = run(FaultConfig::new(77).loss(0.2).paths(true, true), &sent);
    assert_eq!(
        tx_only.0, both.0,
        "receive path does not perturb the send path"
    );

    let sink = Sink {
        inbox: sent.iter().cloned().collect(),
        ..Sink::default()
    };
    let mut inj = FaultInjector::new(sink, FaultConfig::new(77).loss(0.2).paths(false, true));
    let mut b = PacketBatch::new(32, 512);
    let mut got = 0;
    while inj.recv(0, &mut b).unwrap() > 0 || !inj.get_ref().inbox.is_empty() {
        got += b.len() as u64;
    }
    let rs = inj.recv_stats();
    assert_eq!(rs.packets, 1_000);
    assert!((140..=260).contains(&rs.lost), "{}", rs.lost);
    assert_eq!(got, 1_000 - rs.lost);
    assert_eq!(inj.stats().packets, 0, "send path unused");
    let names: Vec<&str> = inj.counters().iter().map(|c| c.0).collect();
    assert!(names.contains(&"fault_rx_lost") && names.contains(&"sink_sent"));
}

#[test]
fn stacks_on_a_boxed_fabric_port() {
    let fabric = Fabric::new();
    let a: Box<dyn Backend + Send> =
        Box::new(fabric.endpoint("10.0.0.1".parse().unwrap()).unwrap());
    let mut b: FabricPort = fabric.endpoint("10.0.0.2".parse().unwrap()).unwrap();
    let mut inj = FaultInjector::new(a, FaultConfig::new(4).delay(50, 0));
    assert_eq!(inj.local_addrs(), &["10.0.0.1".parse::<IpAddr>().unwrap()]);
    let mut batch = PacketBatch::new(4, 512);
    batch.push(&frames(1)[0]);
    inj.send(0, &batch).unwrap();
    assert_eq!(inj.poll_at(), Some(50));
    inj.recv(50, &mut batch).unwrap();
    assert_eq!(b.recv(50, &mut batch).unwrap(), 1);
    assert!(inj.counters().contains(&("sent", 1)));
}

#[test]
fn probabilities_are_clamped() {
    let cfg = FaultConfig::new(0)
        .loss(f64::NAN)
        .duplicate(-1.0)
        .corrupt(7.0);
    assert_eq!((cfg.loss, cfg.duplicate, cfg.corrupt), (0.0, 0.0, 1.0));
    let mut raw = FaultConfig::new(0);
    raw.loss = 3.0;
    let inj = FaultInjector::new(Sink::default(), raw);
    assert_eq!(inj.config().loss, 1.0);
}

#[test]
fn garbage_datagrams_never_panic() {
    let cfg = FaultConfig::new(9)
        .loss(0.1)
        .duplicate(0.3)
        .reorder(0.3)
        .corrupt(1.0)
        .ce_mark(1.0)
        .delay(3, 5);
    let mut inj = FaultInjector::new(Sink::default(), cfg);
    let mut b = PacketBatch::new(1, 128);
    for n in 1..128usize {
        let mut d: Vec<u8> = (0..n).map(|i| (i * 31 + n) as u8).collect();
        d[0] = [0x45, 0x60, 0x46, 0x4f, 0x00, 0x61][n % 6];
        b.clear();
        b.push(&d);
        inj.send(n as Nanos, &b).unwrap();
    }
    inj.recv(u64::MAX, &mut b).unwrap();
    assert_eq!(inj.held(), 0);
}

/// A plan's targeted rules: the Nth datagram dropped, a freeze window
/// holding what is sent until it ends (then in order), a link-down window
/// dropping both ways; each logged with its BTH.
#[test]
fn targeted_rules_drop_freeze_and_link_down() {
    let plan =
        FaultPlan::parse("drop op=send nth=3; freeze at=10 for=100; link-down at=200 for=50")
            .unwrap();
    let log = FaultLog::new(plan.rules, None);
    let mut t = TargetedFaults::new(Sink::default(), log.clone(), QpIndex::new(), 0);
    let f = frames(10);
    let send = |t: &mut TargetedFaults<Sink>, now: Nanos, fs: &[Vec<u8>]| {
        let mut b = PacketBatch::new(16, 512);
        for x in fs {
            assert!(b.push(x));
        }
        assert_eq!(t.send(now, &b).unwrap(), fs.len());
    };
    send(&mut t, 0, &f[..5]);
    let sent = |t: &TargetedFaults<Sink>| -> Vec<u32> {
        t.get_ref().sent.iter().map(|(_, d)| psn(d)).collect()
    };
    assert_eq!(sent(&t), vec![0, 1, 3, 4]);
    send(&mut t, 20, &f[5..7]);
    assert_eq!(sent(&t).len(), 4, "held by the freeze");
    assert_eq!(t.poll_at(), Some(110));
    send(&mut t, 120, &[]);
    assert_eq!(sent(&t), vec![0, 1, 3, 4, 5, 6]);
    send(&mut t, 210, &f[7..8]);
    let mut inbox = PacketBatch::new(4, 512);
    // A datagram received while the link is down is lost too.
    t.get_mut_for_test().inbox.push_back(f[8].clone());
    assert_eq!(t.recv(220, &mut inbox).unwrap(), 0);
    t.get_mut_for_test().inbox.push_back(f[9].clone());
    assert_eq!(t.recv(260, &mut inbox).unwrap(), 1);
    assert_eq!(sent(&t).len(), 6);
    assert_eq!(log.counts(), vec![1, 2, 2]);
    let inj = log.injections();
    assert_eq!((inj[0].psn, inj[0].tx, inj[0].opcode), (2, true, 0x04));
    assert!(!inj[4].tx && inj[4].action == FaultAction::LinkDown);
}

/// A backend that receives UDP payloads with their headers, as the UDP
/// backend does, each marked as its sending engine made it (as a
/// same-host ring marks them).
struct Payloads {
    addrs: Vec<IpAddr>,
    queue: VecDeque<(roce_wire::RxHeader, Vec<u8>)>,
}

impl Backend for Payloads {
    fn local_addrs(&self) -> &[IpAddr] {
        &self.addrs
    }
    fn send(&mut self, _now: Nanos, batch: &PacketBatch) -> io::Result<usize> {
        Ok(batch.len())
    }
    fn recv(&mut self, _now: Nanos, batch: &mut PacketBatch) -> io::Result<usize> {
        batch.clear();
        while let Some((h, p)) = self.queue.pop_front() {
            let meta = crate::RxMeta::default().with_host_intact(true);
            batch.push_payload_with(h, meta, |slot| {
                slot[..p.len()].copy_from_slice(&p);
                p.len()
            });
        }
        Ok(batch.len())
    }
}

/// On the receive path a UDP payload keeps its header: a CE mark goes
/// into the header's TOS (an ECT one's only), and corruption flips a bit
/// the ICRC covers in the payload, never the header.
#[test]
fn received_payloads_are_marked_in_their_header_and_corrupted_in_their_bytes() {
    let d = v4_frame("10.0.0.1", "10.0.0.2", 1, 64, Ecn::Ect0);
    let t = roce_wire::Transmit::of_datagram(&d).unwrap();
    let payload = d[t.header_len()..].to_vec();
    let h = roce_wire::RxHeader::new(t.src, t.destination.ip(), t.tos()).with_ipv4_id(Some(0));
    let not_ect = roce_wire::RxHeader { tos: 26 << 2, ..h };
    let fake = Payloads {
        addrs: vec!["10.0.0.2".parse().unwrap()],
        queue: VecDeque::from([(h, payload.clone()), (not_ect, payload.clone())]),
    };
    let cfg = FaultConfig::new(5)
        .ce_mark(1.0)
        .corrupt(1.0)
        .paths(false, true);
    let mut f = FaultInjector::new(fake, cfg);
    let mut rx = PacketBatch::new(4, 4400);
    assert_eq!(f.recv(0, &mut rx).unwrap(), 2);
    let (h0, h1) = (rx.header(0).unwrap(), rx.header(1).unwrap());
    assert_eq!(h0.ecn(), Ecn::Ce);
    assert_eq!(h0.src, h.src);
    assert_eq!(h1, not_ect, "not ECN-capable: not marked");
    for i in 0..2 {
        let got = rx.get(i);
        assert_eq!(got.len(), payload.len());
        let diff: Vec<usize> = (0..got.len()).filter(|&k| got[k] != payload[k]).collect();
        assert_eq!(diff.len(), 1, "one byte flipped");
        assert!(
            diff[0] != 4 && diff[0] < payload.len() - 4,
            "covered: {diff:?}"
        );
        let ip = rx.header(i).unwrap().ip_repr().unwrap();
        let p = RocePacket::parse_udp_payload(ip, h.src.port(), got);
        assert!(p.is_err() || p.unwrap().check_icrc().is_err());
        // Damaged: no longer what the sender's engine made, so the
        // receiving engine is not told to trust its ICRC.
        assert!(!rx.meta(i).host_intact, "corrupted, not intact");
    }
    assert_eq!((f.recv_stats().ce_marked, f.recv_stats().corrupted), (1, 2));
}
