//! The kernel's neighbour table (ARP / NDP), read over rtnetlink: an
//! `RTM_GETNEIGH` dump on a `NETLINK_ROUTE` socket, which the calling
//! thread's network namespace answers.

use std::io::{self, Read};
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use roce_wire::MacAddr;
use socket2::{Domain, Protocol, SockAddr, Socket, Type};

use libc::{NDA_DST, NDA_LLADDR, RTM_GETNEIGH, RTM_NEWNEIGH};

// libc declares the netlink header's values as `c_int`; the header's
// fields are 16 bits.
const NLMSG_ERROR: u16 = libc::NLMSG_ERROR as u16;
const NLMSG_DONE: u16 = libc::NLMSG_DONE as u16;
const NLM_F_REQUEST: u16 = libc::NLM_F_REQUEST as u16;
const NLM_F_DUMP: u16 = libc::NLM_F_DUMP as u16;
/// NUD states whose link-layer address can be used: reachable, stale,
/// delay, probe, permanent (not incomplete, failed or noarp).
const NUD_USABLE: u16 =
    libc::NUD_REACHABLE | libc::NUD_STALE | libc::NUD_DELAY | libc::NUD_PROBE | libc::NUD_PERMANENT;
const NLMSG_HDR: usize = 16;
const NDMSG: usize = 12;

/// The dump request for `family`'s neighbours.
fn request(family: u8, seq: u32) -> [u8; NLMSG_HDR + NDMSG] {
    let mut m = [0u8; NLMSG_HDR + NDMSG];
    m[0..4].copy_from_slice(&((NLMSG_HDR + NDMSG) as u32).to_ne_bytes());
    m[4..6].copy_from_slice(&RTM_GETNEIGH.to_ne_bytes());
    m[6..8].copy_from_slice(&(NLM_F_REQUEST | NLM_F_DUMP).to_ne_bytes());
    m[8..12].copy_from_slice(&seq.to_ne_bytes());
    m[NLMSG_HDR] = family;
    m
}

/// What one pass over a buffer of netlink messages found.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Scan {
    /// The entry for the address, usable.
    Found(MacAddr),
    /// The dump has ended without it.
    Done,
    /// The kernel refused the request (its errno).
    Failed(i32),
    /// More messages follow.
    More,
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_ne_bytes([b[at], b[at + 1]])
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_ne_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// The netlink messages in `buf`, as (type, whole message); stops at a
/// length that does not fit (yielding `None` for it).
fn messages(buf: &[u8]) -> impl Iterator<Item = Option<(u16, &[u8])>> + '_ {
    let mut at = 0;
    std::iter::from_fn(move || {
        if at + NLMSG_HDR > buf.len() {
            return None;
        }
        let len = u32_at(buf, at) as usize;
        if len < NLMSG_HDR || at + len > buf.len() {
            at = buf.len();
            return Some(None);
        }
        let msg = &buf[at..at + len];
        at += (len + 3) & !3;
        Some(Some((u16_at(msg, 4), msg)))
    })
}

/// The (type, data) attributes of an RTM_NEWNEIGH message.
fn attributes(msg: &[u8]) -> impl Iterator<Item = (u16, &[u8])> + '_ {
    let mut a = NLMSG_HDR + NDMSG;
    std::iter::from_fn(move || {
        if a + 4 > msg.len() {
            return None;
        }
        let alen = usize::from(u16_at(msg, a));
        if alen < 4 || a + alen > msg.len() {
            return None;
        }
        let item = (u16_at(msg, a + 2), &msg[a + 4..a + alen]);
        a += (alen + 3) & !3;
        Some(item)
    })
}

/// The link-layer address of an RTM_NEWNEIGH message, when it is a usable
/// entry for `want` (the address's bytes) on interface `ifindex`.
fn usable_entry(msg: &[u8], ifindex: u32, want: &[u8]) -> Option<MacAddr> {
    if msg.len() < NLMSG_HDR + NDMSG {
        return None;
    }
    let nd = &msg[NLMSG_HDR..];
    if u32_at(nd, 4) != ifindex || u16_at(nd, 8) & NUD_USABLE == 0 {
        return None;
    }
    let (mut dst, mut ll) = (None, None);
    for (ty, data) in attributes(msg) {
        match ty {
            NDA_DST => dst = Some(data),
            NDA_LLADDR if data.len() == 6 => {
                ll = Some(MacAddr([
                    data[0], data[1], data[2], data[3], data[4], data[5],
                ]))
            }
            _ => {}
        }
    }
    ll.filter(|mac| dst == Some(want) && *mac != MacAddr::default())
}

