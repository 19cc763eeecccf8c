//! A QP brought from RESET to RTS on a sans-IO [`Device`], with the
//! attribute masks `ibv_modify_qp` requires at each step (IBTA Vol 1
//! §10.3.1, the table in roce-core's `qp/state.rs`): the bring-up every
//! engine test and benchmark does before it sends anything.

use std::net::IpAddr;

use roce_core::{Access, AddressVector, Device, QpAttr, QpAttrMask, QpState, QpType};
use roce_wire::{Psn, Qkey, Qpn};

/// Where a QP connects to, and the PSNs it starts from.
#[derive(Clone, Copy, Debug)]
pub struct Link {
    /// RC, UC or UD.
    pub qp_type: QpType,
    /// Path MTU in bytes.
    pub pmtu: u32,
    /// The peer's address (its GID).
    pub peer: IpAddr,
    /// The peer's QP number.
    pub peer_qpn: Qpn,
    /// First PSN this QP sends.
    pub sq_psn: Psn,
    /// First PSN this QP expects.
    pub rq_psn: Psn,
}

/// The attributes [`bring_up`] gives a QP before `tweak`: every remote
/// access, the local ACK timeout 10 (4.2 ms), retries 7 (forever), 16
/// READ/atomic resources each way, RNR timer 1, Q_Key 0x11111111.
pub fn attrs(link: &Link) -> QpAttr {
    QpAttr {
        pkey_index: 0,
        port_num: 1,
        qp_access_flags: Access::LOCAL_WRITE
            | Access::REMOTE_WRITE
            | Access::REMOTE_READ
            | Access::REMOTE_ATOMIC,
        qkey: Qkey::new(0x1111_1111),
        path_mtu: link.pmtu,
        ah_attr: AddressVector {
            dest: link.peer,
            ..AddressVector::default()
        },
        dest_qp_num: link.peer_qpn,
        rq_psn: link.rq_psn,
        sq_psn: link.sq_psn,
        max_dest_rd_atomic: 16,
        max_rd_atomic: 16,
        min_rnr_timer: 1,
        timeout: 10,
        retry_cnt: 7,
        rnr_retry: 7,
        ..QpAttr::default()
    }
}

/// RESET → INIT → RTR → RTS with [`attrs`], changed by `tweak` first.
/// Panics (the test fails) when the device refuses a step.
pub fn bring_up(dev: &mut Device, qpn: Qpn, link: &Link, tweak: impl FnOnce(&mut QpAttr)) {
    let mut a = attrs(link);
    tweak(&mut a);
    let req = |from, to| QpAttrMask::required(link.qp_type, from, to);
    for (from, to) in [
        (QpState::Reset, QpState::Init),
        (QpState::Init, QpState::Rtr),
        (QpState::Rtr, QpState::Rts),
    ] {
        a.qp_state = to;
        let mut mask = req(from, to);
        // RC passes its access flags again (optional) at RTR.
        if link.qp_type == QpType::Rc && to == QpState::Rtr {
            mask |= QpAttrMask::ACCESS_FLAGS;
        }
        if let Err(e) = dev.modify_qp(qpn, &a, mask) {
            panic!("QP {qpn:?}: {from:?} -> {to:?} refused: {e:?}");
        }
    }
}
