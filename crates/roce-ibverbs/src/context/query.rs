//! The queries of a context: `ibv_query_device` (and `_ex`), the port
//! (`verbs_context.query_port`, behind `verbs.h`'s inline
//! `ibv_query_port`), GIDs (index 0 is the context's address, then the
//! device's others: `gid::gid_table`) and the one P_Key. The limits come
//! from the engine (`roce_verbs::LIMITS`); `docs/dropin.md` lists what
//! each answer holds.

use std::mem::offset_of;
use std::os::raw::c_int;

use super::gid::gid_of;
use super::Context;
use crate::abi::consts::*;
use crate::abi::*;
use crate::ffi::{arg_mut, count_or_neg, errno_ret, errno_set, minus_one, value_or};

pub(crate) use cabi::conv::mtu_enum;

fn device_attr(ctx: &Context) -> ibv_device_attr {
    let l = roce_verbs::LIMITS;
    let clamp = |v: u32| v.min(i32::MAX as u32) as c_int;
    // SAFETY: all-zero is a valid ibv_device_attr (integers and a char array).
    let mut a: ibv_device_attr = unsafe { std::mem::zeroed() };
    crate::ffi::copy_cstr(&mut a.fw_ver, env!("CARGO_PKG_VERSION"));
    a.node_guid = ctx.device.guid_be;
    a.sys_image_guid = ctx.device.guid_be;
    a.max_mr_size = l.max_mr_size;
    a.page_size_cap = 0xffff_f000;
    a.vendor_id = 0xffffff;
    a.vendor_part_id = 0;
    a.hw_ver = 0;
    a.max_qp = clamp(l.max_qp);
    a.max_qp_wr = clamp(l.max_qp_wr);
    // RC RNR NAK generation, SRQ resize, port active event, system image
    // GUID, current-state QP modify.
    a.device_cap_flags = (1 << 12) | (1 << 13) | (1 << 10) | (1 << 11) | (1 << 7);
    a.max_sge = clamp(l.max_sge);
    a.max_sge_rd = clamp(l.max_sge);
    a.max_cq = clamp(l.max_cq);
    a.max_cqe = clamp(l.max_cqe);
    a.max_mr = clamp(l.max_mr);
    a.max_pd = clamp(l.max_pd);
    a.max_qp_rd_atom = clamp(l.max_qp_rd_atom);
    a.max_res_rd_atom = clamp(l.max_qp_rd_atom.saturating_mul(l.max_qp.min(1 << 16)));
    a.max_qp_init_rd_atom = clamp(l.max_qp_init_rd_atom);
    a.atomic_cap = IBV_ATOMIC_HCA;
    a.max_ah = clamp(l.max_ah);
    a.max_srq = clamp(l.max_qp);
    a.max_srq_wr = clamp(l.max_srq_wr);
    a.max_srq_sge = clamp(l.max_srq_sge);
    a.max_pkeys = 1;
    a.local_ca_ack_delay = 15;
    a.phys_port_cnt = 1;
    a
}

export! {
    /// `ibv_query_device`.
    fn ibv_query_device(ctx: *mut ibv_context, out: *mut ibv_device_attr) -> c_int {
        errno_ret(|| {
            // SAFETY: the program's context and output pointers.
            let (c, out) = unsafe { (Context::from_ptr(ctx)?, arg_mut(out)?) };
            *out = device_attr(c);
            Ok(())
        })
    }
}

entry! {
    /// `verbs_context.query_device_ex`: as much of `ibv_device_attr_ex` as
    /// the program's structure holds (`attr_size`).
    fn query_device_ex(
        ctx: *mut ibv_context,
        input: *const ibv_query_device_ex_input,
        out: *mut ibv_device_attr_ex,
        attr_size: usize,
    ) -> c_int {
        errno_ret(|| {
            // SAFETY: the program's context.
            let c = unsafe { Context::from_ptr(ctx)? };
            // SAFETY: a NULL input is allowed; otherwise the program's.
            if let Some(i) = unsafe { input.as_ref() } {
                if i.comp_mask != 0 {
                    return Err(libc::EINVAL);
                }
            }
            if out.is_null() || attr_size < size_of::<ibv_device_attr>() {
                return Err(libc::EINVAL);
            }
            // SAFETY: all-zero is a valid ibv_device_attr_ex.
            let mut ex: ibv_device_attr_ex = unsafe { std::mem::zeroed() };
            ex.orig_attr = device_attr(c);
            // Completion timestamps are in nanoseconds of CLOCK_MONOTONIC.
            ex.completion_timestamp_mask = u64::MAX;
            ex.hca_core_clock = 1_000_000; // kHz
            ex.phys_port_cnt_ex = 1;
            let n = attr_size.min(size_of::<ibv_device_attr_ex>());
            // SAFETY: the program's buffer holds attr_size bytes; n is at most
            // that and at most the source's size.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    (&ex as *const ibv_device_attr_ex).cast::<u8>(),
                    out.cast::<u8>(),
                    n,
                )
            };
            Ok(())
        })
    }
}

