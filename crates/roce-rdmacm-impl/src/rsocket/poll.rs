//! `rpoll` and `rselect` over a mix of rsockets and other descriptors:
//! rsockets are checked by making progress on them (completions, CM
//! events), other descriptors by `poll`; when nothing is ready, one
//! `poll` sleeps on all of them (an rsocket through its CQ's channel and
//! its CM channel) and the check runs again.

use std::os::raw::c_int;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::*;
use crate::ffi::minus_one;

/// The events of `sock` ready now (`rs_poll_rs`).
fn check(sock: &Sock, events: i16) -> i16 {
    let mut g = sock.lock();
    let st = g.state;
    if st & RS_CONNECTED != 0 || st == RS_DISCONNECTED || st == RS_ERROR {
        let _ = g.progress(&sock.ch);
        let mut r = 0;
        let st = g.state;
        if let Some(s) = g.s.as_ref() {
            if events & libc::POLLIN != 0 && (!s.rmsg.is_empty() || st & RS_READABLE == 0) {
                r |= libc::POLLIN;
            }
            if events & libc::POLLOUT != 0 && s.can_send() {
                r |= libc::POLLOUT;
            }
        }
        // rsocket.c reports the hang-up at once; it is held back here
        // while received data waits to be read (as TCP reports POLLIN
        // before the end of the stream), so a program polling with
        // POLLHUP as fatal (rstream -T a) still reads the last data,
        // which comes in the same burst as the peer's DISCONNECT.
        let unread = g.s.as_ref().is_some_and(|s| !s.rmsg.is_empty());
        if st & RS_CONNECTED == 0 && !unread {
            r |= if st == RS_DISCONNECTED {
                libc::POLLHUP
            } else {
                libc::POLLERR
            };
        }
        return r;
    }
    if st == RS_LISTENING {
        let mut p = libc::pollfd {
            fd: sock.fd,
            events,
            revents: 0,
        };
        // SAFETY: one live pollfd, no wait.
        unsafe { libc::poll(&mut p, 1, 0) };
        return p.revents;
    }
    if st == RS_CONNECTING {
        g.cm_events(&sock.ch);
        if g.state != RS_CONNECTING {
            drop(g);
            return check(sock, events);
        }
    }
    if g.state == RS_CONNECT_ERROR {
        return (events & (libc::POLLIN | libc::POLLOUT)) | libc::POLLERR;
    }
    0
}

/// One pass over `fds`: the ready count, `revents` set.
fn pass(fds: &mut [libc::pollfd], socks: &[Option<Arc<Sock>>]) -> c_int {
    let mut n = 0;
    for (f, s) in fds.iter_mut().zip(socks) {
        f.revents = match s {
            Some(s) => check(s, f.events),
            None => {
                let mut p = libc::pollfd {
                    fd: f.fd,
                    events: f.events,
                    revents: 0,
                };
                // SAFETY: one live pollfd, no wait.
                unsafe { libc::poll(&mut p, 1, 0) };
                p.revents
            }
        };
        if f.revents != 0 {
            n += 1;
        }
    }
    n
}

/// `rpoll`'s body.
fn rpoll_in(fds: &mut [libc::pollfd], timeout: c_int) -> Res<c_int> {
    let socks: Vec<Option<Arc<Sock>>> = fds.iter().map(|f| get(f.fd).ok()).collect();
    let end = (timeout >= 0).then(|| Instant::now() + Duration::from_millis(timeout as u64));
    loop {
        let n = pass(fds, &socks);
        if n > 0 || timeout == 0 {
            return Ok(n);
        }
        // Arm, and what to sleep on.
        let mut wait_fds = Vec::with_capacity(fds.len() * 2);
        for (f, s) in fds.iter().zip(&socks) {
            match s {
                Some(s) => {
                    wait_fds.push(libc::pollfd {
                        fd: s.fd,
                        events: libc::POLLIN,
                        revents: 0,
                    });
                    let mut g = s.lock();
                    if let Some(st) = g.s.as_mut() {
                        if !st.armed {
                            st.arm();
                        }
                        wait_fds.push(libc::pollfd {
                            fd: st.comp_fd(),
                            events: libc::POLLIN,
                            revents: 0,
                        });
                    }
                }
                None => wait_fds.push(libc::pollfd {
                    fd: f.fd,
                    events: f.events,
                    revents: 0,
                }),
            }
        }
        // Completions that came while arming.
        let n = pass(fds, &socks);
        if n > 0 {
            return Ok(n);
        }
        let ms = match end {
            Some(e) => {
                let now = Instant::now();
                if now >= e {
                    return Ok(0);
                }
                (e - now).as_millis().min(1000) as c_int
            }
            None => 1000,
        };
        // SAFETY: live pollfds.
        let r = unsafe { libc::poll(wait_fds.as_mut_ptr(), wait_fds.len() as libc::nfds_t, ms) };
        if r < 0 {
            let e = std::io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::EINTR);
            return Err(e);
        }
        for s in socks.iter().flatten() {
            if let Some(st) = s.lock().s.as_mut() {
                st.drain_events();
            }
        }
    }
}

