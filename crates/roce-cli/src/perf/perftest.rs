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
//! 5. key strings (108 bytes each, see [`Dest`]): one per QP, one after the
//!    QPs reach RTR/RTS, one per QP again (the printing pass), and for SEND
//!    and latency tests one more (after the receives are posted);
//! 6. the traffic;
//! 7. WRITE/READ/atomic BW: a key-string exchange, then the bandwidth
//!    report as five 8-byte big-endian exchanges (size, iterations, peak,
//!    average MB/s, Mpps; the server's are meaningless and ignored);
//! 8. close: a key-string exchange, then each side writes "done\0" (5
//!    bytes) without waiting for the other and closes; ib_write_lat skips
//!    this and just closes (captured inside the lab VM over lo).

use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use roce_verbs::{
    Access, ConnectOptions, Psn, QpCaps, QpEndpoint, QpInitAttr, QpType, RecvWr, RemoteMr, Rkey,
    SendOp, SendWr,
};

use super::backend::{gid_address, link_path_mtu, open_context};
use super::report::{self, BwResult};
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
    match mtu {
        256 => 1,
        512 => 2,
        1024 => 3,
        2048 => 4,
        _ => 5,
    }
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
        let e = |e: std::io::Error| format!("perftest exchange: {e}");
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

/// What a perftest-mode run does, from the flags: SEND tests post
/// receives; latency tests (and SEND BW) add a key round before the
/// traffic; after it, BW tests other than SEND exchange the report, and
/// every test but ib_write_lat closes with a key round (and "done" over
/// TCP), as the captures of each tool show.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Plan {
    pub(crate) test: Test,
    pub(crate) is_send: bool,
    pub(crate) lat: bool,
    pub(crate) size: u64,
    pub(crate) iters: u64,
    pub(crate) tx_depth: u64,
}

impl Plan {
    pub(crate) fn from_args(args: &PerfArgs) -> Result<Plan, String> {
        let test = args.test;
        let lat = matches!(
            test,
            Test::WriteLat | Test::ReadLat | Test::SendLat | Test::AtomicLat
        );
        let atomic = matches!(test, Test::AtomicBw | Test::AtomicLat);
        if args.qps != 1 || args.bidir || args.all || args.duration.is_some() {
            return Err(
                "--perftest supports one QP, one size, -n iterations (no -q, -b, -a, -D)".into(),
            );
        }
        let size = if atomic {
            8
        } else {
            args.size
                .unwrap_or(if lat { 2 } else { 65536 })
                .clamp(1, 1 << 26)
        };
        Ok(Plan {
            test,
            is_send: matches!(test, Test::SendBw | Test::SendLat),
            lat,
            size,
            iters: args.iters.unwrap_or(if lat { 1000 } else { 5000 }).max(1),
            tx_depth: args.tx_depth.unwrap_or(128).clamp(1, 1024) as u64,
        })
    }
}

/// The data side of a test: one RC QP and one region holding the peer's
/// target (`[0, area)`), our source (`[area, 2 area)`) and, for SEND tests,
/// a ring of receive buffers after them.
pub(crate) struct DataQp {
    pub(crate) mr: roce_verbs::MemoryRegion,
    pub(crate) cq: roce_verbs::CompletionQueue,
    pub(crate) qp: roce_verbs::QueuePair,
    pub(crate) area: u64,
    pub(crate) ring: u64,
}

impl DataQp {
    pub(crate) fn create(ctx: &roce_verbs::Context, p: &Plan) -> Result<DataQp, String> {
        let ring: u64 = if p.is_send {
            p.iters.min(512).min(((64u64 << 20) / p.size).max(2))
        } else {
            0
        };
        let area = p.size.max(4096);
        let pd = ctx.alloc_pd();
        let access = Access::LOCAL_WRITE
            | Access::REMOTE_WRITE
            | Access::REMOTE_READ
            | Access::REMOTE_ATOMIC;
        let mr = pd
            .reg_mr(vec![0u8; (2 * area + ring * p.size) as usize], access)
            .map_err(|e| format!("cannot register memory: {e}"))?;
        let cq = ctx
            .create_cq((p.tx_depth + ring) as usize * 2 + 64, None)
            .map_err(|e| e.to_string())?;
        let cap = QpCaps {
            max_send_wr: p.tx_depth as u32 + 16,
            max_recv_wr: ring as u32 + 16,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 256,
        };
        let qp = pd
            .create_qp(&QpInitAttr::new(QpType::Rc, &cq, &cq).cap(cap))
            .map_err(|e| format!("cannot create a QP: {e}"))?;
        Ok(DataQp {
            mr,
            cq,
            qp,
            area,
            ring,
        })
    }
}

