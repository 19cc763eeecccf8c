//! `roce nvmf target` answers a connection request whose ICRC this side
//! cannot verify, as every datagram of Linux's rxe is: rxe numbers the
//! IPv4 identification as the kernel likes, the ICRC covers it (IBA Vol 1
//! Annex A17.3.3), and a UDP socket never sees it. The request is the CM
//! REQ Linux's nvme-rdma host sent to the target in the lab (the admin
//! queue of `nvme discover`, captured on the VM's tap; docs/interop.md,
//! "NVMe-oF against Linux"), its ICRC recomputed for this test's addresses
//! with the identification rxe gave it. The target used to open its
//! device with the UDP backend's default (a datagram whose ICRC matches
//! no identification the backend can guess is dropped) and never saw the
//! request.

mod common;

use std::net::UdpSocket;
use std::time::Duration;

use common::{roce, Guard};
use roce_testkit::free_port;

/// BTH to the end of the MAD (no ICRC) of the REQ: UD SEND Only to QP1,
/// Q_Key 80010000h; CM REQ for service 0106_0000_0000_1144h (RDMA CM, TCP
/// port space, port 4420), responder resources 128, initiator depth 0,
/// path MTU 1024; private data: the RDMA CM header, then the NVMe-oF
/// record (RECFMT 0, QID 0, HRQSIZE 32, HSQSIZE 31).
const LINUX_REQ: &str = "6400ffff000000018000000080010000000000010107020300000000000000027c8028ff0010000000000000ff28807c000000000000000001061144505400fffe77000b00000000000000000000118000000000000000a19d779da7ffff37f0ffffffff00000000000000000000ffff0a4d000b00000000000000000000ffff0a4d00017275e0000040009800000000000000000000000000000000000000000000000000000000000000000000000000000000000000000040bea60000000000000000000000000a4d000b0000000000000000000000000a4d00010000000020001f00000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000";

/// The IPv4 identification rxe gave the captured REQ.
const RXE_IP_ID: u16 = 48872;

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

/// The UDP payload (BTH .. ICRC) of `body` sent from `src`:`port` to
/// `dst`:`port` in an IPv4 datagram with identification `id`, DF set and
/// TTL 64, as rxe builds it.
fn with_icrc(body: &[u8], src: [u8; 4], dst: [u8; 4], port: u16, id: u16) -> Vec<u8> {
    let udp_len = (8 + body.len() + 4) as u16;
    let mut ip = vec![0x45, 0, 0, 0];
    ip[2..4].copy_from_slice(&(20 + udp_len).to_be_bytes());
    ip.extend_from_slice(&id.to_be_bytes());
    ip.extend_from_slice(&[0x40, 0, 64, 17, 0, 0]);
    ip.extend_from_slice(&src);
    ip.extend_from_slice(&dst);
    ip.extend_from_slice(&port.to_be_bytes());
    ip.extend_from_slice(&port.to_be_bytes());
    ip.extend_from_slice(&udp_len.to_be_bytes());
    ip.extend_from_slice(&[0, 0]);
    ip.extend_from_slice(body);
    let icrc = roce_wire::icrc::compute(&ip).unwrap();
    let mut out = body.to_vec();
    out.extend_from_slice(&roce_wire::icrc::to_wire(icrc));
    out
}

#[test]
fn target_answers_a_request_whose_icrc_covers_an_unseen_ipv4_id() {
    let port = free_port();
    let rp = port.to_string();
    let _target = Guard::spawn({
        let mut c = roce();
        c.args(["nvmf", "target", "--bind", "127.0.0.1", "--mem", "64"])
            .args(["--roce-port", &rp]);
        c
    });
    std::thread::sleep(Duration::from_millis(500));
    let sock = UdpSocket::bind(("127.0.0.2", port)).expect("bind 127.0.0.2");
    sock.set_read_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    let req = with_icrc(
        &unhex(LINUX_REQ),
        [127, 0, 0, 2],
        [127, 0, 0, 1],
        port,
        RXE_IP_ID,
    );
    // Resent as a CM resends an unanswered REQ, until the target is up.
    let mut buf = [0u8; 2048];
    let mut answer = None;
    for _ in 0..20 {
        sock.send_to(&req, ("127.0.0.1", port)).unwrap();
        if let Ok((n, _)) = sock.recv_from(&mut buf) {
            answer = Some(buf[..n].to_vec());
            break;
        }
    }
    let a = answer.expect("the target never answered the REQ");
    // A UD SEND Only to QP1 carrying a CM MAD: the REP (attribute 0013h)
    // with the NVMe-oF accept record, or an MRA first.
    assert_eq!(a[0], 0x64, "not a UD SEND Only: {a:02x?}");
    let attr = u16::from_be_bytes([a[12 + 8 + 16], a[12 + 8 + 17]]);
    assert!(
        attr == 0x0013 || attr == 0x0011,
        "attribute {attr:04x}: {a:02x?}"
    );
}
