//! Connection setup of an rsocket over this library's rdma_cm: the
//! endpoint (QP, CQ, registered buffers, posted receives), `struct
//! rs_conn_data` in the REQ and REP private data (`docs/rsocket.md`,
//! "Connection data"), and the CM events that end or break a connection.

use std::collections::VecDeque;
use std::os::raw::{c_int, c_void};
use std::sync::Arc;

use super::buf::Region;
use super::data::Stream;
use super::*;
use crate::abi::consts::IBV_QPT_RC;
use crate::abi::*;
use crate::channel::Event;
use crate::conn::{rdma_accept, rdma_connect, rdma_reject};
use crate::ffi::Res;
use crate::id::{
    rdma_create_id, rdma_destroy_id, rdma_migrate_id, rdma_resolve_addr, rdma_resolve_route,
};
use crate::qp::{create_qp, rdma_destroy_qp};
use crate::verbs::{
    ibv_ack_cq_events, ibv_create_comp_channel, ibv_create_cq, ibv_destroy_comp_channel,
    ibv_destroy_cq, ibv_get_cq_event,
};
use crate::Id;

/// Size of `struct rs_conn_data`.
pub(super) const CONN_DATA_LEN: usize = 40;
/// `RS_CONN_FLAG_NET`: the sender is big-endian.
const FLAG_NET: u8 = 1;
/// `RS_CONN_FLAG_IOMAP`: the sender has an iomap after its target SGL.
const FLAG_IOMAP: u8 = 2;

