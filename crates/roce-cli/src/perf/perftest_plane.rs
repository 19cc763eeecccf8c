//! perftest's exchange as a [`ControlPlane`] for the session driver
//! ([`super::session`]), once the QPs are connected in `roce perf
//! --perftest`, the same over TCP ([`super::perftest`]) and over
//! perftest's rdma_cm channel ([`super::perftest_cm`]), which differ in
//! their [`PerftestChannel`] only: the sync rounds (a key-string exchange
//! with QP 0's keys) and the report exchanges around the traffic of each
//! size, in the order perftest 4.5's eight tools use them (as
//! captured between two perftest 4.5 peers with `-a`, `-q 4` and `-b`):
//!
//! * WRITE/READ/atomic BW: the client runs every size, then one round and
//!   the report (the last size's; the server prints it). With `-b`, per
//!   size: a round, the traffic, with `-a` another round, the report (each
//!   side prints the sum of both sides' figures);
//! * SEND BW: per size: receives posted, a round, the traffic (each side
//!   prints its own figures), with `-b` the report (and the sum), with
//!   `-a` another round;
//! * latency: one round before the first size; SEND latency posts its
//!   receives and has a round before every size.
//!
//! With `-D` the same sequence holds (one size; every loop runs to its
//! deadline; a timed bidirectional SEND test exchanges no report).
//!
//! The closing round (and ib_write_lat's lack of one) is the caller's.

use roce_verbs::Rkey;

use super::args::PerfArgs;
use super::error::PerfError;
use super::lane::Lane;
use super::messages::Endpoint;
use super::perftest_peer::PeerWatch;
use super::perftest_plan::{print_dest, Plan};
use super::perftest_wire::{gid_of, report_msgs, report_value, Dest, VERSION};
use super::plane::{After, CheckPeer, ControlPlane, Endpoints, Measured, Run};
use super::report::{self, BwResult, LatResult};

/// A perftest control channel: key-string rounds and 8-byte report
/// exchanges, client first.
pub(crate) trait PerftestChannel {
    /// One key-string round; the peer's keys.
    fn keys(&mut self, mine: &Dest) -> Result<Dest, PerfError>;
    /// One 8-byte exchange of the report; the peer's 8 bytes.
    fn xchg8(&mut self, mine: &[u8]) -> Result<Vec<u8>, PerfError>;
    /// The TCP connection the traffic loops look at while they wait for
    /// the peer (`None` over rdma_cm).
    fn watch(&self) -> Option<std::net::TcpStream> {
        None
    }
}

impl Plan {
    /// The run of this plan on the connected lanes (the peer's buffers
    /// in `remotes`) as the session driver takes it.
    pub(crate) fn run<'r>(
        &'r self,
        lanes: &'r [Lane<'r>],
        remotes: &'r [(u64, Rkey)],
        client: bool,
    ) -> Run<'r> {
        Run {
            lanes,
            remotes,
            test: self.test,
            client,
            bidir: self.bidir,
            sizes: &self.sizes,
            iters: self.iters,
            duration: self.duration,
            tx_depth: self.tx_depth,
            inflight_budget: None,
            // Every send signaled: a stalled run (the two sides given
            // different -n) says how many messages got through.
            cq_mod: 1,
            progress_every: self.progress_every,
            data: None,
            peer_says_sent: false,
        }
    }
}

/// A row of perftest's tables.
pub(crate) enum Row {
    Bw(BwResult),
    Lat(LatResult),
}

/// perftest's exchange as a [`ControlPlane`], over either of its
/// channels: the keys of every QP, sync rounds with QP 0's keys where
/// perftest's tools have them, the report exchanges, and nothing while
/// the loops run but a look at the TCP connection (a peer that moved on).
pub(crate) struct PerftestPlane<'a, C: PerftestChannel> {
    ch: &'a mut C,
    plan: &'a Plan,
    client: bool,
    /// What this side's keys advertise as outstanding READs/atomics.
    out_reads: u16,
    /// This side's keys and the peer's, one per QP (once exchanged).
    mine: Vec<Dest>,
    rem: Vec<Dest>,
    /// The TCP connection the loops look at (`None` over rdma_cm).
    stream: Option<std::net::TcpStream>,
}

impl<'a, C: PerftestChannel> PerftestPlane<'a, C> {
    pub(crate) fn new(ch: &'a mut C, plan: &'a Plan, client: bool, out_reads: u16) -> Self {
        let stream = ch.watch();
        PerftestPlane {
            ch,
            plan,
            client,
            out_reads,
            mine: Vec::new(),
            rem: Vec::new(),
            stream,
        }
    }

    /// The outstanding READs/atomics the peer's keys advertise.
    pub(crate) fn peer_out_reads(&self) -> u16 {
        self.rem.first().map_or(0, |d| d.out_reads)
    }

