//! [`UdpSet`]: a [`UdpBackend`] per local address, as one backend.

use std::io;
use std::net::IpAddr;
use std::os::fd::{AsFd, BorrowedFd};

use nix::sys::epoll::{Epoll, EpollCreateFlags, EpollEvent, EpollFlags};

use roce_wire::{Owner, RxHeader};

use super::{UdpBackend, UdpConfig};
use crate::backend::{Backend, Forwarded, Nanos, PacketBatch, RxMeta};

/// RoCE v2 over UDP on several local addresses (a device's GID table):
/// one [`UdpBackend`] per address, each with its own receive socket on
/// the RoCE port, the first bound when the set is made and the others
/// when [`add_local_addr`](Backend::add_local_addr) asks for them (a
/// program that never sends from an address does not hold its port).
///
/// A datagram leaves through the backend of its source address (the
/// kernel writes that address, which the ICRC covers), so a batch whose
/// datagrams come from several addresses is sent run by run, each run
/// copied into a batch of its own; a batch from one address (the common
/// case, and the only one with one address) goes through untouched.
/// Receiving takes the backends in turn. [`wait_fd`](Backend::wait_fd)
/// is an epoll descriptor over all of their sockets, the same from the
/// start (a progress engine takes it once), so a single address is
/// better served by a plain [`UdpBackend`]. A datagram from an address of none of them is dropped
/// and counted (`udp_set_tx_no_source`).
pub struct UdpSet {
    template: UdpConfig,
    parts: Vec<UdpBackend>,
    addrs: Vec<IpAddr>,
    epoll: Epoll,
    /// The backend the next receive starts with.
    next_rx: usize,
    /// Runs of a mixed batch, copied (made at the first one).
    run: Option<PacketBatch>,
    no_source: u64,
}

impl std::fmt::Debug for UdpSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UdpSet")
            .field("addrs", &self.addrs)
            .finish_non_exhaustive()
    }
}

impl UdpSet {
    /// Binds the first backend ([`UdpBackend::bind`]); the others take
    /// `cfg` with their own address.
    pub fn bind(cfg: UdpConfig) -> io::Result<UdpSet> {
        let first = UdpBackend::bind(cfg.clone())?;
        let epoll = Epoll::new(EpollCreateFlags::EPOLL_CLOEXEC)?;
        epoll.add(
            first.wait_descriptor(),
            EpollEvent::new(EpollFlags::EPOLLIN, 0),
        )?;
        Ok(UdpSet {
            addrs: vec![first.local_addr().ip()],
            template: cfg,
            parts: vec![first],
            epoll,
            next_rx: 0,
            run: None,
            no_source: 0,
        })
    }

    /// The backends, in the order their addresses were added.
    pub fn parts(&self) -> &[UdpBackend] {
        &self.parts
    }

    fn part_of(&self, src: IpAddr) -> Option<usize> {
        self.addrs.iter().position(|&a| a == src)
    }

    /// Sends `batch[from..to]` (one source address, backend `k`): the
    /// number taken.
    fn send_run(
        &mut self,
        now: Nanos,
        batch: &PacketBatch,
        k: usize,
        from: usize,
        to: usize,
    ) -> io::Result<usize> {
        if from == 0 && to == batch.len() {
            return self.parts[k].send(now, batch);
        }
        let fits = self
            .run
            .as_ref()
            .is_some_and(|r| r.capacity() >= to - from && r.slot_size() >= batch.slot_size());
        if !fits {
            self.run = Some(PacketBatch::new(batch.capacity(), batch.slot_size()));
        }
        let Some(run) = self.run.as_mut() else {
            return Ok(0);
        };
        run.clear();
        for i in from..to {
            run.push(batch.get(i));
            if let Some(t) = batch.transmit(i) {
                run.set_transmit(run.len() - 1, t);
            }
        }
        self.parts[k].send(now, run)
    }
}

impl Backend for UdpSet {
    fn local_addrs(&self) -> &[IpAddr] {
        &self.addrs
    }

