//! `roce nvmf`: an NVMe over Fabrics (RDMA) target and a host check over
//! this stack, with `roce_nvmf`'s driver (docs/nvmf.md).
//!
//! * `roce nvmf target --bind ADDR [--nqn NQN] [--mem BLOCKS | --file PATH]`
//!   serves one subsystem with one namespace on port 4420 until Ctrl-C;
//! * `roce nvmf check ADDR --nqn NQN` connects as a host, writes a
//!   pattern, reads it back and compares;
//! * `roce nvmf discover ADDR` prints the discovery log page;
//! * `roce nvmf perf ADDR` drives I/O at a queue depth and reports IOPS,
//!   bandwidth and latency percentiles ([`perf`]).

mod config;
mod config_error;
mod error;
mod perf;
mod verify;

use std::net::IpAddr;
use std::time::Duration;

use clap::{Args, Subcommand};
use roce_nvmf::driver::{connect, HostOptions, TargetServer};
use roce_nvmf::target::*;
use roce_nvmf::wire::log::{lid, parse_discovery_header, DiscoveryEntry, DISCOVERY_RECORD_LEN};
use roce_nvmf::wire::sgl::SglDesc;
use roce_nvmf::wire::{Cid, Nsid};
use roce_verbs::{BackendKind, Context};

use crate::stop::Stop;
use error::NvmfError;

/// `roce nvmf` and its subcommands.
#[derive(Args, Debug)]
#[command(after_help = "Exit status: 0 success, 1 a failure (check: data differed), 2 bad flags.")]
pub(crate) struct NvmfArgs {
    #[command(subcommand)]
    cmd: NvmfCmd,
}

#[derive(Subcommand, Debug)]
enum NvmfCmd {
    /// Serve one subsystem with one namespace until Ctrl-C.
    Target(TargetArgs),
    /// Connect as a host, write a pattern, read it back and compare.
    Check(HostArgs),
    /// Print the discovery log page of a target.
    Discover(HostArgs),
    /// Reads or writes at a queue depth for a time; IOPS, bandwidth and
    /// latency percentiles (`--json` for a JSON object).
    Perf(perf::PerfArgs),
}

#[derive(Args, Debug)]
struct TargetArgs {
    /// Local address of the RoCE device.
    #[arg(long, default_value = "127.0.0.1")]
    bind: IpAddr,
    /// RDMA CM port (4420 is the NVMe-oF port).
    #[arg(long, default_value_t = 4420)]
    port: u16,
    /// Subsystem NQN.
    #[arg(long, default_value = "nqn.2026-01.org.roce:nvmf")]
    nqn: String,
    /// Namespace in memory of this many blocks.
    #[arg(long, default_value_t = 65536, conflicts_with = "file")]
    mem: u64,
    /// Namespace on this file or block device (its current size).
    #[arg(long)]
    file: Option<std::path::PathBuf>,
    /// Logical block size.
    #[arg(long, default_value_t = 512)]
    block_size: u32,
    /// Host NQN allowed to connect (repeatable; default: any host).
    #[arg(long)]
    allow_host: Vec<String>,
    /// UDP port of the RoCE traffic.
    #[arg(long, default_value_t = 4791)]
    roce_port: u16,
    /// Answer every command with a plain SEND, even when its keyed SGL
    /// asks for remote invalidation (subtype Fh): the host then
    /// invalidates its key itself (NVMe-oF 1.1 §7.3.2; docs/nvmf.md).
    #[arg(long)]
    no_remote_invalidate: bool,
    /// Serve what this nvmetcli-style JSON file describes (its RDMA port's
    /// subsystems, allowed hosts and namespaces) instead of the flags
    /// above; --bind and --port still choose where to listen.
    #[arg(long, conflicts_with_all = ["file", "nqn", "allow_host"])]
    config: Option<std::path::PathBuf>,
}

#[derive(Args, Debug)]
struct HostArgs {
    /// The target's address.
    addr: IpAddr,
    /// Local address of the RoCE device.
    #[arg(long, default_value = "127.0.0.2")]
    bind: IpAddr,
    /// RDMA CM port.
    #[arg(long, default_value_t = 4420)]
    port: u16,
    /// Subsystem NQN.
    #[arg(long, default_value = "nqn.2026-01.org.roce:nvmf")]
    nqn: String,
    /// This host's NQN.
    #[arg(long, default_value = "nqn.2026-01.org.roce:host")]
    hostnqn: String,
    /// Blocks to write and read back (check).
    #[arg(long, default_value_t = 64)]
    blocks: u16,
    /// UDP port of the RoCE traffic.
    #[arg(long, default_value_t = 4791)]
    roce_port: u16,
    /// Record this side's RoCE traffic to a pcap file (`roce inspect`
    /// decodes the capsules).
    #[arg(long)]
    pcap: Option<std::path::PathBuf>,
}

