//! The per-operation errors: what a post, a creation, a QP modify and a
//! memory registration can each return (docs/architecture.md, "The Rust
//! API of roce-verbs"). Each converts into the general
//! [`Error`](crate::Error).

use std::fmt;
use std::io::ErrorKind;
use std::net::IpAddr;

use roce_core::{AccessError, Lkey, ModifyError, QpState, VerbsError};

/// Why a post was refused: [`QueuePair::post_send`](crate::QueuePair::post_send)
/// and its list, UD and owned-buffer forms, [`QueuePair::post_recv`](crate::QueuePair::post_recv),
/// [`SharedReceiveQueue::post_recv`](crate::SharedReceiveQueue::post_recv).
/// Nothing was posted (IBTA Vol 1 §11.4.1.1 and §11.4.1.2 list these
/// as the immediate errors of a post).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum PostError {
    /// The send or receive queue is full (`ENOMEM`).
    QueueFull,
    /// The QP's state does not accept this post (a send before RTS, a
    /// receive in RESET).
    BadState(QpState),
    /// More scatter/gather entries than the queue was created for.
    TooManySge,
    /// Inline data longer than the QP's `max_inline_data`.
    InlineTooLong,
    /// The operation is not supported by this QP type (an RDMA operation
    /// on a UD QP, ...).
    UnsupportedOp,
    /// The work request is malformed for this QP: a UD send without a
    /// destination, a message too long, an atomic of the wrong length.
    InvalidWr(&'static str),
    /// A scatter/gather entry names no live memory region of this context.
    UnknownLkey(Lkey),
    /// A scatter/gather entry reaches outside its memory region.
    SgeOutOfBounds(Lkey),
    /// A scatter/gather entry's region, or the address handle, belongs
    /// to another protection domain.
    WrongPd,
    /// An argument is out of range (an owned buffer of 4 GiB or more).
    InvalidArgument(&'static str),
    /// The QP or SRQ is gone from the engine.
    NoSuchQueue,
}

impl fmt::Display for PostError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PostError::QueueFull => f.write_str("queue full"),
            PostError::BadState(s) => {
                write!(f, "QP in state {} does not accept this post", s.name())
            }
            PostError::TooManySge => f.write_str("too many scatter/gather entries"),
            PostError::InlineTooLong => f.write_str("inline data longer than max_inline_data"),
            PostError::UnsupportedOp => f.write_str("operation not supported by this QP type"),
            PostError::InvalidWr(w) => write!(f, "invalid work request: {w}"),
            PostError::UnknownLkey(k) => write!(f, "no memory region has lkey {:#x}", k.value()),
            PostError::SgeOutOfBounds(k) => write!(
                f,
                "scatter/gather entry outside the region of lkey {:#x}",
                k.value()
            ),
            PostError::WrongPd => f.write_str("object of another protection domain"),
            PostError::InvalidArgument(w) => write!(f, "invalid argument: {w}"),
            PostError::NoSuchQueue => f.write_str("no such QP or SRQ"),
        }
    }
}

impl std::error::Error for PostError {}

impl From<roce_core::PostError> for PostError {
    fn from(e: roce_core::PostError) -> PostError {
        use roce_core::PostError as C;
        match e {
            C::BadState(s) => PostError::BadState(s),
            C::QueueFull => PostError::QueueFull,
            C::TooManySge => PostError::TooManySge,
            C::InlineTooLong => PostError::InlineTooLong,
            C::UnsupportedOp => PostError::UnsupportedOp,
            C::InvalidWr(w) => PostError::InvalidWr(w),
            C::NoSuchObject => PostError::NoSuchQueue,
        }
    }
}

/// Why creating an object was refused:
/// [`ProtectionDomain::create_qp`](crate::ProtectionDomain::create_qp),
/// [`Context::create_cq`](crate::Context::create_cq),
/// [`ProtectionDomain::create_srq`](crate::ProtectionDomain::create_srq),
/// [`ProtectionDomain::create_ah`](crate::ProtectionDomain::create_ah).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum CreateError {
    /// A size or attribute is out of range (`cqe`, `max_wr`,
    /// `max_inline_data`, `sgid_index`, ...).
    InvalidArgument(&'static str),
    /// A CQ or completion channel of another context.
    WrongContext,
    /// An SRQ of another protection domain.
    WrongPd,
    /// Every QP number the engine drew is taken (on this host, by this
    /// process or another one sharing the address).
    Exhausted,
    /// The address handle's source GID could not be put to use: its
    /// RoCE UDP port is taken, or the backend cannot add addresses.
    AddrUnavailable(IpAddr, ErrorKind),
}

