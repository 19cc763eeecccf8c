//! Contexts: `ibv_open_device` / `ibv_close_device`, the device and port
//! queries, GIDs, and asynchronous events.
//!
//! A context is one engine of this stack (a `roce_verbs::Context`) opened
//! on one address of the device, its GID 0. Which address: `ROCE_ADDR`
//! when set; otherwise the device's first IPv4 address (its first
//! address without one). On the loopback device a taken UDP port 4791
//! moves the context to the next free address of 127.0.0.0/8 (every one
//! of them reaches `lo` on Linux with no configuration), so that any
//! number of unmodified processes on one host each get an address, and
//! a GID, of their own (`docs/dropin.md`). The rest of the GID table is
//! the device's other addresses, as `roce devinfo` lists them
//! ([`gid_table`]); the engine binds one of them when a QP or AH first
//! sends from it.

use std::collections::HashMap;
use std::mem::offset_of;
use std::net::{IpAddr, Ipv4Addr};
use std::os::raw::{c_int, c_void};
use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, Mutex};

use roce_verbs::{AsyncEvent, OpenError, OpenOptions};

use crate::abi::consts::*;
use crate::abi::*;
use crate::config::{self, log};
use crate::device::{self, Device};
use crate::engine::{Engine, EventQueue, Resolved};
use crate::eventfd::EventFd;
use crate::ffi::{arg, arg_mut, errno_ret, minus_one, ptr_ret, Res};
use crate::ffi::{count_or_neg, errno_set, value_or, void};

/// A raw pointer kept in a table (the objects it names are owned by the
/// program's handles; the table only maps engine ids back to them).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) struct Raw(pub(crate) *mut c_void);
// SAFETY: the pointer is only an address in a lookup table; it is
// dereferenced by the thread that looks it up, under the rules of the
// object it names (which a program must not destroy while events for it
// may be delivered, as with rdma-core).
unsafe impl Send for Raw {}

/// The objects of a context, by engine id: where asynchronous events
/// and completion channels find the C pointer of what they name.
#[derive(Default)]
pub(crate) struct Objects {
    pub(crate) qps: HashMap<u32, Raw>,
    pub(crate) cqs: HashMap<u32, Raw>,
    pub(crate) srqs: HashMap<u32, Raw>,
}

/// One open context: the C view first (the program holds a pointer to
/// its `vctx.context`).
#[repr(C)]
pub(crate) struct Context {
    pub(crate) vctx: verbs_context,
    /// The engine's handle (`engine.verbs`).
    pub(crate) verbs: roce_verbs::Context,
    /// The engine this context shares with the process's other contexts
    /// of the device on its address ([`Engine`]).
    pub(crate) engine: Arc<Engine>,
    /// Asynchronous events of this context's objects, waiting for
    /// `ibv_get_async_event` (counted on `async_efd`).
    events: EventQueue,
    pub(crate) device: &'static Device,
    /// The context's address: GID index 0.
    pub(crate) local: IpAddr,
    /// The GID table ([`gid_table`]): `local` first.
    pub(crate) gids: Vec<IpAddr>,
    /// Active path MTU in bytes.
    pub(crate) mtu: u32,
    /// The eventfd behind `async_fd` (one count per queued event; the
    /// program sees its own number of it, see [`EventFd`]).
    async_efd: Arc<EventFd>,
    /// What `cmd_fd` is: a descriptor of the context's own that programs
    /// may `dup` (rdma-core's tests do, for `ibv_import_device`, which
    /// says `EOPNOTSUPP` here); it never carries anything, and is
    /// released with the context as `async_fd` is.
    cmd_fd: Arc<EventFd>,
    pub(crate) objects: Mutex<Objects>,
    /// PDs, CQs, channels and QPs still alive: `ibv_close_device` does
    /// not check (rdma-core does not either), but `ibv_dealloc_pd` does.
    pub(crate) children: AtomicUsize,
    /// librdmacm's map of this context's connections (`cm::dispatch`),
    /// made when librdmacm first uses the context.
    pub(crate) cm: std::sync::OnceLock<Arc<Mutex<crate::cm::Table>>>,
    /// librdmacm's ids use it: it stays open for the process (a
    /// program's `ibv_close_device` only flushes it).
    pub(crate) pinned: std::sync::atomic::AtomicBool,
    /// The process that opened it: a child made by `fork()` inherits the
    /// memory but not the progress thread, and must not act for it.
    pub(crate) pid: u32,
}

