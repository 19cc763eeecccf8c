//! Protection domains and memory regions: keys, access flags and the bounds
//! checks every local and remote access goes through (IBTA Vol 1 §10.6,
//! the R_Key checks of §9.7.4.1.5 / §9.7.5.1.5 as rxe applies them).
//!
//! The engine never sees application memory as a slice it could keep: each
//! region's bytes sit behind [`RegionMemory`], which the API layer
//! implements (an owned buffer, or raw memory behind roce-verbs' own memory boundary).

use std::cell::Cell;
use std::collections::BTreeMap;
use std::fmt;

use roce_wire::{Lkey, Rkey};

use crate::ids::{Ids, Quarantine};

/// Memory access rights (values as `ibv_access_flags`).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Access(pub u32);

impl Access {
    /// No remote access, local read only.
    pub const NONE: Access = Access(0);
    /// The HCA may write (RDMA READ responses, received SENDs).
    pub const LOCAL_WRITE: Access = Access(1);
    /// Remote peers may RDMA WRITE.
    pub const REMOTE_WRITE: Access = Access(2);
    /// Remote peers may RDMA READ.
    pub const REMOTE_READ: Access = Access(4);
    /// Remote peers may run atomics.
    pub const REMOTE_ATOMIC: Access = Access(8);

    /// Union.
    pub const fn with(self, o: Access) -> Access {
        Access(self.0 | o.0)
    }
    /// True when every right of `o` is granted.
    pub const fn contains(self, o: Access) -> bool {
        self.0 & o.0 == o.0
    }
    /// Remote write or atomic without local write is invalid (IBTA C10-88).
    pub const fn is_valid(self) -> bool {
        let remote_w = self.0 & (Self::REMOTE_WRITE.0 | Self::REMOTE_ATOMIC.0) != 0;
        !remote_w || self.contains(Self::LOCAL_WRITE)
    }
}

impl std::ops::BitOr for Access {
    type Output = Access;
    fn bitor(self, o: Access) -> Access {
        self.with(o)
    }
}

impl fmt::Debug for Access {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names = [
            (Self::LOCAL_WRITE, "LOCAL_WRITE"),
            (Self::REMOTE_WRITE, "REMOTE_WRITE"),
            (Self::REMOTE_READ, "REMOTE_READ"),
            (Self::REMOTE_ATOMIC, "REMOTE_ATOMIC"),
        ];
        let set: Vec<&str> = names
            .iter()
            .filter(|(a, _)| self.contains(*a))
            .map(|(_, n)| *n)
            .collect();
        if set.is_empty() {
            f.write_str("NONE")
        } else {
            f.write_str(&set.join("|"))
        }
    }
}

/// The memory behind a region could not be read or written: the program
/// that lent it freed, unmapped, shrank or protected it while it was
/// registered (`docs/dropin.md`, "Errors and misuse"). Part of the copy
/// may have happened. The engine turns it into the IBTA outcome of an
/// access it refuses (a local protection error, a remote access error
/// NAK) and revokes the region.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemFault;

impl fmt::Display for MemFault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("the memory of the region is no longer accessible")
    }
}

impl std::error::Error for MemFault {}

/// The bytes of a registered region. Offsets are relative to the region's
/// start; the engine checks bounds before every call.
pub trait RegionMemory: Send {
    /// Length in bytes.
    fn len(&self) -> usize;
    /// True when the region is empty.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Copies `out.len()` bytes starting at `offset` into `out`, or fails
    /// when the memory is gone ([`MemFault`]).
    fn read(&self, offset: usize, out: &mut [u8]) -> Result<(), MemFault>;
    /// Copies `data` into the region at `offset`, or fails when the
    /// memory is gone ([`MemFault`]).
    fn write(&mut self, offset: usize, data: &[u8]) -> Result<(), MemFault>;
}

impl RegionMemory for Vec<u8> {
    fn len(&self) -> usize {
        self.as_slice().len()
    }
    fn read(&self, offset: usize, out: &mut [u8]) -> Result<(), MemFault> {
        let end = offset.checked_add(out.len()).ok_or(MemFault)?;
        out.copy_from_slice(self.get(offset..end).ok_or(MemFault)?);
        Ok(())
    }
    fn write(&mut self, offset: usize, data: &[u8]) -> Result<(), MemFault> {
        let end = offset.checked_add(data.len()).ok_or(MemFault)?;
        self.get_mut(offset..end)
            .ok_or(MemFault)?
            .copy_from_slice(data);
        Ok(())
    }
}

/// A protection domain handle.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PdId(pub u32);