/// Runs a latency test's traffic (the server of a READ/atomic test only
/// waits); the statistics, or `None` where this side measures nothing.
pub(crate) fn run_lat(
    t: &Traffic<'_>,
    ring: u64,
    client: bool,
) -> Result<Option<report::LatResult>, String> {
    let mut samples = match t.test {
        Test::SendLat => send_ping_pong(t, ring, client)?,
        Test::WriteLat => write_ping_pong(t, client)?,
        _ if client => one_sided(t)?,
        _ => Vec::new(),
    };
    // perftest prints the iterations asked for (n sends make n - 1
    // intervals).
    Ok(
        report::LatResult::from_samples(t.size, &mut samples).map(|mut r| {
            r.iterations = t.iters;
            r
        }),
    )
}

/// Runs one test in perftest-compatible mode; the exit is via `Err` on failure.
pub(crate) fn run(args: &PerfArgs) -> Result<(), String> {
    let plan = Plan::from_args(args)?;
    let Plan {
        test,
        is_send,
        lat,
        size,
        iters,
        tx_depth,
    } = plan;
    let client = args.server.is_some();
    let stream = if let Some(server) = &args.server {
        let addr = super::resolve(server, args.port)?;
        super::connect_tcp(addr, args.bind)?
    } else {
        let bind = args.bind.unwrap_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED));
        let l = TcpListener::bind((bind, args.port))
            .map_err(|e| format!("cannot listen on port {}: {e}", args.port))?;
        eprintln!(
            "roce perf: waiting for a perftest client on port {}",
            args.port
        );
        l.accept().map_err(|e| format!("accept: {e}"))?.0
    };
    let _ = stream.set_nodelay(true);
    let _ = stream.set_read_timeout(Some(Duration::from_secs(300)));
    let tcp_local = stream.local_addr().map_err(|e| e.to_string())?.ip();
    let local = gid_address(args, args.bind.unwrap_or(tcp_local))?;
    let mut oob = Oob { s: stream, client };

    // Version, cycle buffer, cache line, MTU.
    let v = oob.xchg(&version_msg(), 16)?;
    let end = v.iter().position(|&c| c == 0).unwrap_or(16);
    let their_version = String::from_utf8_lossy(&v[..end]).to_string();
    let ver: f64 = their_version.parse().unwrap_or(0.0);
    // 6.28 and later add a binary parameter negotiation (not implemented).
    if (ver * 100.0).round() as u32 >= 628 {
        return Err(format!(
            "the peer is perftest version {their_version}; only the 4.5 exchange (6.06) is implemented"
        ));
    }
    oob.xchg(&4096u32.to_be_bytes(), 4)?;
    oob.xchg(&64u32.to_be_bytes(), 4)?;
    let mtu = args.mtu.min(link_path_mtu(args, local));
    let m = oob.xchg(&mtu_msg(mtu), 2)?;
    let mtu = m[0]
        .checked_sub(b'0')
        .and_then(mtu_of_enum)
        .map_or(mtu, |t| t.min(mtu));

    // Resources: one QP, one region of max(size, 4096) for the peer plus,
    // for SEND, a receive ring.
    let ctx = open_context(args, local, mtu, None)?;
    let DataQp {
        mr,
        cq,
        qp,
        area,
        ring,
    } = DataQp::create(&ctx, &plan)?;
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos())
        ^ std::process::id().wrapping_mul(0x9e37_79b1);
    let mine = Dest {
        lid: 0,
        out_reads: if matches!(
            test,
            Test::ReadBw | Test::ReadLat | Test::AtomicBw | Test::AtomicLat
        ) {
            OUT_READS
        } else {
            1
        },
        qpn: qp.qpn().value(),
        psn: seed & 0xff_ffff,
        rkey: mr.rkey().value(),
        vaddr: mr.addr(),
        gid: gid_of(local),
        srqn: 0,
    };
    let rem = oob.hand_shake(&mine)?;
    let opts = ConnectOptions {
        path_mtu: Some(mtu),
        max_rd_atomic: rem.out_reads.clamp(1, OUT_READS) as u8,
        timeout: 14,
        retry_cnt: 7,
        rnr_retry: 7,
        min_rnr_timer: 12,
        ..ConnectOptions::default()
    };
    let ep = QpEndpoint {
        qpn: roce_verbs::Qpn::new(rem.qpn),
        psn: Psn::new(rem.psn),
        addr: rem.addr(),
        mr: Some(RemoteMr {
            addr: rem.vaddr,
            rkey: Rkey::new(rem.rkey),
            len: size,
        }),
    };
    qp.connect(Psn::new(mine.psn), &ep, &opts)
        .map_err(|e| format!("cannot connect the QP: {e}"))?;
    oob.hand_shake(&mine)?;
    oob.hand_shake(&mine)?;
    print_dest(" local address", &mine, test);
    print_dest(" remote address", &rem, test);
    // send-bw: the server receives; send-lat: both sides do.
    if (test == Test::SendBw && !client) || lat {
        for j in 0..ring {
            let wr = RecvWr {
                wr_id: j,
                sgl: vec![mr.sge(2 * area + j * size, size as u32)],
            };
            qp.post_recv(wr).map_err(|e| format!("post_recv: {e}"))?;
        }
    }
    if is_send || lat {
        oob.hand_shake(&mine)?;
    }

    let mut result = None;
    let mut lat_result = None;
    let traffic = Traffic {
        qp: &qp,
        cq: &cq,
        mr: &mr,
        area,
        size,
        iters,
        depth: tx_depth,
        test,
        remote: (rem.vaddr, Rkey::new(rem.rkey)),
    };
    if lat {
        lat_result = run_lat(&traffic, ring, client)?;
    } else if client {
        result = Some(client_traffic(&traffic)?);
    } else if test == Test::SendBw {
        result = Some(server_receive(&traffic, ring)?);
    }

    if !is_send && !lat {
        oob.hand_shake(&mine)?;
        let got = exchange_report(result.as_ref(), size, iters, |m| oob.xchg(m, 8))?;
        if !client {
            // perftest's server prints the client's report.
            result = Some(got);
        }
    }
    if test != Test::WriteLat {
        oob.close(&mine)?;
    }
    if let Some(r) = lat_result {
        print_lat(test, mtu, &their_version, &r);
    } else if !lat {
        print_result(test, mtu, &their_version, result.as_ref(), args.gbits);
    }
    drop(qp);
    Ok(())
}

