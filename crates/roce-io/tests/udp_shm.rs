//! The UDP backend's same-host path (docs/shm.md): two backends on
//! loopback addresses of one process, each with `UdpConfig::shm`, move
//! from UDP to a shared-memory ring after the first datagram, deliver
//! the same datagrams (addresses, ports, DSCP / ECN, payload, ICRC) in
//! order, wake a sleeping receiver, and fall back to UDP when the peer
//! has no ring or goes away.

mod common;

use std::collections::HashMap;
use std::net::IpAddr;
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use common::*;
use roce_io::{Backend, Nanos, PacketBatch, UdpBackend, UdpConfig};
use roce_wire::{Ecn, ROCE_V2_PORT};

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

/// A monotonic clock in nanoseconds, as a progress engine passes.
struct Clock(Instant);

impl Clock {
    fn now(&self) -> Nanos {
        self.0.elapsed().as_nanos() as Nanos
    }
}

fn spec(src: IpAddr, dst: IpAddr, psn: u32) -> Spec {
    Spec {
        src,
        dst,
        sport: 0xC000 + (psn % 4) as u16,
        dscp: (psn % 64) as u8,
        ecn: if psn.is_multiple_of(2) {
            Ecn::Ect0
        } else {
            Ecn::NotEct
        },
        psn,
        len: 1 + (psn as usize * 37) % 4000,
    }
}

/// Sends `specs` from `a` in one batch.
fn send(a: &mut UdpBackend, clock: &Clock, specs: &[Spec]) {
    let mut tx = PacketBatch::new(specs.len(), SLOT);
    for s in specs {
        assert!(tx.push_with(|slot| emit(s, slot)));
    }
    let n = a.send(clock.now(), &tx).expect("send");
    assert_eq!(n, specs.len(), "a loopback send takes everything");
}

/// Receives at `b` until `want` datagrams came or two seconds passed,
/// sleeping on its wait descriptor between empty receives; checks each
/// against its spec and returns the PSNs in arrival order.
fn receive(b: &mut UdpBackend, clock: &Clock, specs: &[Spec]) -> Vec<u32> {
    let by_psn: HashMap<u32, &Spec> = specs.iter().map(|s| (s.psn, s)).collect();
    let mut rx = PacketBatch::new(64, 9216);
    let mut psns = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(2);
    while psns.len() < specs.len() && Instant::now() < deadline {
        let n = b.recv(clock.now(), &mut rx).expect("recv");
        for i in 0..n {
            let g = Got::of(&rx, i);
            let p = g.packet().expect("the payload parses with its header");
            let s = by_psn[&p.bth.psn.value()];
            assert_eq!((p.ip.src(), p.ip.dst()), (s.src, s.dst));
            // By UDP, a source port another socket holds is rewritten to
            // the sender's RoCE port (the backend's fallback).
            assert!(p.udp.src_port == s.sport || p.udp.src_port == b.local_addr().port());
            assert_eq!(p.udp.dst_port, ROCE_V2_PORT);
            assert_eq!((p.ip.dscp(), p.ip.ecn()), (s.dscp, s.ecn), "psn {}", s.psn);
            assert_eq!(p.payload, &payload(s.psn, s.len)[..]);
            assert!(g.icrc_ok(), "ICRC of psn {}", s.psn);
            psns.push(s.psn);
        }
        if n == 0 {
            let _ = b.wait_readable(Some(Duration::from_millis(20)));
        }
    }
    psns
}

/// Two backends with the path on `127.0.0.<a>` and `127.0.0.<b>` (each
/// test its own addresses: the per-port send sockets of tests running at
/// once would otherwise hold each other's source ports).
fn shm_pair(a: u8, b: u8) -> (UdpBackend, UdpBackend) {
    pair(
        ip(&format!("127.0.0.{a}")),
        ip(&format!("127.0.0.{b}")),
        |c: UdpConfig| c.shm(true).shm_ring(1 << 16).shm_build_in_place(true),
    )
}

/// Sends single datagrams from `a` to `b` until `a` has a link (a few
/// milliseconds: `b` takes the hello at its next receive); returns how
/// many were sent, all received.
fn until_linked(a: &mut UdpBackend, b: &mut UdpBackend, clock: &Clock, first: u32) -> u32 {
    let (sa, sb) = (a.local_addr().ip(), b.local_addr().ip());
    let mut psn = first;
    while a.stats().shm_links_out == 0 {
        assert!(psn < first + 500, "no link after {} datagrams", psn - first);
        let s = [spec(sa, sb, psn)];
        send(a, clock, &s);
        assert_eq!(receive(b, clock, &s), vec![psn]);
        psn += 1;
        std::thread::sleep(Duration::from_micros(200));
    }
    psn - first
}

