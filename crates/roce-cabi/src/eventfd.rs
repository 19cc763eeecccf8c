//! The descriptors programs wait on: a completion channel's `fd` and a
//! context's `async_fd`, each an eventfd counting the events queued.
//!
//! The library owns what it created and nothing else (`docs/dropin.md`,
//! "Errors and misuse"). The program sees an ordinary number (what
//! `eventfd()` returned: the lowest free one, as rdma-core's are, so
//! `select()` takes it) and may poll it, make it non-blocking, or close
//! it and reuse the number for a file of its own. The library counts
//! and takes events only through a close-on-exec duplicate of the same
//! open file description that it keeps for itself, so it never writes
//! to or reads from a number that may have come to name the program's
//! file. Before waiting it checks that the program's number still names
//! its eventfd (`kcmp(KCMP_FILE)`), and answers `EBADF` when it does not;
//! on destroy it closes the program's number only while it does.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::raw::c_int;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::Arc;

use crate::ffi::{last_errno, Res};

/// The lowest number the library's own duplicate takes (lower when the
/// descriptor limit is lower), out of the range programs usually get.
const OWN_FROM: c_int = 512;

/// `KCMP_FILE` of `<linux/kcmp.h>`.
const KCMP_FILE: c_int = 0;

/// An event counter: the library's own descriptor and the number the
/// program was given.
pub struct EventFd {
    /// Counts are written and taken here only.
    own: OwnedFd,
    /// The program's number; -1 once released.
    shown: AtomicI32,
}

impl EventFd {
    /// A semaphore eventfd (one count per queued event), close-on-exec.
    pub fn new() -> Res<Arc<EventFd>> {
        Self::with_flags(libc::EFD_SEMAPHORE)
    }

    /// An eventfd readable while any count is left (one read takes
    /// them all): an rdma_cm event channel's.
    pub fn level() -> Res<Arc<EventFd>> {
        Self::with_flags(0)
    }

    fn with_flags(flags: c_int) -> Res<Arc<EventFd>> {
        // SAFETY: plain syscall; the descriptor is checked and owned below.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | flags) };
        if fd < 0 {
            return Err(last_errno());
        }
        // SAFETY: a fresh descriptor nobody else owns (yet: it is
        // handed to the program below, and closed by `release`).
        let shown = unsafe { OwnedFd::from_raw_fd(fd) };
        let own = [OWN_FROM, 0]
            .into_iter()
            // SAFETY: duplicates a descriptor of ours.
            .map(|from| unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, from) })
            .find(|&d| d >= 0)
            .ok_or_else(last_errno)?;
        Ok(Arc::new(EventFd {
            // SAFETY: a fresh duplicate nobody else owns.
            own: unsafe { OwnedFd::from_raw_fd(own) },
            shown: AtomicI32::new(std::os::fd::IntoRawFd::into_raw_fd(shown)),
        }))
    }

    /// The number the program sees (`channel->fd`, `async_fd`).
    pub fn shown(&self) -> c_int {
        self.shown.load(Ordering::Acquire)
    }

    /// The library's own descriptor, for counting and taking (never the
    /// program's number).
    pub fn own(&self) -> c_int {
        self.own.as_raw_fd()
    }

    /// The library's own descriptor, borrowed (to wait on).
    pub fn own_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        std::os::fd::AsFd::as_fd(&self.own)
    }

    /// Whether a take waits (the program left the descriptor blocking).
    pub fn blocking(&self) -> bool {
        // SAFETY: F_GETFL reads the flags of our own descriptor.
        let fl = unsafe { libc::fcntl(self.own.as_raw_fd(), libc::F_GETFL) };
        fl >= 0 && fl & libc::O_NONBLOCK == 0
    }

    /// Counts one event.
    pub fn count(&self) {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a live u64 to our own eventfd.
        unsafe { libc::write(self.own.as_raw_fd(), (&one as *const u64).cast(), 8) };
    }

    /// A notifier that counts one event.
    pub fn counting(self: &Arc<Self>) -> roce_verbs::Notifier {
        let me = self.clone();
        Box::new(move || me.count())
    }

    /// `EBADF` when the program closed its number, or reused it for
    /// another file: its events are no longer to be waited for there.
    pub fn check(&self) -> Res<()> {
        let shown = self.shown();
        // SAFETY: F_GETFD reads a descriptor's flags; any number is fine.
        if shown < 0 || unsafe { libc::fcntl(shown, libc::F_GETFD) } < 0 {
            return Err(libc::EBADF);
        }
        match same_file(shown, self.own.as_raw_fd()) {
            Some(false) => Err(libc::EBADF),
            _ => Ok(()),
        }
    }

    /// Takes one count, waiting for it unless the program made the
    /// descriptor non-blocking (then `EAGAIN`).
    pub fn take(&self) -> Res<()> {
        take_count(self.own.as_raw_fd())
    }

    /// The object is destroyed: closes the program's number if it still
    /// names this eventfd (as rdma-core closes it). A number the program
    /// closed, and maybe reused, is left alone. Without `kcmp` a number
    /// reused for another descriptor of an anonymous inode (an eventfd,
    /// an epoll, a timerfd) cannot be told from ours, and is closed.
    pub fn release(&self) {
        let shown = self.shown.swap(-1, Ordering::AcqRel);
        // SAFETY: as in `check`.
        if shown < 0 || unsafe { libc::fcntl(shown, libc::F_GETFD) } < 0 {
            return;
        }
        if same_file(shown, self.own.as_raw_fd()) != Some(false) {
            // SAFETY: the number names our eventfd: ours to close.
            unsafe { libc::close(shown) };
        }
    }
}

