//! The socket calls of the rsocket API: `rsocket`, `rbind`, `rlisten`,
//! `raccept`, `rconnect`, `rshutdown`, `rclose`, `rgetpeername`,
//! `rgetsockname`, `rsetsockopt`, `rgetsockopt`, `rfcntl`.

use std::os::raw::{c_int, c_long, c_void};

use super::*;
use crate::conn::rdma_listen;
use crate::ffi::minus_one;
use crate::id::{rdma_bind_addr, rdma_set_option};

/// `SOL_RDMA` and its options (`<rdma/rsocket.h>`).
const SOL_RDMA: c_int = 0x10000;
const RDMA_SQSIZE: c_int = 0;
const RDMA_RQSIZE: c_int = 1;
const RDMA_INLINE: c_int = 2;
const RDMA_IOMAPSIZE: c_int = 3;

/// How long `rshutdown` waits for its sends to complete.
const SHUTDOWN_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// Longest a shutdown waits for a peer to read the data last sent to it
/// before telling it of the shutdown (see `shutdown`).
const LINGER: std::time::Duration = std::time::Duration::from_secs(1);

fn last_errno() -> c_int {
    std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

export! {
    /// `rsocket`: a `SOCK_STREAM` socket over AF_INET or AF_INET6
    /// (`SOCK_DGRAM` and AF_IB: `EOPNOTSUPP`).
    fn rsocket(domain: c_int, kind: c_int, protocol: c_int) -> c_int {
        minus_one(|| {
            if (domain != libc::AF_INET && domain != libc::AF_INET6)
                || kind != libc::SOCK_STREAM
                || (protocol != 0 && protocol != libc::IPPROTO_TCP)
            {
                return Err(libc::EOPNOTSUPP);
            }
            let s = conn::new_sock(domain, Sizes::default())?;
            let fd = s.fd;
            insert(s);
            Ok(fd)
        })
    }
}

export! {
    /// `rbind`.
    fn rbind(socket: c_int, addr: *const libc::sockaddr, _len: libc::socklen_t) -> c_int {
        minus_one(|| {
            let s = get(socket)?;
            let mut g = s.lock();
            // SAFETY: the rsocket's id; the program's address (checked
            // by rdma_bind_addr).
            if unsafe { rdma_bind_addr(g.id()?, addr.cast_mut()) } != 0 {
                return Err(last_errno());
            }
            g.state = RS_BOUND;
            Ok(0)
        })
    }
}

export! {
    /// `rlisten`.
    fn rlisten(socket: c_int, backlog: c_int) -> c_int {
        minus_one(|| {
            let s = get(socket)?;
            let mut g = s.lock();
            if g.state == RS_LISTENING {
                return Ok(0);
            }
            // SAFETY: the rsocket's id.
            if unsafe { rdma_listen(g.id()?, backlog) } != 0 {
                return Err(last_errno());
            }
            g.state = RS_LISTENING;
            Ok(0)
        })
    }
}

export! {
    /// `raccept`: the next connection, accepted now (waits unless the
    /// listener is non-blocking: `EAGAIN`).
    fn raccept(socket: c_int, addr: *mut libc::sockaddr, len: *mut libc::socklen_t) -> c_int {
        minus_one(|| {
            let l = get(socket)?;
            let s = conn::accept(&l)?;
            let fd = s.fd;
            insert(s);
            if !addr.is_null() && !len.is_null() {
                // SAFETY: the program's buffers.
                unsafe { rgetpeername(fd, addr, len) };
            }
            Ok(fd)
        })
    }
}

export! {
    /// `rconnect` (`EINPROGRESS` on a non-blocking socket: `rpoll` for
    /// POLLOUT, then `SO_ERROR`).
    fn rconnect(socket: c_int, addr: *const libc::sockaddr, _len: libc::socklen_t) -> c_int {
        minus_one(|| {
            if addr.is_null() {
                return Err(libc::EINVAL);
            }
            conn::connect(&*get(socket)?, addr)?;
            Ok(0)
        })
    }
}

/// `rshutdown`'s body: the control message, then the sends drained.
fn shutdown(s: &Sock, how: c_int) -> Res<()> {
    let mut g = s.lock();
    if g.state & RS_CONNECTED == 0 {
        return Ok(());
    }
    let ctrl = match how {
        libc::SHUT_RDWR => {
            g.state &= !(RS_READABLE | RS_WRITABLE);
            RS_CTRL_DISCONNECT
        }
        libc::SHUT_WR => {
            g.state &= !RS_WRITABLE;
            if g.state & RS_READABLE != 0 {
                RS_CTRL_SHUTDOWN
            } else {
                RS_CTRL_DISCONNECT
            }
        }
        libc::SHUT_RD => {
            g.state &= !RS_READABLE;
            if g.state & RS_WRITABLE != 0 {
                return Ok(());
            }
            RS_CTRL_DISCONNECT
        }
        _ => return Err(libc::EINVAL),
    };
    // Data the peer may not have read yet: wait a little for its next
    // credit update or its own DISCONNECT before sending ours. Linux's
    // rsocket reports data and hang-up taken in one poll as POLLIN|POLLHUP,
    // and programs (rstream's asynchronous mode) take any POLLHUP for an
    // error, so a fast closer made a slower reader fail after the data
    // had arrived whole (docs/rsocket.md).
    let g = if g.s.as_ref().is_some_and(|s| s.unread_by_peer()) {
        let until = Some(std::time::Instant::now() + LINGER);
        let settled = |i: &Inner| {
            i.state & RS_CONNECTED == 0 || !i.s.as_ref().is_some_and(|s| s.unread_by_peer())
        };
        wait_until(s, g, false, until, settled).0
    } else {
        g
    };
    // A peer killed without a word never completes our sends (retries
    // go on for ever): the shutdown gives up after SHUTDOWN_WAIT, and
    // `rclose` frees the socket anyway.
    let deadline = Some(std::time::Instant::now() + SHUTDOWN_WAIT);
    let ctrl_ok =
        |i: &Inner| i.state & RS_CONNECTED == 0 || i.s.as_ref().is_some_and(|s| s.ctrl_avail());
    let (mut g, r) = wait_until(s, g, false, deadline, ctrl_ok);
    r?;
    if g.state & RS_CONNECTED != 0 {
        if let Some(st) = g.s.as_mut() {
            if st.ctrl_avail() {
                st.post_msg(msg(RS_OP_CTRL, ctrl))?;
            }
        }
    }
    let done =
        |i: &Inner| i.state & RS_CONNECTED == 0 || i.s.as_ref().is_some_and(|s| s.all_sends_done());
    let (_g, r) = wait_until(s, g, false, deadline, done);
    r
}

export! {
    /// `rshutdown`: tells the peer (SHUTDOWN or DISCONNECT control
    /// message) and waits for the sends to complete.
    fn rshutdown(socket: c_int, how: c_int) -> c_int {
        minus_one(|| shutdown(&*get(socket)?, how).map(|()| 0))
    }
}

export! {
    /// `rclose`: shuts a connected socket down, then frees it (its
    /// id's destruction sends the DREQ).
    fn rclose(socket: c_int) -> c_int {
        minus_one(|| {
            let s = remove(socket).ok_or(libc::EBADF)?;
            if s.lock().state & RS_CONNECTED != 0 {
                let _ = shutdown(&s, libc::SHUT_RDWR);
            }
            conn::teardown(&mut s.lock());
            Ok(0)
        })
    }
}

/// Copies a socket address out as `getsockname` does.
///
/// # Safety
/// `addr` and `len` are the program's (checked for NULL).
unsafe fn copy_addr(
    src: &rdma_sockaddr,
    addr: *mut libc::sockaddr,
    len: *mut libc::socklen_t,
) -> Res<()> {
    if addr.is_null() || len.is_null() {
        return Err(libc::EFAULT);
    }
    // SAFETY: reading the family of a sockaddr union.
    let size = if unsafe { src.sa.sa_family } as c_int == libc::AF_INET6 {
        std::mem::size_of::<libc::sockaddr_in6>()
    } else {
        std::mem::size_of::<libc::sockaddr_in>()
    };
    // SAFETY: the caller's contract; at most `*len` bytes written.
    unsafe {
        let n = size.min(*len as usize);
        std::ptr::copy_nonoverlapping(
            (src as *const rdma_sockaddr).cast::<u8>(),
            addr.cast::<u8>(),
            n,
        );
        *len = size as libc::socklen_t;
    }
    Ok(())
}

export! {
    /// `rgetpeername`.
    fn rgetpeername(socket: c_int, addr: *mut libc::sockaddr, len: *mut libc::socklen_t) -> c_int {
        minus_one(|| {
            let s = get(socket)?;
            let g = s.lock();
            // SAFETY: the id's C view; the program's buffers.
            unsafe { copy_addr(&(*g.id()?).route.addr.dst, addr, len)? };
            Ok(0)
        })
    }
}

export! {
    /// `rgetsockname`.
    fn rgetsockname(socket: c_int, addr: *mut libc::sockaddr, len: *mut libc::socklen_t) -> c_int {
        minus_one(|| {
            let s = get(socket)?;
            let g = s.lock();
            // SAFETY: the id's C view; the program's buffers.
            unsafe { copy_addr(&(*g.id()?).route.addr.src, addr, len)? };
            Ok(0)
        })
    }
}

/// Reads an int option value.
///
/// # Safety
/// `v` is the program's, `len` bytes.
unsafe fn int_of(v: *const c_void, len: libc::socklen_t) -> Res<c_int> {
    if v.is_null() || (len as usize) < std::mem::size_of::<c_int>() {
        return Err(libc::EINVAL);
    }
    // SAFETY: the caller's contract, size checked.
    Ok(unsafe { v.cast::<c_int>().read_unaligned() })
}

export! {
    /// `rsetsockopt`: the options rsocket.c takes for stream sockets
    /// (buffer and queue sizes before the connection, flags recorded).
    fn rsetsockopt(socket: c_int, level: c_int, name: c_int, val: *const c_void, len: libc::socklen_t) -> c_int {
        minus_one(|| {
            let s = get(socket)?;
            let mut g = s.lock();
            let g = &mut *g;
            // SAFETY: the program's value, `len` bytes.
            let v = unsafe { int_of(val, len)? };
            let mut on = v != 0;
            let opts = match (level, name) {
                (libc::SOL_SOCKET, libc::SO_REUSEADDR) => {
                    let mut x = v;
                    // SAFETY: the rsocket's id; a live int.
                    unsafe { rdma_set_option(g.id()?, 0, 1, (&mut x as *mut c_int).cast(), 4) };
                    &mut g.so_opts
                }
                (libc::SOL_SOCKET, libc::SO_RCVBUF) => {
                    if g.s.is_none() {
                        g.sizes.rbuf = (v as u32) << 1;
                    }
                    return Ok(0);
                }
                (libc::SOL_SOCKET, libc::SO_SNDBUF) => {
                    if g.s.is_none() {
                        g.sizes.sbuf = (v as u32) << 1;
                    }
                    if g.sizes.sbuf < RS_SNDLOWAT {
                        g.sizes.sbuf = RS_SNDLOWAT << 1;
                    }
                    return Ok(0);
                }
                (libc::SOL_SOCKET, libc::SO_LINGER) => {
                    on = v == 0;
                    &mut g.so_opts
                }
                (libc::SOL_SOCKET, libc::SO_OOBINLINE) => &mut g.so_opts,
                (libc::IPPROTO_TCP, libc::TCP_NODELAY) => &mut g.tcp_opts,
                (libc::IPPROTO_TCP, libc::TCP_MAXSEG) => return Ok(0),
                (libc::IPPROTO_IPV6, libc::IPV6_V6ONLY) => {
                    let mut x = v;
                    // SAFETY: the rsocket's id; a live int (AFONLY).
                    unsafe { rdma_set_option(g.id()?, 0, 2, (&mut x as *mut c_int).cast(), 4) };
                    &mut g.ipv6_opts
                }
                (SOL_RDMA, _) if g.state >= RS_OPENING => return Err(libc::EINVAL),
                (SOL_RDMA, RDMA_SQSIZE) => {
                    g.sizes.sq = (v as u32).min(RS_QP_MAX_SIZE);
                    return Ok(0);
                }
                (SOL_RDMA, RDMA_RQSIZE) => {
                    g.sizes.rq = (v as u32).min(RS_QP_MAX_SIZE);
                    return Ok(0);
                }
                (SOL_RDMA, RDMA_INLINE) => {
                    g.sizes.inline = (v as u32).min(RS_QP_MAX_SIZE);
                    return Ok(0);
                }
                (SOL_RDMA, RDMA_IOMAPSIZE) => {
                    g.sizes.iomap = iomap::scale_to_value(iomap::value_to_scale(v.max(0) as u32) & 0xff);
                    return Ok(0);
                }
                _ => return Err(libc::ENOTSUP),
            };
            if on {
                *opts |= 1 << name;
            } else {
                *opts &= !(1 << name);
            }
            Ok(0)
        })
    }
}

export! {
    /// `rgetsockopt`: `SO_ERROR` (cleared when read), sizes, flags.
    fn rgetsockopt(socket: c_int, level: c_int, name: c_int, val: *mut c_void, len: *mut libc::socklen_t) -> c_int {
        minus_one(|| {
            let s = get(socket)?;
            let mut g = s.lock();
            if val.is_null() || len.is_null() {
                return Err(libc::EFAULT);
            }
            let bit = |o: u64| c_int::from(o & (1 << name) != 0);
            let v: c_int = match (level, name) {
                (libc::SOL_SOCKET, libc::SO_REUSEADDR | libc::SO_KEEPALIVE | libc::SO_OOBINLINE) => bit(g.so_opts),
                (libc::SOL_SOCKET, libc::SO_RCVBUF) => g.sizes.rbuf as c_int,
                (libc::SOL_SOCKET, libc::SO_SNDBUF) => g.sizes.sbuf as c_int,
                (libc::SOL_SOCKET, libc::SO_ERROR) => std::mem::take(&mut g.err),
                (libc::IPPROTO_TCP, libc::TCP_NODELAY) => bit(g.tcp_opts),
                (libc::IPPROTO_TCP, libc::TCP_MAXSEG) => 2048,
                (libc::IPPROTO_IPV6, libc::IPV6_V6ONLY) => bit(g.ipv6_opts),
                (SOL_RDMA, RDMA_SQSIZE) => g.sizes.sq as c_int,
                (SOL_RDMA, RDMA_RQSIZE) => g.sizes.rq as c_int,
                (SOL_RDMA, RDMA_INLINE) => g.sizes.inline as c_int,
                (SOL_RDMA, RDMA_IOMAPSIZE) => g.sizes.iomap as c_int,
                _ => return Err(libc::ENOTSUP),
            };
            // SAFETY: the program's buffer and length (checked non-NULL);
            // rsocket.c writes an int whatever the length.
            unsafe {
                val.cast::<c_int>().write_unaligned(v);
                *len = std::mem::size_of::<c_int>() as libc::socklen_t;
            }
            Ok(0)
        })
    }
}

export! {
    /// `rfcntl(socket, cmd, ...)`: `F_GETFL` and `F_SETFL` (`O_NONBLOCK`).
    /// Declared with a fixed third argument: on the x86-64 and AArch64
    /// Linux ABIs a variadic int or long argument arrives in the same
    /// register as a named one.
    fn rfcntl(socket: c_int, cmd: c_int, arg: c_long) -> c_int {
        minus_one(|| {
            let s = get(socket)?;
            let mut g = s.lock();
            match cmd {
                libc::F_GETFL => Ok(g.fd_flags),
                libc::F_SETFL => {
                    g.fd_flags = arg as c_int;
                    Ok(0)
                }
                _ => Err(libc::ENOTSUP),
            }
        })
    }
}
