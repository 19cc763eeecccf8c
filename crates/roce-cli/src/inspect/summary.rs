//! Per-QP statistics for `roce inspect`.

use std::collections::{BTreeMap, HashMap};
use std::io::{self, Write};
use std::net::IpAddr;

use roce_wire::{Ecn, MessageKind, Psn, RocePacket, Syndrome};

/// A direction of traffic to one QP: source address, destination address
/// and destination QP.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct FlowKey {
    pub(crate) src: IpAddr,
    pub(crate) dst: IpAddr,
    pub(crate) qp: u32,
}

/// Counters of one flow.
#[derive(Clone, Debug, Default)]
pub(crate) struct FlowStats {
    pub(crate) first_seen: u64,
    pub(crate) packets: u64,
    pub(crate) payload_bytes: u64,
    /// Messages started, by operation (retransmissions not counted).
    pub(crate) messages: BTreeMap<&'static str, u64>,
    pub(crate) retransmitted: u64,
    pub(crate) acks: u64,
    pub(crate) naks: BTreeMap<&'static str, u64>,
    pub(crate) rnr_naks: u64,
    pub(crate) cnps: u64,
    pub(crate) ce_marked: u64,
    pub(crate) icrc_bad: u64,
    /// PSNs of the message starts seen: a message whose first packet was
    /// lost starts with a retransmission, and still counts once.
    starts: std::collections::HashSet<u32>,
    /// Highest PSN seen of requests (this flow's sender's send queue).
    highest_request: Option<Psn>,
    /// Highest PSN seen of READ responses (the receiver's send queue).
    highest_response: Option<Psn>,
}

impl FlowStats {
    fn total_naks(&self) -> u64 {
        self.naks.values().sum()
    }
}

/// True when `psn` is not beyond `highest` (a retransmission), updating
/// `highest` otherwise.
fn seen_before(highest: &mut Option<Psn>, psn: Psn) -> bool {
    match highest {
        Some(h) if psn.diff(*h) <= 0 => true,
        _ => {
            *highest = Some(psn);
            false
        }
    }
}

/// All flows of one capture.
#[derive(Default)]
pub(crate) struct Summary {
    flows: HashMap<FlowKey, FlowStats>,
    pub(crate) roce_packets: u64,
    pub(crate) icrc_bad: u64,
    pub(crate) malformed: u64,
    pub(crate) mac_control: u64,
    pub(crate) other: u64,
    /// Frames the capture cut short (its snap length): not checkable.
    pub(crate) truncated: u64,
    /// Frames whose UDP checksum did not verify, decoded with it ignored
    /// (loopback captures leave it unfinished; Wireshark ignores it too).
    pub(crate) udp_checksum_ignored: u64,
    /// GSO batches split into their RoCE packets, and those packets.
    pub(crate) gso_batches: u64,
    pub(crate) gso_packets: u64,
}

impl Summary {
    /// Accounts one RoCE packet; returns whether it was a retransmission.
    pub(crate) fn add(&mut self, p: &RocePacket<'_>, icrc_ok: bool) -> bool {
        self.roce_packets += 1;
        if !icrc_ok {
            self.icrc_bad += 1;
        }
        let key = FlowKey {
            src: p.ip.src(),
            dst: p.ip.dst(),
            qp: p.bth.dest_qp.value(),
        };
        let order = self.flows.len() as u64;
        let f = self.flows.entry(key).or_insert_with(|| FlowStats {
            first_seen: order,
            ..Default::default()
        });
        f.packets += 1;
        f.payload_bytes += p.payload.len() as u64;
        if p.ip.ecn() == Ecn::Ce {
            f.ce_marked += 1;
        }
        if !icrc_ok {
            f.icrc_bad += 1;
        }
        let op = p.bth.opcode;
        let kind = op.kind();
        let mut retx = false;
        match kind {
            MessageKind::Cnp => f.cnps += 1,
            MessageKind::Ack | MessageKind::AtomicAck => {}
            MessageKind::ReadResponse => retx = seen_before(&mut f.highest_response, p.bth.psn),
            // UD and UC have no retransmission; a repeated PSN there is
            // still worth flagging, so they are treated alike.
            _ => retx = seen_before(&mut f.highest_request, p.bth.psn),
        }
        if retx {
            f.retransmitted += 1;
        }
        if kind.is_request() && op.position().starts() && f.starts.insert(p.bth.psn.value()) {
            *f.messages.entry(kind.name()).or_default() += 1;
        }
        if let Some(aeth) = p.ext.aeth {
            match aeth.syndrome {
                Syndrome::Ack { .. }
                    if matches!(kind, MessageKind::Ack | MessageKind::AtomicAck) =>
                {
                    f.acks += 1
                }
                Syndrome::Ack { .. } => {}
                Syndrome::RnrNak { .. } => f.rnr_naks += 1,
                Syndrome::Nak(code) => *f.naks.entry(code.name()).or_default() += 1,
                Syndrome::Reserved(_) => *f.naks.entry("reserved").or_default() += 1,
            }
        }
        retx
    }

