use super::*;

fn pair(cap: usize) -> (Producer, Consumer) {
    let p = Producer::create(cap).unwrap();
    let fd = p.mem().fd().try_clone().unwrap();
    let c = Consumer::open(SharedMem::open(fd, CONTROL + cap).unwrap()).unwrap();
    (p, c)
}

/// A ring of the least size whose two ends know `src` as the link's own
/// source (short records).
fn own_pair(src: IpAddr) -> (Producer, Consumer) {
    let (p, c) = pair(MIN_CAP);
    (p.with_own_source(src), c.with_own_source(src))
}

/// A record's metadata: from 127.0.0.7, `sport`, `tos`.
fn m(sport: u16, tos: u8) -> RecMeta {
    RecMeta {
        src: "127.0.0.7".parse().unwrap(),
        sport,
        tos,
        ipv4_id: 0,
        forwarded: false,
        exact: true,
        intact: false,
        no_icrc: false,
    }
}

fn take_all(c: &mut Consumer) -> Vec<(u16, u8, Vec<u8>)> {
    let mut out = Vec::new();
    while let Some(r) = c.next().unwrap() {
        let mut v = vec![0u8; r.len];
        c.take(&r, &mut v, Some(100));
        assert_eq!(r.meta, m(r.meta.sport, r.meta.tos));
        out.push((r.meta.sport, r.meta.tos, v));
    }
    c.release();
    out
}

/// The tail (`true`) or head word of the consumer's mapping, for forging.
fn word(c: &Consumer, tail: bool) -> &AtomicU64 {
    let ctl = control(&c.mem);
    if tail {
        &ctl.tail.0
    } else {
        &ctl.head.0
    }
}

#[test]
fn records_arrive_in_order_with_their_port_and_tos() {
    let (mut p, mut c) = pair(MIN_CAP);
    assert!(c.next().unwrap().is_none());
    for i in 0..10u16 {
        let payload = vec![i as u8; 13 + usize::from(i)];
        assert_eq!(
            p.push(&m(0xC000 + i, i as u8), &payload, None),
            Ok(Push::Written)
        );
    }
    assert!(c.next().unwrap().is_none(), "nothing before publish");
    p.publish();
    let got = take_all(&mut c);
    assert_eq!(got.len(), 10);
    for (i, (sport, tos, v)) in got.iter().enumerate() {
        assert_eq!(*sport, 0xC000 + i as u16);
        assert_eq!(*tos, i as u8);
        assert_eq!(v, &vec![i as u8; 13 + i]);
    }
}

#[test]
fn a_full_ring_refuses_until_the_consumer_reads_and_records_wrap() {
    let (mut p, mut c) = pair(MIN_CAP);
    let payload = [7u8; 4000];
    let mut n = 0;
    while p.push(&m(1, 0), &payload, None).unwrap() == Push::Written {
        n += 1;
    }
    // 4032-byte records: 16 fit in 64 KiB.
    assert_eq!(n, MIN_CAP / 4032);
    p.publish();
    assert_eq!(take_all(&mut c).len(), n);
    // The next records wrap: a skip record, then the record at offset 0,
    // and every byte arrives.
    for round in 0..5u8 {
        let big: Vec<u8> = (0..4000).map(|k| (k as u8) ^ round).collect();
        for _ in 0..7 {
            assert_eq!(
                p.push(&m(2, round), &big, Some(1024)).unwrap(),
                Push::Written
            );
        }
        p.publish();
        let got = take_all(&mut c);
        assert_eq!(got.len(), 7);
        assert!(got
            .iter()
            .all(|(s, t, v)| *s == 2 && *t == round && *v == big));
    }
    assert_eq!(
        p.push(&m(0, 0), &vec![0; MAX_PAYLOAD + 1], None),
        Ok(Push::TooBig)
    );
}

#[test]
fn the_doorbell_is_rung_once_after_the_consumer_armed() {
    let (mut p, mut c) = pair(MIN_CAP);
    p.push(&m(1, 0), b"one", None).unwrap();
    assert!(!p.publish(), "nobody asked to be woken");
    assert!(c.arm(), "a record is there: do not sleep");
    take_all(&mut c);
    assert!(!c.arm(), "empty: may sleep");
    assert_eq!(c.doorbells(), 0);
    p.push(&m(1, 0), b"two", None).unwrap();
    assert!(p.publish(), "the consumer armed: ring");
    assert_eq!(c.doorbells(), 1);
    p.push(&m(1, 0), b"three", None).unwrap();
    assert!(!p.publish(), "once per arming");
    assert_eq!(c.doorbells(), 1);
    assert_eq!(take_all(&mut c).len(), 2);
}