/// Every open context, so that librdmacm can find the one on an address
/// (a process can have only one per address: it holds UDP port 4791
/// there). Programs like perftest open a context themselves and then
/// use librdmacm on the same address.
static LIVE: Mutex<Vec<Raw>> = Mutex::new(Vec::new());

/// The open contexts (see `LIVE`).
pub(crate) fn live() -> Vec<*mut ibv_context> {
    LIVE.lock()
        .unwrap_or_else(|p| p.into_inner())
        .iter()
        .map(|Raw(p)| p.cast())
        .collect()
}

impl Context {
    /// Queues an event of one of its objects for the program.
    pub(crate) fn queue_event(&self, r: Resolved) {
        self.events
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push_back(r);
        self.async_efd.count();
    }

    /// The context behind a program's `ibv_context` pointer.
    ///
    /// # Safety
    /// `p` must be NULL or a context this library opened and not closed.
    pub(crate) unsafe fn from_ptr<'a>(p: *mut ibv_context) -> Res<&'a Context> {
        if p.is_null() {
            return Err(libc::EINVAL);
        }
        let off = offset_of!(Context, vctx) + offset_of!(verbs_context, context);
        // SAFETY: the context is the `vctx.context` field of a `Context`
        // this library allocated (the caller's contract).
        Ok(unsafe { &*(p.byte_sub(off) as *const Context) })
    }

    /// The `ibv_context` pointer programs see.
    pub(crate) fn ibv(&self) -> *mut ibv_context {
        &self.vctx.context as *const ibv_context as *mut ibv_context
    }
}

/// `EINVAL` unless objects belong to one context: the process's
/// contexts of a device share an engine ([`Engine`]), so the engine's
/// own checks cannot tell them apart; the kernel finds no object of
/// another context in a context's tables.
pub(crate) fn same_context(ctxs: &[*mut ibv_context]) -> Res<()> {
    match ctxs.split_first() {
        Some((first, rest)) if rest.iter().any(|c| c != first) => Err(libc::EINVAL),
        _ => Ok(()),
    }
}

/// The GID of an address: IPv4 as `::ffff:a.b.c.d` (RoCE v2).
pub(crate) fn gid_of(a: IpAddr) -> ibv_gid {
    let v6 = match a {
        IpAddr::V4(v4) => v4.to_ipv6_mapped(),
        IpAddr::V6(v6) => v6,
    };
    ibv_gid { raw: v6.octets() }
}

/// The address of a GID (`::ffff:a.b.c.d` is IPv4).
pub(crate) fn addr_of(g: &ibv_gid) -> IpAddr {
    let v6 = std::net::Ipv6Addr::from(g.raw);
    match v6.to_ipv4_mapped() {
        Some(v4) => IpAddr::V4(v4),
        None => IpAddr::V6(v6),
    }
}

// librdmacm's event channel waits as completion channels do.
pub(crate) use crate::eventfd::wait_readable;

/// The GID table of a context of `dev` opened on `local`: the device's
/// addresses in `roce devinfo`'s order, with `local` at index 0 — moved
/// there when it is one of them (the default address is already first,
/// so the table is `roce devinfo`'s), put in place of the first entry
/// when it is not (a loopback context that moved to 127.0.0.2).
pub(crate) fn gid_table(dev: &Device, local: IpAddr) -> Vec<IpAddr> {
    let mut t = dev.info.gids().to_vec();
    match t.iter().position(|&a| a == local) {
        Some(i) => t.swap(0, i),
        None if t.is_empty() => t.push(local),
        None => t[0] = local,
    }
    t
}

