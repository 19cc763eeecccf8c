//! The messages of `roce perf`'s own control connection (TCP, one JSON
//! object per line) and their checks: everything a peer's bytes go
//! through before the tool acts on them. This file uses only std and
//! serde_json, so that the fuzz target `perf_control` can compile it in
//! by path (`fuzz/fuzz_targets/perf_control.rs`); the connection itself
//! (threads, sockets, timeouts) is [`super::control`].
//!
//! Client → server: `hello` (the test's parameters, [`Params`]). Server →
//! client: `endpoints` ([`Endpoint`]s and the path MTU). Client → server:
//! `endpoints`. Then `barrier` both ways before each measured phase,
//! `result`/`measured` and `done` at the end. Either side may send
//! `error` and close, or `stop` when interrupted.

use super::error::PerfError;
use std::io::{BufRead, Read};
use std::net::IpAddr;

use serde_json::{json, Value};

/// Protocol version; peers must match.
pub(crate) const VERSION: u64 = 1;

/// Longest control message (one line); 256 QPs' endpoints take ~30 KB.
pub(crate) const MAX_LINE: u64 = 64 << 10;

/// Most iterations a run may ask for (`-n`).
pub(crate) const MAX_ITERS: u64 = 1_000_000_000;

/// Largest total of registered memory a run uses.
const MEM_CAP: u64 = 512 << 20;

/// The tests, named as perftest's binaries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Test {
    /// RDMA WRITE bandwidth (ib_write_bw).
    WriteBw,
    /// RDMA READ bandwidth (ib_read_bw).
    ReadBw,
    /// SEND bandwidth (ib_send_bw).
    SendBw,
    /// FETCH_ADD bandwidth (ib_atomic_bw).
    AtomicBw,
    /// RDMA WRITE latency (ib_write_lat).
    WriteLat,
    /// RDMA READ latency (ib_read_lat).
    ReadLat,
    /// SEND latency (ib_send_lat).
    SendLat,
    /// FETCH_ADD latency (ib_atomic_lat).
    AtomicLat,
}

impl Test {
    /// Every test, in the order `--help` lists them.
    pub(crate) const ALL: [Test; 8] = [
        Test::WriteBw,
        Test::ReadBw,
        Test::SendBw,
        Test::AtomicBw,
        Test::WriteLat,
        Test::ReadLat,
        Test::SendLat,
        Test::AtomicLat,
    ];

    /// The name on the command line and in the hello (`write-bw`).
    pub(crate) fn name(self) -> &'static str {
        match self {
            Test::WriteBw => "write-bw",
            Test::ReadBw => "read-bw",
            Test::SendBw => "send-bw",
            Test::AtomicBw => "atomic-bw",
            Test::WriteLat => "write-lat",
            Test::ReadLat => "read-lat",
            Test::SendLat => "send-lat",
            Test::AtomicLat => "atomic-lat",
        }
    }

    pub(crate) fn from_name(s: &str) -> Option<Test> {
        Test::ALL.into_iter().find(|t| t.name() == s)
    }

    pub(crate) fn is_bw(self) -> bool {
        matches!(
            self,
            Test::WriteBw | Test::ReadBw | Test::SendBw | Test::AtomicBw
        )
    }

    pub(crate) fn is_atomic(self) -> bool {
        matches!(self, Test::AtomicBw | Test::AtomicLat)
    }
}

/// The parameters both sides agree on (sent by the client).
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Params {
    pub(crate) test: Test,
    pub(crate) sizes: Vec<u64>,
    pub(crate) iters: u64,
    pub(crate) duration: Option<f64>,
    pub(crate) qps: u32,
    pub(crate) tx_depth: u32,
    pub(crate) mtu: u32,
    pub(crate) bidir: bool,
    pub(crate) verify: bool,
    pub(crate) seed: u64,
}

impl Params {
    /// The client's `hello`.
    pub(crate) fn to_json(&self) -> Value {
        json!({"type": "hello", "version": VERSION, "test": self.test.name(),
               "sizes": self.sizes, "iters": self.iters, "duration": self.duration,
               "qps": self.qps, "tx_depth": self.tx_depth, "mtu": self.mtu,
               "bidir": self.bidir, "verify": self.verify, "seed": self.seed})
    }

