//! One direction's fault pipeline: ingest (loss, corruption, CE marking,
//! duplication) → delay → reorder → ready.

use std::cmp::{Ordering, Reverse};
use std::collections::{BinaryHeap, VecDeque};

use rand_core::RngCore;
use rand_xoshiro::Xoshiro256PlusPlus;
use roce_wire::{Ecn, RxHeader, Transmit};

use super::{FaultConfig, FaultStats};
use crate::backend::{min_deadline, Nanos, RxMeta};
use crate::datagram;

/// Buffers kept for reuse, at most this many.
const POOL_MAX: usize = 1024;

/// A datagram the injector holds.
#[derive(Debug)]
pub(super) struct Pkt {
    pub(super) data: Vec<u8>,
    pub(super) meta: RxMeta,
    /// Its IP and UDP header when it is a received UDP payload (the
    /// receive path of a backend that does not see the header).
    pub(super) header: Option<RxHeader>,
    /// How to send it (the send path; kept in step with a CE mark).
    pub(super) transmit: Option<Transmit>,
}

/// What comes with a datagram's bytes into [`Path::ingest`]: its
/// metadata, and its header when it is a received UDP payload, or how to
/// send it (the send path).
#[derive(Clone, Copy, Debug)]
pub(super) struct Beside {
    pub(super) meta: RxMeta,
    pub(super) header: Option<RxHeader>,
    pub(super) transmit: Option<Transmit>,
}

/// A datagram waiting out its delay; ordered by release time, then by the
/// order it was taken in.
#[derive(Debug)]
struct Timed {
    at: Nanos,
    seq: u64,
    reorder: bool,
    pkt: Pkt,
}