    /// The key rounds after the QPs are connected, the same over TCP and
    /// over the rdma_cm channel: each QP's keys again (perftest's
    /// printing pass) and one round with QP 0's keys after RTR, SEND
    /// tests doing that single round first (captured with `-q 4`); then
    /// the keys are printed (not with `--json`). Returns the peer's
    /// buffer for each QP.
    pub(crate) fn confirm_keys(&mut self, args: &PerfArgs) -> Result<Vec<(u64, Rkey)>, PerfError> {
        let plan = self.plan;
        if plan.is_send {
            self.ch.keys(&self.first_keys()?)?;
        }
        for d in &self.mine {
            self.ch.keys(d)?;
        }
        if !plan.is_send {
            self.ch.keys(&self.first_keys()?)?;
        }
        if !args.json {
            for d in &self.mine {
                print_dest(" local address", d, plan.test);
            }
            for d in &self.rem {
                print_dest(" remote address", d, plan.test);
            }
        }
        Ok(self
            .rem
            .iter()
            .map(|r| (r.vaddr, Rkey::new(r.rkey)))
            .collect())
    }

    /// This side's QP 0 keys (the closing round's).
    pub(crate) fn first_keys(&self) -> Result<Dest, PerfError> {
        self.mine
            .first()
            .copied()
            .ok_or_else(|| PerfError::Failed("no keys exchanged".into()))
    }
}

impl<C: PerftestChannel> ControlPlane for PerftestPlane<'_, C> {
    type Row = Row;
    type Watch<'w>
        = PeerWatch<'w>
    where
        Self: 'w;

    /// One key string per QP each way (the client's first), checked once
    /// all have come; perftest's keys carry no MTU (its preamble agreed
    /// on one).
    fn exchange(&mut self, mine: &Endpoints, check: CheckPeer<'_>) -> Result<Endpoints, PerfError> {
        self.mine = mine
            .qps
            .iter()
            .map(|e| Dest {
                lid: 0,
                out_reads: self.out_reads,
                qpn: e.qpn,
                psn: e.psn,
                rkey: e.rkey,
                vaddr: e.vaddr,
                gid: gid_of(e.addr),
                srqn: 0,
            })
            .collect();
        self.rem = Vec::with_capacity(self.mine.len());
        for d in &self.mine {
            self.rem.push(self.ch.keys(d)?);
        }
        let len = self.plan.max_size();
        let qps: Vec<Endpoint> = self
            .rem
            .iter()
            .map(|d| Endpoint {
                qpn: d.qpn,
                psn: d.psn,
                addr: d.addr(),
                rkey: d.rkey,
                vaddr: d.vaddr,
                len,
            })
            .collect();
        check(&qps)?;
        Ok(Endpoints { qps, mtu: mine.mtu })
    }

    /// A key round before the traffic: latency tests before the first
    /// size (SEND latency before each), SEND BW and `-b` before each.
    fn sync(&mut self, k: usize, _size: u64) -> Result<bool, PerfError> {
        let p = self.plan;
        let round = if p.lat {
            k == 0 || p.is_send
        } else {
            p.is_send || p.bidir
        };
        if round {
            self.ch.keys(&self.first_keys()?)?;
        }
        Ok(true)
    }

    fn watch(&mut self) -> PeerWatch<'_> {
        PeerWatch::new(self.stream.as_ref())
    }

    fn report(
        &mut self,
        run: &Run<'_>,
        _k: usize,
        size: u64,
        mine: Measured,
    ) -> Result<After<Row>, PerfError> {
        let p = self.plan;
        let all = p.sizes.len() > 1;
        let counted = match mine {
            Measured::Lat(mut samples) => {
                // perftest prints the iterations asked for (n sends make
                // n - 1 intervals); the server of a READ/atomic test
                // measures nothing.
                let n = samples.len() as u64 + 1;
                let r = LatResult::from_samples(size, &mut samples).map(|mut r| {
                    r.iterations = if run.duration.is_some() { n } else { p.iters };
                    r
                });
                return Ok(r.map_or(After::Nothing, |r| After::Row(Row::Lat(r))));
            }
            Measured::Bw(c) => c,
        };
        let mut row = counted.result(size);
        if p.is_send {
            // Timed bidirectional SEND runs exchange no report (each side
            // prints its own figures), as perftest does.
            if p.bidir && p.duration.is_none() {
                let theirs = exchange_report(Some(&row), size, run.per_size(), self.ch)?;
                row = sum(&row, &theirs);
            }
            if all {
                self.ch.keys(&self.first_keys()?)?;
            }
        } else if p.bidir {
            if all {
                self.ch.keys(&self.first_keys()?)?;
            }
            let theirs = exchange_report(Some(&row), size, run.per_size(), self.ch)?;
            row = sum(&row, &theirs);
        } else if !self.client {
            // perftest's server runs nothing: the client's report, at the
            // end, is its row.
            return Ok(After::Nothing);
        }
        Ok(After::Row(Row::Bw(row)))
    }

    /// One-way WRITE/READ/atomic BW: the client ran every size; one
    /// round and its last size's report, which the server prints.
    fn finish(&mut self, run: &Run<'_>, rows: &mut Vec<Row>) -> Result<(), PerfError> {
        let p = self.plan;
        if p.lat || p.is_send || p.bidir {
            return Ok(());
        }
        self.ch.keys(&self.first_keys()?)?;
        let max = p.max_size();
        if self.client {
            let last = match rows.last() {
                Some(Row::Bw(r)) => Some(r),
                _ => None,
            };
            exchange_report(last, max, run.per_size(), self.ch)?;
        } else {
            let theirs = exchange_report(None, max, run.per_size(), self.ch)?;
            rows.push(Row::Bw(theirs));
        }
        Ok(())
    }
}

