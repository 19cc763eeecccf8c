//! Guarded copies: touching memory a program lent (a raw region) so that a
//! page it freed, unmapped, shrank or protected gives an error value, not
//! a signal (issue 33; `docs/dropin.md`, "Errors and misuse").
//!
//! On x86-64 Linux the copy is a short routine in assembly
//! (`rep movsb`, backwards when the ranges overlap with the destination
//! above the source) whose instruction addresses are known, plus a
//! `SIGSEGV`/`SIGBUS` handler ([`install_fault_handler`]) that, when the
//! faulting instruction is inside that routine, resumes it at its fixup
//! label, which returns the error. Any other fault goes to the handler
//! the program had installed before (`SA_SIGINFO` handlers get the same
//! three arguments; with `SIG_DFL` or `SIG_IGN` the default action is
//! restored and the fault happens again, killing the process as it would
//! have). A handler installed after ours that chains back to ours (as
//! well-behaved ones do) keeps the copy's faults caught; and when ours was
//! put back on top of such a handler, a fault neither owns that it hands
//! back to ours goes on to the handler found at ours' first installation
//! (or the default action), not to it again — handing it back would
//! recurse until the signal stack wraps, spinning for ever. Ours tells
//! the two callers apart by its return address: the kernel calls a
//! handler returning to the action's `sa_restorer`. This is the kernel's
//! exception-table scheme (`Documentation/arch/x86/exception-tables.rst`)
//! and Wasmtime's trap handling in user space.
//!
//! Without the handler the routine faults like any copy. Elsewhere (other
//! architectures) the copy is done by the kernel with `process_vm_writev`
//! on the own process, which fails with `EFAULT` instead of faulting
//! (a system call per copy: slower, and needs no handler).
//!
//! The handler is process-wide, as signal dispositions are: it is never
//! installed behind a caller's back. The drop-in libibverbs installs it at
//! its first registration of program memory and checks at each later one
//! that it is still in place (a program that replaced it gets it back,
//! chaining to the program's handler); a Rust program that registers raw
//! memory calls [`install_fault_handler`] itself if it wants the same.

use std::io;
use std::os::raw::{c_int, c_void};
use std::ptr;
use std::sync::atomic::{AtomicPtr, AtomicUsize, Ordering};
use std::sync::Mutex;

use roce_core::MemFault;

#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
core::arch::global_asm!(
    // fn(dst: rdi, src: rsi, len: rdx) -> eax: 0 copied, 1 faulted.
    ".pushsection .text.roce_verbs_guarded_copy,\"ax\",@progbits",
    ".p2align 4",
    ".globl roce_verbs_guarded_copy",
    ".hidden roce_verbs_guarded_copy",
    ".type roce_verbs_guarded_copy,@function",
    "roce_verbs_guarded_copy:",
    "    mov rcx, rdx",
    // dst - src < len (unsigned): dst lies inside [src, src + len), so a
    // forward copy would overwrite source bytes not yet read.
    "    mov rax, rdi",
    "    sub rax, rsi",
    "    cmp rax, rcx",
    "    jb 2f",
    "    rep movsb",
    "    xor eax, eax",
    "    ret",
    "2:",
    "    lea rsi, [rsi + rcx - 1]",
    "    lea rdi, [rdi + rcx - 1]",
    "    std",
    "    rep movsb",
    "    cld",
    "    xor eax, eax",
    "    ret",
    ".globl roce_verbs_guarded_copy_end",
    ".hidden roce_verbs_guarded_copy_end",
    "roce_verbs_guarded_copy_end:",
    // Where a fault inside [start, end) resumes: the direction flag may
    // be set (the backward copy), and the ABI wants it clear.
    ".globl roce_verbs_guarded_copy_fixup",
    ".hidden roce_verbs_guarded_copy_fixup",
    "roce_verbs_guarded_copy_fixup:",
    "    cld",
    "    mov eax, 1",
    "    ret",
    ".size roce_verbs_guarded_copy, . - roce_verbs_guarded_copy",
    ".popsection",
);

