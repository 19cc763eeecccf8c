//! The rest of the exported API: rate conversions, fork ranges, AHs from
//! completions, sysfs reads, and the optional verbs this device does not
//! have (they fail as a provider without them fails: `EOPNOTSUPP`, or
//! NULL with `errno` set).

use std::os::raw::{c_char, c_int, c_void};

use crate::abi::*;
use crate::context::{addr_of, gid_of, Context};
use crate::ffi::{arg, arg_mut, errno_ret, minus_one, neg_errno, ptr_ret, Res};
use crate::ffi::{last_errno, value_or, void};

/// `enum ibv_rate` value, 2.5 Gb/s multiple, Mb/s: rdma-core's table.
const RATES: [(c_int, c_int, c_int); 23] = [
    (2, 1, 2500),
    (5, 2, 5000),
    (3, 4, 10000),
    (6, 8, 20000),
    (4, 12, 30000),
    (7, 16, 40000),
    (8, 24, 60000),
    (9, 32, 80000),
    (10, 48, 120000),
    (11, -1, 14062),
    (12, -1, 56250),
    (13, -1, 112500),
    (14, -1, 168750),
    (15, -1, 25781),
    (16, -1, 103125),
    (17, -1, 206250),
    (18, -1, 309375),
    (19, 11, 28125),
    (20, 20, 53125),
    (21, 160, 425000),
    (22, 240, 637500),
    (23, 320, 850000),
    (24, 480, 1275000),
];

export! {
    /// `ibv_rate_to_mult`.
    fn ibv_rate_to_mult(rate: c_int) -> c_int {
        value_or(-1, || RATES.iter().find(|r| r.0 == rate).map_or(-1, |r| r.1))
    }
}

export! {
    /// `mult_to_ibv_rate`.
    fn mult_to_ibv_rate(mult: c_int) -> c_int {
        value_or(0, || RATES.iter().find(|r| r.1 == mult && mult > 0).map_or(0, |r| r.0))
    }
}

export! {
    /// `ibv_rate_to_mbps`.
    fn ibv_rate_to_mbps(rate: c_int) -> c_int {
        value_or(-1, || RATES.iter().find(|r| r.0 == rate).map_or(-1, |r| r.2))
    }
}

export! {
    /// `mbps_to_ibv_rate`.
    fn mbps_to_ibv_rate(mbps: c_int) -> c_int {
        // Only the rates with a 2.5 Gb/s multiple or a table entry of
        // their own convert back, as rdma-core's.
        value_or(0, || match RATES.iter().find(|r| r.2 == mbps) {
            Some(r) if !(16..=18).contains(&r.0) => r.0,
            _ => 0,
        })
    }
}

export! {
    /// `ibv_dontfork_range`: no pinned pages to protect from fork here.
    fn ibv_dontfork_range(_base: *mut c_void, _size: usize) -> c_int {
        errno_ret(|| Ok(()))
    }
}

export! {
    /// `ibv_dofork_range`.
    fn ibv_dofork_range(_base: *mut c_void, _size: usize) -> c_int {
        errno_ret(|| Ok(()))
    }
}

/// The source and destination GIDs of the GRH a UD receive carries in
/// the first 40 bytes of its buffer: for IPv4 (RoCE v2) the IPv4 header
/// sits in its last 20 bytes.
fn grh_gids(grh: &[u8; 40]) -> (ibv_gid, ibv_gid) {
    if grh[20] >> 4 == 4 {
        let v4 = |at: usize| {
            let mut a = [0u8; 4];
            a.copy_from_slice(&grh[at..at + 4]);
            gid_of(std::net::IpAddr::from(a))
        };
        (v4(32), v4(36))
    } else {
        let v6 = |at: usize| {
            let mut g = ibv_gid::default();
            g.raw.copy_from_slice(&grh[at..at + 16]);
            g
        };
        (v6(8), v6(24))
    }
}

export! {
    /// `ibv_init_ah_from_wc`: the address of a UD completion's sender,
    /// read from the GRH at the start of its receive buffer.
    fn ibv_init_ah_from_wc(ctx: *mut ibv_context, port: u8, wc: *mut ibv_wc, grh: *mut c_void, ah: *mut ibv_ah_attr) -> c_int {
        minus_one(|| {
            // SAFETY: the program's pointers (a GRH is 40 bytes).
            let (c, wc, ah) = unsafe { (Context::from_ptr(ctx)?, arg(wc)?, arg_mut(ah)?) };
            // SAFETY: as above.
            let grh = unsafe { arg(grh.cast::<[u8; 40]>())? };
            if port != 1 || wc.wc_flags & 1 == 0 {
                return Err(libc::EINVAL);
            }
            *ah = ibv_ah_attr::default();
            ah.is_global = 1;
            ah.port_num = 1;
            let (source, dest) = grh_gids(grh);
            ah.grh.dgid = source;
            ah.grh.hop_limit = 0xff;
            // The reply leaves from the GID the datagram came to.
            let to = addr_of(&dest);
            ah.grh.sgid_index = c.gids.iter().position(|&a| a == to).unwrap_or(0) as u8;
            Ok(0)
        })
    }
}

