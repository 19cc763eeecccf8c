//! The guarded copy's fault handler passes every fault that is not its own
//! to the handler installed before it (`roce_verbs::guard`): each case
//! runs in a forked child, as a fault there ends the process.
#![cfg(all(target_arch = "x86_64", target_os = "linux"))]
#![allow(unsafe_code)]

use std::os::raw::{c_int, c_void};
use std::ptr;
use std::sync::atomic::{AtomicI32, AtomicUsize, Ordering};

use roce_verbs::guard;

/// Forks one child at a time: the other test's thread then waits on this
/// lock, not inside malloc, when a child is forked.
static FORKING: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// A page of PROT_NONE memory.
fn protected_page() -> *mut u8 {
    // SAFETY: a fresh anonymous mapping.
    let m = unsafe {
        libc::mmap(
            ptr::null_mut(),
            4096,
            libc::PROT_NONE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    assert_ne!(m, libc::MAP_FAILED);
    m.cast()
}

extern "C" fn siginfo_handler(_: c_int, _: *mut libc::siginfo_t, _: *mut c_void) {
    // SAFETY: _exit is async-signal-safe.
    unsafe { libc::_exit(42) }
}

extern "C" fn plain_handler(_: c_int) {
    // SAFETY: _exit is async-signal-safe.
    unsafe { libc::_exit(43) }
}

/// In a child: installs `before` (if any), then the guard's handler, then
/// checks that a guarded copy from a PROT_NONE page is an error, then
/// reads that page itself. Returns the child's wait status.
fn child(before: Option<(libc::sighandler_t, c_int)>) -> c_int {
    // SAFETY: the child only runs the code below and exits.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0);
    if pid == 0 {
        // SAFETY: alarm has no preconditions.
        unsafe { libc::alarm(10) };
        if let Some((h, flags)) = before {
            // SAFETY: plain data.
            let mut sa: libc::sigaction = unsafe { std::mem::zeroed() };
            sa.sa_sigaction = h;
            sa.sa_flags = flags;
            // SAFETY: installs a handler of the matching signature.
            unsafe { libc::sigaction(libc::SIGSEGV, &sa, ptr::null_mut()) };
        }
        guard::install_fault_handler().unwrap();
        let p = protected_page();
        let mut out = [0u8; 8];
        // SAFETY: our buffer, and a page that faults.
        if unsafe { guard::copy(p, out.as_mut_ptr(), 8) }.is_ok() {
            // SAFETY: _exit.
            unsafe { libc::_exit(1) };
        }
        // The program's own fault.
        // SAFETY: deliberately faults (the point of the test).
        let v = unsafe { ptr::read_volatile(p) };
        // SAFETY: _exit.
        unsafe { libc::_exit(2 + v as c_int) };
    }
    let mut status = 0;
    // SAFETY: our child.
    assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
    status
}

#[test]
fn faults_that_are_not_the_copys_reach_the_previous_handler() {
    let _one = FORKING.lock().unwrap_or_else(|p| p.into_inner());
    let info = siginfo_handler as extern "C" fn(c_int, *mut libc::siginfo_t, *mut c_void);
    let s = child(Some((info as libc::sighandler_t, libc::SA_SIGINFO)));
    assert!(libc::WIFEXITED(s) && libc::WEXITSTATUS(s) == 42, "{s:#x}");

    let plain = plain_handler as extern "C" fn(c_int);
    let s = child(Some((plain as libc::sighandler_t, 0)));
    assert!(libc::WIFEXITED(s) && libc::WEXITSTATUS(s) == 43, "{s:#x}");

    // No handler before: the default action, death by SIGSEGV.
    let s = child(None);
    assert!(
        libc::WIFSIGNALED(s) && libc::WTERMSIG(s) == libc::SIGSEGV,
        "{s:#x}"
    );
}

/// The handler `later` replaced, and where `later` reports each call.
static LATER_PREV: AtomicUsize = AtomicUsize::new(0);
static LATER_FD: AtomicI32 = AtomicI32::new(-1);

/// A handler installed after the guard's that chains back to it, as
/// well-behaved libraries do, writing a byte per call.
extern "C" fn later(sig: c_int, info: *mut libc::siginfo_t, ctx: *mut c_void) {
    // SAFETY: write is async-signal-safe; the pipe is the parent's.
    unsafe { libc::write(LATER_FD.load(Ordering::Relaxed), b"x".as_ptr().cast(), 1) };
    let prev = LATER_PREV.load(Ordering::Relaxed);
    // SAFETY: the SA_SIGINFO handler it replaced (the guard's).
    let f: extern "C" fn(c_int, *mut libc::siginfo_t, *mut c_void) =
        unsafe { std::mem::transmute(prev) };
    f(sig, info, ctx);
}

/// In a child: the guard's handler, then `later` over it (chaining back),
/// then, with `reinstall`, the guard's again over `later`. A guarded copy
/// from a PROT_NONE page must still fail cleanly; the child's own fault
/// then goes through `later` once and ends in the default action.
/// Returns the wait status and how many times `later` ran.
fn child_with_later(reinstall: bool) -> (c_int, usize) {
    let mut fds = [0; 2];
    // SAFETY: a pipe into `fds`, whose writes never block (a handler
    // called for ever must not hang on a full pipe).
    assert_eq!(
        unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_NONBLOCK) },
        0
    );
    // SAFETY: the child only runs the code below and exits.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0);
    if pid == 0 {
        // A child that loops is killed by SIGALRM (and fails the test).
        // SAFETY: alarm has no preconditions.
        unsafe { libc::alarm(10) };
        guard::install_fault_handler().unwrap();
        LATER_FD.store(fds[1], Ordering::Relaxed);
        // SAFETY: plain data.
        let mut sa: libc::sigaction = unsafe { std::mem::zeroed() };
        let h = later as extern "C" fn(c_int, *mut libc::siginfo_t, *mut c_void);
        sa.sa_sigaction = h as libc::sighandler_t;
        sa.sa_flags = libc::SA_SIGINFO | libc::SA_NODEFER;
        // SAFETY: plain data.
        let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
        // SAFETY: installs `later`, keeping what it replaced.
        unsafe { libc::sigaction(libc::SIGSEGV, &sa, &mut old) };
        LATER_PREV.store(old.sa_sigaction, Ordering::Relaxed);
        if reinstall {
            guard::install_fault_handler().unwrap();
        }
        let p = protected_page();
        let mut out = [0u8; 8];
        // SAFETY: our buffer, and a page that faults.
        if unsafe { guard::copy(p, out.as_mut_ptr(), 8) }.is_ok() {
            // SAFETY: _exit.
            unsafe { libc::_exit(1) };
        }
        // SAFETY: deliberately faults.
        let v = unsafe { ptr::read_volatile(p) };
        // SAFETY: _exit.
        unsafe { libc::_exit(2 + v as c_int) };
    }
    // SAFETY: our end of the pipe.
    unsafe { libc::close(fds[1]) };
    let mut status = 0;
    // SAFETY: our child.
    assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
    let mut buf = [0u8; 4096];
    // SAFETY: reads what the child wrote into our buffer.
    let n = unsafe { libc::read(fds[0], buf.as_mut_ptr().cast(), buf.len()) };
    // SAFETY: ours.
    unsafe { libc::close(fds[0]) };
    (status, n.max(0) as usize)
}

#[test]
fn a_later_handler_that_chains_back_neither_loses_the_guard_nor_loops() {
    let _one = FORKING.lock().unwrap_or_else(|p| p.into_inner());
    // `later` on top: the guarded copy's fault goes through it (one call)
    // and is still caught; the child's own fault goes through it again
    // and dies of the default action.
    let (s, calls) = child_with_later(false);
    assert!(
        libc::WIFSIGNALED(s) && libc::WTERMSIG(s) == libc::SIGSEGV,
        "{s:#x}"
    );
    assert_eq!(calls, 2);
    // The guard's again on top, chaining to `later`, which chains back:
    // the copy's fault never reaches `later`; the child's own fault does,
    // once, and is not handed to it again.
    let (s, calls) = child_with_later(true);
    assert!(
        libc::WIFSIGNALED(s) && libc::WTERMSIG(s) == libc::SIGSEGV,
        "{s:#x}"
    );
    assert_eq!(calls, 1);
}
