//! Running out of file descriptors while opening per-QP source-port
//! sockets does not give those ports up for good (its own test binary: it
//! changes the process's RLIMIT_NOFILE).
mod common;

use std::net::IpAddr;

use common::*;
use roce_io::{PacketBatch, UdpBackend, UdpConfig};
use roce_wire::Ecn;

fn send_ports(a: &mut UdpBackend, s: IpAddr, d: IpAddr, ports: std::ops::Range<u16>) {
    let mut tx = PacketBatch::new(ports.len(), SLOT);
    for (i, p) in ports.enumerate() {
        let sp = Spec {
            src: s,
            dst: d,
            sport: p,
            dscp: 26,
            ecn: Ecn::Ect0,
            psn: i as u32,
            len: 32,
        };
        tx.push_with(|slot| emit(&sp, slot));
    }
    send_all(a, &mut tx);
}

#[test]
fn ports_refused_for_emfile_are_tried_again() {
    let (s, d) = ("127.0.0.71".parse().unwrap(), "127.0.0.72".parse().unwrap());
    let mut a = UdpBackend::bind(UdpConfig::new(s).port(25_970).remote_port(25_971)).unwrap();
    let mut b = UdpBackend::bind(UdpConfig::new(d).port(25_971).remote_port(25_970)).unwrap();
    let open = std::fs::read_dir("/proc/self/fd").unwrap().count() as u64;
    let mut old = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one rlimit into `old`, which is one.
    unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut old) };
    let low = libc::rlimit {
        rlim_cur: open + 10,
        rlim_max: old.rlim_max,
    };
    // SAFETY: setrlimit reads one rlimit; this test binary has no other
    // thread that could mind the lower limit.
    unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &low) };
    send_ports(&mut a, s, d, 0xc500..0xc500 + 30);
    let st = a.stats();
    println!(
        "low limit: opened={} bind_failures={} evictions={} rewritten={}",
        st.sport_sockets_opened, st.sport_bind_failures, st.sport_evictions, st.tx_sport_rewritten
    );
    println!(
        "other files while the cache holds the fds: {:?}",
        std::fs::File::open("/proc/self/status").map(|_| ())
    );
    // SAFETY: as above, restoring the limit read first.
    unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &old) };
    let before = a.stats().tx_sport_rewritten;
    send_ports(&mut a, s, d, 0xc500..0xc500 + 30);
    let st = a.stats();
    println!(
        "limit restored: opened={} bind_failures={} rewritten again={}",
        st.sport_sockets_opened,
        st.sport_bind_failures,
        st.tx_sport_rewritten - before
    );
    let _ = recv_n(&mut b, 60);
    assert_eq!(
        st.tx_sport_rewritten - before,
        0,
        "ports refused only for EMFILE stay on the fallback path"
    );
}