export! {
    /// `ibv_create_ah_from_wc`.
    fn ibv_create_ah_from_wc(pd: *mut ibv_pd, wc: *mut ibv_wc, grh: *mut c_void, port: u8) -> *mut ibv_ah {
        ptr_ret(|| {
            let mut attr = ibv_ah_attr::default();
            // SAFETY: forwarded program pointers; the PD names its context.
            let ctx = unsafe { pd.as_ref() }.map_or(std::ptr::null_mut(), |p| p.context);
            // SAFETY: forwarded.
            if unsafe { ibv_init_ah_from_wc(ctx, port, wc, grh, &mut attr) } != 0 {
                return Err(last_errno());
            }
            // SAFETY: forwarded.
            let ah = unsafe { crate::pd::ibv_create_ah(pd, &mut attr) };
            if ah.is_null() {
                return Err(last_errno());
            }
            Ok(ah)
        })
    }
}

export! {
    /// `ibv_get_sysfs_path`: there is no RDMA sysfs tree for these
    /// devices; the path is where one would be.
    fn ibv_get_sysfs_path() -> *const c_char {
        value_or(c"/sys".as_ptr(), || c"/sys".as_ptr())
    }
}

export! {
    /// `ibv_read_sysfs_file`: nothing to read (`ENOENT`, -1).
    fn ibv_read_sysfs_file(_dir: *const c_char, _file: *const c_char, _buf: *mut c_char, _size: usize) -> c_int {
        minus_one(|| Err(libc::ENOENT))
    }
}

export! {
    /// `ibv_read_ibdev_sysfs_file`: as `ibv_read_sysfs_file`.
    fn ibv_read_ibdev_sysfs_file(_buf: *mut c_char, _size: usize, _dev: *mut c_void, _fmt: *const c_char) -> c_int {
        minus_one(|| Err(libc::ENOENT))
    }
}

/// How long `ibv_resolve_eth_l2_from_gid` waits for a neighbour to
/// answer (rdma-core's default neighbour timeout is of this order).
const NEIGH_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

/// The MAC of the next hop towards `dest` from the context's interface:
/// the interface's own MAC (all zero on loopback) for an address of this
/// host, else the kernel's neighbour entry, solicited if needed. The
/// same for both backends: UDP datagrams leave through the kernel,
/// which puts exactly that MAC on them.
fn l2_of(c: &Context, dest: std::net::IpAddr) -> Res<[u8; 6]> {
    let info = c.device.info.interface();
    let own = info.loopback && dest.to_canonical().is_loopback()
        || roce_verbs::Device::list().is_ok_and(|l| l.iter().any(|d| d.gids().contains(&dest)));
    if own {
        return Ok(info.mac.map(|m| m.0).unwrap_or_default());
    }
    if info.loopback {
        return Err(libc::EHOSTUNREACH);
    }
    match roce_io::neighbor(&info.name, info.index, dest, NEIGH_WAIT) {
        Ok(Some(m)) => Ok(m.0),
        Ok(None) => Err(libc::EHOSTUNREACH),
        Err(e) => Err(e.raw_os_error().unwrap_or(libc::EIO)),
    }
}

export! {
    /// `ibv_resolve_eth_l2_from_gid`: the destination MAC (and VLAN id:
    /// 0xffff, none) for an address vector, as rdma-core resolves it: 0,
    /// or a negative errno (`-EINVAL` for a bad address vector or source
    /// GID index, `-EHOSTUNREACH` for a neighbour that does not answer).
    /// Off-link destinations are not routed to their gateway: only a
    /// neighbour of the interface resolves.
    fn ibv_resolve_eth_l2_from_gid(ctx: *mut ibv_context, attr: *mut ibv_ah_attr, mac: *mut u8, vid: *mut u16) -> c_int {
        neg_errno(|| {
            // SAFETY: the program's pointers.
            let (c, a) = unsafe { (Context::from_ptr(ctx)?, arg(attr)?) };
            if mac.is_null() || a.port_num != 1 || a.grh.sgid_index as usize >= c.gids.len() {
                return Err(libc::EINVAL);
            }
            let src = c.gids[a.grh.sgid_index as usize];
            let dest = addr_of(&a.grh.dgid);
            if dest.is_ipv4() != src.is_ipv4() || dest.is_unspecified() {
                return Err(libc::EINVAL);
            }
            let m = l2_of(c, dest)?;
            // SAFETY: the program's 6-byte MAC buffer and its vid (NULL
            // allowed, as rdma-core allows it).
            unsafe {
                std::ptr::copy_nonoverlapping(m.as_ptr(), mac, 6);
                if let Some(v) = vid.as_mut() {
                    *v = 0xffff;
                }
            }
            Ok(())
        })
    }
}