/// A pair from [`shm_pair`] already linked ([`until_linked`]): the
/// clock, the sender, the receiver, their addresses, and the next PSN.
fn linked(x: u8, y: u8) -> (Clock, UdpBackend, UdpBackend, IpAddr, IpAddr, u32) {
    let clock = Clock(Instant::now());
    let (mut a, mut b) = shm_pair(x, y);
    let (sa, sb) = (a.local_addr().ip(), b.local_addr().ip());
    let next = until_linked(&mut a, &mut b, &clock, 0);
    (clock, a, b, sa, sb, next)
}

#[test]
fn datagrams_to_a_same_host_peer_go_through_the_ring_in_order() {
    let (clock, mut a, mut b, sa, sb, by_udp) = linked(11, 12);
    assert!(by_udp >= 1, "the first datagram goes by UDP");
    assert_eq!(b.stats().shm_links_in, 1);
    let before = (a.stats(), b.stats());
    // Twenty rounds of up to 48 KB through a 64 KiB ring: the records
    // wrap many times.
    let mut next = by_udp;
    for _round in 0..20 {
        let specs: Vec<Spec> = (next..next + 12).map(|p| spec(sa, sb, p)).collect();
        send(&mut a, &clock, &specs);
        let got = receive(&mut b, &clock, &specs);
        let want: Vec<u32> = specs.iter().map(|s| s.psn).collect();
        assert_eq!(got, want, "every datagram, in order");
        next += 12;
    }
    let (sa_stats, sb_stats) = (a.stats(), b.stats());
    assert_eq!(
        sa_stats.tx_datagrams, before.0.tx_datagrams,
        "nothing more by UDP"
    );
    assert_eq!(sa_stats.shm_tx_datagrams - before.0.shm_tx_datagrams, 240);
    assert_eq!(sb_stats.shm_rx_datagrams - before.1.shm_rx_datagrams, 240);
    assert_eq!(
        sb_stats.rx_datagrams, before.1.rx_datagrams,
        "nothing more by UDP"
    );
    assert_eq!(sa_stats.shm_tx_bytes, sb_stats.shm_rx_bytes);
    assert_eq!(sa_stats.shm_tx_full_drops, 0);
    let counters: HashMap<_, _> = b.counters().into_iter().collect();
    assert_eq!(counters["udp_shm_rx_datagrams"], sb_stats.shm_rx_datagrams);
    // A burst larger than the ring while the reader does not read: what
    // does not fit is dropped and counted, as a full socket buffer
    // drops, and the rest arrives.
    let burst: Vec<Spec> = (next..next + 24)
        .map(|p| Spec {
            len: 4000,
            ..spec(sa, sb, p)
        })
        .collect();
    send(&mut a, &clock, &burst);
    let dropped = a.stats().shm_tx_full_drops;
    // 16 records of 4008 bytes fit in 64 KiB, or 15 when the area's end
    // falls inside one (a skip record fills it).
    assert!((8..=9).contains(&dropped), "{dropped} dropped");
    let got = receive(&mut b, &clock, &burst[..24 - dropped as usize]);
    assert_eq!(got.len() as u64, 24 - dropped);
}