#[test]
fn a_forged_tail_or_record_breaks_the_ring_instead_of_reading_outside_it() {
    let (mut p, mut c) = pair(MIN_CAP);
    p.push(&m(1, 0), &[1; 100], None).unwrap();
    p.publish();
    // A tail more than one lap ahead, or unaligned.
    for bad in [MIN_CAP as u64 + 8, 3] {
        word(&c, true).store(bad, Ordering::SeqCst);
        assert!(c.next().is_err(), "tail {bad}");
    }
    word(&c, true).store(136, Ordering::SeqCst);
    // A length that runs past the tail.
    // SAFETY: the first record header, inside the mapping.
    unsafe {
        let h = c.data_ptr() as *mut u8;
        h.write(0xff);
        h.add(1).write(0x00);
    }
    assert_eq!(
        c.next().unwrap_err(),
        Broken("a record goes past the tail or the ring's end")
    );
    // An unknown kind.
    // SAFETY: as above.
    unsafe { (c.data_ptr() as *mut u8).add(5).write(9) };
    assert!(c.next().is_err());
    // A head the consumer moved backwards breaks the producer's side.
    word(&c, false).store(0, Ordering::SeqCst);
    p.head = 8;
    assert!(p.room(MIN_CAP as u64).is_err());
}

#[test]
fn records_carry_their_source_flags_and_ipv4_id() {
    let (mut p, mut c) = pair(MIN_CAP);
    let v6 = RecMeta {
        src: "fd00::9".parse().unwrap(),
        sport: 0xC0DE,
        tos: 0x8a,
        ipv4_id: 0,
        forwarded: true,
        exact: true,
        intact: false,
        no_icrc: false,
    };
    let v4 = RecMeta {
        src: "10.1.2.3".parse().unwrap(),
        ipv4_id: 17,
        exact: false,
        ..v6
    };
    for meta in [v6, v4] {
        assert_eq!(p.push(&meta, b"x", None), Ok(Push::Written));
    }
    p.publish();
    for want in [v6, v4] {
        let r = c.next().unwrap().unwrap();
        assert_eq!(r.meta, want);
        c.skip(&r);
    }
    // An unknown family, or an IPv4 source that is not v4-mapped, breaks
    // the ring.
    for (at, byte) in [(7usize, 5u8), (16, 1)] {
        assert_eq!(p.push(&v4, b"y", None), Ok(Push::Written));
        p.publish();
        let pos = (c.head % MIN_CAP as u64) as usize;
        // SAFETY: a header byte of the record just published, inside the
        // record area; single-threaded test.
        unsafe { (c.data_ptr() as *mut u8).add(pos + at).write(byte) };
        assert!(c.next().is_err(), "byte {at}");
        c.head += 40;
    }
}

#[test]
fn a_ring_with_a_wrong_size_or_magic_is_refused() {
    let p = Producer::create(MIN_CAP).unwrap();
    assert!(Producer::create(MIN_CAP + 8).is_err());
    assert!(Producer::create(MIN_CAP / 2).is_err());
    let m = SharedMem::open(p.mem().fd().try_clone().unwrap(), CONTROL + MIN_CAP).unwrap();
    control(&m).magic.0.store(1, Ordering::SeqCst);
    assert!(Consumer::open(m).is_err());
    let q = SharedMem::create(CONTROL + MIN_CAP).unwrap();
    assert_eq!(
        Consumer::open(q).err(),
        Some(Broken("the ring's magic word is wrong"))
    );
    let small = SharedMem::create(CONTROL + 4096).unwrap();
    assert!(Consumer::open(small).is_err());
}

