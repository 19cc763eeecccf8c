//! The host table: which process of this user owns which QPN, CM
//! listener, CM communication ID and rdma_cm port on one (address, UDP
//! port) of this host (docs/host.md; the design is step 2 of
//! docs/notes/2026-12-03-one-device-per-host.md).
//!
//! The processes of one user that share an address each attach to the
//! table (a file of 0600 in `/dev/shm`, or `$XDG_RUNTIME_DIR` when set,
//! one per user, address and port) and get a slot; they claim entries
//! before they use them (a QP's number before the QP exists, a service
//! ID before listening, a communication ID before sending a REQ), and a
//! claim that another process made first fails with
//! [`HostError::Taken`]. Lookups ([`HostTable::owner_of_qpn`] and the
//! like) take no lock and no system call.
//!
//! A process that exits or is killed leaves its slot held by nobody: the
//! kernel lets go of the slot's liveness lock with the process's files.
//! Whoever next meets the slot (a claim of one of its entries, an attach,
//! [`HostTable::reap`]) frees it and everything it held.
//!
//! The UDP backend attaches when it shares its address
//! (`UdpConfig::share`): it claims what its engine owns, routes datagrams
//! by destination QPN and forwards what is not its own (docs/host.md,
//! "What is wired").
//!
//! # Example
//!
//! ```
//! # fn main() -> Result<(), roce_io::HostError> {
//! use roce_io::HostTable;
//! # let tmp = tempfile::tempdir().unwrap();
//! # let dir = tmp.path();
//! // HostTable::attach uses /dev/shm (or $XDG_RUNTIME_DIR).
//! let t = HostTable::attach_in(dir, "127.0.0.1".parse().unwrap(), 4791, b"ring-a")?;
//! t.claim_qpn(0x12_3456)?;
//! assert_eq!(t.owner_of_qpn(0x12_3456).map(|o| o.pid), Some(std::process::id()));
//! t.release_qpn(0x12_3456)?;
//! # Ok(()) }
//! ```

mod bind;
mod error;
#[allow(unsafe_code)]
mod file;
mod layout;
mod map;
mod ports;
mod slots;

use std::fmt;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use file::{Mapping, TableFile};
use layout::{Header, COMM_AT, COMM_ENTRIES, LISTEN_AT, LISTEN_ENTRIES, QPN_AT, QPN_ENTRIES};
use map::{Map, Probe};

pub use error::HostError;
pub use ports::{check_port, free_port, may_bind_low, PortError, PortHolder, EPHEMERAL};
pub use slots::{SlotInfo, SlotName, NAME_MAX};

/// The most processes attached to one table.
pub const MAX_SLOTS: usize = layout::SLOTS;
/// The most QPNs a table is sized for (its map has twice the entries).
pub const MAX_QPNS: usize = QPN_ENTRIES / 2;
/// The most listeners (service IDs) a table is sized for.
pub const MAX_LISTENERS: usize = LISTEN_ENTRIES / 2;
/// The most communication IDs a table is sized for.
pub const MAX_COMM_IDS: usize = COMM_ENTRIES / 2;
/// The most rdma_cm port holds (one per id and port).
pub const MAX_PORT_HOLDS: usize = layout::PORT_RECORDS;

/// How often [`HostTable::attach_in`] opens a file that its last process
/// removed meanwhile before it gives up ([`HostError::Busy`]).
const ATTACH_TRIES: usize = 8;
/// The most other table files one sweep looks at.
const SWEEP_MAX: usize = 32;

/// Removes up to `max` table files of user `uid` in `dir` (not `keep`)
/// that no live process is attached to: those whose last process was
/// killed. Best effort: a file being updated is left for another time.
fn sweep(dir: &Path, uid: u32, keep: &Path, max: usize) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let prefix = format!("roce-host-{uid}-");
    let mut looked = 0;
    for e in entries.flatten() {
        if looked >= max {
            break;
        }
        let path = e.path();
        if path == keep || !e.file_name().to_string_lossy().starts_with(&prefix) {
            continue;
        }
        looked += 1;
        if let Ok(t) = HostTable::open_path(&path, uid) {
            t.remove_if_unused();
        }
    }
}

