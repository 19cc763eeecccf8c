//! `tests/c/contexts.c`, compiled against rdma-core's header and linked
//! against this library (its SONAME and version nodes, as a program
//! built for rdma-core binds them), then run: two contexts of one device
//! in one process share a GID table and reach each other through GID 0,
//! with objects and events of their own (issue 32, item 1).

mod common;

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[test]
fn two_contexts_of_one_device_from_c() {
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
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("contexts");
    std::fs::create_dir_all(&dir).unwrap();
    // Linked against the library under its SONAME's file name.
    let so = dir.join("libibverbs.so.1");
    let _ = std::fs::remove_file(&so);
    std::os::unix::fs::symlink(&lib, &so).unwrap();
    let prog = dir.join("contexts");
    let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/c/contexts.c");
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
    let mut child = Command::new(&prog)
        .env("LD_LIBRARY_PATH", &dir)
        .env("ROCE_DEVICES", "lo")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let end = Instant::now() + Duration::from_secs(60);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > end {
            let _ = child.kill();
            let o = child.wait_with_output().unwrap();
            panic!(
                "contexts did not end:\n{}",
                String::from_utf8_lossy(&o.stdout)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let o = child.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "status {:?}\n{text}\n{}",
        o.status,
        String::from_utf8_lossy(&o.stderr)
    );
    let oks = text.lines().filter(|l| l.starts_with("ok ")).count();
    assert_eq!(oks, 12, "{text}");
}
