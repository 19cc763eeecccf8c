//! The attacks of issue 18, played against the real UDP backend on
//! loopback from plain unprivileged UDP sockets (which any local user
//! has): a forged WRITE with the identifiers an attacker would guess,
//! forged NAKs and ACKs from the peer's address and from a third one, a
//! SEND with Invalidate naming a local region, a CNP flood and a CM REQ
//! flood. Each asserts that the attack fails and that the victim's
//! session and memory are intact; a control shows that the same forged
//! packet with the real identifiers is taken, which is why they must not
//! be guessable (docs/security.md).
//!
//! Addresses 127.0.18.x and UDP port 18791 are this file's own; every
//! wait is bounded.

use std::net::{IpAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use roce_core::cc::CcConfig;
use roce_io::{UdpBackend, UdpConfig};
use roce_testkit::frames;
use roce_verbs::*;
use roce_wire::cm::{self as wcm, port_space, CmMessage, PathRepr, ReqRepr};
use roce_wire::{
    mad, AethRepr, BthRepr, DethRepr, ExtHeaders, Msn, NakCode, Opcode, Pkey, RethRepr, Syndrome,
};

const PORT: u16 = 18791;
const WAIT: Duration = Duration::from_secs(10);
const ALL: Access = Access(
    Access::LOCAL_WRITE.0
        | Access::REMOTE_WRITE.0
        | Access::REMOTE_READ.0
        | Access::REMOTE_ATOMIC.0,
);

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

/// A device on `addr` over the UDP backend (its own port on loopback).
fn open(addr: &str, cc: Option<CcConfig>) -> Context {
    let a = ip(addr);
    let mut last = None;
    // Another run of this file may still hold the port for a moment.
    for _ in 0..50 {
        match UdpBackend::bind(UdpConfig::new(a).port(PORT).remote_port(PORT)) {
            Ok(b) => {
                let mut cfg = DeviceConfig::new(a);
                if let Some(cc) = cc {
                    cfg.cc = cc;
                }
                return Context::open(b, cfg).unwrap();
            }
            Err(e) => last = Some(e),
        }
        thread::sleep(Duration::from_millis(100));
    }
    panic!("cannot bind {addr}:{PORT}: {last:?}");
}

struct Side {
    ctx: Context,
    pd: ProtectionDomain,
    cq: CompletionQueue,
    qp: QueuePair,
    mr: MemoryRegion,
    psn: Psn,
}

fn side(addr: &str, cc: Option<CcConfig>, fill: u8) -> Side {
    let ctx = open(addr, cc);
    let pd = ctx.alloc_pd();
    let cq = ctx.create_cq(8192, None).unwrap();
    let qp = pd
        .create_qp(&QpInitAttr::new(QpType::Rc, &cq, &cq))
        .unwrap();
    let mr = pd.reg_mr(vec![fill; 1 << 16], ALL).unwrap();
    // As an application should: a starting PSN from the OS.
    let psn = random_psn().unwrap();
    Side {
        ctx,
        pd,
        cq,
        qp,
        mr,
        psn,
    }
}

/// Two connected RC sides, A (the client) and B (the server).
fn pair(a: &str, b: &str, cc: Option<CcConfig>) -> (Side, Side) {
    let (sa, sb) = (side(a, cc, 0xaa), side(b, None, 0x11));
    let opts = ConnectOptions {
        access: ALL,
        ..ConnectOptions::default()
    };
    let (ea, eb) = (sa.qp.endpoint(sa.psn), sb.qp.endpoint(sb.psn));
    sa.qp.connect(sa.psn, &eb, &opts).unwrap();
    sb.qp.connect(sb.psn, &ea, &opts).unwrap();
    (sa, sb)
}

/// The UDP payload (BTH to ICRC) of a RoCE v2 packet from `src` → `dst`
/// with a valid ICRC: what an attacker's socket sends. The ICRC covers
/// the UDP source port, so it is the sending socket's.
fn forge(src: Src, dst: IpAddr, bth: BthRepr, ext: ExtHeaders, payload: &[u8]) -> Vec<u8> {
    let (IpAddr::V4(s), IpAddr::V4(d)) = (src.0, dst) else {
        unreachable!("IPv4 only here")
    };
    frames::datagram_v4(s, d, src.1, bth, ext, payload).split_off(28)
}

/// Where a forged packet comes from: address and UDP source port.
#[derive(Clone, Copy)]
struct Src(IpAddr, u16);

/// An attacker's plain UDP socket bound to `addr`, and its address.
fn attacker(addr: &str) -> (UdpSocket, Src) {
    let s = UdpSocket::bind((ip(addr), 0)).unwrap();
    let port = s.local_addr().unwrap().port();
    (s, Src(ip(addr), port))
}

fn send_all(s: &UdpSocket, to: &str, pkts: &[Vec<u8>]) {
    for (i, p) in pkts.iter().enumerate() {
        // A full socket buffer drops, as the network would; a short pause
        // every 512 datagrams lets a victim on a loaded machine keep up, so
        // that the attack is really delivered (~100 k datagrams/s).
        let _ = s.send_to(p, (ip(to), PORT));
        if i % 512 == 511 {
            thread::sleep(Duration::from_millis(2));
        }
    }
}

fn write_only(src: Src, dst: &str, qpn: u32, psn: u32, va: u64, rkey: u32, data: &[u8]) -> Vec<u8> {
    let bth = BthRepr::new(Opcode::RC_WRITE_ONLY, Qpn::new(qpn), Psn::new(psn));
    let ext = ExtHeaders {
        reth: Some(RethRepr {
            va,
            rkey: Rkey::new(rkey),
            dma_len: data.len() as u32,
        }),
        ..ExtHeaders::default()
    };
    forge(src, ip(dst), bth, ext, data)
}

fn aeth(src: Src, dst: &str, qpn: u32, psn: u32, syndrome: Syndrome) -> Vec<u8> {
    let bth = BthRepr::new(Opcode::RC_ACK, Qpn::new(qpn), Psn::new(psn));
    let ext = ExtHeaders {
        aeth: Some(AethRepr {
            syndrome,
            msn: Msn::new(0),
        }),
        ..ExtHeaders::default()
    };
    forge(src, ip(dst), bth, ext, &[])
}

fn cnp(src: Src, dst: &str, qpn: u32) -> Vec<u8> {
    let mut bth = BthRepr::new(Opcode::CNP, Qpn::new(qpn), Psn::new(0));
    bth.becn = true;
    forge(src, ip(dst), bth, ExtHeaders::default(), &[])
}

/// Everything B's region holds is still `fill`.
fn intact(mr: &MemoryRegion, fill: u8) -> bool {
    mr.to_vec().unwrap().iter().all(|&b| b == fill)
}

/// The session still works: A WRITEs a pattern to B and SENDs; both land.
fn session_works(a: &Side, b: &Side) {
    let inbox = b.pd.reg_mr(vec![0u8; 64], ALL).unwrap();
    b.qp.post_recv(RecvWr {
        wr_id: 900,
        sgl: vec![inbox.sge(0, 64)].into(),
    })
    .unwrap();
    a.mr.write(0, b"a real write").unwrap();
    let r = b.mr.remote();
    a.qp.post_send(SendWr::write(901, [a.mr.sge(0, 12)], r.at(100)))
        .unwrap();
    a.qp.post_send(SendWr::send(902, [a.mr.sge(0, 12)]))
        .unwrap();
    let got = a.cq.poll_until(2, WAIT).unwrap();
    assert_eq!(got.len(), 2, "the session's own work did not complete");
    assert!(
        got.iter().all(|c| c.status() == WcStatus::Success),
        "{got:?}"
    );
    let got = b.cq.poll_until(1, WAIT).unwrap();
    assert_eq!(got[0].status(), WcStatus::Success);
    let mut out = [0u8; 12];
    b.mr.read(100, &mut out).unwrap();
    assert_eq!(&out, b"a real write");
    assert_eq!((a.qp.state(), b.qp.state()), (QpState::Rts, QpState::Rts));
}

/// The identifiers an attacker used to guess (QPN 17 up, keys
/// `(slot+1) << 8 | tag`, address 0x1_0000_0000) are not what two
/// separate devices hand out; and a forged WRITE sweeping those guesses
/// from the peer's own address writes nothing.
#[test]
fn a_forged_write_with_guessed_identifiers_writes_nothing() {
    let (a, b) = pair("127.0.18.1", "127.0.18.2", None);
    let other = side("127.0.18.3", None, 0);
    let rb = b.mr.remote();
    for (qpn, key, addr) in [
        (b.qp.qpn().value(), rb.rkey.value(), rb.addr),
        (
            other.qp.qpn().value(),
            other.mr.rkey().value(),
            other.mr.addr(),
        ),
    ] {
        assert!(!(17..17 + 64).contains(&qpn), "QPN {qpn:#x} is guessable");
        assert_ne!(
            key & 0xffff_00ff,
            0x0000_0001,
            "R_Key {key:#x} looks like slot<<8|tag"
        );
        assert_ne!(addr, 0x1_0000_0000);
    }
    assert_ne!(b.qp.qpn(), other.qp.qpn());
    assert_ne!(rb.rkey, other.mr.rkey());
    assert_ne!(rb.addr, other.mr.addr());

    // The attack, from A's address (any local user can bind it): QPNs 17
    // up, the old keys, the old address, at the PSNs B expects (as if the
    // attacker had swept them): only the identifiers can stop it.
    let (s, me) = attacker("127.0.18.1");
    let evil = [0x66u8; 64];
    let mut sent = 0u64;
    let start = Instant::now();
    for qpn in 17..17 + 8 {
        for key in [0x101, 0x202, 0x303] {
            let pkts: Vec<Vec<u8>> = (0..4096u32)
                .map(|k| {
                    let psn = a.psn.value().wrapping_add(k) & 0xff_ffff;
                    write_only(me, "127.0.18.2", qpn, psn, 0x1_0000_0000, key, &evil)
                })
                .collect();
            send_all(&s, "127.0.18.2", &pkts);
            sent += pkts.len() as u64;
        }
    }
    // The real QPN, key and address (an attacker who somehow has them)
    // but sent from a third address: the source check refuses it.
    let (third, them) = attacker("127.0.18.4");
    let pkts: Vec<Vec<u8>> = (0..4096u32)
        .map(|k| {
            // B expects A's starting PSN.
            let psn = a.psn.value().wrapping_add(k) & 0xff_ffff;
            write_only(
                them,
                "127.0.18.2",
                b.qp.qpn().value(),
                psn,
                rb.addr,
                rb.rkey.value(),
                &evil,
            )
        })
        .collect();
    send_all(&third, "127.0.18.2", &pkts);
    sent += pkts.len() as u64;
    let rate = sent as f64 / start.elapsed().as_secs_f64();
    println!("forged WRITEs: {sent} sent at {rate:.0}/s");
    // Let the victim take them all in.
    let deadline = Instant::now() + WAIT;
    while b.ctx.counters().rx_datagrams < sent / 2 && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(20));
    }
    thread::sleep(Duration::from_millis(200));
    let dc = b.ctx.counters();
    println!("victim: {dc:?} qp {:?}", b.qp.counters());
    assert!(dc.rx_unknown_qp > 0, "the guesses reached no QP");
    assert!(
        b.qp.counters().drop_invalid > 0,
        "the third address was dropped"
    );
    assert_eq!(b.qp.counters().rx_packets, 0);
    assert!(intact(&b.mr, 0x11), "the victim's memory was written");
    session_works(&a, &b);
}