/// Which map an entry is in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Qpn,
    Listener,
    CommId,
}

/// An attachment to the host table of one (address, UDP port): this
/// process's slot, detached on drop (its entries released).
pub struct HostTable {
    file: TableFile,
    map: Mapping,
    slot: u16,
    generation: u32,
    /// Set once the slot is taken.
    attached: bool,
    /// The process that attached: a child forked since shares the open
    /// file (so the liveness lock) but is not the slot's process.
    pid: u32,
    uid: u32,
    path: PathBuf,
    /// `flock` is per open file, so the threads of this process are
    /// serialised here first.
    update: Mutex<()>,
}

impl fmt::Debug for HostTable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HostTable")
            .field("path", &self.path)
            .field("slot", &self.slot)
            .finish()
    }
}

/// The directory of table files: `$XDG_RUNTIME_DIR` when set, else
/// `/dev/shm`.
pub fn default_dir() -> PathBuf {
    std::env::var_os("XDG_RUNTIME_DIR")
        .filter(|d| !d.is_empty())
        .map_or_else(|| PathBuf::from("/dev/shm"), PathBuf::from)
}

/// The table file of user `uid`'s `addr`:`port` in `dir`, in this
/// process's network namespace ([`net_namespace`]): an address, and
/// rdma_cm's port spaces, are a namespace's, as in the kernel.
pub fn table_path(dir: &Path, uid: u32, addr: IpAddr, port: u16) -> PathBuf {
    dir.join(format!(
        "roce-host-{uid}-net{}-{}-{port}",
        net_namespace(),
        addr.to_canonical()
    ))
}

/// This process's network namespace: the inode number of
/// `/proc/self/ns/net` (unique among the namespaces that exist), 0 when
/// it cannot be read.
pub fn net_namespace() -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self/ns/net").map_or(0, |m| m.ino())
}

impl HostTable {
    /// Attaches this process to the table of `addr`:`port` in
    /// [`default_dir`], with `name` in its slot (what the others need to
    /// reach it, at most [`NAME_MAX`] bytes).
    pub fn attach(addr: IpAddr, port: u16, name: &[u8]) -> Result<HostTable, HostError> {
        Self::attach_in(&default_dir(), addr, port, name)
    }

    /// [`attach`](Self::attach) with the table file in `dir`.
    ///
    /// Creates the file if absent (mode 0600); refuses one that is not
    /// this user's, that others may access, a symbolic link, or that does
    /// not hold a table of this version. Frees the slots of dead
    /// processes, then takes a free slot.
    pub fn attach_in(
        dir: &Path,
        addr: IpAddr,
        port: u16,
        name: &[u8],
    ) -> Result<HostTable, HostError> {
        let name = SlotName::new(name).ok_or(HostError::NameTooLong)?;
        let uid = nix::unistd::geteuid().as_raw();
        let path = table_path(dir, uid, addr, port);
        // A file removed by its last process between this open and the
        // lock is nobody's: open again (a bounded number of times: each
        // retry means another process left the table just then).
        for _ in 0..ATTACH_TRIES {
            if let Some(t) = Self::try_attach(dir, &path, uid, &name)? {
                return Ok(t);
            }
        }
        Err(HostError::Busy)
    }

