//! Sleeping until a backend has datagrams, a timeout passes or another
//! thread asks: what a progress thread does when it has nothing to do, so
//! that an idle endpoint answers an arriving request at once instead of at
//! its next timed wake-up.

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::time::Duration;

use nix::errno::Errno;
use nix::poll::{PollFd, PollFlags};
use nix::sys::eventfd::{EfdFlags, EventFd};
use nix::sys::time::TimeSpec;

/// A backend's readable descriptor plus an eventfd other threads write to.
#[derive(Debug)]
pub struct Sleeper {
    fd: OwnedFd,
    event: EventFd,
}

/// Why [`Sleeper::sleep`] returned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wake {
    /// The backend's descriptor is readable.
    Readable,
    /// Another thread called [`Sleeper::wake`].
    Woken,
    /// The timeout passed (or a signal interrupted the wait).
    Timeout,
}

impl Sleeper {
    /// Watches `fd` (duplicated, so the sleeper does not borrow the
    /// backend), usually [`Backend::wait_fd`](crate::Backend::wait_fd).
    pub fn new(fd: BorrowedFd<'_>) -> io::Result<Sleeper> {
        Ok(Sleeper {
            fd: fd.try_clone_to_owned()?,
            event: EventFd::from_flags(EfdFlags::EFD_NONBLOCK | EfdFlags::EFD_CLOEXEC)?,
        })
    }

    /// Blocks until the descriptor is readable, [`wake`](Self::wake) is
    /// called (also before this call: a wake is never lost), or `timeout`
    /// passes.
    pub fn sleep(&self, timeout: Duration) -> io::Result<Wake> {
        let mut fds = [
            PollFd::new(self.fd.as_fd(), PollFlags::POLLIN),
            PollFd::new(self.event.as_fd(), PollFlags::POLLIN),
        ];
        match nix::poll::ppoll(&mut fds, Some(TimeSpec::from_duration(timeout)), None) {
            Ok(0) | Err(Errno::EINTR) => return Ok(Wake::Timeout),
            Ok(_) => {}
            Err(e) => return Err(e.into()),
        }
        let ready = |f: &PollFd<'_>| f.revents().is_some_and(|r| !r.is_empty());
        if ready(&fds[1]) {
            // Reset the counter (non-blocking: EAGAIN if another sleeper
            // took it first).
            let _ = self.event.read();
        }
        Ok(if ready(&fds[0]) {
            Wake::Readable
        } else {
            Wake::Woken
        })
    }

    /// Ends the current (or the next) [`sleep`](Self::sleep).
    pub fn wake(&self) {
        let _ = self.event.write(1);
    }

    /// Blocks until `other` or the backend's descriptor is readable, or
    /// `timeout` passes (`None`: no timeout), without taking anything
    /// from either and without the wakes of [`wake`](Self::wake) (those
    /// are the progress thread's): for an application thread that waits
    /// for a completion event on `other` and takes arriving datagrams
    /// itself meanwhile.
    pub fn wait_with(
        &self,
        other: BorrowedFd<'_>,
        timeout: Option<Duration>,
    ) -> io::Result<Either> {
        let mut fds = [
            PollFd::new(other, PollFlags::POLLIN),
            PollFd::new(self.fd.as_fd(), PollFlags::POLLIN),
        ];
        match nix::poll::ppoll(&mut fds, timeout.map(TimeSpec::from_duration), None) {
            Ok(0) => return Ok(Either::Timeout),
            Err(Errno::EINTR) => return Ok(Either::Interrupted),
            Ok(_) => {}
            Err(e) => return Err(e.into()),
        }
        let ready = |f: &PollFd<'_>| f.revents().is_some_and(|r| !r.is_empty());
        Ok(if ready(&fds[0]) {
            Either::Other
        } else {
            Either::Readable
        })
    }
}

/// Why [`Sleeper::wait_with`] returned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Either {
    /// The other descriptor is readable (or in error: its reader finds out).
    Other,
    /// The backend's descriptor is readable.
    Readable,
    /// The timeout passed.
    Timeout,
    /// A signal handler ran.
    Interrupted,
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::UdpSocket;
    use std::sync::Arc;
    use std::time::Instant;

    #[test]
    fn waits_with_another_descriptor_but_not_for_wakes() {
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let s = Sleeper::new(rx.as_fd()).unwrap();
        let other = EventFd::from_flags(EfdFlags::EFD_NONBLOCK | EfdFlags::EFD_CLOEXEC).unwrap();
        // A wake is the progress thread's: it does not end this wait.
        s.wake();
        let short = Some(Duration::from_millis(20));
        assert_eq!(s.wait_with(other.as_fd(), short).unwrap(), Either::Timeout);
        other.write(1).unwrap();
        assert_eq!(s.wait_with(other.as_fd(), None).unwrap(), Either::Other);
        other.read().unwrap();
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        tx.send_to(b"x", rx.local_addr().unwrap()).unwrap();
        let long = Some(Duration::from_secs(5));
        assert_eq!(s.wait_with(other.as_fd(), long).unwrap(), Either::Readable);
    }

    #[test]
    fn wakes_on_a_datagram_a_wake_or_the_timeout() {
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let s = Arc::new(Sleeper::new(rx.as_fd()).unwrap());
        let t0 = Instant::now();
        assert_eq!(s.sleep(Duration::from_millis(30)).unwrap(), Wake::Timeout);
        assert!(t0.elapsed() >= Duration::from_millis(25));

        // A wake before the sleep is kept.
        s.wake();
        assert_eq!(s.sleep(Duration::from_secs(5)).unwrap(), Wake::Woken);

        // A wake from another thread ends a long sleep.
        let s2 = s.clone();
        let h = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            s2.wake();
        });
        let t0 = Instant::now();
        assert_eq!(s.sleep(Duration::from_secs(5)).unwrap(), Wake::Woken);
        assert!(t0.elapsed() < Duration::from_secs(4));
        h.join().unwrap();

        // A datagram.
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        tx.send_to(b"x", rx.local_addr().unwrap()).unwrap();
        assert_eq!(s.sleep(Duration::from_secs(5)).unwrap(), Wake::Readable);
    }
}
