//! The ceiling of UDP on loopback for RoCE-sized datagrams: a plain sender
//! and receiver (no RoCE processing at all) moving 4136-byte IP datagrams
//! (4108 bytes of UDP payload, what a 4096-byte-MTU RoCE packet makes)
//! from 127.0.0.1 to 127.0.0.2, with UDP GSO on send and GRO on receive,
//! and again one datagram per system call. `roce perf write-bw` over the
//! UDP backend is measured against the GSO/GRO figure. A third line sends
//! what 64 KiB RDMA WRITEs put on the wire (a longer first packet, then a
//! GSO run of fifteen) and does nothing else: the most any sender of
//! WRITEs over UDP sockets can reach. The next line adds the CRC-32 every
//! RoCE sender computes per packet, and the one after it what every
//! receiver must do as well (check that CRC, copy the payload into the
//! destination region). Then a plain UDP
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

/// How the ceiling's sender sends.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// One datagram per `send`.
    Single,
    /// GSO sends of [`SEGS`] equal datagrams.
    Gso,
    /// The datagrams of 64 KiB RDMA WRITEs at MTU 4096, with nothing else
    /// done: per message one WRITE_FIRST (16 bytes longer, for its RETH)
    /// and a GSO send of the fifteen middle and last packets, several
    /// messages per `sendmmsg`, the destination on every message.
    WriteShaped,
    /// [`Mode::WriteShaped`] plus the one thing every RoCE sender must do
    /// per packet: a CRC-32 over it (the ICRC), written into its last four
    /// bytes before the send.
    WriteIcrc,
    /// [`Mode::WriteIcrc`] plus what every RoCE receiver must do per packet
    /// over UDP sockets: check the CRC-32 and copy the payload out of the
    /// receive buffer into the destination region (64 KiB, as a WRITE of
    /// `-s 65536` targets). No protocol work at all: the most a RoCE
    /// receiver that reads datagrams through a socket can reach.
    WritePlaced,
}

/// Writes a CRC-32 of each packet of `WRITES_PER_CALL` messages into the
/// packet's last four bytes (the work of the ICRC, over the same lengths).
fn icrc_writes(first: &mut [u8], rest: &mut [u8]) {
    for _ in 0..WRITES_PER_CALL {
        let n = first.len() - 4;
        let mut c = roce_wire::crc32::Crc32::new();
        c.update(&first[..n]);
        let c = c.finalize();
        first[n..].copy_from_slice(&c.to_le_bytes());
        for p in rest.chunks_mut(MIDDLE_PAYLOAD) {
            let n = p.len() - 4;
            let mut c = roce_wire::crc32::Crc32::new();
            c.update(&p[..n]);
            let c = c.finalize();
            p[n..].copy_from_slice(&c.to_le_bytes());
        }
    }
}

/// Checks the CRC-32 of each packet in one read (a WRITE_FIRST alone, or a
/// GRO run of middle packets) and copies its 4096 payload bytes into
/// `region` where a WRITE would put them; returns the packets whose CRC did
/// not match.
fn place_writes(read: &[u8], region: &mut [u8]) -> u64 {
    let (seg, head) = if read.len() == FIRST_PAYLOAD {
        (FIRST_PAYLOAD, 28)
    } else {
        (MIDDLE_PAYLOAD, 12)
    };
    let mut bad = 0;
    for (k, p) in read.chunks(seg).enumerate() {
        let n = p.len() - 4;
        let mut c = roce_wire::crc32::Crc32::new();
        c.update(&p[..n]);
        if c.finalize().to_le_bytes() != p[n..] {
            bad += 1;
            continue;
        }
        let data = &p[head..n];
        let at = (k * 4096) % region.len();
        let end = (at + data.len()).min(region.len());
        region[at..end].copy_from_slice(&data[..end - at]);
    }
    bad
}

