//! The latency loops of `roce perf`, for every control plane (see
//! [`super::traffic`]), shaped like perftest's `run_iter_lat_write`,
//! `run_iter_lat_send` and `run_iter_lat` (READ/atomic): one message in
//! flight on the first QP. SEND and WRITE are ping-pongs whose latency is
//! half the time between two consecutive sends of one side (each side
//! waits for its own SEND or WRITE to complete before it looks for the
//! peer's answer, so the peer's ACK is on the round trip as it is for
//! perftest: docs/tools.md); READ and FETCH_ADD are round trips of one
//! operation, reported whole.

use std::time::{Duration, Instant};

use roce_verbs::{Completion, RemoteAddr, SendFlags, SendOp, SendWr};

use super::error::PerfError;
use super::messages::Test;
use super::progress::Progress;
use super::traffic::{half_intervals, Traffic, Watch};

/// After a timed WRITE ping-pong, how long the QP stays to acknowledge
/// the peer's last WRITE (the test has no closing round).
const LINGER: Duration = Duration::from_millis(500);
/// Messages up to this size are read whole by every look of the WRITE
/// ping-pong when they are checked, so that the copy it returns is the
/// data to verify (one read under the engine lock instead of two).
const SNAPSHOT_MAX: usize = 64;
/// Messages up to this size go inline (perftest's `-I` default is close).
const INLINE_MAX: u64 = 256;
/// The WR ids of SENDs carry this bit.
const SEND_BIT: u64 = 1 << 62;

/// Counts an empty spin; true every 256th, when a loop makes its idle
/// checks ([`Watch::idle`]).
fn spun(spins: &mut u32) -> bool {
    *spins = spins.wrapping_add(1);
    spins.is_multiple_of(256)
}

/// A received message of `got` against the peer's pattern `want` (its
/// last byte, the WRITE ping-pong's count, excluded when `tagged`).
fn check(got: &[u8], want: Option<&[u8]>, tagged: bool, n: u64) -> Result<(), PerfError> {
    let Some(want) = want else {
        return Ok(());
    };
    let k = got.len() - usize::from(tagged);
    if got[..k] != want[..k] {
        return Err(PerfError::Data(format!(
            "iteration {n}: the data received differs from what was sent"
        )));
    }
    Ok(())
}

