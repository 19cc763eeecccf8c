//! One device address shared by several processes of a host
//! ([`DeviceConfig::shared`], docs/host.md): what
//! [`Device::handle_datagram`] says of a datagram that names no object
//! here ([`RxOutcome`]), and the queue of the local communication IDs the
//! driver claims in the host table and releases ([`OwnerChange`],
//! [`Device::poll_owner_change`]).
//!
//! [`DeviceConfig::shared`]: super::DeviceConfig::shared

use std::collections::{HashMap, VecDeque};

use roce_wire::Owner;

use super::Device;

/// What [`Device::handle_datagram`] did with a datagram.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RxOutcome {
    /// The datagram was this device's to handle: processed, answered, or
    /// dropped and counted (as every datagram of a device that is not
    /// [`shared`](super::DeviceConfig::shared)).
    Done,
    /// The datagram names an object this device does not have, which
    /// another process sharing its address may own (docs/host.md): a data
    /// packet's destination QP ([`Owner::Qp`], never 0 or 1), a CM REQ's
    /// or SIDR_REQ's service ID without a listener here
    /// ([`Owner::Service`]), or the local communication ID another CM MAD
    /// names without a connection here ([`Owner::CommId`], IBTA Vol 1
    /// §12.6). Nothing of it was kept or answered; it is counted in
    /// [`DeviceCounters::rx_foreign`](crate::DeviceCounters::rx_foreign)
    /// (and in `rx_datagrams`, as every datagram handed in).
    ///
    /// The driver hands the datagram, unchanged, to the process that owns
    /// this key in the host table; when no other process owns it, it
    /// submits it here again with
    /// [`RxMeta::with_forwarded(true)`](roce_wire::RxMeta::with_forwarded),
    /// and the device answers as an unshared one does (drops it, or sends
    /// the REJ for no listener). Returned only by a
    /// [`shared`](super::DeviceConfig::shared) device, for a datagram not
    /// already [`forwarded`](roce_wire::RxMeta::forwarded): a datagram is
    /// handed on at most once.
    Foreign(Owner),
}

/// A change of what this process owns in the host table (docs/host.md),
/// for the driver to make: see [`Device::poll_owner_change`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum OwnerChange {
    /// Claim this key for this process.
    Claim(Owner),
    /// Release this key, claimed earlier.
    Release(Owner),
}

/// Owner changes queued at most (see [`Device::poll_owner_change`]).
pub(crate) const MAX_OWNER_CHANGES: usize = 4096;

/// The bounded queue of [`OwnerChange`]s (empty and unused unless the
/// device is shared).
#[derive(Debug, Default)]
pub(crate) struct OwnerQueue {
    on: bool,
    q: VecDeque<OwnerChange>,
}

impl OwnerQueue {
    /// A queue that takes changes only when `on` (a shared device).
    pub(crate) fn new(on: bool) -> OwnerQueue {
        OwnerQueue {
            on,
            q: VecDeque::new(),
        }
    }

    /// Queues `c`. When the queue is full, changes that cancel out (a
    /// claim and a later release of the same key, or a release and a later
    /// claim) go first, `c` included; false when none did and `c` was not
    /// queued.
    pub(crate) fn push(&mut self, c: OwnerChange) -> bool {
        if !self.on {
            return true;
        }
        self.q.push_back(c);
        if self.q.len() > MAX_OWNER_CHANGES {
            self.cancel_pairs();
        }
        if self.q.len() > MAX_OWNER_CHANGES {
            self.q.pop_back();
            return false;
        }
        true
    }

    /// Removes every pair of changes of one key that cancel out: O(n), run
    /// only when the queue overflows.
    fn cancel_pairs(&mut self) {
        // Per key, the change still standing (its index and kind).
        let mut open: HashMap<Owner, (usize, bool)> = HashMap::new();
        let mut gone = vec![false; self.q.len()];
        for (i, c) in self.q.iter().enumerate() {
            let (o, claim) = match *c {
                OwnerChange::Claim(o) => (o, true),
                OwnerChange::Release(o) => (o, false),
            };
            match open.get(&o) {
                Some(&(j, k)) if k != claim => {
                    gone[i] = true;
                    gone[j] = true;
                    open.remove(&o);
                }
                _ => {
                    open.insert(o, (i, claim));
                }
            }
        }
        let mut k = 0;
        self.q.retain(|_| {
            k += 1;
            !gone[k - 1]
        });
    }

