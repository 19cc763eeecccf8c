//! Finding a same-host peer and handing it a ring: an abstract Unix
//! socket named after the UDP address a backend receives on (or, for a
//! backend sharing its address with other processes, a name of its own
//! that its host table slot holds, docs/host.md), a hello that
//! carries the ring's `memfd` and the doorbell eventfd (`SCM_RIGHTS`),
//! and a one-byte answer (docs/shm.md).
//!
//! Abstract names belong to the network namespace, as UDP addresses do,
//! and vanish with the socket: nothing is left behind by a process that
//! dies. Both ends check that the other runs as the same user
//! (`SO_PEERCRED`) before anything else.

use std::io::{self, IoSlice, IoSliceMut};
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

use nix::errno::Errno;
use nix::sys::socket::{
    accept4, bind, connect, getsockopt, listen, recv, recvmsg, send, sendmsg, socket,
    sockopt::PeerCredentials, AddressFamily, Backlog, ControlMessage, ControlMessageOwned,
    MsgFlags, SockFlag, SockType, UnixAddr,
};

/// The hello's first word, and the answers.
const HELLO_MAGIC: u64 = u64::from_le_bytes(*b"RoCEhel1");
const HELLO_LEN: usize = 40;
/// The receiver took the ring.
pub(crate) const ACCEPTED: u8 = b'A';

/// What every name of this path begins with.
const PREFIX: &[u8] = b"roce-v2-shm/";

/// The abstract socket name of the backend receiving on `addr`.
fn name(addr: SocketAddr) -> io::Result<UnixAddr> {
    let n = format!("roce-v2-shm/{}/{}", addr.ip(), addr.port());
    Ok(UnixAddr::new_abstract(n.as_bytes())?)
}

/// A name of its own for a backend receiving on `addr` that shares it
/// with other processes (docs/shm.md, "How a peer is found"): the
/// address, the PID and a random nonce, so that no other backend, of this
/// process or any, has it; at most 96 bytes (a host table slot's name).
pub(crate) fn process_name(addr: SocketAddr) -> Vec<u8> {
    use std::hash::{BuildHasher, Hasher};
    // std's hasher keys come from the operating system's randomness.
    let mut h = std::hash::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    format!(
        "roce-v2-shm/{}/{}/{}.{:016x}",
        addr.ip(),
        addr.port(),
        std::process::id(),
        h.finish()
    )
    .into_bytes()
}

/// The abstract address of a per-process name read from a host table
/// (another process's bytes): refused unless it is one of this path's.
fn named(n: &[u8]) -> io::Result<UnixAddr> {
    if !n.starts_with(PREFIX) || n.len() > crate::host::NAME_MAX {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "not the name of a same-host endpoint",
        ));
    }
    Ok(UnixAddr::new_abstract(n)?)
}

fn seqpacket() -> io::Result<OwnedFd> {
    Ok(socket(
        AddressFamily::Unix,
        SockType::SeqPacket,
        SockFlag::SOCK_NONBLOCK | SockFlag::SOCK_CLOEXEC,
        None,
    )?)
}

/// Listens for same-host peers of the backend receiving on `local`.
/// `AddrInUse` when another socket has the name.
pub(crate) fn listen_on(local: SocketAddr) -> io::Result<OwnedFd> {
    listen_at(&name(local)?)
}

/// Listens on a name from [`process_name`].
pub(crate) fn listen_named(n: &[u8]) -> io::Result<OwnedFd> {
    listen_at(&named(n)?)
}

fn listen_at(at: &UnixAddr) -> io::Result<OwnedFd> {
    let fd = seqpacket()?;
    bind(fd.as_raw_fd(), at)?;
    listen(&fd, Backlog::new(16)?)?;
    Ok(fd)
}

/// Connects to the backend receiving on `dst`, if there is one on this
/// host, in this network namespace, run by this user.
pub(crate) fn connect_to(dst: SocketAddr) -> io::Result<OwnedFd> {
    connect_at(&name(dst)?)
}

/// Connects to the backend listening on a per-process name (from a host
/// table slot). `ConnectionRefused` when nobody has the name: its
/// process is gone.
pub(crate) fn connect_named(n: &[u8]) -> io::Result<OwnedFd> {
    connect_at(&named(n)?)
}

fn connect_at(at: &UnixAddr) -> io::Result<OwnedFd> {
    let fd = seqpacket()?;
    connect(fd.as_raw_fd(), at)?;
    same_user(&fd)?;
    Ok(fd)
}