/// perftest's WRITE latency loop: each side WRITEs `size` bytes whose
/// last byte is its write count into the peer's buffer, and waits until
/// its own buffer's last byte shows the peer's count. The server writes
/// first (perftest's condition `!(scnt < 1 && machine == SERVER)`): a side
/// that wrote early would see the peer's next count overwrite the one it
/// waits for. After each WRITE it polls until the WRITE completed, as
/// perftest does. Latency: half the time between consecutive writes. With
/// `-a` the sizes grow, so each size's count byte is one no earlier size
/// wrote. The memory is looked at before the CQ is polled: a poll that
/// comes after the peer's WRITE landed would send its held ACK alone
/// instead of with our answer.
pub(crate) fn write_ping_pong(
    t: &Traffic<'_>,
    client: bool,
    watch: &mut impl Watch,
) -> Result<Vec<f64>, PerfError> {
    let d = &t.lanes[0];
    let (size, iters) = (t.size, t.iters);
    let mut stamps = Vec::with_capacity(t.cap());
    let mut comps = Vec::with_capacity(16);
    let mut shown = Progress::new(t.duration, client.then_some(iters), size, t.progress_every);
    let last = size - 1;
    // What each look reads: the whole message when it is checked and
    // small, else its last byte.
    let whole = t.verify.is_some() && size as usize <= SNAPSHOT_MAX;
    let look = if whole { size as usize } else { 1 };
    let mut got = vec![0u8; size as usize];
    // Our WRITEs completed so far.
    let mut done = 0u64;
    // The run was cut short (Ctrl-C here or at the peer).
    let cut = std::cell::Cell::new(false);
    // Waits until our buffer's count byte shows `want`, or with `None`
    // until all `posted` WRITEs completed; false when a timed run ended
    // (or the run is cut short) first.
    let mut wait_for = |want: Option<u8>,
                        posted: u64,
                        got: &mut [u8],
                        comps: &mut Vec<Completion>|
     -> Result<bool, PerfError> {
        let mut spins = 0u32;
        loop {
            if let Some(w) = want {
                let buf = &mut got[size as usize - look..];
                d.mr.read(d.target + size - look as u64, buf)?;
                if buf[look - 1] == w {
                    return Ok(true);
                }
                if t.over() {
                    return Ok(false);
                }
            }
            d.poll(comps)?;
            done += comps.len() as u64;
            if !comps.is_empty() {
                watch.progressed();
            }
            if want.is_none() && done == posted {
                return Ok(true);
            }
            spins = spins.wrapping_add(1);
            // The peer's write is what this side waits for: a peer that
            // finished (or left) will not write again.
            if spins.is_multiple_of(256)
                && !watch.idle(want.is_some(), &|| {
                    format!("after {posted} of the {iters} iterations")
                })?
            {
                cut.set(true);
                return Ok(false);
            }
        }
    };
    let mut posted = 0u64;
    while posted < iters {
        let n = posted + 1;
        // The client waits for the server's write n; the server, after
        // its first write, for the client's write n - 1.
        let want = if client {
            Some(n as u8)
        } else {
            (n > 1).then(|| (n - 1) as u8)
        };
        if let Some(w) = want {
            if !wait_for(Some(w), posted, &mut got, &mut comps)? {
                break;
            }
            if t.verify.is_some() {
                // Checked before answering: the answer lets the peer
                // write the next message into the same place.
                if !whole {
                    d.mr.read(d.target, &mut got)?;
                }
                check(&got, t.verify, true, n)?;
            }
        }
        if t.over() {
            break;
        }
        d.mr.write(d.source + last, &[n as u8])?;
        stamps.push(Instant::now());
        let (addr, rkey) = t.remotes[0];
        let wr = SendWr::write(
            n,
            [d.mr.sge(d.source, size as u32)],
            RemoteAddr::new(addr, rkey),
        );
        d.qp.post_send(wr).map_err(super::during("post_send"))?;
        posted = n;
        // perftest polls until the WRITE completed before it looks for
        // the peer's (the ACK is on the round trip).
        if !wait_for(None, posted, &mut got, &mut comps)? {
            break;
        }
        shown.tick(n);
    }
    shown.finish();
    // The server's last write is answered by the client's last one.
    if !client && t.until.is_none() && !cut.get() && posted == iters {
        wait_for(Some(iters as u8), posted, &mut got, &mut comps)?;
    }
    // Every WRITE acknowledged before the next size (or the exit: the
    // test has no closing round, so a process that left with its last
    // WRITE unsent would leave the peer waiting).
    if !cut.get() {
        wait_for(None, posted, &mut got, &mut comps)?;
    }
    if t.until.is_some() {
        // A timed run ends on each side's own clock: the peer may still
        // answer our last WRITE with one of its own, which must be
        // acknowledged (rxe's perftest waits for that completion forever)
        // before the process exits.
        std::thread::sleep(LINGER);
    }
    Ok(half_intervals(&stamps))
}

/// perftest's READ / atomic latency loop (client only): one operation at
/// a time; latency is each operation's completion time (microseconds).
pub(crate) fn one_sided(t: &Traffic<'_>, watch: &mut impl Watch) -> Result<Vec<f64>, PerfError> {
    let d = &t.lanes[0];
    let (addr, rkey) = t.remotes[0];
    let remote = RemoteAddr::new(addr, rkey);
    let op = if t.test == Test::AtomicLat {
        SendOp::FetchAdd { remote, add: 1 }
    } else {
        SendOp::Read { remote }
    };
    let mut samples = Vec::with_capacity(t.cap());
    let mut comps = Vec::with_capacity(4);
    let mut shown = Progress::new(t.duration, Some(t.iters), t.size, t.progress_every);
    'ops: for n in 0..t.iters {
        if t.over() || watch.stopping() {
            break;
        }
        let t0 = Instant::now();
        let wr = SendWr::new(n, op, [d.mr.sge(d.source, t.len())]);
        d.qp.post_send(wr).map_err(super::during("post_send"))?;
        let mut spins = 0u32;
        loop {
            d.poll(&mut comps)?;
            if !comps.is_empty() {
                watch.progressed();
                break;
            }
            spins = spins.wrapping_add(1);
            if spins.is_multiple_of(256)
                && !watch.idle(false, &|| format!("after {n} of {} operations", t.iters))?
            {
                break 'ops;
            }
        }
        samples.push(t0.elapsed().as_secs_f64() * 1e6);
        shown.tick(n);
    }
    shown.finish();
    Ok(samples)
}

