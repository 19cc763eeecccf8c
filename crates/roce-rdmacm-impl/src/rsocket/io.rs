//! `rsend`, `rrecv` and their variants (`rwrite`, `rwritev`, `rsendmsg`,
//! `rsendto`, `rread`, `rreadv`, `rrecvmsg`, `rrecvfrom`) on stream
//! rsockets: the copy loops of rsocket.c's `rsendv` and `rrecv`.

use std::os::raw::{c_int, c_void};

use roce_verbs::Payload;

use super::*;
use crate::ffi::minus_one;

/// Gathers `n` bytes from the iovecs, moving the cursor (iovec, offset).
fn gather(iov: &[&[u8]], cur: &mut (usize, usize), n: usize) -> Vec<u8> {
    let mut v = Vec::with_capacity(n);
    while v.len() < n && cur.0 < iov.len() {
        let b = iov[cur.0];
        let k = (n - v.len()).min(b.len() - cur.1);
        v.extend_from_slice(&b[cur.1..cur.1 + k]);
        cur.1 += k;
        if cur.1 == b.len() {
            *cur = (cur.0 + 1, 0);
        }
    }
    v
}

/// Sends the bytes of `iov` (`rsendv`): chunks starting at 2 KiB,
/// doubling up to 64 KiB, each one WRITE with immediate into the peer's
/// current target SGE; waits for credits and buffer space unless
/// non-blocking. Returns the bytes sent, or the error if none were.
fn send(socket: c_int, iov: &[&[u8]], flags: c_int) -> Res<isize> {
    let sock = get(socket)?;
    let mut g = sock.lock();
    if g.state == RS_CONNECTING {
        let (g2, r) = wait(&sock, g, true, |i| i.state != RS_CONNECTING);
        g = g2;
        r.map_err(|_| libc::EAGAIN)?;
    }
    if g.s.is_none() {
        return Err(libc::ENOTCONN);
    }
    // rsocket.c checks this only when it has to wait; a connection shut
    // down for writing, or gone, refuses data at once here.
    if g.state & RS_WRITABLE == 0 {
        return Err(libc::ECONNRESET);
    }
    let (g2, r) = super::iomap::send_pending(&sock, g, flags);
    g = g2;
    r?;
    let len: usize = iov.iter().map(|b| b.len()).sum();
    let mut left = len;
    let mut olen = RS_OLAP_START_SIZE;
    let mut cur = (0, 0);
    let mut err = None;
    while left > 0 {
        if !g.s.as_ref().is_some_and(|s| s.can_send()) {
            let nonblock = g.nonblocking(flags);
            let (g2, r) = wait(&sock, g, nonblock, |i| {
                i.state & RS_WRITABLE == 0 || i.s.as_ref().is_some_and(|s| s.can_send())
            });
            g = g2;
            if let Err(e) = r {
                err = Some(e);
                break;
            }
            if g.state & RS_WRITABLE == 0 {
                err = Some(libc::ECONNRESET);
                break;
            }
        }
        let Some(s) = g.s.as_mut() else {
            err = Some(libc::ENOTCONN);
            break;
        };
        let mut xfer = if (olen as usize) < left {
            let x = olen;
            if olen < RS_MAX_TRANSFER {
                olen <<= 1;
            }
            x
        } else {
            left as u32
        };
        xfer = s.xfer_limit(xfer);
        let data = gather(iov, &mut cur, xfer as usize);
        let payload = if xfer <= s.sq_inline {
            Payload::Inline(data)
        } else {
            Payload::Sgl(s.stage(&data))
        };
        if let Err(e) = s.write_data(payload, xfer) {
            err = Some(e);
            break;
        }
        left -= xfer as usize;
    }
    match err {
        Some(e) if left == len => Err(e),
        _ => Ok((len - left) as isize),
    }
}

