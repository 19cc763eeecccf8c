//! The data path of a connected rsocket (`docs/rsocket.md`): data by
//! RDMA WRITE with immediate into the peer's receive buffer, credits and
//! SGL updates back, control messages, all over this library's verbs.

use std::collections::VecDeque;
use std::os::raw::c_int;

use roce_verbs::{
    Lkey, Payload, RecvWr, RemoteAddr, Rkey, SendFlags, SendOp, SendWr, Sge, SgeList,
};

use super::buf::Region;
use super::*;
use crate::abi::*;
use crate::ffi::{verr, Res};

/// `wr_id` bit of a receive (rsocket.c's `RS_WR_ID_FLAG_RECV`).
const WR_RECV: u64 = 1 << 63;

/// A connection's buffers and the protocol state each side keeps.
pub(super) struct Stream {
    pub(super) qp: *mut ibv_qp,
    pub(super) cq: *mut ibv_cq,
    pub(super) cch: *mut ibv_comp_channel,
    /// Send buffer (`sbuf_size`, then `RS_QP_CTRL_SIZE` control slots of
    /// 16 bytes when the inline size is below 16).
    pub(super) sbuf: Region,
    /// Target SGL: `RS_SGL_SIZE` rs_sge entries the peer writes.
    pub(super) tgt: Region,
    /// Receive buffer: two halves the peer writes data into.
    pub(super) rbuf: Region,
    pub(super) sbuf_size: u32,
    pub(super) rbuf_size: u32,
    pub(super) sq_size: u32,
    pub(super) rq_size: u32,
    pub(super) sq_inline: u32,
    pub(super) ctrl_seqno: u32,
    pub(super) ctrl_max_seqno: u32,
    pub(super) sseq_no: u16,
    pub(super) sseq_comp: u16,
    pub(super) rseq_no: u16,
    pub(super) rseq_comp: u16,
    /// The peer's target SGL (from the connection data) and the entry
    /// of it the next SGL update goes to.
    pub(super) remote_sgl: (u64, u32, u32),
    pub(super) remote_sge: u32,
    /// The peer's byte order differs (RS_CONN_FLAG_NET): swap SGL updates.
    pub(super) swap: bool,
    pub(super) target_sge: usize,
    pub(super) rbuf_bytes_avail: u32,
    pub(super) rbuf_free_offset: u32,
    pub(super) rbuf_offset: u32,
    pub(super) sbuf_bytes_avail: u32,
    /// Offset in `sbuf` where the next copied data goes.
    pub(super) sbuf_head: u32,
    pub(super) sqe_avail: u32,
    /// Lengths of the data messages received and not yet read.
    pub(super) rmsg: VecDeque<u32>,
    pub(super) armed: bool,
    pub(super) unacked: u32,
    /// The peer's receive queue size (the credits of its connection
    /// data): its credit updates carry the data messages its program has
    /// read plus this.
    pub(super) peer_credits: u16,
    /// Data messages sent, and read by the peer's program as its last
    /// credit update said (see `unread_by_peer`).
    pub(super) data_sent: u16,
    pub(super) data_read: u16,
    /// Entries of our target iomap (after the target SGL in `tgt`).
    pub(super) iomap_size: u32,
    /// The peer's target iomap: (addr, key, entries).
    pub(super) remote_iomap: (u64, u32, u32),
    /// Buffers mapped with `riomap`.
    pub(super) maps: Vec<super::iomap::Mapping>,
}

// SAFETY: the raw pointers name this library's QP, CQ and channel, owned
// by the rsocket and used under its lock.
unsafe impl Send for Stream {}

impl Stream {
    fn qp(&self) -> Res<&roce_verbs::QueuePair> {
        // SAFETY: the rsocket's QP, destroyed only with the stream.
        unsafe { crate::verbs::engine_qp(self.qp) }
    }

    /// Posts one signaled WRITE with immediate `imm` (wr_id `imm`, as
    /// rsocket.c identifies its sends).
    pub(super) fn post(&self, imm: u32, payload: Payload, raddr: u64, rkey: u32) -> Res<()> {
        let remote = RemoteAddr::new(raddr, Rkey::new(rkey));
        self.post_op(
            u64::from(imm),
            SendOp::WriteWithImm { remote, imm },
            payload,
        )
    }

