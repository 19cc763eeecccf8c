//! The messages of perftest 4.5's exchange (Debian `perftest` 4.5+0.17,
//! version string "6.06"), over TCP ([`super::perftest`]) and over its
//! rdma_cm channel ([`super::perftest_cm`]): their encodings and the
//! parsers a peer's bytes go through. This file uses only std, so that
//! the fuzz target `perftest_wire` can compile it in by path
//! (`fuzz/fuzz_targets/perftest_wire.rs`).
//!
//! The messages (as captured between two perftest 4.5 peers,
//! testdata/captures/rdma_write_4096B.pcap and rdma_read_4096B.pcap):
//!
//! * version: 16 bytes, the ASCII version ("6.06") NUL-padded;
//! * cycle buffer and cache line sizes: 4 bytes each, big-endian;
//! * MTU: 2 bytes, the ibv_mtu enum as an ASCII digit and a NUL;
//! * keys: over TCP the 108-byte text key string ([`Dest::format`]), over
//!   rdma_cm the 56-byte binary `struct pingpong_dest` ([`dest_bytes`]);
//! * the bandwidth report: five 8-byte big-endian values.

use super::error::PerfError;
use std::net::{IpAddr, Ipv6Addr};

/// The version string perftest 4.5 sends.
pub(crate) const VERSION: &str = "6.06";
/// Length of one key string, with its NUL.
pub(crate) const KEY_LEN: usize = 108;
/// Length of one binary key message over rdma_cm
/// (`sizeof(struct pingpong_dest)`), and of its control receives.
pub(crate) const CM_MSG_LEN: usize = 56;

/// One QP's data in perftest's key string.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Dest {
    pub(crate) lid: u16,
    pub(crate) out_reads: u16,
    pub(crate) qpn: u32,
    pub(crate) psn: u32,
    pub(crate) rkey: u32,
    pub(crate) vaddr: u64,
    pub(crate) gid: [u8; 16],
    pub(crate) srqn: u32,
}

impl Dest {
    /// The 108-byte key string: LID:OUT_READS:QPN:PSN:RKEY:VADDR:16 GID
    /// bytes:SRQN:, hex, fixed widths, NUL-terminated.
    pub(crate) fn format(&self) -> Vec<u8> {
        let mut s = format!(
            "{:04x}:{:04x}:{:06x}:{:06x}:{:08x}:{:016x}:",
            self.lid, self.out_reads, self.qpn, self.psn, self.rkey, self.vaddr
        );
        for b in self.gid {
            s.push_str(&format!("{b:02x}:"));
        }
        s.push_str(&format!("{:08x}:", self.srqn));
        let mut v = s.into_bytes();
        v.push(0);
        v
    }

    /// A key string as perftest reads it (`sscanf` of hex fields, each
    /// cut to its field's width); the QPN and PSN to 24 bits.
    pub(crate) fn parse(b: &[u8]) -> Result<Dest, PerfError> {
        let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
        let s = std::str::from_utf8(&b[..end])
            .map_err(|_| PerfError::Protocol("key string is not ASCII".into()))?;
        let f: Vec<&str> = s.split(':').collect();
        if f.len() < 23 {
            return Err(PerfError::Protocol(format!(
                "short perftest key string '{s}'"
            )));
        }
        let h = |i: usize| {
            u64::from_str_radix(f[i], 16)
                .map_err(|_| PerfError::Protocol(format!("bad field {i} in key string '{s}'")))
        };
        let mut gid = [0u8; 16];
        for (k, g) in gid.iter_mut().enumerate() {
            *g = h(6 + k)? as u8;
        }
        Ok(Dest {
            lid: h(0)? as u16,
            out_reads: h(1)? as u16,
            qpn: h(2)? as u32 & 0xff_ffff,
            psn: h(3)? as u32 & 0xff_ffff,
            rkey: h(4)? as u32,
            vaddr: h(5)?,
            gid,
            srqn: h(22)? as u32,
        })
    }

    /// The address of the GID (an IPv4-mapped GID as IPv4).
    pub(crate) fn addr(&self) -> IpAddr {
        let v6 = Ipv6Addr::from(self.gid);
        match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(v6),
        }
    }
}

/// A GID for a local address (IPv4 as ::ffff:a.b.c.d).
pub(crate) fn gid_of(a: IpAddr) -> [u8; 16] {
    match a {
        IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
        IpAddr::V6(v6) => v6.octets(),
    }
}

