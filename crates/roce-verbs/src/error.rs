//! The error values of the verbs API: one type per kind of call, each
//! listing only what that call can return ([`PostError`],
//! [`CreateError`], [`ModifyQpError`], [`RegMrError`]; `OpenError`,
//! `DeregError` and `CmError` live with their calls), and the general
//! [`Error`] every one of them converts into, so that `?` works in code
//! that returns `Error` or `Box<dyn std::error::Error>`
//! (docs/architecture.md, "The Rust API of roce-verbs").

use std::fmt;

use roce_core::VerbsError;
use roce_io::FabricError;

use crate::error_objects::{CqError, RegionError, SrqLimitError};

pub use crate::error_ops::{CreateError, ModifyQpError, PostError, RegMrError};

/// Why a verbs call was refused: the general error, which each call's own
/// error type converts into. Every failure on user input is one of these;
/// nothing in this crate panics on bad arguments.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Error {
    /// The engine refused an object management call (create, modify,
    /// register, ...).
    Verbs(VerbsError),
    /// A post was refused ([`QueuePair::post_send`](crate::QueuePair::post_send), ...).
    Post(PostError),
    /// Creating a QP, CQ, SRQ or AH was refused.
    Create(CreateError),
    /// Modifying a QP was refused.
    ModifyQp(ModifyQpError),
    /// Registering (or re-registering) a memory region was refused.
    RegMr(RegMrError),
    /// An object belongs to another context.
    WrongContext,
    /// A completion queue call failed (its overflow among them).
    Cq(CqError),
    /// A shared receive queue's limit was refused.
    SrqLimit(SrqLimitError),
    /// A memory region's bytes could not be read or written.
    Region(RegionError),
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
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Verbs(e) => write!(f, "{e}"),
            Error::Post(e) => write!(f, "post refused: {e}"),
            Error::Create(e) => write!(f, "creation refused: {e}"),
            Error::ModifyQp(e) => write!(f, "QP modify refused: {e}"),
            Error::RegMr(e) => write!(f, "memory registration refused: {e}"),
            Error::WrongContext => f.write_str("object of another context"),
            Error::Cq(e) => write!(f, "{e}"),
            Error::SrqLimit(e) => write!(f, "{e}"),
            Error::Region(e) => write!(f, "{e}"),
            Error::MrInUse => f.write_str("memory region still referenced"),
            Error::NotOwned => f.write_str("memory region does not own its memory"),
            Error::InvalidArgument(w) => write!(f, "invalid argument: {w}"),
            Error::Fabric(e) => write!(f, "{e}"),
            Error::ThreadSpawn => f.write_str("cannot start the progress thread"),
            Error::NoRandomness => f.write_str("the operating system's randomness is unavailable"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Post(e) => Some(e),
            Error::Create(e) => Some(e),
            Error::ModifyQp(e) => Some(e),
            Error::RegMr(e) => Some(e),
            Error::Cq(e) => Some(e),
            Error::SrqLimit(e) => Some(e),
            Error::Region(e) => Some(e),
            _ => None,
        }
    }
}

/// Each call's own error is a variant of the general one.
macro_rules! wrap_in_error {
    ($($t:ty => $variant:ident),* $(,)?) => {$(
        impl From<$t> for Error {
            fn from(e: $t) -> Error {
                Error::$variant(e)
            }
        }
    )*};
}

wrap_in_error!(
    VerbsError => Verbs,
    PostError => Post,
    CreateError => Create,
    ModifyQpError => ModifyQp,
    RegMrError => RegMr,
    CqError => Cq,
    SrqLimitError => SrqLimit,
    RegionError => Region,
    FabricError => Fabric,
);

/// A refused owned-buffer post: the buffer comes back with the reason.
#[derive(Debug)]
pub struct OwnedPostError {
    /// The buffer, untouched.
    pub buffer: Vec<u8>,
    /// Why.
    pub error: PostError,
}

impl fmt::Display for OwnedPostError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "owned-buffer post refused: {}", self.error)
    }
}

impl std::error::Error for OwnedPostError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.error)
    }
}

impl From<OwnedPostError> for Error {
    /// The reason (the buffer is dropped).
    fn from(e: OwnedPostError) -> Error {
        Error::Post(e.error)
    }
}

impl From<PostListError> for Error {
    /// The reason (how many were posted is dropped).
    fn from(e: PostListError) -> Error {
        Error::Post(e.error)
    }
}

/// A refused [`QueuePair::post_send_list`](crate::QueuePair::post_send_list):
/// the WRs before the refused one were posted (`ibv_post_send`'s
/// `bad_wr`), the refused one and those after it were not.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PostListError {
    /// How many WRs of the list were posted, in order, before the refused one.
    pub posted: usize,
    /// Why the next one was refused.
    pub error: PostError,
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
