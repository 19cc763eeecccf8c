//! `ROCE_TRACE` (`roce exec --trace FILE`, docs/debugging.md, "Tracing"):
//! every verbs and rdma_cm call the program makes, with its arguments,
//! result and errno, and the completions and events it is handed, as JSON
//! lines.
//!
//! The hook is the C boundary itself: `export!` and `entry!` (`ffi.rs`)
//! wrap every entry point in [`Call::begin`] .. [`Call::end`] when
//! [`enabled`] says so, which with tracing off is one relaxed atomic load.
//! The arguments are decoded by type and name (`decode`). A call made
//! while the same thread is inside a traced call (the library calling its
//! own exports, or a signal handler calling a verb) is not traced, so the
//! trace never re-enters itself.
//!
//! Lines are written whole into one buffered writer under a lock, flushed
//! when its buffer fills and at exit (an `atexit` handler): a process
//! killed by a signal loses what was buffered. An error writing the file
//! is said once on stderr and ends the trace; the program goes on. A child
//! made by `fork()` does not trace (its parent's buffer is not its own).
//!
//! `ibv_poll_cq` calls that return nothing (and `ibv_start_poll` /
//! `ibv_next_poll` answering `ENOENT`) are counted, not written: a busy
//! poll loop makes millions. The next line of the thread says how many
//! came before it (`"empty_polls"`), the exit line the total.

use std::cell::{Cell, RefCell};
use std::fmt::Write as _;
use std::fs::File;
use std::io::{BufWriter, Write as _};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::Instant;

use crate::config::say;

mod decode;
mod names;

pub use decode::qp_attr;
pub use decode::{Arg, Decoded, DecodedRet, Plain, PlainRet, Ret};
pub use names::WC_STATUS;

/// Not read yet, off, on.
const UNSET: u8 = 0;
const OFF: u8 = 1;
const ON: u8 = 2;

/// Whether this process traces (read once, at its first call).
static STATE: AtomicU8 = AtomicU8::new(UNSET);

/// The trace file of this process, when `ROCE_TRACE` names one.
static TRACER: OnceLock<Option<Tracer>> = OnceLock::new();

/// The size of the writer's buffer: a few hundred lines.
const BUFFER: usize = 64 * 1024;

struct Tracer {
    path: PathBuf,
    out: Mutex<Option<BufWriter<File>>>,
    /// Empty polls, all threads.
    empty: AtomicU64,
    /// Lines written.
    lines: AtomicU64,
    /// After the exit line, every line is flushed as written (calls
    /// from other `atexit` handlers or threads still running).
    exited: AtomicBool,
}

/// Per thread: inside a traced call, the thread's ID, the empty polls
/// since its last line, what the call's body noted ([`note`]), and the
/// buffer its lines are made in.
struct Local {
    busy: Cell<bool>,
    /// The traced call's name and whether it is an entry (as [`Call`]).
    call: Cell<Option<(&'static str, bool)>>,
    tid: Cell<i32>,
    empty: Cell<u64>,
    note: RefCell<String>,
    line: RefCell<String>,
}

thread_local! {
    static LOCAL: Local = const {
        Local {
            busy: Cell::new(false),
            call: Cell::new(None),
            tid: Cell::new(0),
            empty: Cell::new(0),
            note: RefCell::new(String::new()),
            line: RefCell::new(String::new()),
        }
    };
}

/// Whether calls may be traced: false only once the process knows it
/// does not trace. One relaxed load: the cost of every C entry point
/// when tracing is off.
#[inline(always)]
pub fn enabled() -> bool {
    STATE.load(Ordering::Relaxed) != OFF
}

fn tracer() -> Option<&'static Tracer> {
    match STATE.load(Ordering::Relaxed) {
        OFF => None,
        ON => TRACER.get().and_then(Option::as_ref),
        _ => init(),
    }
}

#[cold]
fn init() -> Option<&'static Tracer> {
    let t = TRACER.get_or_init(Tracer::from_env).as_ref();
    STATE.store(if t.is_some() { ON } else { OFF }, Ordering::Relaxed);
    t
}

/// Registered with `atexit`: the exit line, and the buffer flushed.
/// Catches panics itself (as `cm/exit.rs`'s does).
extern "C" fn at_exit() {
    let _ = std::panic::catch_unwind(|| {
        if STATE.load(Ordering::Relaxed) != ON {
            return;
        }
        if let Some(t) = TRACER.get().and_then(Option::as_ref) {
            let line = format!(
                "{{\"t\":{},\"pid\":{},\"event\":\"exit\",\"empty_polls\":{},\"lines\":{}}}\n",
                now(),
                std::process::id(),
                t.empty.load(Ordering::Relaxed),
                t.lines.load(Ordering::Relaxed) + 1
            );
            t.exited.store(true, Ordering::Relaxed);
            t.write(&line);
        }
    });
}

/// Registered with `pthread_atfork`: a child stops tracing (one store,
/// async-signal-safe).
extern "C" fn at_fork_child() {
    STATE.store(OFF, Ordering::Relaxed);
}

