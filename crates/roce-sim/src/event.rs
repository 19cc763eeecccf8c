//! The deterministic event queue: a binary heap keyed by (time, sequence
//! number), so events at the same picosecond run in the order they were
//! scheduled, whatever the heap's internal layout.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

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

struct Entry {
    time: Ps,
    seq: u64,
    ev: Ev,
}

impl PartialEq for Entry {
    fn eq(&self, o: &Entry) -> bool {
        self.time == o.time && self.seq == o.seq
    }
}
impl Eq for Entry {}
impl PartialOrd for Entry {
    fn partial_cmp(&self, o: &Entry) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Entry {
    // Reversed: BinaryHeap is a max-heap and we want the earliest first.
    fn cmp(&self, o: &Entry) -> Ordering {
        (o.time, o.seq).cmp(&(self.time, self.seq))
    }
}

/// Pending events in time order; ties broken by scheduling order.
#[derive(Default)]
pub(crate) struct EventQueue {
    heap: BinaryHeap<Entry>,
    seq: u64,
    processed: u64,
    high_water: usize,
}

impl EventQueue {
    pub(crate) fn with_capacity(n: usize) -> EventQueue {
        EventQueue {
            heap: BinaryHeap::with_capacity(n),
            seq: 0,
            processed: 0,
            high_water: 0,
        }
    }

    /// Schedules `ev` at `time`.
    pub(crate) fn push(&mut self, time: Ps, ev: Ev) {
        self.seq += 1;
        self.heap.push(Entry {
            time,
            seq: self.seq,
            ev,
        });
        self.high_water = self.high_water.max(self.heap.len());
    }

    /// Time of the earliest event.
    pub(crate) fn peek_time(&self) -> Option<Ps> {
        self.heap.peek().map(|e| e.time)
    }

    /// Removes the earliest event.
    pub(crate) fn pop(&mut self) -> Option<(Ps, Ev)> {
        let e = self.heap.pop()?;
        self.processed += 1;
        Some((e.time, e.ev))
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
        assert!(std::mem::size_of::<Entry>() <= 32);
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