/// perftest's SEND latency loop: the client sends first, each side sends
/// after each receive (re-posting it); the latency of each iteration is
/// half the time between two consecutive sends of this side, as perftest
/// computes it (microseconds). The caller posted the ring.
pub(crate) fn send_ping_pong(
    t: &Traffic<'_>,
    client: bool,
    watch: &mut impl Watch,
) -> Result<Vec<f64>, PerfError> {
    let d = &t.lanes[0];
    let (size, iters) = (t.size, t.iters);
    let mut stamps = Vec::with_capacity(t.cap());
    let mut comps = Vec::with_capacity(16);
    let mut shown = Progress::new(t.duration, client.then_some(iters), size, t.progress_every);
    let mut reposted = d.ring_slots(size, iters);
    let (mut sent, mut received) = (0u64, 0u64);
    let mut spins = 0u32;
    let mut got = vec![0u8; if t.verify.is_some() { size as usize } else { 0 }];
    // Each SEND's id carries the size, so that the last SEND of the
    // previous size, whose completion may come late, is not taken for
    // one of this size's.
    let id = |n: u64| SEND_BIT | size << 32 | n;
    let inline = if size <= INLINE_MAX {
        SendFlags::SIGNALED | SendFlags::INLINE
    } else {
        SendFlags::SIGNALED
    };
    // This size's last SEND has completed.
    let mut completed = true;
    let mut take = |comps: &[Completion],
                    sent: u64,
                    received: &mut u64,
                    completed: &mut bool,
                    got: &mut [u8]| {
        for c in comps {
            if c.wr_id() & SEND_BIT != 0 {
                *completed |= sent > 0 && c.wr_id() == id(sent - 1);
                continue;
            }
            *received += 1;
            if t.verify.is_some() {
                d.mr.read(d.slot_at(c.wr_id(), size), got)?;
                check(got, t.verify, false, *received)?;
            }
            if reposted < iters {
                reposted += 1;
                d.repost(c.wr_id(), size)?;
            }
        }
        Ok::<(), PerfError>(())
    };
    // One look at the CQ: true when the peer has gone quiet for good.
    let mut wait = |comps: &mut Vec<Completion>,
                    spins: &mut u32,
                    sent: u64,
                    received: &mut u64,
                    completed: &mut bool,
                    got: &mut [u8]| {
        d.poll(comps)?;
        take(comps, sent, received, completed, got)?;
        if !comps.is_empty() {
            watch.progressed();
            return Ok::<bool, PerfError>(false);
        }
        let received = *received;
        Ok(spun(spins)
            && !watch.idle(true, &|| {
                format!("after {sent} sends and {received} receives of the {iters} iterations")
            })?)
    };
    'run: {
        while sent < iters && !t.over() {
            // The server (and the client after its first send) waits for
            // the peer's message before sending, and, as perftest (whose
            // every latency SEND is signaled), for its SEND's completion
            // before anything else.
            if completed && (client && sent == 0 || received > sent - u64::from(client)) {
                stamps.push(Instant::now());
                let mut wr = SendWr::send(id(sent), [d.mr.sge(d.source, size as u32)]);
                wr.flags = inline;
                d.qp.post_send(wr).map_err(super::during("post_send"))?;
                sent += 1;
                completed = false;
                shown.tick(sent);
                continue;
            }
            // The peer's messages are what this side waits for: a peer
            // that finished (or left) sends no more.
            if wait(
                &mut comps,
                &mut spins,
                sent,
                &mut received,
                &mut completed,
                &mut got,
            )? {
                break 'run;
            }
        }
        // The client's last reply arrives after its last send. The server
        // does not wait for its last SEND's completion: the client may be
        // gone by then (its last ACK can be lost, and nobody would answer
        // a resend).
        while client && (received < iters || !completed) && !t.over() {
            // The peer's messages are what this side waits for: a peer
            // that finished (or left) sends no more.
            if wait(
                &mut comps,
                &mut spins,
                sent,
                &mut received,
                &mut completed,
                &mut got,
            )? {
                break 'run;
            }
        }
    }
    shown.finish();
    Ok(half_intervals(&stamps))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A message is checked against the peer's pattern, its last byte
    /// (the WRITE ping-pong's count) aside when tagged; nothing is
    /// checked with `--no-verify`.
    #[test]
    fn messages_are_checked_against_the_peers_pattern() {
        let want = [1u8, 2, 3, 4];
        assert!(check(&[1, 2, 3, 4], Some(&want), false, 1).is_ok());
        assert!(check(&[1, 2, 3, 9], Some(&want), true, 1).is_ok());
        let e = check(&[1, 2, 3, 9], Some(&want), false, 7).unwrap_err();
        assert!(matches!(e, PerfError::Data(_)), "{e:?}");
        assert!(e.to_string().contains("iteration 7"), "{e}");
        assert!(check(&[0, 0, 0, 0], None, false, 1).is_ok());
    }

    /// The idle checks come every 256th empty spin.
    #[test]
    fn idle_checks_every_256_spins() {
        let mut spins = 0;
        let n = (0..1024).filter(|_| spun(&mut spins)).count();
        assert_eq!(n, 4);
    }
}
