//! [`FaultInjector`]: seeded loss, duplication, reordering, corruption,
//! delay and ECN marking around any backend.

use std::io;
use std::net::IpAddr;

use rand_core::SeedableRng;
use rand_xoshiro::Xoshiro256PlusPlus;

use crate::backend::{min_deadline, Backend, Nanos, PacketBatch};

mod pipeline;
mod spec;
mod targeted;

use pipeline::{recycle, Beside, Path};
pub use spec::{
    parse_duration, FaultAction, FaultPlan, FaultRule, OpFilter, QpSelector, DEFAULT_SEED,
};
pub use targeted::{FaultLog, Injection, InjectionSink, QpIndex, TargetedFaults, LOG_KEEP};

/// Slots of the batch the injector hands to the wrapped backend.
const OUT_BATCH: usize = 64;

/// What faults to inject, with which probability, from which seed.
///
/// Probabilities are per datagram and clamped to `0.0..=1.0` (NaN counts as
/// 0). Build one with [`FaultConfig::new`] and the setters:
///
/// ```
/// use roce_io::FaultConfig;
/// let cfg = FaultConfig::new(42).loss(0.01).reorder(0.05).delay(2_000, 500);
/// assert_eq!(cfg.seed, 42);
/// assert_eq!(cfg.jitter_ns, 500);
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
#[non_exhaustive]
pub struct FaultConfig {
    /// Probability that a datagram is dropped.
    pub loss: f64,
    /// Probability that a datagram is sent twice (the copy right after it).
    pub duplicate: f64,
    /// Probability that a datagram is held back until
    /// [`reorder_depth`](Self::reorder_depth) later datagrams have gone
    /// out (or [`reorder_timeout_ns`](Self::reorder_timeout_ns) has passed).
    pub reorder: f64,
    /// Probability that one random bit is flipped in the bytes the ICRC
    /// covers after the UDP header (BTH to pad, except the ICRC-masked BTH
    /// byte 4), so that the receiver's ICRC check catches it. Datagrams too
    /// short for that get a bit flipped anywhere.
    pub corrupt: f64,
    /// Fixed delay added to every datagram, in nanoseconds.
    pub delay_ns: Nanos,
    /// Random extra delay, uniform in `0..=jitter_ns`. Jitter larger than
    /// the gap between datagrams reorders them, as on a real network.
    pub jitter_ns: Nanos,
    /// Probability that an ECN-capable (ECT(0) / ECT(1)) datagram is marked
    /// Congestion Experienced. The IPv4 header checksum is updated; the ICRC
    /// masks the ECN bits, so it stays valid.
    pub ce_mark: f64,
    /// Seed of the random generator: the same seed and the same sequence of
    /// calls inject the same faults.
    pub seed: u64,
    /// How many later datagrams overtake a reordered one (default 1).
    pub reorder_depth: usize,
    /// Longest a reordered datagram is held when too few datagrams follow
    /// it, in nanoseconds (default 100 µs).
    pub reorder_timeout_ns: Nanos,
    /// Inject on the send path (default true).
    pub on_send: bool,
    /// Inject on the receive path too (default false). The receive path
    /// draws from its own random stream, so turning it on does not change
    /// the faults on the send path.
    pub on_recv: bool,
}

impl Default for FaultConfig {
    fn default() -> Self {
        FaultConfig {
            loss: 0.0,
            duplicate: 0.0,
            reorder: 0.0,
            corrupt: 0.0,
            delay_ns: 0,
            jitter_ns: 0,
            ce_mark: 0.0,
            seed: 0,
            reorder_depth: 1,
            reorder_timeout_ns: 100_000,
            on_send: true,
            on_recv: false,
        }
    }
}

fn prob(p: f64) -> f64 {
    if p.is_nan() {
        0.0
    } else {
        p.clamp(0.0, 1.0)
    }
}

