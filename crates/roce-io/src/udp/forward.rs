//! Which way each datagram of a [`UdpBackend`] goes (UDP, a same-host
//! ring, or this backend's own receive path), and, sharing the address
//! (`UdpConfig::share`), forwarding what the kernel gave this process
//! but another owns (docs/host.md, "What is wired"; docs/shm.md,
//! "Forwarding").

use std::net::IpAddr;

use roce_wire::{Owner, RxHeader, Transmit};

use super::share::Lookup;
use super::shm::{InRing, Made, ProcRoute, RecMeta};
use super::UdpBackend;
use crate::backend::{BuildInPlace, Forwarded, InPlace, Nanos, RxMeta};

/// The way the last datagram sent on a ring went, through a table or
/// (not sharing) by address: while the link is active (and the table's
/// generation stays), the next one to the same destination (and owner)
/// takes it without a lookup (a ping-pong sends every message to one
/// owner).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct LastHop {
    dst: std::net::SocketAddr,
    owner: Owner,
    generation: u64,
    link: usize,
    serial: u64,
}

/// What [`UdpBackend::build_in_place`] had built in the ring.
enum Built {
    /// A datagram that stays there (its ICRC left out or not).
    InRing { no_icrc: bool },
    /// One for elsewhere, copied out.
    Spilled,
    /// One from an address that is not this backend's.
    NotOwnSource,
    /// None.
    Nothing,
}

/// Where one outgoing datagram goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Hop {
    /// By the kernel's UDP stack.
    Udp,
    /// Into same-host link `link`; `by_qpn`: found through a host table.
    Ring { link: usize, by_qpn: bool },
    /// To a QPN of this very backend: its own receive queue.
    Local,
}

impl UdpBackend {
    /// The way a datagram sent as `t` takes. Sharing, a destination with
    /// a host table goes to the process owning `t.dest_qpn` (this backend
    /// included), QP1 and QPNs without an owner by UDP; a destination
    /// without one, and every destination when not sharing, as the
    /// same-host path by address says (docs/shm.md).
    pub(super) fn hop(&mut self, now: Nanos, t: &Transmit) -> Hop {
        let dst = self.wire_dst(t);
        let Some(shm) = self.shm.as_mut() else {
            return Hop::Udp;
        };
        let owner = t.dest_owner();
        // Not sharing, a link by address stays the way while it is active:
        // generation 0 and any owner.
        let sharing = self.share.is_some();
        let generation = self
            .share
            .as_ref()
            .map_or(Some(0), |s| s.generation_at(dst));
        if let Some(last) = self.last_hop {
            if last.dst == dst
                && (!sharing || last.owner == owner)
                && Some(last.generation) == generation
            {
                if let Some(link) = shm.active_link(now, last.link, last.serial, &mut self.stats) {
                    return Hop::Ring {
                        link,
                        by_qpn: sharing,
                    };
                }
            }
        }
        self.last_hop = None;
        if let Some(share) = self.share.as_mut() {
            match share.lookup(now, dst, owner) {
                Lookup::NoTable => {}
                Lookup::NoOwner => return Hop::Udp,
                Lookup::Own => return Hop::Local,
                Lookup::Slot { slot, name } => {
                    return match shm.route_proc(now, &name, &mut self.stats) {
                        // A link still being set up takes the datagram
                        // too (its owner reads the ring once it accepts):
                        // by UDP, the kernel could hand it to any process
                        // of the address, one that is exiting among them,
                        // and a UC or UD datagram lost there is lost.
                        ProcRoute::Link(link) => {
                            self.last_hop = generation.zip(shm.link_serial(link)).map(
                                |(generation, serial)| LastHop {
                                    dst,
                                    owner,
                                    generation,
                                    link,
                                    serial,
                                },
                            );
                            Hop::Ring { link, by_qpn: true }
                        }
                        ProcRoute::Pending(link) => Hop::Ring { link, by_qpn: true },
                        ProcRoute::Udp => Hop::Udp,
                        ProcRoute::Gone => {
                            if share.reap(dst, slot) {
                                self.stats.shm_reaped += 1;
                            }
                            Hop::Udp
                        }
                    };
                }
            }
        }
        match shm.route(now, dst, &mut self.stats) {
            Some(link) => {
                if !sharing {
                    self.last_hop = shm.link_serial(link).map(|serial| LastHop {
                        dst,
                        owner,
                        generation: 0,
                        link,
                        serial,
                    });
                }
                Hop::Ring {
                    link,
                    by_qpn: false,
                }
            }
            None => Hop::Udp,
        }
    }

