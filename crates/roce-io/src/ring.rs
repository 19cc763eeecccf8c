//! A packet socket's receive ring (`PACKET_RX_RING`, `TPACKET_V2`): frames
//! the kernel writes into memory shared with this process, taken by
//! looking at each slot's status word instead of a `recvmmsg` per batch.
//!
//! Frame-based version 2 rather than the block-based version 3: a V3 block
//! is handed over when it is full or its retire timer (milliseconds) runs
//! out, which a request-response exchange would wait for; a V2 frame is
//! the application's as soon as the kernel has written it.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::ptr::{self, NonNull};
use std::sync::atomic::{AtomicU32, Ordering};

use libc::c_void;

use crate::sys::{self, RxInfo};

/// `struct tpacket2_hdr`, then (aligned to 16) the `sockaddr_ll`.
const HDR_LEN: usize = std::mem::size_of::<libc::tpacket2_hdr>();
const SLL_AT: usize = (HDR_LEN + 15) & !15;
/// `sll_pkttype` inside `sockaddr_ll` (family 2, protocol 2, ifindex 4,
/// hatype 2, then the packet type).
const PKTTYPE_AT: usize = SLL_AT + 10;
/// Each block (what the kernel allocates at once) holds whole frames.
const BLOCK: usize = 1 << 16;

/// The ring: `frames` slots of `frame_size` bytes, mapped shared.
pub(crate) struct RxRing {
    base: NonNull<u8>,
    len: usize,
    frame_size: usize,
    frames: usize,
    next: usize,
}

// SAFETY: the mapping belongs to this value alone (it is unmapped on drop)
// and is only touched through its methods (a frame borrows it, a release
// takes it mutably); the kernel's side of the protocol does not care which
// thread reads a frame.
unsafe impl Send for RxRing {}

/// One received frame, valid until [`RxRing::release`].
pub(crate) struct RingFrame<'a> {
    pub(crate) data: &'a [u8],
    pub(crate) info: RxInfo,
}

impl RxRing {
    /// Sets up a ring on packet socket `fd` (before it is bound) for frames
    /// of up to `max_frame` bytes, about `bytes` of memory in all.
    pub(crate) fn new(fd: BorrowedFd<'_>, max_frame: usize, bytes: usize) -> io::Result<RxRing> {
        // The kernel puts the frame at a 16-aligned offset past the header
        // and the address (plus room for a re-inserted VLAN tag).
        let need = SLL_AT + std::mem::size_of::<libc::sockaddr_ll>() + 16 + max_frame + 4;
        let frame_size = need.next_power_of_two().max(2048);
        if frame_size > BLOCK {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "frames too large for a receive ring",
            ));
        }
        let blocks = (bytes / BLOCK).max(1);
        let frames = blocks * (BLOCK / frame_size);
        sys::setsockopt_int(
            fd,
            libc::SOL_PACKET,
            libc::PACKET_VERSION,
            libc::tpacket_versions::TPACKET_V2 as libc::c_int,
        )?;
        let req = libc::tpacket_req {
            tp_block_size: BLOCK as libc::c_uint,
            tp_block_nr: blocks as libc::c_uint,
            tp_frame_size: frame_size as libc::c_uint,
            tp_frame_nr: frames as libc::c_uint,
        };
        // SAFETY: `req` is a valid tpacket_req that outlives the call, and
        // the length passed is its size.
        let rc = unsafe {
            libc::setsockopt(
                fd.as_raw_fd(),
                libc::SOL_PACKET,
                libc::PACKET_RX_RING,
                ptr::from_ref(&req).cast::<c_void>(),
                std::mem::size_of::<libc::tpacket_req>() as libc::socklen_t,
            )
        };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        let len = blocks * BLOCK;
        // SAFETY: a fresh shared mapping of the ring the kernel just made
        // for this socket; nothing else refers to that address range.
        let p = unsafe {
            libc::mmap(
                ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let base = NonNull::new(p.cast::<u8>()).ok_or_else(io::Error::last_os_error)?;
        Ok(RxRing {
            base,
            len,
            frame_size,
            frames,
            next: 0,
        })
    }

    /// Number of frame slots.
    pub(crate) fn frames(&self) -> usize {
        self.frames
    }

    fn slot(&self, i: usize) -> *mut u8 {
        // Frames never straddle blocks: BLOCK is a multiple of frame_size.
        // SAFETY: i < frames, so the offset is inside the mapping.
        unsafe { self.base.as_ptr().add(i * self.frame_size) }
    }

    fn status(&self, i: usize) -> &AtomicU32 {
        // SAFETY: every slot starts with the u32 tp_status, 4-aligned (the
        // mapping is page aligned and frame_size a power of two >= 2048);
        // the kernel and this process both access it atomically.
        unsafe { AtomicU32::from_ptr(self.slot(i).cast::<u32>()) }
    }

    /// The next frame, if the kernel has handed it over.
    pub(crate) fn peek(&self) -> Option<RingFrame<'_>> {
        let st = self.status(self.next).load(Ordering::Acquire);
        if st & libc::TP_STATUS_USER == 0 {
            return None;
        }
        let s = self.slot(self.next);
        // SAFETY: the status word says the kernel is done with this slot
        // (acquire above), so its header is written and stays unchanged
        // until `release`; read_unaligned needs no alignment.
        let h: libc::tpacket2_hdr = unsafe { ptr::read_unaligned(s.cast::<libc::tpacket2_hdr>()) };
        // SAFETY: PKTTYPE_AT is inside the slot (it precedes the frame).
        let pkttype = unsafe { *s.add(PKTTYPE_AT) };
        let at = usize::from(h.tp_mac);
        let snap = h.tp_snaplen as usize;
        let fits = at.checked_add(snap).is_some_and(|e| e <= self.frame_size);
        let n = if fits { snap } else { 0 };
        // SAFETY: [at, at + n) lies inside this slot (checked), which the
        // kernel does not write until `release` hands it back.
        let data = unsafe { std::slice::from_raw_parts(s.add(at.min(self.frame_size)), n) };
        Some(RingFrame {
            data,
            info: RxInfo {
                len: n,
                peer: None,
                pkttype: Some(pkttype),
                vlan_tci: (st & libc::TP_STATUS_VLAN_VALID != 0).then_some(h.tp_vlan_tci),
                tos: None,
                gro_size: None,
                truncated: !fits || (h.tp_len as usize) > snap,
            },
        })
    }

    /// Hands the frame [`peek`](Self::peek) returned back to the kernel.
    pub(crate) fn release(&mut self) {
        self.status(self.next)
            .store(libc::TP_STATUS_KERNEL, Ordering::Release);
        self.next = (self.next + 1) % self.frames;
    }
}

impl Drop for RxRing {
    fn drop(&mut self) {
        // SAFETY: base/len are the mapping made in `new`, unmapped once;
        // no RingFrame outlives the ring (they borrow it).
        unsafe {
            libc::munmap(self.base.as_ptr().cast::<c_void>(), self.len);
        }
    }
}