/// The errno of a verb that sets a source GID (`ibv_modify_qp` with an
/// address vector, `ibv_create_ah`), saying on stderr why a GID cannot
/// be used (its UDP port taken by another process).
pub(crate) fn gid_err(e: roce_verbs::Error) -> crate::ffi::Errno {
    if let roce_verbs::Error::AddrUnavailable(_, kind) = e {
        crate::config::say(format_args!("{e}"));
        return match kind {
            std::io::ErrorKind::AddrInUse => libc::EADDRINUSE,
            _ => libc::EADDRNOTAVAIL,
        };
    }
    crate::ffi::errno_of(&e)
}

/// The address a context of `dev` opens on first.
fn first_addr(dev: &Device) -> Option<IpAddr> {
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
    cpu: roce_verbs::roce_io::CpuTuning,
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
fn asked_addr(dev: &Device, at: Option<IpAddr>) -> Res<Option<IpAddr>> {
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
fn open_engine(dev: &Device, asked: Option<IpAddr>) -> Res<(roce_verbs::Context, IpAddr)> {
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
                let emu = if cpu == roce_verbs::roce_io::CpuTuning::EMULATED {
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

/// Opens a context of `dev` on `at` (librdmacm binding an address), or
/// where `ibv_open_device` would: on the engine this process already
/// has there, if any.
pub(crate) fn new_context(dev: &'static Device, at: Option<IpAddr>) -> Res<*mut ibv_context> {
    let asked = asked_addr(dev, at)?;
    // The engine and the posting paths copy program memory through the
    // guard (docs/dropin.md, "Registered memory"): its handler goes in
    // with the first context (and is checked again at each registration).
    roce_verbs::guard::install_fault_handler()
        .map_err(|e| e.raw_os_error().unwrap_or(libc::EIO))?;
    let engine = Engine::get(dev, asked, first_addr(dev), || open_engine(dev, asked))?;
    let (verbs, local) = (engine.verbs.clone(), engine.local);
    let efd = EventFd::new()?;
    let cmd_fd = EventFd::new()?;
    let mtu = if dev.info.interface().loopback {
        4096
    } else {
        dev.info.active_mtu()
    };
    // SAFETY: an all-zero verbs_context is valid (NULL pointers, None
    // function pointers, zero integers); the fields that matter are set
    // below.
    let mut vctx: verbs_context = unsafe { std::mem::zeroed() };
    vctx.query_port = Some(query_port_ex);
    vctx.query_device_ex = Some(query_device_ex);
    crate::cq::install(&mut vctx);
    crate::qp::install(&mut vctx);
    crate::srq::install(&mut vctx);
    vctx.sz = size_of::<verbs_context>();
    let c = &mut vctx.context;
    c.device = &dev.ibv as *const ibv_device as *mut ibv_device;
    c.cmd_fd = cmd_fd.shown();
    c.async_fd = efd.shown();
    c.num_comp_vectors = 1;
    c.mutex = libc::PTHREAD_MUTEX_INITIALIZER;
    c.abi_compat = VERBS_ABI_IS_EXTENDED as *mut c_void;
    let ctx = Box::new(Context {
        vctx,
        verbs,
        engine,
        events: EventQueue::default(),
        device: dev,
        local,
        gids: gid_table(dev, local),
        mtu,
        async_efd: efd,
        cmd_fd,
        objects: Mutex::new(Objects::default()),
        children: AtomicUsize::new(0),
        cm: std::sync::OnceLock::new(),
        pinned: std::sync::atomic::AtomicBool::new(false),
        pid: std::process::id(),
    });
    let ctx = Box::leak(ctx);
    let p = ctx.ibv();
    ctx.engine.join(p);
    LIVE.lock()
        .unwrap_or_else(|p| p.into_inner())
        .push(Raw(p.cast()));
    Ok(p)
}

export! {
    /// `ibv_open_device`.
    fn ibv_open_device(dev: *mut ibv_device) -> *mut ibv_context {
        ptr_ret(|| new_context(device::from_ptr(dev)?, None))
    }
}

export! {
    /// `ibv_close_device`: stops the engine. Objects the program did not
    /// destroy go with it (their memory is not freed: a pointer the
    /// program still holds stays readable).
    fn ibv_close_device(ctx: *mut ibv_context) -> c_int {
        errno_ret(|| {
            // SAFETY: the program passes a context it opened.
            let c = unsafe { Context::from_ptr(ctx)? };
            if c.pinned.load(std::sync::atomic::Ordering::Acquire) {
                // librdmacm's ids use it (see `pinned`).
                c.verbs.flush();
                return Ok(());
            }
            LIVE.lock()
                .unwrap_or_else(|p| p.into_inner())
                .retain(|Raw(p)| *p != ctx.cast());
            let off = offset_of!(Context, vctx) + offset_of!(verbs_context, context);
            // SAFETY: as from_ptr; the program gives up the context here.
            let c = unsafe { Box::from_raw(ctx.byte_sub(off) as *mut Context) };
            log!("closing {} on {}", c.device.info.name(), c.local);
            c.engine.leave(ctx);
            // The program's async_fd, if still ours (see EventFd).
            c.async_efd.release();
            c.cmd_fd.release();
            // The last ACKs of destroyed QPs leave before the program,
            // which usually exits next, can end the process.
            c.verbs.flush();
            drop(c);
            Ok(())
        })
    }
}

/// `enum ibv_mtu` of a path MTU in bytes.
pub(crate) fn mtu_enum(bytes: u32) -> u32 {
    roce_verbs::roce_core::qp::mtu_to_enum(bytes).into()
}

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

pub(crate) fn event_of(c: &Context, e: AsyncEvent) -> Option<(u32, *mut c_void)> {
    let objs = c.objects.lock().unwrap_or_else(|p| p.into_inner());
    let qp = |q: roce_verbs::Qpn| objs.qps.get(&q.value()).map(|r| r.0);
    Some(match e {
        AsyncEvent::QpFatal(q) => (IBV_EVENT_QP_FATAL, qp(q)?),
        AsyncEvent::SqDrained(q) => (IBV_EVENT_SQ_DRAINED, qp(q)?),
        AsyncEvent::QpLastWqeReached(q) => (IBV_EVENT_QP_LAST_WQE_REACHED, qp(q)?),
        AsyncEvent::CqError(id) => (IBV_EVENT_CQ_ERR, objs.cqs.get(&crate::cq::key(id))?.0),
        AsyncEvent::SrqLimitReached(id) => (
            IBV_EVENT_SRQ_LIMIT_REACHED,
            objs.srqs.get(&crate::srq::key(id))?.0,
        ),
        AsyncEvent::DeviceFatal => (IBV_EVENT_DEVICE_FATAL, std::ptr::null_mut()),
    })
}

export! {
    /// `ibv_get_async_event`: waits (unless `async_fd` is non-blocking)
    /// for the next event of an object still alive; `EBADF` when the
    /// program closed `async_fd`.
    fn ibv_get_async_event(ctx: *mut ibv_context, out: *mut ibv_async_event) -> c_int {
        minus_one(|| {
            // SAFETY: the program's pointers.
            let (c, out) = unsafe { (Context::from_ptr(ctx)?, arg_mut(out)?) };
            // EBADF once the program closed (or reused) its async_fd.
            c.async_efd.check()?;
            loop {
                // read(), as the kernel's: EINTR for a signal whose
                // handler has no SA_RESTART (see ibv_get_cq_event).
                c.async_efd.take()?;
                let next = c.events.lock().unwrap_or_else(|p| p.into_inner()).pop_front();
                if let Some(Resolved(ty, element)) = next {
                    out.element = element;
                    out.event_type = ty;
                    return Ok(0);
                }
            }
        })
    }
}

export! {
    /// `ibv_ack_async_event`: nothing to release (destroying an object
    /// does not wait for its events' acknowledgements).
    fn ibv_ack_async_event(event: *mut ibv_async_event) {
        // SAFETY: the program's pointer or NULL.
        void(|| unsafe { arg(event) }.map(|_| ()))
    }
}
