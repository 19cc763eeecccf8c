//! The one trait through which the session driver ([`super::session`])
//! talks to the peer, whatever carries the talk: roce perf's own JSON
//! exchange ([`super::native`]), perftest 4.5's over TCP or over its
//! rdma_cm channel ([`super::perftest_plane`], docs/tools.md "roce
//! perf"). The driver owns the order of a run (per size: buffers ready,
//! [`ControlPlane::sync`], the traffic loop, [`ControlPlane::report`];
//! then [`ControlPlane::finish`]); a plane decides what, if anything, it
//! sends at each of those points, so that perftest's sequence (rounds
//! only where its tools have them) and roce perf's (a barrier, counts and
//! checks every size) are both this one loop.

use roce_verbs::Rkey;

use super::error::PerfError;
use super::lane::Lane;
use super::messages::{Endpoint, Test};
use super::traffic::{Counted, Watch};

/// What this side's traffic loop measured in one size.
pub(crate) enum Measured {
    /// A BW loop's counts (all zero for the target of a one-sided test,
    /// which runs no loop).
    Bw(Counted),
    /// A latency loop's samples in µs (none on the passive side of a
    /// READ/atomic test).
    Lat(Vec<f64>),
}

/// What a plane makes of one size once it has reported it.
pub(crate) enum After<R> {
    /// The row this side prints for the size.
    Row(R),
    /// No row for this size (perftest's one-way BW tools report once,
    /// at the end: [`ControlPlane::finish`]).
    Nothing,
    /// The run was cut short before this size measured anything: the
    /// run ends here, the rows before it kept.
    End,
}

/// One side's QPs as the planes exchange them (one [`Endpoint`] each:
/// the address, QPN and first PSN, the buffer the peer may access), and
/// the path MTU that side can carry.
pub(crate) struct Endpoints {
    pub(crate) qps: Vec<Endpoint>,
    pub(crate) mtu: u32,
}

/// A check of the peer's endpoints (their addresses, their family).
pub(crate) type CheckPeer<'c> = &'c dyn Fn(&[Endpoint]) -> Result<(), PerfError>;

/// A control plane: the exchange between the two sides of a run that
/// connects their QPs, and the one around its traffic loops.
pub(crate) trait ControlPlane {
    /// A row of this plane's result table.
    type Row;
    /// What a traffic loop sees of the plane while it runs.
    type Watch<'w>: Watch
    where
        Self: 'w;

    /// Exchanges this side's endpoints for the peer's. `check` sees the
    /// peer's before this side answers where the plane's order allows
    /// (the mismatch is then said once, by the side that sees it first).
    /// A plane whose messages do not carry the MTU returns this side's.
    fn exchange(&mut self, mine: &Endpoints, check: CheckPeer<'_>) -> Result<Endpoints, PerfError>;

    /// Synchronises both sides before the traffic of size `k` (this
    /// side's buffers are ready, its receives posted). `Ok(false)`: the
    /// run was cut short (Ctrl-C here or at the peer) and ends before
    /// this size.
    fn sync(&mut self, k: usize, size: u64) -> Result<bool, PerfError>;

    /// The watch of one traffic loop.
    fn watch(&mut self) -> Self::Watch<'_>;

    /// The passive side of a READ/atomic latency test while the peer
    /// measures (it serves the requests as they come); by default
    /// nothing: the device's progress serves them.
    fn serve(&mut self, _run: &Run<'_>, _size: u64) -> Result<(), PerfError> {
        Ok(())
    }

    /// After the traffic of size `k`: exchanges what the plane reports
    /// (counts, checks, results) and says what this side prints.
    fn report(
        &mut self,
        run: &Run<'_>,
        k: usize,
        size: u64,
        mine: Measured,
    ) -> Result<After<Self::Row>, PerfError>;

    /// After the last size: a closing report, if the plane has one.
    fn finish(&mut self, _run: &Run<'_>, _rows: &mut Vec<Self::Row>) -> Result<(), PerfError> {
        Ok(())
    }
}

/// roce perf's own data checks: both sides' patterns (as long as the
/// largest message; a shorter message holds the first bytes), written
/// and cleared before every size (its plane synchronises every size),
/// and what arrives checked unless `--no-verify`.
pub(crate) struct Data {
    pub(crate) own: Vec<u8>,
    pub(crate) peer: Vec<u8>,
    pub(crate) verify: bool,
}

/// One side's run as the driver sees it: the connected QPs, the peer's
/// buffer for each, and the parameters both sides agreed on.
pub(crate) struct Run<'a> {
    pub(crate) lanes: &'a [Lane<'a>],
    pub(crate) remotes: &'a [(u64, Rkey)],
    pub(crate) test: Test,
    pub(crate) client: bool,
    pub(crate) bidir: bool,
    pub(crate) sizes: &'a [u64],
    /// Messages per QP (`-n`).
    pub(crate) iters: u64,
    /// `-D`: seconds per size instead of `iters` messages.
    pub(crate) duration: Option<f64>,
    /// Operations in flight per QP (`-t`).
    pub(crate) tx_depth: u64,
    /// At most this many bytes in flight across all QPs (UDP has no flow
    /// control: what the peer's receive buffer holds), or no bound.
    pub(crate) inflight_budget: Option<u64>,
    /// One signaled send in this many in a BW loop.
    pub(crate) cq_mod: u64,
    /// Progress lines ([`super::progress::interval`]).
    pub(crate) progress_every: Option<std::time::Duration>,
    /// roce perf's data checks, or none (perftest's exchange).
    pub(crate) data: Option<Data>,
    /// The plane tells a timed SEND receiver how many messages the peer
    /// sent ([`Watch::peer_sent`]).
    pub(crate) peer_says_sent: bool,
}

impl Run<'_> {
    /// Messages per QP in one size: `-n`, or as many as `-D` allows.
    pub(crate) fn per_size(&self) -> u64 {
        if self.duration.is_some() {
            u64::MAX
        } else {
            self.iters
        }
    }

    /// The peer's pattern for messages of `n` bytes, when they are checked.
    pub(crate) fn check(&self, n: usize) -> Option<&[u8]> {
        self.data
            .as_ref()
            .filter(|d| d.verify)
            .map(|d| &d.peer[..n.min(d.peer.len())])
    }
}
