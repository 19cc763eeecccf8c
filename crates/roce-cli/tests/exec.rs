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
fn trace_becomes_roce_trace() {
    let o = roce()
        .args(["exec", "--trace", "/tmp/t-%p.jsonl", "--", "sh", "-c"])
        .arg("echo \"$ROCE_TRACE\"")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(
        String::from_utf8(o.stdout).unwrap().trim(),
        "/tmp/t-%p.jsonl"
    );
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

/// What the program sees of `/dev` under `roce exec` as `who` (a
/// `setpriv` prefix, or none): the script's output, or None (with the
/// reason printed) where the namespaces cannot be made, which fails in
/// CI (`ROCE_REQUIRE_UCX`).
fn device_view(who: &[&str]) -> Option<String> {
    let script = "d=/dev/infiniband/uverbs_roce_lo; \
                  test -c $d && test -r $d && test -w $d || exit 3; \
                  echo x > /dev/null && test -c /dev/null || exit 4; \
                  id -u; ls -A /dev";
    let mut c = match who.split_first() {
        Some((first, rest)) => {
            let mut c = Command::new(first);
            c.args(rest).arg(env!("CARGO_BIN_EXE_roce"));
            c
        }
        None => roce(),
    };
    let o = c
        .args(["exec", "--devices", "lo", "--", "sh", "-c", script])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    if err.contains("no /dev/infiniband files") {
        assert!(std::env::var_os("ROCE_REQUIRE_UCX").is_none(), "{err}");
        eprintln!("skipped: {err}");
        return None;
    }
    assert!(o.status.success(), "{:?}: {err}", o.status);
    Some(String::from_utf8(o.stdout).unwrap())
}

/// `/dev` entries of this process's view.
fn host_dev() -> std::collections::BTreeSet<String> {
    std::fs::read_dir("/dev")
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect()
}

/// The device files: in the program's view `/dev/infiniband/uverbs_roce_lo`
/// is a character device it may read and write, every other entry of
/// `/dev` is still there, and the program has its own uid; nothing
/// changes in the host's view.
#[test]
fn the_program_sees_device_files_the_host_does_not() {
    let had = std::path::Path::new("/dev/infiniband/uverbs_roce_lo").exists();
    let Some(out) = device_view(&[]) else {
        return;
    };
    let mut lines = out.lines();
    let uid = nix::unistd::getuid().as_raw().to_string();
    assert_eq!(lines.next(), Some(uid.as_str()), "{out}");
    let seen: std::collections::BTreeSet<String> = lines.map(str::to_owned).collect();
    let mut want = host_dev();
    want.insert("infiniband".into());
    assert_eq!(seen, want);
    assert_eq!(
        std::path::Path::new("/dev/infiniband/uverbs_roce_lo").exists(),
        had
    );
}

/// The same for a user without privilege (run as `nobody` when the test
/// is root, through a user namespace).
#[test]
fn an_unprivileged_program_sees_device_files() {
    let who = [
        "setpriv",
        "--reuid=65534",
        "--regid=65534",
        "--clear-groups",
    ];
    if nix::unistd::geteuid().is_root() {
        // `nobody` must be able to run the binary (a target directory
        // under /root is not).
        let ok = Command::new(who[0])
            .args(&who[1..])
            .args([env!("CARGO_BIN_EXE_roce"), "--version"])
            .output()
            .is_ok_and(|o| o.status.success());
        if !ok {
            eprintln!("skipped: nobody cannot run {}", env!("CARGO_BIN_EXE_roce"));
            return;
        }
        let Some(out) = device_view(&who) else {
            return;
        };
        assert_eq!(out.lines().next(), Some("65534"), "{out}");
    } else if let Some(out) = device_view(&[]) {
        let uid = nix::unistd::getuid().as_raw().to_string();
        assert_eq!(out.lines().next(), Some(uid.as_str()), "{out}");
    }
}

/// `--pcap`, `--faults`, `--stats` and `--json` become the library's
/// variables (docs/debugging.md); a plan that does not parse is exit 2
/// with the reason, before the program runs.
#[test]
fn the_debugging_options_become_variables() {
    let o = roce()
        .args([
            "exec",
            "--no-device-files",
            "--pcap",
            "/tmp/x-%p.pcap",
            "--faults",
            "seed=3,loss=1%; drop-acks for=50ms",
            "--stats",
            "--json",
            "--",
            "sh",
            "-c",
            "echo \"$ROCE_PCAP|$ROCE_FAULTS|$ROCE_STATS|$ROCE_STATS_JSON\"",
        ])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(
        String::from_utf8_lossy(&o.stdout).trim(),
        "/tmp/x-%p.pcap|seed=3,loss=1%; drop-acks for=50ms|-|1"
    );
    let o = roce()
        .args(["exec", "--faults", "drop qp=#0", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("--faults: qp=#0: count QPs from 1"), "{err}");
}