/// The control: the forged WRITE is taken when it carries the real QPN,
/// R_Key, address and PSN and comes from the peer's address. RoCE has
/// no authentication; only these values' unpredictability (and the
/// network) keeps a blind attacker out.
#[test]
fn with_the_real_identifiers_the_forgery_is_taken() {
    let (a, b) = pair("127.0.18.11", "127.0.18.12", None);
    let rb = b.mr.remote();
    let (s, me) = attacker("127.0.18.11");
    let p = write_only(
        me,
        "127.0.18.12",
        b.qp.qpn().value(),
        // The PSN B expects next: A's starting PSN.
        a.psn.value(),
        rb.addr,
        rb.rkey.value(),
        &[0x66; 64],
    );
    send_all(&s, "127.0.18.12", &[p]);
    let deadline = Instant::now() + WAIT;
    let mut out = [0u8; 64];
    while Instant::now() < deadline {
        b.mr.read(0, &mut out).unwrap();
        if out == [0x66; 64] {
            return;
        }
        thread::sleep(Duration::from_millis(10));
    }
    panic!("the control forgery was not taken: the harness proves nothing");
}

/// Forged NAKs (remote access error) and ACKs flood the client during a
/// WRITE stream: from a third address with the client's real QPN and
/// PSNs across its window, and from the server's own address with
/// guessed QPNs. Every WRITE completes successfully.
#[test]
fn forged_naks_and_acks_do_not_end_or_complete_a_stream() {
    let (a, b) = pair("127.0.18.21", "127.0.18.22", None);
    let stop = Arc::new(AtomicBool::new(false));
    let (qa, psn0) = (a.qp.qpn().value(), a.psn.value());
    let flood = {
        let stop = stop.clone();
        thread::spawn(move || {
            let (third, t) = attacker("127.0.18.23");
            let (peer, pr) = attacker("127.0.18.22");
            let nak = Syndrome::Nak(NakCode::RemoteAccessError);
            let mut sent = 0u64;
            let start = Instant::now();
            let mut k = 0u32;
            while !stop.load(Ordering::Relaxed) && start.elapsed() < Duration::from_secs(20) {
                let mut pkts = Vec::with_capacity(512);
                for j in 0..256u32 {
                    let psn = psn0.wrapping_add((k + j) % 8192) & 0xff_ffff;
                    let syn = if j % 2 == 0 {
                        nak
                    } else {
                        Syndrome::ACK_UNLIMITED
                    };
                    pkts.push(aeth(t, "127.0.18.21", qa, psn, syn));
                }
                for j in 0..256u32 {
                    let psn = psn0.wrapping_add((k + j) % 8192) & 0xff_ffff;
                    let syn = if j % 2 == 0 {
                        nak
                    } else {
                        Syndrome::ACK_UNLIMITED
                    };
                    let guess = 17 + (k + j) % 64;
                    pkts.push(aeth(pr, "127.0.18.21", guess, psn, syn));
                }
                send_all(&third, "127.0.18.21", &pkts[..256]);
                send_all(&peer, "127.0.18.21", &pkts[256..]);
                sent += pkts.len() as u64;
                k = k.wrapping_add(256);
            }
            (sent, start.elapsed())
        })
    };
    // 6000 WRITEs of 4 KiB, at most 64 outstanding.
    let r = b.mr.remote();
    let total = 6000u64;
    let (mut posted, mut done) = (0u64, 0u64);
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut got = Vec::new();
    while done < total && Instant::now() < deadline {
        while posted < total && posted - done < 64 {
            let off = (posted % 8) * 4096;
            a.qp.post_send(SendWr::write(posted, [a.mr.sge(off, 4096)], r.at(off)))
                .unwrap();
            posted += 1;
        }
        got.clear();
        a.cq.poll(&mut got, 64).unwrap();
        for c in &got {
            assert_eq!(
                c.status(),
                WcStatus::Success,
                "WR {} ended by a forgery",
                c.wr_id()
            );
        }
        done += got.len() as u64;
        if got.is_empty() {
            thread::sleep(Duration::from_micros(200));
        }
    }
    stop.store(true, Ordering::Relaxed);
    let (sent, took) = flood.join().unwrap();
    println!(
        "forged ACK/NAKs: {sent} in {took:?}; client qp {:?}",
        a.qp.counters()
    );
    assert_eq!(done, total, "the stream did not finish");
    assert!(
        a.qp.counters().drop_invalid > 0,
        "no forgery reached the client"
    );
    assert_eq!(a.qp.counters().error_naks_received, 0);
    assert!(intact(&a.mr, 0xaa));
    // B's memory holds A's bytes where written.
    let mut out = vec![0u8; 4096];
    b.mr.read(0, &mut out).unwrap();
    assert!(out.iter().all(|&x| x == 0xaa));
    session_works(&a, &b);
}