/// Whether descriptors `a` and `b` of this process share an open file
/// description: `kcmp(KCMP_FILE)`; without it (a kernel built without
/// it, a seccomp filter), `Some(false)` for different inodes and `None`
/// (cannot tell) otherwise: every eventfd has the same anonymous inode.
fn same_file(a: c_int, b: c_int) -> Option<bool> {
    // SAFETY: getpid has no preconditions.
    let pid = unsafe { libc::getpid() };
    // SAFETY: kcmp compares two descriptors of this process; no memory.
    let r = unsafe { libc::syscall(libc::SYS_kcmp, pid, pid, KCMP_FILE, a, b) };
    if r >= 0 {
        return Some(r == 0);
    }
    by_inode(a, b)
}

/// `same_file` without `kcmp`: descriptors of different inodes are of
/// different files; of one inode, perhaps not.
fn by_inode(a: c_int, b: c_int) -> Option<bool> {
    // SAFETY: all-zero is a valid stat; fstat fills it.
    let (mut sa, mut sb): (libc::stat, libc::stat) = unsafe { std::mem::zeroed() };
    // SAFETY: two live stat buffers.
    let ok = unsafe { libc::fstat(a, &mut sa) == 0 && libc::fstat(b, &mut sb) == 0 };
    if !ok || (sa.st_dev, sa.st_ino) != (sb.st_dev, sb.st_ino) {
        return Some(false);
    }
    None
}

/// Takes one count from an eventfd, waiting for it in `read()` unless
/// the program made the descriptor non-blocking (then `EAGAIN`). A
/// signal ends the wait as it ends the kernel's read of a completion
/// channel or `async_fd`: the kernel restarts the read after a handler
/// installed with `SA_RESTART`, and returns `EINTR`, passed on here,
/// after one without (programs such as qperf end a blocking
/// `ibv_get_cq_event` with `SIGALRM` so).
pub fn take_count(fd: c_int) -> Res<()> {
    let mut v: u64 = 0;
    // SAFETY: reads 8 bytes into a live u64.
    let n = unsafe { libc::read(fd, (&mut v as *mut u64).cast(), 8) };
    if n == 8 {
        Ok(())
    } else if n >= 0 {
        // Not an eventfd (a short read): nothing counted there.
        Err(libc::EBADF)
    } else {
        Err(last_errno())
    }
}

