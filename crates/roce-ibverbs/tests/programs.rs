//! Unmodified programs from Debian's packages (rdma-core's
//! `ibverbs-utils`, `perftest`) run over the drop-in library: each test
//! starts them as a program would be started by a user (`LD_LIBRARY_PATH`
//! naming a directory that holds `libibverbs.so.1`, the way `roce exec`
//! does), two processes on loopback for the client/server tools, and
//! checks what they print and their exit status.
//!
//! `.ci/run` installs the packages and sets `ROCE_REQUIRE_RDMA_TOOLS`, so
//! in CI a missing program fails the test; elsewhere it is skipped with a
//! message.

mod common;

use std::process::{Command, Output, Stdio};
use std::time::Duration;

use common::{finish, free_port, have, listening};

fn command(prog: &str, args: &[&str]) -> Command {
    let mut c = Command::new(prog);
    c.args(args)
        .env("LD_LIBRARY_PATH", common::dropin("dropin"))
        .env_remove("ROCE_ADDR")
        .env("ROCE_DEVICES", "lo")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    c
}

fn run(prog: &str, args: &[&str]) -> Output {
    let child = command(prog, args).spawn().unwrap();
    finish(child, Duration::from_secs(30), prog)
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Runs `prog` as server and as client (to 127.0.0.1) with `args` and
/// the port flag; both must exit 0. Returns (server, client) output.
fn pair(prog: &str, port_flag: &str, args: &[&str], limit: Duration) -> (String, String) {
    pair_env(prog, port_flag, args, limit, &[])
}

/// [`pair`] with environment variables for both processes.
fn pair_env(
    prog: &str,
    port_flag: &str,
    args: &[&str],
    limit: Duration,
    env: &[(&str, &str)],
) -> (String, String) {
    let p = free_port().to_string();
    let mut a: Vec<&str> = args.to_vec();
    a.extend([port_flag, &p]);
    // Killed if the test fails before it was waited for.
    let mut server = roce_testkit::Guard(Some(
        command(prog, &a).envs(env.iter().copied()).spawn().unwrap(),
    ));
    // Clients of these tools do not retry: start it once the server
    // listens (bounded: a server that exits or never listens fails).
    let end = std::time::Instant::now() + Duration::from_secs(20);
    while !listening(p.parse().unwrap()) {
        assert!(
            server.0.as_mut().unwrap().try_wait().unwrap().is_none(),
            "{prog} server exited before listening"
        );
        assert!(
            std::time::Instant::now() < end,
            "{prog} server never listened"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let mut ca = a.clone();
    ca.push("127.0.0.1");
    let client = command(prog, &ca)
        .envs(env.iter().copied())
        .spawn()
        .unwrap();
    let c = finish(client, limit, &format!("{prog} client"));
    let s = finish(server.0.take().unwrap(), limit, &format!("{prog} server"));
    let (st, ct) = (text(&s), text(&c));
    assert!(
        s.status.success() && c.status.success(),
        "{prog} {args:?}: server {:?}, client {:?}\nserver:\n{st}\nclient:\n{ct}",
        s.status,
        c.status
    );
    (st, ct)
}

#[test]
fn ibv_devices_lists_the_loopback_device() {
    if !have("ibv_devices") {
        return;
    }
    let o = run("ibv_devices", &[]);
    let t = text(&o);
    assert!(o.status.success(), "{t}");
    // The GUID column: EUI-64 of lo's all-zero MAC.
    assert!(
        t.lines()
            .any(|l| l.trim_start().starts_with("roce_lo") && l.contains("020000fffe000000")),
        "{t}"
    );
}

#[test]
fn ibv_devinfo_verbose_shows_port_and_gid() {
    if !have("ibv_devinfo") {
        return;
    }
    let o = run("ibv_devinfo", &["-v", "-d", "roce_lo"]);
    let t = text(&o);
    assert!(o.status.success(), "{t}");
    for want in [
        "hca_id:\troce_lo",
        "PORT_ACTIVE (4)",
        "link_layer:\t\tEthernet",
        "max_qp_wr:\t\t\t1048576",
        "atomic_cap:\t\t\tATOMIC_HCA (1)",
        "RoCE v2",
    ] {
        assert!(t.contains(want), "missing {want:?} in\n{t}");
    }
    let gid = t
        .lines()
        .find(|l| l.contains("GID[  0]"))
        .unwrap_or_else(|| panic!("no GID in\n{t}"));
    assert!(gid.contains("::ffff:127.0.0."), "{gid}");
}

fn pingpong(prog: &str, extra: &[&str], iters: u32) {
    if !have(prog) {
        return;
    }
    let n = iters.to_string();
    let mut args = vec!["-d", "roce_lo", "-g", "0", "-n", &n];
    args.extend_from_slice(extra);
    let (s, c) = pair(prog, "-p", &args, Duration::from_secs(60));
    let want = format!("{iters} iters in");
    assert!(
        s.contains(&want) && c.contains(&want),
        "server:\n{s}\nclient:\n{c}"
    );
    // Both processes share the device's GID 0, as on a NIC: one address,
    // the QPs told apart by number (docs/host.md). (ibv_srq_pingpong
    // prints a line per QP: the GIDs repeat.)
    let mut gids: Vec<&str> = c.lines().filter_map(|l| l.split("GID ").nth(1)).collect();
    gids.sort_unstable();
    gids.dedup();
    assert_eq!(gids, ["::ffff:127.0.0.1"], "{c}");
    let qpns: std::collections::BTreeSet<&str> = c
        .lines()
        .filter_map(|l| l.split("QPN ").nth(1)?.split(',').next())
        .collect();
    assert!(qpns.len() >= 2, "{c}");
}

#[test]
fn ibv_rc_pingpong() {
    pingpong("ibv_rc_pingpong", &[], 500);
}

/// `ROCE_PORT`: both processes on another UDP port than 4791 (as beside
/// a kernel RoCE device, which holds 4791 on every address), each saying
/// so (`ROCE_LOG`).
#[test]
fn ibv_rc_pingpong_on_another_udp_port() {
    if !have("ibv_rc_pingpong") {
        return;
    }
    let port = std::net::UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
        .to_string();
    let env = [("ROCE_PORT", port.as_str()), ("ROCE_LOG", "1")];
    let args = ["-d", "roce_lo", "-g", "0", "-n", "100"];
    let (s, c) = pair_env(
        "ibv_rc_pingpong",
        "-p",
        &args,
        Duration::from_secs(60),
        &env,
    );
    let said = format!("UDP port {port}");
    for out in [&s, &c] {
        assert!(out.contains("100 iters in") && out.contains(&said), "{out}");
    }
}

/// A bad `ROCE_PORT` fails `ibv_open_device`, saying why.
#[test]
fn a_bad_roce_port_is_refused() {
    if !have("ibv_devinfo") {
        return;
    }
    refused_with("ROCE_PORT", "0");
}

/// `ibv_devinfo -d roce_lo` with `var=value` fails, naming the setting.
fn refused_with(var: &str, value: &str) {
    let child = command("ibv_devinfo", &["-d", "roce_lo"])
        .env(var, value)
        .spawn()
        .unwrap();
    let o = finish(child, Duration::from_secs(30), "ibv_devinfo");
    let t = text(&o);
    assert!(
        !o.status.success() && t.contains(&format!("{var}={value}")),
        "{t}"
    );
}

/// `ROCE_CPU=emulated`: the code for an emulated CPU (table-driven
/// ICRCs, payload copies in 1 KiB pieces), which `auto` picks under
/// QEMU's TCG, moves large messages intact, data checked (`-c`), and the
/// library says it chose it (`ROCE_LOG`); an unknown value is refused.
#[test]
fn ibv_rc_pingpong_with_the_code_for_an_emulated_cpu() {
    if !have("ibv_rc_pingpong") {
        return;
    }
    let env = [("ROCE_CPU", "emulated"), ("ROCE_LOG", "1")];
    let args = ["-d", "roce_lo", "-g", "0", "-n", "50", "-s", "65536", "-c"];
    let (s, c) = pair_env(
        "ibv_rc_pingpong",
        "-p",
        &args,
        Duration::from_secs(60),
        &env,
    );
    for out in [&s, &c] {
        assert!(
            out.contains("50 iters in") && out.contains("(code for an emulated CPU)"),
            "{out}"
        );
    }
    refused_with("ROCE_CPU", "fast");
}

#[test]
fn ibv_rc_pingpong_with_completion_events() {
    pingpong("ibv_rc_pingpong", &["-e"], 200);
}

/// A thread blocked in `ibv_get_cq_event` takes the datagrams itself
/// (`CompletionChannel::wait_io`): some of its events come from its own
/// step, with no progress thread between (counted by each process at
/// close, `ROCE_LOG`). By counters, not timing: any one event may still
/// come from the progress thread (a kicked step on a loaded host).
#[test]
fn ibv_rc_pingpong_events_come_from_the_waiting_threads_own_step() {
    if !have("ibv_rc_pingpong") {
        return;
    }
    let args = ["-d", "roce_lo", "-g", "0", "-n", "200", "-e"];
    let env = [("ROCE_LOG", "1")];
    let (s, c) = pair_env(
        "ibv_rc_pingpong",
        "-p",
        &args,
        Duration::from_secs(60),
        &env,
    );
    for out in [&s, &c] {
        assert!(out.contains("200 iters in"), "{out}");
        let own: u64 = out
            .split("cq_events_own_step ")
            .nth(1)
            .and_then(|r| r.split(|ch: char| !ch.is_ascii_digit()).next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no cq_events_own_step count: {out}"));
        assert!(own > 0, "{out}");
    }
}

#[test]
fn ibv_rc_pingpong_large_messages() {
    pingpong("ibv_rc_pingpong", &["-s", "65536", "-m", "1024"], 50);
}

#[test]
fn ibv_rc_pingpong_new_send_api() {
    pingpong("ibv_rc_pingpong", &["-N"], 200);
}

#[test]
fn ibv_rc_pingpong_completion_timestamps() {
    pingpong("ibv_rc_pingpong", &["-t"], 200);
}

#[test]
fn ibv_rc_pingpong_chained_contiguous() {
    pingpong("ibv_rc_pingpong", &["-c"], 200);
}

#[test]
fn ibv_uc_pingpong() {
    pingpong("ibv_uc_pingpong", &[], 500);
}

#[test]
fn ibv_uc_pingpong_with_events() {
    pingpong("ibv_uc_pingpong", &["-e", "-s", "1024"], 200);
}

#[test]
fn ibv_ud_pingpong() {
    pingpong("ibv_ud_pingpong", &[], 500);
}

#[test]
fn ibv_ud_pingpong_with_events() {
    pingpong("ibv_ud_pingpong", &["-e", "-s", "2048"], 200);
}

#[test]
fn ibv_srq_pingpong() {
    pingpong("ibv_srq_pingpong", &[], 500);
}

#[test]
fn ibv_srq_pingpong_many_qps_with_events() {
    pingpong("ibv_srq_pingpong", &["-q", "8", "-e"], 200);
}
