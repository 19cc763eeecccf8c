//! The memory a ring lives in: a sealed `memfd` mapped shared into both
//! processes. The producer makes it ([`SharedMem::create`]); the consumer
//! maps what it was handed ([`SharedMem::open`]) only once it has checked
//! that the size cannot shrink under it, since touching a page past a
//! shrunk file's end would raise `SIGBUS` in the consumer.

use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::ptr::NonNull;

use nix::fcntl::{fcntl, FcntlArg, SealFlag};
use nix::sys::memfd::{memfd_create, MFdFlags};
use nix::sys::mman::{mmap, munmap, MapFlags, ProtFlags};
use nix::sys::stat::fstat;

/// A shared mapping of a whole `memfd`, unmapped on drop.
pub(crate) struct SharedMem {
    base: NonNull<u8>,
    len: usize,
    fd: OwnedFd,
}

// SAFETY: the mapping is owned by this value alone and unmapped once, on
// drop; what is inside is accessed only through atomics and raw copies
// (`super::ring`), whose cross-process protocol does not depend on which
// thread runs it.
unsafe impl Send for SharedMem {}

/// The seals a consumer requires: the size is fixed for good.
fn required_seals() -> SealFlag {
    SealFlag::F_SEAL_SHRINK | SealFlag::F_SEAL_GROW | SealFlag::F_SEAL_SEAL
}

impl SharedMem {
    /// A new zeroed `memfd` of `len` bytes, sealed against resizing, and
    /// its mapping.
    pub(crate) fn create(len: usize) -> io::Result<SharedMem> {
        let fd = memfd_create(
            c"roce-shm-ring",
            MFdFlags::MFD_CLOEXEC | MFdFlags::MFD_ALLOW_SEALING,
        )?;
        nix::unistd::ftruncate(&fd, len as libc::off_t)?;
        fcntl(&fd, FcntlArg::F_ADD_SEALS(required_seals()))?;
        Self::map(fd, len)
    }

    /// Maps a `memfd` another process made, after checking that it is
    /// sealed against shrinking and exactly `len` bytes long.
    pub(crate) fn open(fd: OwnedFd, len: usize) -> io::Result<SharedMem> {
        let seals = fcntl(&fd, FcntlArg::F_GET_SEALS)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, format!("not a memfd: {e}")))?;
        if !SealFlag::from_bits_truncate(seals).contains(required_seals()) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "the ring's memfd is not sealed against resizing",
            ));
        }
        let st = fstat(&fd)?;
        if usize::try_from(st.st_size).ok() != Some(len) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("the ring's memfd has {} bytes, not {len}", st.st_size),
            ));
        }
        Self::map(fd, len)
    }

    fn map(fd: OwnedFd, len: usize) -> io::Result<SharedMem> {
        let n = std::num::NonZeroUsize::new(len)
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "empty ring"))?;
        // SAFETY: a fresh shared mapping of a file whose size is `len` and
        // cannot change (sealed); no existing memory is affected.
        let base = unsafe {
            mmap(
                None,
                n,
                ProtFlags::PROT_READ | ProtFlags::PROT_WRITE,
                MapFlags::MAP_SHARED,
                fd.as_fd(),
                0,
            )?
        };
        Ok(SharedMem {
            base: base.cast(),
            len,
            fd,
        })
    }

    /// The start of the mapping (page-aligned).
    pub(crate) fn base(&self) -> NonNull<u8> {
        self.base
    }

    /// Its length in bytes.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The `memfd`, to hand to the other process.
    pub(crate) fn fd(&self) -> &OwnedFd {
        &self.fd
    }
}

impl Drop for SharedMem {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `map`, unmapped once; nothing
        // borrows it past the owner's life (rings hold the `SharedMem`).
        unsafe {
            let _ = munmap(self.base.cast(), self.len);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unsealed_or_wrongly_sized_memfd_is_refused() {
        let m = SharedMem::create(8192).unwrap();
        let dup = m.fd().try_clone().unwrap();
        assert!(SharedMem::open(dup, 4096).is_err(), "size mismatch");
        let dup = m.fd().try_clone().unwrap();
        let o = SharedMem::open(dup, 8192).unwrap();
        // Both see the same bytes.
        // SAFETY: both mappings are 8192 bytes; single-threaded test.
        unsafe {
            m.base().as_ptr().add(100).write(42);
            assert_eq!(o.base().as_ptr().add(100).read(), 42);
        }
        let plain = memfd_create(c"plain", MFdFlags::MFD_CLOEXEC).unwrap();
        nix::unistd::ftruncate(&plain, 8192).unwrap();
        let e = SharedMem::open(plain, 8192).err().unwrap();
        assert!(e.to_string().contains("sealed"), "{e}");
        let file = tempfile::tempfile().unwrap();
        assert!(SharedMem::open(file.into(), 0).is_err(), "not a memfd");
    }
}
