//! The arguments and results of a traced call, decoded by type and name.
//!
//! The boundary macro (`ffi.rs`) calls `(&&Arg(name, &value)).before(call)`
//! for each argument: method resolution finds [`Decoded`] when it is
//! implemented for that argument's type (a work request list, a QP, a
//! work completion array: the structure behind the pointer is decoded),
//! and [`Plain`] otherwise (a number, by its name when it has one of
//! flags, such as `access`; a pointer, as its address). The same for the
//! result ([`Ret`]). Decoders read the program's structures as the verb
//! itself does, before the call (its inputs) or after it (its outputs),
//! and never follow more than a bounded number of list links.

use std::fmt::Write as _;
use std::os::raw::{c_char, c_int};

use super::names::{self, string};
use super::Call;
use crate::abi::{
    ibv_ah_attr, ibv_async_event, ibv_cq, ibv_mr, ibv_qp, ibv_qp_attr, ibv_qp_init_attr,
    ibv_qp_init_attr_ex, ibv_recv_wr, ibv_send_wr, ibv_sge, ibv_wc, rdma_cm_event,
};

/// An argument: its name in the C prototype, and its value.
pub struct Arg<'a, T>(pub &'static str, pub &'a T);

/// A call's result.
pub struct Ret<'a, T>(pub &'a T);

/// The most WRs, SGEs and completions a line shows of one call.
const MAX_LIST: usize = 64;

/// An argument of a type with no decoder: a number or an address.
pub trait Plain {
    /// Writes the argument as passed.
    fn before(&self, c: &mut Call);
    /// Writes what the call left in it (for out arguments).
    fn after(&self, _c: &mut Call) {}
}

/// An argument whose type has a decoder.
pub trait Decoded {
    /// Writes the argument as passed.
    fn before(&self, c: &mut Call);
    /// Writes what the call left in it (for out arguments).
    fn after(&self, _c: &mut Call) {}
}

/// A result of a type with no decoder.
pub trait PlainRet {
    /// Writes the result.
    fn ret(&self, c: &mut Call);
}

/// A result whose type has a decoder.
pub trait DecodedRet {
    /// Writes the result.
    fn ret(&self, c: &mut Call);
}

/// A value written as a number.
pub trait Value {
    fn num(&self) -> Option<i64>;
    fn is_ptr(&self) -> bool {
        false
    }
}

macro_rules! ints {
    ($($t:ty),*) => {$(
        impl Value for $t {
            fn num(&self) -> Option<i64> {
                Some(*self as i64)
            }
        }
    )*};
}
ints!(i8, u8, i16, u16, i32, u32, i64, u64, isize, usize);

impl Value for () {
    fn num(&self) -> Option<i64> {
        None
    }
}

impl<T> Value for *mut T {
    fn num(&self) -> Option<i64> {
        Some(*self as usize as i64)
    }
    fn is_ptr(&self) -> bool {
        true
    }
}

impl<T> Value for *const T {
    fn num(&self) -> Option<i64> {
        Some(*self as usize as i64)
    }
    fn is_ptr(&self) -> bool {
        true
    }
}

fn ptr(out: &mut String, p: usize) {
    if p == 0 {
        out.push_str("null");
    } else {
        let _ = write!(out, "\"{p:#x}\"");
    }
}

/// A number: by the argument's name when it names flags or an enum.
fn number(c: &mut Call, name: &str, v: i64) {
    let flags_of_qp = c.is("ibv_modify_qp") || c.is("ibv_query_qp");
    let (status, cm, ev) = (
        c.is("ibv_wc_status_str"),
        c.is("rdma_event_str"),
        c.is("ibv_event_type_str"),
    );
    let out = c.key(name);
    let n = v as u32;
    match name.trim_start_matches('_') {
        "access" => names::flags(out, &names::ACCESS, n),
        "mask" | "attr_mask" if flags_of_qp => names::flags(out, &names::QP_ATTR_MASK, n),
        "status" if status => names::named(out, &names::WC_STATUS, n),
        "event" if cm => names::named(out, &names::CM_EVENT, n),
        "e" if ev => names::named(out, &names::ASYNC_EVENT, n),
        _ => {
            let _ = write!(out, "{v}");
        }
    }
}

impl<T: Value> Plain for Arg<'_, T> {
    fn before(&self, c: &mut Call) {
        if self.1.is_ptr() {
            let p = self.1.num().unwrap_or(0) as usize;
            ptr(c.key(self.0), p);
        } else if let Some(v) = self.1.num() {
            number(c, self.0, v);
        }
    }
}