/// Receives into `buf` (`rrecv`): what has arrived, waiting for some
/// unless non-blocking; 0 at the end of the stream once the peer shut
/// down or went and the data before is read.
fn recv(socket: c_int, buf: &mut [u8], flags: c_int) -> Res<isize> {
    let sock = get(socket)?;
    let mut g = sock.lock();
    if g.state == RS_CONNECTING {
        let (g2, r) = wait(&sock, g, true, |i| i.state != RS_CONNECTING);
        g = g2;
        r.map_err(|_| libc::EAGAIN)?;
    }
    if g.s.is_none() {
        return Err(libc::ENOTCONN);
    }
    let len = buf.len();
    let mut done = 0;
    let mut err = None;
    loop {
        if g.s.as_ref().is_some_and(|s| s.rmsg.is_empty()) {
            let nonblock = g.nonblocking(flags);
            let (g2, r) = wait(&sock, g, nonblock, |i| {
                i.state & RS_READABLE == 0 || i.s.as_ref().is_some_and(|s| !s.rmsg.is_empty())
            });
            g = g2;
            if let Err(e) = r {
                err = Some(e);
                break;
            }
        }
        let Some(s) = g.s.as_mut() else { break };
        if flags & libc::MSG_PEEK != 0 {
            done = s.read_out(&mut buf[done..], true);
            break;
        }
        done += s.read_out(&mut buf[done..], false);
        if done == len || flags & libc::MSG_WAITALL == 0 || g.state & RS_READABLE == 0 {
            break;
        }
    }
    // Credits for what was read go now, as rsocket.c's exit path does.
    let _ = g.progress(&sock.ch);
    match err {
        Some(e) if done == 0 => Err(e),
        // The connection failed (a peer that broke the protocol): its
        // error, as a socket reports a pending error, not an end of file.
        None if done == 0 && g.state == RS_ERROR && g.err != 0 => Err(g.err),
        _ => Ok(done as isize),
    }
}

/// The program's iovecs as slices.
///
/// # Safety
/// `iov` names `n` iovecs of readable memory.
unsafe fn slices<'a>(iov: *const libc::iovec, n: c_int) -> Res<Vec<&'a [u8]>> {
    if n < 0 || (n > 0 && iov.is_null()) {
        return Err(libc::EINVAL);
    }
    // SAFETY: the caller's contract.
    let v = unsafe { std::slice::from_raw_parts(iov, n as usize) };
    Ok(v.iter()
        .filter(|i| i.iov_len > 0)
        // SAFETY: each iovec names the program's readable memory.
        .map(|i| unsafe { std::slice::from_raw_parts(i.iov_base.cast::<u8>(), i.iov_len) })
        .collect())
}

/// The program's buffer as a slice (empty for length 0).
///
/// # Safety
/// `buf` names `len` bytes.
unsafe fn bytes<'a>(buf: *const c_void, len: usize) -> Res<&'a [u8]> {
    if len == 0 {
        return Ok(&[]);
    }
    if buf.is_null() {
        return Err(libc::EFAULT);
    }
    // SAFETY: the caller's contract.
    Ok(unsafe { std::slice::from_raw_parts(buf.cast::<u8>(), len) })
}

/// As [`bytes`], writable.
///
/// # Safety
/// `buf` names `len` writable bytes.
unsafe fn bytes_mut<'a>(buf: *mut c_void, len: usize) -> Res<&'a mut [u8]> {
    if len == 0 {
        return Ok(&mut []);
    }
    if buf.is_null() {
        return Err(libc::EFAULT);
    }
    // SAFETY: the caller's contract.
    Ok(unsafe { std::slice::from_raw_parts_mut(buf.cast::<u8>(), len) })
}

export! {
    /// `rsend`.
    fn rsend(socket: c_int, buf: *const c_void, len: usize, flags: c_int) -> isize {
        // SAFETY: the program's buffer.
        minus_one(|| send(socket, &[unsafe { bytes(buf, len)? }], flags))
    }
}

export! {
    /// `rwrite`.
    fn rwrite(socket: c_int, buf: *const c_void, len: usize) -> isize {
        // SAFETY: the program's buffer.
        minus_one(|| send(socket, &[unsafe { bytes(buf, len)? }], 0))
    }
}