// The handler's entry: passes its return address to `on_fault` as a
// fourth argument. The kernel calls a handler with the return address set
// to the action's `sa_restorer`; a handler installed after ours that
// chains back to ours calls it from its own code instead.
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
core::arch::global_asm!(
    ".pushsection .text.roce_verbs_fault_entry,\"ax\",@progbits",
    ".p2align 4",
    ".globl roce_verbs_fault_entry",
    ".hidden roce_verbs_fault_entry",
    ".type roce_verbs_fault_entry,@function",
    "roce_verbs_fault_entry:",
    "    mov rcx, [rsp]",
    "    jmp {on_fault}",
    ".size roce_verbs_fault_entry, . - roce_verbs_fault_entry",
    ".popsection",
    on_fault = sym on_fault,
);

#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
unsafe extern "C" {
    fn roce_verbs_fault_entry(sig: c_int, info: *mut libc::siginfo_t, ctx: *mut c_void);
    fn roce_verbs_guarded_copy(dst: *mut u8, src: *const u8, len: usize) -> u32;
    static roce_verbs_guarded_copy_end: u8;
    static roce_verbs_guarded_copy_fixup: u8;
}

/// Copies `len` bytes from `src` to `dst` (the ranges may overlap, as in
/// `ptr::copy`). With [`install_fault_handler`] in place, a page of either
/// range that is unmapped or lacks the access (read for `src`, write for
/// `dst`) ends the copy with [`MemFault`], some bytes possibly copied;
/// without it, such a page raises the signal, as any copy would (on
/// x86-64; elsewhere the kernel copies and never faults).
///
/// # Safety
///
/// Every byte of both ranges must be either memory the caller may read
/// (`src`) or write (`dst`) with nobody else accessing it meanwhile, or
/// memory that faults (unmapped or protected). A mapped page that belongs
/// to someone else is written like any other: the guard catches faults,
/// not ownership.
pub unsafe fn copy(src: *const u8, dst: *mut u8, len: usize) -> Result<(), MemFault> {
    if len == 0 {
        return Ok(());
    }
    #[cfg(all(target_arch = "x86_64", target_os = "linux"))]
    {
        // SAFETY: the caller's contract; the routine reads and writes only
        // the two ranges, and returns 1 (never a signal once the handler
        // is installed) when one of their pages faults.
        match unsafe { roce_verbs_guarded_copy(dst, src, len) } {
            0 => Ok(()),
            _ => Err(MemFault),
        }
    }
    #[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
    {
        // SAFETY: the caller's contract, which is `copy_by_kernel`'s.
        unsafe { copy_by_kernel(src, dst, len) }
    }
}

/// [`copy`] done by the kernel: `process_vm_writev` on the own process,
/// which reads `src` as user memory and pins `dst`'s pages for writing,
/// so either range faulting is `EFAULT`, never a signal, with no handler.
/// A system call per copy (and a bounce buffer when the ranges overlap).
/// The portable fallback of [`copy`], and a cross-check in tests.
///
/// # Safety
///
/// As [`copy`].
pub unsafe fn copy_by_kernel(src: *const u8, dst: *mut u8, len: usize) -> Result<(), MemFault> {
    if len == 0 {
        return Ok(());
    }
    let overlap = (src as usize) < (dst as usize).wrapping_add(len)
        && (dst as usize) < (src as usize).wrapping_add(len);
    if overlap {
        let mut bounce = vec![0u8; len];
        // SAFETY: the caller's contract for `src`; `bounce` is ours.
        unsafe { kernel_write(src, bounce.as_mut_ptr(), len)? };
        // SAFETY: `bounce` is ours; the caller's contract for `dst`.
        return unsafe { kernel_write(bounce.as_ptr(), dst, len) };
    }
    // SAFETY: the caller's contract.
    unsafe { kernel_write(src, dst, len) }
}

/// `process_vm_writev` of `len` bytes from `src` to `dst` in this process.
///
/// # Safety
///
/// As [`copy`], with ranges that do not overlap.
unsafe fn kernel_write(src: *const u8, dst: *mut u8, len: usize) -> Result<(), MemFault> {
    let mut done = 0;
    while done < len {
        let local = libc::iovec {
            iov_base: src.wrapping_add(done) as *mut c_void,
            iov_len: len - done,
        };
        let remote = libc::iovec {
            iov_base: dst.wrapping_add(done).cast(),
            iov_len: len - done,
        };
        // SAFETY: two iovecs that live across the call; the kernel checks
        // both ranges (EFAULT) and copies into the caller's `dst`.
        let n = unsafe { libc::process_vm_writev(libc::getpid(), &local, 1, &remote, 1, 0) };
        if n <= 0 {
            // EFAULT (a range faults), or a partial copy that stopped at a
            // page that faults (n = 0 on the retry).
            return Err(MemFault);
        }
        done += n as usize;
    }
    Ok(())
}