impl<T: Value> PlainRet for Ret<'_, T> {
    fn ret(&self, c: &mut Call) {
        let n = self.0.num();
        let mut s = String::new();
        match n {
            None => {}
            Some(p) if self.0.is_ptr() => ptr(&mut s, p as usize),
            Some(v) => {
                let _ = write!(s, "{v}");
            }
        }
        c.set_ret(s, n);
    }
}

/// `{"ptr":..` and the fields `f` adds, for a non-NULL pointer.
fn object<T>(out: &mut String, p: *const T, f: impl FnOnce(&mut String, &T)) {
    // SAFETY: a pointer the program passes a verb, which reads it as well
    // (or one the verb returned).
    match unsafe { p.as_ref() } {
        None => out.push_str("null"),
        Some(v) => {
            let _ = write!(out, "{{\"ptr\":\"{:#x}\"", p as usize);
            f(out, v);
            out.push('}');
        }
    }
}

fn sges(out: &mut String, list: *const ibv_sge, n: c_int) {
    out.push_str(",\"sg_list\":[");
    for i in 0..(n.max(0) as usize).min(MAX_LIST) {
        if list.is_null() {
            break;
        }
        // SAFETY: the program's list holds `num_sge` entries.
        let s = unsafe { &*list.add(i) };
        let _ = write!(
            out,
            "{}{{\"addr\":\"{:#x}\",\"length\":{},\"lkey\":\"{:#x}\"}}",
            if i > 0 { "," } else { "" },
            s.addr,
            s.length,
            s.lkey
        );
    }
    out.push(']');
}

/// A work request list as a JSON array, walked as the verb walks it (at
/// most [`MAX_LIST`] entries): each entry's `wr_id` and what `fields`
/// writes after it.
fn wr_list<T>(
    out: &mut String,
    head: *const T,
    wr_id: impl Fn(&T) -> u64,
    next: impl Fn(&T) -> *const T,
    mut fields: impl FnMut(&mut String, &T),
) {
    out.push('[');
    let mut p = head;
    let mut i = 0;
    // SAFETY: the program's list, walked as the verb walks it.
    while let Some(w) = unsafe { p.as_ref() } {
        if i == MAX_LIST {
            out.push_str(",\"...\"");
            break;
        }
        let _ = write!(
            out,
            "{}{{\"wr_id\":{}",
            if i > 0 { "," } else { "" },
            wr_id(w)
        );
        fields(out, w);
        out.push('}');
        p = next(w);
        i += 1;
    }
    out.push(']');
}

impl Decoded for &Arg<'_, *mut ibv_send_wr> {
    fn before(&self, c: &mut Call) {
        let out = c.key(self.0);
        let (id, next) = (
            |w: &ibv_send_wr| w.wr_id,
            |w: &ibv_send_wr| w.next as *const _,
        );
        wr_list(out, *self.1 as *const ibv_send_wr, id, next, |out, w| {
            out.push_str(",\"opcode\":");
            names::named(out, &names::WR_OPCODE, w.opcode);
            out.push_str(",\"send_flags\":");
            names::flags(out, &names::SEND_FLAGS, w.send_flags);
            sges(out, w.sg_list, w.num_sge);
            match w.opcode {
                0 | 1 | 4 => {
                    // SAFETY: the RDMA member for these opcodes.
                    let r = unsafe { w.wr.rdma };
                    let _ = write!(
                        out,
                        ",\"remote_addr\":\"{:#x}\",\"rkey\":\"{:#x}\"",
                        r.remote_addr, r.rkey
                    );
                }
                5 | 6 => {
                    // SAFETY: the atomic member for these opcodes.
                    let a = unsafe { w.wr.atomic };
                    let _ = write!(
                        out,
                        ",\"remote_addr\":\"{:#x}\",\"rkey\":\"{:#x}\",\"compare_add\":{},\"swap\":{}",
                        a.remote_addr, a.rkey, a.compare_add, a.swap
                    );
                }
                _ => {}
            }
            if matches!(w.opcode, 1 | 3) {
                let _ = write!(out, ",\"imm_data\":\"{:#x}\"", u32::from_be(w.imm_or_inv));
            }
        });
    }
}

impl Decoded for &Arg<'_, *mut ibv_recv_wr> {
    fn before(&self, c: &mut Call) {
        let out = c.key(self.0);
        let (id, next) = (
            |w: &ibv_recv_wr| w.wr_id,
            |w: &ibv_recv_wr| w.next as *const _,
        );
        wr_list(out, *self.1 as *const ibv_recv_wr, id, next, |out, w| {
            sges(out, w.sg_list, w.num_sge)
        });
    }
}

