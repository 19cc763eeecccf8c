//! QP attributes (`ibv_qp_attr` / `ibv_qp_init_attr`).

use std::net::{IpAddr, Ipv4Addr};

use roce_wire::{Psn, Qkey, Qpn};

use crate::cq::CqId;
use crate::mr::{Access, PdId};
use crate::qp::state::{QpState, QpType};
use crate::srq::SrqId;

/// Where a connected QP's packets go (the address vector of an address
/// handle or of `IBV_QP_AV`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AddressVector {
    /// The peer's address (its GID).
    pub dest: IpAddr,
    /// Index of the local address (GID) to send from.
    pub sgid_index: u8,
    /// IPv4 TTL / IPv6 hop limit.
    pub hop_limit: u8,
    /// Traffic class: DSCP in the upper six bits (ECN bits are the stack's).
    pub traffic_class: u8,
    /// IPv6 flow label.
    pub flow_label: u32,
}

impl Default for AddressVector {
    fn default() -> AddressVector {
        AddressVector {
            dest: IpAddr::V4(Ipv4Addr::UNSPECIFIED),
            sgid_index: 0,
            hop_limit: 64,
            traffic_class: 0,
            flow_label: 0,
        }
    }
}

/// Queue sizes and limits of a QP.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QpCaps {
    /// Send queue depth.
    pub max_send_wr: u32,
    /// Receive queue depth.
    pub max_recv_wr: u32,
    /// Scatter/gather entries per send WR.
    pub max_send_sge: u32,
    /// Scatter/gather entries per receive WR.
    pub max_recv_sge: u32,
    /// Largest inline payload.
    pub max_inline_data: u32,
}

impl Default for QpCaps {
    fn default() -> QpCaps {
        QpCaps {
            max_send_wr: 1024,
            max_recv_wr: 1024,
            max_send_sge: 16,
            max_recv_sge: 16,
            max_inline_data: 256,
        }
    }
}

/// Creation attributes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QpInitAttr {
    /// Transport.
    pub qp_type: QpType,
    /// Protection domain.
    pub pd: PdId,
    /// CQ for send completions.
    pub send_cq: CqId,
    /// CQ for receive completions.
    pub recv_cq: CqId,
    /// Shared receive queue instead of the QP's own.
    pub srq: Option<SrqId>,
    /// Sizes.
    pub cap: QpCaps,
    /// Every send WR generates a completion, signaled or not.
    pub sq_sig_all: bool,
}

/// Modifiable attributes; which ones apply is said by the mask passed with
/// them (see [`crate::qp::state::QpAttrMask`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QpAttr {
    /// Target state.
    pub qp_state: QpState,
    /// Asserted current state.
    pub cur_qp_state: QpState,
    /// Path MTU in bytes (256, 512, 1024, 2048 or 4096).
    pub path_mtu: u32,
    /// Q_Key (UD).
    pub qkey: Qkey,
    /// Expected PSN of the responder.
    pub rq_psn: Psn,
    /// First PSN of the requester.
    pub sq_psn: Psn,
    /// The connected peer QP.
    pub dest_qp_num: Qpn,
    /// Remote access rights granted to incoming requests.
    pub qp_access_flags: Access,
    /// P_Key index (only 0 exists).
    pub pkey_index: u16,
    /// Port (only 1 exists).
    pub port_num: u8,
    /// Address vector.
    pub ah_attr: AddressVector,
    /// Local ACK timeout exponent: 4.096 µs × 2^timeout, 0 = infinite.
    pub timeout: u8,
    /// Transport retries (3 bits); 7 retries forever, as in Linux rxe.
    pub retry_cnt: u8,
    /// RNR retries (3 bits, 7 = infinite).
    pub rnr_retry: u8,
    /// RNR NAK timer code the responder advertises.
    pub min_rnr_timer: u8,
    /// Outstanding READs/atomics this QP may issue.
    pub max_rd_atomic: u8,
    /// Outstanding READs/atomics this QP accepts.
    pub max_dest_rd_atomic: u8,
}

impl Default for QpAttr {
    fn default() -> QpAttr {
        QpAttr {
            qp_state: QpState::Reset,
            cur_qp_state: QpState::Reset,
            path_mtu: 1024,
            qkey: Qkey::new(0),
            rq_psn: Psn::new(0),
            sq_psn: Psn::new(0),
            dest_qp_num: Qpn::new(0),
            qp_access_flags: Access::NONE,
            pkey_index: 0,
            port_num: 1,
            ah_attr: AddressVector::default(),
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            min_rnr_timer: 12,
            max_rd_atomic: 1,
            max_dest_rd_atomic: 1,
        }
    }
}

/// Path MTU in bytes to its enum value (`enum ibv_mtu`: 256 is 1 ...
/// 4096 is 5; anything else 5, the largest).
pub fn mtu_to_enum(bytes: u32) -> u8 {
    match bytes {
        256 => 1,
        512 => 2,
        1024 => 3,
        2048 => 4,
        _ => 5,
    }
}

/// Path MTU enum value (1..=5) to bytes.
pub fn mtu_from_enum(v: u8) -> Option<u32> {
    match v {
        1..=5 => Some(128 << v),
        _ => None,
    }
}

/// Largest path MTU not above a link MTU, as rxe picks it: the IB MTU must
/// fit in `netdev_mtu - 80` bytes (headers and ICRC).
pub fn path_mtu_for_link(netdev_mtu: u32) -> u32 {
    [4096, 2048, 1024, 512, 256]
        .into_iter()
        .find(|&m| m + 80 <= netdev_mtu)
        .unwrap_or(256)
}