#[test]
fn a_sleeping_receiver_is_woken_by_the_doorbell() {
    let (clock, mut a, mut b, sa, sb, next) = linked(13, 14);
    let next = next + 1;
    let mut rx = PacketBatch::new(8, 9216);
    assert_eq!(b.recv(clock.now(), &mut rx).unwrap(), 0);
    let readable = |b: &UdpBackend, timeout: u16| {
        let fd = b.wait_fd().expect("a descriptor to sleep on");
        let mut fds = [nix::poll::PollFd::new(
            fd.as_fd(),
            nix::poll::PollFlags::POLLIN,
        )];
        nix::poll::poll(&mut fds, timeout).unwrap() > 0
    };
    // A record clears any request for a doorbell left from before (a
    // wait in `until_linked`); after it, a receiver that keeps polling
    // asks for none, and the sender rings none.
    let s = [spec(sa, sb, next - 1)];
    send(&mut a, &clock, &s);
    assert_eq!(receive(&mut b, &clock, &s), vec![next - 1]);
    let rung = a.stats().shm_doorbells;
    let s = [spec(sa, sb, next)];
    send(&mut a, &clock, &s);
    assert_eq!(a.stats().shm_doorbells, rung, "no doorbell for a poller");
    assert_eq!(receive(&mut b, &clock, &s), vec![next]);
    // About to sleep: the backend arms its rings.
    assert_eq!(b.recv(clock.now(), &mut rx).unwrap(), 0);
    assert!(!b.prepare_wait(clock.now()), "nothing arrived meanwhile");
    assert!(!readable(&b, 0), "nothing to wake for yet");
    let s = [spec(sa, sb, next + 1)];
    send(&mut a, &clock, &s);
    assert_eq!(a.stats().shm_doorbells, rung + 1, "the sender rang");
    assert!(
        readable(&b, 1000),
        "the doorbell makes the descriptor readable"
    );
    assert_eq!(receive(&mut b, &clock, &s), vec![next + 1]);
    // Woken once: preparing the next sleep empties the doorbell, and the
    // descriptor is quiet again.
    assert_eq!(b.recv(clock.now(), &mut rx).unwrap(), 0);
    assert!(!b.prepare_wait(clock.now()));
    assert!(!readable(&b, 0), "no wake-up left over");
    // A record written between the last receive and the preparation is
    // reported, so the caller receives instead of sleeping.
    let s = [spec(sa, sb, next + 2)];
    send(&mut a, &clock, &s);
    assert!(b.prepare_wait(clock.now()), "a datagram came meanwhile");
    assert_eq!(receive(&mut b, &clock, &s), vec![next + 2]);
}

#[test]
fn a_peer_without_the_path_is_reached_by_udp() {
    let clock = Clock(Instant::now());
    // The sender has the path, the receiver not.
    let (a, mut b) = pair(ip("127.0.0.15"), ip("127.0.0.16"), |c: UdpConfig| c);
    let cfg = a.config().clone().shm(true);
    drop(a);
    let mut a = UdpBackend::bind(cfg).unwrap();
    let (sa, sb) = (a.local_addr().ip(), b.local_addr().ip());
    let specs: Vec<Spec> = (0..30).map(|p| spec(sa, sb, p)).collect();
    for chunk in specs.chunks(3) {
        send(&mut a, &clock, chunk);
        assert_eq!(receive(&mut b, &clock, chunk).len(), chunk.len());
    }
    let s = a.stats();
    assert_eq!((s.shm_tx_datagrams, s.shm_links_out), (0, 0));
    assert_eq!(s.tx_datagrams, 30);
}

#[test]
fn when_the_peer_goes_the_sender_falls_back_and_links_to_its_successor() {
    let (clock, mut a, b, sa, sb, mut psn) = linked(17, 18);
    let cfg = b.config().clone();
    drop(b);
    // Datagrams into a ring nobody reads are lost, as UDP to a closed
    // port is, until the sender's liveness look (every 100 ms) sees the
    // reader gone and sends by UDP again.
    let udp_before = a.stats().tx_datagrams;
    let deadline = Instant::now() + Duration::from_secs(3);
    while a.stats().tx_datagrams == udp_before {
        assert!(Instant::now() < deadline, "the sender kept the dead link");
        send(&mut a, &clock, &[spec(sa, sb, psn)]);
        psn += 1;
        std::thread::sleep(Duration::from_millis(1));
    }
    let mut b2 = UdpBackend::bind(cfg).expect("the address is free again");
    // The successor gets everything, by UDP and then by its own ring
    // (asked again a second after the first went).
    let deadline = Instant::now() + Duration::from_secs(5);
    while a.stats().shm_links_out < 2 {
        assert!(Instant::now() < deadline, "no link to the successor");
        let s = [spec(sa, sb, psn)];
        send(&mut a, &clock, &s);
        assert_eq!(receive(&mut b2, &clock, &s), vec![psn]);
        psn += 1;
        std::thread::sleep(Duration::from_millis(5));
    }
    let specs: Vec<Spec> = (psn..psn + 10).map(|p| spec(sa, sb, p)).collect();
    let before = b2.stats().shm_rx_datagrams;
    send(&mut a, &clock, &specs);
    assert_eq!(receive(&mut b2, &clock, &specs).len(), 10);
    assert_eq!(b2.stats().shm_rx_datagrams - before, 10);
}