    /// The parameters of a client's hello, every field checked (against
    /// the same limits as the client's flags) before anything is
    /// allocated: the hello comes from the network.
    pub(crate) fn from_json(v: &Value) -> Result<Params, PerfError> {
        if v.get("version").and_then(Value::as_u64) != Some(VERSION) {
            return Err(PerfError::Args(
                "the peer speaks another version of the roce perf protocol".into(),
            ));
        }
        let num = |k: &str, lo: u64, hi: u64| match v.get(k).and_then(Value::as_u64) {
            Some(n) if (lo..=hi).contains(&n) => Ok(n),
            Some(n) => Err(PerfError::Args(format!(
                "bad '{k}' in hello: {n} (not {lo} to {hi})"
            ))),
            None => Err(PerfError::Args(format!("hello lacks '{k}'"))),
        };
        let flag = |k: &str, default: bool| match v.get(k) {
            None => Ok(default),
            Some(b) => b
                .as_bool()
                .ok_or_else(|| PerfError::Args(format!("bad '{k}' in hello"))),
        };
        let test = v
            .get("test")
            .and_then(Value::as_str)
            .and_then(Test::from_name)
            .ok_or(PerfError::Args("unknown test".into()))?;
        let sizes = v
            .get("sizes")
            .and_then(Value::as_array)
            .ok_or(PerfError::Args("hello lacks sizes".into()))?;
        // -a has 23 sizes.
        if sizes.is_empty() || sizes.len() > 23 {
            return Err(PerfError::Args("bad sizes in hello".into()));
        }
        let sizes: Vec<u64> = sizes
            .iter()
            .map(|s| s.as_u64().filter(|&s| s > 0 && s <= 1 << 30))
            .collect::<Option<_>>()
            .ok_or(PerfError::Args("bad sizes in hello".into()))?;
        let duration = match v.get("duration") {
            None | Some(Value::Null) => None,
            Some(d) => match d.as_f64() {
                Some(d) if d > 0.0 && d <= 86_400.0 => Some(d),
                _ => return Err(PerfError::Args("bad duration in hello".into())),
            },
        };
        let p = Params {
            test,
            sizes,
            iters: num("iters", 1, MAX_ITERS)?,
            duration,
            qps: num("qps", 1, 256)? as u32,
            tx_depth: num("tx_depth", 1, 4096)? as u32,
            mtu: num("mtu", 256, 4096)? as u32,
            bidir: flag("bidir", false)?,
            verify: flag("verify", true)?,
            seed: num("seed", 0, u64::MAX)?,
        };
        if !matches!(p.mtu, 256 | 512 | 1024 | 2048 | 4096) {
            return Err(PerfError::Args("bad MTU in hello".into()));
        }
        if !test.is_bw() && (p.qps > 1 || p.bidir) {
            return Err(PerfError::Args(
                "bad hello: a latency test with several QPs or both directions".into(),
            ));
        }
        if test.is_atomic() && p.sizes != [8] {
            return Err(PerfError::Args(
                "bad sizes in hello: atomics move 8 bytes".into(),
            ));
        }
        check_memory(&p)?;
        Ok(p)
    }
}

/// The memory layout of one side: (largest message, receive buffers per
/// QP, bytes per QP).
pub(crate) fn layout(params: &Params) -> (u64, u64, u64) {
    let nq = u64::from(params.qps.max(1));
    let max_size = params.sizes.iter().copied().max().unwrap_or(8).max(8);
    let want_ring = (2 * u64::from(params.tx_depth)).clamp(2, 512);
    let ring = if params.test == Test::SendBw || params.test == Test::SendLat {
        want_ring.min((MEM_CAP / nq / max_size).max(2))
    } else {
        0
    };
    (max_size, ring, 2 * max_size + ring * max_size)
}

/// Checks, before anything is allocated, that a run's memory (the
/// registered region and the two patterns it is filled from and checked
/// against) stays within bounds: a hostile hello must not make a server
/// allocate gigabytes.
pub(crate) fn check_memory(params: &Params) -> Result<(), PerfError> {
    let (max_size, _, slot) = layout(params);
    let total = slot.saturating_mul(u64::from(params.qps)) + 2 * max_size;
    if total > 2 * MEM_CAP {
        return Err(PerfError::Args(format!(
            "{} QPs of {} bytes need {} MiB, more than this tool's {} MiB: use fewer QPs (-q) or smaller messages (-s)",
            params.qps,
            max_size,
            total >> 20,
            (2 * MEM_CAP) >> 20
        )));
    }
    Ok(())
}