export! {
    /// `rwritev`.
    fn rwritev(socket: c_int, iov: *const libc::iovec, n: c_int) -> isize {
        // SAFETY: the program's iovecs.
        minus_one(|| send(socket, &unsafe { slices(iov, n)? }, 0))
    }
}

export! {
    /// `rsendmsg` (no control data: `ENOTSUP`, as rsocket.c).
    fn rsendmsg(socket: c_int, msg: *const libc::msghdr, flags: c_int) -> isize {
        minus_one(|| {
            // SAFETY: the program's message.
            let m = unsafe { crate::ffi::arg(msg)? };
            if !m.msg_control.is_null() && m.msg_controllen > 0 {
                return Err(libc::ENOTSUP);
            }
            // SAFETY: the message's iovecs.
            send(socket, &unsafe { slices(m.msg_iov, m.msg_iovlen as c_int)? }, flags)
        })
    }
}

export! {
    /// `rsendto`: a stream socket takes no destination (`EISCONN`).
    fn rsendto(socket: c_int, buf: *const c_void, len: usize, flags: c_int, dest: *const libc::sockaddr, dlen: libc::socklen_t) -> isize {
        minus_one(|| {
            if !dest.is_null() || dlen != 0 {
                return Err(libc::EISCONN);
            }
            // SAFETY: the program's buffer.
            send(socket, &[unsafe { bytes(buf, len)? }], flags)
        })
    }
}

export! {
    /// `rrecv` (`MSG_DONTWAIT`, `MSG_PEEK`, `MSG_WAITALL`).
    fn rrecv(socket: c_int, buf: *mut c_void, len: usize, flags: c_int) -> isize {
        // SAFETY: the program's buffer.
        minus_one(|| recv(socket, unsafe { bytes_mut(buf, len)? }, flags))
    }
}

export! {
    /// `rread`.
    fn rread(socket: c_int, buf: *mut c_void, len: usize) -> isize {
        // SAFETY: the program's buffer.
        minus_one(|| recv(socket, unsafe { bytes_mut(buf, len)? }, 0))
    }
}

/// The first iovec, the one rsocket.c's `rrecvv` fills.
///
/// # Safety
/// `iov` names `n` iovecs of writable memory.
unsafe fn first<'a>(iov: *const libc::iovec, n: c_int) -> Res<&'a mut [u8]> {
    if n <= 0 || iov.is_null() {
        return Err(libc::EINVAL);
    }
    // SAFETY: the caller's contract.
    unsafe { bytes_mut((*iov).iov_base, (*iov).iov_len) }
}

export! {
    /// `rreadv`: fills the first iovec, as rsocket.c does.
    fn rreadv(socket: c_int, iov: *const libc::iovec, n: c_int) -> isize {
        // SAFETY: the program's iovecs.
        minus_one(|| recv(socket, unsafe { first(iov, n)? }, 0))
    }
}

export! {
    /// `rrecvmsg`: fills the first iovec (no control data: `ENOTSUP`).
    fn rrecvmsg(socket: c_int, msg: *mut libc::msghdr, flags: c_int) -> isize {
        minus_one(|| {
            // SAFETY: the program's message.
            let m = unsafe { crate::ffi::arg(msg)? };
            if !m.msg_control.is_null() && m.msg_controllen > 0 {
                return Err(libc::ENOTSUP);
            }
            // SAFETY: the message's iovecs.
            recv(socket, unsafe { first(m.msg_iov, m.msg_iovlen as c_int)? }, flags)
        })
    }
}

export! {
    /// `rrecvfrom`: `rrecv`, then the peer's address.
    fn rrecvfrom(socket: c_int, buf: *mut c_void, len: usize, flags: c_int, src: *mut libc::sockaddr, slen: *mut libc::socklen_t) -> isize {
        minus_one(|| {
            // SAFETY: the program's buffer.
            let n = recv(socket, unsafe { bytes_mut(buf, len)? }, flags)?;
            if n > 0 && !src.is_null() {
                // SAFETY: the program's address buffers.
                unsafe { super::api::rgetpeername(socket, src, slen) };
            }
            Ok(n)
        })
    }
}
