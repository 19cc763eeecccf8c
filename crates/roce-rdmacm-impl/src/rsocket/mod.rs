//! librdmacm's rsocket API for `SOCK_STREAM` sockets over AF_INET and
//! AF_INET6, with the wire protocol of rdma-core v44's rsockets, so that
//! either side may be Linux's librdmacm (`docs/rsocket.md` has the
//! protocol facts this follows).
//!
//! The pieces:
//! * this file: the socket table, the state each rsocket keeps, and the
//!   wait every blocking call goes through;
//! * `conn`: connection setup over this library's rdma_cm (`rs_conn_data`
//!   in the private data), endpoints;
//! * `data`: the data path over this library's verbs;
//! * `api`: socket calls (`rsocket`, `rbind` ... `rfcntl`);
//! * `io`: `rsend`, `rrecv` and their variants;
//! * `iomap`: `riomap`, `riounmap`, `riowrite` (direct placement);
//! * `poll`: `rpoll`, `rselect`;
//! * `buf`: registered buffers.
//!
//! An rsocket's number is the descriptor of its rdma_cm event channel,
//! as in rsocket.c: a real descriptor of the process, so it never clashes
//! with another one, and `rpoll` tells rsockets from other descriptors
//! by looking the number up in the table.

mod api;
mod buf;
mod conn;
mod data;
mod io;
mod iomap;
mod poll;

use std::collections::HashMap;
use std::os::raw::c_int;
use std::sync::{Arc, Mutex, MutexGuard};

use super::{lock, Channel};
use crate::abi::*;
use crate::ffi::Res;
use data::Stream;

/// rsocket.c's constants (`docs/rsocket.md`, "Sizes").
/// Size of `struct rs_iomap` (offset, then an rs_sge).
pub(super) const IOMAP_LEN: u32 = 24;

/// The message of an immediate: op in bits 31:29, data in 28:0.
pub(super) fn msg(op: u32, data: u32) -> u32 {
    (op << 29) | (data & 0x1fff_ffff)
}

const RS_OLAP_START_SIZE: u32 = 2048;
const RS_MAX_TRANSFER: u32 = 65536;
const RS_SNDLOWAT: u32 = 2048;
const RS_QP_MIN_SIZE: u32 = 16;
const RS_QP_MAX_SIZE: u32 = 0xfffe;
const RS_QP_CTRL_SIZE: usize = 4;
const RS_SGL_SIZE: usize = 2;
const DEF_INLINE: u32 = 64;
const DEF_SQSIZE: u32 = 384;
const DEF_RQSIZE: u32 = 384;
const DEF_MEM: u32 = 1 << 17;
const DEF_WMEM: u32 = 1 << 17;

/// Immediate data operations.
const RS_OP_DATA: u32 = 0;
const RS_OP_WRITE: u32 = 2;
const RS_OP_SGL: u32 = 4;
const RS_OP_IOMAP_SGL: u32 = 6;
const RS_OP_CTRL: u32 = 7;
/// Control messages.
const RS_CTRL_DISCONNECT: u32 = 0;
const RS_CTRL_SHUTDOWN: u32 = 2;

/// States (rsocket.c's `enum rs_state`: flags, ordered).
const RS_INIT: u32 = 0;
const RS_BOUND: u32 = 0x1;
const RS_LISTENING: u32 = 0x2;
const RS_OPENING: u32 = 0x4;
const RS_CONNECTING: u32 = RS_OPENING | 0x40;
const RS_CONNECTED: u32 = 0x100;
const RS_WRITABLE: u32 = 0x200;
const RS_READABLE: u32 = 0x400;
const RS_CONNECT_RDWR: u32 = RS_CONNECTED | RS_READABLE | RS_WRITABLE;
const RS_CONNECT_ERROR: u32 = 0x800;
const RS_DISCONNECTED: u32 = 0x1000;
const RS_ERROR: u32 = 0x2000;

/// Sizes an rsocket is created with (inherited by accepted ones).
#[derive(Clone, Copy)]
struct Sizes {
    sbuf: u32,
    rbuf: u32,
    sq: u32,
    rq: u32,
    inline: u32,
    /// Entries of the target iomap (`RDMA_IOMAPSIZE`).
    iomap: u32,
}

impl Default for Sizes {
    fn default() -> Sizes {
        Sizes {
            sbuf: DEF_WMEM,
            rbuf: DEF_MEM,
            sq: DEF_SQSIZE,
            rq: DEF_RQSIZE,
            inline: DEF_INLINE,
            iomap: 0,
        }
    }
}

/// What an rsocket keeps, under its lock.
struct Inner {
    /// Its rdma_cm id (on the socket's channel).
    id: *mut rdma_cm_id,
    state: u32,
    /// `rfcntl` flags (`O_NONBLOCK`).
    fd_flags: c_int,
    /// The error `SO_ERROR` reports.
    err: c_int,
    /// Options set (bit `1 << optname` per level, as rsocket.c keeps them).
    so_opts: u64,
    tcp_opts: u64,
    ipv6_opts: u64,
    sizes: Sizes,
    /// The connection, once its endpoint exists.
    s: Option<Stream>,
}