    fn transmit_in_place(
        &mut self,
        now: Nanos,
        build: &mut crate::backend::BuildInPlace<'_>,
    ) -> crate::backend::InPlace {
        // One address bound: its backend's ring, as for `needs_icrc`;
        // a datagram from a GID not bound yet is dropped there, as
        // `send` drops it here (`udp_set_tx_no_source`).
        match self.parts.as_mut_slice() {
            [one] => one.transmit_in_place(now, build),
            _ => crate::backend::InPlace::Unavailable,
        }
    }

    fn needs_icrc(&mut self, now: Nanos, t: &roce_wire::Transmit) -> bool {
        // With several addresses a run is copied into a batch of its own,
        // which does not keep that a datagram comes without its ICRC.
        self.parts.len() != 1 || self.parts[0].needs_icrc(now, t)
    }

    fn send(&mut self, now: Nanos, batch: &PacketBatch) -> io::Result<usize> {
        if self.parts.len() == 1 {
            return self.parts[0].send(now, batch);
        }
        let src = |i: usize| batch.transmit(i).map(|t| t.src.ip());
        let mut i = 0;
        while i < batch.len() {
            let s = src(i);
            let mut end = i + 1;
            while end < batch.len() && src(end) == s {
                end += 1;
            }
            let Some(k) = s.and_then(|a| self.part_of(a)) else {
                // Taken and dropped, as a backend does with what it
                // cannot deliver.
                self.no_source += (end - i) as u64;
                i = end;
                continue;
            };
            let n = self.send_run(now, batch, k, i, end)?;
            i += n;
            if i < end {
                break;
            }
        }
        Ok(i)
    }

    fn recv(&mut self, now: Nanos, batch: &mut PacketBatch) -> io::Result<usize> {
        let n = self.parts.len();
        for step in 0..n {
            let k = (self.next_rx + step) % n;
            let got = self.parts[k].recv(now, batch)?;
            if got > 0 {
                self.next_rx = (k + 1) % n;
                return Ok(got);
            }
        }
        batch.clear();
        Ok(0)
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        let mut out: Vec<(&'static str, u64)> = Vec::new();
        for p in &self.parts {
            for (name, v) in p.counters() {
                match out.iter_mut().find(|(n, _)| *n == name) {
                    Some(e) => e.1 += v,
                    None => out.push((name, v)),
                }
            }
        }
        if self.parts.len() > 1 {
            out.push(("udp_set_tx_no_source", self.no_source));
        }
        out
    }

    fn wait_fd(&self) -> Option<BorrowedFd<'_>> {
        Some(self.epoll.0.as_fd())
    }

    fn prepare_wait(&mut self, now: Nanos) -> bool {
        let mut any = false;
        for p in &mut self.parts {
            any |= p.prepare_wait(now);
        }
        any
    }

    fn claim(&mut self, local: IpAddr, owner: Owner) -> io::Result<bool> {
        match self.part_of(local) {
            Some(k) => self.parts[k].claim(local, owner),
            None => Err(io::Error::new(
                io::ErrorKind::AddrNotAvailable,
                format!("{local} is not one of this set's addresses"),
            )),
        }
    }

    fn release(&mut self, local: IpAddr, owner: Owner) {
        if let Some(k) = self.part_of(local) {
            self.parts[k].release(local, owner);
        }
    }

    /// By the member whose address the datagram was sent to.
    fn forward(
        &mut self,
        now: Nanos,
        header: RxHeader,
        payload: &[u8],
        meta: RxMeta,
        owner: Owner,
    ) -> Forwarded {
        match self.part_of(header.dst) {
            Some(k) => self.parts[k].forward(now, header, payload, meta, owner),
            None if self.parts.iter().any(|p| p.share.is_some()) => Forwarded::NoOwner,
            None => Forwarded::Unshared,
        }
    }

    /// Every member leaves.
    fn leave(&mut self) -> bool {
        self.parts.iter_mut().fold(false, |any, p| p.leave() | any)
    }

    fn add_local_addr(&mut self, addr: IpAddr) -> io::Result<()> {
        if self.addrs.contains(&addr) {
            return Ok(());
        }
        let mut cfg = self.template.clone();
        cfg.local = addr;
        let b = UdpBackend::bind(cfg)?;
        let k = self.parts.len() as u64;
        self.epoll
            .add(b.wait_descriptor(), EpollEvent::new(EpollFlags::EPOLLIN, k))?;
        self.addrs.push(addr);
        self.parts.push(b);
        Ok(())
    }
}
