//! The boundary every exported function goes through: a panic never
//! unwinds into C (it becomes an error return), and errors come back the
//! way rdma-core returns them — an errno value as the result, `-1` with
//! `errno` set, or `NULL` with `errno` set, as each verb documents.

use std::os::raw::c_int;
use std::panic::{catch_unwind, AssertUnwindSafe};

/// An errno value (`libc::EINVAL` ...).
pub(crate) type Errno = c_int;

/// What a verb's body returns.
pub(crate) type Res<T> = Result<T, Errno>;

/// Sets the calling thread's `errno`.
pub(crate) fn set_errno(e: Errno) {
    // SAFETY: `__errno_location` returns the calling thread's errno slot,
    // valid for the thread's lifetime.
    unsafe { *libc::__errno_location() = e };
}

fn run<T>(f: impl FnOnce() -> Res<T>) -> Res<T> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(r) => r,
        // The panic message went to stderr through the hook; the program
        // sees an I/O error from the verb.
        Err(_) => Err(libc::EIO),
    }
}

/// A verb returning 0 or an errno value (`ibv_modify_qp`, `ibv_destroy_*`).
pub(crate) fn errno_ret(f: impl FnOnce() -> Res<()>) -> c_int {
    match run(f) {
        Ok(()) => 0,
        Err(e) => e,
    }
}

/// A verb returning 0 or a negative errno value
/// (`ibv_resolve_eth_l2_from_gid`).
pub(crate) fn neg_errno(f: impl FnOnce() -> Res<()>) -> c_int {
    match run(f) {
        Ok(()) => 0,
        Err(e) => -e,
    }
}

/// A verb returning a non-negative value, or -1 with `errno` set
/// (`ibv_get_cq_event`, `ibv_query_gid`, `ibv_poll_cq`'s error path).
pub(crate) fn minus_one<T: From<i8>>(f: impl FnOnce() -> Res<T>) -> T {
    match run(f) {
        Ok(v) => v,
        Err(e) => {
            set_errno(e);
            T::from(-1)
        }
    }
}

/// A verb returning an object, or NULL with `errno` set.
pub(crate) fn ptr_ret<T>(f: impl FnOnce() -> Res<*mut T>) -> *mut T {
    match run(f) {
        Ok(p) => p,
        Err(e) => {
            set_errno(e);
            std::ptr::null_mut()
        }
    }
}

/// A reference from a pointer the program passed, or `EINVAL` for NULL.
///
/// # Safety
/// A non-NULL `p` must point to a live `T` for `'a`.
pub(crate) unsafe fn arg<'a, T>(p: *const T) -> Res<&'a T> {
    // SAFETY: the caller's contract.
    unsafe { p.as_ref() }.ok_or(libc::EINVAL)
}

/// A mutable reference from a pointer the program passed, or `EINVAL`.
///
/// # Safety
/// A non-NULL `p` must point to a live `T` for `'a`, not aliased.
pub(crate) unsafe fn arg_mut<'a, T>(p: *mut T) -> Res<&'a mut T> {
    // SAFETY: the caller's contract.
    unsafe { p.as_mut() }.ok_or(libc::EINVAL)
}

/// The errno rdma-core's kernel path gives for each engine error.
pub(crate) fn errno_of(e: &roce_verbs::Error) -> Errno {
    use roce_verbs::roce_core::{PostError, VerbsError};
    use roce_verbs::Error as E;
    match e {
        E::Verbs(VerbsError::NotFound) => libc::ENOENT,
        E::Verbs(VerbsError::Busy) | E::MrInUse => libc::EBUSY,
        E::Verbs(VerbsError::Access(_)) => libc::EINVAL,
        E::Verbs(VerbsError::Modify(_)) | E::Verbs(VerbsError::InvalidArgument(_)) => libc::EINVAL,
        E::Post(PostError::QueueFull) => libc::ENOMEM,
        E::Post(PostError::NoSuchObject) => libc::ENOENT,
        E::Post(_) => libc::EINVAL,
        E::UnknownLkey(_) | E::SgeOutOfBounds(_) | E::WrongPd | E::WrongContext => libc::EINVAL,
        E::CqOverflow => libc::EOVERFLOW,
        E::InvalidArgument(_) => libc::EINVAL,
        E::ThreadSpawn => libc::EAGAIN,
        _ => libc::EIO,
    }
}

/// `errno_of` as a `map_err` argument.
pub(crate) fn verr(e: roce_verbs::Error) -> Errno {
    errno_of(&e)
}

/// Copies `s` into a C `char` array, NUL-terminated and truncated.
pub(crate) fn copy_cstr(dst: &mut [std::os::raw::c_char], s: &str) {
    let n = s.len().min(dst.len().saturating_sub(1));
    for (d, b) in dst.iter_mut().zip(s.as_bytes()[..n].iter()) {
        *d = *b as std::os::raw::c_char;
    }
    if let Some(z) = dst.get_mut(n) {
        *z = 0;
    }
}

/// Declares an exported C function. In Rust it keeps its C name; the
/// object file calls it `roce_abi_<name>`, which `build.rs` turns into
/// `<name>` in the version node `symbols.txt` gives it (rustc's own
/// version script, which it passes for every cdylib, claims the names it
/// exports; the renamed ones are ours to version).
macro_rules! export {
    ($(#[$m:meta])* fn $name:ident($($a:ident: $t:ty),* $(,)?) $(-> $r:ty)? $body:block) => {
        $(#[$m])*
        #[export_name = concat!("roce_abi_", stringify!($name))]
        pub(crate) unsafe extern "C" fn $name($($a: $t),*) $(-> $r)? $body
    };
}