fn port_attr(c: &Context) -> ibv_port_attr {
    ibv_port_attr {
        state: if c.device.info.interface().up {
            IBV_PORT_ACTIVE
        } else {
            IBV_PORT_DOWN
        },
        max_mtu: 5,
        active_mtu: mtu_enum(c.mtu),
        gid_tbl_len: c.gids.len() as c_int,
        // CM supported, IP-based GIDs.
        port_cap_flags: (1 << 16) | (1 << 26),
        max_msg_sz: roce_verbs::LIMITS.max_msg_sz,
        bad_pkey_cntr: 0,
        qkey_viol_cntr: 0,
        pkey_tbl_len: 1,
        lid: 0,
        sm_lid: 0,
        lmc: 0,
        max_vl_num: 1,
        sm_sl: 0,
        subnet_timeout: 0,
        init_type_reply: 0,
        active_width: 1,
        active_speed: 1,
        phys_state: if c.device.info.interface().running {
            5
        } else {
            3
        },
        link_layer: IBV_LINK_LAYER_ETHERNET,
        flags: 0,
        port_cap_flags2: 0,
    }
}

entry! {
    /// `verbs_context.query_port`, which `verbs.h`'s inline `ibv_query_port` calls.
    fn query_port_ex(
        ctx: *mut ibv_context,
        port: u8,
        out: *mut ibv_port_attr,
        len: usize,
    ) -> c_int {
        errno_ret(|| {
            // SAFETY: the program's context.
            let c = unsafe { Context::from_ptr(ctx)? };
            if port != 1 || out.is_null() {
                return Err(libc::EINVAL);
            }
            let a = port_attr(c);
            let n = len.min(size_of::<ibv_port_attr>());
            // SAFETY: the program's buffer holds `len` bytes.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    (&a as *const ibv_port_attr).cast::<u8>(),
                    out.cast::<u8>(),
                    n,
                )
            };
            Ok(())
        })
    }
}

export! {
    /// `ibv_query_port` (the exported compatibility entry; programs built
    /// against v44's header call `verbs_context.query_port` instead).
    fn ibv_query_port(ctx: *mut ibv_context, port: u8, out: *mut ibv_port_attr) -> c_int {
        // The compat structure is the current one up to `link_layer`.
        // SAFETY: forwarded pointers; the compat size is what such callers hold.
        value_or(libc::EIO, || unsafe { query_port_ex(ctx, port, out, offset_of!(ibv_port_attr, flags)) })
    }
}

export! {
    /// `ibv_query_gid`: index 0 is the context's address, then the
    /// device's others ([`gid_table`]).
    fn ibv_query_gid(ctx: *mut ibv_context, port: u8, index: c_int, gid: *mut ibv_gid) -> c_int {
        minus_one(|| {
            // SAFETY: the program's pointers.
            let (c, gid) = unsafe { (Context::from_ptr(ctx)?, arg_mut(gid)?) };
            let a = usize::try_from(index).ok().and_then(|i| c.gids.get(i));
            match a {
                Some(&a) if port == 1 => *gid = gid_of(a),
                _ => return Err(libc::EINVAL),
            }
            Ok(0)
        })
    }
}

export! {
    /// `ibv_query_pkey`: one P_Key, the default 0xffff.
    fn ibv_query_pkey(ctx: *mut ibv_context, port: u8, index: c_int, pkey: *mut u16) -> c_int {
        minus_one(|| {
            // SAFETY: the program's pointers.
            let (_c, pkey) = unsafe { (Context::from_ptr(ctx)?, arg_mut(pkey)?) };
            if port != 1 || index != 0 {
                return Err(libc::EINVAL);
            }
            *pkey = 0xffffu16.to_be();
            Ok(0)
        })
    }
}

