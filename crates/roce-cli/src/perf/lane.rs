//! The QPs the traffic loops drive ([`super::traffic`]): a [`Lane`] is
//! one QP and its part of a registered region, in perftest's layout
//! ([`DataQps`]: a region per QP, one CQ for all) or roce perf's (one
//! region with a slot per QP, `setup.rs`).

use roce_verbs::{
    Access, Completion, CompletionQueue, MemoryRegion, QpCaps, QpInitAttr, QpType, Qpn, QueuePair,
    RecvWr,
};

use super::error::PerfError;
use super::perftest_plan::Plan;
use super::report;

/// Receive buffers per QP at most (as perftest's default rx depth).
const MAX_RING: u64 = 512;
/// Memory for one QP's receive ring at most, unless two messages need more.
const RING_BYTES: u64 = 16 << 20;

/// One QP and the part of a registered region it uses: the area the
/// peer writes, reads or adds to at `target`, this side's source (or
/// READ destination) at `source`, and for SEND tests a ring of receive
/// buffers of `ring_bytes` at `ring`. perftest's layout ([`DataQp`]) and
/// roce perf's (one region, a slot per QP: `setup.rs`) are both lanes.
#[derive(Clone, Copy)]
pub(crate) struct Lane<'a> {
    pub(crate) mr: &'a MemoryRegion,
    pub(crate) cq: &'a CompletionQueue,
    pub(crate) qp: &'a QueuePair,
    pub(crate) target: u64,
    pub(crate) source: u64,
    pub(crate) ring: u64,
    pub(crate) ring_bytes: u64,
    /// Receives the QP can hold at once (besides a few spare).
    pub(crate) slots: u64,
}

impl Lane<'_> {
    /// Receive buffers of `size` bytes the ring holds for `iters` messages.
    pub(crate) fn ring_slots(&self, size: u64, iters: u64) -> u64 {
        iters
            .min(self.slots)
            .min(MAX_RING)
            .min(self.ring_bytes / size.max(1))
    }

    /// Posts the ring's receives for messages of `size`; their number.
    pub(crate) fn post_ring(&self, size: u64, iters: u64) -> Result<u64, PerfError> {
        let slots = self.ring_slots(size, iters);
        for j in 0..slots {
            self.repost(j, size)?;
        }
        Ok(slots)
    }

    /// Posts ring buffer `slot` again (its WR id is the slot).
    pub(crate) fn repost(&self, slot: u64, size: u64) -> Result<(), PerfError> {
        let wr = RecvWr {
            wr_id: slot,
            sgl: [self.mr.sge(self.ring + slot * size, size as u32)]
                .into_iter()
                .collect(),
        };
        self.qp.post_recv(wr).map_err(super::during("post_recv"))
    }

    /// Offset of ring buffer `slot` for messages of `size`.
    pub(crate) fn slot_at(&self, slot: u64, size: u64) -> u64 {
        self.ring + slot * size
    }

    /// Polls the CQ; fails on an unsuccessful completion.
    pub(crate) fn poll(&self, comps: &mut Vec<Completion>) -> Result<(), PerfError> {
        poll(self.cq, comps)
    }
}

/// Polls `cq` for up to 256 completions; fails on an unsuccessful one.
fn poll(cq: &CompletionQueue, comps: &mut Vec<Completion>) -> Result<(), PerfError> {
    comps.clear();
    cq.poll(comps, 256)?;
    match comps.iter().find(|c| !c.is_success()) {
        Some(c) => Err(PerfError::Failed(report::failed(c))),
        None => Ok(()),
    }
}

/// The CQs of a set of lanes, each once (lanes may share one, as
/// perftest's QPs share its send and receive CQs), and which lane each
/// completion belongs to: a BW loop polls every CQ once a round rather
/// than once per QP, since an empty poll steps the engine and may yield
/// the CPU.
pub(crate) struct CqSet<'a> {
    cqs: Vec<&'a CompletionQueue>,
    /// (QP number, lane index), sorted by QP number.
    route: Vec<(Qpn, usize)>,
}

