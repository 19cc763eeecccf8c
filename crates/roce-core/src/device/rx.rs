//! The receive side: [`Device::handle_udp`] for a datagram received as
//! its UDP payload with what the receiver knows of its header,
//! [`Device::handle_datagram`] for a whole IP datagram; both parse the
//! transport headers and check the ICRC here, under the one ICRC policy
//! ([`IcrcCheck`]), and go on to the same dispatch.

use roce_wire::{icrc, Ecn, Owner, RocePacket, RxHeader, RxMeta, Transport};

use super::{Device, IcrcCheck, RxOutcome};
use crate::qp::accept::Reject;
use crate::qp::state::QpState;
use crate::qp::Ctx;
use crate::Nanos;

/// What is known of the header fields a datagram's ICRC covers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Covered {
    /// Every one: the ICRC is checked.
    Exact,
    /// All but the IPv4 identification: as [`IcrcCheck`] says.
    NoIpv4Id,
    /// The caller vouches for none (a datagram built by hand).
    Unknown,
}

impl Device {
    /// Processes one datagram received as its UDP payload (`payload`:
    /// BTH to ICRC), with what the receiver knows of the IP and UDP
    /// header it came with (`header`: a UDP socket's, a same-host ring's).
    /// No header is rebuilt: the ICRC is computed from `header`'s covered
    /// fields and checked as [`DeviceConfig::icrc_check`] says
    /// (docs/protocol.md §4).
    ///
    /// Returns as [`handle_datagram`](Self::handle_datagram) does.
    ///
    /// [`DeviceConfig::icrc_check`]: super::DeviceConfig::icrc_check
    pub fn handle_udp(
        &mut self,
        now: Nanos,
        header: RxHeader,
        payload: &[u8],
        meta: RxMeta,
    ) -> RxOutcome {
        self.counters.rx_datagrams += 1;
        let covered = if header.exact() {
            Covered::Exact
        } else {
            Covered::NoIpv4Id
        };
        let p = header
            .ip_repr()
            .ok_or(roce_wire::Error::InvalidField(
                "IP addresses of two families",
            ))
            .and_then(|ip| RocePacket::parse_udp_payload(ip, header.src.port(), payload));
        self.receive(now, p, covered, meta)
    }

    /// Processes one received IP datagram (IPv4 or IPv6 carrying RoCE v2),
    /// as a backend that sees whole datagrams has it (a fabric,
    /// `AF_PACKET`, a capture): its IP and UDP header is parsed, then as
    /// [`handle_udp`](Self::handle_udp). Its ICRC is checked unless
    /// [`RxMeta::header_exact`] is false.
    ///
    /// Returns [`RxOutcome::Done`], except on a
    /// [`shared`](super::DeviceConfig::shared) device for a datagram not
    /// already [`forwarded`](roce_wire::RxMeta::forwarded) that names a
    /// QP, CM listener or connection this device does not have:
    /// [`RxOutcome::Foreign`], for the driver to hand it to its owner
    /// (docs/host.md).
    pub fn handle_datagram(&mut self, now: Nanos, dgram: &[u8], meta: RxMeta) -> RxOutcome {
        self.counters.rx_datagrams += 1;
        let covered = if meta.header_exact {
            Covered::Exact
        } else {
            Covered::Unknown
        };
        self.receive(now, RocePacket::parse_ip(dgram), covered, meta)
    }

    fn receive(
        &mut self,
        now: Nanos,
        p: roce_wire::Result<RocePacket<'_>>,
        covered: Covered,
        meta: RxMeta,
    ) -> RxOutcome {
        let Ok(p) = p else {
            self.counters.rx_malformed += 1;
            return RxOutcome::Done;
        };
        if meta.host_intact && self.config.icrc_trust_host {
            self.counters.rx_icrc_host_trusted += 1;
        } else if !self.icrc_ok(&p, covered) {
            return RxOutcome::Done;
        }
        let out = self.dispatch(now, &p, meta);
        if let RxOutcome::Foreign(_) = out {
            self.counters.rx_foreign += 1;
        }
        out
    }

    /// The ICRC policy, in one place (docs/protocol.md §4): whether to
    /// take `p`, counting what was found.
    fn icrc_ok(&mut self, p: &RocePacket<'_>, covered: Covered) -> bool {
        let code = self.config.icrc_code;
        match covered {
            Covered::Unknown => {
                self.counters.rx_icrc_unverified += 1;
                true
            }
            Covered::Exact => {
                let ok = p.computed_icrc_with(code) == p.icrc;
                self.counters.rx_bad_icrc += u64::from(!ok);
                ok
            }
            Covered::NoIpv4Id => {
                if self.config.icrc_check == IcrcCheck::Off {
                    self.counters.rx_icrc_unverified += 1;
                    return true;
                }
                // `p`'s header has identification 0; a UDP GSO sender's
                // segments have 1, 2, ... (icrc::Rebaser).
                let id0 = p.computed_icrc_with(code);
                let covered_len = p.ip_len() - icrc::LEN;
                if id0 == p.icrc
                    || self
                        .rebaser
                        .solve_ipv4_id(id0, p.icrc, covered_len, icrc::MAX_GSO_IPV4_ID)
                        .is_some()
                {
                    self.counters.rx_icrc_assumed_ipv4_id += 1;
                    return true;
                }
                if self.config.icrc_check == IcrcCheck::Count {
                    self.counters.rx_icrc_unverified += 1;
                    return true;
                }
                self.counters.rx_bad_icrc += 1;
                false
            }
        }
    }

    /// Hands a parsed datagram whose ICRC passed to the CM, a QP or the
    /// driver (another process's).
    fn dispatch(&mut self, now: Nanos, p: &RocePacket<'_>, meta: RxMeta) -> RxOutcome {
        // Another process sharing the address may own what this datagram
        // names, unless it handed the datagram on already (docs/host.md).
        let may_forward = self.config.shared && !meta.forwarded;
        let op = p.bth.opcode;
        if p.bth.dest_qp == roce_wire::mad::GSI_QPN && op.transport() != Transport::Cnp {
            return self.cm_handle(now, p, may_forward);
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
        if let Err(why) = qp.common.check_packet(p, &self.config.addrs) {
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
        let ce = p.ip.ecn() == Ecn::Ce;
        let mut ctx = ctx!(self, now);
        if op.kind().is_request() {
            let accepted = qp.handle_request(p, &mut ctx);
            // Notification point (docs/protocol.md §7): CE → CNP to the
            // peer, only for a packet the QP took (a forged or stale one
            // must not make us send CNPs).
            if ce && accepted {
                qp.common.cc.on_ce(now);
            }
        } else if matches!(qp.common.state, QpState::Rts | QpState::Sqd | QpState::Sqe) {
            if qp.handle_response(p, &mut ctx) && ce {
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
