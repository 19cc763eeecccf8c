//! Network interfaces and their addresses, for device discovery (a
//! `roce devinfo` command, or choosing the interface of a
//! [`PacketBackend`](crate::PacketBackend)).
//!
//! Everything comes from the calling thread's network namespace
//! (`getifaddrs` over netlink and an `ioctl` on a socket made there), so a
//! thread that has entered another namespace sees that namespace's
//! interfaces.

use std::collections::BTreeMap;
use std::io;
use std::net::IpAddr;
use std::os::fd::AsFd;

use nix::ifaddrs::getifaddrs;
use nix::net::if_::InterfaceFlags;
use roce_wire::MacAddr;
use socket2::{Domain, Socket, Type};

use crate::sys;

/// One network interface.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct InterfaceInfo {
    /// Name (`eth0`, `lo`, ...).
    pub name: String,
    /// Interface index.
    pub index: u32,
    /// Hardware address, for Ethernet-like interfaces.
    pub mac: Option<MacAddr>,
    /// MTU in bytes (IP datagram size), when it could be read.
    pub mtu: Option<u32>,
    /// Administratively up (`IFF_UP`).
    pub up: bool,
    /// Operationally up: carrier and ready (`IFF_RUNNING`, `IFF_LOWER_UP`).
    pub running: bool,
    /// The loopback interface.
    pub loopback: bool,
    /// IPv4 and IPv6 addresses, IPv4 first.
    pub addrs: Vec<IpAddr>,
}

impl InterfaceInfo {
    /// Operational state as `ip link` names it: `"up"` or `"down"`.
    pub fn oper_state(&self) -> &'static str {
        if self.running {
            "up"
        } else {
            "down"
        }
    }
}

/// Every interface of the calling thread's network namespace, by index.
pub fn interfaces() -> io::Result<Vec<InterfaceInfo>> {
    let mut by_name: BTreeMap<String, InterfaceInfo> = BTreeMap::new();
    for a in getifaddrs().map_err(io::Error::from)? {
        let e = by_name
            .entry(a.interface_name.clone())
            .or_insert_with(|| InterfaceInfo {
                name: a.interface_name.clone(),
                index: 0,
                mac: None,
                mtu: None,
                up: false,
                running: false,
                loopback: false,
                addrs: Vec::new(),
            });
        e.up |= a.flags.contains(InterfaceFlags::IFF_UP);
        e.running |= a.flags.contains(InterfaceFlags::IFF_RUNNING)
            && a.flags.contains(InterfaceFlags::IFF_LOWER_UP);
        e.loopback |= a.flags.contains(InterfaceFlags::IFF_LOOPBACK);
        let Some(addr) = a.address else { continue };
        if let Some(ll) = addr.as_link_addr() {
            e.index = ll.ifindex() as u32;
            e.mac = ll.addr().map(MacAddr).filter(|_| ll.halen() == 6);
        } else if let Some(v4) = addr.as_sockaddr_in() {
            e.addrs.push(IpAddr::V4(v4.ip()));
        } else if let Some(v6) = addr.as_sockaddr_in6() {
            e.addrs.push(IpAddr::V6(v6.ip()));
        }
    }
    let probe = Socket::new(Domain::IPV4, Type::DGRAM, None).ok();
    let mut out: Vec<InterfaceInfo> = by_name.into_values().collect();
    for i in &mut out {
        if i.index == 0 {
            i.index = nix::net::if_::if_nametoindex(i.name.as_str()).unwrap_or(0);
        }
        i.mtu = probe
            .as_ref()
            .and_then(|s| sys::if_mtu(s.as_fd(), &i.name).ok());
        i.addrs.sort_by_key(|a| a.is_ipv6());
    }
    out.sort_by_key(|i| i.index);
    Ok(out)
}

/// The interface called `name`.
pub fn interface(name: &str) -> io::Result<InterfaceInfo> {
    interfaces()?
        .into_iter()
        .find(|i| i.name == name)
        .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, format!("no interface {name}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_is_listed() {
        let all = interfaces().unwrap();
        let lo = all
            .iter()
            .find(|i| i.loopback)
            .expect("a loopback interface");
        assert!(lo.index > 0);
        assert!(lo.mtu.is_some_and(|m| m >= 1280), "{lo:?}");
        assert_eq!(interface(&lo.name).unwrap(), *lo);
        assert!(interface("no-such-if0").is_err());
    }
}
