//! Helpers shared by the socket tests: RoCE datagrams built with
//! `roce_wire`, free ports, and network namespaces that clean up after
//! themselves.
#![allow(dead_code)]

use std::net::IpAddr;
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

use roce_io::{Backend, PacketBatch, UdpBackend, UdpConfig};
use roce_testkit::frames;
use roce_wire::{
    BthRepr, Ecn, ExtHeaders, FrameRepr, IpRepr, Ipv4Repr, Ipv6Repr, Opcode, Psn, Qpn, UdpChecksum,
    UdpRepr,
};

pub(crate) const SLOT: usize = 4096 + 128;

/// What one test datagram carries, so the receiver can check it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Spec {
    pub(crate) src: IpAddr,
    pub(crate) dst: IpAddr,
    pub(crate) sport: u16,
    pub(crate) dscp: u8,
    pub(crate) ecn: Ecn,
    pub(crate) psn: u32,
    pub(crate) len: usize,
}

pub(crate) fn payload(psn: u32, len: usize) -> Vec<u8> {
    (0..len).map(|i| (i as u32 * 31 + psn) as u8).collect()
}

/// Emits an RC SEND_ONLY as roce-core would: IPv4 ID 0, DF, UDP
/// checksum 0 (IPv4) or computed (IPv6).
pub(crate) fn emit(s: &Spec, slot: &mut [u8]) -> usize {
    let ip = match (s.src, s.dst) {
        (IpAddr::V4(a), IpAddr::V4(b)) => IpRepr::V4(Ipv4Repr {
            dscp: s.dscp,
            ecn: s.ecn,
            ..frames::ipv4(a, b)
        }),
        (IpAddr::V6(a), IpAddr::V6(b)) => IpRepr::V6(Ipv6Repr {
            src: a,
            dst: b,
            dscp: s.dscp,
            ecn: s.ecn,
            flow_label: 0x12345,
            hop_limit: 64,
            payload_len: 0,
        }),
        _ => panic!("mixed families"),
    };
    let data = payload(s.psn, s.len);
    let repr = FrameRepr {
        eth: None,
        ip,
        udp: UdpRepr {
            checksum: if s.src.is_ipv4() {
                UdpChecksum::Zero
            } else {
                UdpChecksum::Compute
            },
            ..frames::udp(s.sport)
        },
        bth: BthRepr::new(
            Opcode::RC_SEND_ONLY,
            Qpn::new(0x100 + s.psn % 7),
            Psn::new(s.psn),
        ),
        ext: ExtHeaders::default(),
        payload: &data,
    };
    repr.emit(slot).expect("emit")
}

/// Binds a backend pair on a port both addresses have free.
pub(crate) fn pair(
    a: IpAddr,
    b: IpAddr,
    tweak: impl Fn(UdpConfig) -> UdpConfig,
) -> (UdpBackend, UdpBackend) {
    for attempt in 0..50u16 {
        let port = 20_000 + ((std::process::id() as u16).wrapping_mul(7) % 5000) + attempt * 101;
        let ca = tweak(UdpConfig::new(a).port(port).remote_port(port));
        let cb = tweak(UdpConfig::new(b).port(port).remote_port(port));
        if let (Ok(x), Ok(y)) = (UdpBackend::bind(ca), UdpBackend::bind(cb)) {
            return (x, y);
        }
    }
    panic!("no free port pair");
}

