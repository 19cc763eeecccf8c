//! A drop-in `libibverbs.so.1`: the C ABI of rdma-core's libibverbs
//! (v44's symbols and structures) implemented over this stack's engine
//! through `roce-verbs`, so that verbs programs written in C run
//! unmodified over RoCE v2 on UDP sockets, without an RDMA NIC, a kernel
//! module or root. `docs/dropin.md` is the guide: what is implemented,
//! how devices and addresses are chosen, the environment variables, and
//! the programs it is tested with.
//!
//! Layout: [`abi`] is the header's structures; `entry` is every exported
//! function (a panic boundary and the errno convention around each);
//! the rest are the objects behind the pointers a program holds.

#![deny(unsafe_op_in_unsafe_fn)]

pub mod abi;
#[macro_use]
mod ffi;
mod cm;
mod config;
mod context;
mod cq;
mod device;
mod misc;
mod pd;
mod post;
mod qp;
mod srq;
mod strings;
mod unmap;