/// UDP payload of a WRITE_FIRST packet (BTH, RETH, 4096 bytes, ICRC).
const FIRST_PAYLOAD: usize = 12 + 16 + 4096 + 4;
/// UDP payload of a WRITE_MIDDLE or WRITE_LAST packet.
const MIDDLE_PAYLOAD: usize = 12 + 4096 + 4;
/// WRITE messages per `sendmmsg` in [`Mode::WriteShaped`].
const WRITES_PER_CALL: usize = 4;

/// Sends `WRITES_PER_CALL` WRITE-shaped messages in one `sendmmsg`;
/// returns the IP bytes sent.
fn send_writes(
    fd: i32,
    dst: &std::net::SocketAddrV4,
    first: &[u8],
    rest: &[u8],
) -> nix::Result<u64> {
    let sa = SockaddrIn::from(*dst);
    use nix::sys::socket::SockaddrLike;
    let seg = MIDDLE_PAYLOAD as u16;
    // One control buffer (UDP_SEGMENT) shared by the GSO messages.
    let mut cbuf = [0u64; 4];
    // SAFETY: CMSG_SPACE and CMSG_LEN only compute sizes.
    let (clen, cmsg_len) = unsafe { (libc::CMSG_SPACE(2) as usize, libc::CMSG_LEN(2) as usize) };
    let cmsg = cbuf.as_mut_ptr() as *mut libc::cmsghdr;
    // SAFETY: cbuf is 8-byte aligned and 32 bytes long, room for a cmsghdr
    // and its 2-byte payload (clen <= 32).
    unsafe {
        (*cmsg).cmsg_len = cmsg_len as _;
        (*cmsg).cmsg_level = libc::SOL_UDP;
        (*cmsg).cmsg_type = libc::UDP_SEGMENT;
        std::ptr::write_unaligned(libc::CMSG_DATA(cmsg) as *mut u16, seg);
    }
    let mut iovs = [libc::iovec {
        iov_base: std::ptr::null_mut(),
        iov_len: 0,
    }; 2 * WRITES_PER_CALL];
    // SAFETY: an all-zero mmsghdr is a valid empty header.
    let mut msgs: [libc::mmsghdr; 2 * WRITES_PER_CALL] = unsafe { std::mem::zeroed() };
    for (i, m) in msgs.iter_mut().enumerate() {
        let data = if i % 2 == 0 { first } else { rest };
        iovs[i] = libc::iovec {
            iov_base: data.as_ptr() as *mut libc::c_void,
            iov_len: data.len(),
        };
        m.msg_hdr.msg_name = sa.as_ptr() as *mut libc::c_void;
        m.msg_hdr.msg_namelen = sa.len();
        m.msg_hdr.msg_iov = &mut iovs[i];
        m.msg_hdr.msg_iovlen = 1;
        if i % 2 == 1 {
            m.msg_hdr.msg_control = cbuf.as_mut_ptr() as *mut libc::c_void;
            m.msg_hdr.msg_controllen = clen as _;
        }
    }
    // SAFETY: every header points at live iovecs, address and control
    // buffer on this stack frame, and the buffers outlive the call.
    let n = unsafe { libc::sendmmsg(fd, msgs.as_mut_ptr(), msgs.len() as u32, 0) };
    if n < 0 {
        return Err(nix::Error::last());
    }
    Ok((0..n as usize)
        .map(|i| {
            if i % 2 == 0 {
                (FIRST_PAYLOAD + 28) as u64
            } else {
                (SEGS * (MIDDLE_PAYLOAD + 28)) as u64
            }
        })
        .sum())
}

