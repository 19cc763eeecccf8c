//! The deterministic event queue: a radix heap keyed by (time, sequence
//! number), so events at the same picosecond run in the order they were
//! scheduled, whatever the heap's internal layout. Each half of the fabric
//! numbers its events with its own counter, tagged with the half in the
//! lowest bit, so an event keeps the key it was given however late it
//! reaches the other half's queue.

use crate::time::Ps;

/// A node of the fabric.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
pub enum Node {
    /// A host (NIC + roce-core device), by index.
    Host(u32),
    /// A switch, by index.
    Switch(u32),
}

/// What happens at an instant.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Ev {
    /// The last bit of a data frame reached `node`'s `port`.
    Arrive { node: Node, port: u16, pkt: u32 },
    /// A PFC frame for one priority reached `node`'s `port` (the
    /// simulated switches send one class per frame, which keeps events
    /// small).
    Pfc {
        node: Node,
        port: u16,
        prio: u8,
        quanta: u16,
    },
    /// The transmitter of `node`'s `port` finished a frame.
    TxDone { node: Node, port: u16 },
    /// A pause of `node`'s `port` may have expired: try to send.
    Kick { node: Node, port: u16 },
    /// Re-send XOFF for (`port`, `prio`) of a switch if still congested.
    PfcRefresh {
        sw: u32,
        port: u16,
        prio: u8,
        gen: u32,
    },
    /// A host's engine timer.
    HostTimer { host: u32 },
    /// A flow starts.
    FlowStart { flow: u32 },
}

/// The two halves of the fabric, each with its own event queue: the
/// hosts (their engines, applications and NIC transmitters) and the
/// switches. Every link between the halves is a host link.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Side {
    Hosts = 0,
    Switches = 1,
}

impl Ev {
    /// The half whose state this event changes.
    pub(crate) fn side(&self) -> Side {
        match self {
            Ev::Arrive { node, .. }
            | Ev::Pfc { node, .. }
            | Ev::TxDone { node, .. }
            | Ev::Kick { node, .. } => match node {
                Node::Host(_) => Side::Hosts,
                Node::Switch(_) => Side::Switches,
            },
            Ev::PfcRefresh { .. } => Side::Switches,
            Ev::HostTimer { .. } | Ev::FlowStart { .. } => Side::Hosts,
        }
    }
}

/// A radix heap (Ahuja, Mehlhorn, Orlin, Tarjan 1990) over 128-bit keys
/// `time << 64 | sequence`: keys are unique and never below the last one
/// popped (nothing is scheduled in the past), which is all a radix heap
/// needs. Bucket `i` holds the entries whose key first differs from the
/// last popped key at bit `i - 1`; a pop empties the lowest non-empty
/// bucket into lower ones around its minimum. Each entry moves a few times
/// at most, through contiguous vectors, instead of sifting through a
/// binary heap of every pending event. The order is exactly (time,
/// sequence), as before.
pub(crate) struct EventQueue {
    buckets: Vec<Vec<(u128, Ev)>>,
    /// Bit `i - 1` set when bucket `i` (1..=128) holds entries.
    nonempty: u128,
    last: u128,
    /// Key of the last event popped.
    popped: u128,
    len: usize,
    seq: u64,
    /// Lowest bit of every sequence number this queue hands out.
    tag: u64,
    processed: u64,
    high_water: usize,
}

impl Default for EventQueue {
    fn default() -> EventQueue {
        EventQueue::new(Side::Hosts, 0)
    }
}

fn bucket_of(key: u128, last: u128) -> usize {
    (128 - (key ^ last).leading_zeros()) as usize
}

impl EventQueue {
    /// A queue for `side`, with room for `n` events in the first bucket.
    pub(crate) fn new(side: Side, n: usize) -> EventQueue {
        let mut buckets: Vec<Vec<(u128, Ev)>> = (0..129).map(|_| Vec::new()).collect();
        buckets[0].reserve(n.min(1024));
        EventQueue {
            buckets,
            nonempty: 0,
            last: 0,
            popped: 0,
            len: 0,
            seq: 0,
            tag: side as u64,
            processed: 0,
            high_water: 0,
        }
    }

    /// The key of an event at `time` scheduled now by this queue's half.
    pub(crate) fn key(&mut self, time: Ps) -> u128 {
        self.seq += 1;
        (time as u128) << 64 | (self.seq << 1 | self.tag) as u128
    }

    /// Schedules `ev` at `time` (never earlier than the last event popped).
    pub(crate) fn push(&mut self, time: Ps, ev: Ev) {
        let key = self.key(time);
        self.push_key(key, ev);
    }

    /// Schedules `ev` under a key from [`EventQueue::key`] of either half.
    pub(crate) fn push_key(&mut self, key: u128, ev: Ev) {
        // An event before the last one run would break the order; the
        // simulator never makes one, and clamping keeps the order sane.
        let key = key.max(self.popped);
        if key < self.last {
            self.lower_last(key);
        }
        let b = bucket_of(key, self.last);
        self.buckets[b].push((key, ev));
        if b > 0 {
            self.nonempty |= 1 << (b - 1);
        }
        self.len += 1;
        self.high_water = self.high_water.max(self.len);
    }