    /// One try of [`attach_in`](Self::attach_in): `None` when the file
    /// opened was removed meanwhile.
    fn try_attach(
        dir: &Path,
        path: &Path,
        uid: u32,
        name: &SlotName,
    ) -> Result<Option<HostTable>, HostError> {
        let file = TableFile::open(path, uid)?;
        let lock = file.lock()?;
        if !file.is_at(path) {
            return Ok(None);
        }
        let len = file.len()?;
        let fresh = len == 0;
        if fresh {
            file.set_len(layout::FILE_LEN as u64)?;
        } else if len != layout::FILE_LEN as u64 {
            return Err(HostError::Corrupt("length"));
        }
        let map = file.map(layout::FILE_LEN)?;
        let words = map.words();
        match layout::check_header(words, uid) {
            Header::Valid => {}
            Header::Fresh => layout::init_header(words, uid),
            Header::Invalid(w) => return Err(HostError::Corrupt(w)),
        }
        drop(lock);
        let mut t = HostTable {
            file,
            map,
            slot: 0,
            generation: 0,
            attached: false,
            pid: std::process::id(),
            uid,
            path: path.to_path_buf(),
            update: Mutex::new(()),
        };
        let Some((slot, generation)) = t.take_slot(name)? else {
            return Ok(None);
        };
        t.slot = slot;
        t.generation = generation;
        t.attached = true;
        if fresh {
            // The first process of a table: a moment to remove the files
            // that processes killed as the last of theirs left behind.
            sweep(dir, uid, path, SWEEP_MAX);
        }
        Ok(Some(t))
    }

    /// Opens the existing table of `addr`:`port` in `dir` for lookups
    /// alone, taking no slot (a sender finding the process of a QPN at
    /// another address, docs/host.md): the same checks of the file as
    /// [`attach_in`](Self::attach_in), and [`HostError::Open`] when there
    /// is none. Lookups, [`reap`](Self::reap) and
    /// [`live_slots`](Self::live_slots) work; claims, releases and binds
    /// are [`HostError::LookupOnly`].
    pub fn open_in(dir: &Path, addr: IpAddr, port: u16) -> Result<HostTable, HostError> {
        let uid = nix::unistd::geteuid().as_raw();
        Self::open_path(&table_path(dir, uid, addr, port), uid)
    }

    /// [`open_in`](Self::open_in) of the file at `path`.
    fn open_path(path: &Path, uid: u32) -> Result<HostTable, HostError> {
        let file = TableFile::open_with(path, uid, false)?;
        if file.len()? != layout::FILE_LEN as u64 {
            return Err(HostError::Corrupt("length"));
        }
        let map = file.map(layout::FILE_LEN)?;
        match layout::check_header(map.words(), uid) {
            Header::Valid => {}
            Header::Fresh => return Err(HostError::Corrupt("not initialised")),
            Header::Invalid(w) => return Err(HostError::Corrupt(w)),
        }
        Ok(HostTable {
            file,
            map,
            slot: u16::MAX,
            generation: 0,
            attached: false,
            pid: std::process::id(),
            uid,
            path: path.to_path_buf(),
            update: Mutex::new(()),
        })
    }

    /// Whether this table's file is still the one at its path: false
    /// once its last process left and removed it (docs/host.md, "The
    /// file's life"); a lookup-only value then sees nobody's claims and
    /// should be opened again. A system call or two.
    pub fn is_current(&self) -> bool {
        self.file.is_at(&self.path)
    }

    /// Removes the file if no live process is attached (the update lock
    /// taken without waiting; dead slots reclaimed first). True when it
    /// did.
    fn remove_if_unused(&self) -> bool {
        let Ok(Some(_l)) = self.file.try_lock() else {
            return false;
        };
        let unused = self.reclaim_dead_locked().is_ok_and(|live| live.is_empty());
        unused && self.file.is_at(&self.path) && std::fs::remove_file(&self.path).is_ok()
    }

    /// Whether this value holds a slot (not [`open_in`](Self::open_in)).
    pub fn is_attached(&self) -> bool {
        self.attached
    }

