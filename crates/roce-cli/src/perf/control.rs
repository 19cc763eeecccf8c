//! The out-of-band control connection of `roce perf` (TCP, one JSON object
//! per line): a reader thread, waits with timeouts, barriers. This is the
//! project's own format; the perftest-compatible exchange is separate.
//! The messages and their checks are [`super::messages`].

use std::io::{BufRead, BufReader, Write};
use std::net::{IpAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Duration;

use serde_json::{json, Value};

use super::error::PerfError;
use super::interrupts::Interrupts;
pub(crate) use super::messages::{expect_type, Endpoint};
use super::messages::{foreign_peer, peer_error, read_message, type_of};

/// A line-oriented JSON connection. A reader thread turns incoming lines
/// into messages, so loops can poll for them without blocking.
pub(crate) struct Control {
    rx: std::sync::mpsc::Receiver<Result<Value, PerfError>>,
    writer: Arc<Mutex<TcpStream>>,
    alarm: PeerAlarm,
    /// How the run is cut short (Ctrl-C here, a `stop` from the peer).
    int: Interrupts,
    /// An `Error` went out already (the peer needs only the first).
    error_sent: bool,
}

/// Set by the control connection's reader thread when the peer reports an
/// error, so that a loop busy on the data path (which does not read the
/// control connection) ends at once instead of waiting for data that the
/// failed peer will never send.
///
/// It also notes when the peer's `result` arrives: the server of a timed
/// latency test ([`PeerAlarm::until_result`]) has no deadline of its own
/// and ends its loop there, since the client sends its result only after
/// its last message was answered.
#[derive(Clone, Debug, Default)]
pub(crate) struct PeerAlarm(Arc<OnceLock<String>>, Arc<AtomicBool>, bool);

impl PeerAlarm {
    /// `Err` with the peer's message once it has reported an error (or,
    /// from [`PeerAlarm::until_result`], once its result has arrived).
    pub(crate) fn check(&self) -> Result<(), PerfError> {
        match self.0.get() {
            Some(m) => Err(PerfError::Peer(m.clone())),
            None if self.2 && self.1.load(Ordering::SeqCst) => Err(PerfError::PeerFinished),
            None => Ok(()),
        }
    }

    /// An alarm that also goes off when the peer's next `result` arrives.
    pub(crate) fn until_result(&self) -> PeerAlarm {
        self.1.store(false, Ordering::SeqCst);
        PeerAlarm(self.0.clone(), self.1.clone(), true)
    }
}

impl Control {
    /// The control connection over `stream`, cut short by `int`.
    pub(crate) fn new(stream: TcpStream, int: &Interrupts) -> std::io::Result<Control> {
        stream.set_nodelay(true)?;
        let writer = Arc::new(Mutex::new(stream.try_clone()?));
        int.peers.add(&writer);
        let (tx, rx) = std::sync::mpsc::channel();
        let alarm = PeerAlarm::default();
        let raise = alarm.clone();
        let peer_int = int.clone();
        std::thread::Builder::new()
            .name("perf-control".into())
            .spawn(move || {
                let mut reader = BufReader::new(stream);
                // A perftest server (ib_write_bw, roce perf --perftest)
                // answers with its version string, not a JSON line.
                if let Some(e) = reader.fill_buf().ok().and_then(foreign_peer) {
                    let _ = tx.send(Err(PerfError::Protocol(e)));
                    return;
                }
                loop {
                    let msg = read_message(&mut reader);
                    let end = msg.is_err();
                    if msg.as_ref().is_ok_and(|v| type_of(v) == Some("stop")) {
                        // The peer was interrupted: this side's loops end
                        // as if it had been.
                        peer_int.peer_stopped();
                        continue;
                    }
                    if let Some(m) = msg.as_ref().ok().and_then(peer_error) {
                        let _ = raise.0.set(m);
                    }
                    if msg.as_ref().is_ok_and(|v| type_of(v) == Some("result")) {
                        raise.1.store(true, Ordering::SeqCst);
                    }
                    if tx.send(msg).is_err() || end {
                        return;
                    }
                }
            })?;
        Ok(Control {
            rx,
            writer,
            alarm,
            int: int.clone(),
            error_sent: false,
        })
    }

    /// How the run is cut short.
    pub(crate) fn interrupts(&self) -> &Interrupts {
        &self.int
    }

    /// The alarm the reader thread raises when the peer reports an error.
    pub(crate) fn alarm(&self) -> PeerAlarm {
        self.alarm.clone()
    }

    /// The peer's address on the control connection.
    pub(crate) fn peer_ip(&self) -> Option<IpAddr> {
        let w = self.writer.lock().unwrap_or_else(PoisonError::into_inner);
        w.peer_addr().ok().map(|a| a.ip())
    }

    /// The local address of the control connection.
    pub(crate) fn local_ip(&self) -> Option<IpAddr> {
        let w = self.writer.lock().unwrap_or_else(PoisonError::into_inner);
        w.local_addr().ok().map(|a| a.ip())
    }

    pub(crate) fn send(&mut self, v: &Value) -> Result<(), PerfError> {
        let mut line = v.to_string();
        line.push('\n');
        self.writer
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .write_all(line.as_bytes())
            .map_err(|e| PerfError::Io("control connection".into(), e))
    }

    fn check(v: Result<Value, PerfError>) -> Result<Value, PerfError> {
        let v = v?;
        match peer_error(&v) {
            Some(msg) => Err(PerfError::Peer(msg)),
            None => Ok(v),
        }
    }

    /// Receives the next message, waiting at most `timeout` (a minute when
    /// `None`); an `Error` message from the peer becomes an error here.
    /// Ctrl-C ends the wait.
    pub(crate) fn recv_timeout(&mut self, timeout: Option<Duration>) -> Result<Value, PerfError> {
        let end = std::time::Instant::now() + timeout.unwrap_or(Duration::from_secs(60));
        loop {
            let left = end.saturating_duration_since(std::time::Instant::now());
            match self.rx.recv_timeout(left.min(Duration::from_millis(50))) {
                Ok(v) => return Self::check(v),
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) if left.is_zero() => {
                    return Err(PerfError::Timeout("timed out waiting for the peer".into()));
                }
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                    // Not during the report exchange after a stop, which
                    // still needs the peer's answer.
                    if self.int.here() && self.int.waits_end_at_stop() {
                        return Err(PerfError::Interrupted(
                            "interrupted while waiting for the peer".into(),
                        ));
                    }
                }
                Err(_) => return Err(PerfError::PeerClosed),
            }
        }
    }

    /// A message if one arrives within `timeout`.
    pub(crate) fn recv_poll(&mut self, timeout: Duration) -> Result<Option<Value>, PerfError> {
        match self.rx.recv_timeout(timeout) {
            Ok(v) => Self::check(v).map(Some),
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => Ok(None),
            Err(_) => Err(PerfError::PeerClosed),
        }
    }

    /// A message if one has arrived.
    pub(crate) fn try_recv(&mut self) -> Result<Option<Value>, PerfError> {
        match self.rx.try_recv() {
            Ok(v) => Self::check(v).map(Some),
            Err(std::sync::mpsc::TryRecvError::Empty) => Ok(None),
            Err(_) => Err(PerfError::PeerClosed),
        }
    }

    /// Receives a message of the given type.
    pub(crate) fn expect(&mut self, ty: &str) -> Result<Value, PerfError> {
        let v = self.recv_timeout(None)?;
        expect_type(v, ty)
    }

    /// As [`Control::expect`], after an interrupted loop: the peer's
    /// `done`, which that loop stopped waiting for, may come first and is
    /// skipped.
    pub(crate) fn expect_after_stop(&mut self, ty: &str) -> Result<Value, PerfError> {
        loop {
            let v = self.recv_timeout(None)?;
            if v.get("type").and_then(Value::as_str) == Some("done") && ty != "done" {
                continue;
            }
            return expect_type(v, ty);
        }
    }

    /// Both sides send and wait for a barrier.
    pub(crate) fn barrier(&mut self, tag: &str) -> Result<(), PerfError> {
        self.send(&json!({"type": "barrier", "tag": tag}))?;
        let v = self.expect("barrier")?;
        if v.get("tag").and_then(Value::as_str) != Some(tag) {
            return Err(PerfError::Failed(format!(
                "barrier mismatch (wanted '{tag}')"
            )));
        }
        Ok(())
    }

    /// The barrier before the next size of an `-a` run, where both sides
    /// also agree whether to stop: each says whether it is stopping, and
    /// the run goes on only if neither is. (Each side looking at its own
    /// Ctrl-C flag alone, one could stop here while the other, which had
    /// looked just before, waited at the barrier for it.) True: go on.
    pub(crate) fn next_size(&mut self, tag: &str, stopping: bool) -> Result<bool, PerfError> {
        self.send(&json!({"type": "barrier", "tag": tag, "stop": stopping}))?;
        let v = self.expect("barrier")?;
        if v.get("tag").and_then(Value::as_str) != Some(tag) {
            return Err(PerfError::Failed(format!(
                "barrier mismatch (wanted '{tag}')"
            )));
        }
        let peer_stops = v.get("stop").and_then(Value::as_bool).unwrap_or(false);
        // Both sides decide from the same two flags: a stop that comes
        // after this side sent its own shows at the next size (the size's
        // own loops are cut short by it meanwhile).
        Ok(!stopping && !peer_stops)
    }

    /// Tells the peer about a failure (best effort, once).
    pub(crate) fn send_error(&mut self, msg: &str) {
        if !std::mem::replace(&mut self.error_sent, true) {
            let _ = self.send(&json!({"type": "error", "message": msg}));
        }
    }
}

