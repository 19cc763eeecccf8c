//! rdma_cm's port spaces: which ids hold which port of a space (TCP, UDP,
//! IB, IPoIB) on which address, under the kernel's rules (Linux
//! `drivers/infiniband/core/cma.c`, `cma_use_port`, `cma_check_port`,
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
//! As in the kernel, the port spaces are the host's: every process of
//! this user keeps its holds in one host table (docs/host.md, "Port
//! spaces"), the one of the unspecified address and the RoCE UDP port
//! (`ROCE_PORT`), whatever address an id binds (the wildcard meets
//! every address). A process that cannot attach it (no writable
//! `/dev/shm` nor `$XDG_RUNTIME_DIR`, or a table of another user there)
//! keeps its holds to itself ([`Ports`]), and says so once.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;

use roce_io::host::{check_port, free_port, may_bind_low, HostError, HostTable, PortHolder};

use crate::config::{self, log};
use crate::ffi::Res;

/// The ids on each (port space, port). A holder's `id` is the id's
/// address; `slot` is always 0 (one process).
#[derive(Default)]
pub(crate) struct Ports {
    held: HashMap<(u32, u16), Vec<PortHolder>>,
}

impl Ports {
    /// `cma_check_port` (roce-io's rule) against the holders of `key`.
    fn check(&self, key: (u32, u16), h: &PortHolder, reuse: bool) -> Res<()> {
        check_port(self.held.get(&key).into_iter().flatten(), h, reuse).map_err(|e| e.errno())
    }

    /// Binds `h` (its id, address and options) in space `ps` to `port`
    /// (0: a free one); the port it got.
    pub(crate) fn bind(&mut self, ps: u32, port: u16, h: PortHolder) -> Res<u16> {
        let reuse = h.reuse;
        let port = if port == 0 {
            let seed = roce_verbs::random_u64().unwrap_or(0);
            free_port(|p| self.held.contains_key(&(ps, p)), seed).ok_or(libc::EADDRNOTAVAIL)?
        } else {
            if port < 1024 && !may_bind_low() {
                return Err(libc::EACCES);
            }
            self.check((ps, port), &h, reuse)?;
            port
        };
        self.held.entry((ps, port)).or_default().push(h);
        Ok(port)
    }

    /// `rdma_listen` of a bound id: it must be unique on its port, and is
    /// not reusable from then on.
    pub(crate) fn listen(&mut self, id: usize, ps: u32, port: u16) -> Res<()> {
        let key = (ps, port);
        let id = id as u64;
        let Some(me) = self
            .held
            .get(&key)
            .and_then(|v| v.iter().find(|h| h.id == id))
            .copied()
        else {
            return Ok(());
        };
        if me.reuse {
            self.check(key, &me, false)?;
        }
        if let Some(h) = self
            .held
            .get_mut(&key)
            .and_then(|v| v.iter_mut().find(|h| h.id == id))
        {
            h.reuse = false;
        }
        Ok(())
    }

    /// The id is gone: its ports are free.
    pub(crate) fn release(&mut self, id: usize) {
        self.held.retain(|_, v| {
            v.retain(|h| h.id != id as u64);
            !v.is_empty()
        });
    }
}

/// The port spaces this process uses: the host's, or its own.
enum Spaces {
    Host(HostTable),
    Local(Ports),
}

/// The errno of a host table's refusal.
fn errno(e: &HostError) -> i32 {
    match e {
        HostError::Port(p) => p.errno(),
        HostError::Full | HostError::NoSlot => libc::EADDRNOTAVAIL,
        HostError::Busy => libc::EBUSY,
        _ => libc::EIO,
    }
}

impl Spaces {
    /// The host's port spaces, or this process's when the host table
    /// cannot be had.
    fn open() -> Spaces {
        let port = config::port().unwrap_or(config::ROCE_V2_PORT);
        let any = IpAddr::from([0u8; 4]);
        let name = format!("rdma_cm port spaces, pid {}", std::process::id());
        match HostTable::attach(any, port, name.as_bytes()) {
            Ok(t) => Spaces::Host(t),
            Err(e) => {
                log!("rdma_cm ports are this process's only: {e}");
                Spaces::Local(Ports::default())
            }
        }
    }

    /// Runs `f` on the host table, attached again when it was the parent
    /// process's (a fork keeps the parent's attachment, which refuses
    /// updates).
    fn host<T>(&mut self, f: impl Fn(&HostTable) -> Result<T, HostError>) -> Option<Res<T>> {
        let Spaces::Host(t) = self else { return None };
        let r = match f(t) {
            Err(HostError::Forked) => {
                *self = Spaces::open();
                return self.host(f);
            }
            r => r,
        };
        Some(r.map_err(|e| errno(&e)))
    }

    fn bind(
        &mut self,
        id: usize,
        ps: u32,
        addr: IpAddr,
        port: u16,
        reuse: bool,
        afonly: bool,
    ) -> Res<u16> {
        let hold = PortHolder {
            slot: 0,
            id: id as u64,
            addr,
            reuse,
            afonly,
        };
        if let Some(r) = self.host(|t| t.bind_port(ps, port, hold)) {
            return r;
        }
        match self {
            Spaces::Local(p) => p.bind(ps, port, hold),
            Spaces::Host(_) => Err(libc::EIO),
        }
    }

    fn listen(&mut self, id: usize, ps: u32, port: u16) -> Res<()> {
        // An id the table does not know (bound before a fork) has nothing
        // to check, as in the process's own table.
        let r = self.host(|t| match t.listen_port(ps, port, id as u64) {
            Err(HostError::NotHeld) => Ok(()),
            r => r,
        });
        match (r, self) {
            (Some(r), _) => r,
            (None, Spaces::Local(p)) => p.listen(id, ps, port),
            (None, Spaces::Host(_)) => Ok(()),
        }
    }

