//! [`TargetedFaults`]: the targeted rules of a [`FaultPlan`] (a QP, some
//! opcodes, the Nth datagram, a time window; drop, freeze, link down)
//! around any backend, with a [`FaultLog`] of what they did
//! (docs/debugging.md, "Faults").

use std::collections::VecDeque;
use std::io;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use roce_wire::Transmit;

use super::spec::{FaultAction, FaultRule, QpSelector};
use crate::backend::{min_deadline, Backend, Nanos, PacketBatch, RxMeta};
use crate::datagram;

/// Injections a [`FaultLog`] keeps in full, per rule (the rest are only
/// counted).
pub const LOG_KEEP: usize = 32;

/// The QPs a process created, in order, for `qp=#N`: each QPN and, once
/// known, its peer's. A cheap handle: clones share the table.
#[derive(Clone, Debug, Default)]
pub struct QpIndex(Arc<Mutex<Vec<QpEntry>>>);

/// A QP's number and its peer's, once known.
type QpEntry = (u32, Option<u32>);

impl QpIndex {
    /// An empty table.
    pub fn new() -> QpIndex {
        QpIndex::default()
    }

    fn lock(&self) -> MutexGuard<'_, Vec<QpEntry>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// QP `qpn` was created (it is the next one).
    pub fn created(&self, qpn: u32) {
        self.lock().push((qpn, None));
    }

    /// QP `qpn` sends to `remote` (it was connected).
    pub fn connected(&self, qpn: u32, remote: u32) {
        if let Some(e) = self.lock().iter_mut().rev().find(|e| e.0 == qpn) {
            e.1 = Some(remote);
        }
    }

    /// The `n`th QP created (from 1) and its peer.
    pub fn nth(&self, n: u32) -> Option<(u32, Option<u32>)> {
        let i = usize::try_from(n).ok()?.checked_sub(1)?;
        self.lock().get(i).copied()
    }
}

/// One datagram a rule acted on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Injection {
    /// When, from the plan's start.
    pub at: Nanos,
    /// The rule's index in the plan.
    pub rule: usize,
    /// What it did.
    pub action: FaultAction,
    /// Sent (else received).
    pub tx: bool,
    /// The BTH's opcode, destination QPN and PSN (zero when the datagram
    /// is not RoCE).
    pub opcode: u8,
    /// Destination QPN.
    pub dest_qpn: u32,
    /// PSN.
    pub psn: u32,
}

impl Injection {
    /// The opcode's name (`RC SEND_ONLY`), or `?` for none.
    pub fn opcode_name(&self) -> String {
        roce_wire::Opcode::from_u8(self.opcode).map_or_else(|_| "?".into(), |o| o.to_string())
    }
}

/// Called with each injection the log keeps in full.
pub type InjectionSink = Box<dyn Fn(&Injection, &FaultRule) + Send>;

struct LogInner {
    rules: Vec<FaultRule>,
    /// Datagrams that passed each rule's filters (for `nth`).
    matched: Vec<u64>,
    /// Datagrams each rule acted on.
    counts: Vec<u64>,
    kept: Vec<Injection>,
    sink: Option<InjectionSink>,
}

/// The rules of a plan with what they did, shared by every
/// [`TargetedFaults`] of a process (the Nth datagram is the process's
/// Nth). A cheap handle.
#[derive(Clone)]
pub struct FaultLog(Arc<Mutex<LogInner>>);

impl std::fmt::Debug for FaultLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FaultLog")
            .field("counts", &self.counts())
            .finish_non_exhaustive()
    }
}

impl FaultLog {
    /// A log of `rules`; `sink` hears of each injection kept in full.
    pub fn new(rules: Vec<FaultRule>, sink: Option<InjectionSink>) -> FaultLog {
        let n = rules.len();
        FaultLog(Arc::new(Mutex::new(LogInner {
            rules,
            matched: vec![0; n],
            counts: vec![0; n],
            kept: Vec::new(),
            sink,
        })))
    }

    fn lock(&self) -> MutexGuard<'_, LogInner> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The rules.
    pub fn rules(&self) -> Vec<FaultRule> {
        self.lock().rules.clone()
    }

    /// How many datagrams each rule acted on.
    pub fn counts(&self) -> Vec<u64> {
        self.lock().counts.clone()
    }

    /// The injections kept in full ([`LOG_KEEP`] per rule), in order.
    pub fn injections(&self) -> Vec<Injection> {
        self.lock().kept.clone()
    }

