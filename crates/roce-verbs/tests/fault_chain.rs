//! The guarded copy's fault handler passes every fault that is not its own
//! to the handler installed before it (`roce_verbs::guard`): each case
//! runs in a forked child, as a fault there ends the process.
#![cfg(all(target_arch = "x86_64", target_os = "linux"))]
#![allow(unsafe_code)]

use std::os::raw::{c_int, c_void};
use std::ptr;

use roce_verbs::guard;

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
