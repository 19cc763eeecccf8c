//! Why `roce exec` could not give the program its device files
//! ([`super::provide`]). The text is the [`Display`](std::fmt::Display) of
//! a [`DevFilesError`], said in `roce exec`'s warning; the system error it
//! wraps, if any, is also its [`source`](std::error::Error::source).

use std::fmt;
use std::io;
use std::path::PathBuf;

/// A failure to set up the device files' mount namespace.
#[derive(Debug)]
pub(crate) enum DevFilesError {
    /// No new user and mount namespace (user namespaces disabled?).
    Namespaces(nix::Error),
    /// The mounts could not be made slaves of the host's.
    MakePrivate(nix::Error),
    /// A file or directory could not be created, read or written.
    Io { path: PathBuf, error: io::Error },
    /// No tmpfs could be mounted over the directory.
    Tmpfs { dir: PathBuf, error: nix::Error },
    /// `/dev/null` could not be bound to a device file.
    Bind { file: PathBuf, error: nix::Error },
    /// The device files are in place, but these entries of the covered
    /// directory (each with its reason) could not be bound back.
    Lost { dir: PathBuf, entries: Vec<String> },
}

impl DevFilesError {
    /// An I/O error on `path`.
    pub(crate) fn io(path: impl Into<PathBuf>) -> impl FnOnce(io::Error) -> DevFilesError {
        let path = path.into();
        move |error| DevFilesError::Io { path, error }
    }
}

impl fmt::Display for DevFilesError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DevFilesError::Namespaces(e) => write!(
                f,
                "no user and mount namespace ({e}): are user namespaces disabled?"
            ),
            DevFilesError::MakePrivate(e) => write!(f, "making the mounts private: {e}"),
            DevFilesError::Io { path, error } => write!(f, "{}: {error}", path.display()),
            DevFilesError::Tmpfs { dir, error } => {
                write!(f, "a tmpfs over {}: {error}", dir.display())
            }
            DevFilesError::Bind { file, error } => {
                write!(f, "binding /dev/null to {}: {error}", file.display())
            }
            DevFilesError::Lost { dir, entries } => write!(
                f,
                "the device files are in place, but these entries of {} could not be bound back: {}",
                dir.display(),
                entries.join(", ")
            ),
        }
    }
}

impl std::error::Error for DevFilesError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            DevFilesError::Namespaces(e) | DevFilesError::MakePrivate(e) => Some(e),
            DevFilesError::Tmpfs { error, .. } | DevFilesError::Bind { error, .. } => Some(error),
            DevFilesError::Io { error, .. } => Some(error),
            DevFilesError::Lost { .. } => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The texts the user sees, as they were when these were strings.
    #[test]
    fn says_what_the_strings_said() {
        let e = DevFilesError::Namespaces(nix::Error::EPERM);
        assert_eq!(
            e.to_string(),
            format!(
                "no user and mount namespace ({}): are user namespaces disabled?",
                nix::Error::EPERM
            )
        );
        let e = DevFilesError::io("/proc/self/uid_map")(io::Error::new(
            io::ErrorKind::PermissionDenied,
            "denied",
        ));
        assert_eq!(e.to_string(), "/proc/self/uid_map: denied");
        assert!(std::error::Error::source(&e).is_some());
        let e = DevFilesError::Lost {
            dir: "/dev".into(),
            entries: vec!["a (x)".into(), "b (y)".into()],
        };
        assert_eq!(
            e.to_string(),
            "the device files are in place, but these entries of /dev could not be bound back: a (x), b (y)"
        );
    }
}