/// The SEND BW server: counts `iters` receives (re-posting the `ring`
/// buffers at `2 * area` until every message has one) and measures their
/// rate from the first arrival.
pub(crate) fn server_receive(t: &Traffic<'_>, ring: u64) -> Result<BwResult, String> {
    let Traffic {
        qp,
        cq,
        mr,
        area,
        size,
        iters,
        ..
    } = *t;
    let mut received = 0u64;
    let mut reposted = ring;
    let mut comps = Vec::with_capacity(256);
    let mut times = Vec::with_capacity(iters as usize);
    let mut start = None;
    let deadline = Instant::now() + Duration::from_secs(600);
    while received < iters {
        comps.clear();
        cq.poll(&mut comps, 256).map_err(|e| e.to_string())?;
        let now = Instant::now();
        for c in &comps {
            if !c.is_success() {
                return Err(report::failed(c));
            }
            start.get_or_insert(now);
            received += 1;
            times.push(now);
            if reposted < iters {
                reposted += 1;
                let wr = RecvWr {
                    wr_id: c.wr_id,
                    sgl: vec![mr.sge(2 * area + c.wr_id * size, size as u32)],
                };
                qp.post_recv(wr).map_err(|e| format!("post_recv: {e}"))?;
            }
        }
        if comps.is_empty() {
            if now > deadline {
                return Err(format!("timed out after {received} of {iters} messages"));
            }
            std::thread::yield_now();
        }
    }
    let start = start.unwrap_or_else(Instant::now);
    let secs = times
        .last()
        .map_or(1e-9, |t| t.duration_since(start).as_secs_f64());
    Ok(BwResult::new(
        size,
        iters,
        secs,
        peak(&times, start, 64, size),
    ))
}

