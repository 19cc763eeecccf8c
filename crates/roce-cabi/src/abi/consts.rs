//! Enum and flag values of `verbs.h` that the library reads or writes.

pub const IBV_NODE_CA: i32 = 1;
pub const IBV_TRANSPORT_IB: i32 = 0;

pub const IBV_PORT_ACTIVE: u32 = 4;
pub const IBV_PORT_DOWN: u32 = 1;
pub const IBV_LINK_LAYER_ETHERNET: u8 = 2;
pub const IBV_ATOMIC_HCA: u32 = 1;
pub const IBV_GID_TYPE_ROCE_V2: u32 = 2;
/// `IBV_GID_TYPE_SYSFS_ROCE_V2` (rdma-core's `driver.h`).
pub const IBV_GID_TYPE_SYSFS_ROCE_V2: u32 = 1;

pub const IBV_QPT_RC: u32 = 2;
pub const IBV_QPT_UC: u32 = 3;
pub const IBV_QPT_UD: u32 = 4;

pub const IBV_WR_RDMA_WRITE: u32 = 0;
pub const IBV_WR_RDMA_WRITE_WITH_IMM: u32 = 1;
pub const IBV_WR_SEND: u32 = 2;
pub const IBV_WR_SEND_WITH_IMM: u32 = 3;
pub const IBV_WR_RDMA_READ: u32 = 4;
pub const IBV_WR_ATOMIC_CMP_AND_SWP: u32 = 5;
pub const IBV_WR_ATOMIC_FETCH_AND_ADD: u32 = 6;
pub const IBV_WR_SEND_WITH_INV: u32 = 9;

pub const IBV_SEND_INLINE: u32 = 1 << 3;

pub const IBV_EVENT_CQ_ERR: u32 = 0;
pub const IBV_EVENT_QP_FATAL: u32 = 1;
pub const IBV_EVENT_SQ_DRAINED: u32 = 5;
pub const IBV_EVENT_DEVICE_FATAL: u32 = 8;
pub const IBV_EVENT_SRQ_LIMIT_REACHED: u32 = 15;
pub const IBV_EVENT_QP_LAST_WQE_REACHED: u32 = 16;

pub const IBV_SRQ_MAX_WR: c_int = 1;
pub const IBV_SRQ_LIMIT: c_int = 2;

/// `__VERBS_ABI_IS_EXTENDED`: the `abi_compat` value saying a
/// `verbs_context` surrounds the `ibv_context`.
pub const VERBS_ABI_IS_EXTENDED: usize = usize::MAX;

use std::os::raw::c_int;
