//! Port numbers for the servers a test starts, free when asked and
//! outside the kernel's ephemeral range, so that tests running at once
//! (several test binaries, or nextest's one process per test) neither
//! pick the same ones nor lose one to a client's outgoing connection
//! before their server binds it.

use std::collections::HashSet;
use std::net::{Ipv4Addr, TcpListener, UdpSocket};
use std::time::{SystemTime, UNIX_EPOCH};

/// Where test ports are chosen from when the ephemeral range leaves room
/// below it (Linux's default range starts at 32768).
const FIRST: u16 = 10_000;

/// `N` distinct ports that were free on 127.0.0.1 for both TCP and UDP
/// when asked. Chosen at random below the kernel's ephemeral range
/// (`/proc/sys/net/ipv4/ip_local_port_range`), where no outgoing
/// connection takes a port; where that range leaves no room, the
/// kernel's choice for a bind to port 0. The sockets are closed before
/// this returns: the test's server binds the port a moment later.
pub fn free_ports<const N: usize>() -> [u16; N] {
    let below = ephemeral_start().filter(|&s| s > FIRST + 1_000);
    let mut rng = seed();
    let mut seen = HashSet::new();
    let mut out = [0u16; N];
    for slot in &mut out {
        *slot = loop {
            let p = match below {
                Some(end) => FIRST + (next(&mut rng) % u64::from(end - FIRST)) as u16,
                None => kernel_choice(),
            };
            if !seen.contains(&p) && bindable(p) {
                seen.insert(p);
                break p;
            }
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

fn bindable(p: u16) -> bool {
    TcpListener::bind((Ipv4Addr::LOCALHOST, p)).is_ok()
        && UdpSocket::bind((Ipv4Addr::LOCALHOST, p)).is_ok()
}

fn kernel_choice() -> u16 {
    let tcp = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("a free TCP port");
    tcp.local_addr().expect("bound").port()
}

/// The first port of the kernel's ephemeral range, if it can be read.
fn ephemeral_start() -> Option<u16> {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// A seed that differs between processes and calls: the clock's
/// nanoseconds and the process ID.
fn seed() -> u64 {
    let t = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    (t ^ (u64::from(std::process::id()) << 32)) | 1
}

/// xorshift64: enough to spread the tests' choices.
fn next(x: &mut u64) -> u64 {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    *x
}

#[cfg(test)]
mod tests {
    use super::{ephemeral_start, free_ports, FIRST};

    #[test]
    fn ports_are_distinct_bindable_and_below_the_ephemeral_range() {
        let ps: [u16; 8] = free_ports();
        for (i, p) in ps.iter().enumerate() {
            assert!(*p != 0 && !ps[..i].contains(p), "{ps:?}");
            std::net::UdpSocket::bind(("127.0.0.1", *p)).expect("still free");
            std::net::TcpListener::bind(("127.0.0.1", *p)).expect("still free");
            if let Some(start) = ephemeral_start().filter(|&s| s > FIRST + 1_000) {
                assert!((FIRST..start).contains(p), "{p} outside {FIRST}..{start}");
            }
        }
    }
}
