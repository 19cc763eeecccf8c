//! Configuration by environment variable (`docs/dropin.md` lists them):
//! read when a list or a context is made, never cached, so a test can
//! set them per process.

use std::net::IpAddr;

/// RoCE v2's UDP port.
pub const ROCE_V2_PORT: u16 = 4791;

/// `ROCE_DEVICES`: a comma-separated list of device or interface names
/// to show (`roce_lo,eth0`); unset shows every interface with an address.
pub fn devices() -> Option<Vec<String>> {
    let v = std::env::var("ROCE_DEVICES").ok()?;
    let list: Vec<String> = v
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(String::from)
        .collect();
    (!list.is_empty()).then_some(list)
}

/// `ROCE_ADDR`: the address a context opens on (it must be one of the
/// device's, or any loopback address for the loopback device). An
/// unparsable value is reported once per open and ignored.
pub fn addr() -> Result<Option<IpAddr>, String> {
    match std::env::var("ROCE_ADDR") {
        Err(_) => Ok(None),
        Ok(s) => s
            .trim()
            .parse()
            .map(Some)
            .map_err(|_| format!("ROCE_ADDR={s} is not an IP address")),
    }
}

/// `ROCE_BACKEND`: `udp` (the default: UDP sockets, no privilege) or
/// `packet` (AF_PACKET on the interface; needs CAP_NET_RAW).
pub fn backend() -> Result<roce_verbs::BackendKind, String> {
    match std::env::var("ROCE_BACKEND").as_deref() {
        Err(_) | Ok("udp") | Ok("") => Ok(roce_verbs::BackendKind::Udp),
        Ok("packet") => Ok(roce_verbs::BackendKind::Packet),
        Ok(other) => Err(format!("ROCE_BACKEND={other}: use udp or packet")),
    }
}

/// `ROCE_PORT`: the UDP port contexts listen on and send to (the UDP
/// backend only); unset: 4791, RoCE v2's. For running beside a kernel
/// RoCE device, which holds 4791 on every address of its host (Linux rxe
/// in the lab VM): every process of the exchange must use the same port.
pub fn port() -> Result<u16, String> {
    match std::env::var("ROCE_PORT") {
        Err(_) => Ok(ROCE_V2_PORT),
        Ok(s) => match s.trim().parse::<u16>() {
            Ok(p) if p != 0 => Ok(p),
            _ => Err(format!("ROCE_PORT={s}: give a UDP port (1-65535)")),
        },
    }
}

/// `ROCE_SHM`: whether contexts reach peers in other processes on this
/// host (same network namespace, same user) through shared memory
/// instead of the kernel's UDP stack (docs/shm.md): `1` (the default) or
/// `0`, for a capture on the interface to see every packet.
pub fn shm() -> Result<bool, String> {
    shm_setting(std::env::var("ROCE_SHM").ok().as_deref())
}

/// A `ROCE_SHM` value: unset, empty or `1` turn the same-host path on
/// (`roce_verbs::OpenOptions::shm`), `0` off; anything else is an error
/// naming the value. The `roce` tools read the variable the same way.
pub fn shm_setting(value: Option<&str>) -> Result<bool, String> {
    match value.map(str::trim) {
        None | Some("") | Some("1") => Ok(true),
        Some("0") => Ok(false),
        Some(other) => Err(format!("ROCE_SHM={other}: use 1 or 0")),
    }
}

/// `ROCE_CPU`: the code choices for the CPU (the ICRC's CRC-32 code,
/// payload copies in pieces): `auto` (the default) probes it, as the
/// `roce` tool does (`roce_io::CpuTuning::detect`), `native` or
/// `emulated` choose. Under an emulated CPU (QEMU's TCG, the lab VM)
/// whole copies of a large payload go a byte at a time and the
/// carry-less multiply is slow: the library without the probe moved
/// `ib_write_bw -s 65536` at a fraction of rxe's rate there. Only speed
/// differs: every choice computes the same ICRCs.
pub fn cpu() -> Result<roce_io::CpuTuning, String> {
    use roce_io::CpuTuning;
    match std::env::var("ROCE_CPU").as_deref().map(str::trim) {
        Err(_) | Ok("") | Ok("auto") => Ok(CpuTuning::detect()),
        Ok("native") => Ok(CpuTuning::NATIVE),
        Ok("emulated") => Ok(CpuTuning::EMULATED),
        Ok(other) => Err(format!("ROCE_CPU={other}: use auto, native or emulated")),
    }
}

/// `ROCE_ACK_DELAY`: how long, in microseconds, an RC responder may
/// hold a positive ACK back for the application's answer to carry it
/// (the engine's ACK deferral, `roce_verbs::AckDelay`); `0` sends every
/// ACK at once. Unset: 200 µs. A held ACK leaves just before an answer
/// that completes a receive at the peer (`ack_first`), so the
/// requester's send completion comes before the receive completion its
/// request provoked, as with an HCA: programs that take both CQs' events
/// from one channel rely on that order (perftest's `ib_send_lat -e`); it
/// leaves just after an answer the peer sees only in memory. Holding the
/// ACK matters to programs that poll a CQ until a completion and then
/// spin on memory (`ib_write_lat`): with the ACK at once, the peer's
/// WRITE arrives after the poll that saw the ACK, and waits for the
/// progress thread. 200 µs rather than the engine's 25: a program that
/// shares its CPU with its progress thread (pinned with `taskset`, or on
/// a machine with fewer CPUs than busy threads) often answers later than
/// 25 µs, and each ACK that ran out its deadline cost that round trip a
/// scheduler time slice (docs/performance.md).
pub fn ack_delay() -> Result<roce_verbs::AckDelay, String> {
    let us = match std::env::var("ROCE_ACK_DELAY") {
        Err(_) => 200,
        Ok(s) => s
            .trim()
            .parse::<u64>()
            .map_err(|_| format!("ROCE_ACK_DELAY={s}: give microseconds (0 = ACK at once)"))?,
    };
    Ok(if us == 0 {
        roce_verbs::AckDelay::OFF
    } else {
        roce_verbs::AckDelay {
            max_delay: us.saturating_mul(1000),
            ack_first: true,
            ..roce_verbs::AckDelay::INTERACTIVE
        }
    })
}

/// `ROCE_LOG`: when set (to anything but `0`), the library says on
/// stderr which address each context took and why a verb failed.
pub fn log_enabled() -> bool {
    std::env::var("ROCE_LOG").is_ok_and(|v| v != "0")
}

/// `libibverbs (roce): MESSAGE` on stderr in one write: a line stays
/// whole where processes share one stderr (the ranks of an MPI job,
/// whose launcher tags their output by what each read returns).
pub fn say(message: std::fmt::Arguments) {
    use std::io::Write;
    let line = format!("libibverbs (roce): {message}\n");
    let _ = std::io::stderr().lock().write_all(line.as_bytes());
}

/// A line on stderr when `ROCE_LOG` is set.
#[macro_export]
macro_rules! log {
    ($($t:tt)*) => {
        if $crate::config::log_enabled() {
            $crate::config::say(format_args!($($t)*));
        }
    };
}
pub use crate::log;

/// A file name of a setting (`ROCE_PCAP`, `ROCE_STATS`, `ROCE_TRACE`):
/// `%p` becomes the process's ID.
pub fn file_name(v: &str) -> std::path::PathBuf {
    std::path::PathBuf::from(v.replace("%p", &std::process::id().to_string()))
}
