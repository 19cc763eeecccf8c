//! Why a run of `roce perf` failed. The text the user sees is the
//! [`Display`](std::fmt::Display) of a [`PerfError`]; decisions (which
//! side of `--loopback` explains the other) are taken on its variants.

use std::fmt;
use std::io;

/// A failure of `roce perf`, here or reported by the peer.
#[derive(Debug)]
pub(crate) enum PerfError {
    /// Flags or parameters refused, this side's or the client's.
    Args(String),
    /// What the peer reported: its `error` message, said as "peer: ...".
    Peer(String),
    /// An I/O call failed: what was being done, and the error.
    Io(String, io::Error),
    /// A verbs call failed (a `roce_verbs::Error`, boxed so that this
    /// file names no crate: the fuzz targets compile it in by path).
    Verbs(Box<dyn std::error::Error + Send + Sync>),
    /// A verbs call failed: what was being done, and the error (boxed,
    /// as [`PerfError::Verbs`]).
    Call(String, Box<dyn std::error::Error + Send + Sync>),
    /// A helper shared with the other commands refused (a
    /// `crate::device::DeviceError`, or a `crate::rping::RpingError` of
    /// the rdma_cm accept loop, boxed so that this file names no crate
    /// module).
    Device(Box<dyn std::error::Error + Send + Sync>),
    /// The peer sent what its exchange does not allow (a malformed or
    /// unexpected message).
    Protocol(String),
    /// The peer closed the control connection.
    PeerClosed,
    /// The peer finished its run and sent its result while this side
    /// still waited for it.
    PeerFinished,
    /// The data received (or read back) is not what was sent.
    Data(String),
    /// The peer was silent for too long.
    Timeout(String),
    /// Ctrl-C (here or at the peer): what was cut short.
    Interrupted(String),
    /// Both sides of `--loopback`: the client's error (if it failed too)
    /// and the server's.
    Loopback {
        client: Option<Box<PerfError>>,
        server: Box<PerfError>,
    },
    /// Anything else, said as it is.
    Failed(String),
}

impl PerfError {
    /// Whether this is the peer's report of its own failure (which the
    /// other side's error usually explains).
    pub(crate) fn is_peer(&self) -> bool {
        matches!(self, PerfError::Peer(_))
    }
}

impl fmt::Display for PerfError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PerfError::Args(m)
            | PerfError::Timeout(m)
            | PerfError::Interrupted(m)
            | PerfError::Failed(m) => f.write_str(m),
            PerfError::Peer(m) => write!(f, "peer: {m}"),
            PerfError::Io(what, e) => write!(f, "{what}: {e}"),
            PerfError::Verbs(e) | PerfError::Device(e) => write!(f, "{e}"),
            PerfError::Call(what, e) => write!(f, "{what}: {e}"),
            PerfError::Protocol(m) | PerfError::Data(m) => f.write_str(m),
            PerfError::PeerClosed => f.write_str("the peer closed the control connection"),
            PerfError::PeerFinished => f.write_str("the peer finished and sent its result"),
            PerfError::Loopback {
                client: None,
                server,
            } => write!(f, "server side: {server}"),
            PerfError::Loopback {
                client: Some(c),
                server,
            } => write!(f, "{c} (server side: {server})"),
        }
    }
}

impl std::error::Error for PerfError {}

#[cfg(test)]
mod tests {
    use super::*;

    /// The texts the user sees, as they were when these were strings.
    #[test]
    fn says_what_the_strings_said() {
        assert_eq!(PerfError::Peer("no QP".into()).to_string(), "peer: no QP");
        let io = io::Error::new(io::ErrorKind::AddrInUse, "in use");
        assert_eq!(
            PerfError::Io("listen".into(), io).to_string(),
            "listen: in use"
        );
        let server = || Box::new(PerfError::Failed("s".into()));
        let only = PerfError::Loopback {
            client: None,
            server: server(),
        };
        assert_eq!(only.to_string(), "server side: s");
        let both = PerfError::Loopback {
            client: Some(Box::new(PerfError::Args("c".into()))),
            server: server(),
        };
        assert_eq!(both.to_string(), "c (server side: s)");
        assert!(PerfError::Peer(String::new()).is_peer());
        assert!(!PerfError::Failed("peer: lookalike".into()).is_peer());
    }
}
