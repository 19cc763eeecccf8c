//! Registered memory that the program unmaps.
//!
//! With a kernel RDMA stack the pages of a memory region stay pinned
//! until it is deregistered, whatever the program does to its mappings.
//! Here the engine reads and writes the program's pages directly, so an
//! unmapped region would make the next remote WRITE into it a segfault
//! of the engine. The library therefore watches `munmap` (it exports one,
//! which the dynamic loader binds before libc's, as libibverbs.so.1 comes
//! first among a program's libraries): a region any of whose bytes are
//! unmapped is revoked first — later local accesses complete with a
//! local protection error, remote ones get a remote access error NAK —
//! and only then does the unmapping happen. The region's keys stay taken
//! until the program deregisters it (`docs/dropin.md`).
//!
//! This is the early, clean path. What it cannot see — libc's own
//! unmapping inside `free()` (glibc calls its internal `__munmap` for a
//! large block), `mremap` shrinking or moving a region, `mprotect` — the
//! engine's guarded copies catch (`roce_verbs::guard`, installed by
//! `pd.rs` at registration): the access that faults fails with the same
//! errors and revokes the region. Not caught at all: `mmap(MAP_FIXED)`
//! over a region, or freed memory mapped again for something else (the
//! pages are mapped: no fault, the engine sees the new contents), and
//! `madvise(MADV_DONTNEED)` (likewise mapped).

use std::os::raw::{c_int, c_void};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use roce_verbs::Revoker;

struct Entry {
    start: usize,
    end: usize,
    id: usize,
    revoker: Revoker,
}

/// Raw regions by address range (process-wide, as `munmap` is).
static REGIONS: Mutex<Vec<Entry>> = Mutex::new(Vec::new());
/// How many there are: `munmap` looks at nothing while there are none.
static COUNT: AtomicUsize = AtomicUsize::new(0);

fn regions() -> std::sync::MutexGuard<'static, Vec<Entry>> {
    REGIONS.lock().unwrap_or_else(|p| p.into_inner())
}

/// Records a region registered at `[start, start + len)` under `id`.
pub(crate) fn watch(start: usize, len: usize, id: usize, revoker: Revoker) {
    if len == 0 {
        return;
    }
    regions().push(Entry {
        start,
        end: start.saturating_add(len),
        id,
        revoker,
    });
    COUNT.fetch_add(1, Ordering::Release);
}

/// Watches the region `id` at `[start, start + len)` from now on, in
/// place of where it was (`ibv_rereg_mr` gave it new memory; a region
/// revoked before is no longer in the table, and is added again).
pub(crate) fn moved(start: usize, len: usize, id: usize, revoker: Revoker) {
    let mut r = regions();
    if let Some(i) = r.iter().position(|e| e.id == id) {
        r.swap_remove(i);
        COUNT.fetch_sub(1, Ordering::Release);
    }
    if len > 0 {
        r.push(Entry {
            start,
            end: start.saturating_add(len),
            id,
            revoker,
        });
        COUNT.fetch_add(1, Ordering::Release);
    }
}

/// Forgets the region `id` (deregistered).
pub(crate) fn forget(id: usize) {
    let mut r = regions();
    if let Some(i) = r.iter().position(|e| e.id == id) {
        r.swap_remove(i);
        COUNT.fetch_sub(1, Ordering::Release);
    }
}

/// Revokes every region overlapping `[start, end)`. The engine lock is
/// never taken under the table's lock (a thread of the engine may unmap
/// memory of its own while holding the engine lock: it finds no overlap
/// and takes only the table's lock), and nothing is allocated.
fn revoke_overlapping(start: usize, end: usize) {
    loop {
        let mut batch: [Option<Revoker>; 8] = Default::default();
        let mut n = 0;
        {
            let mut r = regions();
            let mut i = 0;
            while i < r.len() && n < batch.len() {
                if r[i].start < end && start < r[i].end {
                    let e = r.swap_remove(i);
                    COUNT.fetch_sub(1, Ordering::Release);
                    batch[n] = Some(e.revoker);
                    n += 1;
                } else {
                    i += 1;
                }
            }
        }
        for r in batch.iter().flatten() {
            r.revoke();
        }
        if n < batch.len() {
            return;
        }
    }
}

/// `munmap`, as the program and every library of the process call it.
///
/// # Safety
/// As libc's `munmap`.
#[no_mangle]
pub(crate) unsafe extern "C" fn munmap(addr: *mut c_void, len: usize) -> c_int {
    if COUNT.load(Ordering::Acquire) != 0 {
        let start = addr as usize;
        revoke_overlapping(start, start.saturating_add(len));
    }
    // SAFETY: the system call itself, with the caller's arguments (it
    // sets errno and returns -1 on failure, as libc's wrapper does).
    unsafe { libc::syscall(libc::SYS_munmap, addr, len) as c_int }
}
