//! Why the TCP exchange of `roce pingpong` ([`super::wire`]) failed: a
//! message from the peer that is not an address, or the connection
//! failing under it. The text the user sees is the
//! [`Display`](std::fmt::Display) of a [`WireError`].
//!
//! This file uses only std: the fuzz target `pingpong_wire` compiles it
//! in by path, with `wire.rs`.

use std::fmt;
use std::io;

/// A failure of the out-of-band exchange.
#[derive(Debug)]
pub(crate) enum WireError {
    /// The peer's address message is not UTF-8.
    NotText,
    /// The peer's address message is not `LID:QPN:PSN:GID` in hex: its text.
    Malformed(String),
    /// The peer closed the connection during `what` (a read or write).
    Closed(&'static str),
    /// The peer was silent past the read timeout during `what`.
    TimedOut(&'static str),
    /// Another I/O error during `what`.
    Io(&'static str, io::Error),
    /// The client's last message was not `"done"`: what it sent, as text.
    NotDone(String),
}

impl WireError {
    /// An I/O error during `what`, by its kind: the peer closing the
    /// connection and a read timeout are said in words of their own.
    pub(crate) fn io(what: &'static str, e: io::Error) -> WireError {
        match e.kind() {
            io::ErrorKind::UnexpectedEof => WireError::Closed(what),
            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => WireError::TimedOut(what),
            _ => WireError::Io(what, e),
        }
    }
}

impl fmt::Display for WireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WireError::NotText => f.write_str("the peer's address message is not text"),
            WireError::Malformed(text) => {
                write!(f, "malformed address message from the peer: {text:?}")
            }
            WireError::Closed(what) => write!(f, "{what}: the peer closed the connection"),
            WireError::TimedOut(what) => write!(f, "{what}: timed out"),
            WireError::Io(what, e) => write!(f, "{what}: {e}"),
            WireError::NotDone(sent) => {
                write!(f, "the client sent {sent:?} instead of \"done\"")
            }
        }
    }
}

impl std::error::Error for WireError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            WireError::Io(_, e) => Some(e),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The texts the user sees, as they were when these were strings.
    #[test]
    fn says_what_the_strings_said() {
        let what = "Couldn't read remote address";
        let eof = io::Error::from(io::ErrorKind::UnexpectedEof);
        assert_eq!(
            WireError::io(what, eof).to_string(),
            "Couldn't read remote address: the peer closed the connection"
        );
        for kind in [io::ErrorKind::WouldBlock, io::ErrorKind::TimedOut] {
            let e = WireError::io(what, io::Error::from(kind));
            assert!(matches!(e, WireError::TimedOut(_)));
            assert_eq!(e.to_string(), "Couldn't read remote address: timed out");
        }
        let reset = io::Error::new(io::ErrorKind::ConnectionReset, "reset");
        let e = WireError::io("Couldn't send local address", reset);
        assert_eq!(e.to_string(), "Couldn't send local address: reset");
        assert!(std::error::Error::source(&e).is_some());
        assert_eq!(
            WireError::Malformed("0:1".into()).to_string(),
            "malformed address message from the peer: \"0:1\""
        );
        assert_eq!(
            WireError::NotDone("dome\0".into()).to_string(),
            "the client sent \"dome\\0\" instead of \"done\""
        );
    }
}
