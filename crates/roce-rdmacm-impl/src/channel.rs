//! Event channels and events: `rdma_create_event_channel`,
//! `rdma_get_cm_event`, `rdma_ack_cm_event`, `rdma_event_str`.
//!
//! A channel's `fd` is an eventfd that is readable exactly while events
//! wait in the channel's queue (a program may poll or epoll it, and make
//! it non-blocking: `rdma_get_cm_event` then fails with `EAGAIN`). An
//! event handed to the program is its own allocation until it is acked.

use std::collections::VecDeque;
use std::os::raw::{c_char, c_int, c_void};
use std::sync::{Arc, Mutex};

use super::{lock, rc, Id};
use crate::abi::*;
use crate::eventfd::{wait_readable, EventFd};
use crate::ffi::{arg, ptr_ret, Res};
use crate::ffi::{value_or, void};

/// Private data an event can carry: the largest of the CM's messages
/// (REP: 196 bytes).
pub(crate) const MAX_PRIVATE: usize = 256;

/// One event: the C view first (the program holds a pointer to it), then
/// the private data its `param` points to.
#[repr(C)]
pub(crate) struct Event {
    pub(crate) c: rdma_cm_event,
    data: [u8; MAX_PRIVATE],
}

/// An event waiting in a queue (the pointer is the only reference).
pub(crate) struct Queued(pub(crate) Box<Event>);
// SAFETY: the ids the event's pointers name are used under the verbs
// rules; the event itself is owned by the queue.
unsafe impl Send for Queued {}

impl Event {
    /// An event of `kind` about `id` with `status`, no parameters.
    pub(crate) fn new(id: *mut rdma_cm_id, kind: u32, status: c_int) -> Box<Event> {
        // SAFETY: all-zero is a valid rdma_cm_event (NULL pointers, zeros).
        let mut c: rdma_cm_event = unsafe { std::mem::zeroed() };
        c.id = id;
        c.event = kind;
        c.status = status;
        Box::new(Event {
            c,
            data: [0; MAX_PRIVATE],
        })
    }

    /// Copies `data` in, zero-padded to `full` bytes (the size the CM
    /// message carries: the kernel always reports that much), and points
    /// the connection parameters at it.
    pub(crate) fn set_conn(&mut self, data: &[u8], full: usize, conn: rdma_conn_param) {
        let n = self.put(data, full);
        let p = self.data.as_ptr().cast::<c_void>();
        self.c.param.conn = rdma_conn_param {
            private_data: if n > 0 { p } else { std::ptr::null() },
            private_data_len: n as u8,
            ..conn
        };
    }

    /// As [`Event::set_conn`] for the UD parameters.
    pub(crate) fn set_ud(&mut self, data: &[u8], full: usize, ud: rdma_ud_param) {
        let n = self.put(data, full);
        let p = self.data.as_ptr().cast::<c_void>();
        self.c.param.ud = rdma_ud_param {
            private_data: if n > 0 { p } else { std::ptr::null() },
            private_data_len: n as u8,
            ..ud
        };
    }

    fn put(&mut self, data: &[u8], full: usize) -> usize {
        let full = full.min(MAX_PRIVATE).min(u8::MAX as usize);
        let n = data.len().min(full);
        self.data[..n].copy_from_slice(&data[..n]);
        self.data[n..full].fill(0);
        full
    }
}

/// An event channel: the C view first. `c.fd` is the program's number
/// of the eventfd; the library counts and waits through its own
/// ([`EventFd`]), so a number the program closed and reused is never
/// written, read or closed by the library.
#[repr(C)]
pub(crate) struct Channel {
    pub(crate) c: rdma_event_channel,
    efd: Arc<EventFd>,
    queue: Mutex<VecDeque<Queued>>,
}

impl Drop for Channel {
    fn drop(&mut self) {
        self.efd.release();
    }
}

impl Channel {
    /// A new channel (its eventfd non-blocking for the library's own
    /// reads; the program's poll sees readability).
    pub(crate) fn new() -> Res<Arc<Channel>> {
        let efd = EventFd::level()?;
        Ok(Arc::new(Channel {
            c: rdma_event_channel { fd: efd.shown() },
            efd,
            queue: Mutex::new(VecDeque::new()),
        }))
    }

    /// The channel behind a program's pointer (a new reference).
    ///
    /// # Safety
    /// `p` must be a channel this library created and not destroyed.
    pub(crate) unsafe fn from_ptr(p: *mut rdma_event_channel) -> Res<Arc<Channel>> {
        if p.is_null() {
            return Err(libc::EINVAL);
        }
        let p = p.cast::<Channel>().cast_const();
        // SAFETY: the program's channel came from Arc::into_raw (the C
        // view is at offset 0); one more strong count for the clone.
        unsafe {
            Arc::increment_strong_count(p);
            Ok(Arc::from_raw(p))
        }
    }

    /// The pointer programs hold.
    pub(crate) fn ptr(self: &Arc<Channel>) -> *mut rdma_event_channel {
        Arc::as_ptr(self).cast_mut().cast()
    }

    fn signal(&self) {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a live u64 to our own eventfd.
        unsafe { libc::write(self.efd.own(), (&one as *const u64).cast(), 8) };
    }

    fn clear(&self) {
        let mut v: u64 = 0;
        // SAFETY: reads 8 bytes into a live u64 (the count is non-zero
        // whenever this runs: it is written on every push).
        unsafe { libc::read(self.efd.own(), (&mut v as *mut u64).cast(), 8) };
    }