    /// The oldest queued change.
    pub(crate) fn pop(&mut self) -> Option<OwnerChange> {
        self.q.pop_front()
    }

    /// Changes waiting.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.q.len()
    }
}

impl Device {
    /// The next change of what this process owns in the host table
    /// (docs/host.md, "Wiring it in"), oldest first; `None` when there is
    /// none, and always for a device that is not
    /// [`shared`](super::DeviceConfig::shared).
    ///
    /// The engine draws the local communication ID of every connection it
    /// holds (IBTA Vol 1 §12.6.3): [`Device::cm_connect`],
    /// [`Device::cm_connect_manual`] and [`Device::cm_resolve_ud`] make
    /// one, and so does a REQ received for a listener here (in
    /// [`Device::handle_datagram`]); each queues
    /// `Claim(Owner::CommId(id))`, and its removal (disconnected, rejected,
    /// abandoned, timed out, SIDR answered) `Release(Owner::CommId(id))`.
    /// A received SIDR_REQ queues nothing: the peer never names the ID of
    /// its request (the SIDR_REP carries the peer's own ID), and the
    /// request ends with the answer. Service IDs are not queued either:
    /// listeners are made by the driver's own calls
    /// ([`Device::cm_listen`] and its kin, [`Device::cm_stop_listen`]),
    /// which claim and release them itself; so are QPNs
    /// ([`Device::create_qp_with`], [`Device::destroy_qp`]).
    ///
    /// The driver drains the queue after every batch of calls, and after
    /// a call that makes a connection before the REQ it queued leaves (so
    /// that the peer's REP finds the claim). The queue holds at most 4096
    /// changes; when full, a claim and release that cancel out make room,
    /// and a change that finds none is lost and counted
    /// ([`CmCounters::owner_changes_dropped`](crate::CmCounters::owner_changes_dropped)).
    pub fn poll_owner_change(&mut self) -> Option<OwnerChange> {
        self.cm.owners.pop()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim(id: u32) -> OwnerChange {
        OwnerChange::Claim(Owner::CommId(id))
    }

    fn release(id: u32) -> OwnerChange {
        OwnerChange::Release(Owner::CommId(id))
    }

    #[test]
    fn an_unshared_queue_takes_nothing() {
        let mut q = OwnerQueue::new(false);
        assert!(q.push(claim(1)));
        assert_eq!(q.pop(), None);
    }

    /// A full queue makes room by dropping changes that cancel out, the
    /// incoming one included; with none, the incoming change is refused.
    #[test]
    fn a_full_queue_drops_pairs_that_cancel_out() {
        let mut q = OwnerQueue::new(true);
        for id in 1..=MAX_OWNER_CHANGES as u32 {
            assert!(q.push(claim(id)));
        }
        assert_eq!(q.len(), MAX_OWNER_CHANGES);
        // Its claim is queued: the release cancels it.
        assert!(q.push(release(7)));
        assert_eq!(q.len(), MAX_OWNER_CHANGES - 1);
        assert!(!q.iter_has(claim(7)));
        assert!(q.push(claim(9_999)));
        // Nothing cancels out any more.
        assert!(!q.push(claim(10_000)));
        assert_eq!(q.len(), MAX_OWNER_CHANGES);
        // A release and a later claim of one key cancel out too.
        let mut q = OwnerQueue::new(true);
        assert!(q.push(release(5)));
        for id in 6..MAX_OWNER_CHANGES as u32 + 5 {
            assert!(q.push(claim(id)));
        }
        assert!(q.push(claim(5)));
        assert_eq!(q.len(), MAX_OWNER_CHANGES - 1);
        assert_eq!(q.pop(), Some(claim(6)));
    }

    impl OwnerQueue {
        fn iter_has(&self, c: OwnerChange) -> bool {
            self.q.contains(&c)
        }
    }
}
