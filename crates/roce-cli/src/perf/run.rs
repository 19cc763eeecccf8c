//! The orchestration of `roce perf`: the server, the client, and both
//! in one process with `--loopback`.

use std::net::{IpAddr, Ipv4Addr, TcpListener};
use std::time::Duration;

use roce_verbs::Rkey;
use serde_json::{json, Value};

use super::args::{adopted_note, check_gid_index, check_modes, BackendKind, PerfArgs};
use super::control::{self, Control};
use super::error::PerfError;
use super::interrupts::Interrupts;
use super::messages::Params;
use super::native::NativePlane;
use super::net::{accept_interruptibly, connect_tcp, first_byte, listen_loopback, resolve};
use super::plane::{Data, Run};
use super::print::{pcap_problem, print_results};
use super::{backend, perftest, perftest_cm, session, setup};
use crate::stop::Stop;

/// Runs `roce perf`; returns the exit status. `stop` (Ctrl-C) cuts the
/// run short: both sides report what they measured.
pub(crate) fn run(args: &PerfArgs, stop: &Stop) -> i32 {
    let int = Interrupts::new(stop);
    let moved;
    let args = match client_on_loopback(args) {
        Ok(Some(a)) => {
            moved = a;
            &moved
        }
        Ok(None) => args,
        Err(e) => return crate::fail("perf", args.json, &e.to_string(), 1),
    };
    let checked = check_modes(args).and_then(|()| check_gid_index(args));
    // What loss costs, said once the flags are known to be good.
    if checked.is_ok() && !args.json {
        if let Some(w) = args.faults.as_deref().and_then(crate::device::loss_warning) {
            eprintln!("roce perf: {w}");
        }
    }
    let held;
    let args = match checked.as_ref().map(|()| backend::hold_address(args)) {
        Ok(Ok(Some(h))) => {
            held = PerfArgs {
                held: Some(h),
                ..args.clone()
            };
            &held
        }
        Ok(Ok(None)) | Err(_) => args,
        Ok(Err(e)) => return crate::fail("perf", args.json, &e.to_string(), 1),
    };
    let res = if let Err(e) = checked {
        Err(e)
    } else if args.perftest && args.rdma_cm {
        perftest_cm::run(args)
    } else if args.perftest {
        perftest::run(args, stop)
    } else if args.loopback {
        run_loopback(args, &int)
    } else if args.server.is_some() {
        run_client(args, None, &int).map(|_| ())
    } else {
        run_server(args, None, &int)
    };
    match res {
        Ok(()) if int.here() => 130,
        Ok(()) => 0,
        Err(e) => {
            // Cut short by Ctrl-C before there was anything to report.
            let code = if int.here() { 130 } else { 1 };
            crate::fail("perf", args.json, &e.to_string(), code)
        }
    }
}

/// A client given no local address (no `--bind`, no `-x`) whose server
/// is on this host's loopback, with `ROCE_SHM=0` (otherwise it shares the
/// server's address): the arguments with the free loopback address it
/// takes instead of the server's as `--bind`, for the control connection
/// and the RoCE traffic alike, so that the server sees the address the
/// QPs use ([`crate::device::loopback_client_local`]).
fn client_on_loopback(args: &PerfArgs) -> Result<Option<PerfArgs>, PerfError> {
    let Some(server) = args.server.as_deref() else {
        return Ok(None);
    };
    if args.loopback || args.bind.is_some() {
        return Ok(None);
    }
    if args.backend != BackendKind::Udp {
        return Ok(None);
    }
    let Ok(addr) = resolve(server, args.port) else {
        // Said by the run itself.
        return Ok(None);
    };
    let Some(route) = crate::rping::route_source(addr.ip()) else {
        return Ok(None);
    };
    // With `-x N` (perftest's habit on both ends of one host), entry N
    // of the GID table, which may be the very address the server holds.
    // A perftest server keeps its address, so the client gives way; a
    // roce perf server gives way itself when the client uses its address
    // (the exchange tells it), so without --perftest the client keeps
    // the GID it was given.
    if args.gid_index.is_some() && !args.perftest {
        return Ok(None);
    }
    let local = match args.gid_index {
        None => route,
        Some(_) => match backend::gid_address(args, route) {
            Ok(g) if g.is_loopback() => g,
            // Not a loopback GID, or a bad index (said by the run).
            _ => return Ok(None),
        },
    };
    let moved = crate::device::loopback_client_local("perf", addr.ip(), local, args.roce_port)?
        .map(|(b, note)| match args.gid_index {
            Some(x) => (
                b,
                format!(
                    "roce perf: GID {x} is {local}, which the server uses too (both ends on this host); using {b}"
                ),
            ),
            None => (b, note),
        });
    // The moved client's address is its GID: the index no longer applies.
    Ok(moved.map(|(b, note)| PerfArgs {
        bind: Some(b),
        gid_index: None,
        moved_note: (!args.json).then_some(note),
        local_moves: true,
        ..args.clone()
    }))
}