/// Garbage anywhere in the record area and any tail the producer may
/// write: the consumer returns records inside the area or breaks the
/// ring, never reads past it, never loops for ever.
#[test]
fn random_garbage_never_takes_the_consumer_outside_the_ring() {
    use rand_core::{RngCore, SeedableRng};
    let mut rng = rand_xoshiro::Xoshiro256PlusPlus::seed_from_u64(7);
    let (p, mut c) = pair(MIN_CAP);
    let (mut broken, mut taken) = (0, 0);
    for round in 0..2000u32 {
        // A fresh lap: the consumer's head where the last round left it.
        let head = c.head;
        // SAFETY: the record area is MIN_CAP bytes long; nothing else
        // touches it during the test.
        let area = unsafe { std::slice::from_raw_parts_mut(p.data_ptr(), MIN_CAP) };
        for _ in 0..64 {
            let at = (rng.next_u32() as usize) % (MIN_CAP - 8);
            let v = rng.next_u64().to_le_bytes();
            // Often a plausible header: a datagram of some length.
            let h = if round.is_multiple_of(3) {
                let mut h = [0u8; 8];
                h[0..2].copy_from_slice(&((rng.next_u32() % 9000) as u16).to_le_bytes());
                h[5] = 1 + (rng.next_u32() % 3) as u8;
                h[7] = 6; // an IPv6 source: any 16 bytes are one
                h
            } else {
                v
            };
            area[at & !7..(at & !7) + 8].copy_from_slice(&h);
            if round.is_multiple_of(3) && at.is_multiple_of(4) {
                // And right where the consumer looks next.
                let pos = (c.head % MIN_CAP as u64) as usize;
                area[pos..pos + 8].copy_from_slice(&h);
            }
        }
        let tail = head.wrapping_add(u64::from(rng.next_u32()) % (2 * MIN_CAP as u64)) & !3;
        word(&c, true).store(tail, Ordering::SeqCst);
        let mut out = vec![0u8; MAX_PAYLOAD];
        for _ in 0..MIN_CAP / 8 + 1 {
            match c.next() {
                Ok(None) => break,
                Ok(Some(r)) => {
                    assert!(r.at + r.len <= MIN_CAP, "a record outside the area");
                    c.take(&r, &mut out[..r.len], None);
                    taken += 1;
                }
                Err(_) => {
                    broken += 1;
                    break;
                }
            }
        }
        // Start the next round from a consistent state.
        let h = c.head;
        word(&c, true).store(h, Ordering::SeqCst);
    }
    assert!(broken > 100, "garbage breaks the ring ({broken} of 2000)");
    assert!(taken > 100, "plausible records are taken ({taken})");
}

#[test]
fn the_writers_own_records_take_the_short_header() {
    let cap = 1 << 16;
    let p = Producer::create(cap).unwrap();
    let fd = p.mem().fd().try_clone().unwrap();
    let src: IpAddr = "127.0.0.7".parse().unwrap();
    let mut p = p.with_own_source(src);
    let mut c = Consumer::open(SharedMem::open(fd, CONTROL + cap).unwrap())
        .unwrap()
        .with_own_source(src);
    // A 40-byte datagram of the link's own source: 8 + 40 bytes, one
    // record of 48; a forwarded one from elsewhere: 32 + 40 = 72.
    assert!(matches!(
        p.push(&m(1, 2), &[7u8; 40], None),
        Ok(Push::Written)
    ));
    assert_eq!(p.tail, 48);
    let fwd = RecMeta {
        src: "10.1.2.3".parse().unwrap(),
        forwarded: true,
        exact: false,
        ipv4_id: 9,
        ..m(3, 4)
    };
    assert!(matches!(p.push(&fwd, &[8u8; 40], None), Ok(Push::Written)));
    assert_eq!(p.tail, 48 + 72);
    p.publish();
    let r = c.next().unwrap().unwrap();
    assert_eq!((r.meta, r.len), (m(1, 2), 40));
    let mut v = vec![0u8; 40];
    c.take(&r, &mut v, None);
    assert_eq!(v, [7u8; 40]);
    let r = c.next().unwrap().unwrap();
    assert_eq!((r.meta, r.len), (fwd, 40));
    c.take(&r, &mut v, None);
    assert_eq!(v, [8u8; 40]);
    assert!(c.next().unwrap().is_none());
    // A consumer that was told no source refuses a short record.
    let (mut p2, mut c2) = pair(cap);
    p2 = p2.with_own_source(src);
    assert!(matches!(
        p2.push(&m(1, 2), &[1u8; 8], None),
        Ok(Push::Written)
    ));
    p2.publish();
    assert!(c2.next().is_err());
}

