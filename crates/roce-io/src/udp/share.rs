//! Sharing one address and UDP port with the other processes of this
//! user on this host (`UdpConfig::share`; docs/host.md, "What is wired",
//! and the design in docs/notes/2026-12-03-one-device-per-host.md): the
//! backend's attachment to the address's host table, the lookup-only
//! tables of the other addresses it sends to, per-table caches of QPN
//! owners valid while the table's generation stays, and the small queue
//! of datagrams this backend sends to its own QPNs.
//!
//! Everything read from a table is another process's claim: a slot is
//! below 256 or nothing (`HostTable` checks), a name is used only to
//! connect to an abstract socket of this path's prefix (`shm::link`),
//! and a slot whose process cannot be reached is reaped.

use std::collections::VecDeque;
use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;

use roce_wire::{Owner, RxHeader};
use rustc_hash::FxHashMap;

use crate::backend::{Nanos, PacketBatch, RxMeta};
use crate::host::{self, HostError, HostTable, SlotName};

/// Most lookups a cache keeps before it starts again.
const CACHE_MAX: usize = 4096;
/// Most other addresses whose tables (or their absence) are remembered.
const MAX_PEERS: usize = 256;
/// An address without a table is looked at again after this long.
const PEER_RETRY: Nanos = 1_000_000_000;
/// Most datagrams waiting in the local queue; more are dropped.
const LOCAL_MAX: usize = 256;

/// Where a datagram's owner is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Lookup {
    /// The destination address has no host table of this user: not
    /// shared (the same-host path by address, or UDP).
    NoTable,
    /// Nobody holds it (or QP1, every process's): UDP, and the process
    /// the kernel picks forwards.
    NoOwner,
    /// This very backend.
    Own,
    /// Another attachment: its slot and name.
    Slot { slot: u16, name: SlotName },
}

/// Lookups of one table, valid while its generation stays.
#[derive(Default)]
struct Cache {
    generation: u64,
    slots: FxHashMap<u32, Option<u16>>,
    names: FxHashMap<u16, Option<SlotName>>,
}

impl Cache {
    /// The slot and name holding QPN `qpn` in `t`.
    fn qpn(&mut self, t: &HostTable, qpn: u32) -> Option<(u16, SlotName)> {
        let g = t.generation();
        if g != self.generation || self.slots.len() >= CACHE_MAX {
            self.slots.clear();
            self.names.clear();
            self.generation = g;
        }
        let slot = (*self.slots.entry(qpn).or_insert_with(|| t.qpn_slot(qpn)))?;
        let name = *self
            .names
            .entry(slot)
            .or_insert_with(|| t.slot_info(slot).map(|i| i.name));
        Some((slot, name?))
    }
}

/// Another address's table (and when to check that its file is still
/// the address's: docs/host.md, "The file's life"), or when to look for
/// one again.
enum Peer {
    Table {
        table: HostTable,
        cache: Cache,
        check_at: Nanos,
    },
    Absent {
        retry_at: Nanos,
    },
}

/// The sharing state of a [`UdpBackend`](super::UdpBackend).
pub(super) struct Share {
    dir: PathBuf,
    /// The backend's own (address, port).
    at: SocketAddr,
    table: HostTable,
    cache: Cache,
    peers: FxHashMap<SocketAddr, Peer>,
    /// UDP payloads for this backend's own receive path, with their
    /// headers.
    local: VecDeque<(RxHeader, Vec<u8>)>,
    spare: Vec<Vec<u8>>,
}

/// The I/O error kind that fits a host table error.
fn kind_of(e: &HostError) -> io::ErrorKind {
    match e {
        HostError::Io(e) | HostError::Open(_, e) => e.kind(),
        HostError::Foreign { .. } | HostError::Permissions { .. } => {
            io::ErrorKind::PermissionDenied
        }
        HostError::InvalidQpn(_) | HostError::NameTooLong => io::ErrorKind::InvalidInput,
        HostError::Busy => io::ErrorKind::TimedOut,
        HostError::NoSlot | HostError::Full => io::ErrorKind::OutOfMemory,
        _ => io::ErrorKind::Other,
    }
}

/// A host table error as an I/O error of a fitting kind.
fn io_error(e: HostError) -> io::Error {
    io::Error::new(kind_of(&e), e)
}

impl Share {
    /// Attaches the backend receiving on `at` to its host table in `dir`
    /// (default [`host::default_dir`]), its slot named `name` (the
    /// same-host listener of this backend alone).
    pub(super) fn attach(dir: Option<PathBuf>, at: SocketAddr, name: &[u8]) -> io::Result<Share> {
        let dir = dir.unwrap_or_else(host::default_dir);
        let table = HostTable::attach_in(&dir, at.ip(), at.port(), name).map_err(|e| {
            io::Error::new(
                kind_of(&e),
                format!("attaching to the host table of {at}: {e}"),
            )
        })?;
        Ok(Share {
            dir,
            at,
            table,
            cache: Cache::default(),
            peers: FxHashMap::default(),
            local: VecDeque::new(),
            spare: Vec::new(),
        })
    }

    /// This backend's attachment.
    pub(super) fn table(&self) -> &HostTable {
        &self.table
    }