impl FaultConfig {
    /// No faults, send path only, with the given seed.
    pub fn new(seed: u64) -> Self {
        FaultConfig {
            seed,
            ..Self::default()
        }
    }
    /// Sets the loss probability.
    pub fn loss(mut self, p: f64) -> Self {
        self.loss = prob(p);
        self
    }
    /// Sets the duplication probability.
    pub fn duplicate(mut self, p: f64) -> Self {
        self.duplicate = prob(p);
        self
    }
    /// Sets the reordering probability.
    pub fn reorder(mut self, p: f64) -> Self {
        self.reorder = prob(p);
        self
    }
    /// Sets how many datagrams overtake a reordered one and the longest it
    /// is held.
    pub fn reorder_shape(mut self, depth: usize, timeout_ns: Nanos) -> Self {
        self.reorder_depth = depth;
        self.reorder_timeout_ns = timeout_ns;
        self
    }
    /// Sets the corruption probability.
    pub fn corrupt(mut self, p: f64) -> Self {
        self.corrupt = prob(p);
        self
    }
    /// Sets the fixed delay and the jitter, in nanoseconds.
    pub fn delay(mut self, delay_ns: Nanos, jitter_ns: Nanos) -> Self {
        self.delay_ns = delay_ns;
        self.jitter_ns = jitter_ns;
        self
    }
    /// Sets the CE-marking probability.
    pub fn ce_mark(mut self, p: f64) -> Self {
        self.ce_mark = prob(p);
        self
    }
    /// Sets the seed.
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }
    /// Chooses the paths to inject on.
    pub fn paths(mut self, on_send: bool, on_recv: bool) -> Self {
        self.on_send = on_send;
        self.on_recv = on_recv;
        self
    }

    fn sanitized(mut self) -> Self {
        for p in [
            &mut self.loss,
            &mut self.duplicate,
            &mut self.reorder,
            &mut self.corrupt,
            &mut self.ce_mark,
        ] {
            *p = prob(*p);
        }
        self
    }
}

/// What the injector did on one path.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct FaultStats {
    /// Datagrams offered to the injector.
    pub packets: u64,
    /// Dropped.
    pub lost: u64,
    /// Sent twice.
    pub duplicated: u64,
    /// Held back and overtaken by later datagrams.
    pub reordered: u64,
    /// Held back for reordering but released by the timeout because too
    /// few datagrams followed.
    pub reorder_timeouts: u64,
    /// Had a bit flipped.
    pub corrupted: u64,
    /// Marked CE.
    pub ce_marked: u64,
    /// Held for a delay (fixed or jitter) greater than zero.
    pub delayed: u64,
    /// Send path: errors of the wrapped backend that happened after the
    /// injector had taken the caller's datagrams (they stay queued and are
    /// retried). Receive path: datagrams dropped because they did not fit
    /// the caller's batch slots.
    pub errors: u64,
}

macro_rules! stat_counters {
    ($s:expr, $($field:ident => $name:literal),* $(,)?) => {
        [$(($name, $s.$field)),*]
    };
}