    /// Sends datagram `d` (sent as `t`; `made`: as its engine made it,
    /// [`crate::PacketBatch::intact`], and without its ICRC,
    /// [`crate::PacketBatch::icrc_present`]) the way `hop` says, when that
    /// is not UDP; a datagram without its ICRC whose way is not a ring
    /// (any more) is dropped.
    pub(super) fn send_by(&mut self, now: Nanos, d: &[u8], t: &Transmit, hop: Hop, made: Made) {
        if made.no_icrc && !matches!(hop, Hop::Ring { .. }) {
            self.stats.shm_tx_no_icrc_dropped += 1;
            return;
        }
        match hop {
            Hop::Udp => {}
            Hop::Ring { link, by_qpn } => {
                let Some(shm) = self.shm.as_mut() else { return };
                let payload = &d[t.header_len()..];
                let (sport, tos) = (t.src.port(), t.tos());
                let own = shm.push_own(now, link, sport, tos, made, payload, &mut self.stats);
                self.stats.shm_tx_no_icrc += u64::from(own && made.no_icrc);
                if own && by_qpn {
                    self.stats.shm_qpn_routes += 1;
                }
            }
            Hop::Local => {
                let Some(share) = self.share.as_mut() else {
                    return;
                };
                // The engine's own header, exact.
                let h =
                    RxHeader::new(t.src, t.destination.ip(), t.tos()).with_ipv4_id(Some(t.ipv4_id));
                if share.push_local(h, &d[t.header_len()..]) {
                    self.stats.shm_local += 1;
                } else {
                    self.stats.shm_tx_full_drops += 1;
                }
            }
        }
    }

    /// [`Backend::transmit_in_place`](crate::Backend::transmit_in_place)
    /// of the UDP backend: into the ring of the last way taken, while
    /// its link is active and the host table unchanged (as [`hop`](Self::hop)
    /// would find it), the datagram built right after the record's
    /// header. One for another destination (or owner, sharing) is copied
    /// out and sent as `send` sends it.
    pub(super) fn build_in_place(&mut self, now: Nanos, build: &mut BuildInPlace<'_>) -> InPlace {
        let Some(last) = self.last_hop else {
            return InPlace::Unavailable;
        };
        let sharing = self.share.is_some();
        let generation = self
            .share
            .as_ref()
            .map_or(Some(0), |s| s.generation_at(last.dst));
        if generation != Some(last.generation) {
            return InPlace::Unavailable;
        }
        let Some(shm) = self.shm.as_mut() else {
            return InPlace::Unavailable;
        };
        let Some(link) = shm.active_link(now, last.link, last.serial, &mut self.stats) else {
            return InPlace::Unavailable;
        };
        let max = self.cfg.max_datagram.min(usize::from(u16::MAX));
        // What stays here: to the last destination (and owner), from
        // this backend's address, of its family, whole.
        let (local, v6, rport) = (self.cfg.local, self.v6, self.cfg.remote_port);
        let mut here = |t: &Transmit| {
            let dst = match t.destination.port() {
                roce_wire::ROCE_V2_PORT => std::net::SocketAddr::new(t.destination.ip(), rport),
                _ => t.destination,
            };
            dst == last.dst
                && (!sharing || t.dest_owner() == last.owner)
                && t.src.ip() == local
                && t.is_ipv6() == v6
                && t.size <= max
                && t.size >= t.header_len() + super::tx::MIN_TRANSPORT
        };
        let mut spill = self.spill.take();
        let built = shm.build_in(now, link, max, &mut self.stats, |room| {
            let Some((t, icrc)) = build(room, &mut here) else {
                return (Built::Nothing, None);
            };
            if here(&t) {
                let made = Made {
                    intact: true,
                    no_icrc: !icrc,
                };
                let c = InRing {
                    sport: t.src.port(),
                    tos: t.tos(),
                    made,
                    len: t.size,
                    payload_len: t.size - t.header_len(),
                };
                return (Built::InRing { no_icrc: !icrc }, Some(c));
            }
            // Not from this backend's address (a GID a UDP set has not
            // bound yet, which it drops too): dropped.
            if t.src.ip() != local {
                return (Built::NotOwnSource, None);
            }
            // Elsewhere: copied out (the room lapses), sent below.
            let b = spill.get_or_insert_with(|| crate::PacketBatch::new(1, max));
            b.clear();
            let size = t.size.min(room.len()).min(b.slot_size());
            b.push_transmit_icrc_with(|slot| {
                slot[..size].copy_from_slice(&room[..size]);
                Some((Transmit { size, ..t }, icrc))
            });
            (Built::Spilled, None)
        });
        let result = match built {
            None => InPlace::Unavailable,
            Some((Built::InRing { no_icrc }, ring)) => {
                if ring {
                    self.stats.shm_tx_no_icrc += u64::from(no_icrc);
                    self.stats.shm_tx_in_place += 1;
                    self.stats.shm_qpn_routes += u64::from(sharing);
                }
                InPlace::Taken
            }
            Some((Built::Spilled, _)) => {
                if let Some(b) = spill.as_ref().filter(|b| !b.is_empty()) {
                    self.send_udp_and_rings(now, b);
                }
                InPlace::Taken
            }
            Some((Built::NotOwnSource, _)) => {
                self.stats.tx_not_own_source += 1;
                InPlace::Taken
            }
            Some((Built::Nothing, _)) => InPlace::Nothing,
        };
        if let Some(b) = spill.as_mut() {
            b.clear();
        }
        self.spill = spill;
        result
    }