pub(super) fn open(bind: IpAddr, roce_port: u16) -> Result<Context, NvmfError> {
    open_capturing(bind, roce_port, None)
}

/// Opens the device, recording what it sends and receives to `pcap`.
fn open_capturing(
    bind: IpAddr,
    roce_port: u16,
    pcap: Option<&std::path::Path>,
) -> Result<Context, NvmfError> {
    // The peer is usually Linux (nvme-rdma or nvmet-rdma over rxe): the
    // tools' options count the ICRCs they cannot verify, where the
    // engine's default would drop every datagram from rxe (docs/interop.md,
    // "NVMe-oF against Linux"; tests/nvmf_rxe.rs).
    let mut o = crate::device::tool_options(BackendKind::Udp, bind, roce_port)?;
    if let Some(w) = crate::device::middleware(pcap, None)? {
        o = o.wrap(w);
    }
    Ok(o.open()?)
}

/// Runs `roce nvmf`; returns the exit status.
pub(crate) fn run(args: &NvmfArgs, stop: &Stop) -> i32 {
    let r = match &args.cmd {
        NvmfCmd::Target(a) => target(a, stop),
        NvmfCmd::Check(a) => check(a),
        NvmfCmd::Discover(a) => discover(a),
        NvmfCmd::Perf(a) => perf::run(a, stop),
    };
    match r {
        Ok(()) => 0,
        Err(e) => crate::fail("nvmf", false, &e.to_string(), 1),
    }
}

/// The configuration the flags describe: one subsystem, namespace 1.
fn flags_config(a: &TargetArgs) -> Result<TargetConfig, NvmfError> {
    let storage: Box<dyn Namespace> = match &a.file {
        Some(p) => {
            let f = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .open(p)
                .map_err(NvmfError::NamespaceFile)?;
            let len = std::io::Seek::seek(&mut &f, std::io::SeekFrom::End(0))
                .map_err(NvmfError::NamespaceFile)?;
            Box::new(FileNamespace::new(f, len, a.block_size))
        }
        None => Box::new(MemNamespace::new(a.mem, a.block_size)),
    };
    let mut sub = Subsystem::new(&a.nqn);
    if !a.allow_host.is_empty() {
        sub.allowed_hosts = Some(a.allow_host.clone());
    }
    let (nguid, uuid) = ns_ids(&a.nqn, 1);
    // The serial number follows the subsystem too (20 ASCII characters).
    sub.serial = nguid[..10].iter().map(|b| format!("{b:02x}")).collect();
    sub.namespaces.push(NamespaceEntry {
        nsid: Nsid(1),
        nguid,
        uuid,
        storage,
    });
    let port = PortInfo {
        traddr: a.bind.to_string(),
        trsvcid: a.port.to_string(),
        portid: 1,
        adrfam: if a.bind.is_ipv4() { 1 } else { 2 },
    };
    let cfg = TargetConfig {
        subsystems: vec![sub],
        port,
        limits: Limits::default(),
    };
    Ok(cfg)
}

fn target(a: &TargetArgs, stop: &Stop) -> Result<(), NvmfError> {
    let (cfg, bind, port) = match &a.config {
        // The file's RDMA port says where to listen, when it names one.
        Some(path) => {
            let mut cfg = config::load(path, ns_ids)?;
            let at = cfg
                .port
                .traddr
                .parse::<IpAddr>()
                .ok()
                .filter(|ip| !ip.is_unspecified());
            let port = cfg.port.trsvcid.parse::<u16>().unwrap_or(a.port);
            if at.is_none() {
                // No RDMA port in the file: the flags', in discovery too.
                cfg.port.traddr = a.bind.to_string();
                cfg.port.trsvcid = port.to_string();
            }
            (cfg, at.unwrap_or(a.bind), port)
        }
        None => (flags_config(a)?, a.bind, a.port),
    };
    let mut cfg = cfg;
    cfg.limits.remote_invalidate = !a.no_remote_invalidate;
    let ctx = open(bind, a.roce_port)?;
    let names: Vec<&str> = cfg.subsystems.iter().map(|s| s.nqn.as_str()).collect();
    let names = names.join(", ");
    let mut server = TargetServer::new(&ctx, port, Target::new(cfg))?;
    eprintln!("roce nvmf: serving {names} on {bind}:{port}");
    let mut busy = false;
    while !stop.requested() {
        let wait = if busy {
            Duration::ZERO
        } else {
            Duration::from_millis(1)
        };
        busy = server.poll(wait)?;
    }
    Ok(())
}