impl<'a> CqSet<'a> {
    pub(crate) fn new(lanes: &[Lane<'a>]) -> CqSet<'a> {
        let mut cqs: Vec<&CompletionQueue> = Vec::new();
        for l in lanes {
            if !cqs.iter().any(|c| std::ptr::eq(*c, l.cq)) {
                cqs.push(l.cq);
            }
        }
        let mut route: Vec<(Qpn, usize)> = lanes
            .iter()
            .enumerate()
            .map(|(i, l)| (l.qp.qpn(), i))
            .collect();
        route.sort_unstable_by_key(|&(q, _)| q);
        CqSet { cqs, route }
    }

    /// Polls every CQ once; calls `each(lane index, completion)` for
    /// what they held. A completion of a QP that is no lane's fails.
    pub(crate) fn poll(
        &self,
        comps: &mut Vec<Completion>,
        mut each: impl FnMut(usize, &Completion) -> Result<(), PerfError>,
    ) -> Result<bool, PerfError> {
        let mut any = false;
        for cq in &self.cqs {
            poll(cq, comps)?;
            for c in comps.iter() {
                any = true;
                let q = c.qp_num();
                let i = self
                    .route
                    .binary_search_by_key(&q, |&(n, _)| n)
                    .map_err(|_| {
                        PerfError::Failed(format!(
                            "a completion of QP {q}, which this test did not create"
                        ))
                    })?;
                each(self.route[i].1, c)?;
            }
        }
        Ok(any)
    }
}

/// One data QP of perftest's layout and its region: the peer's target
/// at `[0, area)`, our source at `[area, 2 area)` and, for SEND tests, a
/// ring of receive buffers of `ring_bytes` after them.
pub(crate) struct DataQp {
    pub(crate) mr: MemoryRegion,
    pub(crate) qp: QueuePair,
    pub(crate) area: u64,
    pub(crate) ring_bytes: u64,
    /// Receives the QP holds at once.
    pub(crate) slots: u64,
}

/// perftest's data QPs (one per `-q`) and the CQ they share, as
/// perftest's QPs share its send and receive CQs.
pub(crate) struct DataQps {
    pub(crate) cq: CompletionQueue,
    pub(crate) qps: Vec<DataQp>,
}

impl DataQps {
    /// The plan's QPs, each with room for its largest message.
    pub(crate) fn create(ctx: &roce_verbs::Context, p: &Plan) -> Result<DataQps, PerfError> {
        let max = p.max_size();
        let ring_bytes = if p.is_send {
            (p.iters.min(MAX_RING) * max).min(RING_BYTES).max(2 * max)
        } else {
            0
        };
        let slots = if p.is_send { MAX_RING.min(p.iters) } else { 0 };
        let area = max.max(4096);
        let per_qp = (p.tx_depth + slots) as usize * 2 + 64;
        let cq = ctx.create_cq((per_qp * p.qps).min(4 << 20), None)?;
        let access = Access::LOCAL_WRITE
            | Access::REMOTE_WRITE
            | Access::REMOTE_READ
            | Access::REMOTE_ATOMIC;
        let cap = QpCaps {
            max_send_wr: p.tx_depth as u32 + 16,
            max_recv_wr: slots as u32 + 16,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 256,
        };
        let mut qps = Vec::with_capacity(p.qps);
        for _ in 0..p.qps {
            let pd = ctx.alloc_pd();
            let mr = pd
                .reg_mr(vec![0u8; (2 * area + ring_bytes) as usize], access)
                .map_err(super::during("cannot register memory"))?;
            let qp = pd
                .create_qp(&QpInitAttr::new(QpType::Rc, &cq, &cq).cap(cap))
                .map_err(super::during("cannot create a QP"))?;
            qps.push(DataQp {
                mr,
                qp,
                area,
                ring_bytes,
                slots,
            });
        }
        Ok(DataQps { cq, qps })
    }

    /// The QPs as the traffic loops use them.
    pub(crate) fn lanes(&self) -> Vec<Lane<'_>> {
        self.qps
            .iter()
            .map(|d| Lane {
                mr: &d.mr,
                cq: &self.cq,
                qp: &d.qp,
                target: 0,
                source: d.area,
                ring: 2 * d.area,
                ring_bytes: d.ring_bytes,
                slots: d.slots,
            })
            .collect()
    }
}