    /// Posts one signaled WRITE (`op`, with its remote address) with `wr_id`.
    pub(super) fn post_op(&self, wr_id: u64, op: SendOp, payload: Payload) -> Res<()> {
        let inline = matches!(payload, Payload::Inline(_));
        let flags = if inline {
            SendFlags(SendFlags::SIGNALED.0 | SendFlags::INLINE.0)
        } else {
            SendFlags::SIGNALED
        };
        self.qp()?
            .post_send(SendWr {
                wr_id,
                op,
                payload,
                flags,
            })
            .map_err(verr)
    }

    /// Posts one receive (no SGE: WRITEs with immediate consume it).
    pub(super) fn post_recv(&self) -> Res<()> {
        self.qp()?
            .post_recv(RecvWr {
                wr_id: WR_RECV,
                sgl: Default::default(),
            })
            .map_err(verr)
    }

    /// Target SGE `i` of the peer's receive buffer: (addr, key, length).
    pub(super) fn target(&self, i: usize) -> (u64, u32, u32) {
        let o = i * 16;
        let len = self.tgt.get_u32(o + 12);
        std::sync::atomic::fence(std::sync::atomic::Ordering::Acquire);
        (self.tgt.get_u64(o), self.tgt.get_u32(o + 8), len)
    }

    /// `rs_can_send`.
    pub(super) fn can_send(&self) -> bool {
        self.sqe_avail > 0
            && self.sbuf_bytes_avail >= RS_SNDLOWAT
            && self.sseq_no != self.sseq_comp
            && self.target(self.target_sge).2 != 0
    }

    /// A control slot is free.
    pub(super) fn ctrl_avail(&self) -> bool {
        self.ctrl_seqno != self.ctrl_max_seqno
    }

    /// Every send, data and control, has completed.
    pub(super) fn all_sends_done(&self) -> bool {
        (self.ctrl_max_seqno.wrapping_sub(self.ctrl_seqno)).wrapping_add(self.sqe_avail)
            == self.sq_size
    }

    /// A zero-length control message (`rs_post_msg`).
    pub(super) fn post_msg(&mut self, m: u32) -> Res<()> {
        self.ctrl_seqno = self.ctrl_seqno.wrapping_add(1);
        self.post(m, Payload::Sgl(Default::default()), 0, 0)
    }

    /// Sends credits, with a new receive buffer half when one is free
    /// (`rs_send_credits`).
    fn send_credits(&mut self) -> Res<()> {
        self.ctrl_seqno = self.ctrl_seqno.wrapping_add(1);
        self.rseq_comp = self.rseq_no.wrapping_add((self.rq_size >> 1) as u16);
        let m = msg(RS_OP_SGL, u32::from(self.rseq_no) + self.rq_size);
        let half = self.rbuf_size >> 1;
        if self.rbuf_bytes_avail < half {
            return self.post(m, Payload::Sgl(Default::default()), 0, 0);
        }
        let (mut a, mut k, mut l) = (
            self.rbuf.addr(self.rbuf_free_offset as usize),
            self.rbuf.rkey(),
            half,
        );
        if self.swap {
            (a, k, l) = (a.swap_bytes(), k.swap_bytes(), l.swap_bytes());
        }
        let mut sge = [0u8; 16];
        sge[..8].copy_from_slice(&a.to_ne_bytes());
        sge[8..12].copy_from_slice(&k.to_ne_bytes());
        sge[12..].copy_from_slice(&l.to_ne_bytes());
        let payload = if self.sq_inline < 16 {
            let off =
                self.sbuf_size as usize + 16 * (self.ctrl_seqno as usize & (RS_QP_CTRL_SIZE - 1));
            self.sbuf.write(off, &sge);
            Payload::Sgl(
                [Sge {
                    addr: self.sbuf.addr(off),
                    length: 16,
                    lkey: Lkey::new(self.sbuf.lkey()),
                }]
                .into_iter()
                .collect(),
            )
        } else {
            Payload::Inline(sge.to_vec())
        };
        let (raddr, _, rlen) = self.remote_sgl;
        let at = raddr + 16 * u64::from(self.remote_sge);
        self.post(m, payload, at, self.remote_sgl.1)?;
        self.rbuf_bytes_avail -= half;
        self.rbuf_free_offset += half;
        if self.rbuf_free_offset >= self.rbuf_size {
            self.rbuf_free_offset = 0;
        }
        self.remote_sge += 1;
        if self.remote_sge >= rlen.max(1) {
            self.remote_sge = 0;
        }
        Ok(())
    }

