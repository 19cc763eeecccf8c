//! Which packets a QP takes (IBTA Vol 1 §9.6, packet header validation,
//! as rxe's `check_keys` / `check_addr` apply it): the transport of the
//! QP's type, the connected peer's address as source and our own address
//! (the QP's source GID) as destination, a P_Key that matches the one at
//! the QP's P_Key index (§10.9.3), and a state that takes the packet.
//!
//! RoCE has no authentication: these checks, the unpredictable QPN and the
//! PSN window are all that tell the peer's packets from an off-path
//! attacker's (see docs/security.md).

use std::net::IpAddr;

use roce_wire::{RocePacket, Transport};

use super::state::{QpState, QpType};
use super::QpCommon;

/// The port's P_Key table: one entry, the default partition (0xFFFF,
/// full member), as rxe has.
pub(crate) const PKEY_TABLE: [u16; 1] = [0xffff];

/// Why a packet was not taken.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Reject {
    /// Not this QP's transport (or a CNP for a UD QP).
    Transport,
    /// Not from the connected peer, or not to our address.
    Address,
    /// The P_Key does not match the QP's partition.
    Pkey,
    /// The QP's state does not take it.
    State,
}

/// Whether two P_Keys are in the same partition: the same 15-bit key,
/// and not both limited members (IBTA Vol 1 §10.9.3, rxe's `pkey_match`).
fn pkey_match(a: u16, b: u16) -> bool {
    a & 0x7fff == b & 0x7fff && a & 0x7fff != 0 && (a | b) & 0x8000 != 0
}

/// Whether a packet's P_Key matches an entry of the port's P_Key table:
/// the check for QP1 (GSI), which serves every partition of the port
/// (IBTA Vol 1 §10.9.3, C10-111; rxe's `check_keys` for QP1).
pub(crate) fn pkey_in_table(pkey: u16) -> bool {
    PKEY_TABLE.iter().any(|&k| pkey_match(pkey, k))
}

impl QpCommon {
    /// Checks the headers of `p`, addressed to this QP, against the QP's
    /// transport, peer, addresses, P_Key and state.
    pub(crate) fn check_packet(&self, p: &RocePacket<'_>, local: &[IpAddr]) -> Result<(), Reject> {
        let t = self.init.qp_type;
        let cnp = p.bth.opcode.transport() == Transport::Cnp;
        let transport_ok = match (t, p.bth.opcode.transport()) {
            (QpType::Rc, Transport::Rc) | (QpType::Uc, Transport::Uc) => true,
            (QpType::Ud, Transport::Ud) => true,
            // A CNP answers our data: a connected QP's (Annex A17.9.2).
            (QpType::Rc | QpType::Uc, Transport::Cnp) => true,
            _ => false,
        };
        if !transport_ok {
            return Err(Reject::Transport);
        }
        let dst = p.ip.dst();
        let to_us = match t {
            // Connected: from the peer of the address vector, to the
            // address (GID) the QP sends from (§9.6.1.1, C9-50.2.1 as
            // rxe's check_addr: the packet's GIDs against the QP's path).
            QpType::Rc | QpType::Uc => {
                p.ip.src() == self.attr.ah_attr.dest
                    && local.get(self.attr.ah_attr.sgid_index as usize) == Some(&dst)
            }
            // UD: from anyone (the Q_Key decides), to one of our addresses.
            QpType::Ud => local.contains(&dst),
        };
        if !to_us {
            return Err(Reject::Address);
        }
        let ours = PKEY_TABLE
            .get(self.attr.pkey_index as usize)
            .copied()
            .unwrap_or(0);
        if !pkey_match(p.bth.pkey.0, ours) {
            return Err(Reject::Pkey);
        }
        // A CNP slows what we send: only while we send (RTS, SQD, SQE).
        if cnp && !matches!(self.state, QpState::Rts | QpState::Sqd | QpState::Sqe) {
            return Err(Reject::State);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::{pkey_in_table, pkey_match};

    #[test]
    fn partition_membership() {
        assert!(pkey_match(0xffff, 0xffff));
        assert!(pkey_match(0x7fff, 0xffff));
        assert!(!pkey_match(0x7fff, 0x7fff), "two limited members");
        assert!(!pkey_match(0x8001, 0xffff));
        assert!(!pkey_match(0x0000, 0x8000), "the invalid P_Key");
        // The table holds the default partition as a full member: its
        // full and limited members both match, nothing else does.
        assert!(pkey_in_table(0xffff) && pkey_in_table(0x7fff));
        assert!(!pkey_in_table(0x8001) && !pkey_in_table(0x1234) && !pkey_in_table(0));
    }
}