/// A connected peer sends a SEND with Invalidate naming the victim's
/// purely local region: refused (Invalid Request), the region stays.
#[test]
fn send_with_invalidate_cannot_reach_a_local_region() {
    let (a, b) = pair("127.0.18.31", "127.0.18.32", None);
    let local = b.pd.reg_mr(vec![7u8; 256], Access::LOCAL_WRITE).unwrap();
    let inbox = b.pd.reg_mr(vec![0u8; 64], ALL).unwrap();
    b.qp.post_recv(RecvWr {
        wr_id: 1,
        sgl: vec![inbox.sge(0, 64)].into(),
    })
    .unwrap();
    let wr = SendWr::send_with_inv(2, [a.mr.sge(0, 16)], local.rkey());
    a.qp.post_send(wr).unwrap();
    let ca = a.cq.poll_until(1, WAIT).unwrap();
    assert_eq!(ca[0].status(), WcStatus::RemInvReqErr);
    let cb = b.cq.poll_until(1, WAIT).unwrap();
    assert_eq!(cb[0].status(), WcStatus::RemInvReqErr);
    // The region is valid and whole.
    let mut out = [0u8; 256];
    local.read(0, &mut out).unwrap();
    assert_eq!(out, [7u8; 256]);
    assert!(local.dereg().is_ok());
}

