//! The error values of the verbs API.

use std::fmt;

use roce_core::{Lkey, PostError, VerbsError};
use roce_io::FabricError;

/// Why a verbs call was refused. Every failure on user input is one of
/// these; nothing in this crate panics on bad arguments.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Error {
    /// The engine refused an object management call (create, modify,
    /// register, ...).
    Verbs(VerbsError),
    /// The engine refused a post (queue full, bad state, ...).
    Post(PostError),
    /// A scatter/gather entry names no live memory region of this context.
    UnknownLkey(Lkey),
    /// A scatter/gather entry reaches outside its memory region.
    SgeOutOfBounds(Lkey),
    /// An object belongs to another protection domain.
    WrongPd,
    /// An object belongs to another context.
    WrongContext,
    /// The completion queue overflowed; completions were lost.
    CqOverflow,
    /// The memory region is still referenced by outstanding work requests
    /// (or by another handle).
    MrInUse,
    /// The memory region does not own its memory (it was registered with
    /// [`ProtectionDomain::reg_mr_raw`](crate::ProtectionDomain::reg_mr_raw)).
    NotOwned,
    /// An argument is out of range.
    InvalidArgument(&'static str),
    /// The in-memory fabric refused the endpoint.
    Fabric(FabricError),
    /// The progress thread could not be started.
    ThreadSpawn,
    /// The operating system's randomness (`getrandom`) was not available.
    NoRandomness,
    /// A GID (local address) of the context's table could not be put to
    /// use by its backend: its RoCE UDP port is taken there (another
    /// process, a kernel rxe), or the backend cannot add addresses.
    AddrUnavailable(std::net::IpAddr, std::io::ErrorKind),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Verbs(e) => write!(f, "{e}"),
            Error::Post(e) => write!(f, "post refused: {e}"),
            Error::UnknownLkey(k) => write!(f, "no memory region has lkey {:#x}", k.value()),
            Error::SgeOutOfBounds(k) => write!(
                f,
                "scatter/gather entry outside the region of lkey {:#x}",
                k.value()
            ),
            Error::WrongPd => f.write_str("object of another protection domain"),
            Error::WrongContext => f.write_str("object of another context"),
            Error::CqOverflow => f.write_str("completion queue overflowed"),
            Error::MrInUse => f.write_str("memory region still referenced"),
            Error::AddrUnavailable(a, std::io::ErrorKind::AddrInUse) => write!(
                f,
                "the local address {a} cannot be used: its RoCE UDP port is taken (another process or RoCE stack holds it)"
            ),
            Error::AddrUnavailable(a, k) => write!(f, "the local address {a} cannot be used: {k}"),
            Error::NotOwned => f.write_str("memory region does not own its memory"),
            Error::InvalidArgument(w) => write!(f, "invalid argument: {w}"),
            Error::Fabric(e) => write!(f, "{e}"),
            Error::ThreadSpawn => f.write_str("cannot start the progress thread"),
            Error::NoRandomness => f.write_str("the operating system's randomness is unavailable"),
        }
    }
}

impl std::error::Error for Error {}

impl From<VerbsError> for Error {
    fn from(e: VerbsError) -> Error {
        Error::Verbs(e)
    }
}

impl From<PostError> for Error {
    fn from(e: PostError) -> Error {
        Error::Post(e)
    }
}

impl From<FabricError> for Error {
    fn from(e: FabricError) -> Error {
        Error::Fabric(e)
    }
}

/// A refused owned-buffer post: the buffer comes back with the reason.
#[derive(Debug)]
pub struct OwnedPostError {
    /// The buffer, untouched.
    pub buffer: Vec<u8>,
    /// Why.
    pub error: Error,
}

impl fmt::Display for OwnedPostError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "owned-buffer post refused: {}", self.error)
    }
}

impl std::error::Error for OwnedPostError {}

/// A refused [`QueuePair::post_send_list`](crate::QueuePair::post_send_list):
/// the WRs before the refused one were posted (`ibv_post_send`'s
/// `bad_wr`), the refused one and those after it were not.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PostListError {
    /// How many WRs of the list were posted, in order, before the refused one.
    pub posted: usize,
    /// Why the next one was refused.
    pub error: Error,
}

impl fmt::Display for PostListError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "work request {} of the list refused: {}",
            self.posted, self.error
        )
    }
}

impl std::error::Error for PostListError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.error)
    }
}