/// NGUID and UUID of namespace `nsid` of subsystem `nqn`: derived from
/// both, so that they stay the same across restarts (Linux's host drops a
/// namespace whose identifiers changed on reconnect) and differ between
/// subsystems (it refuses identifiers another subsystem already uses).
fn ns_ids(nqn: &str, nsid: u32) -> ([u8; 16], [u8; 16]) {
    use std::hash::{Hash, Hasher};
    let h = |salt: u8| {
        // SipHash with fixed keys: the same value on every run.
        let mut s = std::hash::DefaultHasher::new();
        (salt, nqn, nsid).hash(&mut s);
        s.finish().to_be_bytes()
    };
    let mut nguid = [0u8; 16];
    nguid[..8].copy_from_slice(&h(1));
    nguid[8..].copy_from_slice(&h(2));
    let mut uuid = [0u8; 16];
    uuid[..8].copy_from_slice(&h(3));
    uuid[8..].copy_from_slice(&h(4));
    // RFC 9562 version 8 (custom), variant 10b.
    uuid[6] = (uuid[6] & 0x0F) | 0x80;
    uuid[8] = (uuid[8] & 0x3F) | 0x80;
    (nguid, uuid)
}

fn check(a: &HostArgs) -> Result<(), NvmfError> {
    let ctx = open_capturing(a.bind, a.roce_port, a.pcap.as_deref())?;
    let mut host = connect(&ctx, a.addr, a.port, &HostOptions::new(&a.nqn, &a.hostnqn))?;
    let ns = host.identify_namespace(Nsid(1))?;
    let bs = 1u32 << ns.lbaf0_lbads;
    let blocks = (a.blocks as u64).min(ns.nsze) as u16;
    let pattern: Vec<u8> = (0..blocks as usize * bs as usize)
        .map(|i| (i * 131 + 17) as u8)
        .collect();
    // Commands of at most MDTS (and 65536 blocks) each.
    let per = (host.max_transfer().unwrap_or(1 << 20) / bs as usize).clamp(1, 65535);
    let mut back = Vec::with_capacity(pattern.len());
    for (i, chunk) in pattern.chunks(per * bs as usize).enumerate() {
        let lba = (i * per) as u64;
        host.write(Nsid(1), lba, chunk, bs, false)?;
    }
    for (i, chunk) in pattern.chunks(per * bs as usize).enumerate() {
        let lba = (i * per) as u64;
        let n = (chunk.len() / bs as usize) as u16;
        back.extend(host.read(Nsid(1), lba, n, bs)?);
    }
    host.disconnect()?;
    if back != pattern {
        return Err(NvmfError::Differ { blocks });
    }
    println!("{blocks} blocks of {bs} bytes written and read back identical");
    Ok(())
}

fn discover(a: &HostArgs) -> Result<(), NvmfError> {
    let ctx = open(a.bind, a.roce_port)?;
    let mut host = connect(
        &ctx,
        a.addr,
        a.port,
        &HostOptions::new(DISCOVERY_NQN, &a.hostnqn),
    )?;
    let len = 16 * DISCOVERY_RECORD_LEN;
    let sqe = roce_nvmf::initiator::get_log_page(
        Cid(0),
        lid::DISCOVERY,
        Nsid(0),
        len as u32,
        0,
        false,
        SglDesc::InCapsule { offset: 0, len: 0 },
    );
    let page = host.admin_data(sqe, len)?;
    let (genctr, numrec) = parse_discovery_header(&page)?;
    println!("Discovery Log Number of Records {numrec}, Generation counter {genctr}");
    for i in 0..(numrec as usize).min(15) {
        let at = DISCOVERY_RECORD_LEN * (i + 1);
        let e = DiscoveryEntry::parse(&page[at..])?;
        println!("=====Discovery Log Entry {i}======\ntrtype:  rdma\nsubnqn:  {}\ntraddr:  {}\ntrsvcid: {}\nportid:  {}", e.subnqn, e.traddr, e.trsvcid, e.portid);
    }
    Ok(host.disconnect()?)
}
