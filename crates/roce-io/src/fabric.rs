//! An in-memory fabric: any number of endpoints on one simulated switch,
//! in virtual time.

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::io;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, MutexGuard};

use smallvec::SmallVec;

use crate::backend::{Backend, Nanos, PacketBatch, RxMeta};
use crate::datagram;

/// Buffers of delivered datagrams kept for reuse, at most this many.
const POOL_MAX: usize = 1024;

/// The link between one endpoint and the switch: full duplex, the same
/// settings in both directions.
///
/// ```
/// use roce_io::LinkConfig;
/// let link = LinkConfig::new()
///     .latency(1_000) // 1 µs each way
///     .rate(100_000_000_000) // 100 Gb/s
///     .queue_limit(256);
/// assert_eq!(link.rate_bps, Some(100_000_000_000));
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct LinkConfig {
    /// One-way propagation delay of the link, in nanoseconds (default 0).
    pub latency_ns: Nanos,
    /// Line rate in bits per second; `None` (the default) is unlimited, so
    /// serialization takes no time. Only the IP datagram's bytes count (no
    /// Ethernet framing, preamble or gap).
    pub rate_bps: Option<u64>,
    /// Most datagrams the fabric holds for this endpoint: in flight towards
    /// it, waiting for its link, or delivered and not yet received. A
    /// datagram that arrives when the limit is reached is dropped (tail
    /// drop) and counted. `None` (the default) is unlimited.
    pub queue_limit: Option<usize>,
}

impl LinkConfig {
    /// Zero latency, unlimited rate, unlimited queue.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets the one-way latency in nanoseconds.
    pub fn latency(mut self, ns: Nanos) -> Self {
        self.latency_ns = ns;
        self
    }

    /// Sets the line rate in bits per second (0 means unlimited).
    pub fn rate(mut self, bps: u64) -> Self {
        self.rate_bps = (bps > 0).then_some(bps);
        self
    }

    /// Sets the queue limit in datagrams.
    pub fn queue_limit(mut self, packets: usize) -> Self {
        self.queue_limit = Some(packets);
        self
    }

    /// Time to put `len` bytes on the wire at this link's rate (rounded up
    /// to whole nanoseconds).
    pub fn serialization_ns(&self, len: usize) -> Nanos {
        match self.rate_bps {
            None => 0,
            Some(bps) => {
                let bits = len as u128 * 8 * 1_000_000_000;
                let ns = bits.div_ceil(u128::from(bps));
                u64::try_from(ns).unwrap_or(u64::MAX)
            }
        }
    }
}

/// Datagram counters of one endpoint, or of the whole fabric.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct PortStats {
    /// Datagrams handed to the fabric by `send`.
    pub sent: u64,
    /// Their bytes.
    pub sent_bytes: u64,
    /// Datagrams returned by `recv`.
    pub received: u64,
    /// Their bytes.
    pub received_bytes: u64,
    /// Sent datagrams without an IPv4 or IPv6 header to route by.
    pub dropped_malformed: u64,
    /// Sent datagrams whose destination no endpoint owns.
    pub dropped_no_route: u64,
    /// Datagrams for this endpoint dropped because its queue was full.
    pub dropped_queue_full: u64,
    /// Datagrams for this endpoint dropped at `recv` because they were
    /// longer than the receive batch's slots.
    pub dropped_oversize: u64,
}

impl PortStats {
    fn counters(&self) -> Vec<(&'static str, u64)> {
        vec![
            ("sent", self.sent),
            ("sent_bytes", self.sent_bytes),
            ("received", self.received),
            ("received_bytes", self.received_bytes),
            ("dropped_malformed", self.dropped_malformed),
            ("dropped_no_route", self.dropped_no_route),
            ("dropped_queue_full", self.dropped_queue_full),
            ("dropped_oversize", self.dropped_oversize),
        ]
    }
}

/// Why a fabric operation failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum FabricError {
    /// Another endpoint already owns the address.
    AddrInUse(IpAddr),
    /// No endpoint owns the address.
    UnknownAddr(IpAddr),
}

impl fmt::Display for FabricError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FabricError::AddrInUse(a) => write!(f, "address {a} is already on the fabric"),
            FabricError::UnknownAddr(a) => write!(f, "no endpoint owns address {a}"),
        }
    }
}

impl std::error::Error for FabricError {}