/// 200 000 CNPs at a `dcqcn` client: from a third address with its real
/// QPN, and from the server's address with guessed QPNs. The client's
/// rate stays at line rate; one CNP from the peer with the real QPN (the
/// control) is taken.
#[test]
fn a_cnp_flood_does_not_slow_the_client() {
    let (a, _b) = pair("127.0.18.41", "127.0.18.42", Some(CcConfig::dcqcn()));
    let line = a.qp.cc_counters().rate_bps;
    let qa = a.qp.qpn().value();
    let (third, t) = attacker("127.0.18.43");
    let (peer, pr) = attacker("127.0.18.42");
    let start = Instant::now();
    let from_third: Vec<Vec<u8>> = (0..1000).map(|_| cnp(t, "127.0.18.41", qa)).collect();
    let guessed: Vec<Vec<u8>> = (0..1000)
        .map(|k| cnp(pr, "127.0.18.41", 17 + k % 64))
        .collect();
    for _ in 0..100 {
        send_all(&third, "127.0.18.41", &from_third);
        send_all(&peer, "127.0.18.41", &guessed);
    }
    println!("200000 CNPs in {:?}", start.elapsed());
    let deadline = Instant::now() + WAIT;
    while a.ctx.counters().rx_datagrams < 100_000 && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(20));
    }
    thread::sleep(Duration::from_millis(200));
    let cc = a.qp.cc_counters();
    println!("client cc {cc:?}, device {:?}", a.ctx.counters());
    assert_eq!(cc.cnp_received, 0);
    assert_eq!(cc.rate_bps, line);
    // The control.
    send_all(&peer, "127.0.18.41", &[cnp(pr, "127.0.18.41", qa)]);
    let deadline = Instant::now() + WAIT;
    while a.qp.cc_counters().cnp_received == 0 && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(a.qp.cc_counters().cnp_received, 1);
}

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1).map(|v| v.parse().unwrap_or(0)))
        })
        .unwrap_or(0)
}

