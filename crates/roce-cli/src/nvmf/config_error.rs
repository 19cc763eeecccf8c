//! Why `roce nvmf target --config FILE` refused its file
//! ([`super::config`]). The text the user sees is the
//! [`Display`](std::fmt::Display) of a [`ConfigError`]; the error it wraps,
//! if any, is also its [`source`](std::error::Error::source).

use std::fmt;
use std::io;
use std::path::PathBuf;

/// A configuration file that cannot be served.
#[derive(Debug)]
pub(crate) enum ConfigError {
    /// The file (or a namespace's device) could not be read.
    Io { path: PathBuf, error: io::Error },
    /// The file is larger than 1 MiB.
    TooLarge(PathBuf),
    /// The file is not JSON.
    NotJson(serde_json::Error),
    /// A field that must be a string is not (the field's name).
    NotString(String),
    /// An NGUID or UUID is not 32 hex digits (with optional dashes).
    NotHex16(String),
    /// An NGUID or UUID has other characters than hex digits.
    NotHex(String),
    /// A subsystem NQN is empty or too long.
    BadNqn(String),
    /// A namespace of subsystem `nqn` has no valid `nsid`.
    NoNsid(String),
    /// Subsystem `nqn` has more namespaces than the target serves.
    TooManyNamespaces { nqn: String, max: usize },
    /// Subsystem `nqn` lists namespace `nsid` twice.
    NsidTwice { nqn: String, nsid: u32 },
    /// Namespace `nsid`'s block size is not a power of two in range.
    BlockSize { nsid: u32 },
    /// Namespace `nsid`'s `mem_blocks` is out of range.
    MemBlocks { nsid: u32 },
    /// Namespace `nsid`'s device could not be opened.
    OpenDevice {
        nsid: u32,
        path: PathBuf,
        error: io::Error,
    },
    /// The file serves no subsystem.
    NoSubsystem,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use ConfigError as E;
        match self {
            E::Io { path, error } => write!(f, "{}: {error}", path.display()),
            E::TooLarge(path) => write!(f, "{}: larger than 1 MiB", path.display()),
            E::NotJson(e) => write!(f, "not JSON: {e}"),
            E::NotString(what) => write!(f, "{what} is not a string"),
            E::NotHex16(s) => write!(f, "'{s}' is not 16 bytes of hex"),
            E::NotHex(s) => write!(f, "'{s}' is not hex"),
            E::BadNqn(nqn) => write!(f, "subsystem NQN '{nqn}' is empty or longer than 223 bytes"),
            E::NoNsid(nqn) => write!(f, "{nqn}: a namespace without a valid nsid"),
            E::TooManyNamespaces { nqn, max } => write!(f, "{nqn}: more than {max} namespaces"),
            E::NsidTwice { nqn, nsid } => write!(f, "{nqn}: namespace {nsid} twice"),
            E::BlockSize { nsid } => write!(
                f,
                "namespace {nsid}: block_size must be a power of two from 512 to 65536"
            ),
            E::MemBlocks { nsid } => write!(
                f,
                "namespace {nsid}: mem_blocks must be from 1 to 64 GiB worth"
            ),
            E::OpenDevice { nsid, path, error } => {
                write!(f, "namespace {nsid}: {}: {error}", path.display())
            }
            E::NoSubsystem => f.write_str("no subsystem to serve"),
        }
    }
}

impl std::error::Error for ConfigError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ConfigError::Io { error, .. } | ConfigError::OpenDevice { error, .. } => Some(error),
            ConfigError::NotJson(e) => Some(e),
            _ => None,
        }
    }
}
