//! The ceiling of UDP on loopback for RoCE-sized datagrams: a plain sender
//! and receiver (no RoCE processing at all) moving 4136-byte IP datagrams
//! (4108 bytes of UDP payload, what a 4096-byte-MTU RoCE packet makes)
//! from 127.0.0.1 to 127.0.0.2, with UDP GSO on send and GRO on receive,
//! and again one datagram per system call. `roce perf write-bw` over the
//! UDP backend is measured against the GSO/GRO figure. Then a plain UDP
//! ping-pong of small datagrams (busy-polling, as `roce perf send-lat`
//! does) over connected sockets: its half round trip is the latency
//! baseline; and the same ping-pong with the kind of calls the UDP backend
//! makes (a destination and a TOS control message on every send, the
//! source and the TOS on every receive), which shows what the call shape
//! alone costs.
//!
//! `cargo bench -p roce-io --bench udp_ceiling [-- SECONDS]`

use std::io::{IoSlice, IoSliceMut};
use std::net::UdpSocket;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nix::sys::socket::{
    recvmsg, sendmsg, setsockopt, sockopt, ControlMessage, MsgFlags, SockaddrIn,
};

const PAYLOAD: usize = 4108;
const IP_DATAGRAM: usize = PAYLOAD + 28;
/// Datagrams per GSO send (under the 64 KiB UDP limit).
const SEGS: usize = 15;

fn run(gso: bool, secs: f64) -> std::io::Result<(f64, f64)> {
    let rx = UdpSocket::bind("127.0.0.2:0")?;
    let tx = UdpSocket::bind("127.0.0.1:0")?;
    let rx_sock = socket2::SockRef::from(&rx);
    rx_sock.set_recv_buffer_size(16 << 20)?;
    socket2::SockRef::from(&tx).set_send_buffer_size(16 << 20)?;
    rx.set_read_timeout(Some(Duration::from_millis(50)))?;
    if gso {
        setsockopt(&rx, sockopt::UdpGroSegment, &true).map_err(std::io::Error::from)?;
    }
    let dst = rx.local_addr()?;
    tx.connect(dst)?;
    let stop = Arc::new(AtomicBool::new(false));
    let stop2 = stop.clone();
    let receiver = std::thread::spawn(move || {
        let mut buf = vec![0u8; 65536];
        let mut datagrams = 0u64;
        let mut first: Option<Instant> = None;
        let mut last = Instant::now();
        let mut cmsg = nix::cmsg_space!(u16);
        while !stop2.load(Ordering::Relaxed) {
            let mut iov = [IoSliceMut::new(&mut buf)];
            match recvmsg::<()>(rx.as_raw_fd(), &mut iov, Some(&mut cmsg), MsgFlags::empty()) {
                Ok(m) => {
                    let n = m.bytes;
                    first.get_or_insert_with(Instant::now);
                    last = Instant::now();
                    datagrams += n.div_ceil(PAYLOAD) as u64;
                }
                Err(_) => continue,
            }
        }
        let dt = first.map_or(0.0, |f| last.duration_since(f).as_secs_f64());
        (datagrams, dt)
    });
    let payload = vec![0x5au8; PAYLOAD * SEGS];
    let seg = PAYLOAD as u16;
    let deadline = Instant::now() + Duration::from_secs_f64(secs);
    let mut sent = 0u64;
    while Instant::now() < deadline {
        for _ in 0..64 {
            let r = if gso {
                let iov = [IoSlice::new(&payload)];
                sendmsg::<SockaddrIn>(
                    tx.as_raw_fd(),
                    &iov,
                    &[ControlMessage::UdpGsoSegments(&seg)],
                    MsgFlags::empty(),
                    None,
                )
                .map(|_| SEGS as u64)
            } else {
                tx.send(&payload[..PAYLOAD])
                    .map(|_| 1)
                    .map_err(|e| nix::Error::from_raw(e.raw_os_error().unwrap_or(0)))
            };
            if let Ok(n) = r {
                sent += n;
            }
        }
    }
    std::thread::sleep(Duration::from_millis(100));
    stop.store(true, Ordering::Relaxed);
    let (got, dt) = receiver.join().expect("receiver thread");
    let gbit = |n: u64, t: f64| n as f64 * IP_DATAGRAM as f64 * 8.0 / t.max(1e-9) / 1e9;
    Ok((gbit(sent, secs), gbit(got, dt)))
}

/// How the ping-pong's sockets send and receive.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Calls {
    /// Connected sockets, `send` / `recv`: the least a UDP exchange costs.
    Plain,
    /// Unconnected sockets, `sendmsg` with the destination and an `IP_TOS`
    /// control message, `recvmsg` with the source address and the
    /// `IP_RECVTOS` control message: the shape of the UDP backend's calls
    /// (which need the peer per datagram and the ECN bits both ways).
    Msghdr,
}