/// Where the loopback server listens (or, when its control port is
/// taken there, on the next free loopback address: [`listen_loopback`]),
/// and the address both sides use (two contexts of one device, as a NIC
/// allows; with `ROCE_SHM=0` the client moves to a free one:
/// [`crate::device::loopback_client_local`]).
const LOOP_SERVER: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 1);
/// The client's address on the in-memory fabric, a wire between two
/// hosts with one address each (the control connection uses it too).
const FABRIC_CLIENT: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 2);
/// Bytes in flight per side across all QPs over roce perf's exchange
/// (the UDP backend's receive buffer is 8 MiB): UDP has no flow control,
/// and what overflows the peer's socket buffer starts go-back-N.
const INFLIGHT_BUDGET: u64 = 4 << 20;

fn run_loopback(args: &PerfArgs, int: &Interrupts) -> Result<(), PerfError> {
    if args.server.is_some() {
        return Err(PerfError::Args(
            "--loopback runs both sides; do not name a server".into(),
        ));
    }
    if args.backend == BackendKind::Packet {
        return Err(PerfError::Args("--loopback runs over the udp or fabric backend; the packet backend needs an Ethernet link (two hosts or namespaces)".into()));
    }
    if args.gid_index.is_some() {
        return Err(PerfError::Args(
            "--loopback chooses its addresses; -x does not apply".into(),
        ));
    }
    // Refuse bad parameters before a server thread starts waiting.
    Params::from_args(args)?;
    // The fabric's client address is not the server's to take.
    let (listener, moved) = listen_loopback(LOOP_SERVER, args.port, &[IpAddr::V4(FABRIC_CLIENT)])?;
    if let Some(line) = moved.filter(|_| !args.json) {
        eprintln!("roce perf: {line}");
    }
    // Both ends' RoCE addresses follow the listener's.
    let server_at = listener
        .local_addr()
        .map_err(|e| PerfError::Io("listen".into(), e))?;
    let fabric = (args.backend == BackendKind::Fabric).then(roce_io::Fabric::new);
    let mut server_args = args.clone();
    server_args.json = false;
    // The client's side records both directions; one writer per file.
    server_args.pcap = None;
    let fabric2 = fabric.clone();
    let server_int = int.clone();
    // In a latency test each side (and the progress thread its context
    // starts) on a CPU of its own, when there are two: left to the
    // scheduler, both sides could share one CPU for the first ~12 ms of a
    // run, each polling through the other's time slice (see
    // crate::pin). Bandwidth tests are left to the scheduler: pinned,
    // they were no faster here (and slower in the emulated lab guest,
    // though builds there also differ by code placement alone: README).
    let cpus = crate::pin::allowed_cpus().unwrap_or_default();
    let placement = (!args.test.is_bw() && cpus.len() >= 2).then(|| (cpus[0], cpus[1]));
    let server = std::thread::spawn(move || {
        if let Some((_, cpu)) = placement {
            let _ = crate::pin::pin_current_thread(cpu);
        }
        serve(&server_args, listener, fabric2.as_ref(), true, &server_int)
    });
    if let Some((cpu, _)) = placement {
        let _ = crate::pin::pin_current_thread(cpu);
    }
    let mut client_args = args.clone();
    client_args.server = Some(server_at.ip().to_string());
    client_args.port = server_at.port();
    let lo = server_at.ip();
    match args.backend {
        BackendKind::Fabric => client_args.bind = Some(IpAddr::V4(FABRIC_CLIENT)),
        _ => {
            let moved = crate::device::loopback_client_local("perf", lo, lo, args.roce_port)?;
            if let Some((a, _)) = moved {
                client_args.bind = Some(a);
                client_args.local_moves = true;
            }
        }
    }
    let client = run_client(&client_args, fabric.as_ref(), int);
    if client.is_err() && !server.is_finished() {
        // The server may still wait for a connection that will never
        // come; the process ends with the client's error.
        std::thread::sleep(Duration::from_millis(200));
        if !server.is_finished() {
            return client.map(|_| ());
        }
    }
    let server = server
        .join()
        .map_err(|_| PerfError::Failed("the server thread panicked".into()))?;
    match (client, server) {
        (Ok(_), Ok(())) => Ok(()),
        (Err(c), Ok(())) => Err(c),
        // The side that failed first usually explains the other: the
        // peer's report of its own failure is left out.
        (Err(c), Err(s)) if s.is_peer() => Err(c),
        (Ok(_), Err(s)) => Err(PerfError::Loopback {
            client: None,
            server: Box::new(s),
        }),
        (Err(c), Err(s)) if c.is_peer() => Err(PerfError::Loopback {
            client: None,
            server: Box::new(s),
        }),
        (Err(c), Err(s)) => Err(PerfError::Loopback {
            client: Some(Box::new(c)),
            server: Box::new(s),
        }),
    }
}

