//! Processes sharing one address (docs/host.md, docs/shm.md): this test
//! binary runs itself as the other process, its role chosen by an
//! environment variable (`child_role` does nothing without it). Both bind
//! `UdpConfig::share` on 127.0.0.1 and one port; each claims a QPN; what
//! one sends to the other's QPN reaches it through a ring, what it hands
//! to `forward` too (flagged, with the original source), and a killed
//! child's QPN is found gone and claimed again. Every wait is bounded,
//! and every child is killed when its test ends.

#![cfg(target_os = "linux")]

use std::io;
use std::net::{IpAddr, Ipv4Addr, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use roce_io::{Backend, Forwarded, Nanos, PacketBatch, RxMeta, UdpBackend, UdpConfig};
use roce_testkit::frames;
use roce_wire::{
    icrc, BthRepr, ExtHeaders, FrameRepr, IpRepr, Opcode, Owner, Psn, Qpn, RocePacket, RxHeader,
    Transmit,
};

const ROLE: &str = "ROCE_SHARE_TEST_ROLE";
const DIR: &str = "ROCE_SHARE_TEST_DIR";
const PORT: &str = "ROCE_SHARE_TEST_PORT";
const QPN: &str = "ROCE_SHARE_TEST_QPN";

/// The parent's QPN and the child's.
const QA: u32 = 0x00_0a11;
const QB: u32 = 0x00_0b22;

fn lo() -> IpAddr {
    IpAddr::V4(Ipv4Addr::LOCALHOST)
}

fn now() -> Nanos {
    use std::sync::OnceLock;
    static T0: OnceLock<Instant> = OnceLock::new();
    T0.get_or_init(Instant::now).elapsed().as_nanos() as Nanos
}

fn config(dir: &Path, port: u16) -> UdpConfig {
    UdpConfig::new(lo())
        .port(port)
        .remote_port(port)
        .share(true)
        .share_dir(dir)
        .shm_ring(1 << 16)
}

/// A shared backend on a port nobody else holds (`base` apart per test:
/// tests of one binary run at once, and shared sockets would join).
fn bind_shared(dir: &Path, base: u16) -> (UdpBackend, u16) {
    for attempt in 0..50u16 {
        let port =
            20_000 + base + (std::process::id() as u16).wrapping_mul(13) % 2000 + attempt * 7;
        // Below the ephemeral range (32768-), where no other socket of
        // the host lands by chance. Free now: a plain socket binds (and
        // lets go at once).
        if UdpSocket::bind((Ipv4Addr::LOCALHOST, port)).is_err() {
            continue;
        }
        if let Ok(b) = UdpBackend::bind(config(dir, port)) {
            return (b, port);
        }
    }
    panic!("no free port");
}

/// An RC SEND_ONLY from `src`:`sport` to 127.0.0.1, QPN `qpn`, as the
/// engine emits it.
fn datagram(src: Ipv4Addr, sport: u16, qpn: u32, psn: u32) -> Vec<u8> {
    let data = [psn as u8; 40];
    let repr = FrameRepr {
        eth: None,
        ip: IpRepr::V4(frames::ipv4(src, Ipv4Addr::LOCALHOST)),
        udp: frames::udp(sport),
        bth: BthRepr::new(Opcode::RC_SEND_ONLY, Qpn::new(qpn), Psn::new(psn)),
        ext: ExtHeaders::default(),
        payload: &data,
    };
    frames::try_emit(&repr).expect("emit")
}

/// A hand-made datagram `d` as a UDP socket receiver has it: its header
/// as the socket shows it (no IPv4 ID) and its UDP payload.
fn as_received(d: &[u8]) -> (RxHeader, &[u8]) {
    let t = Transmit::of_datagram(d).expect("a RoCE datagram");
    let h = RxHeader::new(t.src, t.destination.ip(), t.tos());
    (h, &d[t.header_len()..])
}

/// The `i`-th datagram of `rx` (a UDP payload) parsed as the engine
/// parses it, with its header, and whether its ICRC holds as the engine
/// checks it (an unknown IPv4 ID assumed 0 or a GSO segment's).
fn parsed(rx: &PacketBatch, i: usize) -> (RocePacket<'_>, RxHeader, bool) {
    let h = rx.header(i).expect("a UDP payload");
    let ip = h.ip_repr().expect("one address family");
    let p = RocePacket::parse_udp_payload(ip, h.src.port(), rx.get(i)).expect("a RoCE datagram");
    let c = p.computed_icrc();
    let ok = c == p.icrc
        || (!h.exact() && icrc::solve_ipv4_id(c, p.icrc, p.ip_len() - icrc::LEN, 127).is_some());
    (p, h, ok)
}

fn send(b: &mut UdpBackend, d: &[u8]) {
    let mut tx = PacketBatch::new(1, 9216);
    assert!(tx.push(d));
    assert_eq!(b.send(now(), &tx).expect("send"), 1);
}

/// Writes `text` to `path` whole (a rename), so a reader never sees half.
fn publish(path: &Path, text: &str) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

/// Waits until `path` holds something `ok` accepts; its text, or `None`
/// after `limit`. `pump` runs between looks.
fn wait_for(
    path: &Path,
    limit: Duration,
    mut ok: impl FnMut(&str) -> bool,
    mut pump: impl FnMut(),
) -> Option<String> {
    let t = Instant::now();
    loop {
        if let Ok(s) = std::fs::read_to_string(path) {
            if ok(&s) {
                return Some(s);
            }
        }
        if t.elapsed() > limit {
            return None;
        }
        pump();
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// A child process serving QPN `qpn`, killed (SIGKILL) and reaped when
/// dropped.
struct Kid(Child);

impl Kid {
    fn spawn(dir: &Path, port: u16, qpn: u32) -> Kid {
        let exe = std::env::current_exe().unwrap();
        Kid(Command::new(exe)
            .args(["--exact", "child_role", "--nocapture", "--test-threads=1"])
            .env(ROLE, "serve")
            .env(DIR, dir)
            .env(PORT, port.to_string())
            .env(QPN, qpn.to_string())
            .stdout(Stdio::null())
            .spawn()
            .unwrap())
    }

    fn file(&self, dir: &Path, what: &str) -> PathBuf {
        dir.join(format!("{what}-{}", self.0.id()))
    }

    fn signal(&self, sig: nix::sys::signal::Signal) {
        let pid = nix::unistd::Pid::from_raw(self.0.id() as i32);
        nix::sys::signal::kill(pid, sig).unwrap();
    }

    /// Returns once the child is stopped (state T in /proc: a signal
    /// takes effect after `kill` returns, when the child is next
    /// scheduled), at most 10 s.
    fn wait_stopped(&self) {
        let stat = format!("/proc/{}/stat", self.0.id());
        let t = Instant::now();
        loop {
            let s = std::fs::read_to_string(&stat).unwrap_or_default();
            // pid (comm) STATE ...: the state follows the last ')'.
            let state = s
                .rsplit_once(')')
                .map(|(_, r)| r.trim_start().chars().next());
            if state == Some(Some('T')) {
                return;
            }
            assert!(t.elapsed() < Duration::from_secs(10), "not stopped: {s}");
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// SIGKILL, and waits for the end.
    fn kill(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for Kid {
    fn drop(&mut self) {
        self.kill();
    }
}

/// One received datagram as the child logs it: PSN, source, source port,
/// forwarded, header exact, ICRC verified.
#[derive(Debug, PartialEq, Eq)]
struct Got {
    psn: u32,
    src: IpAddr,
    sport: u16,
    forwarded: bool,
    exact: bool,
    icrc_ok: bool,
}

fn parse_log(s: &str) -> Vec<Got> {
    s.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            (f.len() == 6).then(|| Got {
                psn: f[0].parse().unwrap(),
                src: f[1].parse().unwrap(),
                sport: f[2].parse().unwrap(),
                forwarded: f[3] == "1",
                exact: f[4] == "1",
                icrc_ok: f[5] == "1",
            })
        })
        .collect()
}

/// The child's side. Without the role variable: nothing.
#[test]
fn child_role() {
    let Ok(_role) = std::env::var(ROLE) else {
        return;
    };
    let dir = PathBuf::from(std::env::var_os(DIR).unwrap());
    let port: u16 = std::env::var(PORT).unwrap().parse().unwrap();
    let qpn: u32 = std::env::var(QPN).unwrap().parse().unwrap();
    let me = std::process::id();
    let mut b = UdpBackend::bind(config(&dir, port)).expect("a shared bind");
    let claimed = b.claim(lo(), Owner::Qp(qpn)).expect("claim");
    publish(
        &dir.join(format!("ready-{me}")),
        if claimed { "claimed" } else { "taken" },
    );
    let mut rx = PacketBatch::new(64, 9216);
    let mut log = String::new();
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(30) {
        let n = b.recv(now(), &mut rx).expect("recv");
        for i in 0..n {
            let meta = rx.meta(i);
            let (p, h, icrc_ok) = parsed(&rx, i);
            let dest = p.bth.dest_qp.value();
            if dest != qpn {
                // The driver's part: the engine has no such QP.
                b.forward(now(), h, rx.get(i), meta, Owner::Qp(dest));
                continue;
            }
            log.push_str(&format!(
                "{} {} {} {} {} {}\n",
                p.bth.psn.value(),
                p.ip.src(),
                p.udp.src_port,
                u8::from(meta.forwarded),
                u8::from(h.exact()),
                u8::from(icrc_ok),
            ));
        }
        if n > 0 {
            publish(&dir.join(format!("got-{me}")), &log);
            let s = b.stats();
            publish(
                &dir.join(format!("stats-{me}")),
                &format!("{} {}", s.flow_sockets_opened, s.flow_rx_datagrams),
            );
        } else {
            let _ = b.wait_readable(Some(Duration::from_millis(5)));
        }
    }
}

/// The parent's receive pump, as a driver: what is not QPN `mine`
/// is forwarded; its own datagrams are returned.
fn pump(a: &mut UdpBackend, mine: u32) -> Vec<(u32, RxHeader, bool)> {
    let mut rx = PacketBatch::new(64, 9216);
    let mut own = Vec::new();
    let n = a.recv(now(), &mut rx).expect("recv");
    for i in 0..n {
        let (p, h, icrc_ok) = parsed(&rx, i);
        let dest = p.bth.dest_qp.value();
        if dest == mine {
            own.push((p.bth.psn.value(), h, icrc_ok));
        } else {
            a.forward(now(), h, rx.get(i), rx.meta(i), Owner::Qp(dest));
        }
    }
    own
}

#[test]
fn two_processes_share_one_address_and_forward_to_the_owner() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let (mut a, port) = bind_shared(dir, 0);
    assert!(a.claim(lo(), Owner::Qp(QA)).unwrap());
    assert!(
        a.claim(lo(), Owner::Qp(QA)).unwrap(),
        "held already: still ours"
    );
    let kid = Kid::spawn(dir, port, QB);
    let ready = wait_for(
        &kid.file(dir, "ready"),
        Duration::from_secs(10),
        |_| true,
        || {},
    );
    assert_eq!(
        ready.as_deref(),
        Some("claimed"),
        "the child bound and claimed"
    );
    assert!(!a.claim(lo(), Owner::Qp(QB)).unwrap(), "the child holds it");

    // Datagrams to the child's QPN at the shared address: the first by
    // UDP (to whichever process the kernel picks; the parent forwards
    // what it gets), then through the child's ring, found by QPN.
    let src = Ipv4Addr::LOCALHOST;
    let mut psn = 0;
    let t = Instant::now();
    while a.stats().shm_qpn_routes < 20 {
        assert!(t.elapsed() < Duration::from_secs(5), "no ring by QPN");
        send(&mut a, &datagram(src, 0xC000 + (psn % 4) as u16, QB, psn));
        pump(&mut a, QA);
        psn += 1;
        std::thread::sleep(Duration::from_micros(300));
    }
    let sent = psn;
    let got = wait_for(
        &kid.file(dir, "got"),
        Duration::from_secs(5),
        |s| parse_log(s).len() >= sent as usize,
        || drop(pump(&mut a, QA)),
    )
    .expect("the child got every datagram");
    let got = parse_log(&got);
    let mut psns: Vec<u32> = got.iter().map(|g| g.psn).collect();
    psns.sort_unstable();
    assert_eq!(psns, (0..sent).collect::<Vec<_>>(), "each once");
    for g in &got {
        assert_eq!(g.src, lo(), "{g:?}");
        assert_eq!(g.sport, 0xC000 + (g.psn % 4) as u16, "{g:?}");
        assert!(!g.exact || g.icrc_ok, "{g:?}");
    }
    let s = a.stats();
    assert!(s.shm_tx_datagrams >= 20 && s.shm_links_out >= 1, "{s:?}");
    assert_eq!(s.tx_datagrams + s.shm_qpn_routes, u64::from(sent), "{s:?}");

    // A datagram handed to forward: the original source, flagged.
    let whole = datagram(Ipv4Addr::new(127, 0, 0, 9), 0xD00D, QB, 9000);
    let (h, d) = as_received(&whole);
    assert_eq!(
        a.forward(now(), h, d, RxMeta::default(), Owner::Qp(QB)),
        Forwarded::Sent
    );
    let got = wait_for(
        &kid.file(dir, "got"),
        Duration::from_secs(5),
        |s| parse_log(s).iter().any(|g| g.psn == 9000),
        || drop(pump(&mut a, QA)),
    )
    .expect("the forwarded datagram arrives");
    let g = parse_log(&got).into_iter().find(|g| g.psn == 9000).unwrap();
    let want = Got {
        psn: 9000,
        src: "127.0.0.9".parse().unwrap(),
        sport: 0xD00D,
        forwarded: true,
        exact: false,
        icrc_ok: true,
    };
    assert_eq!(g, want);
    assert!(a.stats().shm_forwarded >= 1);
    // Never twice, never back to itself, never to nobody.
    let fwd = RxMeta::default().with_forwarded(true);
    let no = a.stats().shm_forward_no_owner;
    assert_eq!(
        a.forward(now(), h, d, fwd, Owner::Qp(QB)),
        Forwarded::NoOwner
    );
    assert_eq!(
        a.forward(now(), h, d, RxMeta::default(), Owner::Qp(QA)),
        Forwarded::NoOwner
    );
    assert_eq!(
        a.forward(now(), h, d, RxMeta::default(), Owner::Qp(0x333)),
        Forwarded::NoOwner
    );
    assert_eq!(
        a.forward(now(), h, d, RxMeta::default(), Owner::Service(7)),
        Forwarded::NoOwner
    );
    assert_eq!(a.stats().shm_forward_no_owner, no + 4);

    // To its own QPN at its own address: its own receive path.
    send(&mut a, &datagram(src, 0xC000, QA, 77));
    let own = pump(&mut a, QA);
    assert_eq!(own.len(), 1, "delivered at once, without the kernel");
    let (psn, h, icrc_ok) = own[0];
    assert_eq!(psn, 77);
    assert!(h.exact() && icrc_ok, "the engine's own header, exact");
    assert_eq!(a.stats().shm_local, 1);

    // The child killed: its slot is found gone and reaped, its QPN free.
    let mut kid = kid;
    kid.kill();
    // Its end is seen on the link's connection at the next look at the
    // descriptors (before a sleep, or a busy receiver's millisecond
    // housekeeping), not at the next liveness check.
    let t = Instant::now();
    while a.stats().shm_links_gone == 0 {
        assert!(t.elapsed() < Duration::from_secs(3), "the hang-up unseen");
        a.prepare_wait(now());
        std::thread::sleep(Duration::from_millis(1));
    }
    let t = Instant::now();
    while a.forward(now(), h, d, RxMeta::default(), Owner::Qp(QB)) != Forwarded::NoOwner {
        assert!(
            t.elapsed() < Duration::from_secs(3),
            "the dead child still owns"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(a.stats().shm_reaped >= 1, "{:?}", a.stats());
    assert_eq!(a.host_table().unwrap().qpn_slot(QB), None);
    let kid2 = Kid::spawn(dir, port, QB);
    let ready = wait_for(
        &kid2.file(dir, "ready"),
        Duration::from_secs(10),
        |_| true,
        || {},
    );
    assert_eq!(
        ready.as_deref(),
        Some("claimed"),
        "a new process takes the QPN"
    );

    // An owner alive but not reachable now (stopped before it took the
    // ring: the hello goes unanswered for its 1 s): the datagram is
    // dropped unanswered, not answered as nobody's, and the slot stays.
    kid2.signal(nix::sys::signal::Signal::SIGSTOP);
    kid2.wait_stopped();
    let t = Instant::now();
    let unreachable = a.stats().shm_forward_unreachable;
    loop {
        let f = a.forward(now(), h, d, RxMeta::default(), Owner::Qp(QB));
        assert_ne!(f, Forwarded::NoOwner, "a live owner is nobody's");
        if f == Forwarded::Unreachable {
            break;
        }
        assert!(
            t.elapsed() < Duration::from_secs(4),
            "never refused: {f:?} {:?}",
            a.stats()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(a.stats().shm_forward_unreachable, unreachable + 1);
    assert!(a.host_table().unwrap().qpn_slot(QB).is_some(), "not reaped");
    // Running again, it is reached again once the refusal's retry time
    // has passed.
    kid2.signal(nix::sys::signal::Signal::SIGCONT);
    let t = Instant::now();
    while a.forward(now(), h, d, RxMeta::default(), Owner::Qp(QB)) != Forwarded::Sent {
        assert!(t.elapsed() < Duration::from_secs(4), "not reached again");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_backend_that_does_not_share_cannot_bind_a_shared_address() {
    let tmp = tempfile::tempdir().unwrap();
    let (a, port) = bind_shared(tmp.path(), 2500);
    let plain = UdpConfig::new(lo()).port(port);
    let e = UdpBackend::bind(plain).expect_err("the address is shared");
    assert_eq!(e.kind(), io::ErrorKind::AddrInUse, "{e}");
    assert!(e.to_string().contains("already in use"), "{e}");
    // A second shared backend of this process joins, in a slot of its
    // own, and claims go to one of them.
    let mut b = UdpBackend::bind(config(tmp.path(), port)).expect("a second shared bind");
    assert_ne!(
        a.host_table().unwrap().slot(),
        b.host_table().unwrap().slot()
    );
    assert!(b.claim(lo(), Owner::CommId(5)).unwrap());
    let mut a = a;
    assert!(!a.claim(lo(), Owner::CommId(5)).unwrap());
    b.release(lo(), Owner::CommId(5));
    assert!(a.claim(lo(), Owner::CommId(5)).unwrap());
    drop(a);
    drop(b);
    // All gone: a plain bind works again. (A child another test of this
    // binary forks at this moment holds copies of the sockets until its
    // exec closes them: give that a moment.)
    let end = std::time::Instant::now() + std::time::Duration::from_secs(2);
    loop {
        match UdpBackend::bind(UdpConfig::new(lo()).port(port)) {
            Ok(_) => break,
            Err(e) if std::time::Instant::now() < end => {
                assert_eq!(e.kind(), io::ErrorKind::AddrInUse, "{e}");
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            Err(e) => panic!("still in use after both were dropped: {e}"),
        }
    }
}

/// The child's flow counters: sockets opened, datagrams received on them.
fn kid_flows(kid: &Kid, dir: &Path) -> (u64, u64) {
    let s = std::fs::read_to_string(kid.file(dir, "stats")).unwrap_or_default();
    let mut f = s.split(' ').map(|x| x.parse().unwrap_or(0));
    (f.next().unwrap_or(0), f.next().unwrap_or(0))
}

/// Sends `d`'s UDP payload from the plain socket `r` to the shared port.
fn send_raw(r: &UdpSocket, port: u16, d: &[u8]) {
    r.send_to(&d[28..], (Ipv4Addr::LOCALHOST, port)).unwrap();
}

/// A remote peer (a plain UDP socket) sends to the child's QPN from one
/// port; the kernel's pick for its flow is the parent, which forwards;
/// the child then opens a flow socket, and the rest reaches the child
/// directly, each datagram once (docs/host.md, "Steering").
#[test]
fn a_forwarded_flow_is_steered_to_its_owner() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let (mut a, port) = bind_shared(dir, 5000);
    assert!(a.claim(lo(), Owner::Qp(QA)).unwrap());
    let kid = Kid::spawn(dir, port, QB);
    let ready = wait_for(
        &kid.file(dir, "ready"),
        Duration::from_secs(10),
        |_| true,
        || {},
    );
    assert_eq!(ready.as_deref(), Some("claimed"));

    // A source port whose flow the kernel gives the parent: its first
    // datagram is forwarded.
    let mut psn = 0u32;
    let mut remote = None;
    for _ in 0..64 {
        let r = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let sport = r.local_addr().unwrap().port();
        let before = a.stats().shm_forwarded;
        send_raw(&r, port, &datagram(Ipv4Addr::LOCALHOST, sport, QB, psn));
        psn += 1;
        let t = Instant::now();
        while t.elapsed() < Duration::from_millis(20) && a.stats().shm_forwarded == before {
            pump(&mut a, QA);
        }
        if a.stats().shm_forwarded > before {
            remote = Some((r, sport));
            break;
        }
    }
    let (r, sport) = remote.expect("a flow the kernel gives the parent");

    // Forwarded until the child steers the flow to itself.
    let t = Instant::now();
    while kid_flows(&kid, dir).0 == 0 {
        assert!(t.elapsed() < Duration::from_secs(5), "no flow socket");
        send_raw(&r, port, &datagram(Ipv4Addr::LOCALHOST, sport, QB, psn));
        psn += 1;
        for _ in 0..5 {
            pump(&mut a, QA);
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    // What the parent had queued is forwarded still.
    for _ in 0..20 {
        pump(&mut a, QA);
        std::thread::sleep(Duration::from_millis(1));
    }
    let forwarded = a.stats().shm_forwarded;
    let steered_from = psn;
    for _ in 0..40 {
        send_raw(&r, port, &datagram(Ipv4Addr::LOCALHOST, sport, QB, psn));
        psn += 1;
        pump(&mut a, QA);
        std::thread::sleep(Duration::from_micros(500));
    }
    let sent = psn;
    let got = wait_for(
        &kid.file(dir, "got"),
        Duration::from_secs(5),
        |s| parse_log(s).len() >= sent as usize,
        || drop(pump(&mut a, QA)),
    )
    .expect("the child got every datagram");
    let got = parse_log(&got);
    let mut psns: Vec<u32> = got.iter().map(|g| g.psn).collect();
    psns.sort_unstable();
    assert_eq!(psns, (0..sent).collect::<Vec<_>>(), "each once");
    for g in &got {
        assert_eq!(g.src, lo(), "{g:?}");
        assert!(!g.exact || g.icrc_ok, "{g:?}");
        if g.psn >= steered_from {
            assert!(!g.forwarded, "steered, yet forwarded: {g:?}");
        }
    }
    assert_eq!(a.stats().shm_forwarded, forwarded, "{:?}", a.stats());
    let t = Instant::now();
    while kid_flows(&kid, dir).1 < u64::from(sent - steered_from) {
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "{:?}",
            kid_flows(&kid, dir)
        );
        std::thread::sleep(Duration::from_millis(2));
    }
    assert_eq!(kid_flows(&kid, dir).0, 1, "one flow socket");
}
