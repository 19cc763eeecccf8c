//! The device files `roce exec` shows the program: a private mount
//! namespace in which `/dev/infiniband/uverbs_<device>` exists for every
//! device of the drop-in library (docs/dropin.md, "UCX").
//!
//! Some programs look at the kernel's device file before they use a
//! device: UCX (`uct_ib_device_is_accessible`) takes only the devices
//! whose `/dev/infiniband/<ibv_device.dev_name>` is a character device it
//! may read and write. The drop-in library has no kernel device, so
//! `roce exec` gives the program a view of `/dev` in which those paths
//! are `/dev/null` bound there, in a mount namespace of its own (and,
//! when it is not root, a user namespace mapping only its own uid and
//! gid, as bubblewrap does unprivileged): nothing changes for any other
//! process, and the files vanish with the program.
//!
//! How: `unshare(CLONE_NEWNS)` (root) or `unshare(CLONE_NEWUSER |
//! CLONE_NEWNS)`; every mount becomes a slave of the host's, so nothing
//! made here propagates back; then a tmpfs covers `/dev/infiniband`
//! (when the host has one) or `/dev`, every entry of the covered
//! directory is bound back (symbolic links copied), and the device files
//! are bound to `/dev/null`. The program then runs with the same uid and
//! gid, without capabilities.
//!
//! Where it does not work: where user namespaces are disabled
//! (`user.max_user_namespaces=0`, Debian's older
//! `kernel.unprivileged_userns_clone=0`, Ubuntu's AppArmor
//! `restrict_unprivileged_userns`, container runtimes' seccomp profiles)
//! and as root without `CAP_SYS_ADMIN`: `roce exec` says so on stderr and
//! runs the program without the files. In the user namespace, files of
//! other users show as `nobody`, `setgroups` is denied and set-user-ID
//! programs run without their privilege. The covered directory is a copy
//! made at start: entries the host adds to it later do not appear.

mod error;

use std::ffi::OsString;
use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};

use nix::mount::{mount, MsFlags};
use nix::sched::{unshare, CloneFlags};
use nix::unistd::{geteuid, getgid, getuid};

use error::DevFilesError;

/// Where the kernel's uverbs device files are (rdma-core and UCX:
/// `/dev/infiniband/<dev_name>`).
const DIR: &str = "/dev/infiniband";

/// The `dev_name` the drop-in library gives device `name`
/// (crates/roce-ibverbs/src/device.rs: `uverbs_<name>`).
pub(crate) fn dev_name(name: &str) -> String {
    format!("uverbs_{name}")
}

/// The device files the drop-in library's devices need: one per device
/// this host (this network namespace) has.
pub(crate) fn wanted() -> Vec<PathBuf> {
    roce_verbs::Device::list()
        .unwrap_or_default()
        .iter()
        .map(|d| Path::new(DIR).join(dev_name(&d.name())))
        .collect()
}

/// True when `p` is a character device this process may read and write
/// (UCX's test).
fn usable(p: &Path) -> bool {
    std::fs::metadata(p).is_ok_and(|m| m.file_type().is_char_device())
        && nix::unistd::access(
            p,
            nix::unistd::AccessFlags::R_OK | nix::unistd::AccessFlags::W_OK,
        )
        .is_ok()
}