// SAFETY: `id` is an id of this library owned by the rsocket, used under
// its lock.
unsafe impl Send for Inner {}

/// One rsocket.
struct Sock {
    /// Its number: the descriptor of `ch`.
    fd: c_int,
    ch: Arc<Channel>,
    st: Mutex<Inner>,
}

impl Sock {
    /// A socket on `ch` with `id`, in its first state and with no
    /// options set.
    fn fresh(ch: Arc<Channel>, id: *mut rdma_cm_id, sizes: Sizes) -> Sock {
        Sock {
            fd: ch.c.fd,
            ch,
            st: Mutex::new(Inner {
                id,
                state: RS_INIT,
                fd_flags: 0,
                err: 0,
                so_opts: 0,
                tcp_opts: 0,
                ipv6_opts: 0,
                sizes,
                s: None,
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        lock(&self.st)
    }
}

/// The rsockets of the process, by number.
static TABLE: Mutex<Option<HashMap<c_int, Arc<Sock>>>> = Mutex::new(None);

/// The rsocket numbered `fd` (`EBADF` if none).
fn get(fd: c_int) -> Res<Arc<Sock>> {
    lock(&TABLE)
        .as_ref()
        .and_then(|t| t.get(&fd).cloned())
        .ok_or(libc::EBADF)
}

fn insert(s: Arc<Sock>) {
    lock(&TABLE)
        .get_or_insert_with(HashMap::new)
        .insert(s.fd, s);
}

fn remove(fd: c_int) -> Option<Arc<Sock>> {
    lock(&TABLE).as_mut().and_then(|t| t.remove(&fd))
}

impl Inner {
    /// The socket's id (`EBADF` once closed under a caller).
    fn id(&self) -> Res<*mut rdma_cm_id> {
        if self.id.is_null() {
            Err(libc::EBADF)
        } else {
            Ok(self.id)
        }
    }

    fn nonblocking(&self, flags: c_int) -> bool {
        self.fd_flags & libc::O_NONBLOCK != 0 || flags & libc::MSG_DONTWAIT != 0
    }

    /// Handles the CM events waiting on the socket's channel: the end of a
    /// connection attempt, a disconnect.
    fn cm_events(&mut self, ch: &Channel) {
        while let Some(e) = ch.try_take() {
            conn::cm_event(self, &e);
        }
    }

    /// One round of progress without waiting (`rs_process_cq`'s body):
    /// CM events, credits, completions.
    fn progress(&mut self, ch: &Channel) -> Res<()> {
        self.cm_events(ch);
        let Some(s) = self.s.as_mut() else {
            return Ok(());
        };
        let (mut st, mut err) = (self.state, self.err);
        let r = s
            .update_credits(st)
            .and_then(|()| s.poll_cq(&mut st, &mut err))
            .and_then(|()| s.update_credits(st));
        self.state = st;
        self.err = err;
        r
    }
}

/// Waits until `test` holds (`rs_get_comp`): progress, then, unless
/// `nonblock` (`EWOULDBLOCK`), sleeps on the CQ's channel and the CM
/// channel with the lock released. A peer that goes ends the wait
/// through its disconnect (CM event or flushed work).
fn wait<'a>(
    sock: &'a Sock,
    g: MutexGuard<'a, Inner>,
    nonblock: bool,
    test: impl Fn(&Inner) -> bool,
) -> (MutexGuard<'a, Inner>, Res<()>) {
    wait_until(sock, g, nonblock, None, test)
}

/// [`wait`], giving up with `ETIMEDOUT` at `deadline`.
fn wait_until<'a>(
    sock: &'a Sock,
    mut g: MutexGuard<'a, Inner>,
    nonblock: bool,
    deadline: Option<std::time::Instant>,
    test: impl Fn(&Inner) -> bool,
) -> (MutexGuard<'a, Inner>, Res<()>) {
    loop {
        if let Err(e) = g.progress(&sock.ch) {
            if !test(&g) {
                return (g, Err(e));
            }
        }
        if test(&g) {
            return (g, Ok(()));
        }
        if nonblock {
            return (g, Err(libc::EWOULDBLOCK));
        }
        if deadline.is_some_and(|d| std::time::Instant::now() >= d) {
            return (g, Err(libc::ETIMEDOUT));
        }
        let comp_fd = match g.s.as_mut() {
            Some(s) if !s.armed => {
                s.arm();
                continue;
            }
            Some(s) => s.comp_fd(),
            None => -1,
        };
        drop(g);
        let mut fds = [
            libc::pollfd {
                fd: sock.fd,
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: comp_fd,
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        // SAFETY: two live pollfds (a negative fd is ignored by poll).
        unsafe { libc::poll(fds.as_mut_ptr(), 2, 1000) };
        g = sock.lock();
        if let Some(s) = g.s.as_mut() {
            s.drain_events();
        }
    }
}