/// Whether a wait in `poll()` that a signal handler interrupted ends
/// with `EINTR`, as the kernel's `read()` of the descriptor would: the
/// kernel restarts a read after a handler installed with `SA_RESTART`,
/// but never a `poll()`, and which signal came is not known there. So:
/// when every handler the program installed has `SA_RESTART` (or there
/// is none), the wait goes on; when one lacks it, the wait ends (a
/// program with handlers of both kinds may see `EINTR` where the
/// kernel's read would have gone on).
pub fn interrupt_ends_wait() -> bool {
    // Faults (the handlers of a runtime or of this library) come from
    // the faulting instruction, never during a wait.
    const FAULTS: [c_int; 6] = [
        libc::SIGSEGV,
        libc::SIGBUS,
        libc::SIGILL,
        libc::SIGFPE,
        libc::SIGTRAP,
        libc::SIGSYS,
    ];
    (1..=libc::SIGRTMAX())
        .filter(|s| !FAULTS.contains(s))
        .any(|sig| {
            // SAFETY: all-zero is a valid sigaction; sigaction only reads
            // the handler of `sig` into it (an invalid number fails).
            let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
            // SAFETY: as above.
            let ok = unsafe { libc::sigaction(sig, std::ptr::null(), &mut old) } == 0;
            let handled = old.sa_sigaction != libc::SIG_DFL && old.sa_sigaction != libc::SIG_IGN;
            ok && handled && old.sa_flags & libc::SA_RESTART == 0
        })
}

/// Waits until `fd` has a count to take, without taking it: at once
/// (`EAGAIN` when there is none) if the descriptor is non-blocking.
/// `EBADF` for a descriptor that is not open (`POLLNVAL`), `EIO` for one
/// in error: never a loop on a descriptor that can never be read.
pub fn wait_readable(fd: c_int) -> Res<()> {
    // SAFETY: F_GETFL on a descriptor the program may have changed.
    let fl = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    if fl < 0 {
        return Err(libc::EBADF);
    }
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    let timeout = if fl & libc::O_NONBLOCK != 0 { 0 } else { -1 };
    loop {
        // SAFETY: one live pollfd.
        let n = unsafe { libc::poll(&mut p, 1, timeout) };
        if n > 0 {
            return revents(p.revents);
        }
        if n == 0 {
            return Err(libc::EAGAIN);
        }
        let e = last_errno();
        if e != libc::EINTR {
            return Err(e);
        }
    }
}