/// Why a memory access was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AccessError {
    /// No valid region has this key (never registered, deregistered or invalidated).
    BadKey,
    /// The region belongs to another protection domain.
    WrongPd,
    /// The range is not inside the region (or overflows).
    OutOfBounds,
    /// The region lacks the access right.
    NoPermission,
    /// The memory behind the region faulted ([`MemFault`]): the region
    /// is revoked, and later accesses fail with [`AccessError::BadKey`].
    Fault,
}

impl From<MemFault> for AccessError {
    fn from(_: MemFault) -> AccessError {
        AccessError::Fault
    }
}

#[derive(Debug)]
struct Region {
    pd: PdId,
    va: u64,
    len: u64,
    access: Access,
    key: u32,
    valid: bool,
    /// Its memory faulted once: revoked (a read revokes through `&self`,
    /// hence the cell).
    faulted: Cell<bool>,
    /// A remote SEND with Invalidate may invalidate it (a fast-registered
    /// region; an ordinary registration may not be invalidated).
    invalidatable: bool,
    mem: Box<dyn RegionMemory>,
}

impl fmt::Debug for dyn RegionMemory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "RegionMemory({} bytes)", self.len())
    }
}

/// A checked reference into a region: region slot and byte offset.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Span {
    slot: usize,
    offset: usize,
}

/// Keys of a registered region (lkey = rkey, as rxe does).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MrKeys {
    /// Local key, for scatter/gather entries.
    pub lkey: Lkey,
    /// Remote key, for peers.
    pub rkey: Rkey,
}

/// Registrations remembered after they end, whose keys are not handed out
/// again (a peer may still hold one): 64 Ki keys.
const RETIRED_KEYS: usize = 1 << 16;

/// All registered regions of a device.
///
/// Each registration gets a fresh key of 32 unpredictable bits (L_Key =
/// R_Key, as rxe does), drawn from the device's CSPRNG: a peer cannot
/// guess another region's key from its own, and a key is never handed out
/// while it is live or among the last `RETIRED_KEYS` that ended, so a
/// stale key does not reach a region registered later (IBTA Vol 1
/// §10.6.3.2, a key names one registration). The rxe scheme of an index
/// plus an 8-bit tag is not used: the tag returns after 256 registrations
/// and the index is guessable.
#[derive(Debug)]
pub struct MrTable {
    slots: Vec<Option<Region>>,
    free: Vec<usize>,
    by_key: BTreeMap<u32, usize>,
    retired: Quarantine<u32>,
    ids: Ids,
}

impl Default for MrTable {
    /// A table whose keys come from a fixed seed (tests).
    fn default() -> MrTable {
        MrTable::new([0x6b; 32])
    }
}

impl MrTable {
    /// A table whose keys come from a ChaCha20 stream seeded with `seed`.
    pub fn new(seed: [u8; 32]) -> MrTable {
        MrTable {
            slots: Vec::new(),
            free: Vec::new(),
            by_key: BTreeMap::new(),
            retired: Quarantine::new(RETIRED_KEYS),
            ids: Ids::new(seed),
        }
    }

    fn fresh_key(&mut self) -> u32 {
        loop {
            let k = self.ids.u32();
            // 0 and all-ones are left unused (rxe reserves neither, but
            // both are what a careless peer sends).
            if k != 0
                && k != u32::MAX
                && !self.by_key.contains_key(&k)
                && !self.retired.contains(&k)
            {
                return k;
            }
        }
    }

    /// Registers `mem` at virtual address `va` in `pd` with `access`.
    pub fn register(
        &mut self,
        pd: PdId,
        va: u64,
        mem: Box<dyn RegionMemory>,
        access: Access,
    ) -> Result<MrKeys, AccessError> {
        self.register_with(pd, va, mem, access, false)
    }

    /// As [`MrTable::register`], for a region that a remote SEND with
    /// Invalidate may invalidate: the model of a fast-registered region
    /// (`ibv_alloc_mr` and a registration work request; IBTA Vol 1
    /// §10.6.3.6 / §10.7.2.1 allow remote invalidation only of those and
    /// of memory windows).
    pub fn register_invalidatable(
        &mut self,
        pd: PdId,
        va: u64,
        mem: Box<dyn RegionMemory>,
        access: Access,
    ) -> Result<MrKeys, AccessError> {
        self.register_with(pd, va, mem, access, true)
    }

