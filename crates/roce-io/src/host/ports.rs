//! rdma_cm's port spaces, host-wide (docs/host.md, "Port spaces"): which
//! ids of which processes hold which port of a space (TCP, UDP, IB,
//! IPoIB) on which address, under the kernel's rules (Linux
//! `drivers/infiniband/core/cma.c`: `cma_use_port`, `cma_check_port`,
//! `cma_alloc_any_port`, `rdma_listen`):
//!
//! * a port below 1024 needs `CAP_NET_BIND_SERVICE` (`EACCES`);
//! * an id may share a port with another only when both set
//!   `RDMA_OPTION_ID_REUSEADDR`; otherwise two ids on the same address
//!   conflict with `EADDRINUSE`, and an id on the wildcard address
//!   conflicts with any other on the port with `EADDRNOTAVAIL` (two ids
//!   that set `RDMA_OPTION_ID_AFONLY` on different families never do);
//! * `rdma_listen` makes the id unique on its port (checked as a bind
//!   without reuse) and no longer reusable;
//! * port 0 takes a free port of the local range, starting at a random
//!   one.
//!
//! [`check_port`] is the rule alone, over any list of holders:
//! `roce-ibverbs`' process-local `cm/ports.rs` applies it today, and is
//! to keep its holds in this table once the table is wired in.
//!
//! A record is [`PORT_WORDS`] words, read and written under the update
//! lock only; a record that is not well-formed counts as free.

use std::net::{IpAddr, Ipv6Addr};
use std::sync::atomic::{AtomicU64, Ordering};

use super::layout::{PORTS_AT, PORT_RECORDS, PORT_WORDS, SLOTS};

/// The local port range the kernel picks from by default
/// (`net.ipv4.ip_local_port_range`).
pub const EPHEMERAL: std::ops::RangeInclusive<u16> = 32768..=60999;

/// Why a port cannot be had.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PortError {
    /// Another id holds the address and port (`EADDRINUSE`).
    AddrInUse,
    /// The wildcard address meets another holder of the port, or no
    /// ephemeral port is free (`EADDRNOTAVAIL`).
    AddrNotAvail,
    /// A port below 1024 without `CAP_NET_BIND_SERVICE` (`EACCES`).
    Access,
}

impl PortError {
    /// The errno librdmacm returns for it.
    pub fn errno(self) -> i32 {
        match self {
            PortError::AddrInUse => libc::EADDRINUSE,
            PortError::AddrNotAvail => libc::EADDRNOTAVAIL,
            PortError::Access => libc::EACCES,
        }
    }
}

/// One id's hold on a port.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PortHolder {
    /// The process's slot.
    pub slot: u16,
    /// The id within the process (any number unique there).
    pub id: u64,
    /// The address bound.
    pub addr: IpAddr,
    /// `RDMA_OPTION_ID_REUSEADDR` (cleared by a listen).
    pub reuse: bool,
    /// `RDMA_OPTION_ID_AFONLY`.
    pub afonly: bool,
}

/// `cma_check_port`: whether `h` may hold a port beside `holders` (the
/// port's current holders), `reuse` standing for its own reuse flag
/// (`false` for a listen).
pub fn check_port<'a>(
    holders: impl IntoIterator<Item = &'a PortHolder>,
    h: &PortHolder,
    reuse: bool,
) -> Result<(), PortError> {
    for cur in holders {
        if (cur.slot == h.slot && cur.id == h.id) || (reuse && cur.reuse) {
            continue;
        }
        if h.afonly && cur.afonly && h.addr.is_ipv4() != cur.addr.is_ipv4() {
            continue;
        }
        if h.addr.is_unspecified() || cur.addr.is_unspecified() {
            return Err(PortError::AddrNotAvail);
        }
        if h.addr.to_canonical() == cur.addr.to_canonical() {
            return Err(PortError::AddrInUse);
        }
    }
    Ok(())
}

/// `cma_alloc_any_port`: a port of [`EPHEMERAL`] that `held` says is
/// free, from the one `seed` picks on.
pub fn free_port(held: impl Fn(u16) -> bool, seed: u64) -> Option<u16> {
    let (low, n) = (*EPHEMERAL.start(), EPHEMERAL.len() as u64);
    (0..n)
        .map(|k| low + ((seed.wrapping_add(k)) % n) as u16)
        .find(|&p| !held(p))
}

