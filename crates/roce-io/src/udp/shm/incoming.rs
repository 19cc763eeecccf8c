//! The receiving side of the same-host path: taking peers and their
//! hellos, reading their rings, and asking for doorbells before a sleep
//! (docs/shm.md, "Sleeping and waking", "What the receiver trusts").

use super::*;
use roce_wire::crc32::Code;
use roce_wire::icrc::{self, HeaderFields};

impl Shm {
    /// Whether the listener and connections are due a look even though
    /// receives keep finding datagrams.
    pub(in crate::udp) fn housekeeping_due(&self, now: Nanos) -> bool {
        now >= self.next_housekeeping
    }

    /// Looks at every descriptor without waiting: takes new peers and
    /// their hellos, notices peers that went, empties doorbells. Returns
    /// whether the UDP socket is readable.
    pub(in crate::udp) fn poll_events(&mut self, now: Nanos, stats: &mut UdpStats) -> bool {
        self.next_housekeeping = now.saturating_add(HOUSEKEEPING);
        let mut events = [EpollEvent::empty(); 32];
        let n = self
            .epoll
            .wait(&mut events, EpollTimeout::ZERO)
            .unwrap_or(0);
        let mut udp = false;
        for e in &events[..n] {
            match e.data() {
                // A flow socket is a receive socket too: receive again.
                TOKEN_UDP | TOKEN_FLOWS => udp = true,
                TOKEN_LISTENER => self.accept(now, false, stats),
                TOKEN_OWN => self.accept(now, true, stats),
                t if t >= FIRST_OUT_TOKEN => {
                    // An outgoing link's reader hung up.
                    let i = (t - FIRST_OUT_TOKEN) as usize;
                    let closed = self
                        .outgoing
                        .get(i)
                        .and_then(Option::as_ref)
                        .is_some_and(|o| link::closed(&o.conn));
                    if closed {
                        stats.shm_links_gone += 1;
                        self.close_out(now, i, true);
                    }
                }
                t => {
                    let i = ((t - FIRST_LINK_TOKEN) / 2) as usize;
                    if (t - FIRST_LINK_TOKEN).is_multiple_of(2) {
                        self.conn_ready(i, stats);
                    } else if let Some(Incoming {
                        state: InState::Active { doorbell, .. },
                        ..
                    }) = self.incoming.get(i).and_then(Option::as_ref)
                    {
                        let mut b = [0u8; 8];
                        let _ = nix::unistd::read(doorbell, &mut b);
                    }
                }
            }
        }
        // Connections that never said hello.
        for i in 0..self.incoming.len() {
            if let Some(Incoming {
                state: InState::Waiting { since },
                ..
            }) = &self.incoming[i]
            {
                if now.saturating_sub(*since) > HANDSHAKE {
                    stats.shm_refused += 1;
                    self.close_in(i);
                }
            }
        }
        udp || n == events.len()
    }

    /// Takes new connections on the address's listener, or (`own`) this
    /// process's.
    fn accept(&mut self, now: Nanos, own: bool, stats: &mut UdpStats) {
        let l = if own { &self.own } else { &self.listener };
        let Some(l) = l else { return };
        // A bounded number per look: a flood of connections (refused
        // ones included) cannot hold the receive path.
        for _ in 0..MAX_ACCEPTS {
            let Ok(Some(conn)) = link::accept_from(l) else {
                break;
            };
            let Some(i) = free_slot(&mut self.incoming) else {
                stats.shm_refused += 1;
                continue; // dropped: closed
            };
            if self
                .epoll
                .add(&conn, EpollEvent::new(EpollFlags::EPOLLIN, conn_token(i)))
                .is_err()
            {
                continue;
            }
            self.incoming[i] = Some(Incoming {
                conn,
                state: InState::Waiting { since: now },
            });
        }
    }

    /// Incoming link `i`'s connection is readable: its hello, or its end.
    fn conn_ready(&mut self, i: usize, stats: &mut UdpStats) {
        let Some(inc) = self.incoming.get_mut(i).and_then(Option::as_mut) else {
            return;
        };
        match &mut inc.state {
            InState::Active { closing, .. } => {
                // Nothing is sent after the hello: the peer closed.
                *closing = true;
                let _ = self.epoll.delete(&inc.conn);
            }
            InState::Waiting { .. } => match link::recv_hello(&inc.conn) {
                Ok(link::Heard::Nothing) => {}
                Ok(link::Heard::Hello(h)) => match self.take_ring(i, h) {
                    Ok(()) => stats.shm_links_in += 1,
                    Err(_) => {
                        stats.shm_refused += 1;
                        self.close_in(i);
                    }
                },
                Ok(link::Heard::Gone) | Err(_) => {
                    stats.shm_refused += 1;
                    self.close_in(i);
                }
            },
        }
    }

    /// Checks and maps the ring of a hello, and answers it.
    fn take_ring(&mut self, i: usize, h: link::Hello) -> io::Result<()> {
        let bad = |what: &str| io::Error::new(io::ErrorKind::InvalidData, what.to_string());
        if h.from.is_ipv6() != self.local.is_ipv6() {
            return Err(bad("the peer's address family differs"));
        }
        if !h.cap.is_power_of_two() || !(ring::MIN_CAP..=ring::MAX_CAP).contains(&h.cap) {
            return Err(bad("the ring's capacity is out of range"));
        }
        let mem = mem::SharedMem::open(h.ring, ring::CONTROL + h.cap)?;
        let ring = Consumer::open(mem)
            .map_err(|b| bad(b.0))?
            .with_own_source(h.from.ip());
        self.epoll.add(
            &h.doorbell,
            EpollEvent::new(EpollFlags::EPOLLIN, bell_token(i)),
        )?;
        let inc = self.incoming[i]
            .as_mut()
            .ok_or_else(|| bad("the link is gone"))?;
        link::answer(&inc.conn, link::ACCEPTED)?;
        inc.state = InState::Active {
            ring,
            doorbell: h.doorbell,
            closing: false,
        };
        Ok(())
    }