    fn register_with(
        &mut self,
        pd: PdId,
        va: u64,
        mem: Box<dyn RegionMemory>,
        access: Access,
        invalidatable: bool,
    ) -> Result<MrKeys, AccessError> {
        if !access.is_valid() {
            return Err(AccessError::NoPermission);
        }
        let len = mem.len() as u64;
        if va.checked_add(len).is_none() {
            return Err(AccessError::OutOfBounds);
        }
        let slot = match self.free.pop() {
            Some(s) => s,
            None => {
                if self.slots.len() >= (1 << 24) - 1 {
                    return Err(AccessError::BadKey);
                }
                self.slots.push(None);
                self.slots.len() - 1
            }
        };
        let key = self.fresh_key();
        self.by_key.insert(key, slot);
        self.slots[slot] = Some(Region {
            pd,
            va,
            len,
            access,
            key,
            valid: true,
            faulted: Cell::new(false),
            invalidatable,
            mem,
        });
        Ok(MrKeys {
            lkey: Lkey::new(key),
            rkey: Rkey::new(key),
        })
    }

    /// Deregisters the region of `lkey`, handing its memory back.
    pub fn deregister(&mut self, lkey: Lkey) -> Option<Box<dyn RegionMemory>> {
        let slot = self.slot_of(lkey.value())?;
        let r = self.slots[slot].take()?;
        self.free.push(slot);
        self.by_key.remove(&r.key);
        self.retired.retire(r.key);
        Some(r.mem)
    }

    /// Changes a registration in place, keeping its keys (`ibv_rereg_mr`:
    /// the kernel keeps L_Key and R_Key when the provider can, and rxe
    /// always does): a new protection domain, new access rights, and with
    /// `translation` new memory seen at a new virtual address. Everything
    /// is checked before anything changes, so on an error the region is
    /// as it was. With new memory the region is valid again even if it
    /// had been revoked (its old memory going away), as a fresh
    /// registration would be; the old memory is handed back, and the
    /// engine never touches it again. A fast-registered region
    /// ([`MrTable::register_invalidatable`]) is refused with
    /// [`AccessError::NoPermission`], as rdma-core refuses every region
    /// that is not an ordinary one.
    pub fn reregister(
        &mut self,
        lkey: Lkey,
        pd: Option<PdId>,
        access: Option<Access>,
        translation: Option<(u64, Box<dyn RegionMemory>)>,
    ) -> Result<Option<Box<dyn RegionMemory>>, AccessError> {
        let slot = self.slot_of(lkey.value()).ok_or(AccessError::BadKey)?;
        let r = self.slots[slot].as_mut().ok_or(AccessError::BadKey)?;
        if r.invalidatable || access.is_some_and(|a| !a.is_valid()) {
            return Err(AccessError::NoPermission);
        }
        if let Some((va, mem)) = &translation {
            if va.checked_add(mem.len() as u64).is_none() {
                return Err(AccessError::OutOfBounds);
            }
        }
        if let Some(pd) = pd {
            r.pd = pd;
        }
        if let Some(a) = access {
            r.access = a;
        }
        Ok(translation.map(|(va, mem)| {
            r.va = va;
            r.len = mem.len() as u64;
            r.valid = true;
            r.faulted.set(false);
            std::mem::replace(&mut r.mem, mem)
        }))
    }

    /// Invalidates a remote key (SEND with Invalidate): later accesses
    /// fail with [`AccessError::BadKey`]. Only a region registered with
    /// [`MrTable::register_invalidatable`] in the same PD may be
    /// invalidated; any other is refused with
    /// [`AccessError::NoPermission`] and stays valid (rxe's
    /// `rxe_invalidate_mr` refuses every MR not of type `MEM_REG`).
    pub fn invalidate(&mut self, pd: PdId, rkey: Rkey) -> Result<(), AccessError> {
        let slot = self.slot_of(rkey.value()).ok_or(AccessError::BadKey)?;
        let r = self.slots[slot].as_mut().ok_or(AccessError::BadKey)?;
        if r.pd != pd {
            return Err(AccessError::WrongPd);
        }
        if !r.invalidatable {
            return Err(AccessError::NoPermission);
        }
        r.valid = false;
        Ok(())
    }

    /// Revokes a region whatever its kind, by its local key: every later
    /// local or remote access fails as for a bad key and the engine never
    /// touches its memory again; its keys stay taken until it is
    /// deregistered. For memory that is going away under a registration
    /// (a program unmapping it: the kernel would keep the pages pinned;
    /// here the access is refused instead). False when no region has the key.
    pub fn revoke(&mut self, lkey: Lkey) -> bool {
        let Some(slot) = self.slot_of(lkey.value()) else {
            return false;
        };
        match self.slots[slot].as_mut() {
            Some(r) => {
                r.valid = false;
                true
            }
            None => false,
        }
    }