/// Whether this process may bind a port below 1024
/// (`CAP_NET_BIND_SERVICE` in its effective set).
pub fn may_bind_low() -> bool {
    const CAP_NET_BIND_SERVICE: u32 = 10;
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            let hex = s
                .lines()
                .find_map(|l| l.strip_prefix("CapEff:"))?
                .trim()
                .to_string();
            u64::from_str_radix(&hex, 16).ok()
        })
        .is_some_and(|caps| caps & (1 << CAP_NET_BIND_SERVICE) != 0)
}

const USED: u64 = 1 << 63;
const REUSE: u64 = 1 << 16;
const AFONLY: u64 = 1 << 17;
const LISTENING: u64 = 1 << 18;

/// A port-space record of the table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Record {
    pub(super) space: u32,
    pub(super) port: u16,
    pub(super) holder: PortHolder,
    pub(super) listening: bool,
}

fn words_of(words: &[AtomicU64], pos: usize) -> Option<&[AtomicU64]> {
    if pos >= PORT_RECORDS {
        return None;
    }
    words.get(PORTS_AT + pos * PORT_WORDS..PORTS_AT + (pos + 1) * PORT_WORDS)
}

/// Record `pos`, if used and well-formed.
pub(super) fn read(words: &[AtomicU64], pos: usize) -> Option<Record> {
    let r = words_of(words, pos)?;
    let w0 = r[0].load(Ordering::Acquire);
    if w0 & USED == 0 {
        return None;
    }
    let slot = (w0 >> 32) as u16;
    if usize::from(slot) >= SLOTS {
        return None;
    }
    let w1 = r[1].load(Ordering::Relaxed);
    let mut a = [0u8; 16];
    a[..8].copy_from_slice(&r[2].load(Ordering::Relaxed).to_be_bytes());
    a[8..].copy_from_slice(&r[3].load(Ordering::Relaxed).to_be_bytes());
    let v6 = Ipv6Addr::from(a);
    let addr = match (w0 >> 24) & 0xff {
        4 => IpAddr::V4(v6.to_ipv4_mapped()?),
        6 => IpAddr::V6(v6),
        _ => return None,
    };
    Some(Record {
        space: (w1 >> 16) as u32,
        port: w1 as u16,
        holder: PortHolder {
            slot,
            id: r[4].load(Ordering::Relaxed),
            addr,
            reuse: w0 & REUSE != 0,
            afonly: w0 & AFONLY != 0,
        },
        listening: w0 & LISTENING != 0,
    })
}

/// Writes record `pos` (the update lock held); the used bit last.
pub(super) fn write(words: &[AtomicU64], pos: usize, rec: &Record) {
    let Some(r) = words_of(words, pos) else {
        return;
    };
    r[0].store(0, Ordering::Release);
    let (fam, a) = match rec.holder.addr {
        IpAddr::V4(v4) => (4u64, v4.to_ipv6_mapped().octets()),
        IpAddr::V6(v6) => (6u64, v6.octets()),
    };
    let half = |s: &[u8]| u64::from_be_bytes(s.try_into().unwrap_or([0; 8]));
    r[1].store(
        u64::from(rec.space) << 16 | u64::from(rec.port),
        Ordering::Relaxed,
    );
    r[2].store(half(&a[..8]), Ordering::Relaxed);
    r[3].store(half(&a[8..]), Ordering::Relaxed);
    r[4].store(rec.holder.id, Ordering::Relaxed);
    let mut w0 = USED | u64::from(rec.holder.slot) << 32 | fam << 24;
    if rec.holder.reuse {
        w0 |= REUSE;
    }
    if rec.holder.afonly {
        w0 |= AFONLY;
    }
    if rec.listening {
        w0 |= LISTENING;
    }
    r[0].store(w0, Ordering::Release);
}

/// Frees record `pos` (the update lock held).
pub(super) fn clear(words: &[AtomicU64], pos: usize) {
    if let Some(r) = words_of(words, pos) {
        r[0].store(0, Ordering::Release);
    }
}

/// The used, well-formed records and their positions.
pub(super) fn all(words: &[AtomicU64]) -> impl Iterator<Item = (usize, Record)> + '_ {
    (0..PORT_RECORDS).filter_map(move |p| read(words, p).map(|r| (p, r)))
}

