//! `roce perf --perftest`: the out-of-band TCP exchange of perftest 4.5
//! (Debian `perftest` 4.5+0.17, version string "6.06"), so the eight tools
//! (`ib_{write,read,send,atomic}_{bw,lat}`) run against `roce perf` in
//! either role.
//!
//! Every step is one "exchange": the client writes its message, then reads
//! the server's; the server reads, then writes. Messages, in order (as
//! captured between two perftest 4.5 peers, testdata/captures):
//!
//! 1. version: 16 bytes, the ASCII version ("6.06") NUL-padded;
//! 2. cycle buffer size: 4 bytes, big-endian (4096);
//! 3. cache line size: 4 bytes, big-endian (64);
//! 4. MTU: 2 bytes, the ibv_mtu enum as an ASCII digit + NUL ("3" = 1024);
//! 5. key strings (108 bytes each, see [`Dest`]): one per QP, the same
//!    again per QP (the printing pass), and one with QP 0's keys after the
//!    QPs reach RTR/RTS; SEND tests do that single round before the
//!    printing pass (captured with `-q 4`);
//! 6. the sync rounds, traffic and reports of each size
//!    ([`super::perftest_session`]): a key-string exchange per sync, the
//!    bandwidth report as five 8-byte big-endian exchanges (size,
//!    iterations, peak, average MB/s, Mpps);
//! 7. close: a key-string exchange, then each side writes "done\0" (5
//!    bytes) without waiting for the other and closes; ib_write_lat skips
//!    this and just closes (captured inside the lab VM over lo).

use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, TcpListener, TcpStream};
use std::time::Duration;

use roce_verbs::{ConnectOptions, Psn, QpEndpoint, RemoteMr, Rkey};

use super::backend::{gid_address, link_path_mtu, open_moving};
use super::perftest_session::{confirm_keys, print_rows, run_session, Control};
use super::perftest_traffic::DataQp;
use super::{PerfArgs, Test};

