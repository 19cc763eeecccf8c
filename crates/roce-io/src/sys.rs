//! The few Linux socket calls that neither `nix` nor `socket2` cover the
//! way the backends need them: `sendmmsg` / `recvmmsg` with a control
//! message buffer *per message* (per-packet TOS, UDP GSO segment size, and
//! on receive the TOS / traffic class and the GRO segment size), and plain
//! integer socket options by number. One of the crate's three modules with
//! `unsafe` (with `ring.rs`, the AF_PACKET receive ring, and `emu.rs`, the
//! CPUID probe); every block says why it is sound.

use std::io::{self, IoSlice};
use std::mem;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::{AsRawFd, BorrowedFd};
use std::ptr;

use libc::{c_int, c_void, socklen_t};
use socket2::SockAddr;

/// Messages per `sendmmsg` / `recvmmsg` call (callers loop for more).
pub(crate) const MAX_MMSG: usize = 64;

/// Control buffer per message: room for three integer cmsgs.
const CMSG_BUF: usize = 64;

/// An 8-byte aligned control-message buffer (`cmsghdr` alignment).
#[derive(Clone, Copy)]
#[repr(C, align(8))]
struct CmsgBuf([u8; CMSG_BUF]);

/// The headers, addresses, iovecs and control buffers of one
/// `sendmmsg` / `recvmmsg` call, allocated once per socket: a call sets
/// the fields of the slots it uses instead of zeroing ~17 KiB of them
/// (a measurable share of a latency test's CPU time).
pub(crate) struct MmsgScratch {
    hdrs: Box<[libc::mmsghdr]>,
    names: Box<[libc::sockaddr_storage]>,
    iovs: Box<[libc::iovec]>,
    ctrl: Box<[CmsgBuf]>,
}

// SAFETY: the raw pointers inside the headers and iovecs are rewritten by
// every call before the kernel reads them and are never dereferenced by
// this code; between calls they are dead values, so moving the scratch to
// another thread cannot create a data race.
unsafe impl Send for MmsgScratch {}

impl std::fmt::Debug for MmsgScratch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("MmsgScratch")
    }
}

impl MmsgScratch {
    pub(crate) fn new() -> MmsgScratch {
        // SAFETY: mmsghdr, sockaddr_storage and iovec are plain old data
        // (integers and raw pointers); all-zero is a valid value of each.
        let (h, n, v): (libc::mmsghdr, libc::sockaddr_storage, libc::iovec) =
            unsafe { (mem::zeroed(), mem::zeroed(), mem::zeroed()) };
        MmsgScratch {
            hdrs: vec![h; MAX_MMSG].into_boxed_slice(),
            names: vec![n; MAX_MMSG].into_boxed_slice(),
            iovs: vec![v; MAX_MMSG].into_boxed_slice(),
            ctrl: vec![CmsgBuf([0; CMSG_BUF]); MAX_MMSG].into_boxed_slice(),
        }
    }
}

