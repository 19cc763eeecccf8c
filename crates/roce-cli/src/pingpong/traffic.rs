//! The ping-pong loop of the rdma-core tools, once both sides' QPs are
//! connected ([`mod@super::run`]).
//!
//! The loop is theirs: `rx_depth` receives are posted up front (to the QP,
//! or to the SRQ) and topped up when at most 1 (SRQ: `num_qp`) remain; the
//! client posts one SEND per QP at the start; per QP a new SEND is posted
//! when both the previous SEND and a receive have completed, while fewer
//! than `iters` SENDs have completed; the run ends when `iters` SENDs and
//! `iters` receives have completed (for SRQ, in total over the QPs). Every
//! side sends back what it last received on that QP.

use std::time::{Duration, Instant};

use roce_verbs::{Completion, Qpn};

use super::error::{FirstDiff, PingpongError};
use super::run::{deadline, Side, GRH, RECV, SEND};
use super::Transport;

/// Page size the tools' `-c` works in (the first byte of each page).
const PAGE: usize = 4096;

/// What `-c` expects a sender's buffer to hold: zero at the start of each
/// page (what rdma-core's `-c` checks) and bytes that change with `k`
/// elsewhere.
pub(crate) fn pattern(k: u64, len: usize) -> Vec<u8> {
    (0..len)
        .map(|j| {
            if j % PAGE == 0 {
                0
            } else {
                (j as u64)
                    .wrapping_mul(31)
                    .wrapping_add(k.wrapping_mul(101))
                    .wrapping_add(0x5a) as u8
            }
        })
        .collect()
}

/// True for what an rdma-core client's buffer holds: one byte value
/// throughout (0x7b, or 0 for srq), the start of each page possibly 0
/// (their `-c`).
fn rdma_core_content(b: &[u8]) -> bool {
    let fill = b.get(1).or(b.first()).copied().unwrap_or(0);
    b.iter()
        .enumerate()
        .all(|(j, &x)| x == fill || (j % PAGE == 0 && x == 0))
}

/// How the server's `-c` reads the client's data, decided on the first
/// message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Peer {
    Unknown,
    /// `roce pingpong -c`: `pattern(k)`.
    Ours,
    /// An rdma-core client: its uniform buffer.
    RdmaCore,
}

/// How long a connected peer may leave this side without a completion:
/// the tools ping-pong without pause, so a peer silent this long is gone
/// (a killed process sends nothing; its QP just stops answering).
const PEER_SILENCE: Duration = Duration::from_secs(10);

/// Waits for completions: busy-polling, or on the channel with `-e`; at
/// most [`PEER_SILENCE`] (less with a shorter `--timeout`, unbounded with
/// `--timeout 0`).
fn wait(s: &Side, out: &mut Vec<Completion>, events: &mut u64) -> Result<(), PingpongError> {
    let limit = s.p.timeout.map(|t| t.min(PEER_SILENCE));
    let end = deadline(limit);
    let idle = || PingpongError::PeerSilent {
        secs: limit.map_or(0, |t| t.as_secs()),
        peer: if s.is_client {
            "the server"
        } else {
            "the client"
        },
    };
    if let Some(ch) = &s.channel {
        loop {
            // Completions already queued (more than one event's worth).
            if s.cq.poll(out, 64)? > 0 {
                return Ok(());
            }
            let left = end.map(|e| e.saturating_duration_since(Instant::now()));
            if left.is_some_and(|l| l.is_zero()) {
                return Err(idle());
            }
            let Some(cq) = ch.get_event(left) else {
                return Err(idle());
            };
            *events += 1;
            cq.req_notify(false)?;
        }
    }
    let mut spins = 0u64;
    loop {
        if s.cq.poll(out, 64)? > 0 {
            return Ok(());
        }
        spins += 1;
        if spins.is_multiple_of(64) {
            std::thread::yield_now();
            if end.is_some_and(|e| Instant::now() >= e) {
                return Err(idle());
            }
        }
    }
}

