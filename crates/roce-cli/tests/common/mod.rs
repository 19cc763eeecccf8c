//! Helpers shared by the end-to-end tests of the `roce` binary.
#![allow(dead_code, unreachable_pub)]

use std::process::Command;

/// The `roce` binary under test.
pub fn roce() -> Command {
    Command::new(env!("CARGO_BIN_EXE_roce"))
}

/// A child process (usually a server) killed if the test fails before
/// waiting for it; `wait(limit)` is bounded.
#[allow(unused_imports)]
pub use roce_testkit::Guard;

/// A process's standard output and error as text.
#[allow(unused_imports)]
pub use roce_testkit::text;

/// `roce ARGS`, started with its output captured, killed if the test
/// fails before waiting for it.
pub fn spawn(args: &[&str]) -> Guard {
    let mut c = roce();
    c.args(args);
    Guard::spawn(c)
}

/// Where cargo left the drop-in libraries (`libibverbs.so`,
/// `librdmacm.so`) for this build of `roce`: its `deps` directory when
/// both are there, else beside the binary (`ROCE_LIB_DIR` for `roce
/// exec`).
pub fn lib_dir() -> std::path::PathBuf {
    let bin = std::path::PathBuf::from(env!("CARGO_BIN_EXE_roce"));
    let dir = bin.parent().unwrap();
    let deps = dir.join("deps");
    if deps.join("libibverbs.so").is_file() && deps.join("librdmacm.so").is_file() {
        deps
    } else {
        dir.to_path_buf()
    }
}