    /// Flows in order of first appearance.
    pub(crate) fn flows(&self) -> Vec<(&FlowKey, &FlowStats)> {
        let mut v: Vec<_> = self.flows.iter().collect();
        v.sort_by_key(|(_, s)| s.first_seen);
        v
    }

    /// Writes the table.
    pub(crate) fn write_table(&self, out: &mut impl Write) -> io::Result<()> {
        writeln!(out)?;
        writeln!(
            out,
            "{:<34} {:>8} {:>8} {:>11} {:<24} {:>6} {:>6} {:<18} {:>4} {:>4} {:>5} {:>4}",
            "flow (src > dst)",
            "qp",
            "packets",
            "payload",
            "messages",
            "retx",
            "acks",
            "naks",
            "rnr",
            "cnp",
            "ce",
            "icrc"
        )?;
        for (k, s) in self.flows() {
            let flow = format!("{} > {}", k.src, k.dst);
            let msgs = join_counts(&s.messages);
            let naks = if s.total_naks() == 0 {
                "0".to_string()
            } else {
                join_counts(&s.naks)
            };
            writeln!(
                out,
                "{:<34} {:>#8x} {:>8} {:>11} {:<24} {:>6} {:>6} {:<18} {:>4} {:>4} {:>5} {:>4}",
                flow,
                k.qp,
                s.packets,
                s.payload_bytes,
                if msgs.is_empty() {
                    "-".to_string()
                } else {
                    msgs
                },
                s.retransmitted,
                s.acks,
                naks,
                s.rnr_naks,
                s.cnps,
                s.ce_marked,
                s.icrc_bad
            )?;
        }
        write!(
            out,
            "\n{} RoCE packets in {} flows, {} ICRC failures, {} malformed, {} PAUSE/PFC frames, {} other frames skipped",
            self.roce_packets,
            self.flows.len(),
            self.icrc_bad,
            self.malformed,
            self.mac_control,
            self.other
        )?;
        if self.truncated > 0 {
            write!(
                out,
                ", {} cut short by the capture's snap length",
                self.truncated
            )?;
        }
        if self.gso_batches > 0 {
            write!(
                out,
                ", {} GSO batches split into {} packets",
                self.gso_batches, self.gso_packets
            )?;
        }
        if self.udp_checksum_ignored > 0 {
            write!(
                out,
                "; {} UDP checksums did not verify and were ignored, as Wireshark does (a capture on lo leaves them unfinished; the ICRC covers the packet)",
                self.udp_checksum_ignored
            )?;
        }
        writeln!(out)
    }

    /// The summary as JSON.
    pub(crate) fn to_json(&self) -> serde_json::Value {
        let flows: Vec<_> = self
            .flows()
            .into_iter()
            .map(|(k, s)| {
                serde_json::json!({
                    "src": k.src.to_string(),
                    "dst": k.dst.to_string(),
                    "qp": k.qp,
                    "packets": s.packets,
                    "payload_bytes": s.payload_bytes,
                    "messages": s.messages,
                    "retransmitted": s.retransmitted,
                    "acks": s.acks,
                    "naks": s.naks,
                    "rnr_naks": s.rnr_naks,
                    "cnps": s.cnps,
                    "ce_marked": s.ce_marked,
                    "icrc_failures": s.icrc_bad,
                })
            })
            .collect();
        serde_json::json!({
            "summary": {
                "roce_packets": self.roce_packets,
                "icrc_failures": self.icrc_bad,
                "malformed": self.malformed,
                "mac_control": self.mac_control,
                "other": self.other,
                "truncated": self.truncated,
                "udp_checksum_ignored": self.udp_checksum_ignored,
                "gso_batches": self.gso_batches,
                "gso_packets": self.gso_packets,
                "flows": flows,
            }
        })
    }
}

fn join_counts(m: &BTreeMap<&'static str, u64>) -> String {
    let mut s = String::new();
    for (k, v) in m {
        if !s.is_empty() {
            s.push(' ');
        }
        s.push_str(k);
        s.push('=');
        s.push_str(&v.to_string());
    }
    s
}