    fn release(&mut self, id: usize) {
        if self.host(|t| t.release_ports(id as u64)).is_none() {
            if let Spaces::Local(p) = self {
                p.release(id);
            }
        }
    }
}

/// The process's port spaces, opened at first use.
static SPACES: Mutex<Option<Spaces>> = Mutex::new(None);

fn with<T>(f: impl FnOnce(&mut Spaces) -> T) -> T {
    let mut g = SPACES.lock().unwrap_or_else(|p| p.into_inner());
    f(g.get_or_insert_with(Spaces::open))
}

/// `rdma_bind_addr` of id `id` in space `ps` to `addr`:`port` (0: a
/// free one), host-wide; the port it got.
pub(crate) fn bind(
    id: usize,
    ps: u32,
    addr: IpAddr,
    port: u16,
    reuse: bool,
    afonly: bool,
) -> Res<u16> {
    with(|s| s.bind(id, ps, addr, port, reuse, afonly))
}

/// `rdma_listen` of id `id` bound to `port` of `ps`: unique on its port
/// from now on.
pub(crate) fn listen(id: usize, ps: u32, port: u16) -> Res<()> {
    with(|s| s.listen(id, ps, port))
}

/// The id is gone: its ports are free.
pub(crate) fn release(id: usize) {
    with(|s| s.release(id));
}

#[cfg(test)]
mod tests {
    use super::*;
    use roce_io::host::EPHEMERAL;

    const TCP: u32 = 0x0106;
    const UDP: u32 = 0x0111;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn bind(
        p: &mut Ports,
        id: u64,
        ps: u32,
        addr: IpAddr,
        port: u16,
        reuse: bool,
        afonly: bool,
    ) -> Res<u16> {
        let h = PortHolder {
            slot: 0,
            id,
            addr,
            reuse,
            afonly,
        };
        p.bind(ps, port, h)
    }

    #[test]
    fn one_address_and_port_is_one_ids_without_reuse() {
        let mut p = Ports::default();
        assert_eq!(
            bind(&mut p, 1, TCP, ip("127.0.0.1"), 7471, false, false),
            Ok(7471)
        );
        assert_eq!(
            bind(&mut p, 2, TCP, ip("127.0.0.1"), 7471, false, false),
            Err(libc::EADDRINUSE)
        );
        // Another address, another space, another port: free.
        assert_eq!(
            bind(&mut p, 3, TCP, ip("127.0.0.2"), 7471, false, false),
            Ok(7471)
        );
        assert_eq!(
            bind(&mut p, 4, UDP, ip("127.0.0.1"), 7471, false, false),
            Ok(7471)
        );
        assert_eq!(
            bind(&mut p, 5, TCP, ip("127.0.0.1"), 7472, false, false),
            Ok(7472)
        );
        // The wildcard conflicts with any holder of the port.
        assert_eq!(
            bind(&mut p, 6, TCP, ip("0.0.0.0"), 7471, false, false),
            Err(libc::EADDRNOTAVAIL)
        );
        p.release(1);
        p.release(3);
        assert_eq!(
            bind(&mut p, 6, TCP, ip("0.0.0.0"), 7471, false, false),
            Ok(7471)
        );
    }

    #[test]
    fn reuse_shares_a_port_until_one_listens() {
        let mut p = Ports::default();
        assert_eq!(
            bind(&mut p, 1, TCP, ip("127.0.0.1"), 9000, true, false),
            Ok(9000)
        );
        assert_eq!(
            bind(&mut p, 2, TCP, ip("127.0.0.1"), 9000, true, false),
            Ok(9000)
        );
        // Only one side asking for reuse is not enough.
        assert_eq!(
            bind(&mut p, 3, TCP, ip("127.0.0.1"), 9000, false, false),
            Err(libc::EADDRINUSE)
        );
        // A listen must be unique: 1 cannot while 2 holds the port.
        assert_eq!(p.listen(1, TCP, 9000), Err(libc::EADDRINUSE));
        p.release(2);
        assert_eq!(p.listen(1, TCP, 9000), Ok(()));
        // A listener is no longer reusable.
        assert_eq!(
            bind(&mut p, 4, TCP, ip("127.0.0.1"), 9000, true, false),
            Err(libc::EADDRINUSE)
        );
    }

    #[test]
    fn afonly_ids_of_two_families_do_not_meet() {
        let mut p = Ports::default();
        assert_eq!(
            bind(&mut p, 1, TCP, ip("0.0.0.0"), 5000, false, true),
            Ok(5000)
        );
        assert_eq!(bind(&mut p, 2, TCP, ip("::"), 5000, false, true), Ok(5000));
        assert_eq!(
            bind(&mut p, 3, TCP, ip("::"), 5000, false, false),
            Err(libc::EADDRNOTAVAIL)
        );
    }

    #[test]
    fn port_zero_takes_a_free_port_of_the_range() {
        let mut p = Ports::default();
        let a = bind(&mut p, 1, TCP, ip("127.0.0.1"), 0, false, false).unwrap();
        assert!(EPHEMERAL.contains(&a));
        // The rule's picks (roce-io's `free_port`, tested there) skip the
        // ports this table holds.
        let seed = u64::from(a - EPHEMERAL.start());
        let held = |ps: u32, q: u16| p.held.contains_key(&(ps, q));
        let next = if a == *EPHEMERAL.end() {
            *EPHEMERAL.start()
        } else {
            a + 1
        };
        assert_eq!(free_port(|q| held(TCP, q), seed), Some(next));
        assert_eq!(free_port(|q| held(UDP, q), seed), Some(a));
    }
}
