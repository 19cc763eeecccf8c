//! Why `roce exec` could not put the drop-in libraries in place. The
//! text the user sees is the [`Display`](std::fmt::Display) of an
//! [`ExecError`]; the system error it wraps, if any, is also its
//! [`source`](std::error::Error::source).

use std::fmt;
use std::io;
use std::path::PathBuf;

/// A failure of `roce exec` before the program runs.
#[derive(Debug)]
pub(crate) enum ExecError {
    /// The path of this executable could not be read.
    CurrentExe(io::Error),
    /// Library `name` (`libibverbs`, ...) is not in `dir`.
    NoLibrary { name: &'static str, dir: PathBuf },
    /// A library's file could not be resolved.
    Resolve { path: PathBuf, error: io::Error },
    /// No directory could hold the libraries' links: each tried, and why.
    LinkDir(Vec<(PathBuf, io::Error)>),
}

impl fmt::Display for ExecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ExecError::CurrentExe(e) => write!(f, "cannot find this executable: {e}"),
            ExecError::NoLibrary { name, dir } => write!(
                f,
                "no {name}.so in {} (build it with `cargo build --release -p roce-cli`, or set ROCE_LIB_DIR)",
                dir.display()
            ),
            ExecError::Resolve { path, error } => write!(f, "{}: {error}", path.display()),
            ExecError::LinkDir(tried) => {
                f.write_str("cannot make the library directory (")?;
                for (i, (dir, e)) in tried.iter().enumerate() {
                    let sep = if i == 0 { "" } else { "; " };
                    write!(f, "{sep}{}: {e}", dir.display())?;
                }
                f.write_str(")")
            }
        }
    }
}

impl std::error::Error for ExecError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ExecError::CurrentExe(e) | ExecError::Resolve { error: e, .. } => Some(e),
            // The last directory's error: the one that ended the attempts.
            ExecError::LinkDir(tried) => tried.last().map(|(_, e)| e as _),
            ExecError::NoLibrary { .. } => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The texts the user sees, as they were when these were strings.
    #[test]
    fn says_what_the_strings_said() {
        let denied = || io::Error::new(io::ErrorKind::PermissionDenied, "denied");
        let e = ExecError::LinkDir(vec![
            ("/a/roce-dropin".into(), denied()),
            ("/tmp/roce-dropin-1".into(), denied()),
        ]);
        assert_eq!(
            e.to_string(),
            "cannot make the library directory (/a/roce-dropin: denied; /tmp/roce-dropin-1: denied)"
        );
        let e = ExecError::NoLibrary {
            name: "libibverbs",
            dir: "/x".into(),
        };
        assert_eq!(
            e.to_string(),
            "no libibverbs.so in /x (build it with `cargo build --release -p roce-cli`, or set ROCE_LIB_DIR)"
        );
        assert_eq!(
            ExecError::CurrentExe(denied()).to_string(),
            "cannot find this executable: denied"
        );
    }
}