fn spoofed_req(from: Src, dst: IpAddr, port: u16, id: u32) -> Vec<u8> {
    spoofed_req_in(from, dst, port, id, 0xffff)
}

/// A spoofed REQ whose BTH carries the P_Key `pkey`.
fn spoofed_req_in(from: Src, dst: IpAddr, port: u16, id: u32, pkey: u16) -> Vec<u8> {
    let src = from.0;
    let mut pd = [0u8; wcm::private_len::REQ];
    let cma = wcm::CmaHeader {
        src_port: 0x8000 | (id as u16 & 0x7fff),
        src,
        dst,
    };
    cma.emit(&mut pd).unwrap();
    let req = ReqRepr {
        local_comm_id: id,
        service_id: wcm::ip_service_id(port_space::TCP, port),
        local_ca_guid: 0x0200_00ff_fe00_0001,
        local_qkey: 0,
        local_qpn: Qpn::new(id & 0xff_ffff),
        responder_resources: 1,
        initiator_depth: 1,
        remote_cm_response_timeout: 18,
        transport: 0,
        end_to_end_flow_control: false,
        starting_psn: Psn::new(0),
        local_cm_response_timeout: 18,
        retry_count: 7,
        pkey: 0xffff,
        path_mtu: 3,
        rdc_exists: false,
        rnr_retry_count: 7,
        max_cm_retries: 15,
        srq: false,
        extended_transport: 0,
        primary: PathRepr {
            local_lid: 0xffff,
            remote_lid: 0xffff,
            local_gid: wcm::gid_of(src),
            remote_gid: wcm::gid_of(dst),
            flow_label: 0,
            packet_rate: 0,
            traffic_class: 0,
            hop_limit: 64,
            sl: 0,
            subnet_local: false,
            local_ack_timeout: 14,
        },
        alternate: None,
        private_data: &pd,
    };
    let mut m = [0u8; mad::MAD_LEN];
    CmMessage::Req(req).emit_mad(u64::from(id), &mut m).unwrap();
    let mut bth = BthRepr::new(Opcode::UD_SEND_ONLY, mad::GSI_QPN, Psn::new(id & 0xff_ffff));
    bth.ack_req = true;
    bth.pkey = Pkey(pkey);
    let ext = ExtHeaders {
        deth: Some(DethRepr {
            qkey: mad::GSI_QKEY,
            src_qp: mad::GSI_QPN,
        }),
        ..ExtHeaders::default()
    };
    forge(from, dst, bth, ext, &m)
}

