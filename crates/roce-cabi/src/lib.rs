//! The C-ABI ground of the drop-in libraries (`docs/dropin.md`,
//! `docs/architecture.md` "The drop-in libraries"): what both the verbs
//! side (crate `roce-ibverbs`, the `libibverbs.so.1` product) and the
//! RDMA CM side (crate `roce-rdmacm-impl`, linked into that library)
//! stand on, and nothing of either.
//!
//! * [`abi`]: rdma-core v44's structures, field for field, and their
//!   layout table (checked against the real headers by `roce-ibverbs`'
//!   `tests/layout.rs`);
//! * [`ffi`]: the panic boundary and return conventions every exported
//!   function goes through, declared with [`export!`] / [`entry!`], and
//!   (feature `probe`) the test probe that proves each entry point
//!   returns its error value when its body panics;
//! * [`trace`]: `ROCE_TRACE`, the JSON line of each call, hooked into
//!   that boundary;
//! * [`config`]: the environment settings and `ROCE_LOG`'s [`log!`];
//! * [`eventfd`]: the eventfds behind `async_fd`, completion channels
//!   and rdma_cm event channels;
//! * [`conv`]: GIDs, addresses and MTUs between the headers' encodings
//!   and the engine's.
//!
//! A crate declaring exports names this one `cabi` and brings its macros
//! in with `#[macro_use] extern crate cabi;`:
//!
//! ```
//! use cabi::abi::ibv_gid;
//! use std::net::{IpAddr, Ipv4Addr};
//!
//! let g: ibv_gid = cabi::conv::gid_of(IpAddr::V4(Ipv4Addr::LOCALHOST));
//! assert_eq!(&g.raw[10..], &[0xff, 0xff, 127, 0, 0, 1]);
//! assert_eq!(cabi::conv::addr_of(&g), IpAddr::V4(Ipv4Addr::LOCALHOST));
//! ```

#![deny(unsafe_op_in_unsafe_fn)]

pub mod abi;
#[macro_use]
pub mod ffi;
pub mod config;
pub mod conv;
pub mod eventfd;
pub mod trace;

/// No C function is defined in this crate outside the macros but the
/// trace's `atexit` and fork handlers and a unit test's signal handler,
/// each of which catches panics itself or cannot panic.
#[cfg(all(test, feature = "probe"))]
mod exports {
    #[test]
    fn no_c_entry_point_outside_the_macros() {
        let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let allowed = [
            "ffi.rs: #[export_name = concat!(\"roce_abi_\", stringify!($name))]",
            "ffi.rs: $name",
            "trace/mod.rs: at_exit",
            "trace/mod.rs: at_fork_child",
            "eventfd.rs: on_signal",
        ];
        let n = crate::ffi::probe::check_exports("", |_| false, &src, &allowed);
        assert_eq!(n, Ok(0));
    }
}