/// The binary `struct pingpong_dest`: lid, out_reads, qpn, psn, rkey (u32
/// BE each), 4 pad bytes, vaddr (u64 BE), the GID's 16 bytes, srqn and
/// gid_index (u32 BE).
pub(crate) fn dest_bytes(d: &Dest, gid_index: u32) -> [u8; CM_MSG_LEN] {
    let mut b = [0u8; CM_MSG_LEN];
    b[0..4].copy_from_slice(&u32::from(d.lid).to_be_bytes());
    b[4..8].copy_from_slice(&u32::from(d.out_reads).to_be_bytes());
    b[8..12].copy_from_slice(&d.qpn.to_be_bytes());
    b[12..16].copy_from_slice(&d.psn.to_be_bytes());
    b[16..20].copy_from_slice(&d.rkey.to_be_bytes());
    b[24..32].copy_from_slice(&d.vaddr.to_be_bytes());
    b[32..48].copy_from_slice(&d.gid);
    b[48..52].copy_from_slice(&d.srqn.to_be_bytes());
    b[52..56].copy_from_slice(&gid_index.to_be_bytes());
    b
}

/// Reads the fields of a binary key message perftest reads (lid through
/// srqn).
pub(crate) fn parse_dest(b: &[u8]) -> Result<Dest, PerfError> {
    let Some(b) = b.first_chunk::<CM_MSG_LEN>() else {
        return Err(PerfError::Failed(format!(
            "a {}-byte key message (want {CM_MSG_LEN})",
            b.len()
        )));
    };
    let u = |at: usize| u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]);
    let mut v = [0u8; 8];
    v.copy_from_slice(&b[24..32]);
    let mut gid = [0u8; 16];
    gid.copy_from_slice(&b[32..48]);
    Ok(Dest {
        lid: u(0) as u16,
        out_reads: u(4) as u16,
        qpn: u(8) & 0xff_ffff,
        psn: u(12) & 0xff_ffff,
        rkey: u(16),
        vaddr: u64::from_be_bytes(v),
        gid,
        srqn: u(48),
    })
}

/// The version message (16 bytes).
pub(crate) fn version_msg() -> Vec<u8> {
    let mut v = VERSION.as_bytes().to_vec();
    v.resize(16, 0);
    v
}

/// The peer's version string: its message up to the first NUL.
pub(crate) fn version_text(v: &[u8]) -> String {
    let end = v.iter().position(|&c| c == 0).unwrap_or(v.len());
    String::from_utf8_lossy(&v[..end]).to_string()
}

/// The peer's version message over TCP, checked: not a `roce perf`
/// JSON line, and older than 6.28 (which adds a binary parameter
/// negotiation this side does not speak). The version string.
pub(crate) fn check_version(v: &[u8]) -> Result<String, PerfError> {
    if v.first() == Some(&b'{') {
        return Err(PerfError::Protocol(
            "the peer speaks roce perf's own exchange, not perftest's: run both sides without --perftest"
                .into(),
        ));
    }
    let text = version_text(v);
    let ver: f64 = text.parse().unwrap_or(0.0);
    if (ver * 100.0).round() >= 628.0 {
        return Err(PerfError::Protocol(format!(
            "the peer is perftest version {text}; only the 4.5 exchange (6.06) is implemented"
        )));
    }
    Ok(text)
}

/// The path MTU of perftest's ibv_mtu enum.
pub(crate) fn mtu_of_enum(e: u8) -> Option<u32> {
    match e {
        1 => Some(256),
        2 => Some(512),
        3 => Some(1024),
        4 => Some(2048),
        5 => Some(4096),
        _ => None,
    }
}

/// The path MTU both sides use, from the peer's MTU message (the enum as
/// an ASCII digit) and this side's: the smaller; this side's when the
/// peer's message names none.
pub(crate) fn agreed_mtu(theirs: &[u8], mine: u32) -> u32 {
    theirs
        .first()
        .and_then(|c| c.checked_sub(b'0'))
        .and_then(mtu_of_enum)
        .map_or(mine, |t| t.min(mine))
}

/// The bandwidth report: five 8-byte big-endian values.
pub(crate) fn report_msgs(size: u64, iters: u64, peak: f64, avg: f64, rate: f64) -> [[u8; 8]; 5] {
    [
        size.to_be_bytes(),
        iters.to_be_bytes(),
        peak.to_bits().to_be_bytes(),
        avg.to_bits().to_be_bytes(),
        rate.to_bits().to_be_bytes(),
    ]
}

