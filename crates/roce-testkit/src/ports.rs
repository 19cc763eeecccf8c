//! Port numbers for the servers a test starts: chosen by the kernel, so
//! that tests running at once (several test binaries, or nextest's one
//! process per test) do not pick the same ones.

use std::collections::HashSet;
use std::net::{Ipv4Addr, TcpListener, UdpSocket};

/// `N` distinct ports that were free on 127.0.0.1 for both TCP and UDP
/// when asked (the kernel's choice for a bind to port 0; its ephemeral
/// range starts each search at a random place, so a port just handed out
/// is not handed out again at once). The sockets are closed before this
/// returns: the test's server binds the port a moment later.
pub fn free_ports<const N: usize>() -> [u16; N] {
    let mut seen = HashSet::new();
    let mut out = [0u16; N];
    for slot in &mut out {
        *slot = loop {
            let tcp = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("a free TCP port");
            let p = tcp.local_addr().expect("bound").port();
            if seen.contains(&p) || UdpSocket::bind((Ipv4Addr::LOCALHOST, p)).is_err() {
                continue;
            }
            seen.insert(p);
            break p;
        };
    }
    out
}

/// One free port ([`free_ports`]).
pub fn free_port() -> u16 {
    free_ports::<1>()[0]
}

/// Two free ports as command-line arguments: typically the TCP port of
/// the out-of-band exchange (`-p`) and the RoCE UDP port (`--roce-port`).
pub fn port_args() -> (String, String) {
    let [a, b] = free_ports();
    (a.to_string(), b.to_string())
}

#[cfg(test)]
mod tests {
    use super::free_ports;

    #[test]
    fn ports_are_distinct_and_bindable() {
        let ps: [u16; 8] = free_ports();
        for (i, p) in ps.iter().enumerate() {
            assert!(*p != 0 && !ps[..i].contains(p), "{ps:?}");
            std::net::UdpSocket::bind(("127.0.0.1", *p)).expect("still free");
        }
    }
}