    fn slot_of(&self, key: u32) -> Option<usize> {
        let slot = *self.by_key.get(&key)?;
        match self.slots.get(slot) {
            Some(Some(r)) if r.key == key => Some(slot),
            _ => None,
        }
    }

    /// Checks an access of `len` bytes at `va` through `key` and returns
    /// where it lands.
    pub fn check(
        &self,
        key: u32,
        pd: PdId,
        va: u64,
        len: u64,
        need: Access,
    ) -> Result<Span, AccessError> {
        let slot = self.slot_of(key).ok_or(AccessError::BadKey)?;
        let r = self.slots[slot].as_ref().ok_or(AccessError::BadKey)?;
        if !r.valid || r.faulted.get() {
            return Err(AccessError::BadKey);
        }
        if r.pd != pd {
            return Err(AccessError::WrongPd);
        }
        let end = va.checked_add(len).ok_or(AccessError::OutOfBounds)?;
        if va < r.va || end > r.va + r.len {
            return Err(AccessError::OutOfBounds);
        }
        if !r.access.contains(need) {
            return Err(AccessError::NoPermission);
        }
        Ok(Span {
            slot,
            offset: (va - r.va) as usize,
        })
    }

    /// Reads bytes at a checked span (plus `skip` bytes). A region whose
    /// memory faults ([`AccessError::Fault`]) is revoked on the spot, as
    /// [`MrTable::revoke`] does, so later accesses fail at their check
    /// without touching it.
    pub fn read(&self, span: Span, skip: usize, out: &mut [u8]) -> Result<(), AccessError> {
        let r = self.live(span)?;
        r.mem.read(span.offset + skip, out).map_err(|f| {
            r.faulted.set(true);
            AccessError::from(f)
        })
    }

    /// Writes bytes at a checked span (plus `skip` bytes); a fault revokes
    /// the region as in [`MrTable::read`].
    pub fn write(&mut self, span: Span, skip: usize, data: &[u8]) -> Result<(), AccessError> {
        let r = match self.slots.get_mut(span.slot) {
            Some(Some(r)) if r.valid && !r.faulted.get() => r,
            _ => return Err(AccessError::BadKey),
        };
        r.mem.write(span.offset + skip, data).map_err(|f| {
            r.valid = false;
            AccessError::from(f)
        })
    }

    fn live(&self, span: Span) -> Result<&Region, AccessError> {
        match self.slots.get(span.slot) {
            Some(Some(r)) if r.valid && !r.faulted.get() => Ok(r),
            _ => Err(AccessError::BadKey),
        }
    }

    /// Reads a 64-bit word in host byte order: atomics operate on the
    /// host's native words (the wire carries them big-endian).
    pub fn read_u64(&self, span: Span) -> Result<u64, AccessError> {
        let mut b = [0u8; 8];
        self.read(span, 0, &mut b)?;
        Ok(u64::from_ne_bytes(b))
    }

    /// Writes a native-order u64 (see [`MrTable::read_u64`]).
    pub fn write_u64(&mut self, span: Span, v: u64) -> Result<(), AccessError> {
        self.write(span, 0, &v.to_ne_bytes())
    }

    /// Number of registered regions.
    pub fn len(&self) -> usize {
        self.by_key.len()
    }