/// 20 000 spoofed REQs with new IDs from 40 addresses: the listener's
/// backlog bounds what waits (memory does not climb with the flood), and a
/// real client then connects while the server rejects the strangers.
#[test]
fn a_req_flood_is_bounded_and_a_real_client_still_connects() {
    const CM_PORT: u16 = 18518;
    let server = open("127.0.18.52", None);
    let listener = server.cm_listen(CM_PORT).unwrap();
    let before = rss_kib();
    let start = Instant::now();
    let mut sent = 0u64;
    for a in 0..40u32 {
        let src = format!("127.0.18.{}", 100 + a);
        let (s, me) = attacker(&src);
        let pkts: Vec<Vec<u8>> = (0..500u32)
            .map(|k| spoofed_req(me, ip("127.0.18.52"), CM_PORT, 0x5000_0000 + a * 1000 + k))
            .collect();
        send_all(&s, "127.0.18.52", &pkts);
        sent += pkts.len() as u64;
    }
    let deadline = Instant::now() + WAIT;
    while server.counters().rx_datagrams < sent * 9 / 10 && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(20));
    }
    thread::sleep(Duration::from_millis(200));
    let after = rss_kib();
    let c = server.cm_counters();
    println!(
        "{sent} spoofed REQs in {:?}: RSS {before} -> {after} KiB, cm {c:?}",
        start.elapsed()
    );
    // Each address holds at most its share (8 of 128), the listener 128:
    // the first 16 addresses fill it 8 by 8 (the first 15 are refused
    // their other 492 for their share), the 24 others find it full. A
    // datagram the kernel dropped (a full socket buffer on a loaded
    // machine) is one fewer refusal at most.
    assert!(
        c.dropped_backlog + c.dropped_source_share >= c.rx_mads.saturating_sub(128),
        "{c:?}"
    );
    let lost = sent.saturating_sub(c.rx_mads);
    assert!(
        c.dropped_source_share + lost >= 15 * (500 - 8),
        "{lost} lost: {c:?}"
    );
    assert!(c.rx_mads > 1000, "the flood did not arrive: {c:?}");
    assert!(
        after < before + 16 * 1024,
        "RSS grew {} KiB",
        after - before
    );

    // A real client connects; the server rejects everyone else.
    let client = side("127.0.18.51", None, 0x33);
    let accepted = thread::spawn(move || {
        let pd = server.alloc_pd();
        let cq = server.create_cq(64, None).unwrap();
        let qp = pd
            .create_qp(&QpInitAttr::new(QpType::Rc, &cq, &cq))
            .unwrap();
        let end = Instant::now() + Duration::from_secs(40);
        let mut rejected = 0;
        while Instant::now() < end {
            let Ok(req) = listener.get_request(Duration::from_secs(1)) else {
                continue;
            };
            if req.info().peer != ip("127.0.18.51") {
                let _ = req.reject(&[]);
                rejected += 1;
                continue;
            }
            let conn = req.accept(&qp, &ConnParam::default(), WAIT).unwrap();
            assert_eq!(conn.qp().state(), QpState::Rts);
            return Some((rejected, conn, server));
        }
        None
    });
    let conn = client
        .qp
        .cm_connect(
            ip("127.0.18.52"),
            CM_PORT,
            &ConnParam::default(),
            Duration::from_secs(40),
        )
        .expect("the real client could not connect");
    assert_eq!(conn.qp().state(), QpState::Rts);
    let (rejected, _sconn, _server) = accepted
        .join()
        .unwrap()
        .expect("server never saw the client");
    println!("connected after rejecting {rejected} spoofed requests");
}

