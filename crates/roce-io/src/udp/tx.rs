//! The transmit half of [`UdpBackend`]: planning a batch into `sendmmsg`
//! messages (GSO runs of equal segments, ICRCs moved to the IPv4 ID the
//! kernel will write) and sending them.

use std::io::{self, IoSlice};
use std::net::SocketAddr;
use std::os::fd::AsFd;

use roce_wire::{Transmit, ROCE_V2_PORT};
use smallvec::SmallVec;
use socket2::SockAddr;

use super::hdr;
use super::{UdpBackend, GSO_MAX_BYTES, GSO_MAX_SEGMENTS, TX_CHUNK};

/// The shortest UDP payload a RoCE datagram has: a BTH and an ICRC.
pub(super) const MIN_TRANSPORT: usize = roce_wire::bth::HEADER_LEN + roce_wire::icrc::LEN;
use crate::backend::PacketBatch;
use crate::sys::{self, TxMsg, MAX_MMSG};

/// Which socket a run of datagrams leaves from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Via {
    /// The per-port socket of this source port.
    Port(u16),
    /// The receive socket (source port rewritten).
    Main,
}

/// One datagram of a planned chunk.
#[derive(Clone, Copy, Debug)]
pub(super) struct Seg {
    idx: usize,
    payload_at: usize,
    /// The source port the engine wrote.
    sport: u16,
    icrc: Option<[u8; 4]>,
}

/// One planned message: `segs[start..end]`, GSO when more than one.
#[derive(Clone, Copy, Debug)]
pub(super) struct Planned {
    dst: SocketAddr,
    tos: u8,
    start: usize,
    end: usize,
    seg_size: usize,
}

/// Outcome of sending one planned chunk.
pub(super) enum Sent {
    /// All messages done (sent or dropped).
    All,
    /// The socket buffer is full: datagrams before batch index `.0` were
    /// taken.
    WouldBlock(usize),
    /// A GSO send failed; datagrams before batch index `.0` were taken.
    GsoFailed(usize),
}

impl UdpBackend {
    pub(super) fn wire_dst(&self, t: &Transmit) -> SocketAddr {
        match t.destination.port() {
            ROCE_V2_PORT => SocketAddr::new(t.destination.ip(), self.cfg.remote_port),
            _ => t.destination,
        }
    }

    /// The [`Transmit`] of datagram `i`, if this backend can send it: a
    /// RoCE datagram of the socket's family whose length agrees.
    pub(super) fn sendable(&self, batch: &PacketBatch, i: usize) -> Option<Transmit> {
        let t = batch.transmit(i)?;
        let ok = t.is_ipv6() == self.v6
            && t.src.is_ipv6() == self.v6
            && t.size == batch.get(i).len()
            && t.size >= t.header_len() + MIN_TRANSPORT;
        ok.then_some(t)
    }

    /// Plans the chunk of datagrams from `first` that share `t0`'s source
    /// port and leave `via`, at most `limit` of them; fills `self.segs` /
    /// `self.plan` and returns the batch index after the chunk.
    pub(super) fn plan_chunk(
        &mut self,
        now: crate::Nanos,
        batch: &PacketBatch,
        first: usize,
        t0: &Transmit,
        via: Via,
        limit: usize,
    ) -> usize {
        self.segs.clear();
        self.plan.clear();
        let sport = match via {
            Via::Port(p) => p,
            Via::Main => self.cfg.port,
        };
        let gso = self.offloads.gso;
        let mut i = first;
        while i < batch.len() && self.segs.len() < limit.min(TX_CHUNK) {
            let d = batch.get(i);
            let t = if i == first {
                *t0
            } else {
                match self.sendable(batch, i) {
                    Some(t)
                        if t.src.port() == t0.src.port()
                            && batch.icrc_present(i)
                            && self.hop(now, &t) == super::Hop::Udp =>
                    {
                        t
                    }
                    _ => break,
                }
            };
            let dst = self.wire_dst(&t);
            let tos = t.tos();
            let payload_at = t.header_len();
            let size = d.len() - payload_at;
            // Join the open message as a GSO segment when it fits.
            let join = gso
                && self.plan.last().is_some_and(|m| {
                    let n = m.end - m.start;
                    let last_size =
                        batch.get(self.segs[m.end - 1].idx).len() - self.segs[m.end - 1].payload_at;
                    m.dst == dst
                        && m.tos == tos
                        && size <= m.seg_size
                        && last_size == m.seg_size
                        && n < GSO_MAX_SEGMENTS
                        && (n * m.seg_size + size) <= GSO_MAX_BYTES
                });
            if !join {
                if self.plan.len() == MAX_MMSG {
                    break;
                }
                let start = self.segs.len();
                self.plan.push(Planned {
                    dst,
                    tos,
                    start,
                    end: start,
                    seg_size: size,
                });
            }
            let m = self.plan.last_mut().expect("a message is open");
            // The kernel writes its own source address and port and (a GSO
            // send numbering its segments) IPv4 ID: move the engine's ICRC
            // to them where they differ.
            let wire = hdr::wire_fields(self.cfg.local, sport, m.end - m.start);
            let icrc = hdr::icrc_for_wire(&mut self.rebaser, d, &t, &wire);
            self.segs.push(Seg {
                idx: i,
                payload_at,
                sport: t.src.port(),
                icrc,
            });
            m.end += 1;
            i += 1;
        }
        i
    }

