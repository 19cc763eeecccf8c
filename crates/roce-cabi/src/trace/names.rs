//! The names of `verbs.h`'s and `rdma_cma.h`'s values, as rdma-core
//! spells them without their prefixes (`IBV_QPS_RTR` is `"RTR"`), and the
//! JSON helpers of the trace.

use std::fmt::Write as _;

/// `s` as a JSON string.
pub(super) fn string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// A value of an enumeration: its name, or its number when unknown.
pub(super) fn named(out: &mut String, table: &[&str], v: u32) {
    match table.get(v as usize).filter(|n| !n.is_empty()) {
        Some(n) => string(out, n),
        None => {
            let _ = write!(out, "{v}");
        }
    }
}

/// Flags: `"A|B"`, with unknown bits in hex (`"A|0x40000"`); `"0"` for
/// none.
pub(super) fn flags(out: &mut String, table: &[(u32, &str)], v: u32) {
    let mut parts: Vec<String> = Vec::new();
    let mut rest = v;
    for (bit, name) in table {
        if v & bit != 0 {
            parts.push((*name).to_string());
            rest &= !bit;
        }
    }
    if rest != 0 {
        parts.push(format!("{rest:#x}"));
    }
    if parts.is_empty() {
        parts.push("0".into());
    }
    string(out, &parts.join("|"));
}

/// `enum ibv_qp_state`.
/// `ibv_wc_status` values 0 to 21 and rdma-core's names.
pub const WC_STATUS: [&str; 22] = [
    "SUCCESS",
    "LOC_LEN_ERR",
    "LOC_QP_OP_ERR",
    "LOC_EEC_OP_ERR",
    "LOC_PROT_ERR",
    "WR_FLUSH_ERR",
    "MW_BIND_ERR",
    "BAD_RESP_ERR",
    "LOC_ACCESS_ERR",
    "REM_INV_REQ_ERR",
    "REM_ACCESS_ERR",
    "REM_OP_ERR",
    "RETRY_EXC_ERR",
    "RNR_RETRY_EXC_ERR",
    "LOC_RDD_VIOL_ERR",
    "REM_INV_RD_REQ_ERR",
    "REM_ABORT_ERR",
    "INV_EECN_ERR",
    "INV_EEC_STATE_ERR",
    "FATAL_ERR",
    "RESP_TIMEOUT_ERR",
    "GENERAL_ERR",
];

pub(super) const QP_STATE: [&str; 8] = [
    "RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR", "UNKNOWN",
];

/// `enum ibv_qp_type`.
pub(super) const QP_TYPE: [&str; 11] = [
    "",
    "",
    "RC",
    "UC",
    "UD",
    "",
    "",
    "",
    "RAW_PACKET",
    "XRC_SEND",
    "XRC_RECV",
];

/// `enum ibv_wr_opcode`.
pub(super) const WR_OPCODE: [&str; 16] = [
    "RDMA_WRITE",
    "RDMA_WRITE_WITH_IMM",
    "SEND",
    "SEND_WITH_IMM",
    "RDMA_READ",
    "ATOMIC_CMP_AND_SWP",
    "ATOMIC_FETCH_AND_ADD",
    "LOCAL_INV",
    "BIND_MW",
    "SEND_WITH_INV",
    "TSO",
    "DRIVER1",
    "",
    "",
    "FLUSH",
    "ATOMIC_WRITE",
];

/// `enum ibv_wc_opcode` (the receive side from 128).
pub(super) fn wc_opcode(out: &mut String, v: u32) {
    const SEND_SIDE: [&str; 10] = [
        "SEND",
        "RDMA_WRITE",
        "RDMA_READ",
        "COMP_SWAP",
        "FETCH_ADD",
        "BIND_MW",
        "LOCAL_INV",
        "TSO",
        "FLUSH",
        "ATOMIC_WRITE",
    ];
    match v {
        128 => string(out, "RECV"),
        129 => string(out, "RECV_RDMA_WITH_IMM"),
        v => named(out, &SEND_SIDE, v),
    }
}

/// `enum ibv_send_flags`.
pub(super) const SEND_FLAGS: [(u32, &str); 5] = [
    (1, "FENCE"),
    (2, "SIGNALED"),
    (4, "SOLICITED"),
    (8, "INLINE"),
    (16, "IP_CSUM"),
];

/// `enum ibv_wc_flags`.
pub(super) const WC_FLAGS: [(u32, &str); 5] = [
    (1, "GRH"),
    (2, "WITH_IMM"),
    (4, "IP_CSUM_OK"),
    (8, "WITH_INV"),
    (16, "TM_SYNC_REQ"),
];

/// `enum ibv_access_flags`.
pub(super) const ACCESS: [(u32, &str); 10] = [
    (1, "LOCAL_WRITE"),
    (2, "REMOTE_WRITE"),
    (4, "REMOTE_READ"),
    (8, "REMOTE_ATOMIC"),
    (16, "MW_BIND"),
    (32, "ZERO_BASED"),
    (64, "ON_DEMAND"),
    (128, "HUGETLB"),
    (256, "FLUSH_GLOBAL"),
    (1 << 20, "RELAXED_ORDERING"),
];