/// What `poll()`'s `revents` of a wait for reading means.
fn revents(r: libc::c_short) -> Res<()> {
    if r & libc::POLLNVAL != 0 {
        Err(libc::EBADF)
    } else if r & libc::POLLIN != 0 {
        Ok(())
    } else {
        // POLLERR or POLLHUP without data: nothing will ever be read.
        Err(libc::EIO)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn open_null() -> c_int {
        // SAFETY: a NUL-terminated path.
        unsafe { libc::open(c"/dev/null".as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) }
    }

    #[test]
    fn poll_results() {
        assert_eq!(revents(libc::POLLIN), Ok(()));
        assert_eq!(revents(libc::POLLNVAL), Err(libc::EBADF));
        assert_eq!(revents(libc::POLLERR), Err(libc::EIO));
        assert_eq!(revents(libc::POLLHUP), Err(libc::EIO));
    }

    #[test]
    fn a_closed_number_is_ebadf_not_a_spin() {
        let e = EventFd::new().unwrap();
        assert!(e.shown() >= 0 && e.shown() != e.own.as_raw_fd());
        assert_eq!(e.check(), Ok(()));
        // Counted through the library's own descriptor, seen through
        // the program's number (one open file description).
        (e.counting())();
        assert_eq!(wait_readable(e.shown()), Ok(()));
        assert_eq!(e.take(), Ok(()));
        // SAFETY: the test plays the program closing its number.
        unsafe { libc::close(e.shown()) };
        assert_eq!(e.check(), Err(libc::EBADF));
        // Waiting still works on the library's own descriptor.
        (e.counting())();
        assert_eq!(wait_readable(e.own()), Ok(()));
        assert_eq!(e.take(), Ok(()));
        e.release();
        assert_eq!(e.shown(), -1);
    }

    #[test]
    fn without_kcmp_only_another_inode_is_known_to_differ() {
        let (a, b) = (EventFd::new().unwrap(), EventFd::new().unwrap());
        let null = open_null();
        let own = a.own.as_raw_fd();
        assert_eq!(by_inode(null, own), Some(false));
        // Every eventfd has the one anonymous inode: ours or not, unknown.
        assert_eq!(by_inode(a.shown(), own), None);
        assert_eq!(by_inode(b.shown(), own), None);
        // kcmp, where allowed, tells them apart.
        if same_file(a.shown(), own).is_some() {
            assert_eq!(same_file(a.shown(), own), Some(true));
            assert_eq!(same_file(b.shown(), own), Some(false));
        }
        // SAFETY: the test's own descriptor.
        unsafe { libc::close(null) };
        a.release();
        b.release();
    }

    #[test]
    fn non_blocking_on_the_programs_number_is_seen() {
        let e = EventFd::new().unwrap();
        // SAFETY: the test plays the program making its number
        // non-blocking (one open file description with the library's).
        unsafe { libc::fcntl(e.shown(), libc::F_SETFL, libc::O_NONBLOCK) };
        assert_eq!(wait_readable(e.own()), Err(libc::EAGAIN));
        assert_eq!(e.take(), Err(libc::EAGAIN));
        (e.counting())();
        assert_eq!(wait_readable(e.own()), Ok(()));
        assert_eq!(e.take(), Ok(()));
        e.release();
    }

    #[test]
    fn blocking_follows_the_programs_flags() {
        let e = EventFd::new().unwrap();
        assert!(e.blocking());
        // SAFETY: the test plays the program making its number
        // non-blocking.
        unsafe { libc::fcntl(e.shown(), libc::F_SETFL, libc::O_NONBLOCK) };
        assert!(!e.blocking());
        e.release();
    }

    extern "C" fn on_signal(_: c_int) {}

    /// A blocking take in thread `t`'s read, hit by `sig` (handled by
    /// `on_signal` with `flags`): what the take returned, if it did
    /// within 300 ms; the thread is released with a count either way.
    fn take_hit_by(sig: c_int, flags: c_int) -> Option<Res<()>> {
        // SAFETY: installs a handler that does nothing for a signal no
        // other test uses.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_signal as extern "C" fn(c_int) as usize;
            sa.sa_flags = flags;
            libc::sigaction(sig, &sa, std::ptr::null_mut());
        }
        let e = EventFd::new().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let e2 = e.clone();
        let t = std::thread::spawn(move || {
            // SAFETY: pthread_self has no preconditions.
            tx.send(Err(unsafe { libc::pthread_self() } as i64))
                .unwrap();
            tx.send(Ok(e2.take())).unwrap();
        });
        let Err(me) = rx.recv().unwrap() else {
            unreachable!()
        };
        std::thread::sleep(Duration::from_millis(100));
        // SAFETY: the thread is alive until it gets a count.
        unsafe { libc::pthread_kill(me as libc::pthread_t, sig) };
        let got = rx
            .recv_timeout(Duration::from_millis(300))
            .ok()
            .map(|r| r.unwrap());
        (e.counting())();
        t.join().unwrap();
        e.release();
        got
    }

    /// A signal ends a blocking take as it ends the kernel's read of a
    /// completion channel: EINTR after a handler without SA_RESTART
    /// (qperf's SIGALRM), the read goes on after one with it.
    #[test]
    fn a_signal_without_sa_restart_ends_the_wait_with_eintr() {
        assert_eq!(take_hit_by(libc::SIGUSR1, 0), Some(Err(libc::EINTR)));
        assert_eq!(take_hit_by(libc::SIGUSR2, libc::SA_RESTART), None);
    }

    #[test]
    fn a_reused_number_is_not_closed() {
        let e = EventFd::new().unwrap();
        let n = e.shown();
        let f = open_null();
        assert!(f >= 0);
        // SAFETY: the test plays the program reusing its number (dup2
        // closes and reuses it at once: no other test can take it).
        assert_eq!(unsafe { libc::dup2(f, n) }, n);
        // SAFETY: the test's own descriptor.
        unsafe { libc::close(f) };
        assert_eq!(same_file(n, e.own.as_raw_fd()), Some(false));
        assert_eq!(e.check(), Err(libc::EBADF));
        e.release();
        // SAFETY: F_GETFD on the program's number: still open.
        assert!(unsafe { libc::fcntl(n, libc::F_GETFD) } >= 0);
        // SAFETY: the test's own descriptor.
        unsafe { libc::close(n) };
    }

    #[test]
    fn release_closes_the_programs_number_while_it_is_ours() {
        let e = EventFd::new().unwrap();
        let n = e.shown();
        assert_ne!(same_file(n, e.own.as_raw_fd()), Some(false));
        e.release();
        // SAFETY: F_GETFD on a number that should be closed. (Tests of
        // this binary run in parallel: another may have taken it since,
        // so only a number still naming an eventfd would be wrong.)
        let open = unsafe { libc::fcntl(n, libc::F_GETFD) } >= 0;
        assert!(!open || same_file(n, e.own.as_raw_fd()) == Some(false));
    }
}
