//! Direct placement (`docs/rsocket.md`, "Iomaps"): `riomap` registers a
//! buffer of the program and publishes it in the peer's target iomap (an
//! `RS_OP_IOMAP_SGL` WRITE of a `struct rs_iomap`); `riowrite` writes
//! straight into a buffer the peer published (plain RDMA WRITEs, no
//! message); `riounmap` takes a mapping back.

use std::os::raw::{c_int, c_void};
use std::sync::MutexGuard;

use roce_verbs::{Payload, RemoteAddr, Rkey, SendOp};

use super::*;
use crate::ffi::minus_one;
use crate::verbs::{ibv_dereg_mr, ibv_reg_mr};

/// A buffer mapped with `riomap`.
pub(super) struct Mapping {
    /// Its entry in the peer's target iomap (`PROT_WRITE` mappings).
    pub(super) index: Option<u32>,
    pub(super) offset: u64,
    pub(super) mr: *mut ibv_mr,
    /// Published to the peer (or nothing to publish).
    pub(super) sent: bool,
}

/// rsocket.c's `rs_value_to_scale(value, 8)`: sizes above 128 in units
/// of 256, flagged by bit 7.
pub(super) fn value_to_scale(v: u32) -> u32 {
    if v <= 128 {
        v
    } else {
        128 | (v >> 8)
    }
}

/// rsocket.c's `rs_scale_to_value(value, 8)`.
pub(super) fn scale_to_value(v: u32) -> u32 {
    if v <= 128 {
        v
    } else {
        (v & !128) << 8
    }
}

/// Deregisters every mapping (the socket goes).
pub(super) fn unmap_all(s: &mut Stream) {
    for m in s.maps.drain(..) {
        // SAFETY: an MR `riomap` registered, deregistered once.
        unsafe { ibv_dereg_mr(m.mr) };
    }
}

/// Publishes the mappings not yet sent (`rs_send_iomaps`), waiting for
/// send room unless non-blocking.
pub(super) fn send_pending<'a>(
    sock: &'a Sock,
    mut g: MutexGuard<'a, Inner>,
    flags: c_int,
) -> (MutexGuard<'a, Inner>, Res<()>) {
    loop {
        let Some(s) = g.s.as_mut() else {
            return (g, Ok(()));
        };
        let Some(pos) = s.maps.iter().position(|m| !m.sent) else {
            return (g, Ok(()));
        };
        if !s.can_send() {
            let nonblock = g.nonblocking(flags);
            let (g2, r) = wait(sock, g, nonblock, |i| {
                i.state & RS_WRITABLE == 0 || i.s.as_ref().is_some_and(|s| s.can_send())
            });
            g = g2;
            if let Err(e) = r {
                return (g, Err(e));
            }
            if g.state & RS_WRITABLE == 0 {
                return (g, Err(libc::ECONNRESET));
            }
            continue;
        }
        let m = &s.maps[pos];
        let index = m.index.unwrap_or(0);
        // SAFETY: the mapping's MR, live while mapped.
        let (mut addr, mut key, mut len) =
            unsafe { ((*m.mr).addr as u64, (*m.mr).rkey, (*m.mr).length as u32) };
        let mut off = m.offset;
        if s.swap {
            (off, addr, key, len) = (
                off.swap_bytes(),
                addr.swap_bytes(),
                key.swap_bytes(),
                len.swap_bytes(),
            );
        }
        let mut iom = Vec::with_capacity(IOMAP_LEN as usize);
        iom.extend_from_slice(&off.to_ne_bytes());
        iom.extend_from_slice(&addr.to_ne_bytes());
        iom.extend_from_slice(&key.to_ne_bytes());
        iom.extend_from_slice(&len.to_ne_bytes());
        let payload = if s.sq_inline >= IOMAP_LEN {
            Payload::Inline(iom)
        } else {
            Payload::Sgl(s.stage(&iom))
        };
        s.sseq_no = s.sseq_no.wrapping_add(1);
        s.sqe_avail -= 1;
        s.sbuf_bytes_avail -= IOMAP_LEN;
        let (raddr, rkey, _) = s.remote_iomap;
        let at = raddr + u64::from(index) * u64::from(IOMAP_LEN);
        s.maps[pos].sent = true;
        if let Err(e) = s.post(msg(RS_OP_IOMAP_SGL, index), payload, at, rkey) {
            return (g, Err(e));
        }
    }
}

