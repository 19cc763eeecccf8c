//! The table's file and the kernel's locks on it: the host table's
//! memory boundary, and its only `unsafe` (docs/host.md, "The file",
//! "Locking", "Liveness").
//!
//! * The file is opened with `O_NOFOLLOW` (and `O_CLOEXEC`, as std always
//!   does), created with mode 0600, and refused unless it is a regular
//!   file of this user that no other user may read or write.
//! * Updates are serialised by `flock` on the file, which the kernel
//!   drops when its holder dies; taking it is bounded in time.
//! * Each attached process holds an open-file-description lock
//!   (`F_OFD_SETLK`) on one byte per slot, also dropped by the kernel
//!   when the process dies; anyone tests it with `F_OFD_GETLK`.
//! * The mapping is shared and seen only as `&[AtomicU64]`: the other
//!   processes write it concurrently, and every value read from it is
//!   checked by the code above this module.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::Path;
use std::ptr::NonNull;
use std::sync::atomic::AtomicU64;
use std::time::{Duration, Instant};

use nix::fcntl::{fcntl, FcntlArg};
use nix::sys::mman::{mmap, munmap, MapFlags, ProtFlags};

use super::HostError;

/// An open, checked table file.
pub(super) struct TableFile {
    file: File,
}

/// How long an update waits for another process's update.
const LOCK_WAIT: Duration = Duration::from_secs(5);

impl TableFile {
    /// Opens (creating if absent, mode 0600) the file at `path` and checks
    /// that it is a regular file of user `uid` that only `uid` may access.
    pub(super) fn open(path: &Path, uid: u32) -> Result<TableFile, HostError> {
        Self::open_with(path, uid, true)
    }

    /// [`open`](Self::open), creating the file only when `create`.
    pub(super) fn open_with(path: &Path, uid: u32, create: bool) -> Result<TableFile, HostError> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(create)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(path)
            .map_err(|e| HostError::Open(path.to_path_buf(), e))?;
        let st = file
            .metadata()
            .map_err(|e| HostError::Open(path.to_path_buf(), e))?;
        if !st.file_type().is_file() {
            return Err(HostError::NotAFile(path.to_path_buf()));
        }
        if st.uid() != uid {
            return Err(HostError::Foreign {
                path: path.to_path_buf(),
                owner: st.uid(),
            });
        }
        if st.mode() & 0o077 != 0 {
            return Err(HostError::Permissions {
                path: path.to_path_buf(),
                mode: st.mode() & 0o7777,
            });
        }
        Ok(TableFile { file })
    }

    /// The file's length now.
    pub(super) fn len(&self) -> io::Result<u64> {
        Ok(self.file.metadata()?.len())
    }

    /// Sets the length of an empty file (the caller holds the update lock).
    pub(super) fn set_len(&self, len: u64) -> io::Result<()> {
        self.file.set_len(len)
    }

    /// Takes the update lock (`flock`, exclusive), waiting at most
    /// [`LOCK_WAIT`] for another process to let it go.
    pub(super) fn lock(&self) -> Result<Flock<'_>, HostError> {
        let start = Instant::now();
        let mut spins = 0u32;
        loop {
            if let Some(l) = self.try_lock()? {
                return Ok(l);
            }
            if start.elapsed() > LOCK_WAIT {
                return Err(HostError::Busy);
            }
            spins += 1;
            if spins < 64 {
                std::thread::yield_now();
            } else {
                std::thread::sleep(Duration::from_micros(50));
            }
        }
    }

    /// Takes the update lock if no other open file holds it now.
    pub(super) fn try_lock(&self) -> Result<Option<Flock<'_>>, HostError> {
        let fd = self.file.as_raw_fd();
        // SAFETY: flock on a descriptor this value owns; no memory is
        // passed.
        let r = unsafe { libc::flock(fd, libc::LOCK_EX | libc::LOCK_NB) };
        if r == 0 {
            return Ok(Some(Flock { file: self }));
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EWOULDBLOCK) | Some(libc::EINTR) => Ok(None),
            _ => Err(HostError::Io(e)),
        }
    }

    /// Whether the file this value opened is still the one at `path`:
    /// the last process to leave a table removes its file (docs/host.md,
    /// "The file's life"), and one opened just before is then nobody's.
    pub(super) fn is_at(&self, path: &Path) -> bool {
        match (self.file.metadata(), std::fs::symlink_metadata(path)) {
            (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
            _ => false,
        }
    }

    fn ofd(&self, cmd: OfdCmd, byte: usize) -> io::Result<libc::flock> {
        let mut fl = libc::flock {
            l_type: libc::F_WRLCK as libc::c_short,
            l_whence: libc::SEEK_SET as libc::c_short,
            l_start: byte as libc::off_t,
            l_len: 1,
            l_pid: 0,
        };
        match cmd {
            OfdCmd::Set => fcntl(&self.file, FcntlArg::F_OFD_SETLK(&fl))?,
            OfdCmd::Unset => {
                fl.l_type = libc::F_UNLCK as libc::c_short;
                fcntl(&self.file, FcntlArg::F_OFD_SETLK(&fl))?
            }
            OfdCmd::Get => fcntl(&self.file, FcntlArg::F_OFD_GETLK(&mut fl))?,
        };
        Ok(fl)
    }

    /// Takes the liveness lock of the slot at `byte`; `false` when
    /// another open file holds it.
    pub(super) fn hold_byte(&self, byte: usize) -> io::Result<bool> {
        match self.ofd(OfdCmd::Set, byte) {
            Ok(_) => Ok(true),
            Err(e) if matches!(e.raw_os_error(), Some(libc::EAGAIN) | Some(libc::EACCES)) => {
                Ok(false)
            }
            Err(e) => Err(e),
        }
    }

    /// Lets the liveness lock at `byte` go.
    pub(super) fn drop_byte(&self, byte: usize) -> io::Result<()> {
        self.ofd(OfdCmd::Unset, byte).map(|_| ())
    }

    /// Whether another open file (a live process) holds the lock at
    /// `byte`. This file's own lock does not count.
    pub(super) fn byte_held_by_other(&self, byte: usize) -> io::Result<bool> {
        let fl = self.ofd(OfdCmd::Get, byte)?;
        Ok(fl.l_type != libc::F_UNLCK as libc::c_short)
    }

    /// Maps the whole file, which must be `len` bytes (checked by the
    /// caller under the update lock).
    pub(super) fn map(&self, len: usize) -> Result<Mapping, HostError> {
        let n = std::num::NonZeroUsize::new(len).ok_or(HostError::Corrupt("empty file"))?;
        if !len.is_multiple_of(8) {
            return Err(HostError::Corrupt("length"));
        }
        // SAFETY: a new shared mapping of a file this value owns; no
        // existing memory is affected. The file is `len` bytes now; one
        // that another process of this user shrinks later raises SIGBUS
        // here, which that process could cause anyway (docs/host.md,
        // "What a process trusts").
        let base = unsafe {
            mmap(
                None,
                n,
                ProtFlags::PROT_READ | ProtFlags::PROT_WRITE,
                MapFlags::MAP_SHARED,
                &self.file,
                0,
            )
        }
        .map_err(|e| HostError::Io(e.into()))?;
        Ok(Mapping {
            base: base.cast(),
            words: len / 8,
        })
    }
}