/// The handlers found when ours went in, for chaining: one leaked copy
/// per installation (the handler may be reading an older one on another
/// thread, so none is ever freed; a program replaces handlers a handful
/// of times at most).
static PREV_SEGV: AtomicPtr<libc::sigaction> = AtomicPtr::new(ptr::null_mut());
static PREV_BUS: AtomicPtr<libc::sigaction> = AtomicPtr::new(ptr::null_mut());
/// The handlers found at the first installation (where a chain that came
/// back to ours through a later handler goes on).
static FIRST_SEGV: AtomicPtr<libc::sigaction> = AtomicPtr::new(ptr::null_mut());
static FIRST_BUS: AtomicPtr<libc::sigaction> = AtomicPtr::new(ptr::null_mut());
/// The `sa_restorer` the kernel returns to from a handler (0: unknown,
/// every call is taken for the kernel's).
static RESTORER: AtomicUsize = AtomicUsize::new(0);
/// Serialises installations.
static INSTALL: Mutex<()> = Mutex::new(());

fn prev_slot(sig: c_int) -> &'static AtomicPtr<libc::sigaction> {
    if sig == libc::SIGBUS {
        &PREV_BUS
    } else {
        &PREV_SEGV
    }
}

fn first_slot(sig: c_int) -> &'static AtomicPtr<libc::sigaction> {
    if sig == libc::SIGBUS {
        &FIRST_BUS
    } else {
        &FIRST_SEGV
    }
}

#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
fn handler_addr() -> libc::sighandler_t {
    roce_verbs_fault_entry as unsafe extern "C" fn(c_int, *mut libc::siginfo_t, *mut c_void)
        as libc::sighandler_t
}

#[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
fn handler_addr() -> libc::sighandler_t {
    on_fault as extern "C" fn(c_int, *mut libc::siginfo_t, *mut c_void, usize) as libc::sighandler_t
}

/// Installs the `SIGSEGV`/`SIGBUS` handler that turns a fault inside
/// [`copy`] into [`MemFault`] and chains every other fault to the handler
/// installed before it (see the module docs). Idempotent, and cheap (two
/// `sigaction` calls per signal) when ours is still in place; when the
/// program replaced it since, ours goes back in, chaining to theirs.
/// Only on x86-64 Linux does anything (elsewhere [`copy`] needs no
/// handler).
pub fn install_fault_handler() -> io::Result<()> {
    if !cfg!(all(target_arch = "x86_64", target_os = "linux")) {
        return Ok(());
    }
    let _g = INSTALL.lock().unwrap_or_else(|p| p.into_inner());
    for sig in [libc::SIGSEGV, libc::SIGBUS] {
        // SAFETY: sigaction structs are plain data, all-zero is valid.
        let mut cur: libc::sigaction = unsafe { std::mem::zeroed() };
        // SAFETY: queries the disposition into `cur`.
        if unsafe { libc::sigaction(sig, ptr::null(), &mut cur) } != 0 {
            return Err(io::Error::last_os_error());
        }
        if cur.sa_sigaction == handler_addr() {
            continue;
        }
        let slot = prev_slot(sig);
        // Theirs is recorded before ours goes in, so that no fault reaches
        // ours without somewhere to chain to.
        let theirs = Box::into_raw(Box::new(cur));
        slot.store(theirs, Ordering::Release);
        let _ = first_slot(sig).compare_exchange(
            ptr::null_mut(),
            theirs,
            Ordering::AcqRel,
            Ordering::Acquire,
        );
        // SAFETY: as above.
        let mut ours: libc::sigaction = unsafe { std::mem::zeroed() };
        ours.sa_sigaction = handler_addr();
        ours.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK | libc::SA_NODEFER;
        // SAFETY: `ours.sa_mask` is ours to initialise.
        unsafe { libc::sigemptyset(&mut ours.sa_mask) };
        // SAFETY: as above.
        let mut was: libc::sigaction = unsafe { std::mem::zeroed() };
        // SAFETY: installs a handler that is async-signal-safe (it reads
        // atomics and the signal context, and calls only sigaction and
        // raise or the previous handler).
        if unsafe { libc::sigaction(sig, &ours, &mut was) } != 0 {
            return Err(io::Error::last_os_error());
        }
        if was.sa_sigaction != cur.sa_sigaction || was.sa_flags != cur.sa_flags {
            // Another library changed it between the two calls: chain to
            // what was really replaced.
            slot.store(Box::into_raw(Box::new(was)), Ordering::Release);
        }
        // SAFETY: as above.
        let mut now: libc::sigaction = unsafe { std::mem::zeroed() };
        // SAFETY: a query; glibc and musl report the restorer they set.
        if unsafe { libc::sigaction(sig, ptr::null(), &mut now) } == 0 {
            let r = now.sa_restorer.map_or(0, |f| f as usize);
            RESTORER.store(r, Ordering::Release);
        }
    }
    Ok(())
}