#[test]
fn udp_datagrams_still_arrive_while_a_ring_carries_the_traffic() {
    let (clock, mut a, mut b, sa, sb, mut psn) = linked(19, 20);
    // A third backend, without the path, on another address.
    let port = b.local_addr().port();
    let mut c = UdpBackend::bind(
        UdpConfig::new(ip("127.0.0.21"))
            .port(port)
            .remote_port(port),
    )
    .unwrap();
    let sc = c.local_addr().ip();
    // The receiver's socket has been quiet for a while (it is probed
    // only now and then), and it keeps polling without sleeping, the
    // ring busy: the UDP datagram is still taken, and so are the ring's.
    std::thread::sleep(Duration::from_millis(3));
    let mut rx = PacketBatch::new(16, 9216);
    for _ in 0..100 {
        send(&mut a, &clock, &[spec(sa, sb, psn)]);
        psn += 1;
        while b.recv(clock.now(), &mut rx).unwrap() > 0 {}
    }
    let from_c = spec(sc, sb, 1_000_000);
    send(&mut c, &clock, &[from_c]);
    let deadline = Instant::now() + Duration::from_secs(2);
    let mut got = None;
    let (mut ring, udp_before) = (0u64, b.stats().rx_datagrams);
    while got.is_none() && Instant::now() < deadline {
        send(&mut a, &clock, &[spec(sa, sb, psn)]);
        psn += 1;
        let n = b.recv(clock.now(), &mut rx).unwrap();
        for i in 0..n {
            let g = Got::of(&rx, i);
            let p = g.packet().unwrap();
            if p.ip.src() == sc {
                got = Some(p.bth.psn.value());
            } else {
                ring += 1;
            }
        }
    }
    assert_eq!(got, Some(1_000_000), "the UDP datagram arrived");
    assert!(ring > 0, "the ring's kept arriving");
    assert_eq!(b.stats().rx_datagrams, udp_before + 1);
}

#[test]
fn a_datagram_damaged_before_the_ring_fails_its_icrc_at_the_receiver() {
    let (clock, mut a, mut b, sa, sb, psn) = linked(22, 23);
    // Damaged after the sender's engine computed its ICRC, as a fault
    // injector in front of the backend damages it.
    let s = spec(sa, sb, psn);
    let mut tx = PacketBatch::new(1, SLOT);
    assert!(tx.push_with(|slot| {
        let n = emit(&s, slot);
        slot[n - 10] ^= 0x40;
        n
    }));
    let before = b.stats().shm_rx_datagrams;
    assert_eq!(a.send(clock.now(), &tx).unwrap(), 1);
    let mut rx = PacketBatch::new(4, 9216);
    let deadline = Instant::now() + Duration::from_secs(2);
    let mut n = 0;
    while n == 0 && Instant::now() < deadline {
        n = b.recv(clock.now(), &mut rx).unwrap();
    }
    assert_eq!(n, 1);
    assert_eq!(b.stats().shm_rx_datagrams, before + 1, "through the ring");
    // The header is exact (the IPv4 ID known), so the engine checks the
    // ICRC: and it fails.
    let g = Got::of(&rx, 0);
    assert!(g.exact() && g.header.unwrap().ipv4_id == Some(0));
    assert!(!g.icrc_ok(), "the damage is caught");
    // Pushed by hand, not as an engine's transmit: not marked intact, so
    // the receiving engine checks it whatever its trust.
    assert!(!g.meta.host_intact);
}

#[test]
fn only_an_engines_untouched_datagram_arrives_marked_intact() {
    let (clock, mut a, mut b, sa, sb, psn) = linked(24, 25);
    // Three datagrams: pushed as an engine's transmits (one of them then
    // rewritten in place, as middleware may), and one pushed by hand.
    let specs: Vec<Spec> = (psn..psn + 3).map(|p| spec(sa, sb, p)).collect();
    let mut tx = PacketBatch::new(3, SLOT);
    for s in &specs[..2] {
        assert!(tx.push_transmit_with(|slot| {
            let n = emit(s, slot);
            roce_wire::Transmit::of_datagram(&slot[..n])
        }));
    }
    assert!(tx.intact(0) && tx.intact(1));
    let _ = tx.get_mut(1);
    assert!(!tx.intact(1), "taken mutably: no longer intact");
    assert!(tx.push_with(|slot| emit(&specs[2], slot)));
    assert!(!tx.intact(2));
    let before = b.stats().shm_rx_datagrams;
    assert_eq!(a.send(clock.now(), &tx).unwrap(), 3);
    let mut rx = PacketBatch::new(4, 9216);
    let mut got = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(2);
    while got.len() < 3 && Instant::now() < deadline {
        let n = b.recv(clock.now(), &mut rx).unwrap();
        got.extend((0..n).map(|i| Got::of(&rx, i)));
    }
    assert_eq!(b.stats().shm_rx_datagrams, before + 3, "through the ring");
    let marks: Vec<bool> = got.iter().map(|g| g.meta.host_intact).collect();
    assert_eq!(marks, [true, false, false]);
    assert!(got.iter().all(|g| g.icrc_ok()), "all sound all the same");
}

