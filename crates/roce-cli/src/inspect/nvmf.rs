//! NVMe over Fabrics in captures: connections to the NVMe-oF port 4420
//! are followed from the CM's REQ and REP (rdma_cm's TCP port space,
//! service ID 0x1060000 + port), and the SENDs on them decoded as command
//! capsules (to the target's QP) or response capsules (to the host's),
//! with `roce_nvmf::wire::describe` (docs/nvmf.md).

use std::collections::BTreeMap;
use std::net::IpAddr;

use roce_nvmf::wire::describe;
use roce_wire::cm::{CmMessage, CMA_HEADER_LEN};
use roce_wire::{Operation, RocePacket};

/// rdma_cm's TCP port space in a service ID (bits 16..32).
const PS_TCP: u64 = 0x0106;
/// The NVMe-oF RDMA port.
const NVMF_PORT: u64 = 4420;
/// Connections followed at most per file.
const MAX_TRACKED: usize = 4096;

/// Which side of a queue a QP is, and its queue ID.
#[derive(Clone, Copy, Debug)]
struct Side {
    qid: u16,
    target: bool,
}

/// The NVMe-oF connections seen so far in one capture.
#[derive(Default)]
pub(crate) struct Tracker {
    /// REQ communication ID -> (host address, host QPN, QID).
    pending: BTreeMap<u32, (IpAddr, u32, u16)>,
    /// (address, QPN) -> side.
    qps: BTreeMap<(IpAddr, u32), Side>,
}

impl Tracker {
    /// Learns from CM messages; returns a description of the NVMe-oF
    /// private data of a REQ/REP/REJ on the NVMe-oF port.
    pub(crate) fn observe(&mut self, p: &RocePacket<'_>) -> Option<String> {
        if p.bth.dest_qp != roce_wire::mad::GSI_QPN || p.ext.deth.is_none() {
            return None;
        }
        let (_, m) = CmMessage::parse_mad(p.payload).ok()?;
        match m {
            CmMessage::Req(r)
                if r.service_id >> 16 == PS_TCP && r.service_id & 0xFFFF == NVMF_PORT =>
            {
                let pd = r.private_data.get(CMA_HEADER_LEN..).unwrap_or(&[]);
                let qid = roce_nvmf::wire::cm::CmRequest::parse(pd)
                    .map(|c| c.qid.0)
                    .ok()?;
                if self.pending.len() < MAX_TRACKED {
                    self.pending
                        .insert(r.local_comm_id, (p.ip.src(), r.local_qpn.value(), qid));
                }
                Some(describe::cm_request(pd))
            }
            CmMessage::Rep(r) => {
                let (host, host_qpn, qid) = self.pending.remove(&r.remote_comm_id)?;
                if self.qps.len() < MAX_TRACKED {
                    self.qps
                        .insert((host, host_qpn), Side { qid, target: false });
                    self.qps.insert(
                        (p.ip.src(), r.local_qpn.value()),
                        Side { qid, target: true },
                    );
                }
                Some(describe::cm_accept(r.private_data))
            }
            CmMessage::Rej(r) => {
                self.pending.remove(&r.remote_comm_id)?;
                Some(describe::cm_reject(r.private_data))
            }
            _ => None,
        }
    }

    /// Describes the capsule a SEND on a followed connection starts.
    pub(crate) fn capsule(&self, p: &RocePacket<'_>) -> Option<String> {
        let side = self.qps.get(&(p.ip.dst(), p.bth.dest_qp.value()))?;
        let op = p.bth.opcode.operation();
        let only = matches!(op, Operation::SendOnly | Operation::SendOnlyInv);
        if !only && op != Operation::SendFirst {
            return None;
        }
        let d = if side.target {
            // The first packet of a longer capsule: the SQE only.
            let b = if only {
                p.payload
            } else {
                p.payload.get(..64)?
            };
            describe::command(b, side.qid == 0)
        } else {
            describe::response(p.payload)
        };
        Some(format!(
            "qid={} {}",
            side.qid,
            d.unwrap_or_else(|| "not a capsule".into())
        ))
    }
}