    /// Frees the slots of dead processes, then takes a free one for this
    /// process.
    fn take_slot(&self, name: &SlotName) -> Result<Option<(u16, u32)>, HostError> {
        self.updating(|| {
            if !self.file.is_at(&self.path) {
                return Ok(None);
            }
            let words = self.words();
            // Dead slots go first, so that a full table of dead processes
            // still takes a new one; entries naming no slot go with them.
            self.reclaim_dead_locked()?;
            let pid = std::process::id();
            let start = file::start_time(pid).unwrap_or(0);
            for s in 0..MAX_SLOTS as u16 {
                if slots::taken(slots::state(words, s)) {
                    continue;
                }
                // Held by a live process that has not written its slot: a
                // process of this user writing without the lock. Skip it.
                if !self.file.hold_byte(usize::from(s))? {
                    continue;
                }
                return Ok(Some((s, slots::write(words, s, pid, start, name))));
            }
            Err(HostError::NoSlot)
        })
    }

    /// This process's slot.
    pub fn slot(&self) -> u16 {
        self.slot
    }

    /// The table's file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The table's generation: it changes after every update, so a cache
    /// of lookups is valid while it does not.
    pub fn generation(&self) -> u64 {
        self.words()
            .get(layout::h::GENERATION)
            .map_or(0, |w| w.load(Ordering::Acquire))
    }

    fn words(&self) -> &[AtomicU64] {
        self.map.words()
    }

    fn bump(&self) {
        if let Some(w) = self.words().get(layout::h::GENERATION) {
            w.fetch_add(1, Ordering::AcqRel);
        }
    }