    fn close_in(&mut self, i: usize) {
        if let Some(inc) = self.incoming.get_mut(i).and_then(Option::take) {
            let _ = self.epoll.delete(&inc.conn);
            if let InState::Active { doorbell, .. } = &inc.state {
                let _ = self.epoll.delete(doorbell);
            }
        }
    }

    /// Fills `batch` from the rings with UDP payloads, each with the
    /// header its record tells (source address, port, TOS, the IPv4
    /// identification when the record's header is exact; [`RxHeader`],
    /// destination `local`) and its metadata from the record's flags,
    /// taking the rings in turn. A record whose source is not of this
    /// backend's family (`v6`: IPv6) breaks its link. A datagram that
    /// came without its ICRC gets it computed here unless the engine
    /// takes it unchecked (`trusted`, `UdpConfig::shm_icrc_trusted`, and
    /// the datagram intact).
    pub(in crate::udp) fn recv(
        &mut self,
        batch: &mut PacketBatch,
        v6: bool,
        trusted: bool,
        stats: &mut UdpStats,
    ) {
        let n = self.incoming.len();
        if n == 0 {
            return;
        }
        let dst = self.local.ip();
        let piece = self.piece;
        let start = self.rx_next % n;
        self.rx_next = start + 1;
        for k in 0..n {
            let i = (start + k) % n;
            let Some(Incoming {
                state: InState::Active { ring, closing, .. },
                ..
            }) = self.incoming[i].as_mut()
            else {
                continue;
            };
            let mut drop_link = false;
            while !batch.is_full() {
                let r = match ring.next() {
                    Ok(Some(r)) => r,
                    Ok(None) => {
                        drop_link = *closing;
                        break;
                    }
                    Err(_) => {
                        stats.shm_broken += 1;
                        drop_link = true;
                        break;
                    }
                };
                if r.meta.src.is_ipv6() != v6 {
                    stats.shm_broken += 1;
                    drop_link = true;
                    break;
                }
                // The header is the sender's engine's to the bit (IPv4 ID
                // and DF, the record's port and TOS), and so are the
                // bytes of a datagram not forwarded: the sender's engine
                // computed its ICRC over them, and the receiving engine
                // may take it as such (`RxMeta::host_intact`; a fault
                // injector that changes it takes that away, so damage
                // done between the engines is caught as on a wire). A
                // forwarded datagram came off a wire: its ICRC is
                // checked, its header as exact as its first receiver's
                // was (an IPv4 one from a UDP socket has no
                // identification).
                let h = RxHeader::new(SocketAddr::new(r.meta.src, r.meta.sport), dst, r.meta.tos)
                    .with_ipv4_id(r.meta.exact.then_some(r.meta.ipv4_id));
                let intact = r.meta.intact && !r.meta.forwarded;
                let meta = RxMeta::default()
                    .with_forwarded(r.meta.forwarded)
                    .with_host_intact(intact);
                // Without its ICRC (the sender's engine left it out for
                // this ring): computed over the bytes as copied, unless
                // the engine will not look at it. A datagram that is not
                // intact gets it too; a sender that lies about either
                // flag only makes its own datagram fail the check.
                let fill = (r.meta.no_icrc && !(trusted && intact)).then_some(HeaderFields {
                    src: r.meta.src,
                    dst,
                    src_port: r.meta.sport,
                    ipv4_id: r.meta.ipv4_id,
                    dont_frag: true,
                });
                let mut took = false;
                let pushed = batch.push_payload_with(h, meta, |slot| {
                    if r.len > slot.len() {
                        return 0;
                    }
                    ring.take(&r, &mut slot[..r.len], piece);
                    took = true;
                    if let Some(f) = &fill {
                        // A payload too short for an ICRC is left as it
                        // is: the engine finds it malformed.
                        let _ = icrc::fill_udp(Code::Fast, f, &mut slot[..r.len]);
                    }
                    r.len
                });
                if pushed {
                    stats.shm_rx_no_icrc += u64::from(r.meta.no_icrc);
                    stats.shm_rx_icrc_filled += u64::from(fill.is_some());
                    stats.shm_rx_datagrams += 1;
                    stats.shm_rx_bytes += r.len as u64;
                    stats.shm_rx_forwarded += u64::from(r.meta.forwarded);
                } else {
                    if !took {
                        ring.skip(&r);
                    }
                    stats.rx_too_big += 1;
                }
            }
            ring.release();
            if drop_link {
                self.close_in(i);
            }
            if batch.is_full() {
                break;
            }
        }
    }

    /// Whether some ring is being read (the UDP socket then need not be
    /// probed at every receive).
    pub(in crate::udp) fn has_incoming(&self) -> bool {
        self.incoming
            .iter()
            .flatten()
            .any(|i| matches!(i.state, InState::Active { .. }))
    }

    /// Before the caller sleeps: asks every ring's producer for a
    /// doorbell. True when a datagram arrived meanwhile (receive again,
    /// do not sleep).
    pub(in crate::udp) fn arm(&self) -> bool {
        let mut any = false;
        for inc in self.incoming.iter().flatten() {
            if let InState::Active { ring, .. } = &inc.state {
                any |= ring.arm();
            }
        }
        any
    }
}
