//! Why a run of `roce nvmf` failed. The text the user sees is the
//! [`Display`](std::fmt::Display) of an [`NvmfError`]; the error it wraps,
//! if any, is also its [`source`](std::error::Error::source).

use std::fmt;
use std::io;

use roce_nvmf::driver::DriverError;
use roce_verbs::OpenError;

use super::config_error::ConfigError;
use crate::device::DeviceError;

/// A failure of `roce nvmf target`, `check`, `discover` or `perf`.
#[derive(Debug)]
pub(crate) enum NvmfError {
    /// A helper shared with the other commands refused (`ROCE_SHM`,
    /// `--pcap`).
    Device(DeviceError),
    /// The device could not be opened.
    Open(OpenError),
    /// `--config`: the file cannot be served.
    Config(ConfigError),
    /// `--file`: the namespace's file could not be opened or sized.
    NamespaceFile(io::Error),
    /// The NVMe-oF driver failed (a verbs or CM call, an NVMe status, a
    /// timeout, the peer breaking the protocol).
    Driver(DriverError),
    /// A discovery log page could not be parsed.
    Discovery(roce_nvmf::wire::Error),
    /// `check`: the blocks read back differ from those written.
    Differ { blocks: u16 },
    /// `perf --bs` is not a multiple of the namespace's block size.
    BsNotMultiple { bs: u32, block: u32 },
    /// `perf --bs` is above the controller's largest transfer.
    BsAboveMdts { bs: u32, max: usize },
    /// `perf`: the namespace cannot hold one I/O of `--bs`.
    NamespaceTooSmall,
    /// `perf`: commands still in flight 10 s after the end.
    StillInFlight,
    /// `perf`: this many commands completed with an error status.
    CommandsFailed(u64),
    /// `perf --verify`: this many blocks differ from their pattern.
    VerifyFailed(u64),
}

impl fmt::Display for NvmfError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use NvmfError as E;
        match self {
            E::Device(e) => write!(f, "{e}"),
            E::Open(e) => write!(f, "{e}"),
            E::Config(e) => write!(f, "{e}"),
            E::NamespaceFile(e) => write!(f, "{e}"),
            E::Driver(e) => write!(f, "{e}"),
            E::Discovery(e) => write!(f, "{e}"),
            E::Differ { blocks } => {
                write!(f, "{blocks} blocks read back differ from what was written")
            }
            E::BsNotMultiple { bs, block } => {
                write!(f, "--bs {bs} is not a multiple of the block size {block}")
            }
            E::BsAboveMdts { bs, max } => write!(
                f,
                "--bs {bs} is larger than the controller's largest transfer ({max} bytes)"
            ),
            E::NamespaceTooSmall => f.write_str("the namespace is smaller than one I/O"),
            E::StillInFlight => f.write_str("commands still in flight 10 s after the end"),
            E::CommandsFailed(n) => write!(f, "{n} commands failed"),
            E::VerifyFailed(n) => write!(f, "{n} blocks failed verification"),
        }
    }
}

impl std::error::Error for NvmfError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        use NvmfError as E;
        match self {
            E::Device(e) => Some(e),
            E::Open(e) => Some(e),
            E::Config(e) => Some(e),
            E::NamespaceFile(e) => Some(e),
            E::Driver(e) => Some(e),
            E::Discovery(e) => Some(e),
            _ => None,
        }
    }
}

wrap_errors!(
    NvmfError:
    DeviceError => Device,
    OpenError => Open,
    ConfigError => Config,
    DriverError => Driver,
    roce_nvmf::wire::Error => Discovery,
);

#[cfg(test)]
mod tests {
    use super::*;

    /// The texts the user sees, as they were when these were strings.
    #[test]
    fn says_what_the_strings_said() {
        assert_eq!(
            NvmfError::BsAboveMdts {
                bs: 1 << 21,
                max: 1 << 20
            }
            .to_string(),
            "--bs 2097152 is larger than the controller's largest transfer (1048576 bytes)"
        );
        assert_eq!(
            NvmfError::Differ { blocks: 64 }.to_string(),
            "64 blocks read back differ from what was written"
        );
        let e = NvmfError::Driver(DriverError::TimedOut);
        assert_eq!(e.to_string(), "timed out");
        assert!(std::error::Error::source(&e).is_some());
    }
}
