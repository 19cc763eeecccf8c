//! The receive side: [`Device::handle_datagram`].

use roce_wire::{Ecn, Error as WireError, Owner, RocePacket, Transport};

use super::{Device, RxOutcome};
use crate::qp::accept::Reject;
use crate::qp::state::QpState;
use crate::qp::Ctx;
use crate::Nanos;

impl Device {
    /// Processes one received IP datagram (IPv4 or IPv6 carrying RoCE v2).
    ///
    /// Returns [`RxOutcome::Done`], except on a
    /// [`shared`](super::DeviceConfig::shared) device for a datagram not
    /// already [`forwarded`](roce_wire::RxMeta::forwarded) that names a
    /// QP, CM listener or connection this device does not have:
    /// [`RxOutcome::Foreign`], for the driver to hand it to its owner
    /// (docs/host.md).
    pub fn handle_datagram(
        &mut self,
        now: Nanos,
        dgram: &[u8],
        meta: roce_wire::RxMeta,
    ) -> RxOutcome {
        self.counters.rx_datagrams += 1;
        let out = self.receive(now, dgram, meta);
        if let RxOutcome::Foreign(_) = out {
            self.counters.rx_foreign += 1;
        }
        out
    }

    fn receive(&mut self, now: Nanos, dgram: &[u8], meta: roce_wire::RxMeta) -> RxOutcome {
        // Another process sharing the address may own what this datagram
        // names, unless it handed the datagram on already (docs/host.md).
        let may_forward = self.config.shared && !meta.forwarded;
        let p = match RocePacket::parse_ip(dgram) {
            Ok(p) => p,
            Err(_) => {
                self.counters.rx_malformed += 1;
                return RxOutcome::Done;
            }
        };
        if meta.header_exact {
            if let Err(WireError::BadIcrc { .. }) = p.check_icrc_with(self.config.icrc_code) {
                self.counters.rx_bad_icrc += 1;
                return RxOutcome::Done;
            }
        } else {
            self.counters.rx_icrc_unchecked += 1;
        }
        let op = p.bth.opcode;
        if p.bth.dest_qp == roce_wire::mad::GSI_QPN && op.transport() != Transport::Cnp {
            return self.cm_handle(now, &p, may_forward);
        }
        let qpn = p.bth.dest_qp.value();
        let Some(qp) = self.qps.get_mut(&qpn) else {
            // QP0 and QP1 are no one process's (roce_wire::Owner::Qp).
            if may_forward && qpn > 1 {
                return RxOutcome::Foreign(Owner::Qp(qpn));
            }
            self.counters.rx_unknown_qp += 1;
            return RxOutcome::Done;
        };
        // Only the connected peer's packets, to our address, in the QP's
        // partition and a state that takes them (IBTA Vol 1 §9.6).
        if let Err(why) = qp.common.check_packet(&p, &self.config.addrs) {
            match why {
                Reject::State => qp.common.counters.drop_bad_state += 1,
                _ => qp.common.counters.drop_invalid += 1,
            }
            return RxOutcome::Done;
        }
        if op.transport() == Transport::Cnp {
            // Reaction point (docs/dcb.md §4): the CNP names our QP, and
            // came from its peer (checked above).
            self.counters.rx_cnp += 1;
            qp.common.cc.on_cnp(now);
            self.note_timer(qpn);
            return RxOutcome::Done;
        }
        let ip_hlen = p.ip.header_len().min(dgram.len());
        let ce = p.ip.ecn() == Ecn::Ce;
        let mut ctx = ctx!(self, now);
        if op.kind().is_request() {
            let accepted = qp.handle_request(&p, &dgram[..ip_hlen], &mut ctx);
            // Notification point (docs/protocol.md §7): CE → CNP to the
            // peer, only for a packet the QP took (a forged or stale one
            // must not make us send CNPs).
            if ce && accepted {
                qp.common.cc.on_ce(now);
            }
        } else if matches!(qp.common.state, QpState::Rts | QpState::Sqd | QpState::Sqe) {
            if qp.handle_response(&p, &mut ctx) && ce {
                qp.common.cc.on_ce(now);
            }
        } else {
            qp.common.counters.drop_bad_state += 1;
        }
        qp.check_cq_lost(&mut ctx);
        if qp.wants_to_send() {
            self.mark_ready(qpn);
        }
        self.note_timer(qpn);
        RxOutcome::Done
    }
}