/// Takes a waiting connection, if any; those of users other than this
/// process's are closed (at most 16 of them per call).
pub(crate) fn accept_from(listener: &OwnedFd) -> io::Result<Option<OwnedFd>> {
    for _ in 0..16 {
        match accept4(
            listener.as_raw_fd(),
            SockFlag::SOCK_NONBLOCK | SockFlag::SOCK_CLOEXEC,
        ) {
            Ok(raw) => {
                // SAFETY: accept4 returned a new descriptor, owned by
                // nobody else.
                let fd = unsafe { OwnedFd::from_raw_fd(raw) };
                if same_user(&fd).is_ok() {
                    return Ok(Some(fd));
                }
            }
            Err(Errno::EAGAIN) => return Ok(None),
            Err(Errno::EINTR | Errno::ECONNABORTED) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(None)
}

fn same_user(fd: &OwnedFd) -> io::Result<()> {
    let cred = getsockopt(fd, PeerCredentials)?;
    let me = nix::unistd::geteuid().as_raw();
    if cred.uid() != me {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!("the peer runs as user {}, not {me}", cred.uid()),
        ));
    }
    Ok(())
}

/// What a sender says about itself and its ring.
#[derive(Debug)]
pub(crate) struct Hello {
    /// The UDP address the sender receives on: the source of its
    /// datagrams.
    pub(crate) from: SocketAddr,
    /// The ring's record area in bytes.
    pub(crate) cap: usize,
    pub(crate) ring: OwnedFd,
    pub(crate) doorbell: OwnedFd,
}

fn encode(from: SocketAddr, cap: usize) -> [u8; HELLO_LEN] {
    let mut m = [0u8; HELLO_LEN];
    m[0..8].copy_from_slice(&HELLO_MAGIC.to_le_bytes());
    m[8..12].copy_from_slice(&(cap as u32).to_le_bytes());
    let (fam, ip) = match from.ip() {
        IpAddr::V4(a) => (4u8, a.to_ipv6_mapped().octets()),
        IpAddr::V6(a) => (6u8, a.octets()),
    };
    m[12] = fam;
    m[14..16].copy_from_slice(&from.port().to_le_bytes());
    m[16..32].copy_from_slice(&ip);
    m
}

fn decode(m: &[u8]) -> Option<(SocketAddr, usize)> {
    if m.len() != HELLO_LEN || m[0..8] != HELLO_MAGIC.to_le_bytes() {
        return None;
    }
    let cap = u32::from_le_bytes(m[8..12].try_into().ok()?) as usize;
    let port = u16::from_le_bytes([m[14], m[15]]);
    let v6 = Ipv6Addr::from(<[u8; 16]>::try_from(&m[16..32]).ok()?);
    let ip = match m[12] {
        4 => IpAddr::V4(v6.to_ipv4_mapped()?),
        6 => IpAddr::V6(v6),
        _ => return None,
    };
    Some((SocketAddr::new(ip, port), cap))
}

/// Sends the hello on a connection from [`connect_to`].
pub(crate) fn send_hello(
    conn: &OwnedFd,
    from: SocketAddr,
    cap: usize,
    ring: BorrowedFd<'_>,
    doorbell: BorrowedFd<'_>,
) -> io::Result<()> {
    let m = encode(from, cap);
    let fds = [ring.as_raw_fd(), doorbell.as_raw_fd()];
    let n = sendmsg::<()>(
        conn.as_raw_fd(),
        &[IoSlice::new(&m)],
        &[ControlMessage::ScmRights(&fds)],
        MsgFlags::MSG_DONTWAIT | MsgFlags::MSG_NOSIGNAL,
        None,
    )?;
    if n != HELLO_LEN {
        return Err(io::Error::new(io::ErrorKind::WriteZero, "short hello"));
    }
    Ok(())
}

/// What [`recv_hello`] found.
#[derive(Debug)]
pub(crate) enum Heard {
    Hello(Hello),
    /// Nothing yet.
    Nothing,
    /// The peer closed, or sent something that is not a hello.
    Gone,
}

