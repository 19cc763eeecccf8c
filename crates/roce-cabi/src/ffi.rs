//! The boundary every exported function goes through: a panic never
//! unwinds into C (it becomes an error return), and errors come back the
//! way rdma-core returns them — an errno value as the result, `-1` with
//! `errno` set, or `NULL` with `errno` set, as each verb documents.

use std::os::raw::c_int;
use std::panic::{catch_unwind, AssertUnwindSafe};

/// An errno value (`libc::EINVAL` ...).
pub type Errno = c_int;

/// What a verb's body returns.
pub type Res<T> = Result<T, Errno>;

/// Sets the calling thread's `errno`.
pub fn set_errno(e: Errno) {
    // SAFETY: `__errno_location` returns the calling thread's errno slot,
    // valid for the thread's lifetime.
    unsafe { *libc::__errno_location() = e };
}

fn run<T>(f: impl FnOnce() -> Res<T>) -> Res<T> {
    match catch_unwind(AssertUnwindSafe(|| {
        #[cfg(feature = "probe")]
        probe::fire();
        f()
    })) {
        Ok(r) => r,
        // The panic message went to stderr through the hook; the program
        // sees an I/O error from the verb.
        Err(_) => Err(libc::EIO),
    }
}

/// A verb returning 0 or an errno value (`ibv_modify_qp`, `ibv_destroy_*`).
pub fn errno_ret(f: impl FnOnce() -> Res<()>) -> c_int {
    match run(f) {
        Ok(()) => 0,
        Err(e) => e,
    }
}

/// A verb returning 0 or a negative errno value
/// (`ibv_resolve_eth_l2_from_gid`).
pub fn neg_errno(f: impl FnOnce() -> Res<()>) -> c_int {
    match run(f) {
        Ok(()) => 0,
        Err(e) => -e,
    }
}

/// A verb returning 0 or an errno value that also sets `errno`, as a
/// failed ioctl behind rdma-core's wrapper leaves it (`_ibv_query_gid_ex`).
pub fn errno_set(f: impl FnOnce() -> Res<()>) -> c_int {
    match run(f) {
        Ok(()) => 0,
        Err(e) => {
            set_errno(e);
            e
        }
    }
}

/// A count, or a negative errno value (`ibv_poll_cq`).
pub fn count_neg(f: impl FnOnce() -> Res<usize>) -> c_int {
    match run(f) {
        Ok(n) => n as c_int,
        Err(e) => -e,
    }
}

/// A count, or a negative errno value with `errno` set too
/// (`_ibv_query_gid_table`).
pub fn count_or_neg(f: impl FnOnce() -> Res<usize>) -> isize {
    match run(f) {
        Ok(n) => n as isize,
        Err(e) => {
            set_errno(e);
            -(e as isize)
        }
    }
}

/// A post (`ibv_post_send`, `ibv_post_recv`, `ibv_post_srq_recv`): 0,
/// or an errno value with `*bad` at the first WR not posted (the list's
/// head `wr` if the body panicked).
// `bad` is the C caller's out pointer (NULL or valid, by the verbs'
// contract): this function is that boundary, called by `export!` only.
#[allow(clippy::not_unsafe_ptr_arg_deref)]
pub fn posted<W>(
    bad: *mut *mut W,
    wr: *mut W,
    f: impl FnOnce() -> Result<(), (Errno, *mut W)>,
) -> c_int {
    let at = match catch_unwind(AssertUnwindSafe(|| {
        #[cfg(feature = "probe")]
        probe::fire();
        f()
    })) {
        Ok(Ok(())) => return 0,
        Ok(Err(at)) => at,
        Err(_) => (libc::EIO, wr),
    };
    // SAFETY: the program's out pointer, or NULL.
    if let Some(b) = unsafe { bad.as_mut() } {
        *b = at.1;
    }
    at.0
}