/// `enum ibv_qp_attr_mask`.
pub(super) const QP_ATTR_MASK: [(u32, &str); 21] = [
    (1, "STATE"),
    (1 << 1, "CUR_STATE"),
    (1 << 2, "EN_SQD_ASYNC_NOTIFY"),
    (1 << 3, "ACCESS_FLAGS"),
    (1 << 4, "PKEY_INDEX"),
    (1 << 5, "PORT"),
    (1 << 6, "QKEY"),
    (1 << 7, "AV"),
    (1 << 8, "PATH_MTU"),
    (1 << 9, "TIMEOUT"),
    (1 << 10, "RETRY_CNT"),
    (1 << 11, "RNR_RETRY"),
    (1 << 12, "RQ_PSN"),
    (1 << 13, "MAX_QP_RD_ATOMIC"),
    (1 << 14, "ALT_PATH"),
    (1 << 15, "MIN_RNR_TIMER"),
    (1 << 16, "SQ_PSN"),
    (1 << 17, "MAX_DEST_RD_ATOMIC"),
    (1 << 18, "PATH_MIG_STATE"),
    (1 << 19, "CAP"),
    (1 << 20, "DEST_QPN"),
];

/// `enum ibv_event_type`.
pub(super) const ASYNC_EVENT: [&str; 20] = [
    "CQ_ERR",
    "QP_FATAL",
    "QP_REQ_ERR",
    "QP_ACCESS_ERR",
    "COMM_EST",
    "SQ_DRAINED",
    "PATH_MIG",
    "PATH_MIG_ERR",
    "DEVICE_FATAL",
    "PORT_ACTIVE",
    "PORT_ERR",
    "LID_CHANGE",
    "PKEY_CHANGE",
    "SM_CHANGE",
    "SRQ_ERR",
    "SRQ_LIMIT_REACHED",
    "QP_LAST_WQE_REACHED",
    "CLIENT_REREGISTER",
    "GID_CHANGE",
    "WQ_FATAL",
];

/// `enum rdma_cm_event_type`.
pub(super) const CM_EVENT: [&str; 16] = [
    "ADDR_RESOLVED",
    "ADDR_ERROR",
    "ROUTE_RESOLVED",
    "ROUTE_ERROR",
    "CONNECT_REQUEST",
    "CONNECT_RESPONSE",
    "CONNECT_ERROR",
    "UNREACHABLE",
    "REJECTED",
    "ESTABLISHED",
    "DISCONNECTED",
    "DEVICE_REMOVAL",
    "MULTICAST_JOIN",
    "MULTICAST_ERROR",
    "ADDR_CHANGE",
    "TIMEWAIT_EXIT",
];

/// `enum ibv_mtu`: bytes.
pub(super) fn mtu(v: u32) -> u32 {
    if (1..=5).contains(&v) {
        128 << v
    } else {
        0
    }
}

/// The symbolic name of an errno value.
pub(super) fn errno(e: i32) -> &'static str {
    match e {
        libc::EPERM => "EPERM",
        libc::ENOENT => "ENOENT",
        libc::EINTR => "EINTR",
        libc::EIO => "EIO",
        libc::EBADF => "EBADF",
        libc::EAGAIN => "EAGAIN",
        libc::ENOMEM => "ENOMEM",
        libc::EACCES => "EACCES",
        libc::EFAULT => "EFAULT",
        libc::EBUSY => "EBUSY",
        libc::EEXIST => "EEXIST",
        libc::ENODEV => "ENODEV",
        libc::EINVAL => "EINVAL",
        libc::ENOSPC => "ENOSPC",
        libc::ERANGE => "ERANGE",
        libc::ENOSYS => "ENOSYS",
        libc::ENODATA => "ENODATA",
        libc::ETIME => "ETIME",
        libc::EOVERFLOW => "EOVERFLOW",
        libc::EPROTONOSUPPORT => "EPROTONOSUPPORT",
        libc::EOPNOTSUPP => "EOPNOTSUPP",
        libc::EAFNOSUPPORT => "EAFNOSUPPORT",
        libc::EADDRINUSE => "EADDRINUSE",
        libc::EADDRNOTAVAIL => "EADDRNOTAVAIL",
        libc::ENETUNREACH => "ENETUNREACH",
        libc::ECONNABORTED => "ECONNABORTED",
        libc::ECONNRESET => "ECONNRESET",
        libc::EISCONN => "EISCONN",
        libc::ENOTCONN => "ENOTCONN",
        libc::ETIMEDOUT => "ETIMEDOUT",
        libc::ECONNREFUSED => "ECONNREFUSED",
        libc::EHOSTUNREACH => "EHOSTUNREACH",
        libc::EALREADY => "EALREADY",
        libc::EINPROGRESS => "EINPROGRESS",
        libc::EPROTO => "EPROTO",
        libc::EMSGSIZE => "EMSGSIZE",
        _ => "?",
    }
}
