//! The deterministic event queue: a binary heap keyed by (time, sequence
//! number), so events at the same picosecond run in the order they were
//! scheduled, whatever the heap's internal layout.

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
    /// Periodic queue sampling.
    Sample,
    /// Periodic PFC watchdog poll.
    Watchdog,
    /// Periodic deadlock check.
    DeadlockCheck,
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
    len: usize,
    seq: u64,
    processed: u64,
    high_water: usize,
}

impl Default for EventQueue {
    fn default() -> EventQueue {
        EventQueue::with_capacity(0)
    }
}

fn bucket_of(key: u128, last: u128) -> usize {
    (128 - (key ^ last).leading_zeros()) as usize
}

impl EventQueue {
    pub(crate) fn with_capacity(n: usize) -> EventQueue {
        let mut buckets: Vec<Vec<(u128, Ev)>> = (0..129).map(|_| Vec::new()).collect();
        buckets[0].reserve(n.min(1024));
        EventQueue {
            buckets,
            nonempty: 0,
            last: 0,
            len: 0,
            seq: 0,
            processed: 0,
            high_water: 0,
        }
    }

    /// Schedules `ev` at `time` (never earlier than the last event popped).
    pub(crate) fn push(&mut self, time: Ps, ev: Ev) {
        self.seq += 1;
        // An event in the past would break the heap's invariant; the
        // simulator never makes one, and clamping keeps the order sane.
        let key = ((time as u128) << 64 | self.seq as u128).max(self.last);
        let b = bucket_of(key, self.last);
        self.buckets[b].push((key, ev));
        if b > 0 {
            self.nonempty |= 1 << (b - 1);
        }
        self.len += 1;
        self.high_water = self.high_water.max(self.len);
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
