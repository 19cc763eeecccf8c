//! Every structure of `abi` against rdma-core's own header: a C program
//! compiled against `<infiniband/verbs.h>` prints `sizeof`, `_Alignof`
//! and each field's `offsetof` and `sizeof`; they must equal what Rust
//! computes for the same names (`abi::layout::TYPES`).
//!
//! Needs a C compiler and Debian's `libibverbs-dev` (`.ci/run` installs
//! it). Without the header the test says so and passes, unless
//! `ROCE_REQUIRE_C_HEADERS` is set (as `.ci/run` does), when it fails.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::Command;

use ibverbs::abi::layout::TYPES;

fn c_program() -> String {
    let mut c = String::from(
        "#include <stddef.h>\n#include <stdio.h>\n#include <infiniband/verbs.h>\nint main(void) {\n",
    );
    for t in TYPES {
        let _ = writeln!(
            c,
            "  printf(\"{0} %zu %zu\\n\", sizeof({0}), _Alignof({0}));",
            t.c_name
        );
        for f in t.fields {
            let _ = writeln!(
                c,
                "  printf(\"{0}.{1} %zu %zu\\n\", offsetof({0}, {1}), sizeof((({0} *)0)->{1}));",
                t.c_name, f.path
            );
        }
    }
    c.push_str("  return 0;\n}\n");
    c
}

fn rust_table() -> String {
    let mut s = String::new();
    for t in TYPES {
        let _ = writeln!(s, "{} {} {}", t.c_name, t.size, t.align);
        for f in t.fields {
            let _ = writeln!(s, "{}.{} {} {}", t.c_name, f.path, f.offset, f.size);
        }
    }
    s
}

#[test]
fn every_structure_matches_rdma_core_header() {
    let header = std::path::Path::new("/usr/include/infiniband/verbs.h");
    if !header.exists() {
        assert!(
            std::env::var_os("ROCE_REQUIRE_C_HEADERS").is_none(),
            "{} is missing (apt-get install libibverbs-dev)",
            header.display()
        );
        eprintln!(
            "skipped: {} is missing (apt-get install libibverbs-dev)",
            header.display()
        );
        return;
    }
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("layout");
    std::fs::create_dir_all(&dir).unwrap();
    let src = dir.join("layout.c");
    let exe = dir.join("layout");
    std::fs::write(&src, c_program()).unwrap();
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let out = Command::new(&cc)
        .arg("-o")
        .arg(&exe)
        .arg(&src)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cc}: {e}"));
    assert!(
        out.status.success(),
        "the layout program did not compile:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let run = Command::new(&exe).output().unwrap();
    assert!(run.status.success());
    let c = String::from_utf8(run.stdout).unwrap();
    let rust = rust_table();
    let diffs: Vec<String> = c
        .lines()
        .zip(rust.lines())
        .filter(|(a, b)| a != b)
        .map(|(a, b)| format!("C: {a:<50} Rust: {b}"))
        .collect();
    assert_eq!(c.lines().count(), rust.lines().count());
    assert!(diffs.is_empty(), "layout differs:\n{}", diffs.join("\n"));
    // The sizes the drop-in issue names, as a cross-check of the table.
    for (name, size) in [
        ("struct ibv_context", 328),
        ("struct verbs_context", 648),
        ("struct ibv_qp", 160),
        ("struct ibv_qp_ex", 352),
        ("struct ibv_cq_ex", 288),
        ("struct ibv_wc", 48),
        ("struct ibv_send_wr", 128),
    ] {
        let line = format!("{name} {size} ");
        assert!(
            c.lines().any(|l| l.starts_with(&line)),
            "{name} is not {size} bytes"
        );
    }
}
