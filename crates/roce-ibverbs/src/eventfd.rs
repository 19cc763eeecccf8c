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
pub(crate) struct EventFd {
    /// Counts are written and taken here only.
    own: OwnedFd,
    /// The program's number; -1 once released.
    shown: AtomicI32,
}

impl EventFd {
    /// A semaphore eventfd (one count per queued event), close-on-exec.
    pub(crate) fn new() -> Res<Arc<EventFd>> {
        Self::with_flags(libc::EFD_SEMAPHORE)
    }

    /// An eventfd readable while any count is left (one read takes
    /// them all): an rdma_cm event channel's.
    pub(crate) fn level() -> Res<Arc<EventFd>> {
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
    pub(crate) fn shown(&self) -> c_int {
        self.shown.load(Ordering::Acquire)
    }

    /// The library's own descriptor, for counting and taking (never the
    /// program's number).
    pub(crate) fn own(&self) -> c_int {
        self.own.as_raw_fd()
    }

    /// Counts one event.
    pub(crate) fn count(&self) {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a live u64 to our own eventfd.
        unsafe { libc::write(self.own.as_raw_fd(), (&one as *const u64).cast(), 8) };
    }

    /// A notifier that counts one event.
    pub(crate) fn counting(self: &Arc<Self>) -> roce_verbs::Notifier {
        let me = self.clone();
        Box::new(move || me.count())
    }

    /// `EBADF` when the program closed its number, or reused it for
    /// another file: its events are no longer to be waited for there.
    pub(crate) fn check(&self) -> Res<()> {
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
    pub(crate) fn take(&self) -> Res<()> {
        take_count(self.own.as_raw_fd())
    }

    /// Waits until a count can be taken (`EAGAIN` at once when the
    /// descriptor is non-blocking and there is none), as rdma-core's
    /// `read()` of the descriptor waits: a signal whose handler was
    /// installed without `SA_RESTART` ends the wait with `EINTR` (the
    /// kernel restarts the read for one with it). Programs count on that:
    /// qperf ends a timed test with `SIGALRM` and expects a blocked
    /// `ibv_get_cq_event` to fail with `EINTR` (otherwise the side whose
    /// peer stopped first waits for ever for a completion that will never
    /// come). A `poll()` is interrupted by every handler, `SA_RESTART` or
    /// not, hence a read; the count it took is put back at once.
    pub(crate) fn wait(&self) -> Res<()> {
        let mut v: u64 = 0;
        // SAFETY: reads 8 bytes into a live u64 from our own eventfd.
        let n = unsafe { libc::read(self.own.as_raw_fd(), (&mut v as *mut u64).cast(), 8) };
        match n {
            8 => {
                // SAFETY: writes 8 bytes from a live u64 to our own eventfd.
                unsafe { libc::write(self.own.as_raw_fd(), (&v as *const u64).cast(), 8) };
                Ok(())
            }
            n if n >= 0 => Err(libc::EBADF),
            _ => Err(last_errno()),
        }
    }

    /// The object is destroyed: closes the program's number if it still
    /// names this eventfd (as rdma-core closes it). A number the program
    /// closed, and maybe reused, is left alone. Without `kcmp` a number
    /// reused for another descriptor of an anonymous inode (an eventfd,
    /// an epoll, a timerfd) cannot be told from ours, and is closed.
    pub(crate) fn release(&self) {
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

/// Takes one count from an eventfd, waiting for it unless the program
/// made the descriptor non-blocking (then `EAGAIN`).
pub(crate) fn take_count(fd: c_int) -> Res<()> {
    let mut v: u64 = 0;
    loop {
        // SAFETY: reads 8 bytes into a live u64.
        let n = unsafe { libc::read(fd, (&mut v as *mut u64).cast(), 8) };
        if n == 8 {
            return Ok(());
        }
        if n >= 0 {
            // Not an eventfd (a short read): nothing counted there.
            return Err(libc::EBADF);
        }
        let e = last_errno();
        if e != libc::EINTR {
            return Err(e);
        }
    }
}

/// Waits until `fd` has a count to take, without taking it: at once
/// (`EAGAIN` when there is none) if the descriptor is non-blocking.
/// `EBADF` for a descriptor that is not open (`POLLNVAL`), `EIO` for one
/// in error: never a loop on a descriptor that can never be read.
pub(crate) fn wait_readable(fd: c_int) -> Res<()> {
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

    fn open_null() -> c_int {
        // SAFETY: a NUL-terminated path.
        unsafe { libc::open(c"/dev/null".as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) }
    }

    extern "C" fn nothing(_: c_int) {}

    /// Sends `sig` to the calling thread 100 ms from now, once.
    fn signal_me_soon(sig: c_int) -> std::thread::JoinHandle<()> {
        // SAFETY: the calling thread's own handle.
        let me = unsafe { libc::pthread_self() };
        std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(100));
            // SAFETY: the test's thread, alive until this is joined.
            unsafe { libc::pthread_kill(me, sig) };
        })
    }

    /// A wait ends with `EINTR` when a signal whose handler was installed
    /// without `SA_RESTART` comes (qperf's `SIGALRM`), and goes on through
    /// one installed with it, as rdma-core's `read()` of the descriptor.
    #[test]
    fn a_wait_is_interrupted_as_a_read_is() {
        let sig = libc::SIGRTMIN() + 7;
        for (flags, want) in [(0, Err(libc::EINTR)), (libc::SA_RESTART, Ok(()))] {
            // SAFETY: an all-zero sigaction is valid; a handler that does nothing.
            unsafe {
                let mut sa: libc::sigaction = std::mem::zeroed();
                sa.sa_sigaction = nothing as extern "C" fn(c_int) as usize;
                sa.sa_flags = flags;
                assert_eq!(libc::sigaction(sig, &sa, std::ptr::null_mut()), 0);
            }
            let e = EventFd::new().unwrap();
            let t = signal_me_soon(sig);
            let counter = {
                let e = e.clone();
                std::thread::spawn(move || {
                    std::thread::sleep(std::time::Duration::from_millis(400));
                    e.count();
                })
            };
            assert_eq!(e.wait(), want, "sa_flags {flags:#x}");
            t.join().unwrap();
            counter.join().unwrap();
            // The count is still there for the taking (the wait put it back).
            assert_eq!(e.wait(), Ok(()));
            assert_eq!(e.take(), Ok(()));
            e.release();
        }
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
        assert_eq!(e.wait(), Ok(()));
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
        assert_eq!(e.wait(), Err(libc::EAGAIN));
        assert_eq!(e.take(), Err(libc::EAGAIN));
        (e.counting())();
        assert_eq!(e.wait(), Ok(()));
        assert_eq!(e.take(), Ok(()));
        e.release();
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