/// perftest's WRITE latency loop: each side WRITEs `size` bytes whose
/// last byte is its write count into the peer's buffer, and waits until
/// its own buffer's last byte shows the peer's count. The server writes
/// first (perftest's condition `!(scnt < 1 && machine == SERVER)`): a side
/// that wrote early would see the peer's next count overwrite the one it
/// waits for. Latency: half the time between consecutive writes.
pub(crate) fn write_ping_pong(t: &Traffic<'_>, client: bool) -> Result<Vec<f64>, String> {
    let Traffic {
        qp,
        cq,
        mr,
        area,
        size,
        iters,
        remote,
        ..
    } = *t;
    let mut stamps = Vec::with_capacity(iters as usize);
    let mut comps = Vec::with_capacity(16);
    let deadline = Instant::now() + Duration::from_secs(600);
    let last = size - 1;
    let wait_for = |want: u8, comps: &mut Vec<roce_verbs::Completion>| -> Result<(), String> {
        let mut b = [0u8; 1];
        loop {
            comps.clear();
            cq.poll(comps, 16).map_err(|e| e.to_string())?;
            if let Some(c) = comps.iter().find(|c| !c.is_success()) {
                return Err(report::failed(c));
            }
            mr.read(last, &mut b).map_err(|e| e.to_string())?;
            if b[0] == want {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(format!("timed out waiting for the peer's write {want}"));
            }
        }
    };
    for n in 1..=iters {
        // The client waits for the server's write n; the server, after
        // its first write, for the client's write n - 1.
        if client {
            wait_for(n as u8, &mut comps)?;
        } else if n > 1 {
            wait_for((n - 1) as u8, &mut comps)?;
        }
        mr.write(area + last, &[n as u8])
            .map_err(|e| e.to_string())?;
        stamps.push(Instant::now());
        let wr = SendWr::rdma(
            n,
            SendOp::Write,
            vec![mr.sge(area, size as u32)],
            remote.0,
            remote.1,
        );
        qp.post_send(wr).map_err(|e| format!("post_send: {e}"))?;
    }
    // The server's last write is answered by the client's last one.
    if !client {
        wait_for(iters as u8, &mut comps)?;
    }
    Ok(stamps
        .windows(2)
        .map(|w| w[1].duration_since(w[0]).as_secs_f64() * 1e6 / 2.0)
        .collect())
}

/// perftest's READ / atomic latency loop (client only): one operation at
/// a time; latency is each operation's completion time.
pub(crate) fn one_sided(t: &Traffic<'_>) -> Result<Vec<f64>, String> {
    let Traffic {
        qp,
        cq,
        mr,
        area,
        size,
        iters,
        test,
        remote,
        ..
    } = *t;
    let op = if test == Test::AtomicLat {
        SendOp::FetchAdd { add: 1 }
    } else {
        SendOp::Read
    };
    let mut samples = Vec::with_capacity(iters as usize);
    let mut comps = Vec::with_capacity(4);
    let deadline = Instant::now() + Duration::from_secs(600);
    for n in 0..iters {
        let t0 = Instant::now();
        let wr = SendWr::rdma(n, op, vec![mr.sge(area, size as u32)], remote.0, remote.1);
        qp.post_send(wr).map_err(|e| format!("post_send: {e}"))?;
        loop {
            comps.clear();
            cq.poll(&mut comps, 4).map_err(|e| e.to_string())?;
            if let Some(c) = comps.first() {
                if !c.is_success() {
                    return Err(report::failed(c));
                }
                break;
            }
            if Instant::now() > deadline {
                return Err(format!("timed out after {n} of {iters} operations"));
            }
        }
        samples.push(t0.elapsed().as_secs_f64() * 1e6);
    }
    Ok(samples)
}

