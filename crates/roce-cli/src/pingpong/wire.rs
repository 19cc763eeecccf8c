//! The out-of-band exchange of rdma-core's `ibv_*_pingpong` over TCP.
//!
//! Each QP is described by one fixed-size C string,
//! `"%04x:%06x:%06x:%s"` of LID:QPN:PSN:GID with its trailing NUL, 52
//! bytes. The GID is 32 hex digits: the 16 GID bytes in wire order, written
//! as four 32-bit words each printed `%08x` after a byte swap to big-endian
//! (so byte for byte the raw GID). Verified against the lab captures in
//! `testdata/captures/` (see the tests below).
//!
//! Sequence (all four tools): the client connects and writes its
//! message(s); the server reads them, brings its QP(s) to RTS, then writes
//! its own; the client reads them and writes `"done\0"` (5 bytes); the
//! server reads that and both close the connection before any RoCE
//! traffic. `ibv_srq_pingpong` sends 256 messages (its `MAX_QP`) each way,
//! one per QP slot, the unused ones all zeros; the others send one.

use std::io::{Read, Write};
use std::net::{IpAddr, Ipv6Addr};

use super::wire_error::WireError;

/// Bytes of one message: 51 characters and the NUL.
pub(crate) const MSG_LEN: usize = 52;
/// The client's final handshake.
pub(crate) const DONE: &[u8; 5] = b"done\0";
/// Messages `ibv_srq_pingpong` exchanges each way (its `MAX_QP`).
pub(crate) const SRQ_SLOTS: usize = 256;

/// One QP's address, as the tools exchange it (`struct pingpong_dest`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Dest {
    pub(crate) lid: u16,
    pub(crate) qpn: u32,
    pub(crate) psn: u32,
    pub(crate) gid: Ipv6Addr,
}

impl Dest {
    /// An all-zero slot (what `ibv_srq_pingpong` sends for unused QPs).
    pub(crate) const ZERO: Dest = Dest {
        lid: 0,
        qpn: 0,
        psn: 0,
        gid: Ipv6Addr::UNSPECIFIED,
    };

    /// The 52-byte message, NUL included.
    pub(crate) fn to_wire(self) -> [u8; MSG_LEN] {
        let mut s = format!(
            "{:04x}:{:06x}:{:06x}:",
            self.lid,
            self.qpn & 0xff_ffff,
            self.psn & 0xff_ffff
        );
        for b in self.gid.octets() {
            s.push_str(&format!("{b:02x}"));
        }
        let mut out = [0u8; MSG_LEN];
        out[..s.len()].copy_from_slice(s.as_bytes());
        out
    }

    /// Parses a message (with or without its NUL), as `sscanf("%x:%x:%x:%s")`
    /// and `wire_gid_to_gid` do, but strictly: four fields of hex digits,
    /// the last exactly 32.
    pub(crate) fn from_wire(msg: &[u8]) -> Result<Dest, WireError> {
        let end = msg.iter().position(|&b| b == 0).unwrap_or(msg.len());
        let text = std::str::from_utf8(&msg[..end]).map_err(|_| WireError::NotText)?;
        let bad = || WireError::Malformed(text.to_string());
        let parts: Vec<&str> = text.split(':').collect();
        if parts.len() != 4 || parts.iter().any(|p| p.is_empty()) {
            return Err(bad());
        }
        let hex = |s: &str, max: usize| -> Result<u32, WireError> {
            if s.len() > max || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Err(bad());
            }
            u32::from_str_radix(s, 16).map_err(|_| bad())
        };
        let lid = hex(parts[0], 4)? as u16;
        let qpn = hex(parts[1], 6)?;
        let psn = hex(parts[2], 6)?;
        let g = parts[3];
        if g.len() != 32 || !g.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(bad());
        }
        let mut raw = [0u8; 16];
        for (i, b) in raw.iter_mut().enumerate() {
            *b = u8::from_str_radix(&g[2 * i..2 * i + 2], 16).map_err(|_| bad())?;
        }
        Ok(Dest {
            lid,
            qpn,
            psn,
            gid: Ipv6Addr::from(raw),
        })
    }

    /// True for an unused slot.
    pub(crate) fn is_zero(&self) -> bool {
        *self == Dest::ZERO
    }
}

/// The GID of an IP address: IPv4 as `::ffff:a.b.c.d`.
pub(crate) fn gid_of(addr: IpAddr) -> Ipv6Addr {
    match addr {
        IpAddr::V4(v4) => v4.to_ipv6_mapped(),
        IpAddr::V6(v6) => v6,
    }
}

/// The IP address a GID names (`None` for the zero GID, which the tools
/// send when run without `-g`).
pub(crate) fn addr_of(gid: Ipv6Addr) -> Option<IpAddr> {
    if gid.is_unspecified() {
        return None;
    }
    Some(match gid.to_ipv4_mapped() {
        Some(v4) => IpAddr::V4(v4),
        None => IpAddr::V6(gid),
    })
}