/// A bidirectional row: this side's size and iterations, both sides'
/// rates added (perftest's `print_full_bw_report`).
fn sum(mine: &BwResult, theirs: &BwResult) -> BwResult {
    BwResult {
        peak_bps: mine.peak_bps + theirs.peak_bps,
        avg_bps: mine.avg_bps + theirs.avg_bps,
        msg_rate: mine.msg_rate + theirs.msg_rate,
        ..mine.clone()
    }
}

/// The report exchange: five 8-byte values each way (ours: `mine`, or
/// zeros with `size` and `iters`); returns the peer's.
pub(crate) fn exchange_report(
    mine: Option<&BwResult>,
    size: u64,
    iters: u64,
    ctl: &mut impl PerftestChannel,
) -> Result<BwResult, PerfError> {
    let msgs = match mine {
        Some(r) => report_msgs(
            r.bytes,
            r.iterations,
            r.peak_bps / 1_048_576.0,
            r.avg_bps / 1_048_576.0,
            r.msg_rate / 1e6,
        ),
        None => report_msgs(size, iters.min(u64::from(u32::MAX)), 0.0, 0.0, 0.0),
    };
    let mut got = [0u64; 5];
    for (g, m) in got.iter_mut().zip(msgs.iter()) {
        let b = ctl.xchg8(m)?;
        *g = report_value(&b);
    }
    Ok(report_from(got))
}

/// A peer's report (five big-endian u64s: size, iterations, then peak,
/// average MB/s and Mpps as f64 bits).
pub(crate) fn report_from(got: [u64; 5]) -> BwResult {
    BwResult {
        bytes: got[0],
        iterations: got[1],
        peak_bps: f64::from_bits(got[2]) * 1_048_576.0,
        avg_bps: f64::from_bits(got[3]) * 1_048_576.0,
        msg_rate: f64::from_bits(got[4]) * 1e6,
    }
}

/// perftest's result block: the title, then the BW or latency table; or
/// with `--json` one JSON object.
pub(crate) fn print_rows(
    plan: &Plan,
    mtu: u32,
    their_version: &str,
    rows: &[Row],
    args: &PerfArgs,
) {
    if args.json {
        let results: Vec<serde_json::Value> = rows
            .iter()
            .map(|r| match r {
                Row::Bw(r) => report::bw_json(r),
                Row::Lat(r) => report::lat_json(r),
            })
            .collect();
        let v = serde_json::json!({
            "test": plan.test.name(),
            "exchange": "perftest",
            "peer_version": their_version,
            "mtu": mtu,
            "qps": plan.qps,
            "bidirectional": plan.bidir,
            "duration_sec": plan.duration,
            "results": results,
        });
        println!("{v}");
        return;
    }
    // The server of a READ/atomic latency test measures nothing (as
    // perftest's): it says where the table is rather than end silently.
    if plan.lat && rows.is_empty() {
        println!("{}", report::RULE);
        println!(
            " {}: the client measures every operation; its table is on its side",
            plan.test.title()
        );
        println!("{}", report::RULE);
        return;
    }
    let gbits = args.gbits;
    let bidir = if plan.bidir { " (bidirectional)" } else { "" };
    println!("{}", report::RULE);
    println!(
        "                    {}{bidir} (perftest 4.5 exchange, version string {VERSION})",
        plan.test.title()
    );
    println!(
        " Mtu             : {mtu}[B]     Peer version : {their_version}     Number of qps : {}",
        plan.qps
    );
    println!("{}", report::RULE);
    if plan.lat {
        println!("{}", report::lat_header());
    } else {
        println!("{}", report::bw_header(gbits));
    }
    for r in rows {
        match r {
            Row::Bw(r) => println!("{}", report::bw_row(r, gbits)),
            Row::Lat(r) => println!("{}", report::lat_row(r)),
        }
    }
    println!("{}", report::RULE);
}
