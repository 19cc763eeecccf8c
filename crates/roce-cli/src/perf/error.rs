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
    /// The peer was silent for too long.
    Timeout(String),
    /// Ctrl-C before there was anything to report.
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
            PerfError::Verbs(e) => write!(f, "{e}"),
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

/// Text from the helpers outside perf/ (crate::device, crate::rping) and
/// from the perf helpers that still build their errors as text: said as
/// it is.
impl From<String> for PerfError {
    fn from(m: String) -> PerfError {
        PerfError::Failed(m)
    }
}

impl From<&str> for PerfError {
    fn from(m: &str) -> PerfError {
        PerfError::Failed(m.to_string())
    }
}

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
