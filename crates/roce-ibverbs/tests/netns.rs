//! Unmodified programs on the drop-in library between two network
//! namespaces joined by a veth, over the UDP and the AF_PACKET backend:
//! `ibv_rc_pingpong`, `ibv_ud_pingpong` and `ib_write_bw`, and over the
//! drop-in librdmacm `rping`, `udaddy` and `ib_write_bw -R`, and
//! libfabric's verbs provider (`fi_info`, and `tests/c/fabric_pingpong.c`
//! over MSG and `verbs;ofi_rxm` RDM endpoints), server in one namespace,
//! client in the other.
//!
//! Needs root and `ip netns` (skips with the reason otherwise) and the
//! programs (required in CI: `ROCE_REQUIRE_RDMA_TOOLS`).

mod common;

use std::process::{Command, Stdio};
use std::time::Duration;

use common::{finish, have};
use roce_testkit::netns::VethPair;
use roce_testkit::text_of;

/// Longest one program may take.
const LIMIT: Duration = Duration::from_secs(60);

/// Namespaces `a` (server, .1) and `b` (client, .2) joined by veth; all
/// removed on drop.
struct Lab(VethPair);

impl std::ops::Deref for Lab {
    type Target = VethPair;
    fn deref(&self) -> &VethPair {
        &self.0
    }
}

impl Lab {
    fn new() -> Result<Lab, String> {
        VethPair::new("d", 98, 1).map(Lab)
    }

    fn command(&self, ns: &str, dev: &str, backend: &str, prog: &str, args: &[&str]) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", ns, prog])
            .args(args)
            .env("LD_LIBRARY_PATH", common::dropin("dropin-netns"))
            .env("ROCE_DEVICES", dev)
            .env("ROCE_BACKEND", backend)
            .env_remove("ROCE_ADDR")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        c
    }
}

/// Runs `prog` (or `progs`: server, client) as server in `a` with `server`
/// and as client in `b` with `client` (in both, `{A}` is the server's address, `{DA}`/`{DB}` the
/// veth devices), `tune` adjusting the server's command; both must
/// succeed. Returns (server, client) output, or None when skipped.
fn across_with(
    backend: &str,
    (prog, client_prog): (&str, &str),
    server: &[&str],
    client: &[&str],
    tune: impl FnOnce(&Lab, &mut Command),
) -> Option<(String, String)> {
    if !have(prog) || !have(client_prog) {
        return None;
    }
    let lab = match Lab::new() {
        Ok(l) => l,
        Err(e) => {
            eprintln!("skipped: {e}");
            return None;
        }
    };
    let (da, db) = (format!("roce_{}", lab.va), format!("roce_{}", lab.vb));
    let fill = |a: &[&str]| -> Vec<String> {
        a.iter()
            .map(|s| {
                s.replace("{A}", &lab.ip_a)
                    .replace("{DA}", &da)
                    .replace("{DB}", &db)
            })
            .collect()
    };
    let (sa, ca) = (fill(server), fill(client));
    let sa: Vec<&str> = sa.iter().map(String::as_str).collect();
    let ca: Vec<&str> = ca.iter().map(String::as_str).collect();
    let mut sc = lab.command(&lab.a, &lab.va, backend, prog, &sa);
    tune(&lab, &mut sc);
    let s = sc.spawn().unwrap();
    std::thread::sleep(Duration::from_millis(600));
    let c = finish(
        lab.command(&lab.b, &lab.vb, backend, client_prog, &ca)
            .spawn()
            .unwrap(),
        LIMIT,
        client_prog,
    );
    let s = finish(s, LIMIT, prog);
    let (st, ct) = (text_of(&s), text_of(&c));
    assert!(
        s.status.success() && c.status.success(),
        "{prog} over {backend}: server {:?} client {:?}\nserver:\n{st}\nclient:\n{ct}",
        s.status,
        c.status
    );
    Some((st, ct))
}

/// A verbs tool on each veth device (`-d`), the client naming the
/// server's address; returns the client's output.
fn across(backend: &str, prog: &str, args: &[&str]) -> Option<String> {
    let sa = [&["-d", "{DA}"][..], args].concat();
    let ca = [&["-d", "{DB}"][..], args, &["{A}"]].concat();
    across_with(backend, (prog, prog), &sa, &ca, |_, _| {}).map(|(_, ct)| ct)
}