impl Tracer {
    fn from_env() -> Option<Tracer> {
        let v = std::env::var("ROCE_TRACE")
            .ok()
            .filter(|v| !v.trim().is_empty() && v.trim() != "0")?;
        let path = crate::config::file_name(v.trim());
        let file = match File::create(&path) {
            Ok(f) => f,
            Err(e) => {
                say(format_args!(
                    "ROCE_TRACE={v}: cannot create {}: {e}; no trace",
                    path.display()
                ));
                return None;
            }
        };
        let t = Tracer {
            path,
            out: Mutex::new(Some(BufWriter::with_capacity(BUFFER, file))),
            empty: AtomicU64::new(0),
            lines: AtomicU64::new(0),
            exited: AtomicBool::new(false),
        };
        let argv: Vec<String> = std::env::args_os()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        let mut line = format!(
            "{{\"t\":{},\"pid\":{},\"event\":\"start\",\"argv\":[",
            now(),
            std::process::id()
        );
        for (i, a) in argv.iter().enumerate() {
            if i > 0 {
                line.push(',');
            }
            names::string(&mut line, a);
        }
        line += "]}\n";
        t.write(&line);
        // SAFETY: registers handlers with no arguments that only touch
        // this module's atomics and file (the C library calls them).
        unsafe {
            libc::atexit(at_exit);
            libc::pthread_atfork(None, None, Some(at_fork_child));
        }
        Some(t)
    }

    /// Writes one line whole; an error ends the trace, said once.
    fn write(&self, line: &str) {
        let mut g = self.out.lock().unwrap_or_else(|p| p.into_inner());
        let Some(w) = g.as_mut() else { return };
        let r = w.write_all(line.as_bytes()).and_then(|()| {
            if self.exited.load(Ordering::Relaxed) {
                w.flush()
            } else {
                Ok(())
            }
        });
        match r {
            Ok(()) => {
                self.lines.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) => {
                STATE.store(OFF, Ordering::Relaxed);
                let w = g.take();
                drop(g);
                // The buffer is lost with the writer (its flush would
                // fail the same way).
                if let Some(w) = w {
                    let _ = w.into_parts();
                }
                say(format_args!(
                    "ROCE_TRACE: cannot write {}: {e}; tracing stopped",
                    self.path.display()
                ));
            }
        }
    }
}

/// Unix time in seconds, to the microsecond.
fn now() -> String {
    let mut s = String::new();
    put_now(&mut s);
    s
}

fn put_now(s: &mut String) {
    let d = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let _ = write!(s, "{}.{:06}", d.as_secs(), d.subsec_micros());
}