    /// What the first rule that takes datagram `d` (sent if `tx`) at `t`
    /// does to it, logged; `None` lets it pass.
    /// `payload`: `d` is a UDP payload (from the BTH), not a whole IP
    /// datagram.
    fn decide(
        &self,
        qps: &QpIndex,
        t: Nanos,
        tx: bool,
        d: &[u8],
        payload: bool,
    ) -> Option<(FaultAction, Nanos)> {
        let bth = bth_of(d, payload);
        let mut g = self.lock();
        let g = &mut *g;
        for (i, r) in g.rules.iter().enumerate() {
            if r.action == FaultAction::Rnr
                || !(if tx { r.tx } else { r.rx })
                || !r.in_window(t)
                || !matches_qp(r.qp, qps, tx, bth.map(|b| b.1))
                || (!r.ops.is_empty() && !bth.is_some_and(|b| r.ops.iter().any(|o| o.matches(b.0))))
            {
                continue;
            }
            g.matched[i] += 1;
            if r.nth.is_some_and(|n| n != g.matched[i]) {
                continue;
            }
            g.counts[i] += 1;
            let (opcode, dest_qpn, psn) = bth.unwrap_or_default();
            let inj = Injection {
                at: t,
                rule: i,
                action: r.action,
                tx,
                opcode,
                dest_qpn,
                psn,
            };
            if g.counts[i] <= LOG_KEEP as u64 {
                g.kept.push(inj);
                if let Some(s) = &g.sink {
                    s(&inj, r);
                }
            }
            return Some((r.action, r.until.unwrap_or(Nanos::MAX)));
        }
        None
    }
}

fn matches_qp(sel: QpSelector, qps: &QpIndex, tx: bool, dest: Option<u32>) -> bool {
    match sel {
        QpSelector::Any => true,
        QpSelector::Qpn(q) => dest == Some(q),
        QpSelector::Created(n) => match (qps.nth(n), dest) {
            (Some((local, _)), Some(d)) if !tx => d == local,
            (Some((_, Some(remote))), Some(d)) => d == remote,
            _ => false,
        },
    }
}

/// The BTH's opcode, destination QPN and PSN of an IP/UDP datagram.
fn bth_of(d: &[u8], payload: bool) -> Option<(u8, u32, u32)> {
    let at = if payload {
        0
    } else {
        datagram::ip_header_len(d)? + 8
    };
    let b = d.get(at..)?;
    if b.len() < 12 {
        return None;
    }
    let be24 = |x: &[u8]| u32::from_be_bytes([0, x[0], x[1], x[2]]);
    Some((b[0], be24(&b[5..8]), be24(&b[9..12])))
}

/// A datagram the middleware holds.
#[derive(Debug)]
struct Pkt {
    data: Vec<u8>,
    meta: RxMeta,
    transmit: Option<Transmit>,
}

/// Middleware that applies a plan's targeted rules ([`FaultLog`]) to the
/// datagrams passing through `inner`: drops (`drop`, `link-down`) and
/// holds (`freeze`: released in order when the window ends). Times are
/// the backend's `now` less `start` (the plan's start on the same clock).
/// Every datagram sent is copied into a queue first, so each is decided
/// once whatever backpressure follows.
#[derive(Debug)]
pub struct TargetedFaults<B> {
    inner: B,
    log: FaultLog,
    qps: QpIndex,
    start: Nanos,
    ready: VecDeque<Pkt>,
    frozen: VecDeque<(Nanos, Pkt)>,
    out: PacketBatch,
    rx_in: PacketBatch,
    last_now: Nanos,
}

impl<B: Backend> TargetedFaults<B> {
    /// Wraps `inner`.
    pub fn new(inner: B, log: FaultLog, qps: QpIndex, start: Nanos) -> Self {
        TargetedFaults {
            inner,
            log,
            qps,
            start,
            ready: VecDeque::new(),
            frozen: VecDeque::new(),
            out: PacketBatch::new(0, 0),
            rx_in: PacketBatch::new(0, 0),
            last_now: 0,
        }
    }

    /// The wrapped backend.
    pub fn get_ref(&self) -> &B {
        &self.inner
    }

    #[cfg(test)]
    pub(super) fn get_mut_for_test(&mut self) -> &mut B {
        &mut self.inner
    }

