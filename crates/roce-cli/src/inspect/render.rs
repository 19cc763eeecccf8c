//! One packet as a text line or a JSON object.

use std::fmt::Write as _;

use roce_wire::{icrc, Ecn, IpRepr, MacControl, Operation, RocePacket, Syndrome, Transport};
use serde_json::{json, Map, Value};

/// Formats seconds since the first packet with microsecond precision.
pub(crate) fn rel_time(ts_ns: u64, first_ns: u64) -> f64 {
    ts_ns.saturating_sub(first_ns) as f64 / 1e9
}

fn endpoint(out: &mut String, ip: std::net::IpAddr, port: u16) {
    match ip {
        std::net::IpAddr::V4(a) => {
            let _ = write!(out, "{a}:{port}");
        }
        std::net::IpAddr::V6(a) => {
            let _ = write!(out, "[{a}]:{port}");
        }
    }
}

/// The text line of a RoCE packet (without the trailing newline).
pub(crate) fn roce_line(
    out: &mut String,
    index: u64,
    time: f64,
    p: &RocePacket<'_>,
    icrc_expected: u32,
    retx: bool,
) {
    let _ = write!(out, "{index} {time:.6} ");
    endpoint(out, p.ip.src(), p.udp.src_port);
    out.push_str(" > ");
    endpoint(out, p.ip.dst(), p.udp.dst_port);
    let b = &p.bth;
    let op = b.opcode;
    if op.transport() == Transport::Cnp {
        out.push_str(" CNP");
    } else {
        let _ = write!(out, " {} {}", op.transport().name(), op.name());
    }
    let _ = write!(out, " qp={} psn={:#08x}", b.dest_qp, b.psn.value());
    for (set, name) in [
        (b.ack_req, "ackreq"),
        (b.solicited, "se"),
        (b.fecn, "fecn"),
        (b.becn && op.transport() != Transport::Cnp, "becn"),
        (retx, "retx"),
    ] {
        if set {
            out.push(' ');
            out.push_str(name);
        }
    }
    if b.pkey.0 != 0xffff {
        let _ = write!(out, " pkey={:#06x}", b.pkey.0);
    }
    let e = &p.ext;
    if let Some(d) = e.deth {
        let _ = write!(out, " qkey={:#010x} srcqp={}", d.qkey.value(), d.src_qp);
    }
    if let Some(f) = e.feth {
        let _ = write!(out, " plt={} sel={}", f.placement_type, f.selectivity);
    }
    if let Some(r) = e.reth {
        let _ = write!(
            out,
            " va={:#x} rkey={:#x} len={}",
            r.va,
            r.rkey.value(),
            r.dma_len
        );
    }
    if let Some(a) = e.atomic {
        let _ = write!(out, " va={:#x} rkey={:#x}", a.va, a.rkey.value());
        if op.operation() == Operation::CompareSwap {
            let _ = write!(out, " compare={:#x} swap={:#x}", a.compare, a.swap_add);
        } else {
            let _ = write!(out, " add={:#x}", a.swap_add);
        }
    }
    if let Some(a) = e.aeth {
        let _ = write!(out, " {} msn={}", a.syndrome, a.msn.value());
    }
    if let Some(v) = e.atomic_ack {
        let _ = write!(out, " orig={v:#x}");
    }
    if let Some(v) = e.imm {
        let _ = write!(out, " imm={v:#010x}");
    }
    if let Some(k) = e.ieth {
        let _ = write!(out, " inv_rkey={:#x}", k.value());
    }
    if op.payload() != roce_wire::PayloadRule::None {
        let _ = write!(out, " payload={}", p.payload.len());
    }
    if let Some(cm) = cm_summary(p) {
        out.push_str(" CM ");
        out.push_str(&cm);
    }
    if p.ip.ecn() != Ecn::NotEct {
        let _ = write!(out, " ecn={}", p.ip.ecn());
    }
    if let Some(tag) = p.eth.and_then(|e| e.vlan) {
        let _ = write!(out, " vlan={} pcp={}", tag.vid, tag.pcp);
    }
    if icrc_expected == p.icrc {
        out.push_str(" icrc=ok");
    } else {
        let _ = write!(
            out,
            " icrc=BAD(expected {:08x})",
            icrc::display_value(icrc_expected)
        );
    }
}