/// Sets an integer socket option: for the few that neither nix nor
/// socket2 wraps (`IP_MTU_DISCOVER`, `IPV6_MTU_DISCOVER`,
/// `UDP_NO_CHECK6_RX`, `PACKET_VERSION`, `PACKET_AUXDATA`,
/// `PACKET_IGNORE_OUTGOING`); the others go through theirs.
pub(crate) fn setsockopt_int(
    fd: BorrowedFd<'_>,
    level: c_int,
    name: c_int,
    val: c_int,
) -> io::Result<()> {
    // SAFETY: `val` is a live c_int and the length passed is its size; the
    // kernel only reads that many bytes. An invalid fd or option is an
    // error return, not UB.
    let rc = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            name,
            ptr::from_ref(&val).cast::<c_void>(),
            mem::size_of::<c_int>() as socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// `SOL_PACKET` option: deliver a `tpacket_auxdata` cmsg with each frame.
pub(crate) const PACKET_AUXDATA: c_int = 8;
/// `SOL_PACKET` option: do not deliver this host's outgoing frames.
pub(crate) const PACKET_IGNORE_OUTGOING: c_int = 23;
/// `sll_pkttype` of a frame this host sent.
pub(crate) const PACKET_OUTGOING: u8 = 4;

/// Binds a packet socket to interface `ifindex` for EtherType `proto`
/// (host order; `ETH_P_ALL` for every frame).
pub(crate) fn bind_packet(fd: BorrowedFd<'_>, ifindex: u32, proto: u16) -> io::Result<()> {
    // SAFETY: sockaddr_ll is plain old data; all-zero is valid.
    let mut ll: libc::sockaddr_ll = unsafe { mem::zeroed() };
    ll.sll_family = libc::AF_PACKET as u16;
    ll.sll_protocol = proto.to_be();
    ll.sll_ifindex = ifindex as c_int;
    // SAFETY: `ll` is a live sockaddr_ll and the length is its size.
    let rc = unsafe {
        libc::bind(
            fd.as_raw_fd(),
            ptr::from_ref(&ll).cast::<libc::sockaddr>(),
            mem::size_of::<libc::sockaddr_ll>() as socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// The MTU of interface `name` (`SIOCGIFMTU` on `fd`, any socket of the
/// interface's network namespace).
pub(crate) fn if_mtu(fd: BorrowedFd<'_>, name: &str) -> io::Result<u32> {
    const SIOCGIFMTU: libc::c_ulong = 0x8921;
    // struct ifreq: the name (IFNAMSIZ = 16 bytes), then a 24-byte union
    // whose `ifru_mtu` member is a c_int at its start. Aligned for it.
    #[repr(C, align(8))]
    struct IfReq([u8; 40]);
    let mut req = IfReq([0; 40]);
    let n = name.as_bytes();
    if n.len() >= libc::IFNAMSIZ || n.contains(&0) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "bad interface name",
        ));
    }
    req.0[..n.len()].copy_from_slice(n);
    // SAFETY: `req` is a live, suitably aligned 40-byte struct ifreq with a
    // NUL-terminated name; SIOCGIFMTU writes one c_int into the union.
    let rc = unsafe { libc::ioctl(fd.as_raw_fd(), SIOCGIFMTU as _, req.0.as_mut_ptr()) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    let m = i32::from_ne_bytes([req.0[16], req.0[17], req.0[18], req.0[19]]);
    Ok(m.max(0) as u32)
}

/// One outgoing datagram (or, with `gso_size`, a run of equal-size
/// datagrams that the kernel or NIC segments).
pub(crate) struct TxMsg {
    /// Destination (`None` on a bound packet socket).
    pub(crate) dst: Option<SockAddr>,
    /// Its iovecs: `iovs[iov_start..iov_start + iov_len]`.
    pub(crate) iov_start: usize,
    /// Number of iovecs.
    pub(crate) iov_len: usize,
    /// The whole TOS / traffic-class byte (DSCP and ECN), sent as an
    /// `IP_TOS` or `IPV6_TCLASS` cmsg.
    pub(crate) tos: Option<u8>,
    /// Segment size for UDP GSO (`UDP_SEGMENT` cmsg); 0 for none.
    pub(crate) gso_size: u16,
}

/// Writes one integer cmsg at `at` in `buf`; returns the next offset.
fn put_cmsg(buf: &mut CmsgBuf, at: usize, level: c_int, ty: c_int, data: &[u8]) -> usize {
    let hdr = mem::size_of::<libc::cmsghdr>();
    let align = mem::size_of::<usize>();
    let len = hdr + data.len();
    let space = (len + align - 1) & !(align - 1);
    assert!(at + space <= CMSG_BUF, "cmsg buffer overflow");
    // A cmsghdr is `cmsg_len` (size_t or socklen_t + pad) followed by two
    // c_ints; build it with the C layout through a zeroed struct so that
    // padding fields (musl) are zero.
    // SAFETY: cmsghdr is plain old data; all-zero is a valid value.
    let mut h: libc::cmsghdr = unsafe { mem::zeroed() };
    h.cmsg_len = len as _;
    h.cmsg_level = level;
    h.cmsg_type = ty;
    // SAFETY: `buf` has room for `space >= hdr` bytes at `at` (asserted),
    // and write_unaligned has no alignment requirement.
    unsafe {
        ptr::write_unaligned(buf.0.as_mut_ptr().add(at).cast::<libc::cmsghdr>(), h);
    }
    buf.0[at + hdr..at + len].copy_from_slice(data);
    buf.0[at + len..at + space].fill(0);
    at + space
}

/// Sends `msgs` (at most [`MAX_MMSG`] are tried) with one `sendmmsg`
/// (non-blocking). Returns how many the kernel took; an error when it took
/// none.
pub(crate) fn sendmmsg(
    fd: BorrowedFd<'_>,
    sc: &mut MmsgScratch,
    v6: bool,
    msgs: &[TxMsg],
    iovs: &[IoSlice<'_>],
) -> io::Result<usize> {
    let n = msgs.len().min(MAX_MMSG);
    if n == 0 {
        return Ok(0);
    }
    let MmsgScratch { hdrs, ctrl, .. } = sc;
    for (i, m) in msgs[..n].iter().enumerate() {
        let iov = &iovs[m.iov_start..m.iov_start + m.iov_len];
        let (level, ty) = if v6 {
            (libc::IPPROTO_IPV6, libc::IPV6_TCLASS)
        } else {
            (libc::IPPROTO_IP, libc::IP_TOS)
        };
        let mut at = 0;
        if let Some(tos) = m.tos {
            at = put_cmsg(&mut ctrl[i], at, level, ty, &c_int::from(tos).to_ne_bytes());
        }
        if m.gso_size != 0 {
            at = put_cmsg(
                &mut ctrl[i],
                at,
                libc::SOL_UDP,
                libc::UDP_SEGMENT,
                &m.gso_size.to_ne_bytes(),
            );
        }
        // Every field of the slot, since the scratch holds the last call's.
        hdrs[i].msg_len = 0;
        let h = &mut hdrs[i].msg_hdr;
        match &m.dst {
            Some(dst) => {
                h.msg_name = dst.as_ptr().cast_mut().cast::<c_void>();
                h.msg_namelen = dst.len();
            }
            None => {
                h.msg_name = ptr::null_mut();
                h.msg_namelen = 0;
            }
        }
        // IoSlice is guaranteed ABI-compatible with `struct iovec` on Unix.
        h.msg_iov = iov.as_ptr().cast_mut().cast::<libc::iovec>();
        h.msg_iovlen = iov.len() as _;
        if at > 0 {
            h.msg_control = ctrl[i].0.as_mut_ptr().cast::<c_void>();
            h.msg_controllen = at as _;
        } else {
            h.msg_control = ptr::null_mut();
            h.msg_controllen = 0;
        }
        h.msg_flags = 0;
    }
    // SAFETY: each of the first n headers was fully set above and points
    // at memory that outlives the call: the destination addresses in
    // `msgs`, the iovecs in `iovs` (which borrow the caller's buffers), and
    // the scratch's control buffers (exclusively borrowed). The kernel
    // only reads them, and writes `msg_len` into `hdrs`. (The system call
    // is made directly: see [`recvmmsg`].)
    let rc = unsafe {
        libc::syscall(
            libc::SYS_sendmmsg,
            libc::c_long::from(fd.as_raw_fd()),
            hdrs.as_mut_ptr(),
            n as libc::c_long,
            libc::c_long::from(libc::MSG_DONTWAIT),
        )
    };
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc as usize)
    }
}

/// What arrived in one receive slot.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RxInfo {
    /// Bytes written into the slot.
    pub(crate) len: usize,
    /// The sender (IP sockets).
    pub(crate) peer: Option<SocketAddr>,
    /// Packet type (`PACKET_HOST`, `PACKET_OUTGOING`, ...; packet sockets).
    pub(crate) pkttype: Option<u8>,
    /// 802.1Q tag the kernel took off the frame (packet sockets with
    /// `PACKET_AUXDATA`).
    pub(crate) vlan_tci: Option<u16>,
    /// TOS / traffic class, if the socket asked for it and it came.
    pub(crate) tos: Option<u8>,
    /// GRO segment size, when the kernel coalesced several datagrams.
    pub(crate) gro_size: Option<u16>,
    /// The datagram did not fit in the slot.
    pub(crate) truncated: bool,
}