/// A verb returning a non-negative value, or -1 with `errno` set
/// (`ibv_get_cq_event`, `ibv_query_gid`, `ibv_poll_cq`'s error path).
pub fn minus_one<T: From<i8>>(f: impl FnOnce() -> Res<T>) -> T {
    match run(f) {
        Ok(v) => v,
        Err(e) => {
            set_errno(e);
            T::from(-1)
        }
    }
}

/// A verb returning an object, or NULL with `errno` set.
pub fn ptr_ret<P: Nullable>(f: impl FnOnce() -> Res<P>) -> P {
    match run(f) {
        Ok(p) => p,
        Err(e) => {
            set_errno(e);
            P::null()
        }
    }
}

/// An rdma_cm call: 0, or -1 with `errno` set (librdmacm's convention).
pub fn rc(f: impl FnOnce() -> Res<()>) -> c_int {
    minus_one(|| f().map(|()| 0))
}

/// A function returning nothing (`ibv_ack_cq_events`, `rdma_destroy_qp`):
/// an error or a panic of the body is swallowed, as the C API has no way
/// to report it.
pub fn void(f: impl FnOnce() -> Res<()>) {
    let _ = run(f);
}

/// A function with no error return (`ibv_get_device_guid`,
/// `ibv_wc_status_str`): its value, or `fallback` if the body panics.
/// A panic also sets `errno` to `EIO`.
pub fn value_or<T>(fallback: T, f: impl FnOnce() -> T) -> T {
    run(|| Ok(f())).unwrap_or_else(|e| {
        set_errno(e);
        fallback
    })
}

/// A raw pointer kept in a table (the objects it names are owned by the
/// program's handles; the table only maps engine ids back to them).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Raw(pub *mut std::os::raw::c_void);
// SAFETY: the pointer is only an address in a lookup table; it is
// dereferenced by the thread that looks it up, under the rules of the
// object it names (which a program must not destroy while events for it
// may be delivered, as with rdma-core).
unsafe impl Send for Raw {}

/// Pointers a verb can return NULL as.
pub trait Nullable {
    /// The NULL pointer.
    fn null() -> Self;
}

impl<T> Nullable for *mut T {
    fn null() -> Self {
        std::ptr::null_mut()
    }
}

impl<T> Nullable for *const T {
    fn null() -> Self {
        std::ptr::null()
    }
}

