//! Fuzzes the IB CM on QP1 through the engine. Two devices, A (10.0.0.1)
//! and B (10.0.0.2, listening for RC connections and UD service
//! resolution on port 7174); A starts a connection and a SIDR request at
//! the beginning of every input. The input is a sequence of records
//! `[tag, len_hi, len_lo, bytes...]`; by `tag % 8`:
//!
//! * 0: `bytes` as the 256-byte MAD of a well-formed QP1 datagram
//!   (UD SEND with DETH, built with roce_wire, valid ICRC) from A to B;
//! * 1: the same from B to A (so REPs, REJs, MRAs, DREQs reach the active
//!   side);
//! * 2: `bytes` as a raw datagram to B (no header rewriting);
//! * 3: the devices exchange what they have queued (one round each way),
//!   so real CM exchanges progress and the fuzzer mutates from there;
//! * 4: time advances by up to ~4.2 s (`bytes[0..2]` × 64 µs) and both
//!   devices handle their timeouts (retries, backlog and request expiry);
//! * 5: B's application answers every request it has seen: accept,
//!   reject or abandon (RC), accept or reject (UD), by `bytes[0]`;
//! * 6: B disconnects its established connections, or A disconnects its
//!   own, or A connects again, by `bytes[0]`;
//! * 7: A resolves another UD service (`bytes` as private data).
#![no_main]

use libfuzzer_sys::fuzz_target;
use roce_core::cm::{CmEvent, CmId, ConnParam};
use roce_core::*;
use roce_wire::{FrameRepr, IpRepr, RocePacket};

const PORT: u16 = 7174;
const MAD_LEN: usize = 256;

struct Host {
    dev: Device,
    pd: PdId,
    cq: CqId,
    qps: usize,
    /// Datagrams it transmitted, not yet delivered.
    out: Vec<Vec<u8>>,
    /// Requests its application has not answered (RC, UD).
    reqs: Vec<(CmId, bool)>,
    /// Its connections (ids) that reached Established.
    conns: Vec<CmId>,
}

impl Host {
    fn new(addr: &str) -> Host {
        let mut dev = Device::new(DeviceConfig::new(addr.parse().unwrap()));
        let pd = dev.alloc_pd();
        let cq = dev.create_cq(256);
        Host {
            dev,
            pd,
            cq,
            qps: 0,
            out: Vec::new(),
            reqs: Vec::new(),
            conns: Vec::new(),
        }
    }

    /// A new RC QP in INIT (at most 16 per input).
    fn qp(&mut self) -> Option<Qpn> {
        if self.qps >= 16 {
            return None;
        }
        self.qps += 1;
        let init = QpInitAttr {
            qp_type: QpType::Rc,
            pd: self.pd,
            send_cq: self.cq,
            recv_cq: self.cq,
            srq: None,
            cap: QpCaps::default(),
            sq_sig_all: false,
        };
        let q = self.dev.create_qp(init).ok()?;
        let a = QpAttr {
            qp_state: QpState::Init,
            qp_access_flags: Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ,
            ..QpAttr::default()
        };
        self.dev
            .modify_qp(
                q,
                &a,
                QpAttrMask::required(QpType::Rc, QpState::Reset, QpState::Init),
            )
            .ok()?;
        Some(q)
    }

    /// Collects what it transmits and what its application is told.
    fn poll(&mut self, now: u64) {
        let mut buf = vec![0u8; 4400];
        while let Some(t) = self.dev.poll_transmit(now, &mut buf).datagram() {
            if self.out.len() < 256 {
                self.out.push(buf[..t.size].to_vec());
            }
        }
        while let Some(e) = self.dev.poll_cm_event() {
            match e {
                CmEvent::ConnectRequest(r) => self.reqs.push((r.id, false)),
                CmEvent::UdRequest(r) => self.reqs.push((r.id, true)),
                CmEvent::Established { id, .. } => self.conns.push(id),
                _ => {}
            }
        }
        self.reqs.truncate(64);
        self.conns.truncate(64);
    }
}

fn connect(a: &mut Host, now: u64, private: &[u8]) {
    if let Some(q) = a.qp() {
        let p = ConnParam {
            private_data: private.iter().copied().take(32).collect(),
            ..ConnParam::default()
        };
        let _ = a
            .dev
            .cm_connect(now, q, "10.0.0.2".parse().unwrap(), PORT, &p);
    }
}