fn qp_fields(out: &mut String, q: &ibv_qp) {
    let _ = write!(out, ",\"qp_num\":{}", q.qp_num);
}

impl Decoded for &Arg<'_, *mut ibv_qp> {
    fn before(&self, c: &mut Call) {
        object(c.key(self.0), *self.1, qp_fields);
    }
}

impl DecodedRet for &Ret<'_, *mut ibv_qp> {
    fn ret(&self, c: &mut Call) {
        let mut s = String::new();
        object(&mut s, *self.0, |o, q| {
            qp_fields(o, q);
            o.push_str(",\"qp_type\":");
            names::named(o, &names::QP_TYPE, q.qp_type);
        });
        c.set_ret(s, Some(*self.0 as usize as i64));
    }
}

impl DecodedRet for &Ret<'_, *mut ibv_mr> {
    fn ret(&self, c: &mut Call) {
        let mut s = String::new();
        object(&mut s, *self.0, |o, m| {
            let _ = write!(o, ",\"lkey\":\"{:#x}\",\"rkey\":\"{:#x}\"", m.lkey, m.rkey);
        });
        c.set_ret(s, Some(*self.0 as usize as i64));
    }
}

impl DecodedRet for &Ret<'_, *mut ibv_cq> {
    fn ret(&self, c: &mut Call) {
        let mut s = String::new();
        object(&mut s, *self.0, |o, q| {
            let _ = write!(o, ",\"cqe\":{}", q.cqe);
        });
        c.set_ret(s, Some(*self.0 as usize as i64));
    }
}

fn init_attr(
    out: &mut String,
    send_cq: usize,
    recv_cq: usize,
    srq: usize,
    cap: &crate::abi::ibv_qp_cap,
    qp_type: u32,
    sig_all: c_int,
) {
    out.push_str(",\"qp_type\":");
    names::named(out, &names::QP_TYPE, qp_type);
    out.push_str(",\"send_cq\":");
    ptr(out, send_cq);
    out.push_str(",\"recv_cq\":");
    ptr(out, recv_cq);
    out.push_str(",\"srq\":");
    ptr(out, srq);
    let _ = write!(
        out,
        ",\"cap\":{{\"max_send_wr\":{},\"max_recv_wr\":{},\"max_send_sge\":{},\"max_recv_sge\":{},\"max_inline_data\":{}}},\"sq_sig_all\":{}",
        cap.max_send_wr, cap.max_recv_wr, cap.max_send_sge, cap.max_recv_sge, cap.max_inline_data, sig_all
    );
}

impl Decoded for &Arg<'_, *mut ibv_qp_init_attr> {
    fn before(&self, c: &mut Call) {
        object(c.key(self.0), *self.1, |o, a| {
            init_attr(
                o,
                a.send_cq as usize,
                a.recv_cq as usize,
                a.srq as usize,
                &a.cap,
                a.qp_type,
                a.sq_sig_all,
            )
        });
    }
}

impl Decoded for &Arg<'_, *mut ibv_qp_init_attr_ex> {
    fn before(&self, c: &mut Call) {
        object(c.key(self.0), *self.1, |o, a| {
            init_attr(
                o,
                a.send_cq as usize,
                a.recv_cq as usize,
                a.srq as usize,
                &a.cap,
                a.qp_type,
                a.sq_sig_all,
            )
        });
    }
}

fn ah_fields(o: &mut String, a: &ibv_ah_attr) {
    let g = std::net::Ipv6Addr::from(a.grh.dgid.raw);
    let _ = write!(
        o,
        ",\"is_global\":{},\"dgid\":\"{}\",\"sgid_index\":{},\"hop_limit\":{},\"traffic_class\":{},\"sl\":{},\"port_num\":{}",
        a.is_global,
        g.to_ipv4_mapped().map_or(g.to_string(), |v4| v4.to_string()),
        a.grh.sgid_index,
        a.grh.hop_limit,
        a.grh.traffic_class,
        a.sl,
        a.port_num
    );
}

impl Decoded for &Arg<'_, *mut ibv_ah_attr> {
    fn before(&self, c: &mut Call) {
        if c.is("ibv_create_ah") {
            object(c.key(self.0), *self.1, ah_fields);
        } else {
            ptr(c.key(self.0), *self.1 as usize);
        }
    }
}

impl Decoded for &Arg<'_, *mut ibv_qp_attr> {
    fn before(&self, c: &mut Call) {
        // `ibv_modify_qp`'s body notes them, by the mask ([`qp_attr`]).
        if !c.is("ibv_modify_qp") {
            ptr(c.key(self.0), *self.1 as usize);
        }
    }
}