/// Sends `specs` from `a` as an engine that left their ICRC out does
/// (`push_transmit_icrc_with`, the four bytes zero); returns how many
/// were taken.
fn send_without_icrc(a: &mut UdpBackend, clock: &Clock, specs: &[Spec]) -> usize {
    let mut tx = PacketBatch::new(specs.len(), SLOT);
    for s in specs {
        assert!(tx.push_transmit_icrc_with(|slot| {
            let n = emit(s, slot);
            slot[n - 4..n].fill(0);
            roce_wire::Transmit::of_datagram(&slot[..n]).map(|t| (t, false))
        }));
        assert!(!tx.icrc_present(tx.len() - 1));
    }
    a.send(clock.now(), &tx).unwrap()
}

/// Receives at `b` until `want` datagrams came or two seconds passed.
fn take(b: &mut UdpBackend, clock: &Clock, want: usize) -> Vec<Got> {
    let mut rx = PacketBatch::new(8, 9216);
    let mut got = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(2);
    while got.len() < want && Instant::now() < deadline {
        let n = b.recv(clock.now(), &mut rx).unwrap();
        got.extend((0..n).map(|i| Got::of(&rx, i)));
    }
    got
}

fn transmit_of(s: &Spec) -> roce_wire::Transmit {
    let mut slot = vec![0u8; SLOT];
    let n = emit(s, &mut slot);
    roce_wire::Transmit::of_datagram(&slot[..n]).unwrap()
}

#[test]
fn a_datagram_sent_without_its_icrc_gets_it_from_a_receiver_that_checks() {
    let (clock, mut a, mut b, sa, sb, psn) = linked(26, 27);
    // Into the ring the engine may leave the ICRC out; not by UDP.
    assert!(!a.needs_icrc(clock.now(), &transmit_of(&spec(sa, sb, psn))));
    let elsewhere = spec(sa, ip("127.0.0.28"), psn);
    assert!(a.needs_icrc(clock.now(), &transmit_of(&elsewhere)));
    // Odd sizes, from 1 byte to nearly the MTU.
    let specs: Vec<Spec> = (psn..psn + 6).map(|p| spec(sa, sb, p)).collect();
    assert_eq!(send_without_icrc(&mut a, &clock, &specs), specs.len());
    let got = take(&mut b, &clock, specs.len());
    assert_eq!(got.len(), specs.len());
    for (g, s) in got.iter().zip(&specs) {
        assert!(g.meta.host_intact);
        assert!(g.icrc_ok(), "computed by the receiver, psn {}", s.psn);
        assert_eq!(g.packet().unwrap().payload, &payload(s.psn, s.len)[..]);
    }
    let n = specs.len() as u64;
    assert_eq!(a.stats().shm_tx_no_icrc, n);
    assert_eq!(
        (b.stats().shm_rx_no_icrc, b.stats().shm_rx_icrc_filled),
        (n, n)
    );
    // One whose way is not a ring is dropped, never sent with a wrong
    // ICRC.
    let sent_by_udp = a.stats().tx_datagrams;
    assert_eq!(send_without_icrc(&mut a, &clock, &[elsewhere]), 1);
    assert_eq!(a.stats().shm_tx_no_icrc_dropped, 1);
    assert_eq!(a.stats().tx_datagrams, sent_by_udp);
}

#[test]
fn a_receiver_whose_engine_trusts_the_ring_takes_them_as_they_came() {
    let clock = Clock(Instant::now());
    let (mut a, mut b) = pair(ip("127.0.0.29"), ip("127.0.0.30"), |c: UdpConfig| {
        c.shm(true).shm_ring(1 << 16).shm_icrc_trusted(true)
    });
    let (sa, sb) = (a.local_addr().ip(), b.local_addr().ip());
    let psn = until_linked(&mut a, &mut b, &clock, 0);
    let specs: Vec<Spec> = (psn..psn + 3).map(|p| spec(sa, sb, p)).collect();
    assert_eq!(send_without_icrc(&mut a, &clock, &specs), specs.len());
    let got = take(&mut b, &clock, specs.len());
    assert_eq!(got.len(), specs.len());
    for g in &got {
        assert!(g.meta.host_intact, "the engine takes it unchecked");
        assert_eq!(g.bytes[g.bytes.len() - 4..], [0; 4], "not computed");
    }
    assert_eq!(b.stats().shm_rx_no_icrc, 3);
    assert_eq!(b.stats().shm_rx_icrc_filled, 0);
}

