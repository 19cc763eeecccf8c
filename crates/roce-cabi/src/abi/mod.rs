//! The C ABI of rdma-core's `<infiniband/verbs.h>` (v44, x86_64 and
//! aarch64 LP64): every structure a program shares with the library,
//! field for field, with the names the header gives them, and the enum
//! values the library reads and writes.
//!
//! Nothing here is behaviour. The layouts are checked against the real
//! header by `tests/layout.rs`, which compiles a C program that prints
//! `sizeof` and `offsetof` of every field listed in [`layout::TYPES`]
//! and compares them with what Rust computes.
//!
//! Conventions: C `enum` fields are `u32` (their values are the constants
//! of `consts`); anonymous unions get the name of the C union's first
//! member's role (`imm_or_inv`), named ones keep the C name; function
//! pointers the library never calls are [`VoidFn`].

#![allow(non_camel_case_types, non_snake_case, missing_docs)]

pub mod cm;
pub mod consts;
mod context;
pub mod layout;
mod objects;
mod post;

pub use cm::*;
pub use context::*;
pub use objects::*;
pub use post::*;

/// A function pointer slot of an ops table this library leaves empty or
/// never calls through.
pub type VoidFn = Option<unsafe extern "C" fn()>;

/// `union ibv_gid`: 16 bytes, 8-aligned (its `global` view has `__be64`s).
#[repr(C, align(8))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ibv_gid {
    pub raw: [u8; 16],
}
