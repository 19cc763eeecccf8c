//! The string helpers (`ibv_wc_status_str` and friends), with rdma-core's
//! wording, which programs print and scripts match; and the fork calls.

use crate::ffi::{errno_ret, value_or};
use std::os::raw::{c_char, c_int};

/// A static C string.
macro_rules! c {
    ($s:literal) => {
        concat!($s, "\0").as_ptr() as *const c_char
    };
}

export! {
    /// `ibv_wc_status_str`.
    fn ibv_wc_status_str(status: u32) -> *const c_char {
        value_or(c!("unknown"), || match status {
            0 => c!("success"),
            1 => c!("local length error"),
            2 => c!("local QP operation error"),
            3 => c!("local EE context operation error"),
            4 => c!("local protection error"),
            5 => c!("Work Request Flushed Error"),
            6 => c!("memory management operation error"),
            7 => c!("bad response error"),
            8 => c!("local access error"),
            9 => c!("remote invalid request error"),
            10 => c!("remote access error"),
            11 => c!("remote operation error"),
            12 => c!("transport retry counter exceeded"),
            13 => c!("RNR retry counter exceeded"),
            14 => c!("local RDD violation error"),
            15 => c!("remote invalid RD request"),
            16 => c!("aborted error"),
            17 => c!("invalid EE context number"),
            18 => c!("invalid EE context state"),
            19 => c!("fatal error"),
            20 => c!("response timeout error"),
            21 => c!("general error"),
            22 => c!("TM error"),
            23 => c!("TM software rendezvous"),
            _ => c!("unknown"),
        })
    }
}

export! {
    /// `ibv_node_type_str`.
    fn ibv_node_type_str(t: c_int) -> *const c_char {
        value_or(c!("unknown"), || match t {
            1 => c!("InfiniBand channel adapter"),
            2 => c!("InfiniBand switch"),
            3 => c!("InfiniBand router"),
            4 => c!("iWARP NIC"),
            5 => c!("usNIC"),
            6 => c!("usNIC UDP"),
            7 => c!("unspecified"),
            _ => c!("unknown"),
        })
    }
}

export! {
    /// `ibv_port_state_str`.
    fn ibv_port_state_str(s: u32) -> *const c_char {
        value_or(c!("invalid state"), || match s {
            0 => c!("PORT_NOP"),
            1 => c!("PORT_DOWN"),
            2 => c!("PORT_INIT"),
            3 => c!("PORT_ARMED"),
            4 => c!("PORT_ACTIVE"),
            5 => c!("PORT_ACTIVE_DEFER"),
            _ => c!("invalid state"),
        })
    }
}

export! {
    /// `ibv_event_type_str`.
    fn ibv_event_type_str(e: u32) -> *const c_char {
        value_or(c!("unknown"), || match e {
            0 => c!("CQ error"),
            1 => c!("local work queue catastrophic error"),
            2 => c!("invalid request local work queue error"),
            3 => c!("local access violation work queue error"),
            4 => c!("communication established"),
            5 => c!("send queue drained"),
            6 => c!("path migrated"),
            7 => c!("path migration request error"),
            8 => c!("local catastrophic error"),
            9 => c!("port active"),
            10 => c!("port error"),
            11 => c!("LID change"),
            12 => c!("P_Key change"),
            13 => c!("SM change"),
            14 => c!("SRQ catastrophic error"),
            15 => c!("SRQ limit reached"),
            16 => c!("last WQE reached"),
            17 => c!("client reregistration"),
            18 => c!("GID table change"),
            19 => c!("WQ fatal"),
            _ => c!("unknown"),
        })
    }
}

export! {
    /// `ibv_fork_init`: nothing to do. Registered memory is not pinned
    /// by a kernel here: after `fork()` the parent keeps its pages and
    /// its engine; the child gets copies and no engine thread (it must
    /// not use the parent's verbs objects, as with rdma-core).
    fn ibv_fork_init() -> c_int {
        errno_ret(|| Ok(()))
    }
}

export! {
    /// `ibv_is_fork_initialized`: `IBV_FORK_UNNEEDED` (2).
    fn ibv_is_fork_initialized() -> c_int {
        value_or(2, || 2)
    }
}