/// An rdma_cm program between the namespaces (no device flags: the CM
/// picks the device that owns the address).
fn across_cm(
    backend: &str,
    prog: &str,
    server: &[&str],
    client: &[&str],
) -> Option<(String, String)> {
    across_with(backend, (prog, prog), server, client, |_, _| {})
}

fn pingpong(backend: &str, prog: &str) {
    if let Some(out) = across(backend, prog, &["-g", "0", "-n", "300"]) {
        assert!(out.contains("300 iters in"), "{out}");
        assert!(out.contains("GID ::ffff:10.98."), "{out}");
    }
}

fn write_bw(backend: &str) {
    if let Some(out) = across(
        backend,
        "ib_write_bw",
        &["-x", "0", "-n", "500", "-s", "65536"],
    ) {
        let row = out
            .lines()
            .find(|l| l.trim_start().starts_with("65536"))
            .unwrap_or_else(|| panic!("no result row:\n{out}"));
        let bw: f64 = row.split_whitespace().nth(3).unwrap().parse().unwrap();
        assert!(bw > 0.0, "{row}");
    }
}

#[test]
fn rc_pingpong_over_udp_between_namespaces() {
    pingpong("udp", "ibv_rc_pingpong");
}

#[test]
fn rc_pingpong_over_af_packet_between_namespaces() {
    pingpong("packet", "ibv_rc_pingpong");
}

#[test]
fn ud_pingpong_over_af_packet_between_namespaces() {
    pingpong("packet", "ibv_ud_pingpong");
}

#[test]
fn write_bw_over_udp_between_namespaces() {
    write_bw("udp");
}

#[test]
fn write_bw_over_af_packet_between_namespaces() {
    write_bw("packet");
}

#[test]
fn rping_over_udp_between_namespaces() {
    if let Some((st, ct)) = across_cm(
        "udp",
        "rping",
        &["-s", "-a", "{A}", "-v", "-C", "10"],
        &["-c", "-a", "{A}", "-v", "-V", "-C", "10"],
    ) {
        assert!(ct.contains("ping data: rdma-ping-9"), "{ct}");
        assert!(st.contains("server ping data: rdma-ping-9"), "{st}");
    }
}

#[test]
fn udaddy_over_af_packet_between_namespaces() {
    if let Some((st, ct)) = across_cm("packet", "udaddy", &["-b", "{A}"], &["-s", "{A}"]) {
        for out in [&st, &ct] {
            assert!(out.contains("return status 0"), "{out}");
        }
    }
}

#[test]
fn write_bw_rdma_cm_over_udp_between_namespaces() {
    if let Some((_, ct)) = across_cm(
        "udp",
        "ib_write_bw",
        &["-R", "-n", "500", "-s", "65536"],
        &["-R", "-n", "500", "-s", "65536", "{A}"],
    ) {
        assert!(ct.contains("#bytes"), "{ct}");
    }
}

/// `udaddy`'s server listens on the wildcard address, which opens every
/// device; with `ROCE_ADDR` naming the veth's address (as `roce exec
/// --addr` does) the loopback device took that address first and the
/// veth's own context then found it in use ("failure trying to listen:
/// Address already in use"). Each device now opens on its own address
/// unless `ROCE_ADDR` is one of its own.
#[test]
fn udaddy_server_on_every_device_with_roce_addr() {
    let args = ["-C", "10", "-S", "100"];
    let ca = [&["-s", "{A}"][..], &args].concat();
    if let Some((st, _)) = across_with("udp", ("udaddy", "udaddy"), &args, &ca, |lab, c| {
        c.env_remove("ROCE_DEVICES").env("ROCE_ADDR", &lab.ip_a);
    }) {
        assert!(st.contains("data transfers complete"), "{st}");
    }
}

