//! `Device::poll_transmit_icrc_if`: the ICRC computed only where the
//! driver says the datagram's receiver needs it (docs/shm.md, "What the
//! receiver trusts"). Left out, its four bytes are zero and the datagram
//! counts in `tx_icrc_deferred`; asked for, the datagram is byte for byte
//! what `poll_transmit` gives. A receiver that trusts the sender's bytes
//! (`icrc_trust_host`, the datagram marked `host_intact`) places WRITEs
//! of any size and offset from datagrams without an ICRC; one that checks
//! drops them all.

mod common;

use common::*;
use roce_core::*;
use roce_wire::RocePacket;

/// Moves every datagram both ways until nothing is left (timers run when
/// the wire is empty), each built with its ICRC when `needs(dest)` says
/// so, and delivered marked `host_intact` (as a same-host ring does).
/// Returns the datagrams (sender, bytes, ICRC there) in order, after at
/// most 10,000 rounds (`settled`: because nothing was left).
fn pump(
    w: &mut World,
    needs: impl Fn(u32) -> bool,
    settled: &mut bool,
) -> Vec<(usize, Vec<u8>, bool)> {
    let mut seen = Vec::new();
    let mut buf = vec![0u8; 4400];
    for _ in 0..10_000 {
        let mut moved = false;
        for i in 0..2 {
            loop {
                let (tx, icrc) = w.hosts[i]
                    .dev
                    .poll_transmit_icrc_if(w.now, &mut buf, |t| needs(t.dest_qpn));
                let Some(t) = tx.datagram() else { break };
                let d = buf[..t.size].to_vec();
                let meta = RxMeta::default().with_host_intact(true);
                w.hosts[1 - i].dev.handle_datagram(w.now, &d, meta);
                seen.push((i, d, icrc));
                moved = true;
            }
        }
        if !moved {
            let next = w.hosts.iter().filter_map(|h| h.dev.poll_timeout()).min();
            match next {
                Some(t) if t < w.now + 1_000_000_000 => {
                    w.now = t.max(w.now);
                    for h in w.hosts.iter_mut() {
                        if h.dev.poll_timeout().is_some_and(|t| t <= w.now) {
                            h.dev.handle_timeout(w.now);
                        }
                    }
                }
                _ => {
                    *settled = true;
                    return seen;
                }
            }
        }
    }
    *settled = false;
    seen
}

/// WRITEs of sizes around the MTU at odd offsets, host 0 to host 1,
/// through `pump` with `needs`; returns what moved and checks that every
/// byte landed (or, `lands` false, that none completed).
fn writes(
    w: &mut World,
    needs: impl Fn(u32) -> bool + Copy,
    lands: bool,
) -> Vec<(usize, Vec<u8>, bool)> {
    let (qa, _qb) = w.connect(QpType::Rc, 1024);
    let mut all = Vec::new();
    for (k, (len, off)) in [
        (1usize, 3u64),
        (1023, 1),
        (1024, 5),
        (3077, 7),
        (9001, 4093),
    ]
    .into_iter()
    .enumerate()
    {
        let data = pattern(len, k as u8 + 1);
        w.hosts[0].write(off, &data);
        w.post_rdma(qa, SendOp::Write, off, len as u32, 20_000 + off);
        let mut settled = false;
        all.extend(pump(w, needs, &mut settled));
        let done = w.hosts[0].poll();
        if lands {
            assert!(settled, "len {len}: the devices did not settle");
            assert_eq!(statuses(&done), [(1, WcStatus::Success)], "len {len}");
            assert_eq!(
                w.hosts[1].read(20_000 + off, len),
                data,
                "len {len} at {off}"
            );
        } else {
            assert!(
                statuses(&done).iter().all(|(_, s)| *s != WcStatus::Success),
                "len {len}: {done:?}"
            );
            return all;
        }
    }
    all
}

#[test]
fn a_trusting_receiver_places_writes_sent_without_their_icrc() {
    let mut w = World::new(1 << 16);
    let moved = writes(&mut w, |_| false, true);
    let from_a: Vec<_> = moved.iter().filter(|(i, _, _)| *i == 0).collect();
    assert!(from_a.len() >= 13, "{} datagrams", from_a.len());
    for (_, d, icrc) in &moved {
        assert!(!icrc, "none asked for");
        assert_eq!(d[d.len() - 4..], [0; 4], "its bytes left zero");
    }
    let (a, b) = (w.hosts[0].dev.counters(), w.hosts[1].dev.counters());
    assert_eq!(a.tx_icrc_deferred, a.tx_datagrams);
    assert_eq!(b.rx_icrc_host_trusted, from_a.len() as u64);
    assert_eq!(b.rx_bad_icrc, 0);
}

#[test]
fn asked_for_the_icrc_is_there_and_the_datagram_as_poll_transmit_makes_it() {
    let mut w = World::new(1 << 16);
    // Every other datagram asks for it: both kinds, both ways.
    let n = std::cell::Cell::new(0u32);
    let moved = writes(
        &mut w,
        |_| {
            n.set(n.get() + 1);
            n.get().is_multiple_of(2)
        },
        true,
    );
    assert!(moved.iter().any(|m| m.2) && moved.iter().any(|m| !m.2));
    for (_, d, icrc) in &moved {
        let p = RocePacket::parse_ip(d).unwrap();
        if *icrc {
            assert!(p.check_icrc().is_ok(), "asked for: valid");
        } else {
            assert_eq!(d[d.len() - 4..], [0; 4]);
        }
    }
    // The same traffic through `poll_transmit`: the same bytes where the
    // ICRC was asked for (the devices draw the same numbers).
    let mut twin = World::new(1 << 16);
    let moved_twin = writes(&mut twin, |_| true, true);
    assert_eq!(moved.len(), moved_twin.len());
    for ((_, d, icrc), (_, t, _)) in moved.iter().zip(&moved_twin) {
        if *icrc {
            assert_eq!(d, t);
        } else {
            assert_eq!(d[..d.len() - 4], t[..t.len() - 4], "all but the ICRC");
        }
    }
}

#[test]
fn a_receiver_that_checks_drops_datagrams_without_their_icrc() {
    let mut w = World::with_config(1 << 16, |c| c.icrc_trust_host = false);
    let _ = writes(&mut w, |_| false, false);
    let b = w.hosts[1].dev.counters();
    assert!(b.rx_bad_icrc > 0);
    assert_eq!(b.rx_icrc_host_trusted, 0);
}