/// One QP's connection data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Endpoint {
    pub(crate) qpn: u32,
    pub(crate) psn: u32,
    pub(crate) addr: IpAddr,
    pub(crate) rkey: u32,
    pub(crate) vaddr: u64,
    pub(crate) len: u64,
}

impl Endpoint {
    pub(crate) fn to_json(self) -> Value {
        json!({"qpn": self.qpn, "psn": self.psn, "addr": self.addr.to_string(),
               "rkey": self.rkey, "vaddr": self.vaddr, "len": self.len})
    }

    pub(crate) fn from_json(v: &Value) -> Result<Endpoint, PerfError> {
        let num = |k: &str| {
            v.get(k)
                .and_then(Value::as_u64)
                .ok_or_else(|| PerfError::Protocol(format!("endpoint lacks '{k}'")))
        };
        let addr: IpAddr = v
            .get("addr")
            .and_then(Value::as_str)
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| PerfError::Protocol("endpoint lacks a valid 'addr'".into()))?;
        let bits = |k: &str, max: u64| {
            num(k).and_then(|n| {
                u32::try_from(n)
                    .ok()
                    .filter(|&n| u64::from(n) <= max)
                    .ok_or_else(|| PerfError::Protocol(format!("endpoint has a bad '{k}' ({n})")))
            })
        };
        if addr.is_unspecified() || addr.is_multicast() || addr == IpAddr::from([255u8; 4]) {
            return Err(PerfError::Protocol(format!(
                "endpoint has a bad 'addr' ({addr})"
            )));
        }
        Ok(Endpoint {
            qpn: bits("qpn", 0xff_ffff)?,
            psn: bits("psn", 0xff_ffff)?,
            addr,
            rkey: bits("rkey", u64::from(u32::MAX))?,
            vaddr: num("vaddr")?,
            len: num("len")?,
        })
    }
}

/// An `endpoints` message: the peer's QPs (each checked as
/// [`Endpoint::from_json`]) and the path MTU it can carry (4096 when it
/// says none).
pub(crate) fn endpoints_from_json(v: &Value) -> Result<(Vec<Endpoint>, u32), PerfError> {
    let qps: Vec<Endpoint> = v
        .get("qps")
        .and_then(Value::as_array)
        .ok_or_else(|| PerfError::Protocol("the peer sent no endpoints".into()))?
        .iter()
        .map(Endpoint::from_json)
        .collect::<Result<_, _>>()?;
    let mtu = match v.get("mtu").and_then(Value::as_u64) {
        None => 4096,
        Some(m @ (256 | 512 | 1024 | 2048 | 4096)) => m as u32,
        Some(m) => {
            return Err(PerfError::Failed(format!(
                "the peer sent an invalid path MTU {m}"
            )))
        }
    };
    Ok((qps, mtu))
}

/// Reads the next message: one line of at most [`MAX_LINE`] bytes (a
/// peer that never sends a newline must not grow this side's memory)
/// holding a JSON value.
pub(crate) fn read_message(reader: &mut impl BufRead) -> Result<Value, PerfError> {
    let mut line = String::new();
    match reader.take(MAX_LINE + 1).read_line(&mut line) {
        Ok(0) => Err(PerfError::Failed(
            "the peer closed the control connection".to_string(),
        )),
        Ok(_) if !line.ends_with('\n') && line.len() as u64 > MAX_LINE => {
            Err(PerfError::Failed(format!(
                "the peer sent a control message longer than {} KiB",
                MAX_LINE >> 10
            )))
        }
        Ok(_) => serde_json::from_str::<Value>(&line)
            .map_err(|e| PerfError::Failed(format!("bad control message: {e}"))),
        Err(e) => Err(PerfError::Io("control connection".into(), e)),
    }
}

/// The type of a message (`hello`, `endpoints`, `stop`, ...).
pub(crate) fn type_of(v: &Value) -> Option<&str> {
    v.get("type").and_then(Value::as_str)
}