/// librdmacm's synchronous examples: `rdma_server` and `rdma_client`
/// (`rdma_getaddrinfo`, `rdma_create_ep` with QP attributes whose type
/// they leave zero, `rdma_get_request`, `rdma_accept`/`rdma_connect`, a
/// SEND each way). `rdma_create_ep` must take the QP type from the
/// address answer, as librdmacm does; it kept the zero and creating the
/// QP failed (`rdma_create_ep: Operation not supported` on the client,
/// `rdma_get_request: Operation not supported` on the server).
#[test]
fn rdma_server_and_rdma_client_between_namespaces() {
    let port = common::free_port().to_string();
    if let Some((st, ct)) = across_with(
        "udp",
        ("rdma_server", "rdma_client"),
        &["-p", &port],
        &["-s", "{A}", "-p", &port],
        |_, _| {},
    ) {
        assert!(
            st.contains("rdma_server: end 0") && ct.contains("rdma_client: end 0"),
            "{st}{ct}"
        );
    }
}

/// libfabric's verbs provider binds an rdma_cm id to the node's address
/// and then opens the device that owns it, in one process: the open
/// joins the engine the bind made (issue 32), where it once failed with
/// "UDP port 4791 ... is in use" and the device's MSG domain was lost.
#[test]
fn fi_info_opens_each_device_as_often_as_it_likes() {
    if !have("fi_info") {
        return;
    }
    let lab = match Lab::new() {
        Ok(l) => l,
        Err(e) => {
            eprintln!("skipped: {e}");
            return;
        }
    };
    let mut c = lab.command(&lab.a, &lab.va, "udp", "fi_info", &["-p", "verbs"]);
    c.env_remove("ROCE_DEVICES").env("ROCE_LOG", "1");
    let o = finish(c.spawn().unwrap(), LIMIT, "fi_info");
    let t = text_of(&o);
    assert!(o.status.success(), "{t}");
    assert!(!t.contains("cannot open"), "{t}");
    assert!(t.contains(&format!("domain: roce_{}", lab.va)), "{t}");
    // The veth device's MSG domain and, over it, ofi_rxm's RDM one: with
    // no node the provider binds an id to "localhost", which (as in the
    // kernel) ties it to no device, so every device's addresses fill the
    // MSG entries. A bind that tied it to the loopback device removed
    // them all ("handling of the socket address fails - -61").
    let entries: Vec<String> = t
        .split("provider: ")
        .skip(1)
        .map(|e| format!("provider: {e}"))
        .collect();
    let has = |prov: &str, ty: &str| {
        entries.iter().any(|e| {
            e.starts_with(&format!("provider: {prov}\n"))
                && e.contains(&format!("domain: roce_{}\n", lab.va))
                && e.contains(&format!("type: {ty}\n"))
        })
    };
    assert!(has("verbs", "FI_EP_MSG"), "{t}");
    assert!(has("verbs;ofi_rxm", "FI_EP_RDM"), "{t}");
    // Every open of the veth device went to one address.
    let opened: std::collections::BTreeSet<&str> = t
        .lines()
        .filter(|l| l.contains(&format!("roce_{} opened on", lab.va)))
        .collect();
    assert!(opened.len() <= 1, "{opened:?}\n{t}");
}

/// A program in its own process group, killed with the whole group
/// (`ip netns exec` and what it runs) when dropped or past its limit.
struct Group(Option<std::process::Child>);

impl Group {
    fn spawn(mut c: Command) -> Group {
        use std::os::unix::process::CommandExt;
        c.process_group(0);
        Group(Some(c.spawn().unwrap()))
    }

    fn kill(child: &std::process::Child) {
        // SAFETY: signals the process group this test made (its id is
        // the child's pid, the child having led it from its start).
        unsafe { libc::kill(-(child.id() as i32), libc::SIGKILL) };
    }

