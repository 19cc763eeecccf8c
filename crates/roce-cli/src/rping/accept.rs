//! The rdma_cm accept loop of `roce rping`'s server, which `roce perf
//! --perftest -R` uses too: every connection request accepted at once on
//! a QP of its own, the first to connect served.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use roce_verbs::{CmAccepting, CmConnection, CmError, CmListener, CmRequest};

use super::RpingError;

/// Connection requests a server has accepted at once, each on a QP of
/// its own, while it waits for one of them to connect (its RTU).
const MAX_ACCEPTING: usize = 16;

/// How long an accepted request keeps its place among the
/// [`MAX_ACCEPTING`] before a newer request may take it (a real client's
/// RTU follows the REP within a round trip).
const ACCEPT_PATIENCE: Duration = Duration::from_millis(500);

/// Waits up to `wait` for a client of `listener`: accepts the requests
/// as they come (`start` accepts one on a QP of its own and returns what
/// goes with it, or None to skip it), several at once as rdma_cm's event
/// channel allows, and returns the first that connects; the others are
/// given up (REJ). A request whose RTU never comes, such as a forged one
/// from a flood (docs/security.md, "A fair share per source"), holds no
/// real client up. Its own failures are [`RpingError::WaitTimedOut`] and
/// [`RpingError::Wait`], in the caller's error type `E`, as `start`'s are.
pub(crate) fn first_to_connect<T, E: From<RpingError>>(
    listener: &CmListener,
    wait: Duration,
    mut start: impl FnMut(CmRequest) -> Result<Option<(CmAccepting, T)>, E>,
) -> Result<(CmConnection, T), E> {
    let end = Instant::now().checked_add(wait);
    let mut accepting: VecDeque<(Instant, CmAccepting, T)> = VecDeque::new();
    loop {
        let mut i = 0;
        while i < accepting.len() {
            match accepting[i].1.wait(Duration::ZERO) {
                None => i += 1,
                Some(Ok(conn)) => {
                    let (_, _, t) = accepting.remove(i).expect("in range");
                    return Ok((conn, t));
                }
                // Refused, or the REP's resends went unanswered.
                Some(Err(_)) => drop(accepting.remove(i)),
            }
        }
        if end.is_some_and(|end| Instant::now() >= end) {
            return Err(RpingError::WaitTimedOut.into());
        }
        if accepting.len() >= MAX_ACCEPTING {
            if accepting[0].0.elapsed() < ACCEPT_PATIENCE {
                std::thread::sleep(Duration::from_millis(5));
                continue;
            }
            accepting.pop_front();
        }
        let req = match listener.get_request(Duration::from_millis(10)) {
            Ok(r) => r,
            Err(CmError::TimedOut) => continue,
            Err(e) => return Err(RpingError::Wait(e).into()),
        };
        if let Some((a, t)) = start(req)? {
            accepting.push_back((Instant::now(), a, t));
        }
    }
}