/// How `inet_ntop(AF_INET6)` prints a GID (`::ffff:10.77.0.1`, `::`).
pub(crate) fn gid_text(gid: Ipv6Addr) -> String {
    // Rust prints IPv4-mapped addresses as inet_ntop does.
    gid.to_string()
}

/// The line `ibv_*_pingpong` prints for a local or remote QP. The UD tool's
/// local line has a colon after the PSN instead of a comma.
pub(crate) fn address_line(remote: bool, ud: bool, d: &Dest) -> String {
    let (label, sep) = if remote {
        ("remote address: ", ",")
    } else if ud {
        ("local address:  ", ":")
    } else {
        ("local address:  ", ",")
    };
    format!(
        "  {label}LID 0x{:04x}, QPN 0x{:06x}, PSN 0x{:06x}{sep} GID {}",
        d.lid,
        d.qpn,
        d.psn,
        gid_text(d.gid)
    )
}

fn write_dests(s: &mut impl Write, mine: &[Dest], slots: usize) -> Result<(), WireError> {
    let mut buf = Vec::with_capacity(slots * MSG_LEN);
    for i in 0..slots {
        buf.extend_from_slice(&mine.get(i).copied().unwrap_or(Dest::ZERO).to_wire());
    }
    s.write_all(&buf)
        .map_err(|e| WireError::io("Couldn't send local address", e))
}

fn read_dests(s: &mut impl Read, slots: usize) -> Result<Vec<Dest>, WireError> {
    let mut out = Vec::with_capacity(slots);
    let mut msg = [0u8; MSG_LEN];
    for _ in 0..slots {
        s.read_exact(&mut msg)
            .map_err(|e| WireError::io("Couldn't read remote address", e))?;
        out.push(Dest::from_wire(&msg)?);
    }
    Ok(out)
}

/// The client's side: send ours, read theirs, send "done".
pub(crate) fn client_exchange(
    s: &mut (impl Read + Write),
    mine: &[Dest],
    slots: usize,
) -> Result<Vec<Dest>, WireError> {
    write_dests(s, mine, slots)?;
    let theirs = read_dests(s, slots)?;
    s.write_all(DONE)
        .map_err(|e| WireError::io("Couldn't write \"done\"", e))?;
    Ok(theirs)
}

/// The server's side, first half: read the client's messages.
pub(crate) fn server_read(s: &mut impl Read, slots: usize) -> Result<Vec<Dest>, WireError> {
    read_dests(s, slots)
}

