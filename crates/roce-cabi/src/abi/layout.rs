//! The layout table: for every C type of [`super`], its size and
//! alignment and the offset and size of each field, as Rust computes
//! them. `tests/layout.rs` prints the same from the real header with a C
//! compiler and compares, so a field out of place fails the build's
//! tests, not a program at run time.

use std::mem::{align_of, offset_of, size_of, MaybeUninit};

use super::*;

/// One C type.
#[derive(Debug)]
pub struct Type {
    /// As C names it (`struct ibv_qp`, `union ibv_gid`).
    pub c_name: &'static str,
    /// `sizeof`.
    pub size: usize,
    /// `_Alignof`.
    pub align: usize,
    /// Its fields.
    pub fields: &'static [Field],
}

/// One field (a member path as C's `offsetof` takes it).
#[derive(Debug)]
pub struct Field {
    /// The member designator (`qp_num`, `wr.rdma.rkey`).
    pub path: &'static str,
    /// `offsetof`.
    pub offset: usize,
    /// `sizeof` of the member.
    pub size: usize,
}

const fn pointee_size<T>(_: *const T) -> usize {
    size_of::<T>()
}

/// `size_of` of a field, without a value of the type.
macro_rules! field_size {
    ($ty:ty, $($f:tt).+) => {{
        let u = MaybeUninit::<$ty>::uninit();
        // SAFETY: only the address of the field is taken (`&raw const`
        // of a place inside the uninitialised value); nothing is read.
        pointee_size(unsafe { &raw const (*u.as_ptr()).$($f).+ })
    }};
}

macro_rules! ty {
    ($c:literal, $ty:ty { $($f:ident),* $(,)? } $(, extra: [$($e:expr),* $(,)?])?) => {
        Type {
            c_name: $c,
            size: size_of::<$ty>(),
            align: align_of::<$ty>(),
            fields: &[
                $(Field { path: stringify!($f), offset: offset_of!($ty, $f), size: field_size!($ty, $f) },)*
                $($($e,)*)?
            ],
        }
    };
}

/// A field reached through a union or a nested struct: its C path, and
/// the Rust offset as the sum of the steps.
macro_rules! nested {
    ($path:literal, $ty:ty, $outer:ident, $inner_ty:ty, $($inner:ident).+) => {
        Field {
            path: $path,
            offset: offset_of!($ty, $outer) + offset_of!($inner_ty, $($inner).+),
            size: field_size!($inner_ty, $($inner).+),
        }
    };
}

