//! The kernel's neighbour table (ARP / NDP), read over rtnetlink: an
//! `RTM_GETNEIGH` dump on a `NETLINK_ROUTE` socket, which the calling
//! thread's network namespace answers.

use std::io::{self, Read};
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use roce_wire::MacAddr;
use socket2::{Domain, Protocol, SockAddr, Socket, Type};

const RTM_NEWNEIGH: u16 = 28;
const RTM_GETNEIGH: u16 = 30;
const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
const NLM_F_REQUEST: u16 = 0x1;
const NLM_F_DUMP: u16 = 0x300;
const NDA_DST: u16 = 1;
const NDA_LLADDR: u16 = 2;
/// NUD states whose link-layer address can be used: reachable, stale,
/// delay, probe, permanent (not incomplete, failed or noarp).
const NUD_USABLE: u16 = 0x02 | 0x04 | 0x08 | 0x10 | 0x80;
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
    /// The dump has ended (or failed) without it.
    Done,
    /// More messages follow.
    More,
}

/// Scans netlink messages (a dump's answer) for a usable entry for `ip`
/// on interface `ifindex`.
pub(crate) fn scan(buf: &[u8], ifindex: u32, ip: IpAddr) -> Scan {
    let want: Vec<u8> = match ip {
        IpAddr::V4(a) => a.octets().to_vec(),
        IpAddr::V6(a) => a.octets().to_vec(),
    };
    let u16_at = |b: &[u8], at: usize| u16::from_ne_bytes([b[at], b[at + 1]]);
    let mut at = 0;
    while at + NLMSG_HDR <= buf.len() {
        let len = u32::from_ne_bytes([buf[at], buf[at + 1], buf[at + 2], buf[at + 3]]) as usize;
        if len < NLMSG_HDR || at + len > buf.len() {
            return Scan::Done;
        }
        let msg = &buf[at..at + len];
        match u16_at(msg, 4) {
            NLMSG_DONE | NLMSG_ERROR => return Scan::Done,
            RTM_NEWNEIGH if len >= NLMSG_HDR + NDMSG => {
                let nd = &msg[NLMSG_HDR..];
                let index = u32::from_ne_bytes([nd[4], nd[5], nd[6], nd[7]]);
                let state = u16_at(nd, 8);
                if index == ifindex && state & NUD_USABLE != 0 {
                    let (mut dst, mut ll) = (None, None);
                    let mut a = NLMSG_HDR + NDMSG;
                    while a + 4 <= msg.len() {
                        let alen = usize::from(u16_at(msg, a));
                        if alen < 4 || a + alen > msg.len() {
                            break;
                        }
                        let data = &msg[a + 4..a + alen];
                        match u16_at(msg, a + 2) {
                            NDA_DST => dst = Some(data),
                            NDA_LLADDR if data.len() == 6 => ll = Some(data),
                            _ => {}
                        }
                        a += (alen + 3) & !3;
                    }
                    if let (Some(d), Some(l)) = (dst, ll) {
                        let mac = MacAddr([l[0], l[1], l[2], l[3], l[4], l[5]]);
                        if d == &want[..] && mac != MacAddr::default() {
                            return Scan::Found(mac);
                        }
                    }
                }
            }
            _ => {}
        }
        at += (len + 3) & !3;
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
        let mut broken = neigh_msg(7, 0x02, &[198, 18, 0, 2], Some([1; 6]));
        broken[0..4].copy_from_slice(&4000u32.to_ne_bytes());
        assert_eq!(scan(&broken, 7, ip), Scan::Done);
        assert_eq!(scan(&[], 7, ip), Scan::More);
    }

    #[test]
    fn loopback_has_no_neighbours_and_the_lookup_says_so() {
        // The kernel answers the dump; nothing is resolved on lo.
        assert_eq!(lookup(1, "127.0.0.2".parse().unwrap()).unwrap(), None);
        assert_eq!(lookup(1, "::2".parse().unwrap()).unwrap(), None);
    }
}