pub(super) fn pingpong(s: &Side) -> Result<(), PingpongError> {
    let p = &s.p;
    let nq = s.qps.len();
    let size = p.size as usize;
    let srq = p.transport == Transport::Srq;
    let iters = u64::from(p.iters);
    let refill_at = if srq { p.num_qp } else { 1 };
    // What each QP sends next, and what it last sent (for the client's -c).
    let initial = {
        let mut b = vec![0u8; size];
        s.mr.read(s.send_off(0), &mut b)?;
        b
    };
    let mut next: Vec<Vec<u8>> = vec![initial; nq];
    let mut last_sent: Vec<Vec<u8>> = vec![Vec::new(); nq];
    let mut sent_k = vec![0u64; nq];
    let mut recv_k = vec![0u64; nq];
    let mut pending = vec![0u64; nq];
    let mut free: Vec<u32> = Vec::new();
    let mut routs = p.rx_depth;
    let (mut scnt, mut rcnt) = (0u64, 0u64);
    let mut peer = Peer::Unknown;
    let mut events = 0u64;
    let qpn_index = |qpn: Qpn| s.qps.iter().position(|q| q.qpn() == qpn);
    let content = |k: u64| pattern(if srq { 0 } else { k }, size);

    let send = |q: usize,
                next: &mut Vec<Vec<u8>>,
                last_sent: &mut Vec<Vec<u8>>,
                sent_k: &mut Vec<u64>|
     -> Result<(), PingpongError> {
        if p.chk && s.is_client {
            next[q] = content(sent_k[q]);
        }
        s.post_send(q, &next[q])?;
        last_sent[q] = next[q].clone();
        sent_k[q] += 1;
        Ok(())
    };

    let start = Instant::now();
    if s.is_client {
        for (q, pend) in pending.iter_mut().enumerate() {
            send(q, &mut next, &mut last_sent, &mut sent_k)?;
            *pend = SEND | RECV;
        }
    } else {
        pending.fill(RECV);
    }

    let mut wcs = Vec::with_capacity(64);
    let mut buf = vec![0u8; s.rslot as usize];
    while rcnt < iters || scnt < iters {
        wcs.clear();
        wait(s, &mut wcs, &mut events)?;
        for wc in &wcs {
            if !wc.is_success() {
                return Err(PingpongError::Completion {
                    status: wc.status(),
                    wr_id: wc.wr_id(),
                });
            }
            let Some(q) = qpn_index(wc.qp_num()) else {
                return Err(PingpongError::UnknownQpn(wc.qp_num().value()));
            };
            let kind = wc.wr_id() & 0xff;
            match kind {
                SEND => scnt += 1,
                RECV => {
                    let slot = (wc.wr_id() >> 8) as u32;
                    let off = if p.transport == Transport::Ud {
                        GRH as usize
                    } else {
                        0
                    };
                    let want = off + size;
                    if p.chk && wc.byte_len() as usize != want {
                        return Err(PingpongError::Length {
                            got: wc.byte_len(),
                            qpn: wc.qp_num().value(),
                            want,
                        });
                    }
                    s.mr.read(s.recv_off(slot), &mut buf)?;
                    let got = &buf[off..want];
                    if p.chk {
                        let k = recv_k[q];
                        let ok = if s.is_client {
                            got == last_sent[q].as_slice()
                        } else {
                            if peer == Peer::Unknown {
                                peer = if got == content(k).as_slice() {
                                    Peer::Ours
                                } else {
                                    Peer::RdmaCore
                                };
                            }
                            match peer {
                                Peer::Ours => got == content(k).as_slice(),
                                _ => rdma_core_content(got),
                            }
                        };
                        if !ok {
                            let sent = s.is_client.then(|| last_sent[q].as_slice());
                            return Err(PingpongError::Data {
                                message: k + 1,
                                qpn: wc.qp_num().value(),
                                diff: sent.and_then(|w| first_diff(got, w)),
                            });
                        }
                    }
                    recv_k[q] += 1;
                    next[q].copy_from_slice(got);
                    free.push(slot);
                    routs -= 1;
                    if routs <= refill_at {
                        for slot in free.drain(..) {
                            s.post_recv(slot)?;
                            routs += 1;
                        }
                        if routs < p.rx_depth {
                            return Err(PingpongError::Refill(routs));
                        }
                    }
                    rcnt += 1;
                }
                _ => return Err(PingpongError::UnknownWrId(wc.wr_id())),
            }
            pending[q] &= !kind;
            if scnt < iters && pending[q] == 0 {
                send(q, &mut next, &mut last_sent, &mut sent_k)?;
                pending[q] = SEND | RECV;
            }
        }
    }
    let usec = start.elapsed().as_secs_f64() * 1e6;
    if s.channel.is_some() {
        s.cq.ack_events(events);
    }
    let bytes = u64::from(p.size) * iters * 2;
    println!(
        "{bytes} bytes in {:.2} seconds = {:.2} Mbit/sec",
        usec / 1e6,
        bytes as f64 * 8.0 / usec
    );
    println!(
        "{iters} iters in {:.2} seconds = {:.2} usec/iter",
        usec / 1e6,
        usec / iters as f64
    );
    // The last SENDs may still wait for their ACKs: give the RC peer a
    // moment so it does not retransmit into a closed port.
    linger(s);
    Ok(())
}

/// Keeps the context (and its progress thread, which sends ACKs) alive a
/// moment after the last completion.
fn linger(_s: &Side) {
    std::thread::sleep(Duration::from_millis(200));
}

/// Where `got` first differs from `sent`, if it does within both.
fn first_diff(got: &[u8], sent: &[u8]) -> Option<FirstDiff> {
    let offset = got.iter().zip(sent).position(|(a, b)| a != b)?;
    Some(FirstDiff {
        offset,
        got: got[offset],
        sent: sent[offset],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chk_pattern_zero_at_pages_and_varies() {
        let a = pattern(0, 9000);
        let b = pattern(1, 9000);
        assert_eq!((a[0], a[4096], a[8192]), (0, 0, 0));
        assert_ne!(a, b);
        assert!(!rdma_core_content(&a));
        let mut theirs = vec![0x7bu8; 8192];
        assert!(rdma_core_content(&theirs));
        theirs[4096] = 0;
        theirs[0] = 0;
        assert!(rdma_core_content(&theirs));
        theirs[5] = 1;
        assert!(!rdma_core_content(&theirs));
        assert!(rdma_core_content(&[0u8; 64]));
    }
}