    /// Re-bases the buckets on `k`, below `last` (the pending minimum a
    /// peek settled on): an event from the other half may come in earlier
    /// than everything pending here. Let `d` be the highest bit where `k`
    /// and `last` differ (`last` has a one there). A pending key whose
    /// highest bit differing from `last` is above `d` differs from `k` at
    /// that same bit, so it keeps its bucket; every other pending key
    /// agrees with `last` down to `d` and so first differs from `k` at
    /// `d`: buckets `0..=d` merge into bucket `d + 1`, which was empty
    /// (a key there would be below `last`).
    fn lower_last(&mut self, k: u128) {
        let b = bucket_of(self.last, k);
        for i in 0..b {
            if self.buckets[i].is_empty() {
                continue;
            }
            let mut moved = std::mem::take(&mut self.buckets[i]);
            self.buckets[b].append(&mut moved);
            self.buckets[i] = moved;
            if i > 0 {
                self.nonempty &= !(1 << (i - 1));
            }
            self.nonempty |= 1 << (b - 1);
        }
        self.last = k;
    }

    /// Makes bucket 0 hold the minimum (if any event is pending).
    fn settle(&mut self) -> bool {
        if !self.buckets[0].is_empty() {
            return true;
        }
        if self.nonempty == 0 {
            return false;
        }
        let i = self.nonempty.trailing_zeros() as usize + 1;
        self.nonempty &= !(1 << (i - 1));
        let moved = std::mem::take(&mut self.buckets[i]);
        let min = moved.iter().map(|e| e.0).min().expect("non-empty");
        self.last = min;
        for e in &moved {
            let b = bucket_of(e.0, min);
            self.buckets[b].push(*e);
            if b > 0 {
                self.nonempty |= 1 << (b - 1);
            }
        }
        // Give the emptied bucket its allocation back.
        let mut moved = moved;
        moved.clear();
        self.buckets[i] = moved;
        true
    }

    /// Time of the earliest event.
    pub(crate) fn peek_time(&mut self) -> Option<Ps> {
        if !self.settle() {
            return None;
        }
        self.buckets[0].last().map(|e| (e.0 >> 64) as Ps)
    }

    /// Removes the earliest event.
    pub(crate) fn pop(&mut self) -> Option<(Ps, Ev)> {
        if !self.settle() {
            return None;
        }
        // Keys are unique, so bucket 0 (key == last) holds one entry.
        let (key, ev) = self.buckets[0].pop()?;
        self.popped = key;
        self.len -= 1;
        self.processed += 1;
        Some(((key >> 64) as Ps, ev))
    }

    /// Events popped so far.
    pub(crate) fn processed(&self) -> u64 {
        self.processed
    }

    /// Most events ever pending at once.
    pub(crate) fn high_water(&self) -> usize {
        self.high_water
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_stay_small() {
        assert!(std::mem::size_of::<(u128, Ev)>() <= 32);
    }

    #[test]
    fn order_matches_a_sort_by_time_then_sequence() {
        // Pseudo-random pushes interleaved with pops, never in the past.
        let mut q = EventQueue::default();
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut now = 0;
        let mut expect = Vec::new();
        let mut got = Vec::new();
        let mut pending: Vec<(Ps, u64, u32)> = Vec::new();
        let mut seq = 0;
        for i in 0..20_000u32 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            if !x.is_multiple_of(3) || pending.is_empty() {
                let t = now + (x >> 40) % 5000;
                seq += 1;
                q.push(t, Ev::HostTimer { host: i });
                pending.push((t, seq, i));
            } else {
                pending.sort();
                let (t, _, h) = pending.remove(0);
                expect.push((t, h));
                let (pt, ev) = q.pop().unwrap();
                let Ev::HostTimer { host } = ev else { panic!() };
                got.push((pt, host));
                now = pt;
            }
        }
        assert_eq!(got, expect);
    }

    /// Keys pushed below the minimum a peek settled on (as the other
    /// half's events arrive between windows) still come out in order.
    #[test]
    fn pushes_below_a_peeked_minimum_keep_the_order() {
        let mut q = EventQueue::default();
        let mut x: u64 = 0x2545_f491_4f6c_dd1d;
        let mut pending: Vec<u128> = Vec::new();
        let mut floor: u128 = 0;
        let mut got = Vec::new();
        let mut expect = Vec::new();
        for i in 0..20_000u32 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            match x % 4 {
                0 | 1 => {
                    let t = (floor >> 64) as Ps + (x >> 36) % 3000;
                    let key = (t as u128) << 64 | ((i as u128) << 1 | 1);
                    q.push_key(key, Ev::HostTimer { host: i });
                    pending.push(key.max(floor));
                }
                2 => {
                    // A peek: settles on the minimum without popping it.
                    pending.sort();
                    let want = pending.first().map(|k| (k >> 64) as Ps);
                    assert_eq!(q.peek_time(), want);
                }
                _ => {
                    if pending.is_empty() {
                        continue;
                    }
                    pending.sort();
                    let k = pending.remove(0);
                    expect.push((k >> 64) as Ps);
                    floor = k;
                    got.push(q.pop().unwrap().0);
                }
            }
        }
        assert_eq!(got, expect);
        assert!(got.len() > 3000);
    }

    #[test]
    fn time_then_fifo_order() {
        let mut q = EventQueue::default();
        q.push(5, Ev::HostTimer { host: 1 });
        q.push(3, Ev::HostTimer { host: 2 });
        q.push(5, Ev::HostTimer { host: 3 });
        q.push(3, Ev::HostTimer { host: 4 });
        q.push(0, Ev::HostTimer { host: 5 });
        let order: Vec<u32> = std::iter::from_fn(|| q.pop())
            .map(|(_, e)| match e {
                Ev::HostTimer { host } => host,
                _ => unreachable!(),
            })
            .collect();
        assert_eq!(order, [5, 2, 4, 1, 3]);
        assert_eq!(q.processed(), 5);
    }
}
