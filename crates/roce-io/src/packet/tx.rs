//! The send half of [`PacketBackend`]: neighbour resolution, the Ethernet
//! header (802.1Q PCP from the DSCP) and `sendmmsg`.

use std::io::{self, IoSlice};
use std::net::IpAddr;
use std::os::fd::AsFd;

use roce_wire::ethernet::ethertype;
use roce_wire::{EthernetRepr, MacAddr, VlanTag};

use super::{PacketBackend, NEIGH_RETRY, NEIGH_TTL};
use crate::backend::{Nanos, PacketBatch};
use crate::neigh;
use crate::sys::{self, TxMsg, MAX_MMSG};

#[derive(Clone, Copy, Debug)]
pub(super) enum Neigh {
    Known { mac: MacAddr, until: Nanos },
    Static(MacAddr),
    Unknown { retry_at: Nanos },
}

impl PacketBackend {
    /// The destination MAC for `ip`, reading the neighbour table when
    /// needed and starting a resolution when it has none.
    pub(super) fn resolve(&mut self, now: Nanos, ip: IpAddr) -> Option<MacAddr> {
        match self.neigh.get(&ip) {
            Some(Neigh::Static(mac)) => return Some(*mac),
            Some(Neigh::Known { mac, until }) if now < *until => return Some(*mac),
            Some(Neigh::Unknown { retry_at }) if now < *retry_at => return None,
            _ => {}
        }
        self.stats.neigh_lookups += 1;
        match neigh::lookup(self.ifindex, ip) {
            Ok(Some(mac)) => {
                self.neigh.insert(
                    ip,
                    Neigh::Known {
                        mac,
                        until: now.saturating_add(NEIGH_TTL),
                    },
                );
                Some(mac)
            }
            _ => {
                if neigh::solicit(&self.cfg.ifname, ip).is_ok() {
                    self.stats.neigh_solicits += 1;
                }
                self.neigh.insert(
                    ip,
                    Neigh::Unknown {
                        retry_at: now.saturating_add(NEIGH_RETRY),
                    },
                );
                None
            }
        }
    }

    /// Ethernet header for a datagram with `dscp` to `dst`; returns its
    /// length.
    pub(super) fn header(&self, dst: MacAddr, dscp: u8, v6: bool, out: &mut [u8; 18]) -> usize {
        let eth = EthernetRepr {
            dst,
            src: self.mac,
            vlan: self.cfg.vlan.map(|vid| VlanTag {
                pcp: self.cfg.dscp_to_pcp[usize::from(dscp & 63)],
                dei: false,
                vid,
            }),
            ethertype: if v6 { ethertype::IPV6 } else { ethertype::IPV4 },
        };
        match eth.emit(out) {
            Ok(()) => eth.header_len(),
            Err(_) => 0,
        }
    }

    pub(super) fn send_frames(&mut self, now: Nanos, batch: &PacketBatch) -> io::Result<usize> {
        let mut i = 0;
        while i < batch.len() {
            // Plan up to MAX_MMSG frames: headers first, then iovecs.
            self.headers.clear();
            let mut plan: Vec<(usize, usize)> = Vec::with_capacity(MAX_MMSG);
            while i < batch.len() && plan.len() < MAX_MMSG {
                let d = batch.get(i);
                i += 1;
                let Some(t) = batch.transmit(i - 1).filter(|t| t.size == d.len()) else {
                    self.stats.tx_malformed += 1;
                    continue;
                };
                let Some(dst) = self.resolve(now, t.destination.ip()) else {
                    self.stats.tx_unresolved += 1;
                    continue;
                };
                let mut h = [0u8; 18];
                let n = self.header(dst, t.dscp, t.is_ipv6(), &mut h);
                self.headers.push(h);
                plan.push((i - 1, n));
            }
            let mut iovs: Vec<IoSlice<'_>> = Vec::with_capacity(2 * plan.len());
            let mut msgs: Vec<TxMsg> = Vec::with_capacity(plan.len());
            for (k, &(idx, n)) in plan.iter().enumerate() {
                msgs.push(TxMsg {
                    dst: None,
                    iov_start: iovs.len(),
                    iov_len: 2,
                    tos: None,
                    gso_size: 0,
                });
                iovs.push(IoSlice::new(&self.headers[k][..n]));
                iovs.push(IoSlice::new(batch.get(idx)));
            }
            let mut done = 0;
            while done < msgs.len() {
                match sys::sendmmsg(
                    self.sock.as_fd(),
                    &mut self.mmsg,
                    false,
                    &msgs[done..],
                    &iovs,
                ) {
                    Ok(n) => {
                        for &(idx, h) in &plan[done..done + n] {
                            self.stats.tx_frames += 1;
                            self.stats.tx_bytes += (h + batch.get(idx).len()) as u64;
                        }
                        done += n;
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                        // Everything before the first unsent frame was
                        // taken (dropped datagrams included).
                        return Ok(plan[done].0);
                    }
                    Err(_) => {
                        self.stats.tx_errors += 1;
                        done += 1;
                    }
                }
            }
        }
        Ok(batch.len())
    }
}