/// The server's side, second half (after its QPs are ready): send ours and
/// wait for "done".
pub(crate) fn server_finish(
    s: &mut (impl Read + Write),
    mine: &[Dest],
    slots: usize,
) -> Result<(), WireError> {
    write_dests(s, mine, slots)?;
    let mut done = [0u8; 5];
    s.read_exact(&mut done)
        .map_err(|e| WireError::io("Couldn't read \"done\" from the client", e))?;
    if &done != DONE {
        return Err(WireError::NotDone(
            String::from_utf8_lossy(&done).into_owned(),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    fn unhex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    // TCP payloads of testdata/captures/*.pcap (rdma-core 44 over rxe), as
    // `tshark -Y tcp.len>0 -T fields -e tcp.payload` prints them.
    /// rc_send_64B.pcap frame 6, client 10.77.0.12 → server.
    const RC_CLIENT: &str = "303030303a3030303031313a6131373965303a303030303030303030303030303030303030303066666666306134643030306300";
    /// rc_send_64B.pcap frame 8, server 10.77.0.11 → client.
    const RC_SERVER: &str = "303030303a3030303031313a6131373965303a303030303030303030303030303030303030303066666666306134643030306200";
    /// ud_send_1024B.pcap frame 4 (client) and 6 (server).
    const UD_CLIENT: &str = "303030303a3030303031343a6638303233343a303030303030303030303030303030303030303066666666306134643030306300";
    const UD_SERVER: &str = "303030303a3030303031343a3834303135323a303030303030303030303030303030303030303066666666306134643030306200";
    /// uc_send_4096B.pcap frame 4 (client) and 6 (server).
    const UC_CLIENT: &str = "303030303a3030303031333a3961323964363a303030303030303030303030303030303030303066666666306134643030306300";
    const UC_SERVER: &str = "303030303a3030303031333a3361386538383a303030303030303030303030303030303030303066666666306134643030306200";
    /// srq_rc_send_4096B.pcap frame 4: the client's first slot.
    const SRQ_CLIENT0: &str = "303030303a3030303031353a3936646164343a303030303030303030303030303030303030303066666666306134643030306300";
    /// "done\0", frame 10 of rc_send_64B.pcap.
    const DONE_HEX: &str = "646f6e6500";

    fn v4(a: u8, b: u8, c: u8, d: u8) -> Ipv6Addr {
        gid_of(IpAddr::V4(Ipv4Addr::new(a, b, c, d)))
    }

    #[test]
    fn captured_messages_parse_and_format_identically() {
        let cases = [
            (RC_CLIENT, 0x11, 0xa179e0, v4(10, 77, 0, 12)),
            (RC_SERVER, 0x11, 0xa179e0, v4(10, 77, 0, 11)),
            (UD_CLIENT, 0x14, 0xf80234, v4(10, 77, 0, 12)),
            (UD_SERVER, 0x14, 0x840152, v4(10, 77, 0, 11)),
            (UC_CLIENT, 0x13, 0x9a29d6, v4(10, 77, 0, 12)),
            (UC_SERVER, 0x13, 0x3a8e88, v4(10, 77, 0, 11)),
            (SRQ_CLIENT0, 0x15, 0x96dad4, v4(10, 77, 0, 12)),
        ];
        for (hex, qpn, psn, gid) in cases {
            let bytes = unhex(hex);
            assert_eq!(bytes.len(), MSG_LEN);
            let d = Dest::from_wire(&bytes).unwrap();
            assert_eq!(
                d,
                Dest {
                    lid: 0,
                    qpn,
                    psn,
                    gid
                }
            );
            // Ours, byte for byte the same 52 bytes, NUL included.
            assert_eq!(&d.to_wire()[..], &bytes[..], "{hex}");
        }
        assert_eq!(&unhex(DONE_HEX)[..], &DONE[..]);
    }

    #[test]
    fn gid_words_are_the_raw_bytes_in_order() {
        // gid_to_wire_gid prints htobe32 of each 32-bit word read in host
        // order, i.e. the raw bytes in order: ::ffff:10.77.0.12 is
        // 00000000 00000000 0000ffff 0a4d000c.
        let w = Dest {
            lid: 0,
            qpn: 0x11,
            psn: 0xa179e0,
            gid: v4(10, 77, 0, 12),
        }
        .to_wire();
        assert_eq!(&w[19..51], b"00000000000000000000ffff0a4d000c".as_slice());
        assert_eq!(w[51], 0);
        let g6: Ipv6Addr = "fe80::5054:ff:fe77:11".parse().unwrap();
        let w = Dest {
            lid: 0,
            qpn: 1,
            psn: 2,
            gid: g6,
        }
        .to_wire();
        assert_eq!(
            &w[..],
            b"0000:000001:000002:fe80000000000000505400fffe770011\0"
        );
    }

    #[test]
    fn srq_slots_and_address_lines() {
        // Unused slots of ibv_srq_pingpong are all zeros.
        assert_eq!(
            &Dest::ZERO.to_wire()[..],
            b"0000:000000:000000:00000000000000000000000000000000\0"
        );
        let d = Dest::from_wire(&unhex(RC_CLIENT)).unwrap();
        assert_eq!(
            address_line(false, false, &d),
            "  local address:  LID 0x0000, QPN 0x000011, PSN 0xa179e0, GID ::ffff:10.77.0.12"
        );
        assert_eq!(
            address_line(true, false, &d),
            "  remote address: LID 0x0000, QPN 0x000011, PSN 0xa179e0, GID ::ffff:10.77.0.12"
        );
        // ibv_ud_pingpong's local line (ud_send_1024B.txt).
        let u = Dest::from_wire(&unhex(UD_CLIENT)).unwrap();
        assert_eq!(
            address_line(false, true, &u),
            "  local address:  LID 0x0000, QPN 0x000014, PSN 0xf80234: GID ::ffff:10.77.0.12"
        );
        assert_eq!(
            addr_of(u.gid),
            Some(IpAddr::V4(Ipv4Addr::new(10, 77, 0, 12)))
        );
        assert_eq!(addr_of(Ipv6Addr::UNSPECIFIED), None);
        assert_eq!(gid_text(Ipv6Addr::UNSPECIFIED), "::");
    }

    #[test]
    fn malformed_messages_are_refused() {
        for m in [
            &b"0000:000011:a179e0\0"[..],
            b"0000:000011:a179e0:0000\0",
            b"0000:0000g1:a179e0:00000000000000000000ffff0a4d000c\0",
            b"xyz",
        ] {
            assert!(Dest::from_wire(m).is_err(), "{m:?}");
        }
    }

    #[test]
    fn exchange_sequence_over_a_socket_pair() {
        use std::net::{TcpListener, TcpStream};
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let me = Dest {
            lid: 0,
            qpn: 0x11,
            psn: 0x123456,
            gid: v4(127, 0, 0, 1),
        };
        let server = std::thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            let got = server_read(&mut s, SRQ_SLOTS).unwrap();
            server_finish(&mut s, &[me, me], SRQ_SLOTS).unwrap();
            got
        });
        let mut c = TcpStream::connect(addr).unwrap();
        let client = Dest { qpn: 0x12, ..me };
        let theirs = client_exchange(&mut c, &[client], SRQ_SLOTS).unwrap();
        assert_eq!(theirs.len(), SRQ_SLOTS);
        assert_eq!(&theirs[..2], &[me, me]);
        assert!(theirs[2..].iter().all(Dest::is_zero));
        let got = server.join().unwrap();
        assert_eq!(got[0], client);
        assert!(got[1..].iter().all(Dest::is_zero));
    }
}