/// Receives up to `count` datagrams (at most [`MAX_MMSG`]) with one
/// non-blocking `recvmmsg` into consecutive `slot`-byte slices of `arena`.
/// Returns how many; `Ok(0)` when nothing was waiting.
pub(crate) fn recvmmsg(
    fd: BorrowedFd<'_>,
    sc: &mut MmsgScratch,
    arena: &mut [u8],
    slot: usize,
    count: usize,
    out: &mut Vec<RxInfo>,
) -> io::Result<usize> {
    out.clear();
    let n = count.min(MAX_MMSG).min(arena.len() / slot.max(1));
    if n == 0 {
        return Ok(0);
    }
    let MmsgScratch {
        hdrs,
        names,
        iovs,
        ctrl,
    } = sc;
    let base = arena.as_mut_ptr();
    for i in 0..n {
        // SAFETY: i * slot + slot <= arena.len() by the choice of n.
        iovs[i].iov_base = unsafe { base.add(i * slot) }.cast::<c_void>();
        iovs[i].iov_len = slot;
        let h = &mut hdrs[i].msg_hdr;
        h.msg_name = ptr::from_mut(&mut names[i]).cast::<c_void>();
        h.msg_namelen = mem::size_of::<libc::sockaddr_storage>() as socklen_t;
        h.msg_iov = ptr::from_mut(&mut iovs[i]);
        h.msg_iovlen = 1;
        h.msg_control = ctrl[i].0.as_mut_ptr().cast::<c_void>();
        h.msg_controllen = CMSG_BUF as _;
        h.msg_flags = 0;
        hdrs[i].msg_len = 0;
    }
    // SAFETY: each of the first n headers was fully set above and points
    // at a disjoint `slot`-byte part of `arena` (exclusively borrowed for
    // this call) and its own sockaddr_storage and control buffer in the
    // scratch (exclusively borrowed), all live during the call; the kernel
    // writes no more than the lengths given. A null timeout with
    // MSG_DONTWAIT never blocks.
    //
    // Made directly rather than through glibc's wrapper: in a process with
    // more than one thread the wrapper of a cancellation point switches the
    // thread's cancellation state on and off around the call with two
    // locked instructions, a seventh of an empty busy-poll round (perf,
    // `CompletionQueue::poll_one` on an idle context). These calls never
    // block, so there is nothing to cancel. Integer arguments are passed
    // as `long`, as syscall(2) takes them.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_recvmmsg,
            libc::c_long::from(fd.as_raw_fd()),
            hdrs.as_mut_ptr(),
            n as libc::c_long,
            libc::c_long::from(libc::MSG_DONTWAIT),
            ptr::null_mut::<libc::timespec>(),
        )
    };
    if rc < 0 {
        let e = io::Error::last_os_error();
        return if e.kind() == io::ErrorKind::WouldBlock {
            Ok(0)
        } else {
            Err(e)
        };
    }
    let got = rc as usize;
    for i in 0..got {
        let h = &hdrs[i].msg_hdr;
        let peer = decode_sockaddr(&names[i], h.msg_namelen);
        let pkttype = (c_int::from(names[i].ss_family) == libc::AF_PACKET
            && h.msg_namelen as usize >= 11)
            .then(|| {
                // SAFETY: the family says this is a sockaddr_ll, which
                // fits in (and is aligned like) sockaddr_storage.
                let ll: libc::sockaddr_ll =
                    unsafe { ptr::read(ptr::from_ref(&names[i]).cast::<libc::sockaddr_ll>()) };
                ll.sll_pkttype
            });
        // A message whose address cannot be read still takes its entry
        // (peer None: the caller drops it), so that entry i stays the
        // arena's slot i.
        let mut info = RxInfo {
            len: (hdrs[i].msg_len as usize).min(slot),
            peer,
            pkttype,
            vlan_tci: None,
            tos: None,
            gro_size: None,
            truncated: h.msg_flags & libc::MSG_TRUNC != 0,
        };
        // size_t on glibc, socklen_t on musl.
        #[allow(clippy::unnecessary_cast)]
        let clen = (h.msg_controllen as usize).min(CMSG_BUF);
        parse_cmsgs(&ctrl[i].0[..clen], &mut info);
        out.push(info);
    }
    Ok(got)
}

