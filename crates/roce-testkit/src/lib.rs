//! What the workspace's tests repeat, written once (a dev-dependency of
//! the crates whose tests use it; never a dependency of a library):
//!
//! * [`example`]: the path of an example binary of the package under
//!   test (`cargo test` builds every example beside the test binaries);
//! * [`run_bounded`] and [`Guard`]: a child process waited for at most a
//!   given time, killed if the test fails first, so no test can hang;
//!   [`Group`] the same for a child and everything it starts;
//! * [`Guard::spawn_roce_server`] and [`roce_bound`]: a RoCE server
//!   started and waited for until its device is open (an rdma_cm client
//!   does not retry a refused connection);
//! * [`tcp_listening`], [`wait_listening`] and [`Guard::listening`]: a
//!   server's control port waited for until it listens (a `roce perf`
//!   or perftest client does not retry a refused connection either);
//!   [`connect_when_listening`] for a test that is the client itself;
//! * [`frames`]: RoCE v2 packets built by hand (the default IPv4 and UDP
//!   headers, a frame's bytes with its ICRC, a datagram re-emitted after
//!   its headers were edited);
//! * [`free_ports`], [`free_port`] and [`port_args`]: free ports for a
//!   test's servers, below the kernel's ephemeral range;
//! * [`rc`]: a QP of a sans-IO device brought from RESET to RTS with
//!   the masks `ibv_modify_qp` requires;
//! * [`netns`]: two network namespaces of a test's own joined by a veth.
//!
//! ```
//! use std::process::Command;
//! use std::time::Duration;
//!
//! let out = roce_testkit::run_bounded(Command::new("true"), Duration::from_secs(10));
//! assert!(out.status.success());
//! ```

pub mod frames;
mod group;
pub mod netns;
mod ports;
pub mod rc;

pub use group::Group;
pub use ports::{free_port, free_ports, port_args};

use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// The example binary `name` of the package whose test is running: in
/// `target/<profile>/examples/`, beside the test binary's `deps/`. Fails
/// with what to do when it was not built (`cargo test -p PKG` builds the
/// package's examples; `cargo test --test X` alone does not).
pub fn example(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("the test binary's path");
    let dir = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("target/<profile>/deps/");
    let path = dir.join("examples").join(name);
    assert!(
        path.exists(),
        "{} is not built: run `cargo test -p PACKAGE` (it builds the examples) or `cargo build --examples`",
        path.display()
    );
    path
}

/// A child process killed when dropped before it was waited for.
#[derive(Debug)]
pub struct Guard(pub Option<Child>);

impl Guard {
    /// Spawns `cmd` with stdout and stderr captured.
    pub fn spawn(mut cmd: Command) -> Guard {
        let child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {cmd:?}: {e}"));
        Guard(Some(child))
    }