fn run_server(
    args: &PerfArgs,
    fabric: Option<&roce_io::Fabric>,
    int: &Interrupts,
) -> Result<(), PerfError> {
    if args.backend == BackendKind::Fabric {
        return Err(PerfError::Args(
            "the fabric backend needs --loopback".into(),
        ));
    }
    let bind = args.bind.unwrap_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED));
    let listener = TcpListener::bind((bind, args.port))
        .map_err(|e| PerfError::Io(format!("cannot listen on port {}", args.port), e))?;
    if !args.json {
        eprintln!(
            "roce perf: waiting for a client on port {} ({}: roce perf {} HOST, or perftest's {} HOST)",
            args.port,
            args.test.name(),
            args.test.name(),
            args.test.perftest_tool()
        );
    }
    serve(args, listener, fabric, false, int)
}

fn serve(
    args: &PerfArgs,
    listener: TcpListener,
    fabric: Option<&roce_io::Fabric>,
    quiet: bool,
    int: &Interrupts,
) -> Result<(), PerfError> {
    let stream = accept_interruptibly(&listener, &int.here)?;
    match first_byte(&stream)? {
        b'{' => {}
        b'0'..=b'9' if fabric.is_none() => {
            // perftest's exchange opens with its version string: a
            // perftest client (ib_write_bw, roce perf --perftest).
            if !args.json {
                eprintln!("roce perf: the client speaks perftest's exchange");
            }
            return perftest::run_on(args, stream, false);
        }
        _ => {
            return Err(PerfError::Protocol(
                "the client speaks neither roce perf's exchange nor perftest's".into(),
            ))
        }
    }
    let mut ctl = Control::new(stream, int).map_err(|e| PerfError::Failed(e.to_string()))?;
    let hello = ctl.expect("hello")?;
    let params = match Params::from_json(&hello) {
        Ok(p) if p.test == args.test => p,
        Ok(p) => {
            let msg = format!(
                "the client runs {} but this server runs {}",
                p.test.name(),
                args.test.name()
            );
            ctl.send_error(&msg);
            return Err(PerfError::Args(msg));
        }
        Err(e) => {
            ctl.send_error(&e.to_string());
            return Err(e);
        }
    };
    if !args.json {
        if let Some(note) = adopted_note(args, &params) {
            eprintln!("roce perf: {note}");
        }
    }
    // RoCE traffic between different UDP ports never meets: say so now
    // rather than after the retries run out (RETRY_EXC_ERR).
    if let Some(theirs) = hello.get("roce_port").and_then(Value::as_u64) {
        if theirs != u64::from(args.roce_port) {
            let msg = format!(
                "the client's --roce-port is {theirs}, this server's {}: give both sides the same --roce-port",
                args.roce_port
            );
            ctl.send_error(&msg);
            return Err(PerfError::Args(msg));
        }
    }
    let local = args
        .bind
        .filter(|b| !b.is_unspecified())
        .or(ctl.local_ip())
        .ok_or_else(|| PerfError::Failed("no local address".into()))?;
    let local = match backend::gid_address(args, local) {
        Ok(a) => a,
        Err(e) => {
            ctl.send_error(&e.to_string());
            return Err(e);
        }
    };
    // With no address given, a loopback address the client uses too (or,
    // with no GID index, another stack holds) gives way to a free one;
    // the client learns it from the endpoints.
    let local = if args.bind.is_none_or(|b| b.is_unspecified()) && args.backend == BackendKind::Udp
    {
        crate::device::loopback_server_local(
            "perf",
            local,
            ctl.peer_ip(),
            args.roce_port,
            args.json || quiet,
            args.gid_index.map(usize::from),
        )
    } else {
        local
    };
    let r = {
        let mut plane = NativePlane::new(&mut ctl, &params, false);
        setup::Session::open(args, &params, local, fabric, &mut plane, false)
            .and_then(|mut s| run_session(&mut s, &mut plane))
    };
    match r {
        Ok((results, params, counters)) => {
            if !quiet {
                print_results(args, &params, &results, &counters, int);
            }
            pcap_problem(&counters).map_or(Ok(()), |m| Err(PerfError::Failed(m)))
        }
        Err(e) => {
            ctl.send_error(&e.to_string());
            Err(e)
        }
    }
}

