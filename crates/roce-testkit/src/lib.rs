//! What the workspace's tests repeat, written once (a dev-dependency of
//! the crates whose tests use it; never a dependency of a library):
//!
//! * [`example`]: the path of an example binary of the package under
//!   test (`cargo test` builds every example beside the test binaries);
//! * [`run_bounded`] and [`Guard`]: a child process waited for at most a
//!   given time, killed if the test fails first, so no test can hang.
//!
//! ```
//! use std::process::Command;
//! use std::time::Duration;
//!
//! let out = roce_testkit::run_bounded(Command::new("true"), Duration::from_secs(10));
//! assert!(out.status.success());
//! ```

use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// The example binary `name` of the package whose test is running: in
/// `target/<profile>/examples/`, beside the test binary's `deps/`. Fails
/// with what to do when it was not built (`cargo test -p PKG` builds the
/// package's examples; `cargo test --test X` alone does not).
pub fn example(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("the test binary's path");
    let dir = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("target/<profile>/deps/");
    let path = dir.join("examples").join(name);
    assert!(
        path.exists(),
        "{} is not built: run `cargo test -p PACKAGE` (it builds the examples) or `cargo build --examples`",
        path.display()
    );
    path
}

/// A child process killed when dropped before it was waited for.
#[derive(Debug)]
pub struct Guard(pub Option<Child>);

impl Guard {
    /// Spawns `cmd` with stdout and stderr captured.
    pub fn spawn(mut cmd: Command) -> Guard {
        let child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {cmd:?}: {e}"));
        Guard(Some(child))
    }

    /// Waits for the child, at most `limit`: past it the child is killed
    /// and the test fails, with what it printed.
    pub fn wait(mut self, limit: Duration) -> Output {
        let mut c = self.0.take().expect("waited once");
        let end = Instant::now() + limit;
        while c.try_wait().expect("try_wait").is_none() {
            if Instant::now() > end {
                let _ = c.kill();
                let out = c.wait_with_output().expect("wait");
                panic!(
                    "the process did not finish in {limit:?}; it printed:\n{}\n{}",
                    String::from_utf8_lossy(&out.stdout),
                    String::from_utf8_lossy(&out.stderr)
                );
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        c.wait_with_output().expect("wait")
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        if let Some(c) = &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Runs `cmd` to the end, at most `limit` (see [`Guard::wait`]).
pub fn run_bounded(cmd: Command, limit: Duration) -> Output {
    Guard::spawn(cmd).wait(limit)
}

/// A process's standard output and error as text.
pub fn text(o: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}