/// `ibv_modify_qp`'s attributes, the ones its mask names (noted by the
/// verb's body, which has both).
pub fn qp_attr(o: &mut String, a: &ibv_qp_attr, mask: u32) {
    o.push_str("\"attr\":{");
    let mut first = true;
    let mut field = |o: &mut String, bit: u32, k: &str| -> bool {
        if mask & bit == 0 {
            return false;
        }
        let _ = write!(o, "{}\"{k}\":", if first { "" } else { "," });
        first = false;
        true
    };
    if field(o, 1, "qp_state") {
        names::named(o, &names::QP_STATE, a.qp_state);
    }
    if field(o, 1 << 1, "cur_qp_state") {
        names::named(o, &names::QP_STATE, a.cur_qp_state);
    }
    if field(o, 1 << 3, "qp_access_flags") {
        names::flags(o, &names::ACCESS, a.qp_access_flags);
    }
    if field(o, 1 << 4, "pkey_index") {
        let _ = write!(o, "{}", a.pkey_index);
    }
    if field(o, 1 << 5, "port_num") {
        let _ = write!(o, "{}", a.port_num);
    }
    if field(o, 1 << 6, "qkey") {
        let _ = write!(o, "\"{:#x}\"", a.qkey);
    }
    if field(o, 1 << 7, "ah_attr") {
        o.push('{');
        ah_fields(o, &a.ah_attr);
        // The fields start with a comma.
        let at = o.rfind("{,").map(|i| i + 1);
        if let Some(i) = at {
            o.remove(i);
        }
        o.push('}');
    }
    if field(o, 1 << 8, "path_mtu") {
        let _ = write!(o, "{}", names::mtu(a.path_mtu));
    }
    if field(o, 1 << 9, "timeout") {
        let _ = write!(o, "{}", a.timeout);
    }
    if field(o, 1 << 10, "retry_cnt") {
        let _ = write!(o, "{}", a.retry_cnt);
    }
    if field(o, 1 << 11, "rnr_retry") {
        let _ = write!(o, "{}", a.rnr_retry);
    }
    if field(o, 1 << 12, "rq_psn") {
        let _ = write!(o, "\"{:#x}\"", a.rq_psn);
    }
    if field(o, 1 << 13, "max_rd_atomic") {
        let _ = write!(o, "{}", a.max_rd_atomic);
    }
    if field(o, 1 << 15, "min_rnr_timer") {
        let _ = write!(o, "{}", a.min_rnr_timer);
    }
    if field(o, 1 << 16, "sq_psn") {
        let _ = write!(o, "\"{:#x}\"", a.sq_psn);
    }
    if field(o, 1 << 17, "max_dest_rd_atomic") {
        let _ = write!(o, "{}", a.max_dest_rd_atomic);
    }
    if field(o, 1 << 20, "dest_qp_num") {
        let _ = write!(o, "{}", a.dest_qp_num);
    }
    o.push('}');
}

impl Decoded for &Arg<'_, *mut ibv_wc> {
    fn before(&self, c: &mut Call) {
        ptr(c.key(self.0), *self.1 as usize);
    }

    /// The completions `ibv_poll_cq` wrote.
    fn after(&self, c: &mut Call) {
        let n = match c.ret_num() {
            Some(n) if n > 0 && c.is("ibv_poll_cq") => (n as usize).min(MAX_LIST),
            _ => return,
        };
        let base = *self.1 as *const ibv_wc;
        let out = c.key("wc");
        out.push('[');
        for i in 0..n {
            // SAFETY: the verb wrote `n` entries of the program's array.
            let w = unsafe { &*base.add(i) };
            let _ = write!(
                out,
                "{}{{\"wr_id\":{},\"status\":",
                if i > 0 { "," } else { "" },
                w.wr_id
            );
            names::named(out, &names::WC_STATUS, w.status);
            out.push_str(",\"opcode\":");
            names::wc_opcode(out, w.opcode);
            let _ = write!(out, ",\"byte_len\":{},\"qp_num\":{}", w.byte_len, w.qp_num);
            if w.src_qp != 0 {
                let _ = write!(out, ",\"src_qp\":{}", w.src_qp);
            }
            if w.wc_flags != 0 {
                out.push_str(",\"wc_flags\":");
                names::flags(out, &names::WC_FLAGS, w.wc_flags);
            }
            if w.wc_flags & 2 != 0 {
                let _ = write!(out, ",\"imm_data\":\"{:#x}\"", u32::from_be(w.imm_or_inv));
            }
            if w.status != 0 {
                let _ = write!(out, ",\"vendor_err\":{}", w.vendor_err);
            }
            out.push('}');
        }
        out.push(']');
    }
}