/// True when [`install_fault_handler`]'s handler is the current `SIGSEGV`
/// handler.
pub fn fault_handler_installed() -> bool {
    // SAFETY: as in install_fault_handler.
    let mut cur: libc::sigaction = unsafe { std::mem::zeroed() };
    // SAFETY: a query.
    let ok = unsafe { libc::sigaction(libc::SIGSEGV, ptr::null(), &mut cur) } == 0;
    ok && cur.sa_sigaction == handler_addr()
}

/// The handler: `ret` is the address it returns to (see
/// `roce_verbs_fault_entry`).
extern "C" fn on_fault(sig: c_int, info: *mut libc::siginfo_t, ctx: *mut c_void, ret: usize) {
    #[cfg(all(target_arch = "x86_64", target_os = "linux"))]
    if !ctx.is_null() {
        let start = roce_verbs_guarded_copy as *const u8 as usize;
        // Only the addresses of the routine's labels are taken.
        let end = &raw const roce_verbs_guarded_copy_end as usize;
        let fixup = &raw const roce_verbs_guarded_copy_fixup as usize;
        // SAFETY: for an SA_SIGINFO handler the kernel passes the
        // interrupted thread's ucontext, which the handler may change:
        // the registers are restored from it on return.
        let uc = unsafe { &mut *ctx.cast::<libc::ucontext_t>() };
        let rip = &mut uc.uc_mcontext.gregs[libc::REG_RIP as usize];
        if (start..end).contains(&(*rip as usize)) {
            *rip = fixup as libc::greg_t;
            return;
        }
    }
    // Called by another handler rather than by the kernel: one installed
    // after ours that chains back to ours, which ours then replaced again
    // (chaining to it). Handing the fault to it once more would come back
    // here for ever.
    let restorer = RESTORER.load(Ordering::Acquire);
    let from_handler =
        cfg!(all(target_arch = "x86_64", target_os = "linux")) && restorer != 0 && ret != restorer;
    // SAFETY: the kernel's arguments, passed on unchanged.
    unsafe { chain(sig, info, ctx, from_handler) }
}

/// Hands a fault that is not ours to the handler installed before ours,
/// or, when a later handler handed it back (`from_handler`), to the one
/// found at the first installation unless that is the same handler.
///
/// # Safety
///
/// Called from the signal handler with the kernel's arguments.
unsafe fn chain(sig: c_int, info: *mut libc::siginfo_t, ctx: *mut c_void, from_handler: bool) {
    let prev = prev_slot(sig).load(Ordering::Acquire);
    // SAFETY: leaked Boxes, never freed (see PREV_SEGV), or null.
    let (prev, first) = unsafe {
        (
            prev.as_ref(),
            first_slot(sig).load(Ordering::Acquire).as_ref(),
        )
    };
    let handler = |p: Option<&libc::sigaction>| p.map_or(libc::SIG_DFL, |p| p.sa_sigaction);
    let prev = match from_handler {
        false => prev,
        true if handler(first) != handler(prev) => first,
        true => None,
    };
    let h = handler(prev);
    if h == libc::SIG_DFL || h == libc::SIG_IGN {
        // The default action, as if ours had never been there: a fault
        // re-executes and kills; a signal sent by kill() is sent again.
        // SAFETY: as above.
        let mut dfl: libc::sigaction = unsafe { std::mem::zeroed() };
        dfl.sa_sigaction = libc::SIG_DFL;
        // SAFETY: sigaction is async-signal-safe.
        unsafe { libc::sigaction(sig, &dfl, ptr::null_mut()) };
        // SAFETY: `info` is the kernel's siginfo (or null).
        let sent = unsafe { info.as_ref() }.is_some_and(|i| i.si_code <= 0);
        if sent {
            // SAFETY: raise is async-signal-safe.
            unsafe { libc::raise(sig) };
        }
        return;
    }
    if prev.is_some_and(|p| p.sa_flags & libc::SA_SIGINFO != 0) {
        // SAFETY: an SA_SIGINFO handler has this signature.
        let f: extern "C" fn(c_int, *mut libc::siginfo_t, *mut c_void) =
            unsafe { std::mem::transmute(h) };
        f(sig, info, ctx);
    } else {
        // SAFETY: a plain handler has this signature.
        let f: extern "C" fn(c_int) = unsafe { std::mem::transmute(h) };
        f(sig);
    }
}

