//! The errors of the calls on completion queues, shared receive queues
//! and memory regions' bytes (docs/architecture.md, "The Rust API of
//! roce-verbs"). Each converts into the general [`Error`](crate::Error).

use std::fmt;

use roce_core::{AccessError, VerbsError};

/// Why a completion queue call failed: [`poll`](crate::CompletionQueue::poll)
/// (and `poll_one`, `poll_until`), [`req_notify`](crate::CompletionQueue::req_notify),
/// [`resize`](crate::CompletionQueue::resize).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum CqError {
    /// Completions were lost for want of room: the CQ is in error and
    /// every later poll fails so (IBTA Vol 1 §11.4.2.1; `EOVERFLOW`).
    Overflow,
    /// The CQ is gone from the engine.
    NoSuchCq,
    /// `resize`: a size outside `1..=4194304`.
    SizeOutOfRange,
    /// `resize`: fewer entries than completions waiting (as rxe refuses
    /// it: `EINVAL`).
    BelowWaiting,
}

impl fmt::Display for CqError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            CqError::Overflow => "completion queue overflowed",
            CqError::NoSuchCq => "no such completion queue",
            CqError::SizeOutOfRange => "cqe must be in 1..=4194304",
            CqError::BelowWaiting => "cqe below the completions waiting",
        })
    }
}

impl std::error::Error for CqError {}

impl From<VerbsError> for CqError {
    fn from(e: VerbsError) -> CqError {
        match e {
            VerbsError::InvalidArgument(_) => CqError::BelowWaiting,
            _ => CqError::NoSuchCq,
        }
    }
}

/// Why [`SharedReceiveQueue::set_limit`](crate::SharedReceiveQueue::set_limit)
/// was refused (nothing changed).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum SrqLimitError {
    /// A limit above the SRQ's `max_wr` (`ibv_modify_srq`'s `EINVAL`).
    AboveMaxWr {
        /// The SRQ's size.
        max_wr: usize,
    },
    /// The SRQ is gone from the engine.
    NoSuchSrq,
}

impl fmt::Display for SrqLimitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SrqLimitError::AboveMaxWr { max_wr } => {
                write!(f, "SRQ limit above its max_wr of {max_wr}")
            }
            SrqLimitError::NoSuchSrq => f.write_str("no such shared receive queue"),
        }
    }
}

impl std::error::Error for SrqLimitError {}

/// Why [`MemoryRegion::read`](crate::MemoryRegion::read),
/// [`write`](crate::MemoryRegion::write) or
/// [`to_vec`](crate::MemoryRegion::to_vec) failed (nothing was copied).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum RegionError {
    /// The range is not inside the region (or its end overflows).
    OutOfBounds,
    /// The region is no longer valid: invalidated, or revoked after its
    /// memory faulted.
    Revoked,
    /// The memory behind the region faulted (the region is revoked from
    /// now on).
    Fault,
}

impl fmt::Display for RegionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            RegionError::OutOfBounds => "range outside the memory region",
            RegionError::Revoked => "memory region no longer valid",
            RegionError::Fault => "the memory behind the region faulted",
        })
    }
}

impl std::error::Error for RegionError {}

impl From<AccessError> for RegionError {
    fn from(e: AccessError) -> RegionError {
        match e {
            AccessError::OutOfBounds => RegionError::OutOfBounds,
            AccessError::Fault => RegionError::Fault,
            // The handle's own keys and PD: only a region gone or
            // invalidated under it fails so.
            AccessError::BadKey | AccessError::WrongPd | AccessError::NoPermission => {
                RegionError::Revoked
            }
        }
    }
}

impl From<VerbsError> for RegionError {
    /// The engine's refusal of an application-side access to a region.
    fn from(e: VerbsError) -> RegionError {
        match e {
            VerbsError::Access(a) => a.into(),
            _ => RegionError::Revoked,
        }
    }
}