/// What a port's owner asked to be called when the fabric queues a
/// datagram for it ([`FabricPort::set_waker`]).
type WakerFn = Arc<dyn Fn() + Send + Sync>;

#[derive(Clone, Default)]
struct Waker(Option<WakerFn>);

impl fmt::Debug for Waker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.0.is_some() {
            "Waker(set)"
        } else {
            "Waker(none)"
        })
    }
}

/// A datagram on its way to an endpoint.
#[derive(Debug)]
struct InFlight {
    deliver_at: Nanos,
    data: Vec<u8>,
}

#[derive(Debug)]
struct Port {
    link: LinkConfig,
    /// When the endpoint → switch direction of the link is next idle.
    up_free: Nanos,
    /// When the switch → endpoint direction is next idle.
    down_free: Nanos,
    /// Ordered by delivery time (links are FIFO).
    queue: VecDeque<InFlight>,
    stats: PortStats,
    waker: Waker,
}

#[derive(Debug, Default)]
struct Switch {
    ports: Vec<Option<Port>>,
    routes: HashMap<IpAddr, usize>,
    totals: PortStats,
    pool: Vec<Vec<u8>>,
}

impl Switch {
    fn port(&mut self, id: usize) -> Option<&mut Port> {
        self.ports.get_mut(id).and_then(Option::as_mut)
    }

    /// Moves one datagram from endpoint `src` into the fabric at `now`;
    /// returns the port it was queued for.
    fn forward(&mut self, src: usize, now: Nanos, d: &[u8]) -> Option<usize> {
        let len = d.len() as u64;
        self.totals.sent += 1;
        self.totals.sent_bytes += len;
        let sp = self.ports.get_mut(src).and_then(Option::as_mut)?;
        sp.stats.sent += 1;
        sp.stats.sent_bytes += len;
        // Store and forward: the whole datagram crosses the sender's link.
        let up_start = now.max(sp.up_free);
        sp.up_free = up_start.saturating_add(sp.link.serialization_ns(d.len()));
        let at_switch = sp.up_free.saturating_add(sp.link.latency_ns);
        let Some(dst) = datagram::dst_addr(d) else {
            sp.stats.dropped_malformed += 1;
            self.totals.dropped_malformed += 1;
            return None;
        };
        let Some(&to) = self.routes.get(&dst) else {
            sp.stats.dropped_no_route += 1;
            self.totals.dropped_no_route += 1;
            return None;
        };
        let tp = self.ports.get_mut(to).and_then(Option::as_mut)?;
        if tp.link.queue_limit.is_some_and(|n| tp.queue.len() >= n) {
            tp.stats.dropped_queue_full += 1;
            self.totals.dropped_queue_full += 1;
            return None;
        }
        // The switch serves each output link in the order datagrams are
        // handed to the fabric.
        let down_start = at_switch.max(tp.down_free);
        tp.down_free = down_start.saturating_add(tp.link.serialization_ns(d.len()));
        let mut deliver_at = tp.down_free.saturating_add(tp.link.latency_ns);
        if let Some(last) = tp.queue.back() {
            // A link never reorders, even if its latency was just lowered.
            deliver_at = deliver_at.max(last.deliver_at);
        }
        let mut data = self.pool.pop().unwrap_or_default();
        data.clear();
        data.extend_from_slice(d);
        tp.queue.push_back(InFlight { deliver_at, data });
        Some(to)
    }
}

