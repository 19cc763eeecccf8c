//! The host table's errors: values, one enum for every operation
//! (docs/host.md, "The API").

use std::fmt;
use std::io;
use std::path::PathBuf;

use super::{PortError, NAME_MAX};

/// What went wrong with the host table.
#[derive(Debug)]
pub enum HostError {
    /// The table's file could not be opened or created (`EACCES` from a
    /// file of another user in a sticky directory, `ELOOP` from a
    /// symbolic link, ...).
    Open(PathBuf, io::Error),
    /// The file belongs to another user: never read nor written.
    Foreign {
        /// The file.
        path: PathBuf,
        /// Its owner.
        owner: u32,
    },
    /// The file may be read or written by users other than its owner.
    Permissions {
        /// The file.
        path: PathBuf,
        /// Its mode.
        mode: u32,
    },
    /// The path is not a regular file.
    NotAFile(PathBuf),
    /// The file is not a table of this version and user: the header word
    /// or size that is wrong.
    Corrupt(&'static str),
    /// Another process held the update lock for longer than 5 s.
    Busy,
    /// All [`MAX_SLOTS`](super::MAX_SLOTS) slots belong to live processes.
    NoSlot,
    /// A slot name longer than [`NAME_MAX`].
    NameTooLong,
    /// Not a 24-bit QPN.
    InvalidQpn(u32),
    /// Another live process (its slot) holds the entry.
    Taken(u16),
    /// The map has no room for the entry.
    Full,
    /// This process does not hold the entry.
    NotHeld,
    /// rdma_cm's port rules refuse the bind or listen.
    Port(PortError),
    /// This value was attached by the parent of this (forked) process:
    /// it may look up, not update (the slot and its lock are the
    /// parent's).
    Forked,
    /// This value was opened for lookups alone
    /// ([`HostTable::open_in`](super::HostTable::open_in)): it holds no
    /// slot, so it claims and releases nothing.
    LookupOnly,
    /// A system call failed.
    Io(io::Error),
}

impl fmt::Display for HostError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HostError::Open(p, e) => write!(f, "cannot open the host table {}: {e}", p.display()),
            HostError::Foreign { path, owner } => write!(
                f,
                "the host table {} belongs to user {owner}, not this one: refused",
                path.display()
            ),
            HostError::Permissions { path, mode } => write!(
                f,
                "the host table {} has mode {mode:o}: other users may access it, refused",
                path.display()
            ),
            HostError::NotAFile(p) => write!(f, "{} is not a regular file", p.display()),
            HostError::Corrupt(w) => write!(f, "not a host table of this version ({w})"),
            HostError::Busy => write!(f, "the host table's update lock was held for too long"),
            HostError::NoSlot => write!(f, "the host table has no free slot"),
            HostError::NameTooLong => write!(f, "slot name longer than {NAME_MAX} bytes"),
            HostError::InvalidQpn(q) => write!(f, "{q:#x} is not a 24-bit QPN"),
            HostError::Taken(s) => write!(f, "held by the process in slot {s}"),
            HostError::Full => write!(f, "the host table's map is full"),
            HostError::NotHeld => write!(f, "not held by this process"),
            HostError::Port(e) => write!(f, "rdma_cm port: {e:?}"),
            HostError::Forked => write!(f, "the host table was attached by the parent process"),
            HostError::LookupOnly => {
                write!(f, "the host table was opened for lookups alone: no slot")
            }
            HostError::Io(e) => write!(f, "host table: {e}"),
        }
    }
}

impl std::error::Error for HostError {}

impl From<io::Error> for HostError {
    fn from(e: io::Error) -> HostError {
        HostError::Io(e)
    }
}
