//! What the tests that run programs on the library share: the directory
//! holding `libibverbs.so.1` and `librdmacm.so.1`, the check for an
//! installed program, and a bounded wait.
#![allow(dead_code)]

#[allow(unused_imports)] // not every test file uses it
pub(crate) use roce_testkit::free_port;
use std::path::PathBuf;
use std::process::{Child, Output};
use std::time::{Duration, Instant};

/// Library `name` (`libibverbs`, `librdmacm`) as cargo built it for this
/// test profile: the newer of the one beside the binaries and the one
/// in `deps/` (a stale copy can stay beside them when only a dependent
/// crate was rebuilt).
pub(crate) fn library(name: &str) -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let profile = exe.parent().unwrap().parent().unwrap();
    [
        profile.join(format!("{name}.so")),
        profile.join(format!("deps/{name}.so")),
    ]
    .into_iter()
    .filter_map(|p| Some((std::fs::metadata(&p).ok()?.modified().ok()?, p)))
    .max_by_key(|(t, _)| *t)
    .map(|(_, p)| p)
    .unwrap_or_else(|| panic!("{name}.so was not built in {}", profile.display()))
}

/// A directory (under the test's target tmpdir, named `name`) holding
/// `libibverbs.so.1` and `librdmacm.so.1` → the libraries cargo built
/// for this test profile (librdmacm is a dev-dependency, so it is built
/// with these tests).
pub(crate) fn dropin(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(name);
    std::fs::create_dir_all(&dir).unwrap();
    for lib in ["libibverbs", "librdmacm"] {
        let target = library(lib);
        let link = dir.join(format!("{lib}.so.1"));
        if std::fs::read_link(&link).ok() != Some(target.clone()) {
            // Replaced atomically: tests in parallel never see it missing.
            static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
            let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let tmp = dir.join(format!(".link.{}.{n}", std::process::id()));
            let _ = std::fs::remove_file(&tmp);
            std::os::unix::fs::symlink(&target, &tmp).unwrap();
            std::fs::rename(&tmp, &link).unwrap();
        }
    }
    dir
}

/// Whether `prog` is installed; a missing one fails the test in CI
/// (`ROCE_REQUIRE_RDMA_TOOLS`), and is a printed skip elsewhere.
pub(crate) fn have(prog: &str) -> bool {
    let found = std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(prog).is_file()));
    if !found {
        assert!(
            std::env::var_os("ROCE_REQUIRE_RDMA_TOOLS").is_none(),
            "{prog} is not installed (apt-get install ibverbs-utils perftest rdmacm-utils)"
        );
        eprintln!(
            "skipped: {prog} is not installed (apt-get install ibverbs-utils perftest rdmacm-utils)"
        );
    }
    found
}

/// Waits for `child` at most `limit`, killing it (and failing) past that.
pub(crate) fn finish(mut child: Child, limit: Duration, what: &str) -> Output {
    let end = Instant::now() + limit;
    loop {
        if child.try_wait().unwrap().is_some() {
            return child.wait_with_output().unwrap();
        }
        if Instant::now() > end {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!(
                "{what} did not finish in {limit:?}\nstdout:\n{}\nstderr:\n{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Whether a socket listens on TCP `port` (read from /proc, without
/// connecting: perftest's server takes the first connection as its
/// client).
#[allow(unused_imports)]
pub(crate) use roce_testkit::tcp_listening as listening;

/// Builds `tests/c/<name>.c` against rdma-core's headers and libraries
/// (`-lrdmacm -libverbs`, as any program is built), once per process,
/// into the test's target tmpdir; `None` (a printed skip) when `header`
/// (under /usr/include) is missing, unless `ROCE_REQUIRE_C_HEADERS` is
/// set (as `.ci/run` does), when the test fails.
pub(crate) fn c_program(name: &'static str, header: &str) -> Option<PathBuf> {
    c_program_linked(name, header, &["-lrdmacm", "-libverbs"], "librdmacm-dev")
}

/// [`c_program`] linked with `libs`, `package` being what installs
/// `header` (named when it is missing).
pub(crate) fn c_program_linked(
    name: &'static str,
    header: &str,
    libs: &[&str],
    package: &str,
) -> Option<PathBuf> {
    use std::collections::HashMap;
    use std::sync::{Mutex, OnceLock};
    static BUILT: OnceLock<Mutex<HashMap<&'static str, Option<PathBuf>>>> = OnceLock::new();
    let mut built = BUILT.get_or_init(Default::default).lock().unwrap();
    built
        .entry(name)
        .or_insert_with(|| {
            if !std::path::Path::new("/usr/include").join(header).exists() {
                assert!(
                    std::env::var_os("ROCE_REQUIRE_C_HEADERS").is_none(),
                    "<{header}> is missing (apt-get install {package})"
                );
                eprintln!("skipped: <{header}> is missing (apt-get install {package})");
                return None;
            }
            let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(name);
            std::fs::create_dir_all(&dir).unwrap();
            let exe = dir.join(name);
            let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!("tests/c/{name}.c"));
            let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
            let out = std::process::Command::new(&cc)
                .args(["-O1", "-Wall", "-o"])
                .arg(&exe)
                .arg(&src)
                .args(libs)
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "{name}.c did not build:\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
            Some(exe)
        })
        .clone()
}

/// Builds `tests/c/<name>.c` (see [`c_program`]; `header` is the one it
/// needs) and runs it on the drop-in libraries, bounded by `limit`; the
/// program prints "ok NAME" or "FAIL NAME: why" per check and exits with
/// the number of failures: asserts exit 0 and exactly `oks` "ok" lines.
pub(crate) fn c_checks(name: &'static str, header: &str, oks: usize, limit: Duration) {
    let Some(exe) = c_program(name, header) else {
        return;
    };
    let mut c = std::process::Command::new(&exe);
    c.env("LD_LIBRARY_PATH", dropin(&format!("{name}-dropin")))
        .env("ROCE_DEVICES", "lo");
    let o = roce_testkit::Guard::spawn(c).wait(limit);
    let text = roce_testkit::text_of(&o);
    assert!(o.status.success(), "status {:?}\n{text}", o.status);
    let n = text.lines().filter(|l| l.starts_with("ok ")).count();
    assert_eq!(n, oks, "{text}");
}
