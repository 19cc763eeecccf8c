//! The drop-in's C misuse suites (`crates/roce-ibverbs/tests/c/`:
//! `abuse.c`, `bounds.c`, `answers.c`, `memory.c`, `contexts.c`), built
//! as any program is built (rdma-core's headers, `-lrdmacm -libverbs`)
//! and run under `roce exec` with no other setting, as a user runs a
//! program: each must exit 0 (its status is its count of failed checks)
//! with no check failed. The roce-ibverbs tests run the same programs
//! with `LD_LIBRARY_PATH` alone and count their checks exactly.

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use roce_testkit::{text_of, Guard};

/// Builds `tests/c/<name>.c` of roce-ibverbs into this test's tmpdir;
/// `None` (a printed skip) without rdma-core's headers, unless
/// `ROCE_REQUIRE_C_HEADERS` is set.
fn build(name: &str) -> Option<PathBuf> {
    if !std::path::Path::new("/usr/include/rdma/rdma_cma.h").exists() {
        assert!(
            std::env::var_os("ROCE_REQUIRE_C_HEADERS").is_none(),
            "rdma-core's headers are missing (apt-get install librdmacm-dev)"
        );
        eprintln!("skipped: rdma-core's headers are missing");
        return None;
    }
    let c = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../roce-ibverbs/tests/c");
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("misuse-exec");
    std::fs::create_dir_all(&dir).unwrap();
    let exe = dir.join(name);
    let out = Command::new(std::env::var("CC").unwrap_or_else(|_| "cc".into()))
        .args(["-O1", "-Wall", "-o"])
        .arg(&exe)
        .arg(c.join(format!("{name}.c")))
        .args(["-lrdmacm", "-libverbs"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    Some(exe)
}

fn under_roce_exec(name: &str) {
    let Some(exe) = build(name) else { return };
    let mut c = Command::new(env!("CARGO_BIN_EXE_roce"));
    c.args(["exec", "--devices", "lo", "--"]).arg(&exe);
    let o = Guard::spawn(c).wait(Duration::from_secs(120));
    let text = text_of(&o);
    assert!(o.status.success(), "{name}: status {:?}\n{text}", o.status);
    assert!(!text.contains("FAIL"), "{name}:\n{text}");
    assert!(
        text.lines().any(|l| l.starts_with("ok ")),
        "{name}:\n{text}"
    );
}

#[test]
fn misuse_suites_pass_under_roce_exec() {
    for name in ["abuse", "bounds", "answers", "memory", "contexts"] {
        under_roce_exec(name);
    }
}