/// Builds `s` in place at `a` as an engine does
/// (`Backend::transmit_in_place`): the ICRC left out where `here` says
/// the datagram stays in the ring.
fn build_in_place(a: &mut UdpBackend, clock: &Clock, s: &Spec) -> roce_io::InPlace {
    a.transmit_in_place(clock.now(), &mut |buf, here| {
        let n = emit(s, buf);
        let t = roce_wire::Transmit::of_datagram(&buf[..n])?;
        let stays = here(&t);
        if stays {
            buf[n - 4..n].fill(0);
        }
        Some((t, !stays))
    })
}

#[test]
fn a_datagram_built_in_the_ring_arrives_and_one_for_elsewhere_is_sent_the_usual_way() {
    let clock = Clock(Instant::now());
    let (mut a, mut b) = shm_pair(41, 42);
    let (sa, sb) = (a.local_addr().ip(), b.local_addr().ip());
    // No way taken yet: nothing to build in.
    assert_eq!(
        build_in_place(&mut a, &clock, &spec(sa, sb, 0)),
        roce_io::InPlace::Unavailable
    );
    let psn = until_linked(&mut a, &mut b, &clock, 0);
    // Linked, and the last way was the ring: built there, sizes from 1
    // byte to nearly 4 KiB.
    let specs: Vec<Spec> = (psn..psn + 6).map(|p| spec(sa, sb, p)).collect();
    for s in &specs {
        assert_eq!(build_in_place(&mut a, &clock, s), roce_io::InPlace::Taken);
    }
    assert_eq!(a.stats().shm_tx_in_place, 6);
    assert_eq!(a.stats().shm_tx_no_icrc, 6);
    // Published by the next send (an empty batch will do), not before.
    let mut rx = PacketBatch::new(8, 9216);
    assert_eq!(b.recv(clock.now(), &mut rx).unwrap(), 0);
    assert_eq!(a.send(clock.now(), &PacketBatch::new(1, SLOT)).unwrap(), 0);
    let got = take(&mut b, &clock, specs.len());
    assert_eq!(got.len(), specs.len());
    for (g, s) in got.iter().zip(&specs) {
        assert!(g.meta.host_intact);
        assert!(g.icrc_ok(), "computed by the receiver, psn {}", s.psn);
        let p = g.packet().unwrap();
        assert_eq!(p.bth.psn.value(), s.psn);
        assert_eq!((p.ip.dscp(), p.ip.ecn()), (s.dscp, s.ecn));
        assert_eq!(p.payload, &payload(s.psn, s.len)[..]);
    }
    // From an address that is not this backend's: dropped, counted.
    let foreign = spec(ip("127.0.0.44"), sb, psn + 6);
    let in_ring = a.stats().shm_tx_datagrams;
    assert_eq!(
        build_in_place(&mut a, &clock, &foreign),
        roce_io::InPlace::Taken
    );
    assert_eq!(a.stats().tx_not_own_source, 1);
    assert_eq!(a.stats().shm_tx_datagrams, in_ring);
    // Nothing to build: nothing taken.
    let r = a.transmit_in_place(clock.now(), &mut |_, _| None);
    assert_eq!(r, roce_io::InPlace::Nothing);
    // Built for another destination: copied out and sent by UDP, with
    // its ICRC (`here` said no), never into this ring.
    let elsewhere = spec(sa, ip("127.0.0.43"), psn + 6);
    let by_udp = a.stats().tx_datagrams;
    let in_ring = a.stats().shm_tx_datagrams;
    assert_eq!(
        build_in_place(&mut a, &clock, &elsewhere),
        roce_io::InPlace::Taken
    );
    assert_eq!(a.stats().tx_datagrams, by_udp + 1);
    assert_eq!(a.stats().shm_tx_datagrams, in_ring);
    // That way taken last, the ring is not offered until it is again.
    assert_eq!(
        build_in_place(&mut a, &clock, &spec(sa, sb, psn + 7)),
        roce_io::InPlace::Unavailable
    );
}