fn async_event(out: &mut String, e: &ibv_async_event) {
    out.push_str("{\"event_type\":");
    names::named(out, &names::ASYNC_EVENT, e.event_type);
    out.push_str(",\"element\":");
    ptr(out, e.element as usize);
    out.push('}');
}

impl Decoded for &Arg<'_, *mut ibv_async_event> {
    fn before(&self, c: &mut Call) {
        if c.is("ibv_ack_async_event") {
            // SAFETY: the event the program gives back.
            match unsafe { self.1.as_ref() } {
                Some(e) => async_event(c.key(self.0), e),
                None => ptr(c.key(self.0), 0),
            }
        } else {
            ptr(c.key(self.0), *self.1 as usize);
        }
    }

    /// The event `ibv_get_async_event` handed out.
    fn after(&self, c: &mut Call) {
        if c.is("ibv_get_async_event") && c.ok() {
            // SAFETY: the verb filled the program's structure.
            if let Some(e) = unsafe { self.1.as_ref() } {
                async_event(c.key("event"), e);
            }
        }
    }
}

fn cm_event(out: &mut String, e: &rdma_cm_event) {
    out.push_str("{\"event\":");
    names::named(out, &names::CM_EVENT, e.event);
    let _ = write!(out, ",\"status\":{},\"id\":", e.status);
    ptr(out, e.id as usize);
    out.push_str(",\"listen_id\":");
    ptr(out, e.listen_id as usize);
    out.push('}');
}

impl Decoded for &Arg<'_, *mut rdma_cm_event> {
    fn before(&self, c: &mut Call) {
        // SAFETY: an event this library handed out, given back.
        match unsafe { self.1.as_ref() } {
            Some(e) => cm_event(c.key(self.0), e),
            None => ptr(c.key(self.0), 0),
        }
    }
}

impl Decoded for &Arg<'_, *mut *mut rdma_cm_event> {
    fn before(&self, c: &mut Call) {
        ptr(c.key(self.0), *self.1 as usize);
    }

    /// The event `rdma_get_cm_event` handed out.
    fn after(&self, c: &mut Call) {
        if !c.ok() {
            return;
        }
        // SAFETY: the verb stored an event in the program's out pointer.
        if let Some(e) = unsafe { self.1.as_ref().and_then(|p| p.as_ref()) } {
            cm_event(c.key("event"), e);
        }
    }
}

impl Decoded for &Arg<'_, *const c_char> {
    fn before(&self, c: &mut Call) {
        if self.1.is_null() {
            ptr(c.key(self.0), 0);
            return;
        }
        // SAFETY: a C string the program passes a verb that reads it.
        let s = unsafe { std::ffi::CStr::from_ptr(*self.1) }.to_string_lossy();
        let s: String = s.chars().take(256).collect();
        string(c.key(self.0), &s);
    }
}

fn sockaddr(out: &mut String, p: *const libc::sockaddr) {
    // SAFETY: the program's address, read for its family first.
    let Some(sa) = (unsafe { p.as_ref() }) else {
        out.push_str("null");
        return;
    };
    let a = match sa.sa_family as c_int {
        libc::AF_INET => {
            // SAFETY: an AF_INET address is a sockaddr_in.
            let s = unsafe { &*p.cast::<libc::sockaddr_in>() };
            std::net::SocketAddr::from((
                u32::from_be(s.sin_addr.s_addr).to_be_bytes(),
                u16::from_be(s.sin_port),
            ))
        }
        libc::AF_INET6 => {
            // SAFETY: an AF_INET6 address is a sockaddr_in6.
            let s = unsafe { &*p.cast::<libc::sockaddr_in6>() };
            std::net::SocketAddr::from((s.sin6_addr.s6_addr, u16::from_be(s.sin6_port)))
        }
        f => {
            let _ = write!(out, "{{\"family\":{f}}}");
            return;
        }
    };
    string(out, &a.to_string());
}

impl Decoded for &Arg<'_, *const libc::sockaddr> {
    fn before(&self, c: &mut Call) {
        sockaddr(c.key(self.0), *self.1);
    }
}

impl Decoded for &Arg<'_, *mut libc::sockaddr> {
    fn before(&self, c: &mut Call) {
        // Inputs of the rdma_cm calls; the r* socket calls' are outputs.
        if c.is_cm() {
            sockaddr(c.key(self.0), *self.1);
        } else {
            ptr(c.key(self.0), *self.1 as usize);
        }
    }
}