/// perftest's SEND latency loop: the client sends first, each side sends
/// after each receive (re-posting it); the latency of each iteration is
/// half the time between two consecutive sends of this side, as perftest
/// computes it (microseconds).
pub(crate) fn send_ping_pong(t: &Traffic<'_>, ring: u64, client: bool) -> Result<Vec<f64>, String> {
    let Traffic {
        qp,
        cq,
        mr,
        area,
        size,
        iters,
        ..
    } = *t;
    const SEND_BIT: u64 = 1 << 62;
    let mut stamps = Vec::with_capacity(iters as usize);
    let mut comps = Vec::with_capacity(16);
    let mut reposted = ring;
    let (mut sent, mut received) = (0u64, 0u64);
    let deadline = Instant::now() + Duration::from_secs(600);
    while sent < iters {
        // The server (and the client after its first send) waits for the
        // peer's message before sending.
        if client && sent == 0 || received > sent - u64::from(client) {
            stamps.push(Instant::now());
            let wr = SendWr::send(SEND_BIT | sent, vec![mr.sge(area, size as u32)]);
            qp.post_send(wr).map_err(|e| format!("post_send: {e}"))?;
            sent += 1;
            continue;
        }
        comps.clear();
        cq.poll(&mut comps, 16).map_err(|e| e.to_string())?;
        for c in &comps {
            if !c.is_success() {
                return Err(report::failed(c));
            }
            if c.wr_id & SEND_BIT != 0 {
                continue;
            }
            received += 1;
            if reposted < iters {
                reposted += 1;
                let wr = RecvWr {
                    wr_id: c.wr_id,
                    sgl: vec![mr.sge(2 * area + c.wr_id * size, size as u32)],
                };
                qp.post_recv(wr).map_err(|e| format!("post_recv: {e}"))?;
            }
        }
        if comps.is_empty() && Instant::now() > deadline {
            return Err(format!("timed out after {sent} sends, {received} receives"));
        }
    }
    // The client's last reply arrives after its last send.
    while client && received < iters {
        comps.clear();
        cq.poll(&mut comps, 16).map_err(|e| e.to_string())?;
        for c in &comps {
            if !c.is_success() {
                return Err(report::failed(c));
            }
            if c.wr_id & SEND_BIT == 0 {
                received += 1;
            }
        }
        if comps.is_empty() && Instant::now() > deadline {
            return Err(format!("timed out after {received} of {iters} replies"));
        }
    }
    Ok(stamps
        .windows(2)
        .map(|w| w[1].duration_since(w[0]).as_secs_f64() * 1e6 / 2.0)
        .collect())
}

/// perftest's latency result block.
pub(crate) fn print_lat(test: Test, mtu: u32, their_version: &str, r: &report::LatResult) {
    println!("{}", report::RULE);
    println!(
        "                    {} (perftest {VERSION} exchange)",
        test.title()
    );
    println!(" Mtu             : {mtu}[B]     Peer version : {their_version}");
    println!("{}", report::RULE);
    println!("{}", report::lat_header());
    println!("{}", report::lat_row(r));
    println!("{}", report::RULE);
}

/// perftest's result block.
pub(crate) fn print_result(
    test: Test,
    mtu: u32,
    their_version: &str,
    result: Option<&BwResult>,
    gbits: bool,
) {
    println!("{}", report::RULE);
    println!(
        "                    {} (perftest {VERSION} exchange)",
        test.title()
    );
    println!(" Mtu             : {mtu}[B]     Peer version : {their_version}");
    println!("{}", report::RULE);
    println!("{}", report::bw_header(gbits));
    if let Some(r) = result {
        println!("{}", report::bw_row(r, gbits));
    }
    println!("{}", report::RULE);
}