/// Walks received control messages (bounds-checked by hand, no pointer
/// arithmetic on the kernel's lengths).
fn parse_cmsgs(buf: &[u8], info: &mut RxInfo) {
    let hdr = mem::size_of::<libc::cmsghdr>();
    let align = mem::size_of::<usize>();
    let mut at = 0;
    while at + hdr <= buf.len() {
        // SAFETY: `hdr` bytes are in bounds at `at`; read_unaligned has no
        // alignment requirement and cmsghdr is plain old data.
        let h: libc::cmsghdr =
            unsafe { ptr::read_unaligned(buf.as_ptr().add(at).cast::<libc::cmsghdr>()) };
        let len = h.cmsg_len as usize;
        if len < hdr || at + len > buf.len() {
            break;
        }
        let data = &buf[at + hdr..at + len];
        let int = |d: &[u8]| -> Option<i64> {
            match d.len() {
                1 => Some(i64::from(d[0])),
                2 => Some(i64::from(u16::from_ne_bytes([d[0], d[1]]))),
                4.. => Some(i64::from(i32::from_ne_bytes([d[0], d[1], d[2], d[3]]))),
                _ => None,
            }
        };
        match (h.cmsg_level, h.cmsg_type) {
            (libc::IPPROTO_IP, libc::IP_TOS) | (libc::IPPROTO_IPV6, libc::IPV6_TCLASS) => {
                info.tos = int(data).map(|v| v as u8);
            }
            (libc::SOL_UDP, libc::UDP_GRO) => {
                info.gro_size = int(data).and_then(|v| u16::try_from(v).ok());
            }
            (libc::SOL_PACKET, PACKET_AUXDATA) if data.len() >= 20 => {
                // struct tpacket_auxdata: status, len, snaplen (u32),
                // mac, net, vlan_tci, vlan_tpid (u16).
                let status = u32::from_ne_bytes([data[0], data[1], data[2], data[3]]);
                if status & libc::TP_STATUS_VLAN_VALID != 0 {
                    info.vlan_tci = Some(u16::from_ne_bytes([data[16], data[17]]));
                }
            }
            _ => {}
        }
        at += (len + align - 1) & !(align - 1);
    }
}

