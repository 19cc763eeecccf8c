//! A context's GID table: its device's addresses with its own first
//! (every GID is an address: `cabi::conv`).

use std::net::IpAddr;

use crate::device::Device;
use crate::ffi::Errno;

pub(crate) use cabi::conv::{addr_of, gid_of};

/// The GID table of a context of `dev` opened on `local`: the device's
/// addresses in `roce devinfo`'s order, with `local` at index 0 — moved
/// there when it is one of them (the default address is already first,
/// so the table is `roce devinfo`'s), put in place of the first entry
/// when it is not (a loopback context that moved to 127.0.0.2).
pub(crate) fn gid_table(dev: &Device, local: IpAddr) -> Vec<IpAddr> {
    let mut t = dev.info.gids().to_vec();
    match t.iter().position(|&a| a == local) {
        Some(i) => t.swap(0, i),
        None if t.is_empty() => t.push(local),
        None => t[0] = local,
    }
    t
}

/// The errno of a verb that sets a source GID (`ibv_modify_qp` with an
/// address vector, `ibv_create_ah`), saying on stderr why a GID cannot
/// be used (its UDP port taken by another process).
pub(crate) fn gid_err(e: impl Into<roce_verbs::Error>) -> Errno {
    use roce_verbs::{CreateError as C, Error as E, ModifyQpError as M};
    let e = e.into();
    if let E::Create(C::AddrUnavailable(..)) | E::ModifyQp(M::AddrUnavailable(..)) = e {
        crate::config::say(format_args!("{e}"));
    }
    crate::ffi::errno_of(&e)
}
