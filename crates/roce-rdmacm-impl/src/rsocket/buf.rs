//! Registered memory of an rsocket: its send buffer, its receive buffer
//! and its target SGL (`docs/rsocket.md`, "State"). The peer's RDMA
//! WRITEs land in the last two while the program runs, so the memory is
//! only ever reached through raw pointers, by copies, never by a Rust
//! reference that could alias a write of the engine.

use std::os::raw::{c_int, c_void};

use crate::abi::*;
use crate::ffi::Res;
use crate::verbs::{ibv_dereg_mr, ibv_reg_mr};

/// `IBV_ACCESS_LOCAL_WRITE`.
const LOCAL_WRITE: c_int = 1;
/// `IBV_ACCESS_REMOTE_WRITE`.
const REMOTE_WRITE: c_int = 2;

/// A zeroed heap buffer registered on a PD.
pub(super) struct Region {
    ptr: *mut u8,
    len: usize,
    mr: *mut ibv_mr,
}

// SAFETY: the buffer is owned by the region and only copied to and from
// under the rsocket's lock; the MR is this library's.
unsafe impl Send for Region {}

impl Region {
    /// `len` bytes on `pd`, writable by the peer when `remote`
    /// (`rdma_reg_write`), else by the local device only
    /// (`rdma_reg_msgs`).
    pub(super) fn new(pd: *mut ibv_pd, len: usize, remote: bool) -> Res<Region> {
        let len = len.max(1);
        let ptr = Box::into_raw(vec![0u8; len].into_boxed_slice()).cast::<u8>();
        let access = LOCAL_WRITE | if remote { REMOTE_WRITE } else { 0 };
        // SAFETY: a PD of this library (the id's); the buffer just made,
        // `len` bytes, freed only after the MR is deregistered.
        let mr = unsafe { ibv_reg_mr(pd, ptr.cast::<c_void>(), len, access) };
        if mr.is_null() {
            let e = std::io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::ENOMEM);
            // SAFETY: the box made above, not registered.
            drop(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(ptr, len)) });
            return Err(e);
        }
        Ok(Region { ptr, len, mr })
    }

    /// The address of byte `off` (what an SGE or an rs_sge names).
    pub(super) fn addr(&self, off: usize) -> u64 {
        self.ptr as u64 + off as u64
    }

    /// The local key.
    pub(super) fn lkey(&self) -> u32 {
        // SAFETY: the MR this region registered, live until drop.
        unsafe { (*self.mr).lkey }
    }

    /// The remote key.
    pub(super) fn rkey(&self) -> u32 {
        // SAFETY: as above.
        unsafe { (*self.mr).rkey }
    }

    /// Copies `dst.len()` bytes from offset `off`.
    pub(super) fn read(&self, off: usize, dst: &mut [u8]) {
        assert!(
            off + dst.len() <= self.len,
            "rsocket buffer read out of range"
        );
        // SAFETY: in range (checked); `dst` is the caller's own slice,
        // never inside this buffer.
        unsafe { std::ptr::copy_nonoverlapping(self.ptr.add(off), dst.as_mut_ptr(), dst.len()) };
    }

    /// Copies `src` in at offset `off`.
    pub(super) fn write(&self, off: usize, src: &[u8]) {
        assert!(
            off + src.len() <= self.len,
            "rsocket buffer write out of range"
        );
        // SAFETY: in range (checked); `src` is never inside this buffer.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), self.ptr.add(off), src.len()) };
    }

    /// Reads the u64 at `off` as it is now (the peer may write it).
    pub(super) fn get_u64(&self, off: usize) -> u64 {
        assert!(off + 8 <= self.len);
        // SAFETY: in range; a volatile read of plain bytes.
        u64::from_ne_bytes(unsafe { std::ptr::read_volatile(self.ptr.add(off).cast::<[u8; 8]>()) })
    }

    /// Reads the u32 at `off` as it is now.
    pub(super) fn get_u32(&self, off: usize) -> u32 {
        assert!(off + 4 <= self.len);
        // SAFETY: in range; a volatile read of plain bytes.
        u32::from_ne_bytes(unsafe { std::ptr::read_volatile(self.ptr.add(off).cast::<[u8; 4]>()) })
    }

    /// Writes the u64 at `off`.
    pub(super) fn set_u64(&self, off: usize, v: u64) {
        self.write(off, &v.to_ne_bytes());
    }

    /// Writes the u32 at `off`.
    pub(super) fn set_u32(&self, off: usize, v: u32) {
        self.write(off, &v.to_ne_bytes());
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        // SAFETY: the MR registered in `new`, deregistered once; then the
        // box made there (the QP using it is destroyed before this).
        unsafe {
            ibv_dereg_mr(self.mr);
            drop(Box::from_raw(std::ptr::slice_from_raw_parts_mut(
                self.ptr, self.len,
            )));
        }
    }
}