/// The report exchange after a BW test: five 8-byte values each way
/// through `xchg` (ours: `mine`, or zeros on the server); returns the
/// peer's.
pub(crate) fn exchange_report(
    mine: Option<&BwResult>,
    size: u64,
    iters: u64,
    mut xchg: impl FnMut(&[u8]) -> Result<Vec<u8>, String>,
) -> Result<BwResult, String> {
    let msgs = match mine {
        Some(r) => report_msgs(
            size,
            iters,
            r.peak_bps / 1_048_576.0,
            r.avg_bps / 1_048_576.0,
            r.msg_rate / 1e6,
        ),
        None => report_msgs(size, iters, 0.0, 0.0, 0.0),
    };
    let mut got = [0u64; 5];
    for (g, m) in got.iter_mut().zip(msgs.iter()) {
        let b = xchg(m)?;
        *g = u64::from_be_bytes(b.try_into().unwrap_or([0; 8]));
    }
    Ok(report_from(got))
}

/// The server's record of the client's report (five big-endian u64s:
/// size, iterations, then peak, average MB/s and Mpps as f64 bits).
pub(crate) fn report_from(got: [u64; 5]) -> BwResult {
    BwResult {
        bytes: got[0],
        iterations: got[1],
        peak_bps: f64::from_bits(got[2]) * 1_048_576.0,
        avg_bps: f64::from_bits(got[3]) * 1_048_576.0,
        msg_rate: f64::from_bits(got[4]) * 1e6,
    }
}

/// What the traffic loops need.
pub(crate) struct Traffic<'a> {
    pub(crate) qp: &'a roce_verbs::QueuePair,
    pub(crate) cq: &'a roce_verbs::CompletionQueue,
    /// The region: the peer's target at 0, our source at `area`, SEND
    /// receive buffers from `2 * area`.
    pub(crate) mr: &'a roce_verbs::MemoryRegion,
    pub(crate) area: u64,
    pub(crate) size: u64,
    pub(crate) iters: u64,
    pub(crate) depth: u64,
    pub(crate) test: Test,
    pub(crate) remote: (u64, Rkey),
}

/// perftest's client loop: keeps `depth` WRITEs/READs/SENDs in flight
/// until `iters` completed; returns the bandwidth.
pub(crate) fn client_traffic(t: &Traffic<'_>) -> Result<BwResult, String> {
    let op = match t.test {
        Test::WriteBw => SendOp::Write,
        Test::ReadBw => SendOp::Read,
        Test::AtomicBw => SendOp::FetchAdd { add: 1 },
        _ => SendOp::Send,
    };
    let iters = t.iters;
    let depth = t.depth.min(iters);
    let local = t.mr.sge(t.area, t.size as u32);
    let (mut posted, mut done) = (0u64, 0u64);
    let mut times: Vec<Instant> = Vec::with_capacity(iters as usize);
    let mut comps = Vec::with_capacity(256);
    let start = Instant::now();
    let deadline = start + Duration::from_secs(600);
    while done < iters {
        while posted < iters && posted - done < depth {
            let wr = if op == SendOp::Send {
                SendWr::send(posted, vec![local])
            } else {
                SendWr::rdma(posted, op, vec![local], t.remote.0, t.remote.1)
            };
            t.qp.post_send(wr).map_err(|e| format!("post_send: {e}"))?;
            posted += 1;
        }
        comps.clear();
        t.cq.poll(&mut comps, 256).map_err(|e| e.to_string())?;
        let now = Instant::now();
        for c in &comps {
            if !c.is_success() {
                return Err(report::failed(c));
            }
            done += 1;
            times.push(now);
        }
        if comps.is_empty() {
            if now > deadline {
                return Err(format!("timed out after {done} of {iters} completions"));
            }
            std::thread::yield_now();
        }
    }
    let secs = start.elapsed().as_secs_f64();
    Ok(BwResult::new(
        t.size,
        iters,
        secs,
        peak(&times, start, depth, t.size),
    ))
}

/// Best rate over `depth` consecutive completions.
fn peak(times: &[Instant], start: Instant, depth: u64, size: u64) -> f64 {
    let d = (depth as usize).max(1);
    let mut best = 0.0f64;
    for i in 0..times.len() {
        let (t0, n) = if i >= d {
            (times[i - d], d)
        } else {
            (start, i + 1)
        };
        let dt = times[i].duration_since(t0).as_secs_f64();
        if dt > 0.0 {
            best = best.max((n as u64 * size) as f64 / dt);
        }
    }
    best
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