/// Every C type this library shares with programs.
pub const TYPES: &[Type] = &[
    ty!("union ibv_gid", ibv_gid { raw }),
    ty!(
        "struct _ibv_device_ops",
        _ibv_device_ops { _dummy1, _dummy2 }
    ),
    ty!(
        "struct ibv_device",
        ibv_device {
            _ops,
            node_type,
            transport_type,
            name,
            dev_name,
            dev_path,
            ibdev_path
        }
    ),
    ty!(
        "struct ibv_context_ops",
        ibv_context_ops {
            _compat_query_device,
            _compat_query_port,
            _compat_alloc_pd,
            _compat_dealloc_pd,
            _compat_reg_mr,
            _compat_rereg_mr,
            _compat_dereg_mr,
            alloc_mw,
            bind_mw,
            dealloc_mw,
            _compat_create_cq,
            poll_cq,
            req_notify_cq,
            _compat_cq_event,
            _compat_resize_cq,
            _compat_destroy_cq,
            _compat_create_srq,
            _compat_modify_srq,
            _compat_query_srq,
            _compat_destroy_srq,
            post_srq_recv,
            _compat_create_qp,
            _compat_query_qp,
            _compat_modify_qp,
            _compat_destroy_qp,
            post_send,
            post_recv,
            _compat_create_ah,
            _compat_destroy_ah,
            _compat_attach_mcast,
            _compat_detach_mcast,
            _compat_async_event,
        }
    ),
    ty!(
        "struct ibv_context",
        ibv_context {
            device,
            ops,
            cmd_fd,
            async_fd,
            num_comp_vectors,
            mutex,
            abi_compat
        }
    ),
    ty!("struct verbs_context", verbs_context {
        query_port, advise_mr, alloc_null_mr, read_counters, attach_counters_point_flow,
        create_counters, destroy_counters, reg_dm_mr, alloc_dm, free_dm,
        modify_flow_action_esp, destroy_flow_action, create_flow_action_esp,
        modify_qp_rate_limit, alloc_parent_domain, dealloc_td, alloc_td, modify_cq,
        post_srq_ops, destroy_rwq_ind_table, create_rwq_ind_table, destroy_wq, modify_wq,
        create_wq, query_rt_values, create_cq_ex, query_device_ex, ibv_destroy_flow,
        ABI_placeholder2, ibv_create_flow, ABI_placeholder1, open_qp, create_qp_ex,
        get_srq_num, create_srq_ex, open_xrcd, close_xrcd, _ABI_placeholder3, sz, context,
    }, extra: [Field { path: "priv", offset: offset_of!(verbs_context, priv_), size: 8 }]),
    ty!(
        "struct ibv_device_attr",
        ibv_device_attr {
            fw_ver,
            node_guid,
            sys_image_guid,
            max_mr_size,
            page_size_cap,
            vendor_id,
            vendor_part_id,
            hw_ver,
            max_qp,
            max_qp_wr,
            device_cap_flags,
            max_sge,
            max_sge_rd,
            max_cq,
            max_cqe,
            max_mr,
            max_pd,
            max_qp_rd_atom,
            max_ee_rd_atom,
            max_res_rd_atom,
            max_qp_init_rd_atom,
            max_ee_init_rd_atom,
            atomic_cap,
            max_ee,
            max_rdd,
            max_mw,
            max_raw_ipv6_qp,
            max_raw_ethy_qp,
            max_mcast_grp,
            max_mcast_qp_attach,
            max_total_mcast_qp_attach,
            max_ah,
            max_fmr,
            max_map_per_fmr,
            max_srq,
            max_srq_wr,
            max_srq_sge,
            max_pkeys,
            local_ca_ack_delay,
            phys_port_cnt,
        }
    ),
    ty!(
        "struct ibv_query_device_ex_input",
        ibv_query_device_ex_input { comp_mask }
    ),
    ty!("struct ibv_odp_caps", ibv_odp_caps { general_caps }, extra: [
        Field { path: "per_transport_caps.rc_odp_caps", offset: offset_of!(ibv_odp_caps, rc_odp_caps), size: 4 },
        Field { path: "per_transport_caps.uc_odp_caps", offset: offset_of!(ibv_odp_caps, uc_odp_caps), size: 4 },
        Field { path: "per_transport_caps.ud_odp_caps", offset: offset_of!(ibv_odp_caps, ud_odp_caps), size: 4 },
    ]),
    ty!(
        "struct ibv_tso_caps",
        ibv_tso_caps {
            max_tso,
            supported_qpts
        }
    ),
    ty!(
        "struct ibv_rss_caps",
        ibv_rss_caps {
            supported_qpts,
            max_rwq_indirection_tables,
            max_rwq_indirection_table_size,
            rx_hash_fields_mask,
            rx_hash_function,
        }
    ),
    ty!(
        "struct ibv_packet_pacing_caps",
        ibv_packet_pacing_caps {
            qp_rate_limit_min,
            qp_rate_limit_max,
            supported_qpts
        }
    ),
    ty!(
        "struct ibv_tm_caps",
        ibv_tm_caps {
            max_rndv_hdr_size,
            max_num_tags,
            flags,
            max_ops,
            max_sge
        }
    ),
    ty!(
        "struct ibv_cq_moderation_caps",
        ibv_cq_moderation_caps {
            max_cq_count,
            max_cq_period
        }
    ),
    ty!(
        "struct ibv_pci_atomic_caps",
        ibv_pci_atomic_caps {
            fetch_add,
            swap,
            compare_swap
        }
    ),
    ty!(
        "struct ibv_device_attr_ex",
        ibv_device_attr_ex {
            orig_attr,
            comp_mask,
            odp_caps,
            completion_timestamp_mask,
            hca_core_clock,
            device_cap_flags_ex,
            tso_caps,
            rss_caps,
            max_wq_type_rq,
            packet_pacing_caps,
            raw_packet_caps,
            tm_caps,
            cq_mod_caps,
            max_dm_size,
            pci_atomic_caps,
            xrc_odp_caps,
            phys_port_cnt_ex,
        }
    ),
    ty!(
        "struct ibv_port_attr",
        ibv_port_attr {
            state,
            max_mtu,
            active_mtu,
            gid_tbl_len,
            port_cap_flags,
            max_msg_sz,
            bad_pkey_cntr,
            qkey_viol_cntr,
            pkey_tbl_len,
            lid,
            sm_lid,
            lmc,
            max_vl_num,
            sm_sl,
            subnet_timeout,
            init_type_reply,
            active_width,
            active_speed,
            phys_state,
            link_layer,
            flags,
            port_cap_flags2,
        }
    ),
    ty!(
        "struct ibv_gid_entry",
        ibv_gid_entry {
            gid,
            gid_index,
            port_num,
            gid_type,
            ndev_ifindex
        }
    ),
    ty!(
        "struct ibv_async_event",
        ibv_async_event {
            element,
            event_type
        }
    ),
    ty!("struct ibv_pd", ibv_pd { context, handle }),
    ty!(
        "struct ibv_mr",
        ibv_mr {
            context,
            pd,
            addr,
            length,
            handle,
            lkey,
            rkey
        }
    ),
    ty!(
        "struct ibv_comp_channel",
        ibv_comp_channel {
            context,
            fd,
            refcnt
        }
    ),
    ty!(
        "struct ibv_cq",
        ibv_cq {
            context,
            channel,
            cq_context,
            handle,
            cqe,
            mutex,
            cond,
            comp_events_completed,
            async_events_completed,
        }
    ),
    ty!("struct ibv_poll_cq_attr", ibv_poll_cq_attr { comp_mask }),
    ty!("struct ibv_wc_tm_info", ibv_wc_tm_info { tag }, extra: [
        Field { path: "priv", offset: offset_of!(ibv_wc_tm_info, priv_), size: 4 },
    ]),
    ty!(
        "struct ibv_cq_ex",
        ibv_cq_ex {
            context,
            channel,
            cq_context,
            handle,
            cqe,
            mutex,
            cond,
            comp_events_completed,
            async_events_completed,
            comp_mask,
            status,
            wr_id,
            start_poll,
            next_poll,
            end_poll,
            read_opcode,
            read_vendor_err,
            read_byte_len,
            read_imm_data,
            read_qp_num,
            read_src_qp,
            read_wc_flags,
            read_slid,
            read_sl,
            read_dlid_path_bits,
            read_completion_ts,
            read_cvlan,
            read_flow_tag,
            read_tm_info,
            read_completion_wallclock_ns,
        }
    ),
    ty!(
        "struct ibv_cq_init_attr_ex",
        ibv_cq_init_attr_ex {
            cqe,
            cq_context,
            channel,
            comp_vector,
            wc_flags,
            comp_mask,
            flags,
            parent_domain,
        }
    ),
    ty!(
        "struct ibv_srq_attr",
        ibv_srq_attr {
            max_wr,
            max_sge,
            srq_limit
        }
    ),
    ty!(
        "struct ibv_srq_init_attr",
        ibv_srq_init_attr { srq_context, attr }
    ),
    ty!(
        "struct ibv_tm_cap",
        ibv_tm_cap {
            max_num_tags,
            max_ops
        }
    ),
    ty!(
        "struct ibv_srq_init_attr_ex",
        ibv_srq_init_attr_ex {
            srq_context,
            attr,
            comp_mask,
            srq_type,
            pd,
            xrcd,
            cq,
            tm_cap,
        }
    ),
    ty!(
        "struct ibv_srq",
        ibv_srq {
            context,
            srq_context,
            pd,
            handle,
            mutex,
            cond,
            events_completed
        }
    ),
    ty!(
        "struct ibv_qp_cap",
        ibv_qp_cap {
            max_send_wr,
            max_recv_wr,
            max_send_sge,
            max_recv_sge,
            max_inline_data
        }
    ),
    ty!(
        "struct ibv_qp_init_attr",
        ibv_qp_init_attr {
            qp_context,
            send_cq,
            recv_cq,
            srq,
            cap,
            qp_type,
            sq_sig_all
        }
    ),
    ty!(
        "struct ibv_rx_hash_conf",
        ibv_rx_hash_conf {
            rx_hash_function,
            rx_hash_key_len,
            rx_hash_key,
            rx_hash_fields_mask
        }
    ),
    ty!(
        "struct ibv_qp_init_attr_ex",
        ibv_qp_init_attr_ex {
            qp_context,
            send_cq,
            recv_cq,
            srq,
            cap,
            qp_type,
            sq_sig_all,
            comp_mask,
            pd,
            xrcd,
            create_flags,
            max_tso_header,
            rwq_ind_tbl,
            rx_hash_conf,
            source_qpn,
            send_ops_flags,
        }
    ),
    ty!(
        "struct ibv_qp",
        ibv_qp {
            context,
            qp_context,
            pd,
            send_cq,
            recv_cq,
            srq,
            handle,
            qp_num,
            state,
            qp_type,
            mutex,
            cond,
            events_completed,
        }
    ),
    ty!(
        "struct ibv_global_route",
        ibv_global_route {
            dgid,
            flow_label,
            sgid_index,
            hop_limit,
            traffic_class
        }
    ),
    ty!(
        "struct ibv_ah_attr",
        ibv_ah_attr {
            grh,
            dlid,
            sl,
            src_path_bits,
            static_rate,
            is_global,
            port_num
        }
    ),
    ty!(
        "struct ibv_qp_attr",
        ibv_qp_attr {
            qp_state,
            cur_qp_state,
            path_mtu,
            path_mig_state,
            qkey,
            rq_psn,
            sq_psn,
            dest_qp_num,
            qp_access_flags,
            cap,
            ah_attr,
            alt_ah_attr,
            pkey_index,
            alt_pkey_index,
            en_sqd_async_notify,
            sq_draining,
            max_rd_atomic,
            max_dest_rd_atomic,
            min_rnr_timer,
            port_num,
            timeout,
            retry_cnt,
            rnr_retry,
            alt_port_num,
            alt_timeout,
            rate_limit,
        }
    ),
    ty!(
        "struct ibv_ah",
        ibv_ah {
            context,
            pd,
            handle
        }
    ),
    ty!("struct ibv_sge", ibv_sge { addr, length, lkey }),
    ty!(
        "struct ibv_mw_bind_info",
        ibv_mw_bind_info {
            mr,
            addr,
            length,
            mw_access_flags
        }
    ),
    ty!("struct ibv_send_wr", ibv_send_wr { wr_id, next, sg_list, num_sge, opcode, send_flags, wr }, extra: [
        Field { path: "imm_data", offset: offset_of!(ibv_send_wr, imm_or_inv), size: 4 },
        Field { path: "invalidate_rkey", offset: offset_of!(ibv_send_wr, imm_or_inv), size: 4 },
        nested!("wr.rdma.remote_addr", ibv_send_wr, wr, ibv_wr_rdma, remote_addr),
        nested!("wr.rdma.rkey", ibv_send_wr, wr, ibv_wr_rdma, rkey),
        nested!("wr.atomic.remote_addr", ibv_send_wr, wr, ibv_wr_atomic, remote_addr),
        nested!("wr.atomic.compare_add", ibv_send_wr, wr, ibv_wr_atomic, compare_add),
        nested!("wr.atomic.swap", ibv_send_wr, wr, ibv_wr_atomic, swap),
        nested!("wr.atomic.rkey", ibv_send_wr, wr, ibv_wr_atomic, rkey),
        nested!("wr.ud.ah", ibv_send_wr, wr, ibv_wr_ud, ah),
        nested!("wr.ud.remote_qpn", ibv_send_wr, wr, ibv_wr_ud, remote_qpn),
        nested!("wr.ud.remote_qkey", ibv_send_wr, wr, ibv_wr_ud, remote_qkey),
        Field { path: "qp_type.xrc.remote_srqn", offset: offset_of!(ibv_send_wr, qp_type), size: 4 },
        nested!("bind_mw.mw", ibv_send_wr, ext, ibv_wr_bind_mw, mw),
        nested!("bind_mw.rkey", ibv_send_wr, ext, ibv_wr_bind_mw, rkey),
        nested!("bind_mw.bind_info", ibv_send_wr, ext, ibv_wr_bind_mw, bind_info),
        nested!("tso.hdr", ibv_send_wr, ext, ibv_wr_tso, hdr),
        nested!("tso.hdr_sz", ibv_send_wr, ext, ibv_wr_tso, hdr_sz),
        nested!("tso.mss", ibv_send_wr, ext, ibv_wr_tso, mss),
    ]),
    ty!(
        "struct ibv_recv_wr",
        ibv_recv_wr {
            wr_id,
            next,
            sg_list,
            num_sge
        }
    ),
    ty!("struct ibv_wc", ibv_wc {
        wr_id, status, opcode, vendor_err, byte_len, qp_num, src_qp, wc_flags, pkey_index,
        slid, sl, dlid_path_bits,
    }, extra: [
        Field { path: "imm_data", offset: offset_of!(ibv_wc, imm_or_inv), size: 4 },
        Field { path: "invalidated_rkey", offset: offset_of!(ibv_wc, imm_or_inv), size: 4 },
    ]),
    ty!("struct ibv_data_buf", ibv_data_buf { addr, length }),
    ty!(
        "struct ibv_qp_ex",
        ibv_qp_ex {
            qp_base,
            comp_mask,
            wr_id,
            wr_flags,
            wr_atomic_cmp_swp,
            wr_atomic_fetch_add,
            wr_bind_mw,
            wr_local_inv,
            wr_rdma_read,
            wr_rdma_write,
            wr_rdma_write_imm,
            wr_send,
            wr_send_imm,
            wr_send_inv,
            wr_send_tso,
            wr_set_ud_addr,
            wr_set_xrc_srqn,
            wr_set_inline_data,
            wr_set_inline_data_list,
            wr_set_sge,
            wr_set_sge_list,
            wr_start,
            wr_complete,
            wr_abort,
            wr_atomic_write,
        }
    ),
];