    /// `rs_update_credits`: gives credits when half the receive buffer
    /// or half the receive queue has been consumed.
    pub(super) fn update_credits(&mut self, state: u32) -> Res<()> {
        let due = self.rbuf_bytes_avail >= (self.rbuf_size >> 1)
            || (self.rseq_no.wrapping_sub(self.rseq_comp) as i16) >= 0;
        if due && self.ctrl_avail() && state & RS_CONNECTED != 0 {
            self.send_credits()?;
        }
        Ok(())
    }

    /// Writes `len` bytes of data (`payload`) into the current target SGE
    /// (`rs_write_data`).
    pub(super) fn write_data(&mut self, payload: Payload, len: u32) -> Res<()> {
        self.sseq_no = self.sseq_no.wrapping_add(1);
        self.sqe_avail -= 1;
        self.sbuf_bytes_avail -= len;
        let i = self.target_sge;
        let (addr, key, tlen) = self.target(i);
        self.tgt.set_u64(i * 16, addr + u64::from(len));
        self.tgt.set_u32(i * 16 + 12, tlen - len);
        if tlen == len {
            self.target_sge = (i + 1) % RS_SGL_SIZE;
        }
        self.data_sent = self.data_sent.wrapping_add(1);
        self.post(msg(RS_OP_DATA, len), payload, addr, key)
    }

    /// The peer's program may not have read all our data yet: its last
    /// credit update (`rs_send_credits`: its `rseq_no`, which `rrecv`
    /// counts up per message read, plus its queue size) came before.
    pub(super) fn unread_by_peer(&self) -> bool {
        self.data_sent != self.data_read
    }

    /// Largest transfer possible now, at most `want`.
    pub(super) fn xfer_limit(&self, want: u32) -> u32 {
        want.min(self.sbuf_bytes_avail)
            .min(self.target(self.target_sge).2)
    }

    /// Copies `data` into the send ring and gives the SGEs naming it.
    pub(super) fn stage(&mut self, data: &[u8]) -> SgeList {
        let left = (self.sbuf_size - self.sbuf_head) as usize;
        let lkey = Lkey::new(self.sbuf.lkey());
        let head = self.sbuf_head as usize;
        if data.len() <= left {
            self.sbuf.write(head, data);
            self.sbuf_head = if data.len() < left {
                (head + data.len()) as u32
            } else {
                0
            };
            [Sge {
                addr: self.sbuf.addr(head),
                length: data.len() as u32,
                lkey,
            }]
            .into_iter()
            .collect()
        } else {
            self.sbuf.write(head, &data[..left]);
            self.sbuf.write(0, &data[left..]);
            self.sbuf_head = (data.len() - left) as u32;
            [
                Sge {
                    addr: self.sbuf.addr(head),
                    length: left as u32,
                    lkey,
                },
                Sge {
                    addr: self.sbuf.addr(0),
                    length: (data.len() - left) as u32,
                    lkey,
                },
            ]
            .into_iter()
            .collect()
        }
    }

    /// Copies received data out, consuming it unless `peek`
    /// (`rrecv`'s copy loop). Returns the bytes copied.
    pub(super) fn read_out(&mut self, dst: &mut [u8], peek: bool) -> usize {
        let mut done = 0;
        let mut off = self.rbuf_offset;
        let mut idx = 0;
        while done < dst.len() {
            let Some(&avail) = self.rmsg.get(idx) else {
                break;
            };
            let want = dst.len() - done;
            let n = if (want as u32) < avail {
                if !peek {
                    self.rmsg[idx] -= want as u32;
                }
                want as u32
            } else {
                if peek {
                    idx += 1;
                } else {
                    self.rmsg.pop_front();
                    self.rseq_no = self.rseq_no.wrapping_add(1);
                }
                avail
            } as usize;
            let mut copied = 0;
            while copied < n {
                let end = (self.rbuf_size - off) as usize;
                let k = (n - copied).min(end);
                self.rbuf
                    .read(off as usize, &mut dst[done + copied..done + copied + k]);
                copied += k;
                off += k as u32;
                if off >= self.rbuf_size {
                    off = 0;
                }
            }
            if !peek {
                self.rbuf_bytes_avail += n as u32;
            }
            done += n;
        }
        if !peek {
            self.rbuf_offset = off;
        }
        done
    }