/// Scans netlink messages (a dump's answer) for a usable entry for `ip`
/// on interface `ifindex`.
pub(crate) fn scan(buf: &[u8], ifindex: u32, ip: IpAddr) -> Scan {
    let (v4, v6);
    let want: &[u8] = match ip {
        IpAddr::V4(a) => {
            v4 = a.octets();
            &v4
        }
        IpAddr::V6(a) => {
            v6 = a.octets();
            &v6
        }
    };
    for m in messages(buf) {
        let Some((ty, msg)) = m else {
            return Scan::Done;
        };
        match ty {
            NLMSG_DONE => return Scan::Done,
            // struct nlmsgerr: a negative errno first.
            NLMSG_ERROR if msg.len() >= NLMSG_HDR + 4 => {
                return Scan::Failed(-(u32_at(msg, NLMSG_HDR) as i32))
            }
            NLMSG_ERROR => return Scan::Done,
            RTM_NEWNEIGH => {
                if let Some(mac) = usable_entry(msg, ifindex, want) {
                    return Scan::Found(mac);
                }
            }
            _ => {}
        }
    }
    Scan::More
}

/// The MAC address the kernel has for `ip` on interface `ifindex`, if
/// resolved.
pub(crate) fn lookup(ifindex: u32, ip: IpAddr) -> io::Result<Option<MacAddr>> {
    let sock = Socket::new(
        Domain::from(libc::AF_NETLINK),
        Type::RAW,
        Some(Protocol::from(libc::NETLINK_ROUTE)),
    )?;
    // A kernel that never answers must not hang the sender.
    sock.set_read_timeout(Some(Duration::from_secs(1)))?;
    let family = if ip.is_ipv4() {
        libc::AF_INET
    } else {
        libc::AF_INET6
    } as u8;
    // Unconnected and unaddressed: netlink delivers to the kernel.
    sock.send(&request(family, 1))?;
    let mut buf = vec![0u8; 64 * 1024];
    let mut reader = &sock;
    loop {
        let n = reader.read(&mut buf)?;
        if n == 0 {
            return Ok(None);
        }
        match scan(&buf[..n], ifindex, ip) {
            Scan::Found(mac) => return Ok(Some(mac)),
            Scan::Done => return Ok(None),
            Scan::Failed(errno) => return Err(io::Error::from_raw_os_error(errno)),
            Scan::More => {}
        }
    }
}

/// Makes the kernel resolve `ip` on `dev`: a one-byte UDP datagram to the
/// discard port (9) from a socket bound to the device; the kernel sends the
/// ARP request / neighbour solicitation to deliver it.
pub(crate) fn solicit(dev: &str, ip: IpAddr) -> io::Result<()> {
    let domain = if ip.is_ipv4() {
        Domain::IPV4
    } else {
        Domain::IPV6
    };
    let s = Socket::new(domain, Type::DGRAM.nonblocking(), None)?;
    s.bind_device(Some(dev.as_bytes()))?;
    match s.send_to(&[0], &SockAddr::from(SocketAddr::new(ip, 9))) {
        Ok(_) => Ok(()),
        // Queued behind the resolution, or refused after it: either way the
        // kernel has started resolving.
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(()),
        Err(e) => Err(e),
    }
}