/// A record no one uses (or one not well-formed).
pub(super) fn free_pos(words: &[AtomicU64]) -> Option<usize> {
    (0..PORT_RECORDS).find(|&p| read(words, p).is_none())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn holder(slot: u16, id: u64, addr: &str, reuse: bool, afonly: bool) -> PortHolder {
        PortHolder {
            slot,
            id,
            addr: ip(addr),
            reuse,
            afonly,
        }
    }

    /// A port's holders, bound one by one as `Ports::bind` in the drop-in
    /// does it.
    fn bind(held: &mut Vec<PortHolder>, h: PortHolder) -> Result<(), PortError> {
        check_port(held.iter(), &h, h.reuse)?;
        held.push(h);
        Ok(())
    }

    #[test]
    fn one_address_is_one_ids_without_reuse_across_processes() {
        let mut p = Vec::new();
        assert_eq!(
            bind(&mut p, holder(0, 1, "127.0.0.1", false, false)),
            Ok(())
        );
        // Same id number, another process: still another id.
        assert_eq!(
            bind(&mut p, holder(1, 1, "127.0.0.1", false, false)),
            Err(PortError::AddrInUse)
        );
        assert_eq!(
            bind(&mut p, holder(1, 2, "::ffff:127.0.0.1", false, false)),
            Err(PortError::AddrInUse),
            "a v4-mapped address is the same address"
        );
        assert_eq!(
            bind(&mut p, holder(1, 3, "127.0.0.2", false, false)),
            Ok(())
        );
        assert_eq!(
            bind(&mut p, holder(2, 4, "0.0.0.0", false, false)),
            Err(PortError::AddrNotAvail)
        );
        p.clear();
        assert_eq!(bind(&mut p, holder(2, 4, "0.0.0.0", false, false)), Ok(()));
    }

    #[test]
    fn reuse_shares_until_a_listen_and_afonly_families_do_not_meet() {
        let mut p = Vec::new();
        assert_eq!(bind(&mut p, holder(0, 1, "127.0.0.1", true, false)), Ok(()));
        assert_eq!(bind(&mut p, holder(1, 2, "127.0.0.1", true, false)), Ok(()));
        assert_eq!(
            bind(&mut p, holder(2, 3, "127.0.0.1", false, false)),
            Err(PortError::AddrInUse),
            "both must ask for reuse"
        );
        // A listen is checked as a bind without reuse.
        assert_eq!(
            check_port(p.iter(), &p[0], false),
            Err(PortError::AddrInUse)
        );
        p.remove(1);
        assert_eq!(check_port(p.iter(), &p[0], false), Ok(()));
        p[0].reuse = false;
        assert_eq!(
            bind(&mut p, holder(3, 4, "127.0.0.1", true, false)),
            Err(PortError::AddrInUse),
            "a listener is no longer reusable"
        );
        let mut q = Vec::new();
        assert_eq!(bind(&mut q, holder(0, 1, "0.0.0.0", false, true)), Ok(()));
        assert_eq!(bind(&mut q, holder(1, 1, "::", false, true)), Ok(()));
        assert_eq!(
            bind(&mut q, holder(2, 1, "::", false, false)),
            Err(PortError::AddrNotAvail)
        );
    }

    #[test]
    fn free_port_skips_held_ports_and_wraps() {
        let top = *EPHEMERAL.end();
        let seed = u64::from(top - EPHEMERAL.start());
        assert_eq!(free_port(|_| false, seed), Some(top));
        assert_eq!(free_port(|p| p == top, seed), Some(*EPHEMERAL.start()));
        assert_eq!(free_port(|_| true, seed), None);
        assert_eq!(PortError::AddrInUse.errno(), libc::EADDRINUSE);
    }

    #[test]
    fn records_read_back_and_garbage_is_free() {
        let w: Vec<AtomicU64> = (0..PORTS_AT + PORT_RECORDS * PORT_WORDS)
            .map(|_| AtomicU64::new(0))
            .collect();
        let rec = Record {
            space: 0x0106,
            port: 7471,
            holder: holder(9, 42, "10.1.2.3", true, true),
            listening: false,
        };
        write(&w, 17, &rec);
        let rec6 = Record {
            holder: holder(8, 1, "fe80::1", false, false),
            listening: true,
            ..rec
        };
        write(&w, 18, &rec6);
        assert_eq!(read(&w, 17), Some(rec));
        assert_eq!(read(&w, 18), Some(rec6));
        assert_eq!(all(&w).count(), 2);
        assert_eq!(free_pos(&w), Some(0));
        clear(&w, 17);
        assert_eq!(read(&w, 17), None);
        // A family byte of 5, a slot of 300: not a record.
        let at = PORTS_AT + 18 * PORT_WORDS;
        w[at].store(USED | 8 << 32 | 5 << 24, Ordering::Relaxed);
        assert_eq!(read(&w, 18), None);
        w[at].store(USED | 300 << 32 | 6 << 24, Ordering::Relaxed);
        assert_eq!(read(&w, 18), None);
        assert_eq!(read(&w, PORT_RECORDS), None);
    }
}
