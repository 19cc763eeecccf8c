//! A drop-in `libibverbs.so.1`: the C ABI of rdma-core's libibverbs
//! (v44's symbols and structures) implemented over this stack's engine
//! through `roce-verbs`, so that verbs programs written in C run
//! unmodified over RoCE v2 on UDP sockets, without an RDMA NIC, a kernel
//! module or root; and, under librdmacm's version nodes, the RDMA CM and
//! rsocket API that the `librdmacm.so.1` stub of `roce-rdmacm` points
//! programs to (`cm`). `docs/dropin.md` is the guide: what is
//! implemented, how devices and addresses are chosen, the environment
//! variables, and the programs it is tested with; `docs/rsocket.md` has
//! the rsocket protocol.
//!
//! Where it sits: a C program's calls enter through the exported
//! functions (each behind `ffi`'s panic boundary), which work on the
//! objects behind the pointers the program holds (`context`, `pd`,
//! `cq`, `qp`, `srq`, `cm`), each wrapping a `roce-verbs` object.
//!
//! [`abi`] is the headers' structures, field for field; its layout
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

pub mod abi;
#[macro_use]
mod ffi;
mod cm;
mod config;
mod context;
mod cq;
mod debug;
mod device;
mod engine;
mod eventfd;
mod misc;
mod open;
mod pd;
mod qp;
mod srq;
mod strings;
mod trace;
mod unmap;
mod wr;