    /// Waits at most `limit`; past it the group is killed and the test
    /// fails with what the program printed.
    fn wait(mut self, limit: Duration, what: &str) -> std::process::Output {
        let mut c = self.0.take().unwrap();
        let end = std::time::Instant::now() + limit;
        while c.try_wait().unwrap().is_none() {
            if std::time::Instant::now() > end {
                Group::kill(&c);
                let o = c.wait_with_output().unwrap();
                panic!("{what} did not finish in {limit:?}:\n{}", text_of(&o));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        c.wait_with_output().unwrap()
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        if let Some(c) = &mut self.0 {
            Group::kill(c);
            let _ = c.wait();
        }
    }
}

/// `tests/c/fabric_pingpong.c` (a libfabric ping-pong in the manner of
/// fabtests' `fi_pingpong` and `fi_rdm_pingpong`, which Debian does not
/// package) between the namespaces with libfabric's unmodified verbs
/// provider and default settings: `msg` over verbs MSG endpoints
/// (rdma_cm connections), `rdm` over `verbs;ofi_rxm`. Returns (server,
/// client) output, or None when skipped.
fn fabric_pingpong(ep: &str, count: u32, size: u32) -> Option<(String, String)> {
    let exe = common::c_program_linked(
        "fabric_pingpong",
        "rdma/fabric.h",
        &["-lfabric"],
        "libfabric-dev",
    )?;
    let lab = match Lab::new() {
        Ok(l) => l,
        Err(e) => {
            eprintln!("skipped: {e}");
            return None;
        }
    };
    let port = common::free_port().to_string();
    let (n, s) = (count.to_string(), size.to_string());
    let exe = exe.to_str().unwrap();
    let log = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("fabric-{ep}-{}.out", std::process::id()));
    let mut sc = lab.command(&lab.a, &lab.va, "udp", exe, &[]);
    sc.args(["server", ep, &lab.ip_a, &port, &n, &s])
        .env_remove("ROCE_DEVICES")
        .stdout(std::fs::File::create(&log).unwrap());
    let server = Group::spawn(sc);
    // The server prints "ok listening" (unbuffered) once it listens.
    let end = std::time::Instant::now() + LIMIT;
    while !std::fs::read_to_string(&log)
        .unwrap_or_default()
        .contains("ok listening")
    {
        assert!(std::time::Instant::now() < end, "the server never listened");
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut cc = lab.command(&lab.b, &lab.vb, "udp", exe, &[]);
    cc.args(["client", ep, &lab.ip_a, &port, &n, &s])
        .env_remove("ROCE_DEVICES");
    let c = Group::spawn(cc).wait(LIMIT, "the client");
    let s = server.wait(LIMIT, "the server");
    let st = std::fs::read_to_string(&log).unwrap_or_default() + &text_of(&s);
    let _ = std::fs::remove_file(&log);
    let ct = text_of(&c);
    assert!(
        s.status.success() && c.status.success(),
        "fabric_pingpong {ep}: server {:?} client {:?}\nserver:\n{st}\nclient:\n{ct}",
        s.status,
        c.status
    );
    Some((st, ct))
}

/// libfabric's verbs MSG endpoints between the namespaces. They failed
/// twice: `fi_endpoint` with EINVAL (`rdma_getaddrinfo` without node and
/// service refused the hints' addresses the provider passes), then the
/// connection never came (an id `rdma_migrate_id` moved to the EQ's
/// channel stayed synchronous, so `rdma_resolve_route` took its own
/// ROUTE_RESOLVED event and the provider never called `rdma_connect`).
#[test]
fn fabric_msg_pingpong_between_namespaces() {
    for size in [1024, 65536] {
        if let Some((st, ct)) = fabric_pingpong("msg", 100, size) {
            let line = format!("100 messages of {size} bytes checked");
            assert!(st.contains(&line) && ct.contains(&line), "{st}\n{ct}");
            assert!(ct.contains("domain roce_dvb"), "{ct}");
        }
    }
}

/// `verbs;ofi_rxm` RDM endpoints between the namespaces: the server
/// asks for its address by node, the client sends it its own name first
/// (rxm connects on demand over verbs MSG endpoints); 64 KiB messages
/// take rxm's rendezvous path (an RDMA READ of the sender's buffer).
#[test]
fn fabric_rdm_pingpong_between_namespaces() {
    for size in [1024, 65536] {
        if let Some((st, ct)) = fabric_pingpong("rdm", 100, size) {
            let line = format!("100 messages of {size} bytes checked");
            assert!(st.contains(&line) && ct.contains(&line), "{st}\n{ct}");
            assert!(ct.contains("fi_getinfo verbs;ofi_rxm"), "{ct}");
        }
    }
}