    /// Sends the planned chunk on `fd`.
    pub(super) fn send_chunk(&mut self, batch: &PacketBatch, via: Via) -> Sent {
        let fd = match via {
            Via::Port(p) => self.ports.get(p),
            Via::Main => None,
        };
        let fd = fd.unwrap_or(self.sock.as_fd());
        // The iovecs borrow the batch, so their list is made per call, on
        // the stack: a chunk has at most TX_CHUNK datagrams of at most two
        // iovecs each (8 KiB), so the send never allocates.
        let mut iovs: SmallVec<[IoSlice<'_>; 2 * TX_CHUNK]> = SmallVec::new();
        let mut msgs = std::mem::take(&mut self.tx_msgs);
        msgs.clear();
        for m in &self.plan {
            let iov_start = iovs.len();
            for s in &self.segs[m.start..m.end] {
                let d = batch.get(s.idx);
                match &s.icrc {
                    None => iovs.push(IoSlice::new(&d[s.payload_at..])),
                    Some(c) => {
                        iovs.push(IoSlice::new(&d[s.payload_at..d.len() - 4]));
                        iovs.push(IoSlice::new(c));
                    }
                }
            }
            let n = m.end - m.start;
            msgs.push(TxMsg {
                dst: Some(SockAddr::from(m.dst)),
                iov_start,
                iov_len: iovs.len() - iov_start,
                tos: Some(m.tos),
                gso_size: if n > 1 { m.seg_size as u16 } else { 0 },
            });
        }
        let stats = &mut self.stats;
        let mut done = 0;
        let mut result = Sent::All;
        while done < msgs.len() {
            match sys::sendmmsg(fd, &mut self.mmsg, self.v6, &msgs[done..], &iovs) {
                Ok(n) => {
                    stats.tx_syscalls += 1;
                    for m in &self.plan[done..done + n] {
                        let k = (m.end - m.start) as u64;
                        stats.tx_datagrams += k;
                        for s in &self.segs[m.start..m.end] {
                            let d = batch.get(s.idx);
                            stats.tx_bytes += (d.len() - s.payload_at) as u64;
                            stats.tx_icrc_recomputed += u64::from(s.icrc.is_some());
                            // Through the main socket, the source port the
                            // engine wrote (its UDP header) is rewritten
                            // unless it is the main socket's.
                            if via == Via::Main {
                                stats.tx_sport_rewritten += u64::from(s.sport != self.cfg.port);
                            }
                        }
                        if k > 1 {
                            stats.tx_gso_sends += 1;
                            stats.tx_gso_datagrams += k;
                        }
                    }
                    done += n;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    result = Sent::WouldBlock(self.segs[self.plan[done].start].idx);
                    break;
                }
                // Whether GSO or this message was refused, a probe of one
                // datagram tells (`UdpBackend::send`).
                Err(_) if msgs[done].gso_size != 0 => {
                    result = Sent::GsoFailed(self.segs[self.plan[done].start].idx);
                    break;
                }
                Err(_) => {
                    stats.tx_errors += (self.plan[done].end - self.plan[done].start) as u64;
                    done += 1;
                }
            }
        }
        self.tx_msgs = msgs;
        result
    }
}