/// Sends everything in `tx` (retrying what the socket buffer did not take).
pub(crate) fn send_all(b: &mut impl Backend, tx: &mut PacketBatch) {
    for _ in 0..1000 {
        if tx.is_empty() {
            return;
        }
        let n = b.send(0, tx).expect("send");
        tx.drain_front(n);
        if !tx.is_empty() {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }
    panic!("could not send");
}

/// Receives until `want` datagrams or two idle seconds; returns copies
/// with their metadata.
/// A received datagram as a receive batch held it: its bytes (a UDP
/// payload when `header` is there, else a whole IP datagram), metadata
/// and header.
#[derive(Clone, Debug)]
pub(crate) struct Got {
    pub(crate) bytes: Vec<u8>,
    pub(crate) meta: roce_io::RxMeta,
    pub(crate) header: Option<roce_wire::RxHeader>,
}

impl Got {
    /// The `i`-th datagram of `rx`.
    pub(crate) fn of(rx: &PacketBatch, i: usize) -> Got {
        Got {
            bytes: rx.get(i).to_vec(),
            meta: rx.meta(i),
            header: rx.header(i),
        }
    }

    /// The datagram parsed as the engine parses it.
    pub(crate) fn packet(&self) -> roce_wire::Result<roce_wire::RocePacket<'_>> {
        match self.header {
            Some(h) => {
                let ip = h
                    .ip_repr()
                    .ok_or(roce_wire::Error::InvalidField("address families"))?;
                roce_wire::RocePacket::parse_udp_payload(ip, h.src.port(), &self.bytes)
            }
            None => roce_wire::RocePacket::parse_ip(&self.bytes),
        }
    }

    /// Every covered header field is known (the engine checks the ICRC
    /// as it is).
    pub(crate) fn exact(&self) -> bool {
        self.header.map_or(self.meta.header_exact, |h| h.exact())
    }

    /// The ICRC matches as the engine's default policy finds it: over the
    /// header as known, or, for an IPv4 payload without its
    /// identification, assuming 0 or a UDP GSO segment's (1..=127).
    pub(crate) fn icrc_ok(&self) -> bool {
        let Ok(p) = self.packet() else {
            return false;
        };
        let c = p.computed_icrc();
        if c == p.icrc || self.exact() {
            return c == p.icrc;
        }
        roce_wire::icrc::solve_ipv4_id(c, p.icrc, p.ip_len() - roce_wire::icrc::LEN, 127).is_some()
    }
}

pub(crate) fn recv_n(b: &mut UdpBackend, want: usize) -> Vec<Got> {
    let mut rx = PacketBatch::new(64, 9216);
    let mut out = Vec::new();
    while out.len() < want {
        let n = b.recv(0, &mut rx).expect("recv");
        for i in 0..n {
            out.push(Got::of(&rx, i));
        }
        if n == 0
            && !b
                .wait_readable(Some(std::time::Duration::from_secs(2)))
                .unwrap()
        {
            break;
        }
    }
    out
}

pub(crate) fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

/// Runs a command, returning whether it succeeded.
pub(crate) fn run(cmd: &str, args: &[&str]) -> bool {
    Command::new(cmd)
        .args(args)
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

static NS_SEQ: AtomicU32 = AtomicU32::new(0);

/// A network namespace created for one test and deleted on drop (also on
/// panic).
pub(crate) struct Netns {
    pub(crate) name: String,
}

impl Netns {
    /// Creates `rtest<pid>x<n><tag>`, with `lo` up; `Err` says why not.
    pub(crate) fn new(tag: &str) -> Result<Netns, String> {
        if !is_root() {
            return Err("not root".into());
        }
        let n = NS_SEQ.fetch_add(1, Ordering::Relaxed);
        let name = format!("rt{}x{n}{tag}", std::process::id());
        if !run("ip", &["netns", "add", &name]) {
            return Err(format!("`ip netns add {name}` failed"));
        }
        let ns = Netns { name };
        if !ns.exec(&["ip", "link", "set", "lo", "up"]) {
            return Err("cannot bring lo up in the namespace".into());
        }
        Ok(ns)
    }

    /// Runs a command inside the namespace.
    pub(crate) fn exec(&self, args: &[&str]) -> bool {
        let mut v = vec!["netns", "exec", &self.name];
        v.extend_from_slice(args);
        run("ip", &v)
    }

    /// Runs `f` on a thread that has entered the namespace; sockets it
    /// creates live there.
    pub(crate) fn run<T: Send + 'static>(&self, f: impl FnOnce() -> T + Send + 'static) -> T {
        let path = format!("/run/netns/{}", self.name);
        std::thread::spawn(move || {
            let fd = std::fs::File::open(&path).expect("open netns");
            nix::sched::setns(&fd, nix::sched::CloneFlags::CLONE_NEWNET).expect("setns");
            f()
        })
        .join()
        .expect("namespace thread panicked")
    }

    /// Enters the namespace on the current thread (for threads the test
    /// spawns itself).
    pub(crate) fn enter(&self) {
        let fd = std::fs::File::open(format!("/run/netns/{}", self.name)).expect("open netns");
        nix::sched::setns(&fd, nix::sched::CloneFlags::CLONE_NEWNET).expect("setns");
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        run("ip", &["netns", "del", &self.name]);
    }
}
