//! One device address shared by several processes (docs/host.md): what
//! the engine names as another process's is handed on through the
//! backend, and what this process owns (QPNs, listeners' service IDs,
//! connections' communication IDs) is claimed host-wide before anything
//! that names it goes out.
//!
//! The engine of a shared context ([`roce_core::DeviceConfig::shared`])
//! answers [`RxOutcome::Foreign`] for a datagram it has no object for; the
//! backend ([`Backend::forward`]) gives it to the process that owns it, and
//! a datagram nobody else owns goes back to the engine marked forwarded,
//! to be answered as an unshared device would (a REJ for a REQ with no
//! listener, a drop for a QP that does not exist). The engine queues its
//! communication ID claims ([`roce_core::Device::poll_owner_change`]); the
//! progress steps drain them under the engine's lock and apply them to the
//! backend before the batch that may name them is sent. QPNs and service
//! IDs are claimed by the calls that create them.

use std::collections::VecDeque;
use std::net::IpAddr;

use roce_core::{Nanos, Owner, OwnerChange, RxOutcome};
use roce_io::{Backend, Forwarded};

use super::{Core, Io, Shared};

/// QPNs of destroyed QPs this process keeps claimed, so that another
/// process does not take one while datagrams for the old QP may still
/// arrive (the engine keeps its own destroyed QPNs out of reuse too).
const RETIRED_QPNS: usize = 64;

/// The sharing state of a context's I/O side.
#[derive(Default)]
pub(crate) struct Owners {
    /// Datagrams of the receive batch the engine said are another
    /// process's: their index and owner.
    foreign: Vec<(usize, Owner)>,
    /// Claims and releases taken from the engine, not yet applied.
    changes: Vec<OwnerChange>,
}

/// The engine-side part, under the engine's lock: destroyed QPs' numbers
/// still claimed, oldest first, and releases not yet taken.
#[derive(Default, Debug)]
pub(crate) struct Retired {
    qpns: VecDeque<u32>,
    releases: Vec<OwnerChange>,
}

impl Owners {
    /// Notes what the engine did with datagram `i` of the batch.
    pub(crate) fn note(&mut self, i: usize, outcome: RxOutcome) {
        if let RxOutcome::Foreign(o) = outcome {
            self.foreign.push((i, o));
        }
    }

    /// Takes the engine's queued claims and releases, and the retired
    /// QPNs' (under the engine's lock).
    pub(crate) fn take_changes(&mut self, core: &mut Core) {
        while let Some(c) = core.dev.poll_owner_change() {
            self.changes.push(c);
        }
        self.changes.append(&mut core.retired.releases);
    }

    /// Whether anything waits for [`hand_on`] or [`apply`].
    pub(crate) fn pending(&self) -> bool {
        !self.foreign.is_empty() || !self.changes.is_empty()
    }
}

/// Applies the taken claims and releases to the backend, on every address
/// of the context.
pub(crate) fn apply(io: &mut Io, addrs: &[IpAddr]) {
    for c in io.owners.changes.drain(..) {
        match c {
            // A communication ID another process holds (a 32-bit random
            // draw colliding): the MADs naming it may go there, and the
            // connection recovers by resending or times out, as over a
            // lossy link.
            OwnerChange::Claim(o) => {
                for &a in addrs {
                    let _ = io.backend.claim(a, o);
                }
            }
            OwnerChange::Release(o) => release(&mut *io.backend, addrs, o),
        }
    }
}

/// Hands the batch's foreign datagrams to their owners; gives those
/// nobody else owns back to the engine, marked forwarded. True when the
/// engine took any (it may have an answer to send).
pub(crate) fn hand_on(shared: &Shared, io: &mut Io, now: Nanos) -> bool {
    apply(io, &shared.addrs);
    if io.owners.foreign.is_empty() {
        return false;
    }
    let mut again = std::mem::take(&mut io.owners.foreign);
    // What nobody else owns is answered here as an unshared device would;
    // what a live owner could not be handed now is dropped unanswered,
    // as a lost datagram (its sender retransmits).
    // (Only a UDP payload can be handed on: a whole datagram came from
    // a backend that shares no address.)
    again.retain(|&(i, owner)| {
        let Some(h) = io.rx.header(i) else {
            return true;
        };
        match io
            .backend
            .forward(now, h, io.rx.get(i), io.rx.meta(i), owner)
        {
            Forwarded::Sent | Forwarded::Unreachable => false,
            Forwarded::NoOwner | Forwarded::Unshared => true,
        }
    });
    let took = !again.is_empty();
    if took {
        let mut core = shared.core_quiet();
        for &(i, _) in &again {
            let meta = io.rx.meta(i).with_forwarded(true);
            // Answered as an unshared device would: never foreign again.
            super::hand_to_engine(&mut core.dev, now, &io.rx, i, meta);
        }
        io.owners.take_changes(&mut core);
        drop(core);
        apply(io, &shared.addrs);
    }
    again.clear();
    io.owners.foreign = again;
    took
}

/// Applies the claims and releases still queued, before a claim made at
/// once (a QP's number, a listener's service): a release of the same
/// owner, queued when its last object went, must not come after the new
/// claim and undo it. The I/O lock first, then the engine's, as the
/// progress steps take them.
pub(crate) fn settle(io: &mut Io, core: &mut Core, addrs: &[IpAddr]) {
    io.owners.take_changes(core);
    apply(io, addrs);
}

/// Claims `owner` on every address of the context; false (and nothing
/// held) when another process holds it. A backend that cannot say (its
/// table failed) lets it be.
pub(crate) fn claim(backend: &mut (dyn Backend + Send), addrs: &[IpAddr], owner: Owner) -> bool {
    for (k, &a) in addrs.iter().enumerate() {
        if let Ok(false) = backend.claim(a, owner) {
            // Let go of what the addresses before took (a release of
            // what this process does not hold changes nothing).
            release(backend, &addrs[..k], owner);
            return false;
        }
    }
    true
}

/// Releases `owner` on every address of the context.
pub(crate) fn release(backend: &mut (dyn Backend + Send), addrs: &[IpAddr], owner: Owner) {
    for &a in addrs {
        backend.release(a, owner);
    }
}

impl Retired {
    /// `owner` is no longer this process's: the next progress step
    /// releases it.
    pub(crate) fn release(&mut self, owner: Owner) {
        self.releases.push(OwnerChange::Release(owner));
    }
}

/// A QP was destroyed: its QPN stays claimed until [`RETIRED_QPNS`]
/// later destructions, then a progress step releases it.
pub(crate) fn retire_qpn(core: &mut Core, qpn: u32) {
    let r = &mut core.retired;
    r.qpns.push_back(qpn);
    while r.qpns.len() > RETIRED_QPNS {
        if let Some(old) = r.qpns.pop_front() {
            r.releases.push(OwnerChange::Release(Owner::Qp(old)));
        }
    }
}