/// The errno of the last call of this library that failed.
fn last_errno() -> c_int {
    std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

/// `rc`-style result of an exported call.
fn check(r: c_int) -> Res<()> {
    if r == 0 {
        Ok(())
    } else {
        Err(last_errno())
    }
}

/// Our `rs_conn_data`: version 1, IOMAP flag, credits = receive queue
/// size, no iomap, the target SGL (2 entries) and the first half of the
/// receive buffer. Multi-byte fields big-endian.
fn format_conn_data(s: &Stream) -> [u8; CONN_DATA_LEN] {
    let mut d = [0u8; CONN_DATA_LEN];
    d[0] = 1;
    d[1] = FLAG_IOMAP
        | if cfg!(target_endian = "big") {
            FLAG_NET
        } else {
            0
        };
    d[2..4].copy_from_slice(&(s.rq_size as u16).to_be_bytes());
    // reserved[3] stay zero.
    d[7] = super::iomap::value_to_scale(s.iomap_size) as u8;
    d[8..16].copy_from_slice(&s.tgt.addr(0).to_be_bytes());
    d[16..20].copy_from_slice(&s.tgt.rkey().to_be_bytes());
    d[20..24].copy_from_slice(&(RS_SGL_SIZE as u32).to_be_bytes());
    d[24..32].copy_from_slice(&s.rbuf.addr(0).to_be_bytes());
    d[32..36].copy_from_slice(&s.rbuf.rkey().to_be_bytes());
    d[36..40].copy_from_slice(&(s.rbuf_size >> 1).to_be_bytes());
    d
}

/// Takes in the peer's `rs_conn_data` (`rs_save_conn_data`); `ENOTSUP`
/// for another version or a short one.
fn save_conn_data(s: &mut Stream, d: &[u8]) -> Res<()> {
    if d.len() < CONN_DATA_LEN || d[0] != 1 {
        return Err(libc::ENOTSUP);
    }
    let be64 = |o: usize| u64::from_be_bytes(d[o..o + 8].try_into().unwrap_or([0; 8]));
    let be32 = |o: usize| u32::from_be_bytes(d[o..o + 4].try_into().unwrap_or([0; 4]));
    s.remote_sgl = (be64(8), be32(16), be32(20));
    s.remote_sge = 1;
    s.swap = (d[1] & FLAG_NET != 0) != cfg!(target_endian = "big");
    if d[1] & FLAG_IOMAP != 0 {
        let (a, k, l) = s.remote_sgl;
        s.remote_iomap = (
            // The peer's numbers: wrap as rsocket.c's arithmetic does
            // rather than overflow.
            a.wrapping_add(16 * u64::from(l)),
            k,
            super::iomap::scale_to_value(u32::from(d[7])),
        );
    }
    s.tgt.set_u64(0, be64(24));
    s.tgt.set_u32(8, be32(32));
    s.tgt.set_u32(12, be32(36));
    s.sseq_comp = u16::from_be_bytes([d[2], d[3]]);
    s.peer_credits = s.sseq_comp;
    Ok(())
}

/// The private data of an event.
fn private_data(e: &Event) -> &[u8] {
    // SAFETY: reading the conn member of the union (connection events);
    // a non-NULL pointer names the event's own data, `len` bytes.
    unsafe {
        let c = e.c.param.conn;
        if c.private_data.is_null() {
            &[]
        } else {
            std::slice::from_raw_parts(c.private_data.cast::<u8>(), c.private_data_len as usize)
        }
    }
}

/// Makes the endpoint of `inner.id` (`rs_create_ep`): one CQ on a
/// completion channel for sends and receives, an RC QP, the buffers,
/// and `rq` receives posted.
fn create_ep(inner: &mut Inner) -> Res<()> {
    let z = &mut inner.sizes;
    z.sq = z.sq.clamp(RS_QP_MIN_SIZE, RS_QP_MAX_SIZE);
    z.rq = z.rq.clamp(RS_QP_MIN_SIZE, RS_QP_MAX_SIZE);
    let z = *z;
    // SAFETY: the rsocket's id, live.
    let (i, verbs) = unsafe { (Id::from_ptr(inner.id)?, (*inner.id).verbs) };
    // SAFETY: the id's context (bound or resolved).
    let cch = unsafe { ibv_create_comp_channel(verbs) };
    if cch.is_null() {
        return Err(last_errno());
    }
    // SAFETY: the channel just made; its fd is ours to make non-blocking.
    let cq = unsafe {
        let fd = (*cch).fd;
        libc::fcntl(
            fd,
            libc::F_SETFL,
            libc::fcntl(fd, libc::F_GETFL) | libc::O_NONBLOCK,
        );
        ibv_create_cq(verbs, (z.sq + z.rq) as c_int, std::ptr::null_mut(), cch, 0)
    };
    if cq.is_null() {
        let e = last_errno();
        // SAFETY: the channel made above, unused.
        unsafe { ibv_destroy_comp_channel(cch) };
        return Err(e);
    }
    let mut attr = ibv_qp_init_attr {
        send_cq: cq,
        recv_cq: cq,
        qp_type: IBV_QPT_RC,
        sq_sig_all: 1,
        cap: ibv_qp_cap {
            max_send_wr: z.sq,
            max_recv_wr: z.rq,
            max_send_sge: 2,
            max_recv_sge: 1,
            max_inline_data: z.inline,
        },
        qp_context: std::ptr::null_mut(),
        srq: std::ptr::null_mut(),
    };
    let made = create_qp(i, std::ptr::null_mut(), &mut attr).and_then(|()| {
        // SAFETY: the id's C view; create_qp set its QP and PD.
        let (qp, pd) = unsafe { ((*inner.id).qp, (*inner.id).pd) };
        let ctrl = if attr.cap.max_inline_data < 16 {
            16 * RS_QP_CTRL_SIZE
        } else {
            0
        };
        Ok(Stream {
            qp,
            cq,
            cch,
            sbuf: Region::new(pd, z.sbuf as usize + ctrl, false)?,
            tgt: Region::new(
                pd,
                16 * RS_SGL_SIZE + IOMAP_LEN as usize * z.iomap as usize,
                true,
            )?,
            rbuf: Region::new(pd, z.rbuf as usize, true)?,
            sbuf_size: z.sbuf,
            rbuf_size: z.rbuf,
            sq_size: z.sq,
            rq_size: z.rq,
            sq_inline: attr.cap.max_inline_data,
            ctrl_seqno: 0,
            ctrl_max_seqno: RS_QP_CTRL_SIZE as u32,
            sseq_no: 0,
            sseq_comp: 0,
            rseq_no: 0,
            rseq_comp: (z.rq >> 1) as u16,
            remote_sgl: (0, 0, 0),
            remote_sge: 0,
            swap: false,
            target_sge: 0,
            rbuf_bytes_avail: z.rbuf >> 1,
            rbuf_free_offset: z.rbuf >> 1,
            rbuf_offset: 0,
            sbuf_bytes_avail: z.sbuf,
            sbuf_head: 0,
            sqe_avail: z.sq - RS_QP_CTRL_SIZE as u32,
            rmsg: VecDeque::new(),
            armed: false,
            unacked: 0,
            peer_credits: 0,
            data_sent: 0,
            data_read: 0,
            iomap_size: z.iomap,
            remote_iomap: (0, 0, 0),
            maps: Vec::new(),
        })
    });
    match made {
        Ok(s) => {
            inner.sizes.inline = s.sq_inline;
            inner.s = Some(s);
            for _ in 0..z.rq {
                inner.s.as_ref().map_or(Ok(()), Stream::post_recv)?;
            }
            Ok(())
        }
        Err(e) => {
            // SAFETY: the id (its QP, if made, goes) and the CQ and
            // channel made above, nothing else on them.
            unsafe {
                rdma_destroy_qp(inner.id);
                ibv_destroy_cq(cq);
                ibv_destroy_comp_channel(cch);
            }
            Err(e)
        }
    }
}

impl Stream {
    /// Asks for an event on the CQ's channel at the next completion.
    pub(super) fn arm(&mut self) {
        // SAFETY: the stream's CQ.
        if let Ok(cq) = unsafe { crate::verbs::engine_cq(self.cq) } {
            let _ = cq.req_notify(false);
        }
        self.armed = true;
    }

    /// The completion channel's descriptor.
    pub(super) fn comp_fd(&self) -> c_int {
        // SAFETY: the stream's channel, live.
        unsafe { (*self.cch).fd }
    }

    /// Takes the CQ events that came (the fd is non-blocking).
    pub(super) fn drain_events(&mut self) {
        let (mut cq, mut ctx) = (std::ptr::null_mut(), std::ptr::null_mut::<c_void>());
        // SAFETY: the stream's channel and CQ; live out pointers.
        while unsafe { ibv_get_cq_event(self.cch, &mut cq, &mut ctx) } == 0 {
            self.armed = false;
            self.unacked += 1;
        }
        if self.unacked > 0 {
            // SAFETY: the stream's CQ; events taken above.
            unsafe { ibv_ack_cq_events(self.cq, self.unacked) };
            self.unacked = 0;
        }
    }
}

/// Frees what an rsocket holds: its QP, buffers, CQ, channel, id.
pub(super) fn teardown(inner: &mut Inner) {
    // SAFETY: the rsocket's id; its QP goes before the buffers it uses.
    unsafe { rdma_destroy_qp(inner.id) };
    if let Some(mut s) = inner.s.take() {
        s.drain_events();
        super::iomap::unmap_all(&mut s);
        let (cq, cch) = (s.cq, s.cch);
        drop(s);
        // SAFETY: the CQ and channel the endpoint made, no QP left on them.
        unsafe {
            ibv_destroy_cq(cq);
            ibv_destroy_comp_channel(cch);
        }
    }
    // SAFETY: the rsocket's id, not used again.
    unsafe { rdma_destroy_id(inner.id) };
    inner.id = std::ptr::null_mut();
    // A thread still waiting on the socket (closed under it) sees a
    // connection that is over, and returns.
    inner.state = RS_DISCONNECTED;
}

/// A CM event on a socket's channel.
pub(super) fn cm_event(inner: &mut Inner, e: &Event) {
    use crate::abi::event::*;
    match e.c.event {
        ESTABLISHED if inner.state == RS_CONNECTING => {
            let r = match inner.s.as_mut() {
                Some(s) => save_conn_data(s, private_data(e)),
                None => Err(libc::EINVAL),
            };
            match r {
                Ok(()) => inner.state = RS_CONNECT_RDWR,
                Err(er) => {
                    inner.state = RS_CONNECT_ERROR;
                    inner.err = er;
                }
            }
        }
        REJECTED | UNREACHABLE | CONNECT_ERROR | ADDR_ERROR | ROUTE_ERROR
            if inner.state == RS_CONNECTING =>
        {
            inner.state = RS_CONNECT_ERROR;
            inner.err = match (e.c.event, e.c.status) {
                (REJECTED, _) => libc::ECONNREFUSED,
                (_, s) if s < 0 => -s,
                (_, 0) => libc::EIO,
                (_, s) => s,
            };
        }
        DISCONNECTED | DEVICE_REMOVAL if inner.state & RS_CONNECTED != 0 => {
            inner.state = RS_DISCONNECTED;
        }
        _ => {}
    }
}

/// A new socket's id on a channel of its own.
pub(super) fn new_sock(domain: c_int, sizes: Sizes) -> Res<Arc<Sock>> {
    let ch = Channel::new()?;
    let mut id = std::ptr::null_mut();
    // SAFETY: the channel just made; a live out pointer.
    check(unsafe { rdma_create_id(ch.ptr(), &mut id, std::ptr::null_mut(), ps::TCP) })?;
    // SAFETY: the id just made (rsocket.c records the domain there).
    unsafe { (*id).route.addr.src.sa.sa_family = domain as libc::sa_family_t };
    Ok(Arc::new(Sock::fresh(ch, id, sizes)))
}

/// `rconnect` on a stream socket: address and route (immediate on this
/// CM), the endpoint, the REQ with our connection data; then waits for
/// the REP unless non-blocking (`EINPROGRESS`).
pub(super) fn connect(sock: &Sock, addr: *const libc::sockaddr) -> Res<()> {
    let mut g = sock.lock();
    match g.state {
        RS_INIT | RS_BOUND => {}
        RS_CONNECTING => return Err(libc::EALREADY),
        s if s & RS_CONNECTED != 0 => return Err(libc::EISCONN),
        _ => return Err(libc::ENOTCONN),
    }
    let id = g.id;
    let step = |r: c_int, want: u32| -> Res<()> {
        check(r)?;
        let e = sock.ch.take()?;
        if e.c.event == want {
            Ok(())
        } else if e.c.status < 0 {
            Err(-e.c.status)
        } else {
            Err(libc::EHOSTUNREACH)
        }
    };
    // SAFETY: the rsocket's id; the program's address.
    step(
        unsafe { rdma_resolve_addr(id, std::ptr::null_mut(), addr.cast_mut(), 2000) },
        event::ADDR_RESOLVED,
    )?;
    // SAFETY: as above.
    step(
        unsafe { rdma_resolve_route(id, 2000) },
        event::ROUTE_RESOLVED,
    )?;
    create_ep(&mut g)?;
    let data = g.s.as_ref().map(format_conn_data).ok_or(libc::EINVAL)?;
    let mut param = rdma_conn_param {
        private_data: data.as_ptr().cast(),
        private_data_len: CONN_DATA_LEN as u8,
        flow_control: 1,
        retry_count: 7,
        rnr_retry_count: 7,
        responder_resources: 0,
        initiator_depth: 0,
        srq: 0,
        qp_num: 0,
    };
    // SAFETY: the id with its QP; `param` and `data` live through the call.
    check(unsafe { rdma_connect(id, &mut param) })?;
    g.state = RS_CONNECTING;
    let nonblock = g.nonblocking(0);
    let (mut g, r) = wait(sock, g, nonblock, |i| i.state != RS_CONNECTING);
    match r {
        Err(libc::EWOULDBLOCK) => Err(libc::EINPROGRESS),
        Err(e) => Err(e),
        Ok(()) if g.state == RS_CONNECT_ERROR => Err(std::mem::take(&mut g.err)),
        Ok(()) => Ok(()),
    }
}

/// Takes the next connection request of a listener and accepts it with
/// a new rsocket (`rs_accept`, run by `raccept` itself: there is no
/// listening thread). `EAGAIN` when none waits and the listener is
/// non-blocking.
pub(super) fn accept(l: &Sock) -> Res<Arc<Sock>> {
    loop {
        let (nonblock, sizes) = {
            let g = l.lock();
            if g.state != RS_LISTENING {
                return Err(libc::EINVAL);
            }
            (g.nonblocking(0), g.sizes)
        };
        let Some(e) = l.ch.try_take() else {
            if nonblock {
                return Err(libc::EAGAIN);
            }
            let mut p = libc::pollfd {
                fd: l.fd,
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one live pollfd.
            unsafe { libc::poll(&mut p, 1, 1000) };
            continue;
        };
        if e.c.event != event::CONNECT_REQUEST {
            continue;
        }
        match accept_one(e.c.id, &e, sizes) {
            Ok(s) => return Ok(s),
            // A request that cannot be served is refused (and its id
            // freed); the next one is taken.
            Err(_) => continue,
        }
    }
}

/// Accepts request `e` on its id `id` with a new rsocket; on failure
/// the request is rejected and everything made for it freed.
fn accept_one(id: *mut rdma_cm_id, e: &Event, sizes: Sizes) -> Res<Arc<Sock>> {
    let made = Channel::new().and_then(|ch| {
        // SAFETY: the request's id; the channel just made.
        check(unsafe { rdma_migrate_id(id, ch.ptr()) })?;
        Ok(ch)
    });
    let ch = match made {
        Ok(ch) => ch,
        Err(er) => {
            // SAFETY: the request's id, refused, then freed.
            unsafe {
                rdma_reject(id, std::ptr::null(), 0);
                rdma_destroy_id(id);
            }
            return Err(er);
        }
    };
    let sock = Arc::new(Sock::fresh(ch, id, sizes));
    let mut g = sock.lock();
    if let Err(er) = accept_ep(&mut g, id, e) {
        // SAFETY: the request's id, refused before teardown frees it.
        unsafe { rdma_reject(id, std::ptr::null(), 0) };
        teardown(&mut g);
        return Err(er);
    }
    drop(g);
    Ok(sock)
}

/// The endpoint and the REP of an accepted request.
fn accept_ep(g: &mut Inner, id: *mut rdma_cm_id, e: &Event) -> Res<()> {
    let req = private_data(e);
    if req.len() < CONN_DATA_LEN || req[0] != 1 {
        return Err(libc::ENOTSUP);
    }
    create_ep(g)?;
    let data = match g.s.as_mut() {
        Some(s) => {
            save_conn_data(s, req)?;
            format_conn_data(s)
        }
        None => return Err(libc::EINVAL),
    };
    // SAFETY: reading the request's connection parameters.
    let mut param = unsafe { e.c.param.conn };
    param.private_data = data.as_ptr().cast();
    param.private_data_len = CONN_DATA_LEN as u8;
    // SAFETY: the request's id with its QP; `param` and `data` live.
    check(unsafe { rdma_accept(id, &mut param) })?;
    // The engine's QP is in RTS once accepted: data may flow (the
    // ESTABLISHED that follows the RTU changes nothing).
    g.state = RS_CONNECT_RDWR;
    Ok(())
}