export! {
    /// `ibv_get_pkey_index`: the index of a P_Key (network order).
    fn ibv_get_pkey_index(ctx: *mut ibv_context, port: u8, pkey: u16) -> c_int {
        minus_one(|| {
            // SAFETY: the program's context.
            unsafe { Context::from_ptr(ctx)? };
            if port == 1 && u16::from_be(pkey) & 0x7fff == 0x7fff { Ok(0) } else { Err(libc::ENOENT) }
        })
    }
}

fn gid_entry(c: &Context, index: u32) -> ibv_gid_entry {
    ibv_gid_entry {
        gid: gid_of(c.gids[index as usize]),
        gid_index: index,
        port_num: 1,
        gid_type: IBV_GID_TYPE_ROCE_V2,
        ndev_ifindex: c.device.info.interface().index,
    }
}

export! {
    /// `_ibv_query_gid_ex` (behind `verbs.h`'s inline `ibv_query_gid_ex`).
    fn _ibv_query_gid_ex(ctx: *mut ibv_context, port: u32, index: u32, entry: *mut ibv_gid_entry, flags: u32, entry_size: usize) -> c_int {
        // errno too, as the failed ioctl behind rdma-core's leaves it.
        errno_set(|| {
            // SAFETY: the program's pointers.
            let (c, entry) = unsafe { (Context::from_ptr(ctx)?, arg_mut(entry)?) };
            if flags != 0 || entry_size < size_of::<ibv_gid_entry>() {
                return Err(libc::EINVAL);
            }
            // As the kernel's QUERY_GID_ENTRY: a port the device does not
            // have is EINVAL, an index beyond the table ENODATA.
            if port != 1 {
                return Err(libc::EINVAL);
            }
            if index as usize >= c.gids.len() {
                return Err(libc::ENODATA);
            }
            *entry = gid_entry(c, index);
            Ok(())
        })
    }
}

export! {
    /// `_ibv_query_gid_table` (behind the inline `ibv_query_gid_table`):
    /// the number of entries, or a negative errno as rdma-core returns
    /// it (`-EINVAL` for no room, as the kernel's QUERY_GID_TABLE).
    fn _ibv_query_gid_table(ctx: *mut ibv_context, entries: *mut ibv_gid_entry, max: usize, flags: u32, entry_size: usize) -> isize {
        // errno too, as the failed ioctl behind rdma-core's leaves it.
        count_or_neg(|| {
            // SAFETY: the program's context.
            let c = unsafe { Context::from_ptr(ctx)? };
            if flags != 0 || entry_size < size_of::<ibv_gid_entry>() || entries.is_null() {
                return Err(libc::EINVAL);
            }
            let n = c.gids.len();
            if max < n {
                return Err(libc::EINVAL);
            }
            for i in 0..n {
                // SAFETY: the program's array holds `max` >= n entries
                // of `entry_size` bytes, which holds an ibv_gid_entry.
                unsafe { *entries.byte_add(i * entry_size) = gid_entry(c, i as u32) };
            }
            Ok(n)
        })
    }
}

export! {
    /// `ibv_query_gid_type`: every GID is RoCE v2 — in this private
    /// call's own numbering (`enum ibv_gid_type_sysfs`, where RoCE v2 is
    /// 1), not `enum ibv_gid_type`'s.
    fn ibv_query_gid_type(ctx: *mut ibv_context, port: u8, index: u32, ty: *mut u32) -> c_int {
        minus_one(|| {
            // SAFETY: the program's pointers.
            let (c, ty) = unsafe { (Context::from_ptr(ctx)?, arg_mut(ty)?) };
            if port != 1 || index as usize >= c.gids.len() {
                return Err(libc::EINVAL);
            }
            *ty = IBV_GID_TYPE_SYSFS_ROCE_V2;
            Ok(0)
        })
    }
}

/// Installs the query entries of a context's ops tables.
pub(crate) fn install(v: &mut verbs_context) {
    v.query_port = Some(query_port_ex);
    v.query_device_ex = Some(query_device_ex);
}