/// An in-memory network: endpoints attached to one simulated switch that
/// routes each IP datagram by its destination address.
///
/// A cloneable handle (the state is behind an `Arc<Mutex<..>>`), so
/// endpoints can live on different threads. The fabric forwards any IP
/// datagram, RoCE or not; datagrams with no IPv4 / IPv6 header or an unknown
/// destination are dropped and counted.
///
/// # Timing
///
/// Each endpoint has a full-duplex [`LinkConfig`] to the switch. A datagram
/// sent at `now` is serialized onto the sender's link (after whatever that
/// link is still sending), crosses it (latency), is serialized onto the
/// receiver's link (after whatever that link is still sending), crosses it,
/// and becomes receivable at that instant. With the defaults (no latency,
/// unlimited rate) it is receivable at `now`. The switch serves an output
/// link in the order datagrams were handed to the fabric, which is exact
/// while all senders' links share one latency; links never reorder.
///
/// # Determinism
///
/// No clock and no randomness: the same sequence of calls with the same
/// times gives the same deliveries at the same times.
///
/// # Allocation
///
/// Each datagram in flight is an owned `Vec<u8>`; buffers are recycled
/// through a pool (up to 1024), so a steady flow allocates nothing.
///
/// ```
/// use roce_io::{Backend, Fabric, LinkConfig, PacketBatch};
/// let fabric = Fabric::new();
/// let mut a = fabric.endpoint("10.0.0.1".parse().unwrap()).unwrap();
/// let mut b = fabric
///     .endpoint_with("10.0.0.2".parse().unwrap(), LinkConfig::new().latency(500))
///     .unwrap();
/// let mut ip = [0u8; 20];
/// ip[0] = 0x45;
/// ip[16..20].copy_from_slice(&[10, 0, 0, 2]);
/// let mut batch = PacketBatch::new(8, 2048);
/// batch.push(&ip);
/// assert_eq!(a.send(0, &batch).unwrap(), 1);
/// assert_eq!(b.poll_at(), Some(500));
/// assert_eq!(b.recv(499, &mut batch).unwrap(), 0);
/// assert_eq!(b.recv(500, &mut batch).unwrap(), 1);
/// assert_eq!(batch.get(0), &ip);
/// ```
#[derive(Clone, Debug, Default)]
pub struct Fabric {
    inner: Arc<Mutex<Switch>>,
}

impl Fabric {
    /// An empty fabric.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, Switch> {
        // A panic on another thread cannot leave the switch inconsistent in
        // a way that matters to a test fabric; carry on.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Attaches an endpoint that owns `addr`, with a default link.
    pub fn endpoint(&self, addr: IpAddr) -> Result<FabricPort, FabricError> {
        self.endpoint_with(addr, LinkConfig::default())
    }

    /// Attaches an endpoint that owns `addr`, with the given link.
    pub fn endpoint_with(&self, addr: IpAddr, link: LinkConfig) -> Result<FabricPort, FabricError> {
        let mut sw = self.lock();
        if sw.routes.contains_key(&addr) {
            return Err(FabricError::AddrInUse(addr));
        }
        let port = Port {
            link,
            up_free: 0,
            down_free: 0,
            queue: VecDeque::new(),
            stats: PortStats::default(),
            waker: Waker::default(),
        };
        let id = match sw.ports.iter().position(Option::is_none) {
            Some(free) => {
                sw.ports[free] = Some(port);
                free
            }
            None => {
                sw.ports.push(Some(port));
                sw.ports.len() - 1
            }
        };
        sw.routes.insert(addr, id);
        Ok(FabricPort {
            fabric: self.clone(),
            id,
            addrs: vec![addr],
        })
    }

    /// Changes the link of the endpoint that owns `addr`; datagrams already
    /// in flight keep their delivery times.
    pub fn set_link(&self, addr: IpAddr, link: LinkConfig) -> Result<(), FabricError> {
        let mut sw = self.lock();
        let id = *sw.routes.get(&addr).ok_or(FabricError::UnknownAddr(addr))?;
        let port = sw.port(id).ok_or(FabricError::UnknownAddr(addr))?;
        port.link = link;
        Ok(())
    }

    /// Counters summed over every endpoint, including detached ones.
    pub fn stats(&self) -> PortStats {
        self.lock().totals
    }
}

/// One endpoint of a [`Fabric`]: a [`Backend`] that owns one or more
/// addresses. Dropping it detaches it (its addresses become unroutable and
/// datagrams in flight to it are discarded).
#[derive(Debug)]
pub struct FabricPort {
    fabric: Fabric,
    id: usize,
    addrs: Vec<IpAddr>,
}

impl FabricPort {
    /// Adds another address to this endpoint (for example an IPv6 address
    /// beside an IPv4 one).
    pub fn add_addr(&mut self, addr: IpAddr) -> Result<(), FabricError> {
        let mut sw = self.fabric.lock();
        if sw.routes.contains_key(&addr) {
            return Err(FabricError::AddrInUse(addr));
        }
        sw.routes.insert(addr, self.id);
        self.addrs.push(addr);
        Ok(())
    }

    /// The fabric this endpoint is attached to.
    pub fn fabric(&self) -> &Fabric {
        &self.fabric
    }

    /// Changes this endpoint's link (see [`Fabric::set_link`]).
    pub fn set_link(&self, link: LinkConfig) {
        if let Some(p) = self.fabric.lock().port(self.id) {
            p.link = link;
        }
    }