/// An error for a peer whose first bytes are not a JSON object: a
/// perftest peer's version string (digits, a dot, NUL padding) or
/// something else.
pub(crate) fn foreign_peer(first: &[u8]) -> Option<String> {
    match first.first() {
        None | Some(b'{') => None,
        Some(b'0'..=b'9') => {
            let end = first.iter().position(|&c| c == 0).unwrap_or(first.len());
            let v = String::from_utf8_lossy(&first[..end.min(16)]);
            Some(format!(
                "the peer speaks perftest's exchange (version string '{v}'), not roce perf's: \
                 run this side with --perftest"
            ))
        }
        Some(_) => Some("the peer does not speak roce perf's control protocol".into()),
    }
}

/// The text of an `error` message from the peer.
pub(crate) fn peer_error(v: &Value) -> Option<String> {
    (type_of(v) == Some("error")).then(|| {
        let m = v.get("message").and_then(Value::as_str);
        m.unwrap_or("unknown error").to_string()
    })
}

/// Checks a message's type.
pub(crate) fn expect_type(v: Value, ty: &str) -> Result<Value, PerfError> {
    match type_of(&v) {
        Some(t) if t == ty => Ok(v),
        Some(t) => Err(PerfError::Failed(format!(
            "expected a '{ty}' message from the peer, got '{t}'"
        ))),
        None => Err(PerfError::Failed(format!(
            "expected a '{ty}' message from the peer"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params() -> Params {
        Params {
            test: Test::WriteBw,
            sizes: vec![65536],
            iters: 10,
            duration: Some(2.0),
            qps: 1,
            tx_depth: 128,
            mtu: 4096,
            bidir: false,
            verify: true,
            seed: 1,
        }
    }

    /// A client's hello with a duration out of range is refused with an
    /// error (it used to panic the server in `Duration::from_secs_f64`).
    #[test]
    fn a_hello_with_a_bad_duration_is_refused() {
        let p = params();
        assert_eq!(Params::from_json(&p.to_json()).unwrap(), p);
        for d in [-1.0, 0.0, 1e300, 86_401.0] {
            let mut v = p.to_json();
            v["duration"] = json!(d);
            let e = Params::from_json(&v).unwrap_err();
            assert!(matches!(e, PerfError::Args(_)), "{d}: {e:?}");
            assert_eq!(e.to_string(), "bad duration in hello", "{d}");
        }
    }

    /// Every message of recorded runs (testdata/perf-control) parses;
    /// the hello and the endpoints re-encode to themselves.
    #[test]
    fn recorded_messages_parse() {
        let runs = [
            include_str!("../../../../testdata/perf-control/write_bw_client.jsonl"),
            include_str!("../../../../testdata/perf-control/write_bw_server.jsonl"),
            include_str!("../../../../testdata/perf-control/read_lat_client.jsonl"),
            include_str!("../../../../testdata/perf-control/read_lat_server.jsonl"),
            include_str!("../../../../testdata/perf-control/send_bw_client.jsonl"),
            include_str!("../../../../testdata/perf-control/send_bw_server.jsonl"),
        ];
        let mut hellos = Vec::new();
        let mut endpoints = 0;
        for run in runs {
            let mut r = run.as_bytes();
            for _ in 0..run.lines().count() {
                let v = read_message(&mut r).unwrap();
                assert!(type_of(&v).is_some() && peer_error(&v).is_none(), "{v}");
                if type_of(&v) == Some("hello") {
                    let p = Params::from_json(&v).unwrap();
                    assert_eq!(Params::from_json(&p.to_json()).unwrap(), p);
                    hellos.push(p);
                }
                if let Ok((eps, mtu)) = endpoints_from_json(&v) {
                    assert_eq!(mtu, 4096);
                    for e in eps {
                        assert_eq!(Endpoint::from_json(&e.to_json()).unwrap(), e);
                        endpoints += 1;
                    }
                }
            }
            assert!(read_message(&mut r).is_err(), "the end of the run");
        }
        let tests: Vec<_> = hellos.iter().map(|p| (p.test, p.qps, p.bidir)).collect();
        assert_eq!(
            tests,
            [
                (Test::WriteBw, 1, false),
                (Test::ReadLat, 1, false),
                (Test::SendBw, 2, true)
            ]
        );
        assert_eq!(endpoints, 8);
    }

    #[test]
    fn a_line_without_end_is_cut_at_max_line() {
        let long = vec![b' '; MAX_LINE as usize + 10];
        let e = read_message(&mut &long[..]).unwrap_err();
        assert!(e.to_string().contains("longer than 64 KiB"), "{e}");
    }
}
