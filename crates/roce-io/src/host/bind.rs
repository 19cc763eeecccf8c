//! rdma_cm's port spaces on the host table: binds, listens and
//! releases under the kernel's rules ([`check_port`]) across every
//! attached process (docs/host.md, "Port spaces").

use super::{
    check_port, free_port, may_bind_low, ports, HostError, HostTable, PortError, PortHolder,
};

impl HostTable {
    /// Binds id `hold.id` of this process to `hold.addr`:`port` of port
    /// space `space` (port 0: a free port of [`EPHEMERAL`](super::EPHEMERAL)) under
    /// rdma_cm's rules, across every process of the table; the port it
    /// got. Holders of the port whose process died are reclaimed first.
    pub fn bind_port(&self, space: u32, port: u16, hold: PortHolder) -> Result<u16, HostError> {
        let hold = PortHolder {
            slot: self.slot,
            ..hold
        };
        if port != 0 && port < 1024 && !may_bind_low() {
            return Err(HostError::Port(PortError::Access));
        }
        self.updating_own(|| {
            let words = self.words();
            let port = if port == 0 {
                let mut held = vec![0u64; 1024];
                for (_, r) in ports::all(words) {
                    if r.space == space {
                        held[usize::from(r.port) / 64] |= 1 << (r.port % 64);
                    }
                }
                let seed = std::collections::hash_map::RandomState::new();
                let seed = std::hash::BuildHasher::hash_one(&seed, std::process::id());
                free_port(|p| held[usize::from(p) / 64] & 1 << (p % 64) != 0, seed)
                    .ok_or(HostError::Port(PortError::AddrNotAvail))?
            } else {
                let holders = self.port_holders_locked(space, port)?;
                check_port(holders.iter(), &hold, hold.reuse).map_err(HostError::Port)?;
                port
            };
            let pos = ports::free_pos(words).ok_or(HostError::Full)?;
            ports::write(
                words,
                pos,
                &ports::Record {
                    space,
                    port,
                    holder: hold,
                    listening: false,
                },
            );
            Ok(port)
        })
    }

    /// The live holders of (`space`, `port`), dead processes' reclaimed
    /// (the update lock held).
    fn port_holders_locked(&self, space: u32, port: u16) -> Result<Vec<PortHolder>, HostError> {
        let mut v = Vec::new();
        for (_, r) in ports::all(self.words()) {
            if r.space != space || r.port != port {
                continue;
            }
            if self.live_locked(r.holder.slot)? {
                v.push(r.holder);
            } else {
                self.reclaim_locked(r.holder.slot);
            }
        }
        Ok(v)
    }

    /// `rdma_listen` of id `id`, bound to `port` of `space`: it must be
    /// the port's only holder on its address, and is no longer reusable.
    pub fn listen_port(&self, space: u32, port: u16, id: u64) -> Result<(), HostError> {
        self.updating_own(|| {
            let holders = self.port_holders_locked(space, port)?;
            let words = self.words();
            let Some((pos, mut rec)) = ports::all(words).find(|(_, r)| {
                r.space == space
                    && r.port == port
                    && r.holder.slot == self.slot
                    && r.holder.id == id
            }) else {
                return Err(HostError::NotHeld);
            };
            if rec.holder.reuse {
                check_port(holders.iter(), &rec.holder, false).map_err(HostError::Port)?;
            }
            rec.holder.reuse = false;
            rec.listening = true;
            ports::write(words, pos, &rec);
            Ok(())
        })
    }

    /// Lets go of every port id `id` of this process holds; how many.
    pub fn release_ports(&self, id: u64) -> Result<usize, HostError> {
        self.updating_own(|| {
            let words = self.words();
            let mine: Vec<usize> = ports::all(words)
                .filter(|(_, r)| r.holder.slot == self.slot && r.holder.id == id)
                .map(|(p, _)| p)
                .collect();
            for &p in &mine {
                ports::clear(words, p);
            }
            Ok(mine.len())
        })
    }
}