    /// Has the fabric call `waker` whenever it queues a datagram for this
    /// endpoint (on the sending thread, after the send, once per send call
    /// that queued any), replacing any earlier waker: a progress thread
    /// that sleeps between its polls registers its unpark here, so a send
    /// from another endpoint wakes it at once. Only this endpoint's own
    /// traffic calls it: endpoints of other fabrics, or other endpoints of
    /// this one, never do.
    pub fn set_waker(&self, waker: impl Fn() + Send + Sync + 'static) {
        if let Some(p) = self.fabric.lock().port(self.id) {
            p.waker = Waker(Some(Arc::new(waker)));
        }
    }

    /// Removes the waker [`set_waker`](Self::set_waker) installed.
    pub fn clear_waker(&self) {
        if let Some(p) = self.fabric.lock().port(self.id) {
            p.waker = Waker::default();
        }
    }

    /// This endpoint's counters.
    pub fn stats(&self) -> PortStats {
        self.fabric
            .lock()
            .port(self.id)
            .map(|p| p.stats)
            .unwrap_or_default()
    }

    /// Datagrams the fabric holds for this endpoint (in flight or
    /// receivable).
    pub fn queued(&self) -> usize {
        self.fabric
            .lock()
            .port(self.id)
            .map_or(0, |p| p.queue.len())
    }
}

impl Drop for FabricPort {
    fn drop(&mut self) {
        let mut sw = self.fabric.lock();
        for a in &self.addrs {
            sw.routes.remove(a);
        }
        if let Some(slot) = sw.ports.get_mut(self.id) {
            *slot = None;
        }
    }
}

impl Backend for FabricPort {
    fn local_addrs(&self) -> &[IpAddr] {
        &self.addrs
    }

    /// Takes every datagram (the fabric never pushes back; what it cannot
    /// deliver it drops and counts), then calls the wakers of the
    /// endpoints it queued datagrams for ([`FabricPort::set_waker`]).
    fn send(&mut self, now: Nanos, batch: &PacketBatch) -> io::Result<usize> {
        let mut wake: SmallVec<[(usize, WakerFn); 4]> = SmallVec::new();
        let mut sw = self.fabric.lock();
        for d in batch.iter() {
            let Some(to) = sw.forward(self.id, now, d) else {
                continue;
            };
            if wake.iter().any(|(id, _)| *id == to) {
                continue;
            }
            if let Some(w) = sw.port(to).and_then(|p| p.waker.0.clone()) {
                wake.push((to, w));
            }
        }
        // Outside the lock: a waker may touch the fabric itself.
        drop(sw);
        for (_, w) in wake {
            w();
        }
        Ok(batch.len())
    }

    /// Returns the datagrams whose delivery time is at or before `now`, in
    /// delivery order. Their metadata says the ICRC can be verified: the
    /// fabric carries the whole IP datagram.
    fn recv(&mut self, now: Nanos, batch: &mut PacketBatch) -> io::Result<usize> {
        batch.clear();
        let mut guard = self.fabric.lock();
        let sw = &mut *guard;
        let Some(port) = sw.ports.get_mut(self.id).and_then(Option::as_mut) else {
            return Ok(0);
        };
        let meta = RxMeta::exact();
        while !batch.is_full() && port.queue.front().is_some_and(|f| f.deliver_at <= now) {
            let Some(f) = port.queue.pop_front() else {
                break;
            };
            if batch.push_with_meta(&f.data, meta) {
                port.stats.received += 1;
                port.stats.received_bytes += f.data.len() as u64;
                sw.totals.received += 1;
                sw.totals.received_bytes += f.data.len() as u64;
            } else {
                port.stats.dropped_oversize += 1;
                sw.totals.dropped_oversize += 1;
            }
            if sw.pool.len() < POOL_MAX {
                sw.pool.push(f.data);
            }
        }
        Ok(batch.len())
    }

    /// The delivery time of the next datagram for this endpoint (it may be
    /// at or before the caller's `now`, when it is receivable already).
    fn poll_at(&self) -> Option<Nanos> {
        let mut sw = self.fabric.lock();
        sw.port(self.id)
            .and_then(|p| p.queue.front().map(|f| f.deliver_at))
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        self.stats().counters()
    }
}

#[cfg(test)]
mod tests;