/// A one-line description of the CM message a QP1 packet carries
/// (`REQ comm=0x0d453e89 svc=0x1061c06 qpn=33 psn=0x3913cf`), or of why it
/// is not one; `None` for packets not sent to QP1.
fn cm_summary(p: &RocePacket<'_>) -> Option<String> {
    use roce_wire::cm::{CmMessage, CmaHeader};
    if p.bth.dest_qp != roce_wire::mad::GSI_QPN || p.ext.deth.is_none() {
        return None;
    }
    let (_, m) = match CmMessage::parse_mad(p.payload) {
        Ok(x) => x,
        Err(e) => return Some(format!("unparsed ({e})")),
    };
    let mut s = m.name().to_string();
    let _ = match m {
        CmMessage::Req(r) => {
            let _ = write!(
                s,
                " comm={:#010x} svc={:#x} qpn={} psn={:#08x} mtu={} rd={}/{}",
                r.local_comm_id,
                r.service_id,
                r.local_qpn,
                r.starting_psn.value(),
                128u32 << r.path_mtu.min(5),
                r.responder_resources,
                r.initiator_depth
            );
            let _ = match CmaHeader::parse(r.private_data) {
                Ok(c) => write!(s, " ip={}:{} > {}", c.src, c.src_port, c.dst),
                Err(_) => Ok(()),
            };
            // The retry counts the REQ's sender asks for: its own QP's
            // retry_cnt, and the rnr_retry of the QP that accepts.
            write!(
                s,
                " retry={} rnr_retry={}",
                r.retry_count, r.rnr_retry_count
            )
        }
        // The rnr_retry of the QP that connected.
        CmMessage::Rep(r) => write!(
            s,
            " comm={:#010x} remote={:#010x} qpn={} psn={:#08x} rd={}/{} rnr_retry={}",
            r.local_comm_id,
            r.remote_comm_id,
            r.local_qpn,
            r.starting_psn.value(),
            r.responder_resources,
            r.initiator_depth,
            r.rnr_retry_count
        ),
        CmMessage::Rtu(r) | CmMessage::Drep(r) => write!(
            s,
            " comm={:#010x} remote={:#010x}",
            r.local_comm_id, r.remote_comm_id
        ),
        CmMessage::Rej(r) => write!(
            s,
            " comm={:#010x} remote={:#010x} reason={}",
            r.local_comm_id, r.remote_comm_id, r.reason
        ),
        CmMessage::Mra(r) => write!(
            s,
            " comm={:#010x} remote={:#010x} timeout={}",
            r.local_comm_id, r.remote_comm_id, r.service_timeout
        ),
        CmMessage::Dreq(r) => write!(
            s,
            " comm={:#010x} remote={:#010x} qpn={}",
            r.local_comm_id, r.remote_comm_id, r.remote_qpn
        ),
        CmMessage::SidrReq(r) => write!(s, " req={:#010x} svc={:#x}", r.request_id, r.service_id),
        CmMessage::SidrRep(r) => write!(
            s,
            " req={:#010x} status={} qpn={} qkey={:#010x}",
            r.request_id, r.status, r.qpn, r.qkey
        ),
    };
    Some(s)
}

/// The text line of a PAUSE / PFC frame.
pub(crate) fn mac_control_line(
    out: &mut String,
    index: u64,
    time: f64,
    src: Option<roce_wire::MacAddr>,
    ctrl: &MacControl,
) {
    let _ = write!(out, "{index} {time:.6} ");
    match src {
        Some(s) => {
            let _ = write!(out, "{s} > 01:80:c2:00:00:01");
        }
        None => out.push_str("? > 01:80:c2:00:00:01"),
    }
    match *ctrl {
        MacControl::Pause { quanta } => {
            let _ = write!(out, " PAUSE quanta={quanta}");
            if quanta == 0 {
                out.push_str(" (resume)");
            }
        }
        MacControl::Pfc { enable, quanta } => {
            out.push_str(" PFC");
            if enable == 0 {
                out.push_str(" (no class enabled)");
            }
            for (prio, q) in quanta.iter().enumerate() {
                if enable & (1 << prio) != 0 {
                    if *q == 0 {
                        let _ = write!(out, " prio{prio}=xon");
                    } else {
                        let _ = write!(out, " prio{prio}={q}");
                    }
                }
            }
        }
    }
}