fn run(mode: Mode, secs: f64) -> std::io::Result<(f64, f64)> {
    let gso = mode != Mode::Single;
    let writes = matches!(
        mode,
        Mode::WriteShaped | Mode::WriteIcrc | Mode::WritePlaced
    );
    let place = mode == Mode::WritePlaced;
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
    let dst4 = match dst {
        std::net::SocketAddr::V4(v) => v,
        _ => return Err(std::io::Error::other("IPv4 expected")),
    };
    if !writes {
        tx.connect(dst)?;
    }
    let stop = Arc::new(AtomicBool::new(false));
    let stop2 = stop.clone();
    let receiver = std::thread::spawn(move || {
        let mut buf = vec![0u8; 65536];
        let mut region = vec![0u8; 65536];
        let mut bad = 0u64;
        let mut bytes = 0u64;
        // A GRO read holds equal segments (a WRITE_FIRST arrives alone:
        // its length differs from the packets after it).
        let seg = if writes { MIDDLE_PAYLOAD } else { PAYLOAD };
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
                    let segs = if n == FIRST_PAYLOAD {
                        1
                    } else {
                        n.div_ceil(seg)
                    };
                    bytes += (n + 28 * segs) as u64;
                    if place {
                        bad += place_writes(&buf[..n], &mut region);
                    }
                }
                Err(_) => continue,
            }
        }
        let dt = first.map_or(0.0, |f| last.duration_since(f).as_secs_f64());
        std::hint::black_box(&region);
        (bytes, dt, bad)
    });
    let payload = vec![0x5au8; PAYLOAD * SEGS];
    let mut first = vec![0x5au8; FIRST_PAYLOAD];
    let mut rest = vec![0x5au8; MIDDLE_PAYLOAD * SEGS];
    let seg = PAYLOAD as u16;
    let deadline = Instant::now() + Duration::from_secs_f64(secs);
    let mut sent = 0u64;
    let mut last_err = None;
    while Instant::now() < deadline {
        for _ in 0..64 {
            let r = if writes {
                if mode != Mode::WriteShaped {
                    icrc_writes(&mut first, &mut rest);
                }
                send_writes(tx.as_raw_fd(), &dst4, &first, &rest)
            } else if gso {
                let iov = [IoSlice::new(&payload)];
                sendmsg::<SockaddrIn>(
                    tx.as_raw_fd(),
                    &iov,
                    &[ControlMessage::UdpGsoSegments(&seg)],
                    MsgFlags::empty(),
                    None,
                )
                .map(|_| (SEGS * IP_DATAGRAM) as u64)
            } else {
                tx.send(&payload[..PAYLOAD])
                    .map(|_| IP_DATAGRAM as u64)
                    .map_err(|e| nix::Error::from_raw(e.raw_os_error().unwrap_or(0)))
            };
            match r {
                Ok(n) => sent += n,
                Err(e) => last_err = Some(e),
            }
        }
    }
    std::thread::sleep(Duration::from_millis(100));
    stop.store(true, Ordering::Relaxed);
    let (got, dt, bad) = receiver.join().expect("receiver thread");
    if bad > 0 {
        return Err(std::io::Error::other(format!(
            "{bad} packets arrived with a wrong CRC"
        )));
    }
    if sent == 0 {
        // Nothing went out at all (say, the kernel refuses UDP_SEGMENT):
        // a row of zeros would hide why.
        let why = last_err.map_or_else(|| "no send completed".to_string(), |e| e.to_string());
        return Err(std::io::Error::other(format!(
            "the sender sent nothing: {why}"
        )));
    }
    let gbit = |bytes: u64, t: f64| bytes as f64 * 8.0 / t.max(1e-9) / 1e9;
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
    for (name, mode) in [
        ("one datagram per send/recv", Mode::Single),
        ("UDP GSO/GRO", Mode::Gso),
        ("64 KiB WRITE-shaped GSO/GRO", Mode::WriteShaped),
        ("same + a CRC-32 per packet", Mode::WriteIcrc),
        ("same + receiver checks, places", Mode::WritePlaced),
    ] {
        let (tx, rx) = run(mode, secs)?;
        println!("  {name:<30} sent {tx:6.1} Gbit/s   received {rx:6.1} Gbit/s");
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