/// The calling thread's `errno` (after a call that set it), or `EIO`.
pub fn last_errno() -> Errno {
    std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

/// A reference from a pointer the program passed, or `EINVAL` for NULL.
///
/// # Safety
/// A non-NULL `p` must point to a live `T` for `'a`.
pub unsafe fn arg<'a, T>(p: *const T) -> Res<&'a T> {
    // SAFETY: the caller's contract.
    unsafe { p.as_ref() }.ok_or(libc::EINVAL)
}

/// A mutable reference from a pointer the program passed, or `EINVAL`.
///
/// # Safety
/// A non-NULL `p` must point to a live `T` for `'a`, not aliased.
pub unsafe fn arg_mut<'a, T>(p: *mut T) -> Res<&'a mut T> {
    // SAFETY: the caller's contract.
    unsafe { p.as_mut() }.ok_or(libc::EINVAL)
}

/// The errno rdma-core's kernel path gives for each engine error.
pub fn errno_of(e: &roce_verbs::Error) -> Errno {
    use roce_core::VerbsError;
    use roce_verbs::Error as E;
    match e {
        E::Verbs(VerbsError::NotFound) => libc::ENOENT,
        E::Verbs(VerbsError::Busy) | E::MrInUse => libc::EBUSY,
        E::Verbs(VerbsError::Access(_)) => libc::EINVAL,
        E::Verbs(VerbsError::Modify(_)) | E::Verbs(VerbsError::InvalidArgument(_)) => libc::EINVAL,
        E::Post(p) => post_errno(p),
        E::Create(c) => create_errno(c),
        E::ModifyQp(m) => modify_errno(m),
        E::RegMr(r) => reg_errno(r),
        E::WrongContext => libc::EINVAL,
        E::Cq(c) => cq_errno(c),
        E::SrqLimit(roce_verbs::SrqLimitError::NoSuchSrq) => libc::ENOENT,
        E::SrqLimit(_) => libc::EINVAL,
        E::Region(_) => libc::EFAULT,
        E::InvalidArgument(_) => libc::EINVAL,
        E::ThreadSpawn => libc::EAGAIN,
        _ => libc::EIO,
    }
}

/// The errno of a failed CQ call (`ibv_poll_cq`, `ibv_req_notify_cq`,
/// `ibv_resize_cq`): an overflow is `EOVERFLOW`, a bad size `EINVAL`.
pub fn cq_errno(e: &roce_verbs::CqError) -> Errno {
    use roce_verbs::CqError as C;
    match e {
        C::Overflow => libc::EOVERFLOW,
        C::NoSuchCq => libc::ENOENT,
        _ => libc::EINVAL,
    }
}

/// The errno of a refused post (`ibv_post_send`, `ibv_post_recv`,
/// `ibv_post_srq_recv`): a full queue is `ENOMEM` as in rdma-core's
/// providers, everything else about the WR `EINVAL`.
pub fn post_errno(e: &roce_verbs::PostError) -> Errno {
    use roce_verbs::PostError as P;
    match e {
        P::QueueFull => libc::ENOMEM,
        P::NoSuchQueue => libc::ENOENT,
        _ => libc::EINVAL,
    }
}

/// The errno of a refused creation (`ibv_create_qp`, `_cq`, `_srq`, `_ah`).
pub fn create_errno(e: &roce_verbs::CreateError) -> Errno {
    use roce_verbs::CreateError as C;
    match e {
        C::Exhausted => libc::EBUSY,
        C::AddrUnavailable(_, std::io::ErrorKind::AddrInUse) => libc::EADDRINUSE,
        C::AddrUnavailable(..) => libc::EADDRNOTAVAIL,
        _ => libc::EINVAL,
    }
}

/// The errno of a refused `ibv_modify_qp`.
pub fn modify_errno(e: &roce_verbs::ModifyQpError) -> Errno {
    use roce_verbs::ModifyQpError as M;
    match e {
        M::NoSuchQp => libc::ENOENT,
        M::AddrUnavailable(_, std::io::ErrorKind::AddrInUse) => libc::EADDRINUSE,
        M::AddrUnavailable(..) => libc::EADDRNOTAVAIL,
        _ => libc::EINVAL,
    }
}

/// The errno of a refused `ibv_reg_mr` / `ibv_rereg_mr`.
pub fn reg_errno(e: &roce_verbs::RegMrError) -> Errno {
    use roce_verbs::RegMrError as R;
    match e {
        R::NotRegistered => libc::ENOENT,
        _ => libc::EINVAL,
    }
}

/// `errno_of` as a `map_err` argument, for the general error and every
/// call's own error type.
pub fn verr(e: impl Into<roce_verbs::Error>) -> Errno {
    errno_of(&e.into())
}

/// Copies `s` into a C `char` array, NUL-terminated and truncated.
pub fn copy_cstr(dst: &mut [std::os::raw::c_char], s: &str) {
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
///
/// The body is one call of a return convention of this module with a
/// closure: `errno_ret`, `errno_set`, `neg_errno`, `count_or_neg`,
/// `count_neg`, `minus_one`, `rc`, `ptr_ret`, `void`, `posted(bad, wr,
/// ..)` or `value_or(fallback, ..)` (imported where the macro is
/// used). The macro accepts no other shape, so no export can leave out
/// the panic boundary or its error value, and in tests each export is
/// registered as a `probe::Probe` of its convention (there is no probe
/// check for any other name), which checks that value with the body
/// made to panic.
#[macro_export]
macro_rules! export {
    ($(#[$m:meta])* fn $name:ident($($a:ident: $t:ty),* $(,)?) $(-> $r:ty)? { $($conv:tt)* }) => {
        $(#[$m])*
        #[export_name = concat!("roce_abi_", stringify!($name))]
        pub(crate) unsafe extern "C" fn $name($($a: $t),*) $(-> $r)? {
            $crate::boundary!(@traced $name, false, ($($a),*), ($($r)?), $($conv)*)
        }
        $crate::boundary!(@probe $name, ($($t),*), $($conv)*);
    };
}

/// A C entry point reached through a function pointer the library hands
/// out (the `ops` of a context, the `ibv_wr_*` builder, the extended CQ's
/// readers), under the same rule as [`export!`].
#[macro_export]
macro_rules! entry {
    ($(#[$m:meta])* fn $name:ident($($a:ident: $t:ty),* $(,)?) $(-> $r:ty)? { $($conv:tt)* }) => {
        $(#[$m])*
        unsafe extern "C" fn $name($($a: $t),*) $(-> $r)? {
            $crate::boundary!(@traced $name, true, ($($a),*), ($($r)?), $($conv)*)
        }
        $crate::boundary!(@probe $name, ($($t),*), $($conv)*);
    };
}

/// The body and the test probe of [`export!`] and [`entry!`], and the
/// call's trace (`ROCE_TRACE`, docs/debugging.md, "Tracing"): with
/// tracing off, one relaxed atomic load before the body.
#[doc(hidden)]
#[macro_export]
macro_rules! boundary {
    (@traced $name:ident, $entry:expr, ($($a:ident),*), ($($r:ty)?), $($conv:tt)*) => {{
        let mut __call = if $crate::trace::enabled() {
            $crate::trace::Call::begin(stringify!($name), $entry, $crate::boundary!(@conv $($conv)*))
        } else {
            None
        };
        #[allow(unused_imports)]
        use $crate::trace::{Decoded as _, DecodedRet as _, Plain as _, PlainRet as _};
        if let Some(__c) = &mut __call {
            __c.args(|__c| {
                $((&&$crate::trace::Arg(stringify!($a), &$a)).before(__c);)*
            });
        }
        let __r: $crate::boundary!(@ty $($r)?) = $crate::boundary!(@body $($conv)*);
        if let Some(mut __c) = __call {
            __c.returned(|__c| (&&$crate::trace::Ret(&__r)).ret(__c));
            __c.args(|__c| {
                $((&&$crate::trace::Arg(stringify!($a), &$a)).after(__c);)*
            });
            __c.end();
        }
        __r
    }};
    (@ty) => { () };
    (@ty $r:ty) => { $r };
    (@conv value_or($($x:tt)*)) => { "value_or" };
    (@conv posted($($x:tt)*)) => { "posted" };
    (@conv $conv:ident($($x:tt)*)) => { stringify!($conv) };
    (@body value_or($d:expr, || $body:expr)) => {
        value_or($d, || $body)
    };
    (@body posted($bad:ident, $wr:ident, || $body:expr)) => {
        posted($bad, $wr, || $body)
    };
    (@body $conv:ident(|| $body:expr)) => {
        $conv(|| $body)
    };
    (@probe $name:ident, ($($t:ty),*), value_or($d:expr, || $body:expr)) => {
        $crate::boundary!(@submit $name, ($($t),*), |r, _e| $crate::ffi::probe::same(r, $d));
    };
    (@probe $name:ident, ($($t:ty),*), posted($bad:ident, $wr:ident, || $body:expr)) => {
        $crate::boundary!(@probe $name, ($($t),*), errno_ret(|| $body));
    };
    (@probe $name:ident, ($($t:ty),*), $conv:ident(|| $body:expr)) => {
        $crate::boundary!(@submit $name, ($($t),*), |r, e| $crate::ffi::probe::$conv(r, e));
    };
    (@submit $name:ident, ($($t:ty),*), |$r:ident, $e:ident| $check:expr) => {
        #[cfg(test)]
        $crate::ffi::probe::submit! {
            $crate::ffi::probe::Probe {
                name: stringify!($name),
                check: {
                    fn check() -> Result<(), String> {
                        // SAFETY: the armed probe panics before the body
                        // reads any argument.
                        let ($r, $e) = $crate::ffi::probe::call(|| unsafe {
                            $name($($crate::ffi::probe::zero::<$t>()),*)
                        });
                        let _ = $e;
                        $check
                    }
                    check
                },
            }
        }
    };
}

/// What the tests prove of every C entry point: with its body made to
/// panic, it returns its convention's error value and does not unwind.
#[cfg(feature = "probe")]
pub mod probe {
    use super::{set_errno, Nullable};
    use std::cell::Cell;
    use std::fmt::Debug;
    use std::os::raw::c_int;

    thread_local! {
        static ARMED: Cell<bool> = const { Cell::new(false) };
    }

    /// An entry point and its check.
    pub struct Probe {
        /// The entry point's name.
        pub name: &'static str,
        /// Calls it armed and checks the value it returned.
        pub check: fn() -> Result<(), String>,
    }

    inventory::collect!(Probe);
    #[doc(hidden)]
    pub use inventory::submit;

    /// Every entry point the macros declared.
    pub fn all() -> impl Iterator<Item = &'static Probe> {
        inventory::iter::<Probe>.into_iter()
    }

    /// Panics when armed: called by the boundary before each body.
    pub fn fire() {
        if ARMED.with(|a| a.get()) {
            std::panic::panic_any(Armed);
        }
    }

    /// The payload of a probe's panic (the test's hook stays quiet on it).
    pub struct Armed;

    /// Runs `f` armed; its result and `errno` after it.
    pub fn call<R>(f: impl FnOnce() -> R) -> (R, c_int) {
        set_errno(0);
        ARMED.with(|a| a.set(true));
        let r = f();
        ARMED.with(|a| a.set(false));
        // SAFETY: the calling thread's errno slot.
        (r, unsafe { *libc::__errno_location() })
    }

    /// A zeroed argument: the body never runs, so it is never read.
    ///
    /// # Safety
    /// `T` must be valid all-zero (integers, raw pointers, C structs).
    pub unsafe fn zero<T>() -> T {
        // SAFETY: the caller's contract.
        unsafe { std::mem::zeroed() }
    }

    /// The check of a value: `got` is `want`.
    pub fn same<T: PartialEq + Debug>(got: T, want: T) -> Result<(), String> {
        if got == want {
            Ok(())
        } else {
            Err(format!("returned {got:?}, not {want:?}"))
        }
    }

    /// `errno_ret`'s error value: `EIO`.
    pub fn errno_ret(r: c_int, _: c_int) -> Result<(), String> {
        same(r, libc::EIO)
    }

    /// `neg_errno`'s: `-EIO`.
    pub fn neg_errno(r: c_int, _: c_int) -> Result<(), String> {
        same(r, -libc::EIO)
    }

    /// `errno_set`'s: `EIO`, and `errno` `EIO`.
    pub fn errno_set(r: c_int, e: c_int) -> Result<(), String> {
        same((r, e), (libc::EIO, libc::EIO))
    }

    /// `count_neg`'s: `-EIO`.
    pub fn count_neg(r: c_int, _: c_int) -> Result<(), String> {
        same(r, -libc::EIO)
    }

    /// `count_or_neg`'s: `-EIO`, and `errno` `EIO`.
    pub fn count_or_neg(r: isize, e: c_int) -> Result<(), String> {
        same((r, e), (-(libc::EIO as isize), libc::EIO))
    }

    /// `minus_one`'s: -1, and `errno` `EIO`.
    pub fn minus_one<T: From<i8> + PartialEq + Debug>(r: T, e: c_int) -> Result<(), String> {
        same((r, e), (T::from(-1), libc::EIO))
    }

    /// `rc`'s (librdmacm's): -1, and `errno` `EIO`.
    pub fn rc(r: c_int, e: c_int) -> Result<(), String> {
        minus_one(r, e)
    }

    /// `ptr_ret`'s: NULL, and `errno` `EIO`.
    pub fn ptr_ret<P: Nullable + PartialEq + Debug>(r: P, e: c_int) -> Result<(), String> {
        same((r, e), (P::null(), libc::EIO))
    }

    /// `void`'s: nothing to check (it returns nothing).
    pub fn void(_: (), _: c_int) -> Result<(), String> {
        Ok(())
    }

    /// Runs every entry point's probe (with the panic hook quiet for the
    /// probes' own panics): the failures, each as `name: why`, and how
    /// many probes ran.
    pub fn failures() -> (Vec<String>, usize) {
        let quiet = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if !info.payload().is::<Armed>() {
                quiet(info);
            }
        }));
        let failed = all()
            .filter_map(|p| (p.check)().err().map(|e| format!("{}: {e}", p.name)))
            .collect();
        let _ = std::panic::take_hook();
        (failed, all().count())
    }

    /// Checks that every name of `symbols` (the text of a crate's
    /// `symbols.txt`: node, name, kind per line) whose node `ours`
    /// accepts is the `export!` of a function of this test binary (its
    /// own, or `unsupported` / `enosys` for the stubs), and that the
    /// sources under `src` define C functions nowhere else: no
    /// `#[no_mangle]`, `#[export_name]` or `extern "C" fn` outside the
    /// macros, but those `allowed` (`file.rs: name`, or `file.rs:
    /// #[attribute ...]`), each with a boundary of its own. The number
    /// of names checked, or what is wrong.
    pub fn check_exports(
        symbols: &str,
        ours: impl Fn(&str) -> bool,
        src: &std::path::Path,
        allowed: &[&str],
    ) -> Result<usize, String> {
        let probes: std::collections::HashSet<&str> = all().map(|p| p.name).collect();
        let mut exported = 0;
        for line in symbols
            .lines()
            .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        {
            let f: Vec<&str> = line.split_whitespace().collect();
            if f.len() < 3 || !ours(f[0]) {
                continue;
            }
            let target = match f[2] {
                "fn" => f[1],
                "stub" => "unsupported",
                "enosys" => "enosys",
                _ => continue,
            };
            if !probes.contains(target) {
                return Err(format!("{} is not declared with export!", f[1]));
            }
            exported += 1;
        }
        let mut found = Vec::new();
        let mut stack = vec![src.to_path_buf()];
        while let Some(dir) = stack.pop() {
            let entries = std::fs::read_dir(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
            for e in entries {
                let p = e.map_err(|e| e.to_string())?.path();
                if p.is_dir() {
                    stack.push(p);
                    continue;
                }
                let rel = p.strip_prefix(src).unwrap_or(&p).display().to_string();
                let text = std::fs::read_to_string(&p).map_err(|e| format!("{rel}: {e}"))?;
                for l in text.lines().map(str::trim_start) {
                    if l.starts_with("#[no_mangle]") || l.starts_with("#[export_name") {
                        let entry = format!("{rel}: {l}");
                        if !allowed.contains(&entry.as_str()) {
                            found.push(entry);
                        }
                    }
                    let def = l
                        .trim_start_matches("pub(crate) ")
                        .trim_start_matches("pub ")
                        .trim_start_matches("unsafe ")
                        .strip_prefix("extern \"C\" fn ");
                    if let Some(rest) = def {
                        let name = rest.split('(').next().unwrap_or("");
                        let entry = format!("{rel}: {name}");
                        if !allowed.contains(&entry.as_str()) {
                            found.push(entry);
                        }
                    }
                }
            }
        }
        if found.is_empty() {
            Ok(exported)
        } else {
            Err(format!("C entry points outside export!/entry!: {found:#?}"))
        }
    }
}