/// The version string perftest 4.5 sends.
pub(crate) const VERSION: &str = "6.06";
/// Length of one key string, with its NUL.
pub(crate) const KEY_LEN: usize = 108;
/// Outstanding RDMA READs / atomics this side accepts as responder.
const OUT_READS: u16 = 16;

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

    pub(crate) fn parse(b: &[u8]) -> Result<Dest, String> {
        let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
        let s = std::str::from_utf8(&b[..end]).map_err(|_| "key string is not ASCII")?;
        let f: Vec<&str> = s.split(':').collect();
        if f.len() < 23 {
            return Err(format!("short perftest key string '{s}'"));
        }
        let h = |i: usize| {
            u64::from_str_radix(f[i], 16).map_err(|_| format!("bad field {i} in key string '{s}'"))
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

/// The version message (16 bytes).
pub(crate) fn version_msg() -> Vec<u8> {
    let mut v = VERSION.as_bytes().to_vec();
    v.resize(16, 0);
    v
}

/// perftest's ibv_mtu enum for a path MTU.
pub(crate) fn mtu_enum(mtu: u32) -> u8 {
    roce_verbs::roce_core::qp::mtu_to_enum(mtu)
}

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

/// The MTU message: the enum as a digit and a NUL.
pub(crate) fn mtu_msg(mtu: u32) -> Vec<u8> {
    vec![b'0' + mtu_enum(mtu), 0]
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

/// The TCP side of the exchange.
struct Oob {
    s: TcpStream,
    client: bool,
}

impl Oob {
    fn xchg(&mut self, mine: &[u8], n: usize) -> Result<Vec<u8>, String> {
        let mut theirs = vec![0u8; n];
        let e = |e: std::io::Error| match e.kind() {
            // The peer stopped (an error of its own: see its output).
            std::io::ErrorKind::UnexpectedEof | std::io::ErrorKind::ConnectionReset => {
                "perftest exchange: the peer closed the connection (it stopped: see its output)"
                    .to_string()
            }
            _ => format!("perftest exchange: {e}"),
        };
        if self.client {
            self.s.write_all(mine).map_err(e)?;
            self.s.read_exact(&mut theirs).map_err(e)?;
        } else {
            self.s.read_exact(&mut theirs).map_err(e)?;
            self.s.write_all(mine).map_err(e)?;
        }
        Ok(theirs)
    }

    fn hand_shake(&mut self, mine: &Dest) -> Result<Dest, String> {
        let b = self.xchg(&mine.format(), KEY_LEN)?;
        Dest::parse(&b)
    }

    fn close(mut self, mine: &Dest) -> Result<(), String> {
        self.hand_shake(mine)?;
        self.s
            .write_all(b"done\0")
            .map_err(|e| format!("perftest exchange: {e}"))?;
        let mut d = [0u8; 5];
        let _ = self.s.set_read_timeout(Some(Duration::from_secs(5)));
        let _ = self.s.read_exact(&mut d);
        Ok(())
    }
}

/// What a perftest-mode run does, from the flags: the sizes (one, or
/// 2..8 MiB with `-a`), the QPs, one or both directions; SEND tests post
/// receives; every test but ib_write_lat closes with a key round (and
/// "done" over TCP), as the captures of each tool show.
#[derive(Clone, Debug)]
pub(crate) struct Plan {
    pub(crate) test: Test,
    pub(crate) is_send: bool,
    pub(crate) lat: bool,
    pub(crate) sizes: Vec<u64>,
    pub(crate) iters: u64,
    pub(crate) tx_depth: u64,
    pub(crate) qps: usize,
    pub(crate) bidir: bool,
    /// `-D`: seconds per run instead of `iters` messages.
    pub(crate) duration: Option<f64>,
}

impl Plan {
    pub(crate) fn from_args(args: &PerfArgs) -> Result<Plan, String> {
        let test = args.test;
        let lat = matches!(
            test,
            Test::WriteLat | Test::ReadLat | Test::SendLat | Test::AtomicLat
        );
        let atomic = matches!(test, Test::AtomicBw | Test::AtomicLat);
        if args.duration.is_some() && args.all {
            return Err("-D and -a cannot be combined".into());
        }
        // perftest's own rules (force_dependecies).
        if lat && args.qps != 1 {
            return Err("multiple QPs are only available in BW tests".into());
        }
        if lat && args.bidir {
            return Err("-b is only available in BW tests".into());
        }
        if atomic && (args.all || args.size.is_some_and(|s| s != 8)) {
            return Err("atomic tests move 8 bytes (no -a, no -s)".into());
        }
        let sizes = if args.all {
            (1..24).map(|i| 1u64 << i).collect()
        } else if atomic {
            vec![8]
        } else {
            vec![args
                .size
                .unwrap_or(if lat { 2 } else { 65536 })
                .clamp(1, 1 << 26)]
        };
        Ok(Plan {
            test,
            is_send: matches!(test, Test::SendBw | Test::SendLat),
            lat,
            sizes,
            iters: args.iters.unwrap_or(if lat { 1000 } else { 5000 }).max(1),
            tx_depth: args.tx_depth.unwrap_or(128).clamp(1, 1024) as u64,
            qps: args.qps as usize,
            bidir: args.bidir,
            duration: args.duration,
        })
    }

    /// The largest message (what each QP's buffers are sized for).
    pub(crate) fn max_size(&self) -> u64 {
        self.sizes.iter().copied().max().unwrap_or(1)
    }

    /// Outstanding READs/atomics advertised in the keys.
    pub(crate) fn out_reads(&self) -> u16 {
        if matches!(
            self.test,
            Test::ReadBw | Test::ReadLat | Test::AtomicBw | Test::AtomicLat
        ) {
            OUT_READS
        } else {
            1
        }
    }
}

/// The keys of every QP: QPN, a starting PSN from the operating
/// system's randomness (not the clock or the pid), the region.
pub(crate) fn local_dests(qps: &[DataQp], plan: &Plan, local: IpAddr) -> Result<Vec<Dest>, String> {
    qps.iter()
        .map(|q| {
            Ok(Dest {
                lid: 0,
                out_reads: plan.out_reads(),
                qpn: q.qp.qpn().value(),
                psn: roce_verbs::random_psn().map_err(|e| e.to_string())?.value(),
                rkey: q.mr.rkey().value(),
                vaddr: q.mr.addr(),
                gid: gid_of(local),
                srqn: 0,
            })
        })
        .collect()
}

impl Control for Oob {
    fn keys(&mut self, mine: &Dest) -> Result<Dest, String> {
        self.hand_shake(mine)
    }
    fn xchg8(&mut self, mine: &[u8]) -> Result<Vec<u8>, String> {
        self.xchg(mine, 8)
    }
    fn watch(&self) -> Option<TcpStream> {
        self.s.try_clone().ok()
    }
}

/// Runs one test in perftest-compatible mode; the exit is via `Err` on failure.
pub(crate) fn run(args: &PerfArgs) -> Result<(), String> {
    Plan::from_args(args)?;
    let client = args.server.is_some();
    let stream = if let Some(server) = &args.server {
        let addr = super::resolve(server, args.port)?;
        let s = super::connect_tcp(addr, args.bind)?;
        args.say_moved();
        s
    } else {
        let bind = args.bind.unwrap_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED));
        let l = TcpListener::bind((bind, args.port))
            .map_err(|e| format!("cannot listen on port {}: {e}", args.port))?;
        eprintln!(
            "roce perf: waiting for a perftest client on port {}",
            args.port
        );
        let s = super::accept_interruptibly(&l)?;
        // A client of roce perf's own exchange opens with a JSON line:
        // tell it what to do rather than read its hello as perftest's.
        if super::first_byte(&s)? == b'{' {
            let msg = "this server was started with --perftest (perftest's exchange); \
                       start it without --perftest to serve both kinds of client, or run \
                       the client with --perftest";
            let mut w = &s;
            let _ = writeln!(
                w,
                "{}",
                serde_json::json!({"type": "error", "message": msg})
            );
            // Read the hello before closing: unread data would make the
            // close a reset, which can discard the error on its way.
            let _ = s.shutdown(std::net::Shutdown::Write);
            let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
            let _ = std::io::copy(&mut (&s).take(64 << 10), &mut std::io::sink());
            return Err(
                "the client speaks roce perf's own exchange, not perftest's \
                 (a server without --perftest serves both)"
                    .into(),
            );
        }
        s
    };
    run_on(args, stream, client)
}

/// The exchange on a connected control stream: `client` writes first.
/// A plain `roce perf` server comes here when its client turns out to
/// speak perftest's exchange.
pub(crate) fn run_on(args: &PerfArgs, stream: TcpStream, client: bool) -> Result<(), String> {
    let plan = Plan::from_args(args)?;
    let test = plan.test;
    let _ = stream.set_nodelay(true);
    let _ = stream.set_read_timeout(Some(Duration::from_secs(300)));
    let tcp_local = stream.local_addr().map_err(|e| e.to_string())?.ip();
    let local = gid_address(args, args.bind.unwrap_or(tcp_local))?;
    // A server given no address moves off a loopback address another
    // stack holds; the client learns the new one from its GID.
    let local = if !client
        && args.bind.is_none_or(|b| b.is_unspecified())
        && args.backend == super::BackendKind::Udp
    {
        let peer = stream.peer_addr().ok().map(|a| a.ip());
        let index = args.gid_index.map(usize::from);
        crate::device::loopback_server_local("perf", local, peer, args.roce_port, args.json, index)
    } else {
        local
    };
    let mut oob = Oob { s: stream, client };

    // Version, cycle buffer, cache line, MTU.
    let v = oob.xchg(&version_msg(), 16)?;
    let end = v.iter().position(|&c| c == 0).unwrap_or(16);
    let their_version = String::from_utf8_lossy(&v[..end]).to_string();
    if v.first() == Some(&b'{') {
        return Err(
            "the peer speaks roce perf's own exchange, not perftest's: run both sides without --perftest"
                .into(),
        );
    }
    let ver: f64 = their_version.parse().unwrap_or(0.0);
    // 6.28 and later add a binary parameter negotiation (not implemented).
    if (ver * 100.0).round() as u32 >= 628 {
        return Err(format!(
            "the peer is perftest version {their_version}; only the 4.5 exchange (6.06) is implemented"
        ));
    }
    oob.xchg(&4096u32.to_be_bytes(), 4)?;
    oob.xchg(&64u32.to_be_bytes(), 4)?;
    let mtu = args.mtu.min(link_path_mtu(args, local)?);
    let m = oob.xchg(&mtu_msg(mtu), 2)?;
    let mtu = m[0]
        .checked_sub(b'0')
        .and_then(mtu_of_enum)
        .map_or(mtu, |t| t.min(mtu));

    // One QP and region per -q.
    // The bind is the probe: a side that chose its loopback address
    // itself moves on when another pair took it meanwhile; the peer
    // learns the address from the GID in the keys.
    let moves = args.local_moves
        || (!client && args.bind.is_none_or(|b| b.is_unspecified()) && args.gid_index.is_none());
    let peer: Vec<IpAddr> = oob.s.peer_addr().ok().map(|a| a.ip()).into_iter().collect();
    let (ctx, local) = open_moving(args, local, mtu, None, moves, &peer, args.json)?;
    let qps = (0..plan.qps)
        .map(|_| DataQp::create(&ctx, &plan))
        .collect::<Result<Vec<_>, _>>()?;
    let mine = local_dests(&qps, &plan, local)?;
    let rem = mine
        .iter()
        .map(|d| oob.hand_shake(d))
        .collect::<Result<Vec<_>, _>>()?;
    let opts = ConnectOptions {
        path_mtu: Some(mtu),
        max_rd_atomic: rem[0].out_reads.clamp(1, OUT_READS) as u8,
        timeout: 14,
        retry_cnt: 7,
        rnr_retry: 7,
        min_rnr_timer: 12,
        ..ConnectOptions::default()
    };
    for ((q, m), r) in qps.iter().zip(&mine).zip(&rem) {
        let ep = QpEndpoint {
            qpn: roce_verbs::Qpn::new(r.qpn),
            psn: Psn::new(r.psn),
            addr: r.addr(),
            mr: Some(RemoteMr {
                addr: r.vaddr,
                rkey: Rkey::new(r.rkey),
                len: plan.max_size(),
            }),
        };
        q.qp.connect(Psn::new(m.psn), &ep, &opts)
            .map_err(|e| format!("cannot connect the QP: {e}"))?;
    }
    let remotes = confirm_keys(&mut oob, &plan, &mine, &rem, args)?;
    let rows = run_session(&mut oob, &plan, &qps, &remotes, &mine[0], client)?;
    if test != Test::WriteLat {
        oob.close(&mine[0])?;
    }
    print_rows(&plan, mtu, &their_version, &rows, args);
    drop(qps);
    Ok(())
}

pub(crate) fn print_dest(what: &str, d: &Dest, test: Test) {
    let out = if test == Test::ReadBw {
        format!(" OUT {:#04x}", d.out_reads)
    } else {
        String::new()
    };
    println!(
        "{what}: LID {:#06x} QPN {:#06x} PSN {:#08x}{out} RKey {:#08x} VAddr {:#016x}",
        d.lid, d.qpn, d.psn, d.rkey, d.vaddr
    );
    let g: Vec<String> = d.gid.iter().map(|b| format!("{b:02}")).collect();
    println!(" GID: {}", g.join(":"));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(s: &str) -> Vec<u8> {
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
    fn preamble_matches_capture() {
        assert_eq!(version_msg(), hex("362e3036000000000000000000000000"));
        assert_eq!(4096u32.to_be_bytes().to_vec(), hex("00001000"));
        assert_eq!(64u32.to_be_bytes().to_vec(), hex("00000040"));
        assert_eq!(mtu_msg(1024), hex("3300"));
    }

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