/// The prefix of the name a program knows an entry point by: exports
/// keep theirs; the entries reached through function pointers are the
/// inline wrappers `verbs.h` gives them (`post_send` is `ibv_post_send`,
/// `read_opcode` is `ibv_wc_read_opcode`).
fn prefix(name: &'static str, entry: bool) -> &'static str {
    if !entry || name.starts_with("ibv_") || name.starts_with("rdma_") {
        ""
    } else if name.starts_with("read_") {
        "ibv_wc_"
    } else {
        "ibv_"
    }
}

/// Adds to the call being traced on this thread when it is `verb` (the
/// verb's body, for what only it decodes: `ibv_modify_qp`'s attributes by
/// its mask). A verb the library calls inside another traced call (the
/// CM's `ibv_modify_qp` in `rdma_create_ep`) notes nothing: the line is
/// the outer call's. Costs one relaxed load when tracing is off.
pub fn note(verb: &str, f: impl FnOnce(&mut String)) {
    if STATE.load(Ordering::Relaxed) != ON {
        return;
    }
    let _ = LOCAL.try_with(|l| {
        let this = l
            .call
            .get()
            .is_some_and(|(name, entry)| verb.strip_prefix(prefix(name, entry)) == Some(name));
        if l.busy.get() && this {
            if let Ok(mut n) = l.note.try_borrow_mut() {
                f(&mut n);
            }
        }
    });
}

/// One traced call, from its entry to its return.
pub struct Call {
    name: &'static str,
    entry: bool,
    conv: &'static str,
    t0: Instant,
    /// `,"arg":value` for each argument, then what the call gave back
    /// through them.
    args: String,
    /// `,"key":value` after the result (`"wc"`, `"event"`).
    out: String,
    after: bool,
    ret: String,
    ret_num: Option<i64>,
    errno: i32,
}

impl Call {
    /// A call starting, or `None` when this one is not traced.
    #[inline(never)]
    pub fn begin(name: &'static str, entry: bool, conv: &'static str) -> Option<Call> {
        tracer()?;
        let free = LOCAL
            .try_with(|l| {
                let free = !l.busy.replace(true);
                if free {
                    l.call.set(Some((name, entry)));
                }
                free
            })
            .unwrap_or(false);
        free.then(|| Call {
            name,
            entry,
            conv,
            t0: Instant::now(),
            args: String::with_capacity(128),
            out: String::new(),
            after: false,
            ret: String::new(),
            ret_num: None,
            errno: 0,
        })
    }

    /// Runs a decoder (a panic in it is swallowed: the trace loses a
    /// field, the program nothing).
    pub fn args(&mut self, f: impl FnOnce(&mut Call)) {
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(self)));
    }

    /// The body returned: `errno` as it left it, and the value.
    pub fn returned(&mut self, f: impl FnOnce(&mut Call)) {
        // SAFETY: the calling thread's errno slot.
        self.errno = unsafe { *libc::__errno_location() };
        self.after = true;
        self.args(f);
    }

    /// Whether this is the call the program knows as `full`.
    pub fn is(&self, full: &str) -> bool {
        full.strip_prefix(prefix(self.name, self.entry)) == Some(self.name)
    }

    /// Whether this is an rdma_cm call.
    pub fn is_cm(&self) -> bool {
        self.name.starts_with("rdma_")
    }

    /// The result as a number (a count, an errno value, an address).
    pub fn ret_num(&self) -> Option<i64> {
        self.ret_num
    }

    /// Whether the call succeeded, by its convention.
    pub fn ok(&self) -> bool {
        self.failed().is_none()
    }

    /// Starts `,"key":` among the arguments (before the call) or the
    /// results (after it); the value follows.
    pub fn key(&mut self, key: &str) -> &mut String {
        let s = if self.after {
            &mut self.out
        } else {
            &mut self.args
        };
        s.push(',');
        names::string(s, key.trim_start_matches('_'));
        s.push(':');
        s
    }

    /// Sets the result: its JSON and its number.
    pub fn set_ret(&mut self, json: String, num: Option<i64>) {
        self.ret = json;
        self.ret_num = num;
    }

    /// The errno value the call failed with, by its convention.
    fn failed(&self) -> Option<i32> {
        let r = self.ret_num?;
        match self.conv {
            "errno_ret" | "errno_set" | "posted" => (r != 0).then_some(r as i32),
            "neg_errno" | "count_neg" | "count_or_neg" => (r < 0).then_some(-r as i32),
            "minus_one" | "rc" => (r == -1).then_some(self.errno),
            "ptr_ret" => (r == 0).then_some(self.errno),
            _ => None,
        }
    }

    fn empty_poll(&self) -> bool {
        match self.name {
            "poll_cq" => self.ret_num == Some(0),
            "start_poll" | "next_poll" => self.ret_num == Some(libc::ENOENT as i64),
            _ => false,
        }
    }

    /// The call is over: its line written (or an empty poll counted),
    /// and `errno` left as the body left it.
    pub fn end(self) {
        let errno = self.errno;
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.write()));
        // SAFETY: the calling thread's errno slot.
        unsafe { *libc::__errno_location() = errno };
    }

    fn write(&self) {
        let Some(t) = TRACER.get().and_then(Option::as_ref) else {
            return;
        };
        let (tid, empty, note) = LOCAL
            .try_with(|l| {
                if l.tid.get() == 0 {
                    // SAFETY: gettid has no preconditions.
                    l.tid.set(unsafe { libc::gettid() });
                }
                let note = std::mem::take(&mut *l.note.borrow_mut());
                (l.tid.get(), l.empty.get(), note)
            })
            .unwrap_or_default();
        if self.empty_poll() {
            t.empty.fetch_add(1, Ordering::Relaxed);
            let _ = LOCAL.try_with(|l| l.empty.set(l.empty.get() + 1));
            return;
        }
        let _ = LOCAL.try_with(|l| {
            l.empty.set(0);
            // The thread's line buffer, kept between calls.
            let Ok(mut s) = l.line.try_borrow_mut() else {
                return;
            };
            s.clear();
            self.line(&mut s, tid, empty, &note);
            t.write(&s);
        });
    }

    fn line(&self, s: &mut String, tid: i32, empty: u64, note: &str) {
        s.push_str("{\"t\":");
        put_now(s);
        let _ = write!(
            s,
            ",\"tid\":{tid},\"call\":\"{}{}\",\"args\":{{",
            prefix(self.name, self.entry),
            self.name
        );
        s.push_str(self.args.strip_prefix(',').unwrap_or(&self.args));
        if !note.is_empty() {
            if !self.args.is_empty() {
                s.push(',');
            }
            s.push_str(note);
        }
        s.push('}');
        if !self.ret.is_empty() {
            s.push_str(",\"ret\":");
            s.push_str(&self.ret);
        }
        if let Some(e) = self.failed() {
            let _ = write!(s, ",\"errno\":{e},\"err\":\"{}\"", names::errno(e));
        }
        s.push_str(&self.out);
        let _ = write!(
            s,
            ",\"us\":{:.3}",
            self.t0.elapsed().as_nanos() as f64 / 1e3
        );
        if empty != 0 {
            let _ = write!(s, ",\"empty_polls\":{empty}");
        }
        s.push_str("}\n");
    }
}

impl Drop for Call {
    fn drop(&mut self) {
        let _ = LOCAL.try_with(|l| {
            l.busy.set(false);
            l.call.set(None);
            if let Ok(mut n) = l.note.try_borrow_mut() {
                n.clear();
            }
        });
    }
}
