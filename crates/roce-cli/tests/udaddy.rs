//! `roce udaddy` end to end on loopback: our server and our client, the
//! UD service resolved through the CM (SIDR), datagrams both ways; an
//! unknown service; bad flags. Interop with librdmacm's udaddy is
//! interop/run.sh.

use roce_testkit::free_port;
use std::process::{Command, Stdio};
use std::time::Duration;

fn roce() -> Command {
    Command::new(env!("CARGO_BIN_EXE_roce"))
}

#[test]
fn datagrams_go_both_ways_after_sidr() {
    let rp = free_port().to_string();
    let mut server = roce()
        .args(["udaddy", "-b", "127.0.0.5", "-C", "6", "-S", "200"])
        .args(["--roce-port", &rp, "--timeout", "20"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let c = roce()
        .args([
            "udaddy",
            "-s",
            "127.0.0.5",
            "-b",
            "127.0.0.6",
            "-C",
            "6",
            "-S",
            "200",
        ])
        .args(["--roce-port", &rp, "--timeout", "20"])
        .output()
        .unwrap();
    let cout = String::from_utf8_lossy(&c.stdout).into_owned();
    assert_eq!(
        c.status.code(),
        Some(0),
        "{cout}{}",
        String::from_utf8_lossy(&c.stderr)
    );
    assert!(
        cout.contains("data transfers complete\ntest complete"),
        "{cout}"
    );
    let s = server.wait().unwrap();
    let mut sout = String::new();
    std::io::Read::read_to_string(server.stdout.as_mut().unwrap(), &mut sout).unwrap();
    assert!(s.success(), "{sout}");
    assert!(
        sout.contains("receiving data transfers\nsending replies\n"),
        "{sout}"
    );
}

#[test]
fn unknown_service_and_bad_flags() {
    let rp = free_port().to_string();
    // A UD server on another port answers SIDR status 1 (no such service).
    let mut server = roce()
        .args(["udaddy", "-b", "127.0.0.7", "--port", "7000"])
        .args(["--roce-port", &rp, "--timeout", "10"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let c = roce()
        .args([
            "udaddy",
            "-s",
            "127.0.0.7",
            "-b",
            "127.0.0.8",
            "--port",
            "7001",
        ])
        .args(["--roce-port", &rp, "--timeout", "10"])
        .output()
        .unwrap();
    let _ = server.kill();
    let _ = server.wait();
    assert_eq!(c.status.code(), Some(1));
    let e = String::from_utf8_lossy(&c.stderr);
    assert!(e.contains("rejected (reason 1)"), "{e}");
    let o = roce()
        .args(["udaddy", "-s", "127.0.0.1", "-S", "0"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    let o = roce().args(["udaddy"]).output().unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("-b ADDR"));
}

/// Both ends on this host with no `-b` on the client: it shares the
/// server's 127.0.0.1 (as perf, pingpong and rping do, and the drop-in),
/// says nothing of a move, and the datagrams go both ways, the replies
/// from the server's address.
#[test]
fn a_client_on_the_servers_host_needs_no_bind() {
    let rp = free_port().to_string();
    let mut server = roce()
        .args([
            "udaddy",
            "-b",
            "127.0.0.1",
            "-C",
            "4",
            "--roce-port",
            &rp,
            "--timeout",
            "20",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let c = roce()
        .args([
            "udaddy",
            "-s",
            "127.0.0.1",
            "-C",
            "4",
            "--roce-port",
            &rp,
            "--timeout",
            "20",
        ])
        .output()
        .unwrap();
    let (cout, cerr) = (
        String::from_utf8_lossy(&c.stdout),
        String::from_utf8_lossy(&c.stderr),
    );
    assert_eq!(c.status.code(), Some(0), "{cout}{cerr}");
    assert!(
        cout.contains("data transfers complete\ntest complete"),
        "{cout}"
    );
    assert!(!cerr.contains("using 127."), "{cerr}");
    assert!(server.wait().unwrap().success());
}
