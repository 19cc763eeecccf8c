//! A blocking driver over `roce-verbs`: the target core served on RDMA CM
//! connections ([`TargetServer`], [`serve`]) and a host that connects to
//! an NVMe-oF/RDMA target ([`Host`], [`connect`]).
//!
//! Both move capsules with SEND/RECV on RC queue pairs (NVMe-oF 1.1
//! §7.3.1), the target reads and writes the host's keyed buffers with RDMA
//! READ and WRITE (§7.3.2) and answers with SEND, or SEND with Invalidate
//! when the host's descriptor asked for it. Buffers posted by the target
//! are owned by the verbs layer for the work request's lifetime
//! (`post_send_owned` / `post_recv_owned`); the host registers each
//! command's data buffer with remote access and deregisters it when the
//! response has arrived.

mod host;
mod server;

pub use host::{connect, nvme_status, Host, HostOptions, IoDone};
pub use server::{serve, TargetServer};

use crate::wire::status::Status;

/// Why a driver call failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DriverError {
    /// A verbs call failed.
    Verbs(roce_verbs::Error),
    /// The RDMA CM failed or the peer refused (`private_data` holds the
    /// NVMe-oF reject record when the target sent one).
    Cm(roce_verbs::CmError),
    /// A command completed with an error status.
    Nvme(Status),
    /// No answer in time.
    TimedOut,
    /// The peer broke the protocol (a short or foreign response, a work
    /// completion in error).
    Protocol(&'static str),
}

impl core::fmt::Display for DriverError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            DriverError::Verbs(e) => write!(f, "verbs: {e:?}"),
            DriverError::Cm(e) => write!(f, "connection manager: {e:?}"),
            DriverError::Nvme(s) => write!(f, "NVMe status {:?}/{:#04x}", s.sct, s.sc),
            DriverError::TimedOut => f.write_str("timed out"),
            DriverError::Protocol(m) => write!(f, "protocol: {m}"),
        }
    }
}

impl std::error::Error for DriverError {}

impl From<roce_verbs::Error> for DriverError {
    fn from(e: roce_verbs::Error) -> DriverError {
        DriverError::Verbs(e)
    }
}

impl From<roce_verbs::CmError> for DriverError {
    fn from(e: roce_verbs::CmError) -> DriverError {
        DriverError::Cm(e)
    }
}

/// Each verbs call's own error is a [`DriverError::Verbs`].
macro_rules! from_verbs {
    ($($t:ty),*) => {$(
        impl From<$t> for DriverError {
            fn from(e: $t) -> DriverError {
                DriverError::Verbs(e.into())
            }
        }
    )*};
}

from_verbs!(
    roce_verbs::CqError,
    roce_verbs::RegionError,
    roce_verbs::OwnedPostError,
    roce_verbs::PostError,
    roce_verbs::CreateError,
    roce_verbs::ModifyQpError,
    roce_verbs::RegMrError
);