    fn map_of(&self, kind: Kind) -> Map<'_> {
        let (at, n) = match kind {
            Kind::Qpn => (QPN_AT, QPN_ENTRIES),
            Kind::Listener => (LISTEN_AT, LISTEN_ENTRIES),
            Kind::CommId => (COMM_AT, COMM_ENTRIES),
        };
        Map::new(self.words().get(at..at + 2 * n).unwrap_or(&[]))
    }

    /// Whether `slot` belongs to a live process (this one's is). Makes a
    /// system call (`F_OFD_GETLK`); needs no lock, but a reclaim decided
    /// on its answer takes the update lock.
    fn live_locked(&self, slot: u16) -> Result<bool, HostError> {
        if usize::from(slot) >= MAX_SLOTS {
            return Ok(false);
        }
        if slot == self.slot && self.attached {
            return Ok(true);
        }
        Ok(slots::taken(slots::state(self.words(), slot))
            && self.file.byte_held_by_other(usize::from(slot))?)
    }

    /// Frees `slot` and everything it holds (the update lock held).
    fn reclaim_locked(&self, slot: u16) {
        self.reclaim_where(|s| s == slot);
    }

    /// Frees every slot `gone` names and everything they hold, in one
    /// pass over the table (the update lock held).
    fn reclaim_where(&self, gone: impl Fn(u16) -> bool) {
        let words = self.words();
        for k in [Kind::Qpn, Kind::Listener, Kind::CommId] {
            self.map_of(k).remove_owned(&gone);
        }
        for (pos, r) in ports::all(words) {
            if gone(r.holder.slot) {
                ports::clear(words, pos);
            }
        }
        for s in 0..MAX_SLOTS as u16 {
            if gone(s) {
                slots::free(words, s);
            }
        }
        self.bump();
    }

    /// Frees the slots of dead processes and entries naming no slot (the
    /// update lock held): a system call per taken slot, one pass over the
    /// table. The live slots.
    fn reclaim_dead_locked(&self) -> Result<Vec<SlotInfo>, HostError> {
        let mut dead = [false; MAX_SLOTS];
        let mut live = Vec::new();
        for s in 0..MAX_SLOTS as u16 {
            if !slots::taken(slots::state(self.words(), s)) {
                continue;
            }
            if self.live_locked(s)? {
                live.extend(slots::read(self.words(), s));
            } else {
                dead[usize::from(s)] = true;
            }
        }
        self.reclaim_where(|s| dead.get(usize::from(s)).copied().unwrap_or(true));
        Ok(live)
    }

    /// Runs `f` with the update lock (this process's threads, then
    /// `flock`).
    fn updating<T>(&self, f: impl FnOnce() -> Result<T, HostError>) -> Result<T, HostError> {
        if std::process::id() != self.pid {
            return Err(HostError::Forked);
        }
        let _g = self.update.lock().unwrap_or_else(|p| p.into_inner());
        let _l = self.file.lock()?;
        let r = f();
        if r.is_ok() {
            self.bump();
        }
        r
    }

    /// [`updating`](Self::updating) for an update of this process's own
    /// entries, which a lookup-only value has none of.
    fn updating_own<T>(&self, f: impl FnOnce() -> Result<T, HostError>) -> Result<T, HostError> {
        if !self.attached {
            return Err(HostError::LookupOnly);
        }
        self.updating(f)
    }

    fn claim(&self, kind: Kind, key: u64) -> Result<(), HostError> {
        self.updating_own(|| {
            let m = self.map_of(kind);
            // At most one dead owner's reclaim per try, a bounded number
            // of tries.
            for _ in 0..4 {
                match m.probe(key) {
                    Probe::Free { pos } => {
                        m.insert_at(pos, key, self.slot);
                        return Ok(());
                    }
                    Probe::Full => return Err(HostError::Full),
                    Probe::Found { slot, .. } if slot == self.slot => {
                        return Err(HostError::Taken(slot))
                    }
                    Probe::Found { pos, slot } => {
                        if self.live_locked(slot)? {
                            return Err(HostError::Taken(slot));
                        }
                        if usize::from(slot) < MAX_SLOTS {
                            self.reclaim_locked(slot);
                        } else {
                            m.remove_at(pos);
                        }
                    }
                }
            }
            Err(HostError::Full)
        })
    }

    fn release(&self, kind: Kind, key: u64) -> Result<(), HostError> {
        self.updating_own(|| {
            let m = self.map_of(kind);
            match m.probe(key) {
                Probe::Found { pos, slot } if slot == self.slot => {
                    m.remove_at(pos);
                    Ok(())
                }
                _ => Err(HostError::NotHeld),
            }
        })
    }

    fn owner(&self, kind: Kind, key: u64) -> Option<SlotInfo> {
        let slot = self.map_of(kind).get(key)?;
        slots::read(self.words(), slot)
    }

    /// Claims QPN `qpn` (24 bits) for this process: `Taken` when another
    /// live process (or this one) holds it; the entries of a dead holder
    /// are reclaimed first.
    pub fn claim_qpn(&self, qpn: u32) -> Result<(), HostError> {
        if qpn > 0xff_ffff {
            return Err(HostError::InvalidQpn(qpn));
        }
        self.claim(Kind::Qpn, u64::from(qpn))
    }

    /// Lets go of QPN `qpn`, held by this process.
    pub fn release_qpn(&self, qpn: u32) -> Result<(), HostError> {
        self.release(Kind::Qpn, u64::from(qpn))
    }

    /// The process holding QPN `qpn`, without a lock or system call. The
    /// slot may belong to a process that died since: the caller that
    /// cannot reach it asks [`HostTable::reap`].
    pub fn owner_of_qpn(&self, qpn: u32) -> Option<SlotInfo> {
        self.owner(Kind::Qpn, u64::from(qpn))
    }

    /// The slot holding QPN `qpn`, alone: the map read without the slot
    /// record (for a forwarder that keeps its links by slot and
    /// [`SlotInfo::generation`]).
    pub fn qpn_slot(&self, qpn: u32) -> Option<u16> {
        self.map_of(Kind::Qpn).get(u64::from(qpn))
    }

    /// Claims the CM listener of service ID `service_id`.
    pub fn claim_listener(&self, service_id: u64) -> Result<(), HostError> {
        self.claim(Kind::Listener, service_id)
    }

    /// Lets go of the listener of `service_id`.
    pub fn release_listener(&self, service_id: u64) -> Result<(), HostError> {
        self.release(Kind::Listener, service_id)
    }

    /// The process listening on `service_id`.
    pub fn owner_of_listener(&self, service_id: u64) -> Option<SlotInfo> {
        self.owner(Kind::Listener, service_id)
    }

    /// Claims the local CM communication ID `comm_id`.
    pub fn claim_comm_id(&self, comm_id: u32) -> Result<(), HostError> {
        self.claim(Kind::CommId, u64::from(comm_id))
    }

    /// Lets go of the communication ID `comm_id`.
    pub fn release_comm_id(&self, comm_id: u32) -> Result<(), HostError> {
        self.release(Kind::CommId, u64::from(comm_id))
    }

    /// The process whose connection has local communication ID `comm_id`.
    pub fn owner_of_comm_id(&self, comm_id: u32) -> Option<SlotInfo> {
        self.owner(Kind::CommId, u64::from(comm_id))
    }

    /// What slot `slot` says, without a lock (`None`: free).
    pub fn slot_info(&self, slot: u16) -> Option<SlotInfo> {
        slots::read(self.words(), slot)
    }

    /// Whether `slot` is taken by a live process (this one's is), without
    /// reclaiming it: a system call (`F_OFD_GETLK`), no lock.
    pub fn is_live(&self, slot: u16) -> Result<bool, HostError> {
        self.live_locked(slot)
    }

    /// Whether `slot`'s process is alive; if not, frees the slot and its
    /// entries (`Ok(true)`: it was reclaimed). For a caller that could not
    /// reach an owner it looked up.
    pub fn reap(&self, slot: u16) -> Result<bool, HostError> {
        if usize::from(slot) >= MAX_SLOTS {
            return Ok(false);
        }
        self.updating(|| {
            if slots::taken(slots::state(self.words(), slot)) && !self.live_locked(slot)? {
                self.reclaim_locked(slot);
                return Ok(true);
            }
            Ok(false)
        })
    }

    /// The slots of live processes, reclaiming dead ones on the way (a
    /// system call per slot taken).
    pub fn live_slots(&self) -> Result<Vec<SlotInfo>, HostError> {
        self.updating(|| self.reclaim_dead_locked())
    }

    /// Entries this process holds in each map (QPNs, listeners, comm IDs)
    /// and its port holds; scans the table (diagnostics, tests).
    pub fn held(&self) -> [usize; 4] {
        let ports = ports::all(self.words())
            .filter(|(_, r)| r.holder.slot == self.slot)
            .count();
        [
            self.map_of(Kind::Qpn).count(self.slot),
            self.map_of(Kind::Listener).count(self.slot),
            self.map_of(Kind::CommId).count(self.slot),
            ports,
        ]
    }

    /// The generation of this process's slot (see [`SlotInfo::generation`]).
    pub fn slot_generation(&self) -> u32 {
        self.generation
    }

    /// The user the table belongs to.
    pub fn uid(&self) -> u32 {
        self.uid
    }
}

impl Drop for HostTable {
    fn drop(&mut self) {
        // Best effort: without the lock (a process holding it for 5 s),
        // the slot is left to the others, who reclaim it once this file
        // is closed and its liveness lock gone.
        // A forked child drops its copy without touching the parent's
        // slot, entries or lock (unlocking would let go of the shared
        // open file's lock).
        if !self.attached || std::process::id() != self.pid {
            return;
        }
        let _ = self.updating(|| {
            self.reclaim_locked(self.slot);
            // The last live process removes the file (docs/host.md, "The
            // file's life"): one who opened it meanwhile finds it gone
            // once it has the lock, and opens a new one.
            if self.reclaim_dead_locked()?.is_empty() && self.file.is_at(&self.path) {
                let _ = std::fs::remove_file(&self.path);
            }
            Ok(())
        });
        let _ = self.file.drop_byte(usize::from(self.slot));
    }
}

#[cfg(test)]
mod tests;
