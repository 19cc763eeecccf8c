//! Why `roce inspect --qp` refused its value. The text, which clap puts
//! after its `invalid value '...' for '--qp <QPN>'`, is the
//! [`Display`](std::fmt::Display) of a [`QpnError`].

use std::fmt;

/// A `--qp` value that is not a QP number (the value as given).
#[derive(Debug)]
pub(crate) enum QpnError {
    /// Neither decimal nor hex with `0x`.
    NotANumber(String),
    /// Wider than the 24 bits of a QPN.
    TooWide(String),
}

impl fmt::Display for QpnError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            QpnError::NotANumber(s) => write!(f, "'{s}' is not a QP number"),
            QpnError::TooWide(s) => write!(f, "QP number {s} is wider than 24 bits"),
        }
    }
}

impl std::error::Error for QpnError {}