    /// Polls the CQ (`rs_poll_cq`): received messages, credits, control
    /// messages; completed sends give back their queue slot and bytes.
    /// Updates `state`; `Err` when receives cannot be posted again.
    pub(super) fn poll_cq(&mut self, state: &mut u32, err: &mut c_int) -> Res<()> {
        // SAFETY: the rsocket's CQ, destroyed only with the stream.
        let cq = unsafe { crate::verbs::engine_cq(self.cq)? };
        let mut v = Vec::new();
        let mut rcnt = 0;
        // The peer's DISCONNECT ends the polling (rsocket.c returns at
        // once; the rest of the batch polled with it is still counted).
        let mut ended = false;
        while !ended {
            v.clear();
            let _ = cq.poll(&mut v, 32);
            if v.is_empty() {
                break;
            }
            for c in &v {
                let ok = c.is_success();
                if c.wc.wr_id & WR_RECV != 0 {
                    if !ok {
                        continue;
                    }
                    rcnt += 1;
                    if !c.wc.wc_flags.contains(roce_core::WcFlags::WITH_IMM) {
                        continue;
                    }
                    let m = c.wc.imm_data;
                    let data = m & 0x1fff_ffff;
                    match m >> 29 {
                        RS_OP_SGL => {
                            self.sseq_comp = data as u16;
                            let read = self.sseq_comp.wrapping_sub(self.peer_credits);
                            // Never beyond what was sent (a confused peer).
                            if read.wrapping_sub(self.data_read)
                                <= self.data_sent.wrapping_sub(self.data_read)
                            {
                                self.data_read = read;
                            }
                        }
                        RS_OP_IOMAP_SGL | RS_OP_WRITE => {}
                        RS_OP_CTRL => {
                            if data == RS_CTRL_DISCONNECT {
                                *state = RS_DISCONNECTED;
                                ended = true;
                            } else if data == RS_CTRL_SHUTDOWN {
                                if *state & RS_WRITABLE != 0 {
                                    *state &= !RS_READABLE;
                                } else {
                                    *state = RS_DISCONNECTED;
                                    ended = true;
                                }
                            }
                        }
                        // A peer's message longer than the half of the
                        // ring it may fill is a protocol violation (it
                        // would also run the byte counts over).
                        _ if data > self.rbuf_size >> 1 => {
                            *state = RS_ERROR;
                            *err = libc::EPROTO;
                            ended = true;
                        }
                        _ => self.rmsg.push_back(data),
                    }
                } else {
                    let m = c.wc.wr_id as u32;
                    match m >> 29 {
                        RS_OP_SGL => self.ctrl_max_seqno = self.ctrl_max_seqno.wrapping_add(1),
                        RS_OP_CTRL => {
                            self.ctrl_max_seqno = self.ctrl_max_seqno.wrapping_add(1);
                            if m & 0x1fff_ffff == RS_CTRL_DISCONNECT {
                                *state = RS_DISCONNECTED;
                            }
                        }
                        RS_OP_IOMAP_SGL => {
                            self.sqe_avail += 1;
                            self.sbuf_bytes_avail += IOMAP_LEN;
                        }
                        _ => {
                            self.sqe_avail += 1;
                            self.sbuf_bytes_avail += m & 0x1fff_ffff;
                        }
                    }
                    if !ok && *state & RS_CONNECTED != 0 {
                        *state = RS_ERROR;
                        *err = libc::EIO;
                    }
                }
            }
        }
        if *state & RS_CONNECTED != 0 && !ended {
            for _ in 0..rcnt {
                if let Err(e) = self.post_recv() {
                    *state = RS_ERROR;
                    *err = e;
                    return Err(e);
                }
            }
        }
        Ok(())
    }
}
