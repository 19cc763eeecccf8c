//! How a perftest-mode traffic loop notices that the peer will send no
//! more: perftest's exchange does not carry `-n`, so two sides given
//! different counts each wait for what the other never sends. A side
//! still waiting when the peer has moved on (its closing key round
//! arrived on the control connection, or the connection closed as the
//! peer exited) stops after a short grace, naming the likely cause; one
//! that sees nothing at all stops after [`STALL`] without a completion.

use super::error::PerfError;
use std::io::ErrorKind;
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// How long a loop may go without a completion.
pub(crate) const STALL: Duration = Duration::from_secs(10);
/// How often the control connection is looked at while a loop waits.
const LOOK_EVERY: Duration = Duration::from_millis(50);
/// How long a loop still waits once the peer has moved on (what it sent
/// before moving on has arrived by then).
const GRACE: Duration = Duration::from_millis(500);

/// The hint every "the peer will send no more" error ends with.
const HINT: &str = "do the two sides have different -n? perftest's exchange does not carry it: \
                    give both sides the same -n";

/// What the peer did on the control connection while this side waited.
#[derive(Clone, Copy, PartialEq, Eq)]
enum MovedOn {
    /// It sent its closing round: its loop is over.
    Finished,
    /// It closed the connection: it exited.
    Closed,
}

/// Watches one traffic loop: its progress, and the control connection.
pub(crate) struct PeerWatch<'a> {
    peer: Option<&'a TcpStream>,
    last_progress: Instant,
    next_look: Instant,
    moved_on: Option<(MovedOn, Instant)>,
    /// Something completed since the last check.
    progressed: bool,
}

impl<'a> PeerWatch<'a> {
    /// A watch over `peer` (`None`: no TCP control connection to look at,
    /// only the stall).
    pub(crate) fn new(peer: Option<&'a TcpStream>) -> PeerWatch<'a> {
        let now = Instant::now();
        PeerWatch {
            peer,
            last_progress: now,
            next_look: now,
            moved_on: None,
            progressed: false,
        }
    }

    /// Something completed: noted without reading the clock (latency
    /// loops call this on every completion, [`PeerWatch::check`] only
    /// every so many idle spins).
    pub(crate) fn progressed(&mut self) {
        self.progressed = true;
    }

    /// The checks of an idle round (see [`super::traffic::Watch::idle`]).
    pub(crate) fn check(
        &mut self,
        look: bool,
        what: impl FnOnce() -> String,
    ) -> Result<(), PerfError> {
        let now = Instant::now();
        if std::mem::take(&mut self.progressed) {
            self.last_progress = now;
            if let Some((m, _)) = self.moved_on {
                self.moved_on = Some((m, now));
            }
        }
        if let Some((m, since)) = self.moved_on {
            if now - since > GRACE {
                let did = match m {
                    MovedOn::Finished => "finished its run",
                    MovedOn::Closed => "closed the connection",
                };
                return Err(PerfError::Failed(format!(
                    "the peer {did} {} this side expects: {HINT}",
                    what()
                )));
            }
        } else if look && now >= self.next_look {
            self.next_look = now + LOOK_EVERY;
            if let Some(m) = self.peer.and_then(look_at) {
                self.moved_on = Some((m, now));
            }
        }
        if now - self.last_progress > STALL {
            return Err(PerfError::Failed(format!(
                "no completion for {} s {}: the peer stopped ({HINT})",
                STALL.as_secs(),
                what()
            )));
        }
        std::thread::yield_now();
        Ok(())
    }
}

/// Whether the control connection has something to read (data: the
/// peer's closing round; end of file: the peer exited), without reading.
fn look_at(s: &TcpStream) -> Option<MovedOn> {
    s.set_nonblocking(true).ok()?;
    let mut b = [0u8; 1];
    let r = s.peek(&mut b);
    let _ = s.set_nonblocking(false);
    match r {
        Ok(0) => Some(MovedOn::Closed),
        Ok(_) => Some(MovedOn::Finished),
        Err(e) if e.kind() == ErrorKind::WouldBlock => None,
        Err(_) => Some(MovedOn::Closed),
    }
}

/// perftest's control planes never cut a loop short (Ctrl-C ends the
/// process); the watch only fails a loop whose peer moved on or stalled.
impl super::traffic::Watch for PeerWatch<'_> {
    fn progressed(&mut self) {
        PeerWatch::progressed(self);
    }

    fn idle(&mut self, look: bool, what: &dyn Fn() -> String) -> Result<bool, PerfError> {
        self.check(look, what).map(|()| true)
    }
}