/// Makes each of `files` a character device in this process's view of
/// the file system (see the module docs); nothing when they all are
/// already. An error says why not; the view is then unchanged, or (an
/// entry that could not be bound back) lacks that entry, which the error
/// names.
pub(crate) fn provide(files: &[PathBuf]) -> Result<(), DevFilesError> {
    if files.iter().all(|f| usable(f)) {
        return Ok(());
    }
    enter_namespaces()?;
    // Nothing mounted from here on reaches the host's namespace.
    mount(
        None::<&str>,
        "/",
        None::<&str>,
        MsFlags::MS_REC | MsFlags::MS_SLAVE,
        None::<&str>,
    )
    .map_err(DevFilesError::MakePrivate)?;
    let dir = Path::new(DIR);
    let cover = if dir.is_dir() { dir } else { Path::new("/dev") };
    let lost = cover_dir(cover)?;
    if !dir.is_dir() {
        std::fs::create_dir(dir).map_err(DevFilesError::io(DIR))?;
    }
    for f in files {
        if usable(f) {
            continue;
        }
        File::create(f).map_err(DevFilesError::io(f))?;
        mount(
            Some("/dev/null"),
            f.as_path(),
            None::<&str>,
            MsFlags::MS_BIND,
            None::<&str>,
        )
        .map_err(|error| DevFilesError::Bind {
            file: f.clone(),
            error,
        })?;
    }
    if lost.is_empty() {
        Ok(())
    } else {
        Err(DevFilesError::Lost {
            dir: cover.to_path_buf(),
            entries: lost,
        })
    }
}

/// A new mount namespace, in a new user namespace unless this process may
/// mount already (root with `CAP_SYS_ADMIN`).
fn enter_namespaces() -> Result<(), DevFilesError> {
    let (uid, gid) = (getuid(), getgid());
    if geteuid().is_root() && unshare(CloneFlags::CLONE_NEWNS).is_ok() {
        return Ok(());
    }
    unshare(CloneFlags::CLONE_NEWUSER | CloneFlags::CLONE_NEWNS)
        .map_err(DevFilesError::Namespaces)?;
    let write = |file: &str, text: String| {
        let path = format!("/proc/self/{file}");
        std::fs::write(&path, text).map_err(DevFilesError::io(path))
    };
    // A process without CAP_SETGID in the parent namespace must deny
    // setgroups before it may write its gid_map (user_namespaces(7)).
    write("setgroups", "deny".into())?;
    write("uid_map", format!("{uid} {uid} 1\n"))?;
    write("gid_map", format!("{gid} {gid} 1\n"))?;
    Ok(())
}

/// Covers `dir` with a tmpfs holding what `dir` held: each entry bound
/// back from the covered directory (reached through a descriptor opened
/// before), each symbolic link copied. Returns the entries that could not
/// be.
fn cover_dir(dir: &Path) -> Result<Vec<String>, DevFilesError> {
    let entries: Vec<(OsString, std::fs::FileType)> = std::fs::read_dir(dir)
        .map_err(DevFilesError::io(dir))?
        .filter_map(|e| e.ok())
        .filter_map(|e| Some((e.file_name(), e.file_type().ok()?)))
        .collect();
    let old = File::open(dir).map_err(DevFilesError::io(dir))?;
    let old_path = PathBuf::from(format!("/proc/self/fd/{}", old.as_raw_fd()));
    mount(
        Some("tmpfs"),
        dir,
        Some("tmpfs"),
        MsFlags::MS_NOSUID,
        Some("mode=0755"),
    )
    .map_err(|error| DevFilesError::Tmpfs {
        dir: dir.to_path_buf(),
        error,
    })?;
    let mut lost = Vec::new();
    for (name, kind) in entries {
        let (from, to) = (old_path.join(&name), dir.join(&name));
        let made = if kind.is_symlink() {
            std::fs::read_link(&from).and_then(|t| std::os::unix::fs::symlink(t, &to))
        } else {
            let place = if kind.is_dir() {
                std::fs::create_dir(&to)
            } else {
                File::create(&to).map(drop)
            };
            place.and_then(|()| {
                mount(
                    Some(from.as_path()),
                    to.as_path(),
                    None::<&str>,
                    MsFlags::MS_BIND | MsFlags::MS_REC,
                    None::<&str>,
                )
                .map_err(std::io::Error::from)
            })
        };
        if let Err(e) = made {
            lost.push(format!("{} ({e})", name.to_string_lossy()));
        }
    }
    Ok(lost)
}