#[cfg(test)]
mod tests {
    use std::io::{BufRead, BufReader};
    use std::net::{TcpListener, TcpStream};
    use std::time::{Duration, Instant};

    use super::*;
    use crate::stop::Stop;

    /// A connected pair on the loopback: (this side, the peer's end).
    fn pair() -> (TcpStream, TcpStream) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let a = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (b, _) = l.accept().unwrap();
        (a, b)
    }

    #[test]
    fn a_stop_request_tells_the_peer_of_each_open_connection() {
        let stop = Stop::new();
        let int = Interrupts::new(&stop);
        let (mine, theirs) = pair();
        let _ctl = Control::new(mine, &int).unwrap();
        assert!(!int.here() && !int.stopping());
        stop.request();
        assert!(int.here() && int.stopping() && !int.by_peer());
        theirs
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        let mut line = String::new();
        BufReader::new(theirs).read_line(&mut line).unwrap();
        assert_eq!(line, "{\"type\":\"stop\"}\n");
    }

    #[test]
    fn the_peers_stop_is_seen_by_its_run_alone() {
        let int = Interrupts::new(&Stop::new());
        let other = Interrupts::new(&Stop::new());
        let (mine, mut theirs) = pair();
        let _ctl = Control::new(mine, &int).unwrap();
        theirs.write_all(b"{\"type\":\"stop\"}\n").unwrap();
        let end = Instant::now() + Duration::from_secs(5);
        while !int.by_peer() && Instant::now() < end {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(int.by_peer() && int.stopping() && !int.here());
        assert!(!other.stopping());
    }

    #[test]
    fn waits_end_at_a_stop_only_while_setting_up() {
        let stop = Stop::new();
        let int = Interrupts::new(&stop);
        let (mine, _theirs) = pair();
        let mut ctl = Control::new(mine, &int).unwrap();
        stop.request();
        let e = ctl.recv_timeout(Some(Duration::from_secs(5))).unwrap_err();
        assert!(matches!(e, PerfError::Interrupted(_)), "{e:?}");
        assert_eq!(e.to_string(), "interrupted while waiting for the peer");
        int.set_up();
        let e = ctl
            .recv_timeout(Some(Duration::from_millis(200)))
            .unwrap_err();
        assert!(matches!(e, PerfError::Timeout(_)), "{e:?}");
        assert_eq!(e.to_string(), "timed out waiting for the peer");
    }
}
