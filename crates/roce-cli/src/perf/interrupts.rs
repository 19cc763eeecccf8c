//! How a run of `roce perf` is cut short: Ctrl-C here or the peer.

use std::io::Write;
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};

use crate::stop::Stop;

/// How a run is cut short: by Ctrl-C here (the [`Stop`] the command was
/// given) or by the peer, and whether the session is still being set
/// up. Clones share it; both sides of `--loopback` get the same one, as
/// they share the process's Ctrl-C.
#[derive(Clone, Debug)]
pub(crate) struct Interrupts {
    /// Requested by Ctrl-C: loops stop and report what they measured.
    pub(crate) here: Stop,
    /// Set when the peer says it was interrupted (a `stop` message): this
    /// side's loops end as for Ctrl-C, and it reports what it measured.
    peer: Arc<AtomicBool>,
    /// Cleared once a session is connected: from then on Ctrl-C cuts the
    /// run short and the sides still exchange their reports, so waits on
    /// the peer no longer end at Ctrl-C.
    setting_up: Arc<AtomicBool>,
    /// The control connections open, told at Ctrl-C that this side stops.
    pub(crate) peers: Peers,
}

impl Interrupts {
    /// The run's state, cut short by `stop`: at its request every control
    /// connection's peer is told ([`Peers::announce_stop`]).
    pub(crate) fn new(stop: &Stop) -> Interrupts {
        let peers = Peers::default();
        let announce = peers.clone();
        stop.on_request(move || announce.announce_stop());
        Interrupts {
            here: stop.clone(),
            peer: Arc::new(AtomicBool::new(false)),
            setting_up: Arc::new(AtomicBool::new(true)),
            peers,
        }
    }

    /// Whether Ctrl-C was pressed here.
    pub(crate) fn here(&self) -> bool {
        self.here.requested()
    }

    /// Whether the peer said it was interrupted.
    pub(crate) fn by_peer(&self) -> bool {
        self.peer.load(Ordering::SeqCst)
    }

    /// The peer said it was interrupted (its `stop` message).
    pub(crate) fn peer_stopped(&self) {
        self.peer.store(true, Ordering::SeqCst);
    }

    /// The session is connected: see [`Interrupts::waits_end_at_stop`].
    pub(crate) fn set_up(&self) {
        self.setting_up.store(false, Ordering::SeqCst);
    }

    /// Whether a wait on the peer should end at Ctrl-C (until the session
    /// is connected; afterwards the sides still exchange their reports).
    pub(crate) fn waits_end_at_stop(&self) -> bool {
        self.setting_up.load(Ordering::SeqCst)
    }

    /// Whether the run is being cut short, here or by the peer.
    pub(crate) fn stopping(&self) -> bool {
        self.here() || self.by_peer()
    }
}

/// The control connections open in a run, for Ctrl-C to tell each peer
/// that this side stops ([`Peers::announce_stop`]). Clones share them.
#[derive(Clone, Debug, Default)]
pub(crate) struct Peers(Arc<Mutex<Vec<Weak<Mutex<TcpStream>>>>>);

impl Peers {
    /// Ctrl-C: tells every peer (a `stop` message) that this side stops,
    /// so that it ends its loop too and both sides report what they
    /// measured.
    pub(crate) fn announce_stop(&self) {
        let writers = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        for w in writers.iter().filter_map(Weak::upgrade) {
            let mut w = w.lock().unwrap_or_else(PoisonError::into_inner);
            let _ = w.write_all(b"{\"type\":\"stop\"}\n");
        }
    }

    /// Adds a connection's writer (dropped ones go).
    pub(crate) fn add(&self, writer: &Arc<Mutex<TcpStream>>) {
        let mut all = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        all.retain(|w| w.strong_count() > 0);
        all.push(Arc::downgrade(writer));
    }
}