export! {
    /// `rpoll`: `poll` over rsockets and other descriptors.
    fn rpoll(fds: *mut libc::pollfd, nfds: libc::nfds_t, timeout: c_int) -> c_int {
        minus_one(|| {
            if nfds == 0 {
                return rpoll_in(&mut [], timeout);
            }
            if fds.is_null() {
                return Err(libc::EFAULT);
            }
            // SAFETY: the program's array of `nfds` entries.
            let f = unsafe { std::slice::from_raw_parts_mut(fds, nfds as usize) };
            rpoll_in(f, timeout)
        })
    }
}

/// Whether `fd` is in the set.
///
/// # Safety
/// `set` is NULL or a live fd_set.
unsafe fn isset(fd: c_int, set: *mut libc::fd_set) -> bool {
    // SAFETY: the caller's contract; fd below FD_SETSIZE.
    !set.is_null() && unsafe { libc::FD_ISSET(fd, set) }
}

export! {
    /// `rselect`: `select` over rsockets and other descriptors, as
    /// `rpoll` (a descriptor with POLLHUP counts as readable).
    fn rselect(nfds: c_int, r: *mut libc::fd_set, w: *mut libc::fd_set, x: *mut libc::fd_set, tv: *mut libc::timeval) -> c_int {
        minus_one(|| {
            if !(0..=libc::FD_SETSIZE as c_int).contains(&nfds) {
                return Err(libc::EINVAL);
            }
            let mut fds = Vec::new();
            for fd in 0..nfds {
                // SAFETY: the program's sets (or NULL); fd < FD_SETSIZE.
                let (ir, iw, ix) = unsafe { (isset(fd, r), isset(fd, w), isset(fd, x)) };
                if ir || iw || ix {
                    let events = if ir { libc::POLLIN } else { 0 } | if iw { libc::POLLOUT } else { 0 };
                    fds.push(libc::pollfd { fd, events, revents: 0 });
                }
            }
            // SAFETY: the program's timeval, if any.
            let timeout = match unsafe { tv.as_ref() } {
                None => -1,
                Some(t) => (t.tv_sec * 1000 + t.tv_usec / 1000) as c_int,
            };
            let n = rpoll_in(&mut fds, timeout)?;
            // SAFETY: the program's sets (or NULL).
            unsafe {
                for s in [r, w, x] {
                    if !s.is_null() {
                        libc::FD_ZERO(s);
                    }
                }
            }
            if n <= 0 {
                return Ok(n);
            }
            let mut cnt = 0;
            for f in &fds {
                // SAFETY: the program's sets (or NULL); fd < FD_SETSIZE.
                unsafe {
                    if !r.is_null() && f.revents & (libc::POLLIN | libc::POLLHUP) != 0 {
                        libc::FD_SET(f.fd, r);
                        cnt += 1;
                    }
                    if !w.is_null() && f.revents & libc::POLLOUT != 0 {
                        libc::FD_SET(f.fd, w);
                        cnt += 1;
                    }
                    if !x.is_null() && f.revents & !(libc::POLLIN | libc::POLLOUT) != 0 {
                        libc::FD_SET(f.fd, x);
                        cnt += 1;
                    }
                }
            }
            Ok(cnt)
        })
    }
}