    fn thaw(&mut self, now: Nanos) {
        let t = now.saturating_sub(self.start);
        // Held in arrival order; each goes when its window has ended.
        while self.frozen.front().is_some_and(|(until, _)| *until <= t) {
            if let Some((_, p)) = self.frozen.pop_front() {
                self.ready.push_back(p);
            }
        }
    }

    /// Offers the ready datagrams; whether all were taken.
    fn flush(&mut self, now: Nanos) -> io::Result<bool> {
        while !self.ready.is_empty() {
            let slot = self
                .ready
                .iter()
                .take(64)
                .map(|p| p.data.len())
                .max()
                .unwrap_or(0);
            if self.out.capacity() == 0 || self.out.slot_size() < slot {
                self.out = PacketBatch::new(64, slot.max(self.out.slot_size()));
            }
            self.out.clear();
            for p in &self.ready {
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
            self.ready.drain(..taken);
            if taken < offered {
                return Ok(false);
            }
        }
        Ok(true)
    }
}

impl<B: Backend> Backend for TargetedFaults<B> {
    fn local_addrs(&self) -> &[IpAddr] {
        self.inner.local_addrs()
    }

    fn send(&mut self, now: Nanos, batch: &PacketBatch) -> io::Result<usize> {
        self.last_now = now;
        self.thaw(now);
        if !self.flush(now)? {
            return Ok(0);
        }
        let t = now.saturating_sub(self.start);
        for i in 0..batch.len() {
            let d = batch.get(i);
            let verdict = self.log.decide(&self.qps, t, true, d, false);
            let pkt = || Pkt {
                data: d.to_vec(),
                meta: batch.meta(i),
                transmit: batch.transmit(i),
            };
            match verdict {
                None => self.ready.push_back(pkt()),
                Some((FaultAction::Freeze, until)) => self.frozen.push_back((until, pkt())),
                Some(_) => {}
            }
        }
        // Taken: what the wrapped backend refuses now goes on a later call.
        let _ = self.flush(now);
        Ok(batch.len())
    }

    fn recv(&mut self, now: Nanos, batch: &mut PacketBatch) -> io::Result<usize> {
        self.last_now = now;
        self.thaw(now);
        let _ = self.flush(now);
        if self.rx_in.capacity() != batch.capacity() || self.rx_in.slot_size() != batch.slot_size()
        {
            self.rx_in = PacketBatch::new(batch.capacity(), batch.slot_size());
        }
        self.inner.recv(now, &mut self.rx_in)?;
        batch.clear();
        let t = now.saturating_sub(self.start);
        for i in 0..self.rx_in.len() {
            let (d, h) = (self.rx_in.get(i), self.rx_in.header(i));
            let kept = self
                .log
                .decide(&self.qps, t, false, d, h.is_some())
                .is_none();
            if kept && batch.push_with_meta(d, self.rx_in.meta(i)) {
                let last = batch.len() - 1;
                batch.set_header(last, h);
            }
        }
        Ok(batch.len())
    }

    /// The earliest of the wrapped backend's time, the end of the first
    /// freeze holding datagrams, and the last call's time while datagrams
    /// wait to go out.
    fn poll_at(&self) -> Option<Nanos> {
        let mut t = self.inner.poll_at();
        if let Some((until, _)) = self.frozen.front() {
            t = min_deadline(t, Some(self.start.saturating_add(*until)));
        }
        if !self.ready.is_empty() {
            t = min_deadline(t, Some(self.last_now));
        }
        t
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        let mut v = vec![
            ("targeted_injections", self.log.counts().iter().sum()),
            ("targeted_frozen", self.frozen.len() as u64),
        ];
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

    fn add_local_addr(&mut self, addr: IpAddr) -> io::Result<()> {
        self.inner.add_local_addr(addr)
    }

    fn claim(&mut self, local: IpAddr, owner: roce_wire::Owner) -> io::Result<bool> {
        self.inner.claim(local, owner)
    }

    fn release(&mut self, local: IpAddr, owner: roce_wire::Owner) {
        self.inner.release(local, owner)
    }

    /// Passed on untouched (the datagram was received, and decided,
    /// already).
    fn forward(
        &mut self,
        now: Nanos,
        header: roce_wire::RxHeader,
        payload: &[u8],
        meta: RxMeta,
        owner: roce_wire::Owner,
    ) -> crate::Forwarded {
        self.inner.forward(now, header, payload, meta, owner)
    }

    fn leave(&mut self) -> bool {
        self.inner.leave()
    }
}