#[test]
fn a_record_says_whether_its_datagram_is_as_the_engine_made_it() {
    // Both kinds: the short record of the link's own source, and the
    // full one (a source of another address).
    let src: IpAddr = "127.0.0.7".parse().unwrap();
    let (mut p, mut c) = own_pair(src);
    let other = RecMeta {
        src: "127.0.0.9".parse().unwrap(),
        ..m(5, 6)
    };
    let sent = [
        RecMeta {
            intact: true,
            ..m(1, 2)
        },
        m(1, 2),
        RecMeta {
            intact: true,
            ..other
        },
        other,
        // And whether it comes without its ICRC, in both kinds.
        RecMeta {
            intact: true,
            no_icrc: true,
            ..m(1, 2)
        },
        RecMeta {
            intact: true,
            no_icrc: true,
            ..other
        },
    ];
    for meta in &sent {
        assert_eq!(p.push(meta, b"abc", None), Ok(Push::Written));
    }
    p.publish();
    for want in sent {
        let r = c.next().unwrap().unwrap();
        assert_eq!(r.meta, want);
        c.skip(&r);
    }
    assert!(c.next().unwrap().is_none());
}

/// A datagram built in place: the consumer sees its UDP payload, after
/// the IP and UDP header of the family the record names; a length
/// shorter than those headers is refused at commit and breaks the ring
/// when forged; a record written since the reservation voids it.
#[test]
fn a_datagram_built_in_the_ring_arrives_as_its_payload() {
    for (src, skip) in [("127.0.0.7", 28usize), ("fd00::7", 48)] {
        let src: IpAddr = src.parse().unwrap();
        let (mut p, mut c) = own_pair(src);
        let made = Made {
            intact: true,
            no_icrc: true,
        };
        // Enough rounds to wrap: the room before the end is too short
        // for 4200 bytes once, and a skip record comes first.
        for round in 0..40u32 {
            let len = skip + 1 + (round as usize * 331) % 4000;
            let mut r = p.reserve(4200).unwrap().expect("room");
            // SAFETY: the producer is alive and writes nothing else
            // until the commit.
            let room = unsafe { r.room() };
            assert_eq!(room.len(), 4200);
            for (k, b) in room[..len].iter_mut().enumerate() {
                *b = (k as u32 ^ round) as u8;
            }
            assert_eq!(p.commit(r, 0xC000, 7, made, len), Ok(Push::Written));
            p.publish();
            let rec = c.next().unwrap().expect("a record");
            assert_eq!(rec.len, len - skip);
            assert_eq!((rec.meta.sport, rec.meta.tos), (0xC000, 7));
            assert!(rec.meta.intact && rec.meta.no_icrc && rec.meta.exact);
            let mut v = vec![0u8; rec.len];
            c.take(&rec, &mut v, None);
            let want: Vec<u8> = (skip..len).map(|k| (k as u32 ^ round) as u8).collect();
            assert_eq!(v, want, "round {round}");
            c.release();
        }
        // Shorter than the headers, or longer than the room: refused.
        let r = p.reserve(4200).unwrap().unwrap();
        assert_eq!(p.commit(r, 1, 0, made, skip - 1), Ok(Push::TooBig));
        let r = p.reserve(100).unwrap().unwrap();
        assert_eq!(p.commit(r, 1, 0, made, 101), Ok(Push::TooBig));
        // Another record since the reservation: nothing written.
        let r = p.reserve(100).unwrap().unwrap();
        assert_eq!(p.push_own(1, 0, made, b"between", None), Ok(Push::Written));
        assert_eq!(p.commit(r, 1, 0, made, 60), Ok(Push::Full));
        p.publish();
        let rec = c.next().unwrap().unwrap();
        assert_eq!(rec.len, 7);
        c.skip(&rec);
        assert!(c.next().unwrap().is_none());
        // A forged whole record shorter than its headers breaks the ring.
        let r = p.reserve(100).unwrap().unwrap();
        assert_eq!(p.commit(r, 1, 0, made, 60), Ok(Push::Written));
        p.publish();
        let pos = (c.head % MIN_CAP as u64) as usize;
        // SAFETY: the length field of the record just published, inside
        // the record area; single-threaded test.
        unsafe { (c.data_ptr() as *mut u8).add(pos).write(skip as u8 - 1) };
        assert_eq!(
            c.next().unwrap_err(),
            Broken("a whole datagram shorter than its headers")
        );
    }
}
