//! Every structure of `abi` against rdma-core's own headers: a C program
//! compiled against `<infiniband/verbs.h>` (and one against
//! `<rdma/rdma_cma.h>`) prints `sizeof`, `_Alignof` and each field's
//! `offsetof` and `sizeof`; they must equal what Rust computes for the
//! same names (`abi::layout::TYPES`, `abi::layout::CM_TYPES`).
//!
//! Needs a C compiler and Debian's `libibverbs-dev` and `librdmacm-dev`
//! (`.ci/run` installs them). Without a header the test says so and
//! passes, unless `ROCE_REQUIRE_C_HEADERS` is set (as `.ci/run` does),
//! when it fails.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::Command;

use ibverbs::abi::layout::{Type, CM_TYPES, TYPES};

fn c_program(include: &str, types: &[Type]) -> String {
    let mut c = format!(
        "#include <stddef.h>\n#include <stdio.h>\n#include <{include}>\nint main(void) {{\n"
    );
    for t in types {
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

fn rust_table(types: &[Type]) -> String {
    let mut s = String::new();
    for t in types {
        let _ = writeln!(s, "{} {} {}", t.c_name, t.size, t.align);
        for f in t.fields {
            let _ = writeln!(s, "{}.{} {} {}", t.c_name, f.path, f.offset, f.size);
        }
    }
    s
}

/// The C side's table for `types` from `include`, or None (test
/// skipped) when the header is not installed.
fn c_table(include: &str, package: &str, types: &[Type]) -> Option<String> {
    let header = std::path::Path::new("/usr/include").join(include);
    if !header.exists() {
        assert!(
            std::env::var_os("ROCE_REQUIRE_C_HEADERS").is_none(),
            "{} is missing (apt-get install {package})",
            header.display()
        );
        eprintln!(
            "skipped: {} is missing (apt-get install {package})",
            header.display()
        );
        return None;
    }
    let name = include.replace(['/', '.'], "_");
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("layout");
    std::fs::create_dir_all(&dir).unwrap();
    let src = dir.join(format!("{name}.c"));
    let exe = dir.join(name);
    std::fs::write(&src, c_program(include, types)).unwrap();
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
    Some(String::from_utf8(run.stdout).unwrap())
}

/// Compares the two tables line by line.
fn assert_same(c: &str, types: &[Type]) {
    let rust = rust_table(types);
    let diffs: Vec<String> = c
        .lines()
        .zip(rust.lines())
        .filter(|(a, b)| a != b)
        .map(|(a, b)| format!("C: {a:<50} Rust: {b}"))
        .collect();
    assert_eq!(c.lines().count(), rust.lines().count());
    assert!(diffs.is_empty(), "layout differs:\n{}", diffs.join("\n"));
}

#[test]
fn every_structure_matches_rdma_core_header() {
    let Some(c) = c_table("infiniband/verbs.h", "libibverbs-dev", TYPES) else {
        return;
    };
    assert_same(&c, TYPES);
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

#[test]
fn every_rdma_cm_structure_matches_rdma_core_header() {
    let Some(c) = c_table("rdma/rdma_cma.h", "librdmacm-dev", CM_TYPES) else {
        return;
    };
    assert_same(&c, CM_TYPES);
    // The sizes the librdmacm issue names, as a cross-check.
    for (name, size) in [("struct rdma_cm_id", 416), ("struct rdma_cm_event", 80)] {
        let line = format!("{name} {size} ");
        assert!(
            c.lines().any(|l| l.starts_with(&line)),
            "{name} is not {size} bytes"
        );
    }
}