/// Runs the session's tests through the one driver over roce perf's
/// exchange. A failure is reported to the peer before the session is
/// torn down (closing the context can take a while, and the peer would
/// go on sending meanwhile).
fn run_session(
    s: &mut setup::Session,
    plane: &mut NativePlane<'_>,
) -> Result<(Vec<Value>, Params, Value), PerfError> {
    let lanes: Vec<_> = (0..s.qps.len()).map(|q| s.lane(q)).collect();
    let remotes: Vec<(u64, Rkey)> = s
        .remote
        .iter()
        .map(|r| (r.vaddr, Rkey::new(r.rkey)))
        .collect();
    let p = &s.params;
    let run = Run {
        lanes: &lanes,
        remotes: &remotes,
        test: p.test,
        client: s.is_client,
        bidir: p.bidir,
        sizes: &p.sizes,
        iters: p.iters,
        duration: p.duration,
        tx_depth: u64::from(p.tx_depth),
        inflight_budget: Some(INFLIGHT_BUDGET),
        // One signaled send in 64 (perftest's default moderation is 100).
        cq_mod: 64,
        progress_every: s.progress_every,
        data: Some(Data {
            own: s.own_pattern(s.max_size as usize),
            peer: s.peer_pattern(s.max_size as usize),
            verify: p.verify,
        }),
        peer_says_sent: true,
    };
    let results = session::run(plane, &run);
    match results {
        Ok(results) => {
            let mut counters = s.counters_json();
            // perftest's local/remote address lines (print_results).
            let eps = |e: &[control::Endpoint]| e.iter().map(|e| e.to_json()).collect::<Vec<_>>();
            counters["endpoints"] = json!({"local": eps(&s.local), "remote": eps(&s.remote)});
            Ok((results, s.params.clone(), counters))
        }
        Err(e) => {
            plane.ctl.send_error(&e.to_string());
            Err(e)
        }
    }
}

fn run_client(
    args: &PerfArgs,
    fabric: Option<&roce_io::Fabric>,
    int: &Interrupts,
) -> Result<Vec<Value>, PerfError> {
    let params = Params::from_args(args)?;
    let server = args
        .server
        .as_deref()
        .ok_or_else(|| PerfError::Args("no server".into()))?;
    let addr = resolve(server, args.port)?;
    let stream = connect_tcp(addr, args.bind)?;
    args.say_moved();
    let mut ctl = Control::new(stream, int).map_err(|e| PerfError::Failed(e.to_string()))?;
    let mut hello = params.to_json();
    hello["roce_port"] = json!(args.roce_port);
    ctl.send(&hello)?;
    let local = args
        .bind
        .or(ctl.local_ip())
        .ok_or_else(|| PerfError::Failed("no local address".into()))?;
    let local = match backend::gid_address(args, local) {
        Ok(a) => a,
        Err(e) => {
            ctl.send_error(&e.to_string());
            return Err(e);
        }
    };
    let r = {
        let mut plane = NativePlane::new(&mut ctl, &params, true);
        setup::Session::open(args, &params, local, fabric, &mut plane, true)
            .and_then(|mut s| run_session(&mut s, &mut plane))
    };
    match r {
        Ok((results, params, counters)) => {
            print_results(args, &params, &results, &counters, int);
            pcap_problem(&counters).map_or(Ok(results), |m| Err(PerfError::Failed(m)))
        }
        Err(e) => {
            ctl.send_error(&e.to_string());
            Err(e)
        }
    }
}