/// Sends `msg` on the non-blocking `s` (to `dst` with [`Calls::Msghdr`];
/// a connected socket has its peer).
fn send_one(s: &UdpSocket, calls: Calls, msg: &[u8], dst: &SockaddrIn) -> std::io::Result<()> {
    match calls {
        Calls::Plain => s.send(msg).map(|_| ()),
        Calls::Msghdr => {
            let tos = 0x02u8; // ECT(0), as the backend sends
            sendmsg(
                s.as_raw_fd(),
                &[IoSlice::new(msg)],
                &[ControlMessage::Ipv4Tos(&tos)],
                MsgFlags::MSG_DONTWAIT,
                Some(dst),
            )
            .map(|_| ())
            .map_err(std::io::Error::from)
        }
    }
}

/// Takes one datagram into `buf` if one is waiting.
fn recv_one(s: &UdpSocket, calls: Calls, buf: &mut [u8]) -> bool {
    match calls {
        Calls::Plain => s.recv(buf).is_ok(),
        Calls::Msghdr => {
            let mut cmsg = nix::cmsg_space!(libc::c_int);
            let mut iov = [IoSliceMut::new(buf)];
            recvmsg::<SockaddrIn>(
                s.as_raw_fd(),
                &mut iov,
                Some(&mut cmsg),
                MsgFlags::MSG_DONTWAIT,
            )
            .is_ok()
        }
    }
}

/// Half round trips (µs) of a busy-polling UDP ping-pong with `len`-byte
/// datagrams between 127.0.0.1 and 127.0.0.2.
fn ping_pong(len: usize, iters: usize, calls: Calls) -> std::io::Result<Vec<f64>> {
    let a = UdpSocket::bind("127.0.0.1:0")?;
    let b = UdpSocket::bind("127.0.0.2:0")?;
    let (a_addr, b_addr) = (a.local_addr()?, b.local_addr()?);
    let to = |addr: std::net::SocketAddr| match addr {
        std::net::SocketAddr::V4(v) => Ok(SockaddrIn::from(v)),
        _ => Err(std::io::Error::other("IPv4 expected")),
    };
    let (to_a, to_b) = (to(a_addr)?, to(b_addr)?);
    if calls == Calls::Plain {
        a.connect(b_addr)?;
        b.connect(a_addr)?;
    } else {
        setsockopt(&a, sockopt::IpRecvTos, &true).map_err(std::io::Error::from)?;
        setsockopt(&b, sockopt::IpRecvTos, &true).map_err(std::io::Error::from)?;
    }
    a.set_nonblocking(true)?;
    b.set_nonblocking(true)?;
    let echo = std::thread::spawn(move || {
        let mut buf = [0u8; 2048];
        let mut done = 0;
        while done < iters {
            if recv_one(&b, calls, &mut buf) {
                let _ = send_one(&b, calls, &buf[..len], &to_a);
                done += 1;
            }
        }
    });
    let msg = vec![7u8; len];
    let mut buf = [0u8; 2048];
    let mut out = Vec::with_capacity(iters);
    for _ in 0..iters {
        let t = Instant::now();
        send_one(&a, calls, &msg, &to_b)?;
        while !recv_one(&a, calls, &mut buf) {}
        out.push(t.elapsed().as_secs_f64() * 1e6 / 2.0);
    }
    echo.join().expect("echo thread");
    out.sort_by(|x, y| x.total_cmp(y));
    Ok(out)
}

fn main() -> std::io::Result<()> {
    let secs: f64 = std::env::args()
        .filter_map(|a| a.parse().ok())
        .next()
        .unwrap_or(3.0);
    println!("plain UDP on loopback, {IP_DATAGRAM}-byte IP datagrams, {secs} s each");
    for (name, gso) in [("one datagram per send/recv", false), ("UDP GSO/GRO", true)] {
        let (tx, rx) = run(gso, secs)?;
        println!("  {name:<28} sent {tx:6.1} Gbit/s   received {rx:6.1} Gbit/s");
    }
    // A RoCE SEND of 2 bytes is a 64-byte UDP payload (BTH + pad + ICRC).
    for (name, calls) in [
        ("send/recv (connected)", Calls::Plain),
        ("sendmsg/recvmsg, addr + TOS", Calls::Msghdr),
    ] {
        let lat = ping_pong(64, 20_000, calls)?;
        let n = lat.len();
        println!(
            "  UDP ping-pong, 64 B, busy-poll, {name:<28} half round trip: typical {:.2} us, min {:.2} us, 99% {:.2} us",
            lat[n / 2],
            lat[0],
            lat[(n * 99) / 100]
        );
    }
    Ok(())
}
