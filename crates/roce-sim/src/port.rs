//! The transmit side of a port: line rate, propagation delay, busy state,
//! and the per-priority pause timers a received 802.1Qbb frame sets.
//!
//! 802.1Qbb §36.1.3.2 as modelled: a PFC frame with the class-enable bit
//! of priority p set and time t > 0 stops new transmissions of p for
//! t × 512 bit times at this port's rate, from the end of the frame's
//! reception (a frame already being sent finishes); time 0 (XON) resumes
//! at once; a new frame restarts the timer. The timer expires by itself.

use roce_wire::pfc::quanta_to_ps;
use roce_wire::MacControl;

use crate::event::Node;
use crate::time::Ps;

/// The PFC frame pausing `prio` for `quanta` (0 = XON).
pub(crate) fn pfc_frame(prio: u8, quanta: u16) -> MacControl {
    let mut q = [0u16; 8];
    q[prio as usize & 7] = quanta;
    MacControl::Pfc {
        enable: 1 << (prio & 7),
        quanta: q,
    }
}

/// Counters of one port, per priority.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct PortCounters {
    pub(crate) tx_bytes: [u64; 8],
    pub(crate) tx_pkts: [u64; 8],
    pub(crate) xoff_tx: [u64; 8],
    pub(crate) xon_tx: [u64; 8],
    pub(crate) pfc_rx: [u64; 8],
    pub(crate) paused_ps: [u64; 8],
    pub(crate) ecn_marked: [u64; 8],
    pub(crate) max_queue: [u64; 8],
}

/// A port's transmitter.
#[derive(Debug)]
pub(crate) struct PortTx {
    pub(crate) peer: Node,
    pub(crate) peer_port: u16,
    pub(crate) rate_bps: u64,
    pub(crate) delay: Ps,
    /// Host NIC: a frame is on the wire.
    pub(crate) busy: bool,
    /// Switch port: the wire is busy until then.
    pub(crate) busy_until: Ps,
    /// Switch port: a wake-up at `busy_until` is scheduled.
    pub(crate) wake_pending: bool,
    paused_until: [Ps; 8],
    pause_since: [Option<Ps>; 8],
    pub(crate) stats: PortCounters,
}

impl PortTx {
    pub(crate) fn new(peer: Node, peer_port: u16, rate_bps: u64, delay: Ps) -> PortTx {
        PortTx {
            peer,
            peer_port,
            rate_bps,
            delay,
            busy: false,
            busy_until: 0,
            wake_pending: false,
            paused_until: [0; 8],
            pause_since: [None; 8],
            stats: PortCounters::default(),
        }
    }

    /// True while priority `prio` may not start a frame.
    pub(crate) fn paused(&self, prio: u8, now: Ps) -> bool {
        now < self.paused_until[prio as usize & 7]
    }

    fn close(&mut self, p: usize, now: Ps) {
        if let Some(s) = self.pause_since[p].take() {
            self.stats.paused_ps[p] += self.paused_until[p].min(now).saturating_sub(s);
        }
    }

    /// Applies a received PFC/PAUSE frame at `now`; priorities for which
    /// `ignore` holds are counted but not paused (the watchdog). Returns the
    /// latest new expiry, at which the caller must try to send again.
    pub(crate) fn on_pause_frame(
        &mut self,
        now: Ps,
        frame: &MacControl,
        ignore: impl Fn(u8) -> bool,
    ) -> Option<Ps> {
        let mut wake = None;
        for prio in 0..8u8 {
            let Some(q) = frame.quanta_for(prio) else {
                continue;
            };
            let p = prio as usize;
            self.stats.pfc_rx[p] += 1;
            if ignore(prio) {
                continue;
            }
            if q > 0 {
                let until = now + quanta_to_ps(q, self.rate_bps);
                if self.paused_until[p] <= now {
                    self.close(p, now);
                    self.pause_since[p] = Some(now);
                }
                self.paused_until[p] = until;
                wake = wake.max(Some(until));
            } else {
                self.close(p, now);
                self.paused_until[p] = self.paused_until[p].min(now);
            }
        }
        wake
    }

    /// Ends any pause of `prio` now (the watchdog overriding it).
    pub(crate) fn force_resume(&mut self, prio: u8, now: Ps) {
        let p = prio as usize & 7;
        self.close(p, now);
        self.paused_until[p] = self.paused_until[p].min(now);
    }

    /// Closes the paused-time accounting at the end of the run.
    pub(crate) fn finish(&mut self, now: Ps) {
        for p in 0..8 {
            self.close(p, now);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pfc(prio: u8, q: u16) -> MacControl {
        let mut quanta = [0; 8];
        quanta[prio as usize] = q;
        MacControl::Pfc {
            enable: 1 << prio,
            quanta,
        }
    }

    #[test]
    fn pause_expires_after_quanta_times_512_over_rate() {
        let mut t = PortTx::new(Node::Switch(0), 0, 100_000_000_000, 0);
        let until = t.on_pause_frame(1_000, &pfc(3, 1000), |_| false);
        // 1000 quanta × 512 bits / 100 Gb/s = 5.12 µs.
        assert_eq!(until, Some(1_000 + 5_120_000));
        assert!(t.paused(3, 1_000));
        assert!(t.paused(3, 5_120_999));
        assert!(!t.paused(3, 5_121_000));
        assert!(!t.paused(0, 2_000), "other priorities flow");
        t.finish(10_000_000);
        assert_eq!(t.stats.paused_ps[3], 5_120_000);
        assert_eq!(t.stats.pfc_rx[3], 1);
    }

    #[test]
    fn refresh_extends_and_xon_resumes() {
        let mut t = PortTx::new(Node::Switch(0), 0, 40_000_000_000, 0);
        t.on_pause_frame(0, &pfc(3, 0xffff), |_| false);
        // 65535 quanta at 40 G ≈ 838.8 µs; refreshed at 400 µs.
        t.on_pause_frame(400_000_000, &pfc(3, 0xffff), |_| false);
        assert!(t.paused(3, 1_000_000_000));
        t.on_pause_frame(1_100_000_000, &pfc(3, 0), |_| false);
        assert!(!t.paused(3, 1_100_000_000));
        t.finish(2_000_000_000);
        assert_eq!(t.stats.paused_ps[3], 1_100_000_000);
        assert_eq!(t.stats.pfc_rx[3], 3);
    }

    #[test]
    fn ignored_priorities_are_counted_not_paused() {
        let mut t = PortTx::new(Node::Switch(0), 0, 100_000_000_000, 0);
        assert_eq!(t.on_pause_frame(0, &pfc(3, 100), |p| p == 3), None);
        assert!(!t.paused(3, 1));
        assert_eq!(t.stats.pfc_rx[3], 1);
    }
}