    /// Who owns `owner` at `dst`: this backend's own table for its own
    /// address, another address's opened for lookups (or found absent,
    /// looked for again after a second). QPNs are cached; a MAD's
    /// listener or connection (rare) is looked up each time.
    pub(super) fn lookup(&mut self, now: Nanos, dst: SocketAddr, owner: Owner) -> Lookup {
        let (table, cache, own) = if dst == self.at {
            (&self.table, &mut self.cache, Some(self.table.slot()))
        } else {
            match self.peer(now, dst) {
                Some((t, c)) => (t, c, None),
                None => return Lookup::NoTable,
            }
        };
        let found = match owner {
            Owner::Qp(q) if q == 1 || q > 0xff_ffff => None,
            Owner::Qp(q) => cache.qpn(table, q),
            Owner::Service(s) => table.owner_of_listener(s).map(|i| (i.slot, i.name)),
            Owner::CommId(c) => table.owner_of_comm_id(c).map(|i| (i.slot, i.name)),
        };
        match found {
            None => Lookup::NoOwner,
            Some((slot, _)) if Some(slot) == own => Lookup::Own,
            Some((slot, name)) => Lookup::Slot { slot, name },
        }
    }

    /// The generation of the table that says who owns what at `dst`, if
    /// it is open (this backend's own, or another address's already
    /// looked at): a lookup made at this generation still holds.
    pub(super) fn generation_at(&self, dst: SocketAddr) -> Option<u64> {
        if dst == self.at {
            return Some(self.table.generation());
        }
        match self.peers.get(&dst)? {
            Peer::Table { table, .. } => Some(table.generation()),
            Peer::Absent { .. } => None,
        }
    }

    /// The table of another address `dst`, opened on first use.
    fn peer(&mut self, now: Nanos, dst: SocketAddr) -> Option<(&HostTable, &mut Cache)> {
        let stale = match self.peers.get_mut(&dst) {
            Some(Peer::Table {
                table, check_at, ..
            }) => {
                // A file its last process removed holds nobody's claims:
                // open the address's again (a new one, or none).
                let removed = now >= *check_at && !table.is_current();
                *check_at = now.saturating_add(PEER_RETRY);
                removed
            }
            Some(Peer::Absent { retry_at }) => now >= *retry_at,
            None => true,
        };
        if stale {
            if self.peers.len() >= MAX_PEERS {
                self.peers.retain(|_, p| matches!(p, Peer::Table { .. }));
                if self.peers.len() >= MAX_PEERS {
                    return None;
                }
            }
            let p = match HostTable::open_in(&self.dir, dst.ip(), dst.port()) {
                Ok(table) => Peer::Table {
                    table,
                    cache: Cache::default(),
                    check_at: now.saturating_add(PEER_RETRY),
                },
                Err(_) => Peer::Absent {
                    retry_at: now.saturating_add(PEER_RETRY),
                },
            };
            self.peers.insert(dst, p);
        }
        match self.peers.get_mut(&dst)? {
            Peer::Table { table, cache, .. } => Some((table, cache)),
            Peer::Absent { .. } => None,
        }
    }

    /// Reaps `slot` of `dst`'s table if its process is gone; true when it
    /// was.
    pub(super) fn reap(&mut self, dst: SocketAddr, slot: u16) -> bool {
        let t = if dst == self.at {
            Some(&self.table)
        } else {
            match self.peers.get(&dst) {
                Some(Peer::Table { table, .. }) => Some(table),
                _ => None,
            }
        };
        t.is_some_and(|t| t.reap(slot).unwrap_or(false))
    }

    /// Claims `owner` for this backend (docs/host.md): `Ok(false)` when
    /// another live process holds it. QPN 1 is everyone's.
    pub(super) fn claim(&self, owner: Owner) -> io::Result<bool> {
        let t = &self.table;
        let r = match owner {
            Owner::Qp(1) => return Ok(true),
            Owner::Qp(q) => t.claim_qpn(q),
            Owner::Service(s) => t.claim_listener(s),
            Owner::CommId(c) => t.claim_comm_id(c),
        };
        match r {
            Ok(()) => Ok(true),
            Err(HostError::Taken(s)) => Ok(s == t.slot()),
            Err(e) => Err(io_error(e)),
        }
    }

    /// Lets go of `owner`, if this backend holds it.
    pub(super) fn release(&self, owner: Owner) {
        let t = &self.table;
        let _ = match owner {
            Owner::Qp(1) => Ok(()),
            Owner::Qp(q) => t.release_qpn(q),
            Owner::Service(s) => t.release_listener(s),
            Owner::CommId(c) => t.release_comm_id(c),
        };
    }

    /// Queues a datagram's UDP payload and header for this backend's own
    /// receive path; false when the queue is full (dropped, as a full
    /// socket buffer drops).
    pub(super) fn push_local(&mut self, h: RxHeader, payload: &[u8]) -> bool {
        if self.local.len() >= LOCAL_MAX {
            return false;
        }
        let mut v = self.spare.pop().unwrap_or_default();
        v.clear();
        v.extend_from_slice(payload);
        self.local.push_back((h, v));
        true
    }

    /// Whether datagrams wait in the local queue.
    pub(super) fn has_local(&self) -> bool {
        !self.local.is_empty()
    }

    /// Moves queued datagrams into `batch` (their headers are the
    /// sending engine's own: exact). Returns how many.
    pub(super) fn drain_local(&mut self, batch: &mut PacketBatch) -> usize {
        let mut n = 0;
        while !batch.is_full() {
            let Some((h, v)) = self.local.pop_front() else {
                break;
            };
            // A datagram too big for the batch's slots is dropped.
            let pushed = batch.push_payload_with(h, RxMeta::default(), |slot| {
                let Some(out) = slot.get_mut(..v.len()) else {
                    return 0;
                };
                out.copy_from_slice(&v);
                v.len()
            });
            if pushed {
                n += 1;
            }
            if self.spare.len() < LOCAL_MAX {
                self.spare.push(v);
            }
        }
        n
    }
}