    /// Waits for the child, at most `limit`: past it the child is killed
    /// and the test fails, with what it printed.
    pub fn wait(mut self, limit: Duration) -> Output {
        let mut c = self.0.take().expect("waited once");
        let end = Instant::now() + limit;
        while c.try_wait().expect("try_wait").is_none() {
            if Instant::now() > end {
                let _ = c.kill();
                let out = c.wait_with_output().expect("wait");
                panic!(
                    "the process did not finish in {limit:?}; it printed:\n{}\n{}",
                    String::from_utf8_lossy(&out.stdout),
                    String::from_utf8_lossy(&out.stderr)
                );
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        c.wait_with_output().expect("wait")
    }

    /// Spawns a RoCE server and returns once UDP port 4791 is bound on
    /// `addr` (its device is open) and it had a moment to listen: from
    /// opening its device to listening, a server makes no network round
    /// trip. Fails if the server exits first or never binds (20 s).
    pub fn spawn_roce_server(cmd: Command, addr: std::net::Ipv4Addr) -> Guard {
        let mut g = Guard::spawn(cmd);
        let child = g.0.as_mut().expect("spawned");
        let what = format!("the server never opened {addr}");
        let ready = until(child, Duration::from_secs(20), 10, &what, || {
            roce_bound(addr).then_some(())
        });
        if ready.is_err() {
            g.exited(&format!("before it opened {addr}"));
        }
        std::thread::sleep(Duration::from_millis(300));
        g
    }

    /// Returns once a TCP socket listens on `port` ([`wait_listening`]),
    /// failing with what the server printed if it exits first.
    pub fn listening(mut self, port: u16) -> Guard {
        let child = self.0.as_mut().expect("spawned");
        if wait_listening(child, port).is_err() {
            self.exited(&format!("before listening on port {port}"));
        }
        self
    }

    /// Fails the test with the exit status and output of the child, which
    /// has exited `when`.
    fn exited(&mut self, when: &str) -> ! {
        let out = self.0.take().expect("spawned").wait_with_output();
        let out = out.expect("wait");
        panic!(
            "the server exited ({}) {when}:\n{}",
            out.status,
            text_of(&out)
        );
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        if let Some(c) = &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Tries `ready` every `pause_ms` until it gives a value; `Err` with the
/// exit status when `child` exits first; past `limit` the test fails,
/// saying `what`.
fn until<T>(
    child: &mut Child,
    limit: Duration,
    pause_ms: u64,
    what: &str,
    mut ready: impl FnMut() -> Option<T>,
) -> Result<T, std::process::ExitStatus> {
    let end = Instant::now() + limit;
    loop {
        if let Some(v) = ready() {
            return Ok(v);
        }
        if let Some(status) = child.try_wait().expect("try_wait") {
            return Err(status);
        }
        assert!(Instant::now() < end, "{what}");
        std::thread::sleep(Duration::from_millis(pause_ms));
    }
}

/// Waits (at most 20 s, then fails the test) for a TCP socket listening
/// on `port`, read from `/proc/net/tcp` and `tcp6` (no probe connection:
/// a server that serves one client would take it for its client).
/// `Err` with the exit status when `child` exits first.
pub fn wait_listening(child: &mut Child, port: u16) -> Result<(), std::process::ExitStatus> {
    let what = format!("nothing listens on port {port} after 20 s");
    until(child, Duration::from_secs(20), 5, &what, || {
        tcp_listening(port).then_some(())
    })
}

/// A connection to a server `child` that listens on 127.0.0.1:`port`,
/// tried every 20 ms for 10 s (then the test fails): for servers that
/// take their first connection as their client. `Err` with the exit
/// status when `child` exits first (say, its port was taken).
pub fn connect_when_listening(
    child: &mut Child,
    port: u16,
) -> Result<std::net::TcpStream, std::process::ExitStatus> {
    let what = format!("nothing listens on port {port} after 10 s");
    until(child, Duration::from_secs(10), 20, &what, || {
        std::net::TcpStream::connect((std::net::Ipv4Addr::LOCALHOST, port)).ok()
    })
}

/// Whether a TCP socket on this host listens on `port`, on any address.
pub fn tcp_listening(port: u16) -> bool {
    let want = format!(":{port:04X}");
    ["/proc/net/tcp", "/proc/net/tcp6"].iter().any(|f| {
        std::fs::read_to_string(f)
            .unwrap_or_default()
            .lines()
            .any(|l| {
                let cols: Vec<&str> = l.split_whitespace().collect();
                // local address, remote address, state (0A: LISTEN)
                cols.len() > 3 && cols[1].ends_with(&want) && cols[3] == "0A"
            })
    })
}

/// Whether UDP port 4791 (RoCE v2) is bound on `addr`, read from
/// `/proc/net/udp` (no probe packet: a probe would reach the server).
pub fn roce_bound(addr: std::net::Ipv4Addr) -> bool {
    // /proc shows the address as the u32 in host order, in hex.
    let want = format!("{:08X}:12B7", u32::from_le_bytes(addr.octets()));
    std::fs::read_to_string("/proc/net/udp")
        .unwrap_or_default()
        .lines()
        .any(|l| l.split_whitespace().nth(1) == Some(want.as_str()))
}

/// Runs `cmd` to the end, at most `limit` (see [`Guard::wait`]).
pub fn run_bounded(cmd: Command, limit: Duration) -> Output {
    Guard::spawn(cmd).wait(limit)
}

/// A process's standard output and error as text.
pub fn text(o: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// A process's standard output then error, as one text.
pub fn text_of(o: &Output) -> String {
    let (out, err) = text(o);
    out + &err
}