/// One 8-byte value of the peer's report (0 when it is not 8 bytes).
pub(crate) fn report_value(b: &[u8]) -> u64 {
    u64::from_be_bytes(b.try_into().unwrap_or([0; 8]))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Bytes from a hex string (the recorded messages below).
    pub(crate) fn hex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    /// Frames of testdata/captures/rdma_write_4096B.pcap (client 10.77.0.12,
    /// server 10.77.0.11; ib_write_bw -F -s 4096 -n 8), in order.
    const WRITE_CLIENT_KEY: &str = "303030303a303030313a3030303031373a3736623362363a30303030303731653a303030303535623464303462633030303a30303a30303a30303a30303a30303a30303a30303a30303a30303a30303a66663a66663a30613a34643a30303a30633a30303030303030303a00";
    const WRITE_SERVER_KEY: &str = "303030303a303030313a3030303031373a3433643537613a30303030303731353a303030303535656338323531663030303a30303a30303a30303a30303a30303a30303a30303a30303a30303a30303a66663a66663a30613a34643a30303a30623a30303030303030303a00";
    /// rdma_read_4096B.pcap: out_reads 0x80.
    const READ_CLIENT_KEY: &str = "303030303a303038303a3030303031393a3763633366363a30303030303964343a303030303535663732343561393030303a30303a30303a30303a30303a30303a30303a30303a30303a30303a30303a66663a66663a30613a34643a30303a30633a30303030303030303a00";

    #[test]
    fn key_strings_round_trip_byte_identically() {
        for k in [WRITE_CLIENT_KEY, WRITE_SERVER_KEY, READ_CLIENT_KEY] {
            let b = hex(k);
            assert_eq!(b.len(), KEY_LEN);
            let d = Dest::parse(&b).unwrap();
            assert_eq!(d.format(), b);
        }
        let c = Dest::parse(&hex(WRITE_CLIENT_KEY)).unwrap();
        assert_eq!(
            c,
            Dest {
                lid: 0,
                out_reads: 1,
                qpn: 0x17,
                psn: 0x76b3b6,
                rkey: 0x71e,
                vaddr: 0x55b4d04bc000,
                gid: gid_of("10.77.0.12".parse().unwrap()),
                srqn: 0,
            }
        );
        assert_eq!(c.addr(), "10.77.0.12".parse::<IpAddr>().unwrap());
        let s = Dest::parse(&hex(WRITE_SERVER_KEY)).unwrap();
        assert_eq!(
            (s.qpn, s.psn, s.rkey, s.vaddr),
            (0x17, 0x43d57a, 0x715, 0x55ec8251f000)
        );
        let r = Dest::parse(&hex(READ_CLIENT_KEY)).unwrap();
        assert_eq!(
            (r.out_reads, r.qpn, r.psn, r.rkey),
            (0x80, 0x19, 0x7cc3f6, 0x9d4)
        );
    }

    #[test]
    fn dest_layout_is_perftests_struct() {
        let d = Dest {
            lid: 0,
            out_reads: 16,
            qpn: 0x11,
            psn: 0xabcdef,
            rkey: 0x1234,
            vaddr: 0x0102_0304_0506_0708,
            gid: gid_of("10.77.0.1".parse().unwrap()),
            srqn: 0,
        };
        let b = dest_bytes(&d, 1);
        assert_eq!(&b[4..8], &[0, 0, 0, 16]);
        assert_eq!(&b[8..16], &[0, 0, 0, 0x11, 0, 0xab, 0xcd, 0xef]);
        assert_eq!(&b[24..32], &[1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(&b[42..48], &[0xff, 0xff, 10, 77, 0, 1]);
        assert_eq!(&b[52..56], &[0, 0, 0, 1]);
        assert_eq!(parse_dest(&b).unwrap(), d);
        assert!(parse_dest(&b[..40]).is_err());
    }

    #[test]
    fn versions_and_mtus() {
        assert_eq!(version_msg(), hex("362e3036000000000000000000000000"));
        assert_eq!(check_version(&version_msg()).unwrap(), "6.06");
        assert!(check_version(b"6.28\0").is_err());
        assert!(check_version(b"{\"type\":").is_err());
        // A version that is no number is taken as old (as before).
        assert_eq!(check_version(b"x\0").unwrap(), "x");
        assert_eq!(agreed_mtu(b"3\0", 4096), 1024);
        assert_eq!(agreed_mtu(b"5\0", 1024), 1024);
        assert_eq!(agreed_mtu(b"9\0", 2048), 2048);
        assert_eq!(agreed_mtu(b"", 2048), 2048);
        assert_eq!(report_value(&8u64.to_be_bytes()), 8);
        assert_eq!(report_value(&[1, 2]), 0);
    }

    #[test]
    fn report_matches_capture() {
        // Frames 64..72 of rdma_write_4096B.pcap (the client's report; the
        // server printed 5.13 peak, 4.17 average, 0.001067 Mpps).
        let want = [
            "0000000000001000",
            "0000000000000008",
            "40148a1caf0c7930",
            "4010adc2b97f89dd",
            "3f517d2b252c6452",
        ];
        let peak = f64::from_bits(0x4014_8a1c_af0c_7930);
        let avg = f64::from_bits(0x4010_adc2_b97f_89dd);
        let rate = f64::from_bits(0x3f51_7d2b_252c_6452);
        assert!((peak - 5.13).abs() < 0.01 && (avg - 4.17).abs() < 0.01);
        assert!((rate - 0.001067).abs() < 1e-6);
        let got = report_msgs(4096, 8, peak, avg, rate);
        for (g, w) in got.iter().zip(want) {
            assert_eq!(g.to_vec(), hex(w));
        }
    }
}