impl PartialEq for Timed {
    fn eq(&self, o: &Self) -> bool {
        (self.at, self.seq) == (o.at, o.seq)
    }
}
impl Eq for Timed {}
impl PartialOrd for Timed {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Timed {
    fn cmp(&self, o: &Self) -> Ordering {
        (self.at, self.seq).cmp(&(o.at, o.seq))
    }
}

/// A datagram held back for reordering.
#[derive(Debug)]
struct Held {
    remaining: usize,
    until: Nanos,
    pkt: Pkt,
}

/// One direction's fault pipeline: ingest → (loss, corrupt, CE, duplicate)
/// → delay → reorder → `ready`.
#[derive(Debug)]
pub(super) struct Path {
    rng: Xoshiro256PlusPlus,
    timed: BinaryHeap<Reverse<Timed>>,
    held: VecDeque<Held>,
    pub(super) ready: VecDeque<Pkt>,
    seq: u64,
    pub(super) stats: FaultStats,
}

/// A uniform number in `[0, 1)` from 53 random bits.
fn unit(x: u64) -> f64 {
    (x >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
}

/// A number in `0..n` (multiply-shift; bias below 2^-64 · n).
fn below(x: u64, n: u128) -> u128 {
    (u128::from(x) * n) >> 64
}

fn take_buf(pool: &mut Vec<Vec<u8>>, d: &[u8]) -> Vec<u8> {
    let mut v = pool.pop().unwrap_or_default();
    v.clear();
    v.extend_from_slice(d);
    v
}

pub(super) fn recycle(pool: &mut Vec<Vec<u8>>, v: Vec<u8>) {
    if pool.len() < POOL_MAX {
        pool.push(v);
    }
}

/// Flips one random bit: in the ICRC-covered bytes when there are any
/// (`payload`: `d` is a UDP payload, from the BTH).
fn flip_bit(d: &mut [u8], payload: bool, r: u64) {
    let covered = if payload {
        datagram::payload_covered_bits(d)
    } else {
        datagram::icrc_covered_bits(d)
    };
    if let Some((start, masked, bits)) = covered {
        if bits > 0 {
            let (byte, mask) =
                datagram::covered_bit(start, masked, below(r, bits as u128) as usize);
            d[byte] ^= mask;
            return;
        }
    }
    if !d.is_empty() {
        let k = below(r, d.len() as u128 * 8) as usize;
        d[k / 8] ^= 1 << (k % 8);
    }
}

impl Path {
    pub(super) fn new(rng: Xoshiro256PlusPlus) -> Self {
        Path {
            rng,
            timed: BinaryHeap::new(),
            held: VecDeque::new(),
            ready: VecDeque::new(),
            seq: 0,
            stats: FaultStats::default(),
        }
    }

    /// Takes one datagram at `now`. Seven random numbers are drawn for every
    /// datagram whatever happens to it, so each fault's decisions depend
    /// only on the seed and the datagram's position: raising the loss rate
    /// drops a superset of the datagrams, and leaves the others' corruption,
    /// marking and timing unchanged.
    pub(super) fn ingest(
        &mut self,
        cfg: &FaultConfig,
        pool: &mut Vec<Vec<u8>>,
        now: Nanos,
        d: &[u8],
        beside: Beside,
    ) {
        let Beside {
            meta,
            header,
            transmit,
        } = beside;
        let mut r = [0u64; 7];
        for x in &mut r {
            *x = self.rng.next_u64();
        }
        self.stats.packets += 1;
        if unit(r[0]) < cfg.loss {
            self.stats.lost += 1;
            return;
        }
        let mut data = take_buf(pool, d);
        let mut meta = meta;
        if unit(r[1]) < cfg.corrupt {
            flip_bit(&mut data, header.is_some(), r[2]);
            self.stats.corrupted += 1;
            // A whole datagram the caller did not vouch for is checked
            // now: the engine must see the damage (its header is the one
            // the ICRC covers, or the check fails, as it should for a
            // damaged datagram). A UDP payload's is checked by its header.
            // Bytes changed here are no longer what the sending engine
            // made: a same-host ring's datagram loses the trust it had.
            meta = meta.with_header_exact(true).with_host_intact(false);
        }
        let mut transmit = transmit;
        let mut header = header;
        if unit(r[3]) < cfg.ce_mark {
            // A UDP payload's ECN is in its header (the ICRC masks it).
            let marked = match &mut header {
                Some(h) if matches!(h.ecn(), Ecn::Ect0 | Ecn::Ect1) => {
                    h.tos |= Ecn::Ce.bits();
                    true
                }
                Some(_) => false,
                None => datagram::mark_ce(&mut data),
            };
            if marked {
                self.stats.ce_marked += 1;
                if let Some(t) = &mut transmit {
                    t.ecn = Ecn::Ce;
                }
            }
        }
        let dup = (unit(r[4]) < cfg.duplicate).then(|| take_buf(pool, &data));
        let reorder = unit(r[5]) < cfg.reorder;
        let jitter = if cfg.jitter_ns > 0 {
            below(r[6], u128::from(cfg.jitter_ns) + 1) as u64
        } else {
            0
        };
        let at = now.saturating_add(cfg.delay_ns).saturating_add(jitter);
        self.schedule(
            cfg,
            now,
            at,
            reorder,
            Pkt {
                data,
                meta,
                header,
                transmit,
            },
        );
        if let Some(copy) = dup {
            self.stats.duplicated += 1;
            self.schedule(
                cfg,
                now,
                at,
                false,
                Pkt {
                    data: copy,
                    meta,
                    header,
                    transmit,
                },
            );
        }
    }

    fn schedule(&mut self, cfg: &FaultConfig, now: Nanos, at: Nanos, reorder: bool, pkt: Pkt) {
        if at <= now {
            self.make_ready(cfg, now, reorder, pkt);
        } else {
            self.stats.delayed += 1;
            self.seq += 1;
            self.timed.push(Reverse(Timed {
                at,
                seq: self.seq,
                reorder,
                pkt,
            }));
        }
    }

    /// A datagram reaches the output at `t`: held back if chosen for
    /// reordering, otherwise queued, letting held datagrams behind it.
    fn make_ready(&mut self, cfg: &FaultConfig, t: Nanos, reorder: bool, pkt: Pkt) {
        if reorder && cfg.reorder_depth > 0 {
            self.held.push_back(Held {
                remaining: cfg.reorder_depth,
                until: t.saturating_add(cfg.reorder_timeout_ns),
                pkt,
            });
            return;
        }
        self.ready.push_back(pkt);
        for h in &mut self.held {
            h.remaining = h.remaining.saturating_sub(1);
        }
        // Held in order with equal decrements: the finished ones lead.
        while self.held.front().is_some_and(|h| h.remaining == 0) {
            if let Some(h) = self.held.pop_front() {
                self.stats.reordered += 1;
                self.ready.push_back(h.pkt);
            }
        }
    }

    fn next_timeout(&self) -> Option<(usize, Nanos)> {
        self.held
            .iter()
            .enumerate()
            .min_by_key(|(_, h)| h.until)
            .map(|(i, h)| (i, h.until))
    }

    /// Releases, in time order, every delayed datagram and every reorder
    /// timeout due at or before `now`.
    pub(super) fn advance(&mut self, cfg: &FaultConfig, now: Nanos) {
        loop {
            let timed_at = self.timed.peek().map(|t| t.0.at).filter(|&t| t <= now);
            let timeout = self.next_timeout().filter(|&(_, t)| t <= now);
            match (timed_at, timeout) {
                (None, None) => break,
                (Some(ta), Some((i, tt))) if tt <= ta => self.time_out(i),
                (None, Some((i, _))) => self.time_out(i),
                (Some(_), _) => {
                    if let Some(Reverse(t)) = self.timed.pop() {
                        self.make_ready(cfg, t.at, t.reorder, t.pkt);
                    }
                }
            }
        }
    }

    fn time_out(&mut self, i: usize) {
        if let Some(h) = self.held.remove(i) {
            self.stats.reorder_timeouts += 1;
            self.ready.push_back(h.pkt);
        }
    }

    pub(super) fn poll_at(&self) -> Option<Nanos> {
        let timed = self.timed.peek().map(|t| t.0.at);
        min_deadline(timed, self.next_timeout().map(|(_, t)| t))
    }

    pub(super) fn held_count(&self) -> usize {
        self.timed.len() + self.held.len() + self.ready.len()
    }
}