/// `mad` (padded or cut to 256 bytes) in the QP1 datagram `template`,
/// from `template`'s source to its destination or the other way.
fn qp1_datagram(template: &[u8], mad: &[u8], reverse: bool) -> Vec<u8> {
    let p = RocePacket::parse_ip(template).expect("the template parses");
    let mut payload = [0u8; MAD_LEN];
    let n = mad.len().min(MAD_LEN);
    payload[..n].copy_from_slice(&mad[..n]);
    let mut repr: FrameRepr<'_> = p.to_repr();
    repr.payload = &payload;
    if reverse {
        if let IpRepr::V4(v4) = &mut repr.ip {
            std::mem::swap(&mut v4.src, &mut v4.dst);
        }
    }
    let mut buf = vec![0u8; repr.len()];
    let n = repr.emit(&mut buf).expect("a QP1 datagram emits");
    buf.truncate(n);
    buf
}

fuzz_target!(|data: &[u8]| {
    let mut a = Host::new("10.0.0.1");
    let mut b = Host::new("10.0.0.2");
    b.dev.cm_listen_backlog(PORT, 8).unwrap();
    b.dev.cm_listen_ud(PORT).unwrap();
    let mut now = 1_000u64;
    connect(&mut a, now, b"fuzz");
    let _ = a
        .dev
        .cm_resolve_ud(now, "10.0.0.2".parse().unwrap(), PORT, b"sidr");
    a.poll(now);
    // The REQ's datagram: the template of every fuzzed MAD.
    let template = a.out.first().cloned().expect("the REQ was sent");

    let mut rest = data;
    let mut steps = 0;
    while rest.len() >= 3 && steps < 256 {
        steps += 1;
        let tag = rest[0];
        let n = (u16::from_be_bytes([rest[1], rest[2]]) as usize).min(rest.len() - 3);
        let bytes = &rest[3..3 + n];
        rest = &rest[3 + n..];
        let b0 = bytes.first().copied().unwrap_or(0);
        match tag % 8 {
            0 => {
                let d = qp1_datagram(&template, bytes, false);
                let _ = b.dev.handle_datagram(now, &d, RxMeta::exact());
            }
            1 => {
                let d = qp1_datagram(&template, bytes, true);
                let _ = a.dev.handle_datagram(now, &d, RxMeta::exact());
            }
            2 => {
                let _ = b.dev.handle_datagram(now, bytes, RxMeta::inexact());
            }
            3 => {
                for d in std::mem::take(&mut a.out) {
                    b.dev.handle_datagram(now, &d, RxMeta::exact());
                }
                for d in std::mem::take(&mut b.out) {
                    a.dev.handle_datagram(now, &d, RxMeta::exact());
                }
            }
            4 => {
                let dt = u64::from(u16::from_be_bytes([b0, bytes.get(1).copied().unwrap_or(0)]));
                now += dt * 64_000 + 1;
                for h in [&mut a, &mut b] {
                    if h.dev.poll_timeout().is_some_and(|t| t <= now) {
                        h.dev.handle_timeout(now);
                    }
                }
            }
            5 => {
                for (id, ud) in std::mem::take(&mut b.reqs) {
                    match (ud, b0 % 3) {
                        (false, 0) => {
                            if let Some(q) = b.qp() {
                                let _ = b.dev.cm_accept(now, id, q, &ConnParam::default());
                            }
                        }
                        (false, 1) => {
                            let _ = b.dev.cm_reject(id, bytes);
                        }
                        (false, _) => b.dev.cm_abandon(id),
                        (true, 0) => {
                            let _ = b.dev.cm_accept_ud(id, Qpn::new(0x23), 0x1234);
                        }
                        (true, _) => {
                            let _ = b.dev.cm_reject_ud(id);
                        }
                    }
                }
            }
            6 => match b0 % 3 {
                0 => {
                    for id in std::mem::take(&mut b.conns) {
                        let _ = b.dev.cm_disconnect(now, id);
                    }
                }
                1 => {
                    for id in std::mem::take(&mut a.conns) {
                        let _ = a.dev.cm_disconnect(now, id);
                    }
                }
                _ => connect(&mut a, now, bytes),
            },
            _ => {
                let pd: Vec<u8> = bytes.iter().copied().take(64).collect();
                let _ = a
                    .dev
                    .cm_resolve_ud(now, "10.0.0.2".parse().unwrap(), PORT, &pd);
            }
        }
        a.poll(now);
        b.poll(now);
    }
    let _ = (a.dev.cm_counters(), b.dev.cm_counters());
});
