//! A drop-in `libibverbs.so.1`: the C ABI of rdma-core's libibverbs
//! (v44's symbols and structures) implemented over this stack's engine
//! through `roce-verbs`, so that verbs programs written in C run
//! unmodified over RoCE v2 on UDP sockets, without an RDMA NIC, a kernel
//! module or root; and, under librdmacm's version nodes, the RDMA CM and
//! rsocket API that the `librdmacm.so.1` stub of `roce-rdmacm` points
//! programs to: the functions of crate `roce-rdmacm-impl`, linked in,
//! whose verbs side is `cm_side`.
//! `docs/architecture.md` ("The drop-in libraries") has how the crates
//! meet; `docs/dropin.md` is the guide: what is
//! implemented, how devices and addresses are chosen, the environment
//! variables, and the programs it is tested with; `docs/rsocket.md` has
//! the rsocket protocol.
//!
//! Where it sits: a C program's calls enter through the exported
//! functions (each behind the panic boundary of `roce-cabi`'s `ffi`),
//! which work on the objects behind the pointers the program holds
//! (`context`, `pd`, `cq`, `qp`, `srq`), each wrapping a `roce-verbs`
//! object; `open` opens and closes contexts and fills their ops tables
//! from those modules, which import one another without cycles.
//!
//! [`abi`] (`roce-cabi`'s) is the headers' structures, field for field; its layout
//! table is what `tests/layout.rs` compares with the real headers:
//!
//! ```
//! use ibverbs::abi::layout::{CM_TYPES, TYPES};
//!
//! let size = |name: &str| {
//!     TYPES.iter().chain(CM_TYPES).find(|t| t.c_name == name).map(|t| t.size)
//! };
//! assert_eq!(size("struct ibv_qp"), Some(160));
//! assert_eq!(size("struct rdma_cm_id"), Some(416));
//! ```

#![deny(unsafe_op_in_unsafe_fn)]

#[macro_use]
extern crate cabi;

pub use cabi::abi;
use cabi::{config, eventfd, ffi, trace};

mod cm_side;
mod context;
mod cq;
mod debug;
mod device;
mod engine;
mod misc;
mod open;
mod pd;
mod qp;
mod srq;
mod strings;
mod unmap;
mod wr;

/// The C entry points of this crate, as `cabi::ffi::probe` checks them.
#[cfg(test)]
mod exports {
    use cabi::ffi::probe;

    /// Every C entry point, with its body made to panic, returns its
    /// convention's error value (0 / errno, -errno, -1 and errno, NULL
    /// and errno, nothing, or its fallback) without unwinding into C.
    #[test]
    fn every_entry_point_turns_a_panic_into_its_error_value() {
        let (failed, probes) = probe::failures();
        assert!(failed.is_empty(), "{failed:#?}");
        assert!(probes > 110, "{probes} probes");
    }

    /// Every name `symbols.txt` exports under libibverbs' nodes is the
    /// `export!` of a function of this crate (librdmacm's nodes are
    /// `roce-rdmacm-impl`'s, checked there), and no C function is
    /// defined outside the macros but the `munmap` interposer, the one
    /// data symbol, the `atexit` handler, and the constructor that links
    /// librdmacm (none can panic or each catches panics itself).
    #[test]
    fn every_export_goes_through_the_macro() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let symbols = std::fs::read_to_string(root.join("symbols.txt")).unwrap();
        let allowed = [
            "unmap.rs: #[no_mangle]",
            "unmap.rs: munmap",
            "misc.rs: #[export_name = \"roce_abi_verbs_allow_disassociate_destroy\"]",
            "cm_side.rs: link_cm",
            "cm_side.rs: #[link_section = \".init_array\"]",
            "debug/mod.rs: at_exit",
        ];
        let n = probe::check_exports(
            &symbols,
            |node| !node.starts_with("RDMACM_"),
            &root.join("src"),
            &allowed,
        );
        assert!(n.as_ref().is_ok_and(|&n| n > 140), "{n:?}");
    }
}