impl fmt::Display for CreateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CreateError::InvalidArgument(w) => write!(f, "invalid argument: {w}"),
            CreateError::WrongContext => f.write_str("object of another context"),
            CreateError::WrongPd => f.write_str("object of another protection domain"),
            CreateError::Exhausted => f.write_str("no QP number left"),
            CreateError::AddrUnavailable(a, k) => addr_unavailable(f, *a, *k),
        }
    }
}

impl std::error::Error for CreateError {}

impl From<VerbsError> for CreateError {
    fn from(e: VerbsError) -> CreateError {
        match e {
            VerbsError::Busy => CreateError::Exhausted,
            VerbsError::InvalidArgument(w) => CreateError::InvalidArgument(w),
            // The handles hold the PD, CQs and SRQ: only a bug gets here.
            _ => CreateError::InvalidArgument("PD, CQ or SRQ not found"),
        }
    }
}

/// Why a QP modify was refused: [`QueuePair::modify`](crate::QueuePair::modify)
/// and the helpers over it ([`QueuePair::connect`](crate::QueuePair::connect),
/// `to_init`, `to_rts`, `ready_ud`). The QP did not change.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ModifyQpError {
    /// The transition or its attribute mask is not in the IBTA table
    /// (IBTA Vol 1 §10.3.1, §11.2.5.2; `roce_core::qp::state`).
    Transition(ModifyError),
    /// An attribute is out of range (a `sgid_index` without a GID, a
    /// helper used on the wrong QP type, ...).
    InvalidArgument(&'static str),
    /// The source GID could not be put to use: its RoCE UDP port is
    /// taken, or the backend cannot add addresses.
    AddrUnavailable(IpAddr, ErrorKind),
    /// The QP is gone from the engine.
    NoSuchQp,
}

impl fmt::Display for ModifyQpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ModifyQpError::Transition(e) => write!(f, "{e}"),
            ModifyQpError::InvalidArgument(w) => write!(f, "invalid argument: {w}"),
            ModifyQpError::AddrUnavailable(a, k) => addr_unavailable(f, *a, *k),
            ModifyQpError::NoSuchQp => f.write_str("no such QP"),
        }
    }
}

impl std::error::Error for ModifyQpError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ModifyQpError::Transition(e) => Some(e),
            _ => None,
        }
    }
}

impl From<VerbsError> for ModifyQpError {
    fn from(e: VerbsError) -> ModifyQpError {
        match e {
            VerbsError::Modify(m) => ModifyQpError::Transition(m),
            VerbsError::InvalidArgument(w) => ModifyQpError::InvalidArgument(w),
            VerbsError::NotFound => ModifyQpError::NoSuchQp,
            VerbsError::Access(_) | VerbsError::Busy => {
                ModifyQpError::InvalidArgument("attribute refused")
            }
        }
    }
}

/// Why a memory registration was refused:
/// [`ProtectionDomain::reg_mr`](crate::ProtectionDomain::reg_mr), its
/// raw forms, and [`MemoryRegion::rereg`](crate::MemoryRegion::rereg).
/// Nothing was registered or changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum RegMrError {
    /// The access rights are a combination the verbs forbid (remote write
    /// or atomic without local write, IBTA Vol 1 §10.6.3.2).
    InvalidAccess,
    /// The region's range or pointer is invalid (NULL, wrapping the
    /// address space), or an owned region's memory was to be replaced.
    InvalidArgument(&'static str),
    /// The new PD is of another context.
    WrongContext,
    /// The region is no longer registered (it was revoked or invalidated).
    NotRegistered,
}

impl fmt::Display for RegMrError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RegMrError::InvalidAccess => f.write_str("invalid combination of access rights"),
            RegMrError::InvalidArgument(w) => write!(f, "invalid argument: {w}"),
            RegMrError::WrongContext => f.write_str("protection domain of another context"),
            RegMrError::NotRegistered => f.write_str("the region is no longer registered"),
        }
    }
}

impl std::error::Error for RegMrError {}

impl From<VerbsError> for RegMrError {
    fn from(e: VerbsError) -> RegMrError {
        match e {
            VerbsError::Access(AccessError::NoPermission) => RegMrError::InvalidAccess,
            VerbsError::Access(AccessError::BadKey) | VerbsError::NotFound => {
                RegMrError::NotRegistered
            }
            VerbsError::InvalidArgument(w) => RegMrError::InvalidArgument(w),
            _ => RegMrError::InvalidArgument("region out of range"),
        }
    }
}

fn addr_unavailable(f: &mut fmt::Formatter<'_>, a: IpAddr, k: ErrorKind) -> fmt::Result {
    if k == ErrorKind::AddrInUse {
        write!(
            f,
            "the local address {a} cannot be used: its RoCE UDP port is taken (another process or RoCE stack holds it)"
        )
    } else {
        write!(f, "the local address {a} cannot be used: {k}")
    }
}