/// QP1 takes CM MADs only in the port's partitions: a forged REQ whose
/// BTH P_Key (0x1234) matches no entry of the P_Key table is dropped and
/// counted before it is parsed, and the listener sees nothing; the same
/// REQ in the default partition reaches it (the control).
#[test]
fn a_forged_req_in_another_partition_is_dropped() {
    const CM_PORT: u16 = 18519;
    let server = open("127.0.18.61", None);
    let listener = server.cm_listen(CM_PORT).unwrap();
    let (s, me) = attacker("127.0.18.62");
    let to = ip("127.0.18.61");
    send_all(
        &s,
        "127.0.18.61",
        &[spoofed_req_in(me, to, CM_PORT, 0x6000_0001, 0x1234)],
    );
    let deadline = Instant::now() + WAIT;
    while server.cm_counters().dropped_pkey == 0 && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(10));
    }
    let c = server.cm_counters();
    assert_eq!((c.dropped_pkey, c.rx_mads), (1, 0), "{c:?}");
    assert!(listener.get_request(Duration::from_millis(200)).is_err());

    send_all(
        &s,
        "127.0.18.61",
        &[spoofed_req(me, to, CM_PORT, 0x6000_0002)],
    );
    let req = listener.get_request(WAIT).expect("the control REQ");
    assert_eq!(req.info().peer, ip("127.0.18.62"));
    assert_eq!(server.cm_counters().dropped_pkey, 1);
    let _ = req.reject(&[]);
}
