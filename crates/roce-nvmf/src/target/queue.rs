//! One RDMA connection = one NVMe queue pair (NVMe-oF 1.1 §7.3: each
//! queue has its own RC queue pair and RDMA CM connection).
//!
//! States and transitions, declared in [`QueueState::transition`]:
//!
//! | from          | event             | to            |
//! |---------------|-------------------|---------------|
//! | AwaitConnect  | Connect succeeds  | Live          |
//! | AwaitConnect  | Connect fails     | AwaitConnect  |
//! | AwaitConnect  | disconnect        | Closed        |
//! | Live          | disconnect        | Closed        |
//!
//! Any other pair is an error value.

use std::collections::{BTreeMap, BTreeSet};

use crate::wire::{Cid, Cntlid, Qid};

/// The identity of a connection, given out by the target.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ConnId(pub u64);

/// A queue's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueueState {
    /// Accepted by RDMA CM; only a Fabrics Connect is allowed.
    AwaitConnect,
    /// Connected to a controller.
    Live {
        /// The controller.
        cntlid: Cntlid,
    },
    /// Disconnected; nothing is allowed.
    Closed,
}

/// What happens to a queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueueEvent {
    /// A Connect completed successfully.
    Connected(Cntlid),
    /// A Connect was answered with an error status.
    ConnectFailed,
    /// The connection went away.
    Disconnect,
}

/// An illegal transition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IllegalTransition {
    /// The state.
    pub from: QueueState,
    /// The event.
    pub event: QueueEvent,
}

impl QueueState {
    /// The state after `event`, or an error if the table has no entry.
    pub fn transition(self, event: QueueEvent) -> Result<QueueState, IllegalTransition> {
        use QueueEvent as E;
        use QueueState as S;
        match (self, event) {
            (S::AwaitConnect, E::Connected(cntlid)) => Ok(S::Live { cntlid }),
            (S::AwaitConnect, E::ConnectFailed) => Ok(S::AwaitConnect),
            (S::AwaitConnect | S::Live { .. }, E::Disconnect) => Ok(S::Closed),
            (from, event) => Err(IllegalTransition { from, event }),
        }
    }
}

/// A command waiting for host data (an RDMA READ the driver performs).
#[derive(Debug, Clone)]
pub(crate) struct Waiting {
    pub(crate) sqe: [u8; 64],
    pub(crate) len: u32,
}

/// Per-connection state.
#[derive(Debug)]
pub(crate) struct Queue {
    pub(crate) state: QueueState,
    /// QID from the RDMA CM request; the Connect must name the same.
    pub(crate) qid: Qid,
    /// Depth: HSQSIZE + 1 from the CM request.
    pub(crate) depth: u16,
    /// Commands received and not yet answered (including held AERs).
    pub(crate) outstanding: BTreeSet<Cid>,
    /// Commands waiting for host data.
    pub(crate) waiting: BTreeMap<Cid, Waiting>,
    /// SQ head: capsules consumed, modulo the depth.
    pub(crate) sqhd: u16,
    /// The host disabled SQ flow control (Connect CATTR bit 2): SQHD is
    /// reported as 0xFFFF.
    pub(crate) sqhd_disabled: bool,
}

impl Queue {
    pub(crate) fn new(qid: Qid, depth: u16) -> Queue {
        Queue {
            state: QueueState::AwaitConnect,
            qid,
            depth,
            outstanding: BTreeSet::new(),
            waiting: BTreeMap::new(),
            sqhd: 0,
            sqhd_disabled: false,
        }
    }

    pub(crate) fn consume(&mut self) {
        self.sqhd = (self.sqhd + 1) % self.depth.max(1);
    }

    pub(crate) fn reported_sqhd(&self) -> u16 {
        if self.sqhd_disabled {
            0xFFFF
        } else {
            self.sqhd
        }
    }

    pub(crate) fn cntlid(&self) -> Option<Cntlid> {
        match self.state {
            QueueState::Live { cntlid } => Some(cntlid),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transition_table() {
        use QueueEvent as E;
        use QueueState as S;
        let c = Cntlid(1);
        let states = [S::AwaitConnect, S::Live { cntlid: c }, S::Closed];
        let events = [E::Connected(c), E::ConnectFailed, E::Disconnect];
        let mut table = Vec::new();
        for s in states {
            for e in events {
                table.push(format!("{s:?} + {e:?} -> {:?}", s.transition(e).ok()));
            }
        }
        let expected = [
            "AwaitConnect + Connected(Cntlid(1)) -> Some(Live { cntlid: Cntlid(1) })",
            "AwaitConnect + ConnectFailed -> Some(AwaitConnect)",
            "AwaitConnect + Disconnect -> Some(Closed)",
            "Live { cntlid: Cntlid(1) } + Connected(Cntlid(1)) -> None",
            "Live { cntlid: Cntlid(1) } + ConnectFailed -> None",
            "Live { cntlid: Cntlid(1) } + Disconnect -> Some(Closed)",
            "Closed + Connected(Cntlid(1)) -> None",
            "Closed + ConnectFailed -> None",
            "Closed + Disconnect -> None",
        ];
        assert_eq!(table, expected);
    }

    #[test]
    fn sqhd_wraps() {
        let mut q = Queue::new(Qid(1), 2);
        q.consume();
        q.consume();
        assert_eq!(q.reported_sqhd(), 0);
        q.sqhd_disabled = true;
        assert_eq!(q.reported_sqhd(), 0xFFFF);
    }
}