/// A RoCE packet as JSON.
pub(crate) fn roce_json(
    index: u64,
    time: f64,
    p: &RocePacket<'_>,
    icrc_expected: u32,
    retx: bool,
) -> Value {
    let b = &p.bth;
    let op = b.opcode;
    let mut m = Map::new();
    m.insert("n".into(), json!(index));
    m.insert("time".into(), json!(time));
    m.insert("kind".into(), json!("roce"));
    m.insert("src".into(), json!(p.ip.src().to_string()));
    m.insert("sport".into(), json!(p.udp.src_port));
    m.insert("dst".into(), json!(p.ip.dst().to_string()));
    m.insert("dport".into(), json!(p.udp.dst_port));
    m.insert("dscp".into(), json!(p.ip.dscp()));
    m.insert("ecn".into(), json!(p.ip.ecn().name()));
    if let IpRepr::V4(v4) = p.ip {
        m.insert("ip_id".into(), json!(v4.ident));
    }
    if let Some(tag) = p.eth.and_then(|e| e.vlan) {
        m.insert(
            "vlan".into(),
            json!({"vid": tag.vid, "pcp": tag.pcp, "dei": tag.dei}),
        );
    }
    m.insert("transport".into(), json!(op.transport().name()));
    m.insert("opcode".into(), json!(op.name()));
    m.insert("opcode_value".into(), json!(op.value()));
    m.insert("qp".into(), json!(b.dest_qp.value()));
    m.insert("psn".into(), json!(b.psn.value()));
    m.insert("ackreq".into(), json!(b.ack_req));
    m.insert("se".into(), json!(b.solicited));
    m.insert("migreq".into(), json!(b.mig_req));
    m.insert("fecn".into(), json!(b.fecn));
    m.insert("becn".into(), json!(b.becn));
    m.insert("pkey".into(), json!(b.pkey.0));
    m.insert("pad".into(), json!(b.pad_count));
    m.insert("retransmission".into(), json!(retx));
    let e = &p.ext;
    if let Some(d) = e.deth {
        m.insert(
            "deth".into(),
            json!({"qkey": d.qkey.value(), "src_qp": d.src_qp.value()}),
        );
    }
    if let Some(f) = e.feth {
        m.insert(
            "feth".into(),
            json!({"placement_type": f.placement_type, "selectivity": f.selectivity}),
        );
    }
    if let Some(r) = e.reth {
        m.insert(
            "reth".into(),
            json!({"va": r.va, "rkey": r.rkey.value(), "dma_len": r.dma_len}),
        );
    }
    if let Some(a) = e.atomic {
        m.insert(
            "atomic".into(),
            json!({"va": a.va, "rkey": a.rkey.value(), "swap_add": a.swap_add, "compare": a.compare}),
        );
    }
    if let Some(a) = e.aeth {
        let (kind, detail) = match a.syndrome {
            Syndrome::Ack { credits } => ("ack", json!(credits)),
            Syndrome::RnrNak { timer } => (
                "rnr-nak",
                json!(roce_wire::aeth::RNR_TIMER_US[(timer & 31) as usize]),
            ),
            Syndrome::Nak(c) => ("nak", json!(c.name())),
            Syndrome::Reserved(v) => ("reserved", json!(v)),
        };
        m.insert(
            "aeth".into(),
            json!({"syndrome": a.syndrome.to_byte(), "type": kind, "detail": detail,
                   "text": a.syndrome.to_string(), "msn": a.msn.value()}),
        );
    }
    if let Some(v) = e.atomic_ack {
        m.insert("orig".into(), json!(v));
    }
    if let Some(v) = e.imm {
        m.insert("imm".into(), json!(v));
    }
    if let Some(k) = e.ieth {
        m.insert("inv_rkey".into(), json!(k.value()));
    }
    m.insert("payload".into(), json!(p.payload.len()));
    if let Some(cm) = cm_summary(p) {
        m.insert("cm".into(), json!(cm));
    }
    m.insert(
        "icrc".into(),
        json!(format!("{:08x}", icrc::display_value(p.icrc))),
    );
    m.insert("icrc_ok".into(), json!(icrc_expected == p.icrc));
    if icrc_expected != p.icrc {
        m.insert(
            "icrc_expected".into(),
            json!(format!("{:08x}", icrc::display_value(icrc_expected))),
        );
    }
    Value::Object(m)
}

/// A PAUSE / PFC frame as JSON.
pub(crate) fn mac_control_json(
    index: u64,
    time: f64,
    src: Option<roce_wire::MacAddr>,
    ctrl: &MacControl,
) -> Value {
    let src = src.map(|s| s.to_string());
    match *ctrl {
        MacControl::Pause { quanta } => {
            json!({"n": index, "time": time, "kind": "pause", "src": src, "quanta": quanta})
        }
        MacControl::Pfc { enable, quanta } => {
            json!({"n": index, "time": time, "kind": "pfc", "src": src,
                   "class_enable": enable, "quanta": quanta})
        }
    }
}