/// Decodes an IPv4 or IPv6 socket address.
pub(crate) fn decode_sockaddr(s: &libc::sockaddr_storage, len: socklen_t) -> Option<SocketAddr> {
    let len = len as usize;
    match c_int::from(s.ss_family) {
        libc::AF_INET if len >= mem::size_of::<libc::sockaddr_in>() => {
            // SAFETY: sockaddr_storage is larger than and aligned for every
            // sockaddr type; the family says this one is a sockaddr_in.
            let a: libc::sockaddr_in =
                unsafe { ptr::read(ptr::from_ref(s).cast::<libc::sockaddr_in>()) };
            Some(SocketAddr::V4(SocketAddrV4::new(
                Ipv4Addr::from(u32::from_be(a.sin_addr.s_addr)),
                u16::from_be(a.sin_port),
            )))
        }
        libc::AF_INET6 if len >= mem::size_of::<libc::sockaddr_in6>() => {
            // SAFETY: as above, for sockaddr_in6.
            let a: libc::sockaddr_in6 =
                unsafe { ptr::read(ptr::from_ref(s).cast::<libc::sockaddr_in6>()) };
            Some(SocketAddr::V6(SocketAddrV6::new(
                Ipv6Addr::from(a.sin6_addr.s6_addr),
                u16::from_be(a.sin6_port),
                a.sin6_flowinfo,
                a.sin6_scope_id,
            )))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cmsg_round_trip() {
        let mut b = CmsgBuf([0xaa; CMSG_BUF]);
        let at = put_cmsg(&mut b, 0, libc::IPPROTO_IP, libc::IP_TOS, &[0x6a]);
        let at = put_cmsg(
            &mut b,
            at,
            libc::SOL_UDP,
            libc::UDP_GRO,
            &1400i32.to_ne_bytes(),
        );
        let mut info = RxInfo {
            len: 0,
            peer: None,
            pkttype: None,
            vlan_tci: None,
            tos: None,
            gro_size: None,
            truncated: false,
        };
        parse_cmsgs(&b.0[..at], &mut info);
        assert_eq!(info.tos, Some(0x6a));
        assert_eq!(info.gro_size, Some(1400));
        // Garbage lengths stop the walk instead of reading out of bounds.
        let mut junk = [0xffu8; 40];
        junk[..8].copy_from_slice(&1000usize.to_ne_bytes());
        parse_cmsgs(&junk, &mut info);
    }
}
