//! The receive half of [`UdpBackend`]: splitting what `recvmmsg` returned
//! (GRO-coalesced runs included) into UDP payloads, each with what the
//! socket said of its header (source, TOS; [`RxHeader`]). The engine
//! checks the ICRC from those (`roce_core::Device::handle_udp`): nothing
//! here reads a payload byte.

use roce_wire::RxHeader;

use super::UdpBackend;
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
                // A UDP socket never shows the IPv4 identification.
                let h = RxHeader::new(peer, self.cfg.local, info.tos.unwrap_or(0));
                let piece = self.cfg.cpu.copy_piece;
                let pushed = batch.push_payload_with(h, RxMeta::default(), |slot| {
                    let n = payload.len();
                    if n > slot.len() {
                        return 0;
                    }
                    crate::emu::copy_payload(&mut slot[..n], payload, piece);
                    n
                });
                if pushed {
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
