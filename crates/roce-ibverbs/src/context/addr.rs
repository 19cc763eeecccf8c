//! Which address a context opens on, and the opening of its engine
//! (`docs/dropin.md`, "Devices and addresses"): `ROCE_ADDR` when set and
//! the device's, otherwise the device's first IPv4 address (its first
//! address without one). On the loopback device a taken UDP port 4791
//! moves the context to the next address of 127.0.0.0/8 (every one of
//! them reaches `lo` on Linux with no configuration), so that any number
//! of unmodified processes on one host each get an address, and a GID,
//! of their own.

use std::net::{IpAddr, Ipv4Addr};

use roce_verbs::{OpenError, OpenOptions};

use super::gid::gid_table;
use crate::config::{self, log};
use crate::device::{self, Device};
use crate::ffi::Res;

/// The address a context of `dev` opens on first.
pub(crate) fn first_addr(dev: &Device) -> Option<IpAddr> {
    let gids = dev.info.gids();
    gids.iter()
        .copied()
        .find(IpAddr::is_ipv4)
        .or_else(|| gids.first().copied())
}

fn open_on(
    dev: &Device,
    backend: &roce_verbs::BackendKind,
    ack_delay: roce_verbs::AckDelay,
    cpu: roce_io::CpuTuning,
    shm: bool,
    addr: IpAddr,
    port: u16,
) -> Result<roce_verbs::Context, OpenError> {
    let loopback = dev.info.interface().loopback;
    // C programs often poll a CQ until a completion, then wait by other
    // means (spinning on memory a peer WRITEs), and post one work request
    // per call. Chosen by measurement with perftest on two CPUs
    // (docs/performance.md): every wake-up of the progress thread may take
    // the CPU from the program it serves, so the thread looks seldom
    // while the program polls (poller_park = max_park) and does not take
    // a successful poll for the program's leaving (that made it sleep on
    // the socket and wake for each datagram of a program that went on
    // polling: ib_send_lat's mean doubled); the engine's ACK deferral
    // brings a WRITE's answer before its ACK instead. Posts in a burst
    // share their system calls.
    //
    // A scatter/gather entry outside its region, of another PD or with
    // an unknown lkey is posted and completes in error when it runs, as
    // on rxe and NICs (rping's server READs a peer's larger buffer into
    // its 64-byte one and expects a completion, not a failed post).
    let progress = roce_verbs::ProgressConfig {
        poller_park: std::time::Duration::from_millis(1),
        coalesce_posts: std::time::Duration::from_micros(4),
        check_sges_at_post: false,
        hand_over_on_completion: true,
        ..roce_verbs::ProgressConfig::default()
    };
    // Peers that number their IPv4 identifications (Linux rxe, and the
    // kernel's stack under most RoCE NICs) send datagrams whose ICRC a
    // UDP socket cannot verify, since it never sees the ID: the engine
    // takes them and counts them, as the `roce` tools do. Its default
    // (`Require`) drops every one of rxe's packets.
    let mut o = OpenOptions::new(backend.clone(), addr)
        .gids(gid_table(dev, addr))
        .icrc_check(roce_verbs::IcrcCheck::Count)
        .roce_port(port, port)
        .progress(progress)
        .cpu(cpu)
        .shm(shm);
    o.config.ack_delay = ack_delay;
    if !loopback {
        o = o.interface(Some(&dev.info.interface().name));
    }
    crate::debug::setup(o).open()
}

/// Whether `a` is an address of `dev` (for loopback: any loopback address).
pub(crate) fn owns(dev: &Device, a: IpAddr) -> bool {
    if dev.info.interface().loopback {
        a.to_canonical().is_loopback()
    } else {
        dev.info.gids().contains(&a)
    }
}

/// Whether another listed device owns `a`. `ROCE_ADDR` names the address
/// of one device; a program that opens every device (librdmacm's listen
/// on the wildcard address does) opens the others on their own
/// addresses, instead of taking that address a second time (loopback
/// took it and the device it belongs to then found it in use). An address
/// no device owns still fails to open, as asked.
fn owned_by_another(dev: &Device, a: IpAddr) -> bool {
    device::current().is_ok_and(|all| {
        all.iter()
            .any(|d| d.info.name() != dev.info.name() && owns(d, a))
    })
}

/// An environment setting, or `EINVAL` with the reason on stderr.
fn setting<T>(r: Result<T, String>) -> Res<T> {
    r.map_err(|m| {
        crate::config::say(format_args!("{m}"));
        libc::EINVAL
    })
}

/// The address a context of `dev` is asked to open on: `at`, or
/// `ROCE_ADDR` when it is this device's (or no device's).
pub(crate) fn asked_addr(dev: &Device, at: Option<IpAddr>) -> Res<Option<IpAddr>> {
    Ok(match at {
        Some(a) => Some(a),
        None => setting(config::addr())?.filter(|&a| {
            let elsewhere = !owns(dev, a) && owned_by_another(dev, a);
            if elsewhere {
                log!(
                    "ROCE_ADDR={a} is another device's: {} opens on its own",
                    dev.info.name()
                );
            }
            !elsewhere
        }),
    })
}

/// Opens the engine, moving along 127/8 when the loopback address is
/// taken by another process and nobody asked for one (`asked`).
pub(crate) fn open_engine(
    dev: &Device,
    asked: Option<IpAddr>,
) -> Res<(roce_verbs::Context, IpAddr)> {
    let backend = setting(config::backend())?;
    let ack_delay = setting(config::ack_delay())?;
    let port = setting(config::port())?;
    let cpu = setting(config::cpu())?;
    let shm = setting(config::shm())?;
    let first = match asked.or_else(|| first_addr(dev)) {
        Some(a) => a,
        None => return Err(libc::ENODEV),
    };
    let mut addr = first;
    loop {
        match open_on(dev, &backend, ack_delay, cpu, shm, addr, port) {
            Ok(c) => {
                let emu = if cpu == roce_io::CpuTuning::EMULATED {
                    " (code for an emulated CPU)"
                } else {
                    ""
                };
                if port == config::ROCE_V2_PORT {
                    log!("{} opened on {addr}{emu}", dev.info.name());
                } else {
                    log!("{} opened on {addr}, UDP port {port}{emu}", dev.info.name());
                }
                return Ok((c, addr));
            }
            Err(OpenError::PortInUse { .. })
                if asked.is_none() && dev.info.interface().loopback =>
            {
                let IpAddr::V4(v4) = addr else {
                    return Err(libc::EADDRINUSE);
                };
                let o = v4.octets();
                if o[3] >= 254 {
                    crate::config::say(format_args!(
                        "UDP port {port} is taken on every address of 127.0.0.0/24"
                    ));
                    return Err(libc::EADDRINUSE);
                }
                addr = IpAddr::V4(Ipv4Addr::new(o[0], o[1], o[2], o[3] + 1));
            }
            Err(e) => {
                crate::config::say(format_args!(
                    "cannot open {} on {addr}: {e}",
                    dev.info.name()
                ));
                return Err(match e {
                    OpenError::PortInUse { .. } => libc::EADDRINUSE,
                    OpenError::NeedsRaw(_) => libc::EPERM,
                    OpenError::NotLocal(_) | OpenError::NotOnInterface { .. } => {
                        libc::EADDRNOTAVAIL
                    }
                    _ => libc::EIO,
                });
            }
        }
    }
}