/// Why [`check_pages`] refuses a range.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PageError {
    /// A page is not mapped (or the range wraps the address space).
    Unmapped,
    /// A page is mapped without the access (read, or write when asked).
    Protected,
}

/// Checks what the kernel's pinning of a user memory region checks
/// (`ib_umem_get` in `drivers/infiniband/core/umem.c` pins with
/// `FOLL_WRITE` when `ib_access_writable`): every page of
/// `[addr, addr + len)` is mapped and readable, and writable too when
/// `write` is set; the kernel answers `EFAULT` otherwise. Reads
/// `/proc/self/maps` up to the end of the range (its lines are in address
/// order): about half a microsecond per mapping below the range
/// (`benches/guard.rs`; `docs/dropin.md` has the figures). A range of 0
/// bytes is fine.
pub fn check_pages(addr: usize, len: usize, write: bool) -> Result<(), PageError> {
    use std::io::BufRead;
    if len == 0 {
        return Ok(());
    }
    let page = page_size();
    let end = addr.checked_add(len).ok_or(PageError::Unmapped)?;
    // The first byte not yet known to be covered, from the range's page.
    let mut at = addr & !(page - 1);
    let Ok(f) = std::fs::File::open("/proc/self/maps") else {
        // No procfs: nothing to check against (the guarded copy still
        // turns a fault into an error later).
        return Ok(());
    };
    let mut r = io::BufReader::with_capacity(64 * 1024, f);
    let mut line = String::new();
    loop {
        line.clear();
        match r.read_line(&mut line) {
            Ok(0) | Err(_) => return Err(PageError::Unmapped),
            Ok(_) => {}
        }
        let Some((lo, hi, perms)) = parse_maps_line(&line) else {
            continue;
        };
        if hi <= at {
            continue;
        }
        if lo > at {
            // A hole before the next mapping.
            return Err(PageError::Unmapped);
        }
        let p = perms.as_bytes();
        if p.first() != Some(&b'r') || (write && p.get(1) != Some(&b'w')) {
            return Err(PageError::Protected);
        }
        at = hi;
        if at >= end {
            return Ok(());
        }
    }
}

/// `start-end perms ...` of a `/proc/self/maps` line.
fn parse_maps_line(line: &str) -> Option<(usize, usize, &str)> {
    let mut f = line.split_ascii_whitespace();
    let (lo, hi) = f.next()?.split_once('-')?;
    let lo = usize::from_str_radix(lo, 16).ok()?;
    let hi = usize::from_str_radix(hi, 16).ok()?;
    Some((lo, hi, f.next()?))
}

fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if p > 0 && (p as usize).is_power_of_two() {
        p as usize
    } else {
        4096
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn page() -> usize {
        // SAFETY: no preconditions.
        unsafe { libc::sysconf(libc::_SC_PAGESIZE) as usize }
    }

    /// Two pages, the second PROT_NONE.
    struct Guarded(*mut u8);

    impl Guarded {
        fn new() -> Guarded {
            let p = page();
            // SAFETY: a fresh anonymous mapping.
            let m = unsafe {
                libc::mmap(
                    ptr::null_mut(),
                    2 * p,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                    -1,
                    0,
                )
            };
            assert_ne!(m, libc::MAP_FAILED);
            // SAFETY: the second page of our mapping.
            assert_eq!(
                unsafe { libc::mprotect(m.cast::<u8>().add(p).cast(), p, libc::PROT_NONE) },
                0
            );
            Guarded(m.cast())
        }
    }

    impl Drop for Guarded {
        fn drop(&mut self) {
            // SAFETY: our mapping.
            unsafe { libc::munmap(self.0.cast(), 2 * page()) };
        }
    }

    type Copy = unsafe fn(*const u8, *mut u8, usize) -> Result<(), MemFault>;

    fn both() -> [(&'static str, Copy); 2] {
        [("copy", copy), ("copy_by_kernel", copy_by_kernel)]
    }

    #[test]
    fn copies_and_moves_overlapping_ranges_both_ways() {
        install_fault_handler().unwrap();
        for (name, f) in both() {
            for len in [0usize, 1, 7, 64, 4097] {
                let src: Vec<u8> = (0..len).map(|i| i as u8 ^ 0x5a).collect();
                let mut dst = vec![0u8; len];
                // SAFETY: two buffers of ours of `len` bytes.
                unsafe { f(src.as_ptr(), dst.as_mut_ptr(), len) }.unwrap();
                assert_eq!(src, dst, "{name} {len}");
            }
            for (from, to, len) in [
                (0, 5, 40),
                (5, 0, 40),
                (10, 11, 50),
                (11, 10, 50),
                (3, 3, 9),
            ] {
                let mut buf: Vec<u8> = (0..64u8).collect();
                let mut want = buf.clone();
                want.copy_within(from..from + len, to);
                let p = buf.as_mut_ptr();
                // SAFETY: both ranges inside the buffer.
                unsafe { f(p.add(from), p.add(to), len) }.unwrap();
                assert_eq!(buf, want, "{name} {from}->{to} x{len}");
            }
        }
    }

    #[test]
    fn a_protected_page_is_an_error_either_way() {
        install_fault_handler().unwrap();
        let g = Guarded::new();
        let p = page();
        let mut mine = vec![0u8; 64];
        for (name, f) in both() {
            // Reading across into the PROT_NONE page.
            // SAFETY: the first page is ours, the second faults.
            let r = unsafe { f(g.0.add(p - 32), mine.as_mut_ptr(), 64) };
            assert_eq!(r, Err(MemFault), "{name} read");
            // Writing into it.
            // SAFETY: as above.
            let r = unsafe { f(mine.as_ptr(), g.0.add(p - 32), 64) };
            assert_eq!(r, Err(MemFault), "{name} write");
            // Backwards (overlapping, destination above the source).
            // SAFETY: as above.
            let r = unsafe { f(g.0.add(p - 64), g.0.add(p - 32), 64) };
            assert_eq!(r, Err(MemFault), "{name} overlapping");
            // The accessible part still copies.
            // SAFETY: inside the first page.
            unsafe { f(g.0, mine.as_mut_ptr(), 64) }.unwrap();
        }
        // After a backward fault the direction flag is clear again: a
        // forward copy (and the rest of the program) still works.
        let src = [1u8, 2, 3, 4];
        let mut dst = [0u8; 4];
        // SAFETY: two arrays of ours.
        unsafe { copy(src.as_ptr(), dst.as_mut_ptr(), 4) }.unwrap();
        assert_eq!(dst, src);
        assert!(fault_handler_installed());
    }

    #[test]
    fn pages_are_checked_as_pinning_checks_them() {
        let g = Guarded::new();
        let p = page();
        let a = g.0 as usize;
        assert_eq!(check_pages(a, p, true), Ok(()));
        assert_eq!(check_pages(a + 5, 10, false), Ok(()));
        assert_eq!(check_pages(a, 0, true), Ok(()));
        assert_eq!(check_pages(a, p + 1, false), Err(PageError::Protected));
        assert_eq!(check_pages(a + p, 1, false), Err(PageError::Protected));
        // SAFETY: the first page of our mapping becomes read-only.
        assert_eq!(unsafe { libc::mprotect(g.0.cast(), p, libc::PROT_READ) }, 0);
        assert_eq!(check_pages(a, p, false), Ok(()));
        assert_eq!(check_pages(a, p, true), Err(PageError::Protected));
        // SAFETY: unmaps the second page of our mapping (Drop unmaps both
        // again, which is harmless).
        assert_eq!(unsafe { libc::munmap(g.0.add(p).cast(), p) }, 0);
        assert_eq!(check_pages(a + p, 1, false), Err(PageError::Unmapped));
        assert_eq!(check_pages(a, 2 * p, false), Err(PageError::Unmapped));
        assert_eq!(
            check_pages(usize::MAX - 3, 8, false),
            Err(PageError::Unmapped)
        );
        // A heap buffer spans several adjacent mappings at most.
        let v = vec![0u8; 1 << 20];
        assert_eq!(check_pages(v.as_ptr() as usize, v.len(), true), Ok(()));
    }
}
