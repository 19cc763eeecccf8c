//! `tests/c/bounds.c`, compiled against rdma-core's header and linked
//! against this library (as `abuse.rs` does), then run: counts a program
//! gets wrong (`num_sge` beyond the queue's limit, WR lists that loop or
//! outrun the queue) are errors, never a crash or a hang, and the
//! library writes to, reads from and closes only the descriptors it
//! owns (a completion channel's fd or `async_fd` the program closed and
//! reused for a file of its own).

mod common;

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use roce_testkit::{text_of, Guard};

/// The checks `bounds.c` prints "ok" for when every case passes.
const CHECKS: usize = 29;

#[test]
fn bad_counts_and_closed_descriptors_from_c() {
    let header = std::path::Path::new("/usr/include/infiniband/verbs.h");
    if !header.exists() {
        assert!(
            std::env::var_os("ROCE_REQUIRE_C_HEADERS").is_none(),
            "{} is missing (apt-get install libibverbs-dev)",
            header.display()
        );
        eprintln!("skipped: {} is missing", header.display());
        return;
    }
    let lib = common::library("libibverbs");
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("bounds");
    std::fs::create_dir_all(&dir).unwrap();
    // Linked against the library under its SONAME's file name.
    let so = dir.join("libibverbs.so.1");
    let _ = std::fs::remove_file(&so);
    std::os::unix::fs::symlink(&lib, &so).unwrap();
    let prog = dir.join("bounds");
    let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/c/bounds.c");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let out = Command::new(&cc)
        .args(["-O1", "-Wall", "-o"])
        .arg(&prog)
        .arg(&src)
        .arg(&so)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut c = Command::new(&prog);
    c.env("LD_LIBRARY_PATH", &dir).env("ROCE_DEVICES", "lo");
    // Each case has its own alarm() (10 s at most); this bounds the whole.
    let o = Guard::spawn(c).wait(Duration::from_secs(120));
    let text = text_of(&o);
    assert!(o.status.success(), "status {:?}\n{text}", o.status);
    let oks = text.lines().filter(|l| l.starts_with("ok ")).count();
    assert_eq!(oks, CHECKS, "{text}");
}