export! {
    /// `ibv_attach_mcast`: no multicast on this device.
    fn ibv_attach_mcast(_qp: *mut ibv_qp, _gid: *const ibv_gid, _lid: u16) -> c_int {
        errno_ret(|| Err(libc::EOPNOTSUPP))
    }
}

export! {
    /// `ibv_detach_mcast`.
    fn ibv_detach_mcast(_qp: *mut ibv_qp, _gid: *const ibv_gid, _lid: u16) -> c_int {
        errno_ret(|| Err(libc::EOPNOTSUPP))
    }
}

export! {
    /// `ibv_query_ece`: no Enhanced Connection Establishment options.
    fn ibv_query_ece(_qp: *mut ibv_qp, _ece: *mut c_void) -> c_int {
        errno_ret(|| Err(libc::EOPNOTSUPP))
    }
}

export! {
    /// `ibv_set_ece`.
    fn ibv_set_ece(_qp: *mut ibv_qp, _ece: *mut c_void) -> c_int {
        errno_ret(|| Err(libc::EOPNOTSUPP))
    }
}

export! {
    /// `ibv_query_qp_data_in_order`: 0, no in-order guarantee announced
    /// (the engine places data in order, but programs may not rely on
    /// what a NIC would not promise).
    fn ibv_query_qp_data_in_order(_qp: *mut ibv_qp, _op: u32, _flags: u32) -> c_int {
        value_or(0, || 0)
    }
}

export! {
    /// `ibv_reg_dmabuf_mr`: no dma-buf here.
    fn ibv_reg_dmabuf_mr(_pd: *mut ibv_pd, _off: u64, _len: usize, _iova: u64, _fd: c_int, _access: c_int) -> *mut ibv_mr {
        ptr_ret(|| Err(libc::EOPNOTSUPP))
    }
}

export! {
    /// `ibv_import_device`: a context cannot be shared across processes.
    fn ibv_import_device(_fd: c_int) -> *mut ibv_context {
        ptr_ret(|| Err(libc::EOPNOTSUPP))
    }
}

export! {
    /// `ibv_import_pd`.
    fn ibv_import_pd(_ctx: *mut ibv_context, _handle: u32) -> *mut ibv_pd {
        ptr_ret(|| Err(libc::EOPNOTSUPP))
    }
}

export! {
    /// `ibv_import_mr`.
    fn ibv_import_mr(_pd: *mut ibv_pd, _handle: u32) -> *mut ibv_mr {
        ptr_ret(|| Err(libc::EOPNOTSUPP))
    }
}

export! {
    /// `ibv_import_dm`.
    fn ibv_import_dm(_ctx: *mut ibv_context, _handle: u32) -> *mut c_void {
        ptr_ret(|| Err(libc::EOPNOTSUPP))
    }
}

export! {
    /// `ibv_unimport_pd`.
    fn ibv_unimport_pd(_pd: *mut ibv_pd) {
        void(|| Ok(()))
    }
}

export! {
    /// `ibv_unimport_mr`.
    fn ibv_unimport_mr(_mr: *mut ibv_mr) {
        void(|| Ok(()))
    }
}

export! {
    /// `ibv_unimport_dm`.
    fn ibv_unimport_dm(_dm: *mut c_void) {
        void(|| Ok(()))
    }
}

export! {
    /// What every `stub` symbol of `symbols.txt` is an alias of:
    /// rdma-core's internals for provider libraries, never called (no
    /// provider device exists to call them for).
    fn unsupported() -> c_int {
        errno_ret(|| Err(libc::EOPNOTSUPP))
    }
}

export! {
    /// What an `enosys` symbol of `symbols.txt` is an alias of: a call
    /// exported but not implemented (none at present; the rsocket API
    /// used to be). Such a call returns an `int`, `ssize_t` or `off_t`:
    /// -1 in the full register is -1 for each.
    fn enosys() -> isize {
        minus_one(|| Err(libc::ENOSYS))
    }
}

/// `verbs_allow_disassociate_destroy`, the one data symbol providers read.
#[export_name = "roce_abi_verbs_allow_disassociate_destroy"]
static ALLOW_DISASSOCIATE_DESTROY: c_int = 0;