    /// Queues an event; the descriptor becomes readable.
    pub(crate) fn push(&self, e: Box<Event>) {
        let mut q = lock(&self.queue);
        q.push_back(Queued(e));
        self.signal();
    }

    /// Takes the next event, if one waits.
    pub(crate) fn try_take(&self) -> Option<Box<Event>> {
        let mut q = lock(&self.queue);
        let e = q.pop_front()?.0;
        if q.is_empty() {
            self.clear();
        }
        Some(e)
    }

    /// Takes the next event, waiting for one unless the program made the
    /// descriptor non-blocking (`EAGAIN`); `EBADF` once the program
    /// closed its number (or reused it for another file).
    pub(crate) fn take(&self) -> Res<Box<Event>> {
        loop {
            if let Some(e) = self.try_take() {
                return Ok(e);
            }
            self.efd.check()?;
            wait_readable(self.efd.own())?;
        }
    }

    /// Takes the queued events about `id`: those of it, and the
    /// connection requests it received as a listener. (Boxed: an event's
    /// parameters point into it, so it never moves.)
    #[allow(clippy::vec_box)]
    pub(crate) fn take_events_of(&self, id: *mut rdma_cm_id) -> Vec<Box<Event>> {
        let mut q = lock(&self.queue);
        let (mine, rest): (VecDeque<Queued>, VecDeque<Queued>) = std::mem::take(&mut *q)
            .into_iter()
            .partition(|e| e.0.c.id == id || e.0.c.listen_id == id);
        *q = rest;
        if q.is_empty() {
            self.clear_nonblocking();
        }
        mine.into_iter().map(|e| e.0).collect()
    }

    fn clear_nonblocking(&self) {
        let mut p = libc::pollfd {
            fd: self.efd.own(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one live pollfd; a zero timeout.
        if unsafe { libc::poll(&mut p, 1, 0) } > 0 {
            self.clear();
        }
    }
}

export! {
    /// `rdma_create_event_channel`.
    fn rdma_create_event_channel() -> *mut rdma_event_channel {
        ptr_ret(|| {
            let ch = Channel::new()?;
            Ok(Arc::into_raw(ch).cast_mut().cast())
        })
    }
}

export! {
    /// `rdma_destroy_event_channel`: the program's reference goes; the
    /// descriptor closes when no id uses the channel any more.
    fn rdma_destroy_event_channel(ch: *mut rdma_event_channel) {
        void(|| {
            if !ch.is_null() {
                // SAFETY: the program's channel, from Arc::into_raw.
                drop(unsafe { Arc::from_raw(ch.cast::<Channel>().cast_const()) });
            }
            Ok(())
        })
    }
}

export! {
    /// `rdma_get_cm_event`: the next event of the channel (waits, unless
    /// its descriptor is non-blocking).
    fn rdma_get_cm_event(ch: *mut rdma_event_channel, out: *mut *mut rdma_cm_event) -> c_int {
        rc(|| {
            if out.is_null() {
                return Err(libc::EINVAL);
            }
            // SAFETY: the program's channel.
            let ch = unsafe { Channel::from_ptr(ch)? };
            let e = ch.take()?;
            // SAFETY: checked non-NULL; the program's out pointer.
            unsafe { *out = Box::into_raw(e).cast() };
            Ok(())
        })
    }
}

export! {
    /// `rdma_ack_cm_event`: frees the event (its private data with it).
    fn rdma_ack_cm_event(e: *mut rdma_cm_event) -> c_int {
        rc(|| {
            // SAFETY: checks NULL; otherwise an event this library handed
            // out (a Box<Event>, the C view first).
            unsafe { arg(e)? };
            // SAFETY: as above; the program gives the event back.
            drop(unsafe { Box::from_raw(e.cast::<Event>()) });
            Ok(())
        })
    }
}

/// The names `rdma_event_str` gives.
const EVENT_NAMES: [&std::ffi::CStr; 16] = [
    c"RDMA_CM_EVENT_ADDR_RESOLVED",
    c"RDMA_CM_EVENT_ADDR_ERROR",
    c"RDMA_CM_EVENT_ROUTE_RESOLVED",
    c"RDMA_CM_EVENT_ROUTE_ERROR",
    c"RDMA_CM_EVENT_CONNECT_REQUEST",
    c"RDMA_CM_EVENT_CONNECT_RESPONSE",
    c"RDMA_CM_EVENT_CONNECT_ERROR",
    c"RDMA_CM_EVENT_UNREACHABLE",
    c"RDMA_CM_EVENT_REJECTED",
    c"RDMA_CM_EVENT_ESTABLISHED",
    c"RDMA_CM_EVENT_DISCONNECTED",
    c"RDMA_CM_EVENT_DEVICE_REMOVAL",
    c"RDMA_CM_EVENT_MULTICAST_JOIN",
    c"RDMA_CM_EVENT_MULTICAST_ERROR",
    c"RDMA_CM_EVENT_ADDR_CHANGE",
    c"RDMA_CM_EVENT_TIMEWAIT_EXIT",
];

export! {
    /// `rdma_event_str`.
    fn rdma_event_str(event: u32) -> *const c_char {
        value_or(c"UNKNOWN EVENT".as_ptr(), || {
            EVENT_NAMES
                .get(event as usize)
                .copied()
                .unwrap_or(c"UNKNOWN EVENT")
                .as_ptr()
        })
    }
}

/// The id's channel events go to, and whether it is synchronous: for the
/// calls that deliver an event of their own making.
pub(crate) fn deliver(id: &Id, e: Box<Event>) {
    let ch = id.st().channel.clone();
    ch.push(e);
}