/// Every C type of `<rdma/rdma_cma.h>` (and `<infiniband/sa.h>`) this
/// library shares with programs (`abi::cm`).
pub const CM_TYPES: &[Type] = &[
    ty!("struct rdma_ib_addr", rdma_ib_addr { sgid, dgid, pkey }),
    ty!("struct rdma_addr", rdma_addr {}, extra: [
        Field { path: "src_addr", offset: offset_of!(rdma_addr, src), size: size_of::<libc::sockaddr>() },
        Field { path: "src_sin", offset: offset_of!(rdma_addr, src), size: size_of::<libc::sockaddr_in>() },
        Field { path: "src_sin6", offset: offset_of!(rdma_addr, src), size: size_of::<libc::sockaddr_in6>() },
        Field { path: "src_storage", offset: offset_of!(rdma_addr, src), size: size_of::<libc::sockaddr_storage>() },
        Field { path: "dst_addr", offset: offset_of!(rdma_addr, dst), size: size_of::<libc::sockaddr>() },
        Field { path: "dst_sin", offset: offset_of!(rdma_addr, dst), size: size_of::<libc::sockaddr_in>() },
        Field { path: "dst_sin6", offset: offset_of!(rdma_addr, dst), size: size_of::<libc::sockaddr_in6>() },
        Field { path: "dst_storage", offset: offset_of!(rdma_addr, dst), size: size_of::<libc::sockaddr_storage>() },
        nested!("addr.ibaddr.sgid", rdma_addr, ibaddr, rdma_ib_addr, sgid),
        nested!("addr.ibaddr.dgid", rdma_addr, ibaddr, rdma_ib_addr, dgid),
        nested!("addr.ibaddr.pkey", rdma_addr, ibaddr, rdma_ib_addr, pkey),
    ]),
    ty!(
        "struct ibv_sa_path_rec",
        ibv_sa_path_rec {
            dgid,
            sgid,
            dlid,
            slid,
            raw_traffic,
            flow_label,
            hop_limit,
            traffic_class,
            reversible,
            numb_path,
            pkey,
            sl,
            mtu_selector,
            mtu,
            rate_selector,
            rate,
            packet_life_time_selector,
            packet_life_time,
            preference,
        }
    ),
    ty!(
        "struct rdma_route",
        rdma_route {
            addr,
            path_rec,
            num_paths
        }
    ),
    ty!("struct rdma_event_channel", rdma_event_channel { fd }),
    ty!(
        "struct rdma_cm_id",
        rdma_cm_id {
            verbs,
            channel,
            context,
            qp,
            route,
            ps,
            port_num,
            event,
            send_cq_channel,
            send_cq,
            recv_cq_channel,
            recv_cq,
            srq,
            pd,
            qp_type,
        }
    ),
    ty!(
        "struct rdma_conn_param",
        rdma_conn_param {
            private_data,
            private_data_len,
            responder_resources,
            initiator_depth,
            flow_control,
            retry_count,
            rnr_retry_count,
            srq,
            qp_num,
        }
    ),
    ty!(
        "struct rdma_ud_param",
        rdma_ud_param {
            private_data,
            private_data_len,
            ah_attr,
            qp_num,
            qkey
        }
    ),
    ty!("struct rdma_cm_event", rdma_cm_event { id, listen_id, event, status }, extra: [
        nested!("param.conn.private_data", rdma_cm_event, param, rdma_conn_param, private_data),
        nested!("param.conn.private_data_len", rdma_cm_event, param, rdma_conn_param, private_data_len),
        nested!("param.conn.responder_resources", rdma_cm_event, param, rdma_conn_param, responder_resources),
        nested!("param.conn.initiator_depth", rdma_cm_event, param, rdma_conn_param, initiator_depth),
        nested!("param.conn.qp_num", rdma_cm_event, param, rdma_conn_param, qp_num),
        nested!("param.ud.private_data_len", rdma_cm_event, param, rdma_ud_param, private_data_len),
        nested!("param.ud.ah_attr", rdma_cm_event, param, rdma_ud_param, ah_attr),
        nested!("param.ud.qp_num", rdma_cm_event, param, rdma_ud_param, qp_num),
        nested!("param.ud.qkey", rdma_cm_event, param, rdma_ud_param, qkey),
    ]),
    ty!(
        "struct rdma_addrinfo",
        rdma_addrinfo {
            ai_flags,
            ai_family,
            ai_qp_type,
            ai_port_space,
            ai_src_len,
            ai_dst_len,
            ai_src_addr,
            ai_dst_addr,
            ai_src_canonname,
            ai_dst_canonname,
            ai_route_len,
            ai_route,
            ai_connect_len,
            ai_connect,
            ai_next,
        }
    ),
    ty!(
        "struct rdma_cm_join_mc_attr_ex",
        rdma_cm_join_mc_attr_ex {
            comp_mask,
            join_flags,
            addr
        }
    ),
];
