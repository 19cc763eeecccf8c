//! Why `roce devinfo` found no device to show. The text the user sees is
//! the [`Display`](std::fmt::Display) of a [`DevinfoError`]; the error it
//! wraps, if any, is also its [`source`](std::error::Error::source).

use std::fmt;

use roce_verbs::OpenError;

/// A failure of `roce devinfo`.
#[derive(Debug)]
pub(crate) enum DevinfoError {
    /// The devices (interfaces) could not be listed.
    List(OpenError),
    /// `-d` names no interface (the name as given).
    NoInterface(String),
}

impl fmt::Display for DevinfoError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DevinfoError::List(e) => write!(f, "{e}"),
            DevinfoError::NoInterface(name) => write!(f, "no interface {name}"),
        }
    }
}

impl std::error::Error for DevinfoError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            DevinfoError::List(e) => Some(e),
            DevinfoError::NoInterface(_) => None,
        }
    }
}