    /// True when nothing is registered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table() -> (MrTable, MrKeys) {
        let mut t = MrTable::default();
        let k = t
            .register(
                PdId(1),
                0x1000,
                Box::new(vec![0u8; 256]),
                Access::LOCAL_WRITE | Access::REMOTE_READ,
            )
            .unwrap();
        (t, k)
    }

    #[test]
    fn bounds_keys_pd_and_rights() {
        let (t, k) = table();
        let key = k.rkey.value();
        assert!(t
            .check(key, PdId(1), 0x1000, 256, Access::REMOTE_READ)
            .is_ok());
        assert!(t
            .check(key, PdId(1), 0x10ff, 1, Access::REMOTE_READ)
            .is_ok());
        assert_eq!(
            t.check(key, PdId(1), 0x10ff, 2, Access::REMOTE_READ),
            Err(AccessError::OutOfBounds)
        );
        assert_eq!(
            t.check(key, PdId(1), 0xfff, 1, Access::REMOTE_READ),
            Err(AccessError::OutOfBounds)
        );
        assert_eq!(
            t.check(key, PdId(1), u64::MAX, 2, Access::NONE),
            Err(AccessError::OutOfBounds)
        );
        assert_eq!(
            t.check(key, PdId(2), 0x1000, 1, Access::NONE),
            Err(AccessError::WrongPd)
        );
        assert_eq!(
            t.check(key, PdId(1), 0x1000, 8, Access::REMOTE_WRITE),
            Err(AccessError::NoPermission)
        );
        assert_eq!(
            t.check(key ^ 1, PdId(1), 0x1000, 8, Access::NONE),
            Err(AccessError::BadKey)
        );
        assert_eq!(
            t.check(0, PdId(1), 0x1000, 8, Access::NONE),
            Err(AccessError::BadKey)
        );
    }

    #[test]
    fn stale_keys_do_not_reach_a_new_region() {
        let (mut t, k) = table();
        assert!(t.deregister(k.lkey).is_some());
        let k2 = t
            .register(PdId(1), 0x1000, Box::new(vec![0u8; 16]), Access::NONE)
            .unwrap();
        assert_ne!(k.lkey, k2.lkey);
        assert_eq!(
            t.check(k.lkey.value(), PdId(1), 0x1000, 1, Access::NONE),
            Err(AccessError::BadKey)
        );
        assert!(t.deregister(k.lkey).is_none());
    }

    #[test]
    fn reregistration_keeps_the_keys_and_checks_before_changing() {
        let (mut t, k) = table();
        let key = k.rkey.value();
        // New PD and rights: the same key, the new checks.
        let old = t
            .reregister(k.lkey, Some(PdId(2)), Some(Access::LOCAL_WRITE), None)
            .unwrap();
        assert!(old.is_none());
        assert_eq!(
            t.check(key, PdId(1), 0x1000, 1, Access::NONE),
            Err(AccessError::WrongPd)
        );
        assert_eq!(
            t.check(key, PdId(2), 0x1000, 1, Access::REMOTE_READ),
            Err(AccessError::NoPermission)
        );
        // Invalid rights and a wrapping range change nothing.
        assert_eq!(
            t.reregister(k.lkey, Some(PdId(3)), Some(Access::REMOTE_WRITE), None)
                .unwrap_err(),
            AccessError::NoPermission
        );
        let wraps = (
            u64::MAX - 2,
            Box::new(vec![0u8; 8]) as Box<dyn RegionMemory>,
        );
        assert_eq!(
            t.reregister(k.lkey, None, None, Some(wraps)).unwrap_err(),
            AccessError::OutOfBounds
        );
        assert!(t.check(key, PdId(2), 0x1000, 256, Access::NONE).is_ok());
        // New memory at a new address, after a revocation: valid again,
        // the old bytes handed back, the old range gone.
        assert!(t.revoke(k.lkey));
        let mem = Box::new(vec![7u8; 16]) as Box<dyn RegionMemory>;
        let old = t
            .reregister(k.lkey, None, None, Some((0x9000, mem)))
            .unwrap()
            .unwrap();
        assert_eq!(old.len(), 256);
        assert_eq!(
            t.check(key, PdId(2), 0x1000, 1, Access::NONE),
            Err(AccessError::OutOfBounds)
        );
        let span = t.check(key, PdId(2), 0x900f, 1, Access::NONE).unwrap();
        let mut b = [0u8; 1];
        t.read(span, 0, &mut b).unwrap();
        assert_eq!(b, [7]);
        assert_eq!(
            t.reregister(Lkey::new(key ^ 1), None, None, None)
                .unwrap_err(),
            AccessError::BadKey
        );
        let f = t
            .register_invalidatable(PdId(1), 0, Box::new(vec![0u8; 8]), Access::NONE)
            .unwrap();
        assert_eq!(
            t.reregister(f.lkey, Some(PdId(2)), None, None).unwrap_err(),
            AccessError::NoPermission
        );
    }

    #[test]
    fn invalidation_and_invalid_rights() {
        let (mut t, k) = table();
        // An ordinary registration cannot be invalidated.
        assert_eq!(
            t.invalidate(PdId(1), k.rkey),
            Err(AccessError::NoPermission)
        );
        assert!(t
            .check(k.rkey.value(), PdId(1), 0x1000, 1, Access::NONE)
            .is_ok());
        let k = t
            .register_invalidatable(PdId(1), 0x1000, Box::new(vec![0u8; 8]), Access::NONE)
            .unwrap();
        assert_eq!(t.invalidate(PdId(2), k.rkey), Err(AccessError::WrongPd));
        t.invalidate(PdId(1), k.rkey).unwrap();
        assert_eq!(
            t.check(k.rkey.value(), PdId(1), 0x1000, 1, Access::NONE),
            Err(AccessError::BadKey)
        );
        let bad = t.register(PdId(1), 0, Box::new(vec![0u8; 8]), Access::REMOTE_WRITE);
        assert_eq!(bad, Err(AccessError::NoPermission));
    }
}
