//! The kernel's neighbour table (ARP / NDP), read the simple way: IPv4 from
//! `/proc/thread-self/net/arp` (the calling thread's namespace), IPv6 from
//! `ip -j -6 neigh` (iproute2; a child process inherits the thread's
//! namespace). A netlink reader would avoid the process for IPv6; this is
//! the first version.

use std::io;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::process::Command;

use roce_wire::MacAddr;
use socket2::{Domain, SockAddr, Socket, Type};

/// Parses `aa:bb:cc:dd:ee:ff`.
pub(crate) fn parse_mac(s: &str) -> Option<MacAddr> {
    let mut m = [0u8; 6];
    let mut parts = s.split(':');
    for b in &mut m {
        *b = u8::from_str_radix(parts.next()?, 16).ok()?;
    }
    parts.next().is_none().then_some(MacAddr(m))
}

/// Finds `ip` in the text of `/proc/net/arp` on interface `dev`
/// (complete entries only: flag ATF_COM 0x2).
pub(crate) fn find_arp(table: &str, dev: &str, ip: Ipv4Addr) -> Option<MacAddr> {
    table.lines().skip(1).find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        if f.len() < 6 || f[5] != dev || f[0].parse::<Ipv4Addr>().ok()? != ip {
            return None;
        }
        let flags = u32::from_str_radix(f[2].trim_start_matches("0x"), 16).ok()?;
        if flags & 0x2 == 0 {
            return None;
        }
        parse_mac(f[3]).filter(|m| *m != MacAddr::default())
    })
}

/// Finds the `lladdr` of a reachable-enough entry in `ip -j neigh` JSON
/// output (one entry is asked for, so the first usable one is it).
pub(crate) fn find_json(json: &str) -> Option<MacAddr> {
    for entry in json.split('{').skip(1) {
        if entry.contains("\"FAILED\"") || entry.contains("\"INCOMPLETE\"") {
            continue;
        }
        let at = entry.find("\"lladdr\":\"")? + 10;
        let end = entry[at..].find('"')? + at;
        if let Some(m) = parse_mac(&entry[at..end]) {
            return Some(m);
        }
    }
    None
}

/// The MAC address the kernel has for `ip` on `dev`, if resolved.
pub(crate) fn lookup(dev: &str, ip: IpAddr) -> io::Result<Option<MacAddr>> {
    match ip {
        IpAddr::V4(v4) => {
            let t = std::fs::read_to_string("/proc/thread-self/net/arp")?;
            Ok(find_arp(&t, dev, v4))
        }
        IpAddr::V6(v6) => {
            let out = Command::new("ip")
                .args(["-j", "-6", "neigh", "show", "dev", dev, "to"])
                .arg(v6.to_string())
                .output()?;
            Ok(find_json(&String::from_utf8_lossy(&out.stdout)))
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

    #[test]
    fn parses_proc_net_arp() {
        let t = "IP address       HW type     Flags       HW address            Mask     Device\n\
                 198.18.0.2       0x1         0x2         aa:bb:cc:00:11:22     *        veth0\n\
                 198.18.0.3       0x1         0x0         00:00:00:00:00:00     *        veth0\n";
        let ip = |s: &str| s.parse().unwrap();
        assert_eq!(
            find_arp(t, "veth0", ip("198.18.0.2")),
            Some(MacAddr([0xaa, 0xbb, 0xcc, 0, 0x11, 0x22]))
        );
        assert_eq!(find_arp(t, "veth1", ip("198.18.0.2")), None);
        assert_eq!(find_arp(t, "veth0", ip("198.18.0.3")), None, "incomplete");
        assert_eq!(parse_mac("aa:bb"), None);
        assert_eq!(parse_mac("aa:bb:cc:dd:ee:ff:00"), None);
    }

    #[test]
    fn parses_ip_json() {
        let j = r#"[{"dst":"fd00::2","dev":"veth0","lladdr":"02:00:00:00:00:02","state":["REACHABLE"]}]"#;
        assert_eq!(find_json(j), Some(MacAddr([2, 0, 0, 0, 0, 2])));
        assert_eq!(find_json(r#"[{"dst":"fd00::2","state":["FAILED"]}]"#), None);
        assert_eq!(find_json("[]"), None);
    }
}
