//! `roce exec`: runs a program with the drop-in libibverbs.so.1 first on
//! its library path, and passes its exit status through.

use std::process::Command;

fn roce() -> Command {
    Command::new(env!("CARGO_BIN_EXE_roce"))
}

#[test]
fn print_path_names_a_directory_with_the_library() {
    let o = roce().args(["exec", "--print-path"]).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let dir = String::from_utf8(o.stdout).unwrap();
    let lib = std::path::Path::new(dir.trim()).join("libibverbs.so.1");
    let target = std::fs::canonicalize(&lib).unwrap();
    assert!(target.ends_with("libibverbs.so"), "{}", target.display());
}

#[test]
fn the_program_sees_the_library_and_the_options() {
    let o = roce()
        .args([
            "exec",
            "--devices",
            "lo",
            "--addr",
            "127.0.0.9",
            "--port",
            "4792",
            "--",
            "sh",
            "-c",
        ])
        .arg("echo \"$LD_LIBRARY_PATH|$ROCE_DEVICES|$ROCE_ADDR|$ROCE_PORT\"; exit 7")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(7));
    let out = String::from_utf8(o.stdout).unwrap();
    let f: Vec<&str> = out.trim().split('|').collect();
    assert!(
        f[0].split(':').next().unwrap().ends_with("roce-dropin"),
        "{out}"
    );
    assert_eq!(&f[1..], ["lo", "127.0.0.9", "4792"]);
}

#[test]
fn a_missing_program_is_127_with_its_name() {
    let o = roce()
        .args(["exec", "--", "no-such-program-here"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(127));
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(e.contains("cannot run no-such-program-here"), "{e}");
}

#[test]
fn no_program_is_a_usage_error() {
    let o = roce().arg("exec").output().unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("name a program"));
}

#[test]
fn ibv_devices_runs_on_the_library() {
    let found = std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join("ibv_devices").is_file()));
    if !found {
        assert!(
            std::env::var_os("ROCE_REQUIRE_RDMA_TOOLS").is_none(),
            "ibv_devices is missing"
        );
        eprintln!("skipped: ibv_devices is not installed");
        return;
    }
    let o = roce()
        .args(["exec", "--devices", "lo", "--", "ibv_devices"])
        .output()
        .unwrap();
    assert!(o.status.success());
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.lines().any(|l| l.trim_start().starts_with("roce_lo")),
        "{out}"
    );
    assert!(!out.contains("roce_eth"), "{out}");
}