/// The MAC address of `ip`'s neighbour entry on interface `ifname`
/// (`ifindex`), as the kernel resolves it: read from the table, or,
/// when it has none, solicited and looked for again every 10 ms until
/// `wait` has passed. `Ok(None)`: unresolved (no such neighbour, or one
/// that did not answer in time). For what a program asks of
/// `ibv_resolve_eth_l2_from_gid`; the packet backend resolves its own
/// next hops without blocking.
pub fn neighbor(
    ifname: &str,
    ifindex: u32,
    ip: IpAddr,
    wait: Duration,
) -> io::Result<Option<MacAddr>> {
    if let Some(mac) = lookup(ifindex, ip)? {
        return Ok(Some(mac));
    }
    solicit(ifname, ip)?;
    let end = std::time::Instant::now() + wait;
    while std::time::Instant::now() < end {
        std::thread::sleep(Duration::from_millis(10));
        if let Some(mac) = lookup(ifindex, ip)? {
            return Ok(Some(mac));
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Ipv4Addr, Ipv6Addr};

    /// One RTM_NEWNEIGH message as the kernel sends it.
    fn neigh_msg(ifindex: u32, state: u16, dst: &[u8], lladdr: Option<[u8; 6]>) -> Vec<u8> {
        let mut attrs = Vec::new();
        let mut attr = |ty: u16, data: &[u8]| {
            attrs.extend_from_slice(&((4 + data.len()) as u16).to_ne_bytes());
            attrs.extend_from_slice(&ty.to_ne_bytes());
            attrs.extend_from_slice(data);
            while attrs.len() % 4 != 0 {
                attrs.push(0);
            }
        };
        attr(NDA_DST, dst);
        if let Some(l) = lladdr {
            attr(NDA_LLADDR, &l);
        }
        let len = NLMSG_HDR + NDMSG + attrs.len();
        let mut m = Vec::with_capacity(len);
        m.extend_from_slice(&(len as u32).to_ne_bytes());
        m.extend_from_slice(&RTM_NEWNEIGH.to_ne_bytes());
        m.extend_from_slice(&[0; 10]);
        m.extend_from_slice(&[if dst.len() == 4 { 2 } else { 10 }, 0, 0, 0]);
        m.extend_from_slice(&ifindex.to_ne_bytes());
        m.extend_from_slice(&state.to_ne_bytes());
        m.extend_from_slice(&[0, 1]);
        m.extend_from_slice(&attrs);
        m
    }

    #[test]
    fn finds_the_usable_entry_for_the_address_on_the_interface() {
        let mac = [0xaa, 0xbb, 0xcc, 0, 0x11, 0x22];
        let v4: Ipv4Addr = "198.18.0.2".parse().unwrap();
        let mut buf = Vec::new();
        // Same address on another interface, then incomplete, then usable.
        buf.extend(neigh_msg(3, 0x02, &v4.octets(), Some([1; 6])));
        buf.extend(neigh_msg(7, 0x01, &v4.octets(), None));
        buf.extend(neigh_msg(7, 0x04, &[198, 18, 0, 3], Some([2; 6])));
        assert_eq!(scan(&buf, 7, IpAddr::V4(v4)), Scan::More);
        buf.extend(neigh_msg(7, 0x04, &v4.octets(), Some(mac)));
        assert_eq!(scan(&buf, 7, IpAddr::V4(v4)), Scan::Found(MacAddr(mac)));
        // Failed entries are not used.
        let failed = neigh_msg(7, 0x20, &v4.octets(), Some(mac));
        assert_eq!(scan(&failed, 7, IpAddr::V4(v4)), Scan::More);
        let v6: Ipv6Addr = "fd00::2".parse().unwrap();
        let m6 = neigh_msg(7, 0x80, &v6.octets(), Some(mac));
        assert_eq!(scan(&m6, 7, IpAddr::V6(v6)), Scan::Found(MacAddr(mac)));
    }

    #[test]
    fn the_end_of_a_dump_or_a_broken_message_ends_the_scan() {
        let mut done = vec![0u8; 20];
        done[0..4].copy_from_slice(&20u32.to_ne_bytes());
        done[4..6].copy_from_slice(&NLMSG_DONE.to_ne_bytes());
        let ip: IpAddr = "198.18.0.2".parse().unwrap();
        assert_eq!(scan(&done, 7, ip), Scan::Done);
        // An error answer carries the errno.
        let mut err = vec![0u8; 36];
        err[0..4].copy_from_slice(&36u32.to_ne_bytes());
        err[4..6].copy_from_slice(&NLMSG_ERROR.to_ne_bytes());
        err[16..20].copy_from_slice(&(-libc::EINVAL).to_ne_bytes());
        assert_eq!(scan(&err, 7, ip), Scan::Failed(libc::EINVAL));
        let mut broken = neigh_msg(7, 0x02, &[198, 18, 0, 2], Some([1; 6]));
        broken[0..4].copy_from_slice(&4000u32.to_ne_bytes());
        assert_eq!(scan(&broken, 7, ip), Scan::Done);
        assert_eq!(scan(&[], 7, ip), Scan::More);
    }

    #[test]
    fn loopback_has_no_neighbours_and_the_lookup_says_so() {
        // The kernel takes the request (a malformed one would come back as
        // an error) and its dump has nothing on lo.
        assert_eq!(lookup(1, "127.0.0.2".parse().unwrap()).unwrap(), None);
        assert_eq!(lookup(1, "::2".parse().unwrap()).unwrap(), None);
    }
}
