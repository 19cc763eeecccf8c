//! The same-host path against forged peers: hellos and rings that break the rules.

use super::*;
use std::net::UdpSocket;

/// A receiving path on `127.0.0.<n>`, its UDP socket, and the
/// address.
fn receiver(n: u8) -> (Shm, UdpSocket, SocketAddr) {
    let udp = UdpSocket::bind(format!("127.0.0.{n}:0")).unwrap();
    let at = udp.local_addr().unwrap();
    let shm = Shm::new(at, udp.as_fd(), 1 << 16, None, None).unwrap();
    assert!(shm.listening());
    (shm, udp, at)
}

/// Runs the receiver's event look a few times (accept, then hello).
fn settle(shm: &mut Shm, stats: &mut UdpStats) {
    for t in 1..4 {
        shm.poll_events(t, stats);
    }
}

#[test]
fn a_hello_with_an_unsealed_ring_is_refused_and_closed() {
    let (mut shm, _udp, at) = receiver(31);
    let conn = link::connect_to(at).unwrap();
    let fd = nix::sys::memfd::memfd_create(c"forged", nix::sys::memfd::MFdFlags::empty()).unwrap();
    nix::unistd::ftruncate(&fd, (ring::CONTROL + (1 << 16)) as libc::off_t).unwrap();
    let bell = EventFd::new().unwrap();
    let from: SocketAddr = "127.0.0.32:4791".parse().unwrap();
    link::send_hello(&conn, from, 1 << 16, fd.as_fd(), bell.as_fd()).unwrap();
    let mut stats = UdpStats::default();
    settle(&mut shm, &mut stats);
    assert_eq!((stats.shm_refused, stats.shm_links_in), (1, 0));
    assert_eq!(link::read_answer(&conn), link::Answer::Refused);
    assert!(shm.incoming.iter().all(Option::is_none), "nothing kept");
}

#[test]
fn a_ring_broken_by_its_writer_is_dropped_and_the_rest_goes_on() {
    let (mut shm, _udp, at) = receiver(33);
    let mut stats = UdpStats::default();
    // A well-behaved sender's ring, taken.
    let conn = link::connect_to(at).unwrap();
    let mut p = Producer::create(1 << 16).unwrap();
    let bell = EventFd::new().unwrap();
    let from: SocketAddr = "127.0.0.34:4791".parse().unwrap();
    link::send_hello(&conn, from, 1 << 16, p.mem().fd().as_fd(), bell.as_fd()).unwrap();
    settle(&mut shm, &mut stats);
    assert_eq!(stats.shm_links_in, 1);
    assert_eq!(link::read_answer(&conn), link::Answer::Accepted);
    // A record too short for a BTH still arrives: parsing is the
    // engine's, on its own copy.
    let meta = RecMeta {
        src: from.ip(),
        sport: 0xC001,
        tos: 0x02,
        ipv4_id: 0,
        forwarded: false,
        exact: true,
        intact: false,
        no_icrc: false,
    };
    assert_eq!(p.push(&meta, b"hello", None), Ok(Push::Written));
    p.publish();
    let mut batch = PacketBatch::new(4, 9216);
    shm.recv(&mut batch, false, false, &mut stats);
    assert_eq!(batch.len(), 1);
    assert_eq!(batch.get(0), b"hello", "the payload alone");
    let h = batch.header(0).expect("with its header");
    assert_eq!(
        (h.src, h.tos, h.ipv4_id),
        ("127.0.0.34:49153".parse().unwrap(), 0x02, Some(0))
    );
    assert!(h.exact(), "the engine checks the ICRC");
    // Then the writer forges its tail two laps ahead.
    let forged =
        mem::SharedMem::open(p.mem().fd().try_clone().unwrap(), ring::CONTROL + (1 << 16)).unwrap();
    // SAFETY: the tail word is at offset 128 of the control page
    // (magic, cap, tail: one 64-byte line each), inside the mapping;
    // it is an atomic in the ring's protocol.
    let tail =
        unsafe { &*(forged.base().as_ptr().add(128) as *const std::sync::atomic::AtomicU64) };
    tail.store(3 << 16, std::sync::atomic::Ordering::SeqCst);
    batch.clear();
    shm.recv(&mut batch, false, false, &mut stats);
    assert_eq!((batch.len(), stats.shm_broken), (0, 1));
    assert!(shm.incoming.iter().all(Option::is_none), "the link is gone");
    assert!(link::closed(&conn), "and its connection closed");
}