enum OfdCmd {
    Set,
    Unset,
    Get,
}

/// The update lock, let go on drop.
pub(super) struct Flock<'a> {
    file: &'a TableFile,
}

impl Drop for Flock<'_> {
    fn drop(&mut self) {
        // SAFETY: flock on a descriptor the borrowed file owns.
        unsafe {
            libc::flock(self.file.file.as_raw_fd(), libc::LOCK_UN);
        }
    }
}

/// A shared mapping of the table file, as words; unmapped on drop.
pub(super) struct Mapping {
    base: NonNull<AtomicU64>,
    words: usize,
}

// SAFETY: the mapping is owned by this value alone and unmapped once, on
// drop; its memory is only reached through `&[AtomicU64]`, which any
// thread may use.
unsafe impl Send for Mapping {}
// SAFETY: as above: shared access is through atomics only.
unsafe impl Sync for Mapping {}

impl Mapping {
    /// The file's words.
    pub(super) fn words(&self) -> &[AtomicU64] {
        // SAFETY: `base` is a page-aligned mapping of `words * 8` bytes,
        // readable and writable, alive until `self` drops (the slice
        // borrows `self`). `AtomicU64` has the size and alignment of
        // `u64`, and every access, here and in the other processes of
        // this stack, is atomic; what another process writes is only ever
        // a value, checked before use.
        unsafe { std::slice::from_raw_parts(self.base.as_ptr(), self.words) }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `TableFile::map`, unmapped once; no
        // borrow of it outlives `self`.
        unsafe {
            let _ = munmap(self.base.cast(), self.words * 8);
        }
    }
}

/// This process's start time (`/proc/self/stat`, field 22, clock ticks
/// since boot): with the PID, a name for the process that a reused PID
/// does not share.
pub(super) fn start_time(pid: u32) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) is in parentheses and may hold anything.
    let rest = &s[s.rfind(')')? + 1..];
    rest.split_whitespace().nth(19)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_start_time_is_this_process_s() {
        let me = std::process::id();
        let t = start_time(me).expect("a start time");
        assert_eq!(start_time(me), Some(t));
        assert_eq!(start_time(u32::MAX), None);
    }

    #[test]
    fn liveness_locks_are_per_open_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t");
        let uid = nix::unistd::geteuid().as_raw();
        let a = TableFile::open(&path, uid).unwrap();
        let b = TableFile::open(&path, uid).unwrap();
        assert!(a.hold_byte(5).unwrap());
        assert!(!a.byte_held_by_other(5).unwrap(), "its own lock");
        assert!(b.byte_held_by_other(5).unwrap());
        assert!(!b.hold_byte(5).unwrap());
        assert!(!b.byte_held_by_other(6).unwrap());
        drop(a);
        assert!(!b.byte_held_by_other(5).unwrap(), "closed: let go");
        assert!(b.hold_byte(5).unwrap());
        b.drop_byte(5).unwrap();
        let c = TableFile::open(&path, uid).unwrap();
        assert!(!c.byte_held_by_other(5).unwrap());
    }
}
