//! The receive half of [`UdpBackend`]: splitting what `recvmmsg` returned
//! (GRO-coalesced runs included) into datagrams with rebuilt IP and UDP
//! headers, and checking IPv4 ICRCs.

use roce_wire::crc32::Code;
use roce_wire::{bth, icrc};

use super::hdr::{self, RxHdr};
use super::{IcrcCheck, UdpBackend, UdpStats};
use crate::backend::{PacketBatch, RxMeta};

/// Whether to receive again right after a one-slot probe (the first look
/// after an idle one) found a datagram, learnt from what the call after
/// such a hit finds.
///
/// In a stream the next call finds more (in a slow guest, where the
/// receiver often catches up with the sender, those calls are what makes
/// batches; skipping them made write-bw much slower there). In a ping-pong
/// the request comes alone, and asking again is a system call that finds
/// nothing between the request's arrival and the engine seeing it.
#[derive(Clone, Copy, Debug)]
pub(super) struct FollowUp {
    /// Calls after a hit that may find nothing before they stop: refilled
    /// whenever one finds something.
    credit: u8,
    /// The last call was a probe that found a datagram.
    after_hit: bool,
}

impl FollowUp {
    const CREDIT: u8 = 8;

    pub(super) fn new() -> FollowUp {
        FollowUp {
            credit: FollowUp::CREDIT,
            after_hit: false,
        }
    }

    /// After every receive call: learns from the one that follows a hit.
    pub(super) fn learn(&mut self, got: usize) {
        if std::mem::take(&mut self.after_hit) {
            self.credit = if got > 0 {
                FollowUp::CREDIT
            } else {
                self.credit.saturating_sub(1)
            };
        }
    }

    /// A probe found a datagram: whether to ask again at once.
    pub(super) fn probe_hit(&mut self) -> bool {
        self.after_hit = true;
        self.credit > 0
    }
}

impl UdpBackend {
    pub(super) fn push_rx(&mut self, batch: &mut PacketBatch) {
        let hl = hdr::rebuilt_header_len(self.v6);
        while self.rx_cur < self.rx_info.len() {
            let info = self.rx_info[self.rx_cur];
            let base = self.rx_cur * self.rx_slot;
            let seg = info
                .gro_size
                .map_or(info.len, usize::from)
                .clamp(1, info.len.max(1));
            if self.rx_off == 0 && info.gro_size.is_some_and(|g| usize::from(g) < info.len) {
                self.stats.rx_gro_batches += 1;
            }
            if info.truncated {
                self.stats.rx_too_big += 1;
                self.rx_off = info.len;
            }
            while self.rx_off < info.len {
                if batch.is_full() {
                    return;
                }
                let end = (self.rx_off + seg).min(info.len);
                let payload = &self.rx_arena[base + self.rx_off..base + end];
                self.rx_off = end;
                let Some(peer) = info.peer else {
                    continue;
                };
                let h = RxHdr {
                    src: peer.ip(),
                    sport: peer.port(),
                    dst: self.cfg.local,
                    tos: info.tos.unwrap_or(0),
                };
                let mut head = [0u8; 48];
                if !hdr::rebuild(&mut head[..hl], &h, payload.len(), 0) {
                    self.stats.rx_too_big += 1;
                    continue;
                }
                if !self.v6 {
                    if self.cfg.icrc_check != IcrcCheck::Off {
                        let found = check_v4(
                            &mut self.stats,
                            &mut self.rebaser,
                            self.cfg.cpu.icrc_code,
                            &head[..hl],
                            payload,
                        );
                        match found {
                            Some(0) => {}
                            // A GSO segment's number: the header says it.
                            Some(id) => {
                                hdr::rebuild(&mut head[..hl], &h, payload.len(), id);
                            }
                            None => {
                                self.stats.rx_icrc_bad += 1;
                                if self.cfg.icrc_check == IcrcCheck::Require {
                                    self.stats.rx_icrc_dropped += 1;
                                    continue;
                                }
                            }
                        }
                    }
                    // Handed on: the engine cannot verify it (a dropped
                    // one is not counted here).
                    self.stats.rx_icrc_unverified += 1;
                }
                // IPv6: every covered field is known, the engine verifies.
                let meta = if self.v6 {
                    RxMeta::exact()
                } else {
                    RxMeta::inexact()
                };
                let piece = self.cfg.cpu.copy_piece;
                let pushed = batch.push_with(|slot| {
                    let total = hl + payload.len();
                    if total > slot.len() {
                        return 0;
                    }
                    slot[..hl].copy_from_slice(&head[..hl]);
                    crate::emu::copy_payload(&mut slot[hl..total], payload, piece);
                    total
                });
                if pushed {
                    batch.set_meta(batch.len() - 1, meta);
                    self.stats.rx_datagrams += 1;
                    self.stats.flow_rx_datagrams += u64::from(self.rx_from_flow);
                    self.stats.rx_bytes += payload.len() as u64;
                } else {
                    self.stats.rx_too_big += 1;
                }
            }
            self.rx_cur += 1;
            self.rx_off = 0;
        }
    }
}

/// Checks an IPv4 datagram's ICRC assuming ID 0 (`head` is its rebuilt
/// header), then the IDs of GSO segments
/// ([`icrc::Rebaser::solve_ipv4_id`]); returns the ID that matches, and
/// counts it, or `None`.
fn check_v4(
    stats: &mut UdpStats,
    rebaser: &mut icrc::Rebaser,
    code: Code,
    head: &[u8],
    payload: &[u8],
) -> Option<u16> {
    let hl = head.len();
    let n = payload.len();
    if n < bth::HEADER_LEN + icrc::LEN {
        return None;
    }
    let c0 = icrc::compute_with(code, head, &payload[..n - icrc::LEN]).ok()?;
    let mut got = [0u8; 4];
    got.copy_from_slice(&payload[n - 4..]);
    let got = icrc::read(got);
    if c0 == got {
        stats.rx_icrc_ok_id0 += 1;
        return Some(0);
    }
    let id = rebaser.solve_ipv4_id(c0, got, hl + n - icrc::LEN, hdr::MAX_SOLVED_ID)?;
    stats.rx_icrc_ok_gso_id += 1;
    Some(id)
}
