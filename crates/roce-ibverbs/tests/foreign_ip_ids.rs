//! A peer that numbers its IPv4 identifications, as Linux rxe does (and
//! the kernel's stack under most RoCE NICs): the ICRC covers the ID,
//! which a UDP socket never shows, so the library cannot verify such a
//! datagram and must take it anyway: the drop-in sets the engine's
//! `IcrcCheck::Count`. Under the default, `Require`, an unmodified program
//! on the library never hears from rxe: `ibv_rc_pingpong` against rxe in
//! the lab sent its first SEND for ever while rxe's ACKs and SENDs arrived.
//!
//! Here Debian's `ibv_ud_pingpong` is the server, on the library on
//! loopback, and the test is its client: it exchanges addresses over TCP
//! as the tool's client does, then sends one UD SEND from a plain UDP
//! socket, its ICRC computed for IPv4 ID 0x1234 (correct for a sender
//! that used that ID, wrong for ID 0). The server must receive it, answer
//! and exit 0.

mod common;

use std::io::{Read, Write};
use std::net::{Ipv4Addr, TcpStream, UdpSocket};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{finish, free_port, have, listening};
use roce_testkit::frames;
use roce_wire::{BthRepr, DethRepr, ExtHeaders, Opcode, Psn, Qkey, Qpn, ROCE_V2_PORT};

/// The message size given to `ibv_ud_pingpong -s`.
const SIZE: usize = 64;
/// `ibv_ud_pingpong`'s Q_Key.
const QKEY: u32 = 0x1111_1111;
/// Our address: in 127/8, where no library context of a parallel test
/// listens (they start at 127.0.0.1), so the server's answer reaches no one.
const OURS: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 211);

/// The whole IPv4 datagram of a UD SEND_ONLY from `src`:`sport` to
/// `dst`:4791, with IPv4 identification `ident`.
fn ud_send(src: Ipv4Addr, sport: u16, dst: Ipv4Addr, qpn: u32, ident: u16) -> Vec<u8> {
    let payload: Vec<u8> = (0..SIZE).map(|i| i as u8).collect();
    let bth = BthRepr::new(Opcode::UD_SEND_ONLY, Qpn::new(qpn), Psn::new(0x42));
    let ext = ExtHeaders {
        deth: Some(DethRepr {
            qkey: Qkey::new(QKEY),
            src_qp: Qpn::new(0x123),
        }),
        ..ExtHeaders::default()
    };
    let mut repr = frames::frame_v4(src, dst, sport, bth, ext, &payload);
    frames::ipv4_mut(&mut repr).ident = ident;
    frames::emit(&repr)
}

/// A pingpong address message: `LID:QPN:PSN:GID` (the GID as 32 hex
/// digits, its bytes in order), NUL-terminated, 52 bytes.
fn message(qpn: u32, psn: u32, ip: Ipv4Addr) -> [u8; 52] {
    let mut gid = [0u8; 16];
    gid[10] = 0xff;
    gid[11] = 0xff;
    gid[12..].copy_from_slice(&ip.octets());
    let hex: String = gid.iter().map(|b| format!("{b:02x}")).collect();
    let text = format!("{:04x}:{qpn:06x}:{psn:06x}:{hex}", 0);
    let mut m = [0u8; 52];
    m[..text.len()].copy_from_slice(text.as_bytes());
    m
}

/// (QPN, IPv4 address) from the server's message.
fn parse(m: &[u8]) -> (u32, Ipv4Addr) {
    let text = std::str::from_utf8(m).unwrap().trim_end_matches('\0');
    let f: Vec<&str> = text.split(':').collect();
    assert_eq!(f.len(), 4, "server's address message: {text:?}");
    let qpn = u32::from_str_radix(f[1], 16).unwrap();
    let g = f[3];
    let b = |i: usize| u8::from_str_radix(&g[2 * i..2 * i + 2], 16).unwrap();
    (qpn, Ipv4Addr::new(b(12), b(13), b(14), b(15)))
}

#[test]
fn datagrams_whose_icrc_covers_a_nonzero_ipv4_id_are_received() {
    if !have("ibv_ud_pingpong") {
        return;
    }
    let port = free_port();
    let p = port.to_string();
    let server = Command::new("ibv_ud_pingpong")
        .args(["-g", "0", "-s", &SIZE.to_string(), "-n", "1", "-p", &p])
        .env("LD_LIBRARY_PATH", common::dropin("dropin"))
        .env_remove("ROCE_ADDR")
        .env("ROCE_DEVICES", "lo")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let end = Instant::now() + Duration::from_secs(20);
    while !listening(port) {
        assert!(Instant::now() < end, "ibv_ud_pingpong never listened");
        std::thread::sleep(Duration::from_millis(10));
    }

    // The tool's client side of the exchange: our address, theirs, "done".
    let udp = UdpSocket::bind((OURS, 0)).unwrap();
    let sport = udp.local_addr().unwrap().port();
    let mut tcp = TcpStream::connect(("127.0.0.1", port)).unwrap();
    tcp.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    tcp.write_all(&message(0x123, 0x42, OURS)).unwrap();
    let mut theirs = [0u8; 52];
    tcp.read_exact(&mut theirs).unwrap();
    tcp.write_all(b"done\0").unwrap();
    let (qpn, dst) = parse(&theirs);

    let datagram = ud_send(OURS, sport, dst, qpn, 0x1234);
    // The point of the test: this ICRC is right for ID 0x1234 only.
    let as_if_id0 = ud_send(OURS, sport, dst, qpn, 0);
    assert_ne!(
        datagram[datagram.len() - 4..],
        as_if_id0[as_if_id0.len() - 4..]
    );
    // IPv4 and UDP headers are the socket's to write: send what follows.
    udp.send_to(&datagram[28..], (dst, ROCE_V2_PORT)).unwrap();

    let out = finish(server, Duration::from_secs(30), "ibv_ud_pingpong server");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "server {:?}:\n{text}", out.status);
    assert!(text.contains("1 iters in"), "{text}");
}
