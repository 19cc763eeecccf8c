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

/// The control port `args` give with `-p PORT`, if any.
pub fn control_port(args: &[&str]) -> Option<u16> {
    let at = args.iter().position(|a| *a == "-p")?;
    Some(args.get(at + 1)?.parse().expect("-p PORT"))
}

/// `server`, started with `args`, once it listens when it is a `roce
/// perf` server given `-p PORT`: a `roce perf` client, like perftest's,
/// does not retry a refused connection. Other servers (pingpong, rping)
/// are returned at once: their clients retry.
pub fn once_listening(server: Guard, args: &[&str]) -> Guard {
    match control_port(args) {
        Some(port) if args.first() == Some(&"perf") => server.listening(port),
        _ => server,
    }
}

/// Returns once `server` listens on TCP `port` (a `roce perf` client does
/// not retry a refused connection); fails if it exits first.
pub fn wait_listening(server: &mut std::process::Child, port: &str) {
    if let Err(status) = roce_testkit::wait_listening(server, port.parse().unwrap()) {
        panic!("the server exited ({status}) before listening on {port}");
    }
}

/// The JSON document on the last line of a `roce ... --json` run that
/// exited 0 (the test fails with its output otherwise).
pub fn json_of(o: &std::process::Output) -> serde_json::Value {
    let (out, err) = text(o);
    assert_eq!(o.status.code(), Some(0), "stdout: {out}\nstderr: {err}");
    serde_json::from_str(out.lines().last().unwrap_or(""))
        .unwrap_or_else(|e| panic!("not JSON ({e}): {out}"))
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

/// Whether `prog` is on PATH; a missing one fails the test when
/// `ROCE_REQUIRE_RDMA_TOOLS` is set (CI), else skips it with a word on
/// which Debian `package` provides it.
pub fn have_tool(prog: &str, package: &str) -> bool {
    let found = std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(prog).is_file()));
    if !found {
        assert!(
            std::env::var_os("ROCE_REQUIRE_RDMA_TOOLS").is_none(),
            "{prog} is not installed (apt-get install {package})"
        );
        eprintln!("skipped: {prog} is not installed (apt-get install {package})");
    }
    found
}