    /// [`Backend::forward`](crate::Backend::forward) of the UDP backend.
    pub(super) fn forward_payload(
        &mut self,
        now: Nanos,
        header: RxHeader,
        payload: &[u8],
        meta: RxMeta,
        owner: Owner,
    ) -> Forwarded {
        let at = self.local_addr();
        let (Some(share), Some(shm)) = (self.share.as_mut(), self.shm.as_mut()) else {
            return Forwarded::Unshared;
        };
        let mut sent = false;
        let mut unreachable = false;
        // The original sender, and that it was sent to this address.
        let h = Some(header).filter(|h| !meta.forwarded && h.dst == self.cfg.local);
        if let (Some(h), Some(flows)) = (&h, self.flows.as_mut()) {
            // Another process owns what comes from this source: it is
            // not to be steered here (docs/host.md, "Steering").
            flows.forwarded_onward(h.src, &mut self.stats);
        }
        if let Some(h) = h {
            if let Lookup::Slot { slot, name } = share.lookup(now, at, owner) {
                let route = shm.route_proc(now, &name, &mut self.stats);
                if let ProcRoute::Link(link) | ProcRoute::Pending(link) = route {
                    let rec = RecMeta {
                        src: h.src.ip(),
                        sport: h.src.port(),
                        tos: h.tos,
                        ipv4_id: h.ipv4_id.unwrap_or(0),
                        forwarded: true,
                        exact: h.exact(),
                        intact: false,
                        no_icrc: false,
                    };
                    sent = shm.push(now, link, &rec, payload, &mut self.stats);
                    shm.flush(&mut self.stats);
                    unreachable = !sent;
                } else if route == ProcRoute::Gone {
                    if share.reap(at, slot) {
                        self.stats.shm_reaped += 1;
                    }
                } else {
                    unreachable = true;
                }
            }
        }
        if sent {
            self.stats.shm_forwarded += 1;
            Forwarded::Sent
        } else if unreachable {
            self.stats.shm_forward_unreachable += 1;
            Forwarded::Unreachable
        } else {
            self.stats.shm_forward_no_owner += 1;
            Forwarded::NoOwner
        }
    }

    /// [`Backend::claim`](crate::Backend::claim) of the UDP backend.
    pub(super) fn claim_owner(&mut self, local: IpAddr, owner: Owner) -> std::io::Result<bool> {
        match &self.share {
            Some(s) if local == self.cfg.local => s.claim(owner),
            Some(_) => Err(std::io::Error::new(
                std::io::ErrorKind::AddrNotAvailable,
                format!("{local} is not this backend's address"),
            )),
            None => Ok(true),
        }
    }

    /// [`Backend::release`](crate::Backend::release) of the UDP backend.
    pub(super) fn release_owner(&mut self, local: IpAddr, owner: Owner) {
        if let Some(s) = &self.share {
            if local == self.cfg.local {
                s.release(owner);
            }
        }
    }
}