impl FaultStats {
    fn tx_counters(&self) -> [(&'static str, u64); 9] {
        stat_counters!(self,
            packets => "fault_tx_packets", lost => "fault_tx_lost",
            duplicated => "fault_tx_duplicated", reordered => "fault_tx_reordered",
            reorder_timeouts => "fault_tx_reorder_timeouts", corrupted => "fault_tx_corrupted",
            ce_marked => "fault_tx_ce_marked", delayed => "fault_tx_delayed",
            errors => "fault_tx_errors")
    }
    fn rx_counters(&self) -> [(&'static str, u64); 9] {
        stat_counters!(self,
            packets => "fault_rx_packets", lost => "fault_rx_lost",
            duplicated => "fault_rx_duplicated", reordered => "fault_rx_reordered",
            reorder_timeouts => "fault_rx_reorder_timeouts", corrupted => "fault_rx_corrupted",
            ce_marked => "fault_rx_ce_marked", delayed => "fault_rx_delayed",
            errors => "fault_rx_errors")
    }
}

/// Middleware that injects faults into the datagrams passing through any
/// [`Backend`]: loss, duplication, reordering, bit corruption, delay with
/// jitter, and ECN CE marking, on the send path and optionally on the
/// receive path (see [`FaultConfig`]).
///
/// Delayed and reordered datagrams are held inside the injector and released
/// on later `send` / `recv` calls once `now` reaches their time;
/// [`poll_at`](Backend::poll_at) reports when. Datagrams the wrapped backend
/// does not take are kept and offered first on the next call, and until they
/// are taken the injector takes nothing new (backpressure).
///
/// # Determinism
///
/// The random generator is Xoshiro256++ from the `rand_xoshiro` crate,
/// seeded through its `seed_from_u64` (SplitMix64). Unlike `rand`'s
/// `StdRng` / `SmallRng`, whose algorithms may change between releases and
/// are documented as not reproducible, this is a fixed, portable algorithm:
/// a seed gives the same stream on every platform and version, so the same
/// seed and the same sequence of calls (times and datagrams) inject the same
/// faults. Print [`seed`](Self::seed) when a test fails to replay it. The
/// receive path uses the stream after a `long_jump` (2^192 draws apart).
///
/// # Allocation
///
/// Each datagram the injector holds is an owned buffer taken from a pool of
/// recycled buffers (up to 1024), so a steady flow allocates nothing.
#[derive(Debug)]
pub struct FaultInjector<B> {
    inner: B,
    cfg: FaultConfig,
    tx: Path,
    rx: Path,
    pool: Vec<Vec<u8>>,
    out: PacketBatch,
    rx_in: PacketBatch,
    last_now: Nanos,
}

impl<B: Backend> FaultInjector<B> {
    /// Wraps `inner`.
    pub fn new(inner: B, config: FaultConfig) -> Self {
        let cfg = config.sanitized();
        let tx_rng = Xoshiro256PlusPlus::seed_from_u64(cfg.seed);
        let mut rx_rng = tx_rng.clone();
        rx_rng.long_jump();
        FaultInjector {
            inner,
            cfg,
            tx: Path::new(tx_rng),
            rx: Path::new(rx_rng),
            pool: Vec::new(),
            out: PacketBatch::new(0, 0),
            rx_in: PacketBatch::new(0, 0),
            last_now: 0,
        }
    }

    /// The seed, to print when a test fails so that it can be replayed.
    pub fn seed(&self) -> u64 {
        self.cfg.seed
    }

    /// The configuration in force.
    pub fn config(&self) -> &FaultConfig {
        &self.cfg
    }

    /// What the injector did on the send path.
    pub fn stats(&self) -> FaultStats {
        self.tx.stats
    }

    /// What the injector did on the receive path.
    pub fn recv_stats(&self) -> FaultStats {
        self.rx.stats
    }

    /// Datagrams held inside the injector (delayed, held for reordering, or
    /// not yet taken by the wrapped backend).
    pub fn held(&self) -> usize {
        self.tx.held_count() + self.rx.held_count()
    }

    /// The wrapped backend.
    pub fn get_ref(&self) -> &B {
        &self.inner
    }

    /// The wrapped backend, mutably.
    pub fn get_mut(&mut self) -> &mut B {
        &mut self.inner
    }

    /// Unwraps the backend; datagrams still held are discarded.
    pub fn into_inner(self) -> B {
        self.inner
    }

    /// Offers the send path's ready datagrams to the wrapped backend.
    /// Returns whether it took them all.
    fn flush_tx(&mut self, now: Nanos) -> io::Result<bool> {
        while !self.tx.ready.is_empty() {
            let slot = self
                .tx
                .ready
                .iter()
                .take(OUT_BATCH)
                .map(|p| p.data.len())
                .max()
                .unwrap_or(0);
            if self.out.capacity() == 0 || self.out.slot_size() < slot {
                self.out = PacketBatch::new(OUT_BATCH, slot.max(self.out.slot_size()));
            }
            self.out.clear();
            for p in &self.tx.ready {
                if !self.out.push_with_meta(&p.data, p.meta) {
                    break;
                }
                if let Some(t) = p.transmit {
                    let last = self.out.len() - 1;
                    self.out.set_transmit(last, t);
                }
            }
            let offered = self.out.len();
            let taken = self.inner.send(now, &self.out)?.min(offered);
            for p in self.tx.ready.drain(..taken) {
                recycle(&mut self.pool, p.data);
            }
            if taken < offered {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Releases held outgoing datagrams due by `now`; errors of the wrapped
    /// backend are counted, not returned (the datagrams stay queued).
    fn pump_tx(&mut self, now: Nanos) {
        self.tx.advance(&self.cfg, now);
        if self.flush_tx(now).is_err() {
            self.tx.stats.errors += 1;
        }
    }
}

impl<B: Backend> Backend for FaultInjector<B> {
    fn local_addrs(&self) -> &[IpAddr] {
        self.inner.local_addrs()
    }

    fn send(&mut self, now: Nanos, batch: &PacketBatch) -> io::Result<usize> {
        self.last_now = now;
        if !self.cfg.on_send {
            return self.inner.send(now, batch);
        }
        self.tx.advance(&self.cfg, now);
        if !self.flush_tx(now)? {
            return Ok(0);
        }
        for i in 0..batch.len() {
            let beside = Beside {
                meta: batch.meta(i),
                header: None,
                transmit: batch.transmit(i),
            };
            self.tx
                .ingest(&self.cfg, &mut self.pool, now, batch.get(i), beside);
        }
        if self.flush_tx(now).is_err() {
            self.tx.stats.errors += 1;
        }
        Ok(batch.len())
    }

    fn recv(&mut self, now: Nanos, batch: &mut PacketBatch) -> io::Result<usize> {
        self.last_now = now;
        if self.cfg.on_send {
            self.pump_tx(now);
        }
        if !self.cfg.on_recv {
            return self.inner.recv(now, batch);
        }
        batch.clear();
        self.rx.advance(&self.cfg, now);
        if self.rx.ready.len() < batch.capacity() {
            if self.rx_in.capacity() != batch.capacity()
                || self.rx_in.slot_size() != batch.slot_size()
            {
                self.rx_in = PacketBatch::new(batch.capacity(), batch.slot_size());
            }
            self.inner.recv(now, &mut self.rx_in)?;
            for i in 0..self.rx_in.len() {
                let beside = Beside {
                    meta: self.rx_in.meta(i),
                    header: self.rx_in.header(i),
                    transmit: None,
                };
                self.rx
                    .ingest(&self.cfg, &mut self.pool, now, self.rx_in.get(i), beside);
            }
        }
        while !batch.is_full() {
            let Some(p) = self.rx.ready.pop_front() else {
                break;
            };
            let pushed = match p.header {
                Some(h) => batch.push_payload_with(h, p.meta, |slot| {
                    let Some(out) = slot.get_mut(..p.data.len()) else {
                        return 0;
                    };
                    out.copy_from_slice(&p.data);
                    p.data.len()
                }),
                None => batch.push_with_meta(&p.data, p.meta),
            };
            if !pushed {
                self.rx.stats.errors += 1;
            }
            recycle(&mut self.pool, p.data);
        }
        Ok(batch.len())
    }

    /// The earliest of: the wrapped backend's time, the next held datagram's
    /// release, and — when datagrams are ready to go out or to be received
    /// right away — the time of the last call.
    fn poll_at(&self) -> Option<Nanos> {
        let mut t = min_deadline(self.inner.poll_at(), self.tx.poll_at());
        t = min_deadline(t, self.rx.poll_at());
        if !self.tx.ready.is_empty() || !self.rx.ready.is_empty() {
            t = min_deadline(t, Some(self.last_now));
        }
        t
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        let mut v = Vec::new();
        v.extend(self.tx.stats.tx_counters());
        v.extend(self.rx.stats.rx_counters());
        v.extend(self.inner.counters());
        v
    }

    #[cfg(unix)]
    fn wait_fd(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        self.inner.wait_fd()
    }

    fn prepare_wait(&mut self, now: Nanos) -> bool {
        self.inner.prepare_wait(now)
    }

    fn add_local_addr(&mut self, addr: std::net::IpAddr) -> std::io::Result<()> {
        self.inner.add_local_addr(addr)
    }

    fn claim(&mut self, local: std::net::IpAddr, owner: roce_wire::Owner) -> std::io::Result<bool> {
        self.inner.claim(local, owner)
    }

    fn release(&mut self, local: std::net::IpAddr, owner: roce_wire::Owner) {
        self.inner.release(local, owner)
    }

    /// Passed on untouched (forwarding moves a datagram that was
    /// received already, between processes of this host).
    fn forward(
        &mut self,
        now: Nanos,
        header: roce_wire::RxHeader,
        payload: &[u8],
        meta: crate::RxMeta,
        owner: roce_wire::Owner,
    ) -> crate::Forwarded {
        self.inner.forward(now, header, payload, meta, owner)
    }
    fn leave(&mut self) -> bool {
        self.inner.leave()
    }
}

#[cfg(test)]
mod tests;