/// Reads a hello from an accepted connection. Descriptors that come with
/// anything else are closed.
pub(crate) fn recv_hello(conn: &OwnedFd) -> io::Result<Heard> {
    let mut buf = [0u8; HELLO_LEN + 1];
    let mut space = nix::cmsg_space!([RawFd; 2]);
    let mut iov = [IoSliceMut::new(&mut buf)];
    let msg = match recvmsg::<()>(
        conn.as_raw_fd(),
        &mut iov,
        Some(&mut space),
        MsgFlags::MSG_DONTWAIT | MsgFlags::MSG_CMSG_CLOEXEC,
    ) {
        Ok(m) => m,
        Err(Errno::EAGAIN | Errno::EINTR) => return Ok(Heard::Nothing),
        Err(e) => return Err(e.into()),
    };
    let mut fds: Vec<OwnedFd> = Vec::new();
    for c in msg.cmsgs()? {
        if let ControlMessageOwned::ScmRights(raw) = c {
            for r in raw {
                // SAFETY: the kernel installed these descriptors for this
                // process as the message was received; nothing else owns
                // them.
                fds.push(unsafe { OwnedFd::from_raw_fd(r) });
            }
        }
    }
    let truncated = msg
        .flags
        .intersects(MsgFlags::MSG_TRUNC | MsgFlags::MSG_CTRUNC);
    let len = msg.bytes;
    if len == 0 {
        return Ok(Heard::Gone);
    }
    let Some((from, cap)) = decode(&buf[..len]).filter(|_| !truncated && fds.len() == 2) else {
        return Ok(Heard::Gone);
    };
    let doorbell = fds.pop().expect("two descriptors");
    let ring = fds.pop().expect("two descriptors");
    Ok(Heard::Hello(Hello {
        from,
        cap,
        ring,
        doorbell,
    }))
}

/// Sends the one-byte answer.
pub(crate) fn answer(conn: &OwnedFd, byte: u8) -> io::Result<()> {
    send(
        conn.as_raw_fd(),
        &[byte],
        MsgFlags::MSG_DONTWAIT | MsgFlags::MSG_NOSIGNAL,
    )?;
    Ok(())
}

/// What came back on a connection the hello was sent on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Answer {
    Accepted,
    Nothing,
    /// Closed or refused.
    Refused,
}

/// Reads the answer, if it came.
pub(crate) fn read_answer(conn: &OwnedFd) -> Answer {
    let mut b = [0u8; 1];
    match recv(conn.as_raw_fd(), &mut b, MsgFlags::MSG_DONTWAIT) {
        Ok(1) if b[0] == ACCEPTED => Answer::Accepted,
        Err(Errno::EAGAIN | Errno::EINTR) => Answer::Nothing,
        _ => Answer::Refused,
    }
}

/// Whether the other end of an established connection has gone (it
/// closed, or sent something it must not).
pub(crate) fn closed(conn: &OwnedFd) -> bool {
    let mut fds = [nix::poll::PollFd::new(
        conn.as_fd(),
        nix::poll::PollFlags::POLLIN,
    )];
    matches!(nix::poll::poll(&mut fds, nix::poll::PollTimeout::ZERO), Ok(n) if n > 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hellos_round_trip_and_junk_is_refused() {
        for from in ["127.0.0.9:4791", "[::1]:18000"] {
            let from: SocketAddr = from.parse().unwrap();
            let m = encode(from, 1 << 20);
            assert_eq!(decode(&m), Some((from, 1 << 20)));
        }
        let mut m = encode("127.0.0.1:1".parse().unwrap(), 1);
        assert!(decode(&m[..39]).is_none());
        m[12] = 5;
        assert!(decode(&m).is_none());
        m[0] ^= 1;
        assert!(decode(&m).is_none());
    }

    #[test]
    fn a_hello_carries_two_descriptors_and_is_answered() {
        let at: SocketAddr = format!("127.0.0.1:{}", 20000 + std::process::id() % 20000)
            .parse()
            .unwrap();
        let l = listen_on(at).unwrap();
        assert!(listen_on(at).is_err(), "the name is taken");
        assert!(accept_from(&l).unwrap().is_none());
        let c = connect_to(at).unwrap();
        let s = accept_from(&l).unwrap().expect("a connection");
        assert!(matches!(recv_hello(&s).unwrap(), Heard::Nothing));
        let mem = super::super::mem::SharedMem::create(8192).unwrap();
        let bell = nix::sys::eventfd::EventFd::new().unwrap();
        let bell: OwnedFd = bell.into();
        send_hello(
            &c,
            "127.0.0.2:99".parse().unwrap(),
            4096,
            mem.fd().as_fd(),
            bell.as_fd(),
        )
        .unwrap();
        let Heard::Hello(h) = recv_hello(&s).unwrap() else {
            panic!("no hello")
        };
        assert_eq!((h.from, h.cap), ("127.0.0.2:99".parse().unwrap(), 4096));
        assert_eq!(read_answer(&c), Answer::Nothing);
        answer(&s, ACCEPTED).unwrap();
        assert_eq!(read_answer(&c), Answer::Accepted);
        assert!(!closed(&s));
        drop(c);
        assert!(closed(&s), "the peer went");
        assert!(matches!(recv_hello(&s).unwrap(), Heard::Gone));
        assert!(
            connect_to("127.0.0.1:1".parse().unwrap()).is_err(),
            "nobody there"
        );
    }
}