export! {
    /// `riomap`: registers `buf` for the peer's `riowrite` at `offset`
    /// (-1: the buffer's address), published with the next send;
    /// `PROT_WRITE` takes an entry of the peer's iomap (`ENOMEM` when
    /// none is free).
    fn riomap(socket: c_int, buf: *mut c_void, len: usize, prot: c_int, _flags: c_int, offset: i64) -> i64 {
        minus_one(|| {
            let sock = get(socket)?;
            let mut g = sock.lock();
            let id = g.id()?;
            // SAFETY: the socket's id, live.
            let pd = unsafe { (*id).pd };
            if pd.is_null() || prot & !libc::PROT_WRITE != 0 {
                return Err(libc::EINVAL);
            }
            let s = g.s.as_mut().ok_or(libc::EINVAL)?;
            let write = prot & libc::PROT_WRITE != 0;
            let index = if write {
                let used = |i: u32| s.maps.iter().any(|m| m.index == Some(i));
                Some((0..s.remote_iomap.2).find(|&i| !used(i)).ok_or(libc::ENOMEM)?)
            } else {
                None
            };
            let access = 1 | if write { 2 } else { 0 }; // LOCAL_WRITE | REMOTE_WRITE
            // SAFETY: the socket's PD; the program's buffer (checked by
            // the registration).
            let mr = unsafe { ibv_reg_mr(pd, buf, len, access) };
            if mr.is_null() {
                return Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::ENOMEM));
            }
            let offset = if offset == -1 { buf as u64 } else { offset as u64 };
            s.maps.push(Mapping { index, offset, mr, sent: !write });
            Ok(offset as i64)
        })
    }
}

export! {
    /// `riounmap`: the mapping of exactly `buf`, `len` goes (the peer is
    /// not told, as in rsocket.c).
    fn riounmap(socket: c_int, buf: *mut c_void, len: usize) -> c_int {
        minus_one(|| {
            let sock = get(socket)?;
            let mut g = sock.lock();
            let s = g.s.as_mut().ok_or(libc::EINVAL)?;
            // SAFETY: the mappings' MRs, live while mapped.
            let pos = s.maps.iter().position(|m| unsafe { (*m.mr).addr == buf && (*m.mr).length == len });
            let m = s.maps.remove(pos.ok_or(libc::EINVAL)?);
            // SAFETY: an MR `riomap` registered, deregistered once.
            unsafe { ibv_dereg_mr(m.mr) };
            Ok(0)
        })
    }
}

/// The entry of our target iomap holding `offset`: (offset, addr, key,
/// length).
fn find(s: &Stream, offset: u64) -> Option<(u64, u64, u32, u32)> {
    (0..s.iomap_size as usize).find_map(|i| {
        let o = 16 * RS_SGL_SIZE + i * IOMAP_LEN as usize;
        let len = s.tgt.get_u32(o + 20);
        std::sync::atomic::fence(std::sync::atomic::Ordering::Acquire);
        let off = s.tgt.get_u64(o);
        (offset >= off && offset < off + u64::from(len))
            .then(|| (off, s.tgt.get_u64(o + 8), s.tgt.get_u32(o + 16), len))
    })
}

/// `riowrite`'s body.
fn write(socket: c_int, data: &[u8], mut offset: u64, flags: c_int) -> Res<isize> {
    let sock = get(socket)?;
    let g = sock.lock();
    if g.s.is_none() {
        return Err(libc::ENOTCONN);
    }
    if g.state & RS_WRITABLE == 0 {
        return Err(libc::ECONNRESET);
    }
    let (mut g, r) = send_pending(&sock, g, flags);
    r?;
    let mut done = 0;
    let mut olen = RS_OLAP_START_SIZE;
    let mut iom: Option<(u64, u64, u32, u32)> = None;
    let mut err = None;
    while done < data.len() {
        let s = g.s.as_ref().ok_or(libc::ENOTCONN)?;
        if iom.is_none_or(|(o, _, _, l)| offset >= o + u64::from(l)) {
            iom = find(s, offset);
        }
        let Some((ioff, iaddr, ikey, ilen)) = iom else {
            break;
        };
        if !s.can_send() {
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
            continue;
        }
        let left = data.len() - done;
        let mut xfer = if (olen as usize) < left {
            let x = olen;
            if olen < RS_MAX_TRANSFER {
                olen <<= 1;
            }
            x
        } else {
            left as u32
        };
        let Some(s) = g.s.as_mut() else { break };
        xfer = xfer
            .min(s.sbuf_bytes_avail)
            .min((ioff + u64::from(ilen) - offset) as u32);
        let chunk = &data[done..done + xfer as usize];
        let payload = if xfer <= s.sq_inline {
            Payload::Inline(chunk.to_vec())
        } else {
            Payload::Sgl(s.stage(chunk))
        };
        s.sqe_avail -= 1;
        s.sbuf_bytes_avail -= xfer;
        let wr_id = u64::from(msg(RS_OP_WRITE, xfer));
        let remote = RemoteAddr::new(iaddr + offset - ioff, Rkey::new(ikey));
        if let Err(e) = s.post_op(wr_id, SendOp::Write { remote }, payload) {
            err = Some(e);
            break;
        }
        done += xfer as usize;
        offset += u64::from(xfer);
    }
    match err {
        Some(e) if done == 0 => Err(e),
        _ => Ok(done as isize),
    }
}

export! {
    /// `riowrite`: writes `count` bytes into the peer's buffer mapped at
    /// `offset`; stops at the end of what the peer mapped.
    fn riowrite(socket: c_int, buf: *const c_void, count: usize, offset: i64, flags: c_int) -> isize {
        minus_one(|| {
            let data = if count == 0 {
                &[][..]
            } else if buf.is_null() {
                return Err(libc::EFAULT);
            } else {
                // SAFETY: the program's buffer of `count` bytes.
                unsafe { std::slice::from_raw_parts(buf.cast::<u8>(), count) }
            };
            write(socket, data, offset as u64, flags)
        })
    }
}
