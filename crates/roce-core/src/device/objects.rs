//! The verbs objects of a device: protection domains, memory regions,
//! CQs, SRQs and QPs, their create / destroy calls, and the posts.

use std::collections::VecDeque;

use roce_wire::Qpn;

use super::{Device, VerbsError};
use crate::cc::{CcCounters, QpCc};
use crate::counters::QpCounters;
use crate::cq::{Cq, CqId, CqOverflow};
use crate::mr::{Access, MrKeys, PdId, RegionMemory};
use crate::qp::state::{QpAttrMask, QpState};
use crate::qp::{Ctx, PostError, Qp, QpAttr, QpInitAttr};
use crate::srq::{Srq, SrqId};
use crate::wc::Wc;
use crate::wr::{RecvWr, SendWr};

/// Most QPs one device holds.
const MAX_QPS: usize = 1 << 20;

/// QPNs [`Device::create_qp_with`]'s `accept` may refuse for one QP
/// before the creation fails.
pub(crate) const MAX_QPN_REFUSALS: u32 = 64;

impl Device {
    /// `ibv_alloc_pd`.
    pub fn alloc_pd(&mut self) -> PdId {
        let pd = PdId(self.next_pd);
        self.next_pd += 1;
        pd
    }

    /// `ibv_reg_mr`: registers `mem` as the bytes at `va`.
    pub fn reg_mr(
        &mut self,
        pd: PdId,
        va: u64,
        mem: Box<dyn RegionMemory>,
        access: Access,
    ) -> Result<MrKeys, VerbsError> {
        self.mrs
            .register(pd, va, mem, access)
            .map_err(VerbsError::Access)
    }

    /// Registers a region that the peer may invalidate with a SEND with
    /// Invalidate: the model of a fast-registered region (`ibv_alloc_mr`
    /// and `IBV_WR_REG_MR`). Regions from [`Device::reg_mr`] cannot be
    /// invalidated remotely (IBTA Vol 1 §10.6.3.6).
    pub fn reg_mr_invalidatable(
        &mut self,
        pd: PdId,
        va: u64,
        mem: Box<dyn RegionMemory>,
        access: Access,
    ) -> Result<MrKeys, VerbsError> {
        self.mrs
            .register_invalidatable(pd, va, mem, access)
            .map_err(VerbsError::Access)
    }

    /// Revokes a region ([`MrTable::revoke`]): no access reaches its
    /// memory any more. False when it is not registered.
    ///
    /// [`MrTable::revoke`]: crate::MrTable::revoke
    pub fn revoke_mr(&mut self, keys: MrKeys) -> bool {
        self.mrs.revoke(keys.lkey)
    }

    /// `ibv_rereg_mr`: changes a region in place, keeping its keys
    /// ([`MrTable::reregister`]); hands back the old memory when
    /// `translation` replaced it.
    ///
    /// [`MrTable::reregister`]: crate::MrTable::reregister
    pub fn rereg_mr(
        &mut self,
        keys: MrKeys,
        pd: Option<PdId>,
        access: Option<Access>,
        translation: Option<(u64, Box<dyn RegionMemory>)>,
    ) -> Result<Option<Box<dyn RegionMemory>>, VerbsError> {
        self.mrs
            .reregister(keys.lkey, pd, access, translation)
            .map_err(VerbsError::Access)
    }

    /// `ibv_dereg_mr`: hands the memory back.
    pub fn dereg_mr(&mut self, keys: MrKeys) -> Result<Box<dyn RegionMemory>, VerbsError> {
        self.mrs.deregister(keys.lkey).ok_or(VerbsError::NotFound)
    }

    /// Reads registered memory (what the application sees of its buffer).
    pub fn mr_read(
        &self,
        keys: MrKeys,
        pd: PdId,
        va: u64,
        out: &mut [u8],
    ) -> Result<(), VerbsError> {
        let span = self
            .mrs
            .check(keys.lkey.value(), pd, va, out.len() as u64, Access::NONE)
            .map_err(VerbsError::Access)?;
        self.mrs.read(span, 0, out).map_err(VerbsError::Access)
    }

    /// Writes registered memory from the application side.
    pub fn mr_write(
        &mut self,
        keys: MrKeys,
        pd: PdId,
        va: u64,
        data: &[u8],
    ) -> Result<(), VerbsError> {
        let span = self
            .mrs
            .check(keys.lkey.value(), pd, va, data.len() as u64, Access::NONE)
            .map_err(VerbsError::Access)?;
        self.mrs.write(span, 0, data).map_err(VerbsError::Access)
    }

    /// `ibv_create_cq`.
    pub fn create_cq(&mut self, cqe: usize) -> CqId {
        self.cqs.push(Some(Cq::new(cqe.max(1))));
        CqId(self.cqs.len() as u32 - 1)
    }

    /// The CQ object (to arm notifications, inspect its state).
    pub fn cq(&mut self, cq: CqId) -> Option<&mut Cq> {
        self.cqs.get_mut(cq.0 as usize).and_then(|c| c.as_mut())
    }

    /// `ibv_resize_cq`: the CQ holds `cqe` completions from now on;
    /// refused while more than that are waiting ([`Cq::resize`]).
    pub fn resize_cq(&mut self, cq: CqId, cqe: usize) -> Result<(), VerbsError> {
        self.cq(cq).ok_or(VerbsError::NotFound)?.resize(cqe)
    }

    /// `ibv_poll_cq`.
    pub fn poll_cq(&mut self, cq: CqId, out: &mut [Wc]) -> Result<usize, CqOverflow> {
        match self.cq(cq) {
            Some(c) => c.poll(out),
            None => Ok(0),
        }
    }

    /// `ibv_destroy_cq`: refused while a QP uses it.
    pub fn destroy_cq(&mut self, cq: CqId) -> Result<(), VerbsError> {
        if self
            .qps
            .values()
            .any(|q| q.common.init.send_cq == cq || q.common.init.recv_cq == cq)
        {
            return Err(VerbsError::Busy);
        }
        self.cqs
            .get_mut(cq.0 as usize)
            .and_then(|c| c.take())
            .map(|_| ())
            .ok_or(VerbsError::NotFound)
    }

    /// `ibv_create_srq`.
    pub fn create_srq(&mut self, pd: PdId, max_wr: usize) -> SrqId {
        self.srqs.push(Some(Srq::new(pd, max_wr)));
        SrqId(self.srqs.len() as u32 - 1)
    }

    /// The SRQ object (to set its limit).
    pub fn srq(&mut self, srq: SrqId) -> Option<&mut Srq> {
        self.srqs.get_mut(srq.0 as usize).and_then(|s| s.as_mut())
    }

    /// `ibv_destroy_srq`: refused while a QP uses it; returns the receives
    /// still posted, so their buffers can be released.
    pub fn destroy_srq(&mut self, srq: SrqId) -> Result<Vec<RecvWr>, VerbsError> {
        if self.qps.values().any(|q| q.common.init.srq == Some(srq)) {
            return Err(VerbsError::Busy);
        }
        let mut s = self
            .srqs
            .get_mut(srq.0 as usize)
            .and_then(|s| s.take())
            .ok_or(VerbsError::NotFound)?;
        let mut left = Vec::with_capacity(s.len());
        while let Some(wr) = s.take() {
            left.push(wr);
        }
        Ok(left)
    }

    /// `ibv_post_srq_recv`.
    pub fn post_srq_recv(&mut self, srq: SrqId, wr: RecvWr) -> Result<(), PostError> {
        let s = self.srq(srq).ok_or(PostError::NoSuchObject)?;
        if wr.sgl.len() > crate::srq::MAX_SRQ_SGE {
            return Err(PostError::TooManySge);
        }
        if s.post(wr) {
            Ok(())
        } else {
            Err(PostError::QueueFull)
        }
    }

    /// `ibv_create_qp`: a new QP in RESET.
    pub fn create_qp(&mut self, init: QpInitAttr) -> Result<Qpn, VerbsError> {
        self.create_qp_with(init, |_| true)
    }

    /// `ibv_create_qp` on a device whose addresses other processes share
    /// (docs/host.md: "QP creation claims the QPN before the QP exists"):
    /// as [`Device::create_qp`], with each QPN drawn offered to `accept`
    /// (which claims it in the host table), and another drawn while it
    /// says no. The QPNs stay random and unpredictable (a QPN is drawn
    /// from the device's CSPRNG each time, never derived from a refused
    /// one).
    ///
    /// `accept` is called only once every other check has passed, and a
    /// QPN it accepts becomes the QP's: nothing fails after it (so a claim
    /// it made is never left without a QP). After 64 refusals for one QP
    /// the creation fails with [`VerbsError::Busy`] (the QPN space is
    /// taken, or the host table refuses claims: resource exhaustion);
    /// no QP is made.
    pub fn create_qp_with(
        &mut self,
        init: QpInitAttr,
        mut accept: impl FnMut(Qpn) -> bool,
    ) -> Result<Qpn, VerbsError> {
        if self
            .cqs
            .get(init.send_cq.0 as usize)
            .is_none_or(|c| c.is_none())
            || self
                .cqs
                .get(init.recv_cq.0 as usize)
                .is_none_or(|c| c.is_none())
        {
            return Err(VerbsError::NotFound);
        }
        if let Some(s) = init.srq {
            if self.srqs.get(s.0 as usize).is_none_or(|x| x.is_none()) {
                return Err(VerbsError::NotFound);
            }
        }
        if init.cap.max_inline_data > 4096 {
            return Err(VerbsError::InvalidArgument("max_inline_data above 4096"));
        }
        if self.qps.len() >= MAX_QPS {
            return Err(VerbsError::InvalidArgument("too many QPs"));
        }
        let qpn = (0..MAX_QPN_REFUSALS)
            .map(|_| self.fresh_qpn())
            .find(|&q| accept(Qpn::new(q)))
            .ok_or(VerbsError::Busy)?;
        let mut qp = Qp::new(Qpn::new(qpn), init);
        qp.common.attr.path_mtu = self.config.active_mtu;
        // The starting PSN until the application sets its own: random.
        qp.common.attr.sq_psn = self.ids.psn();
        qp.common.cc = QpCc::new(&self.config.cc, self.config.link_bps);
        self.qps.insert(qpn, qp);
        Ok(Qpn::new(qpn))
    }

    /// A QPN drawn at random (IBTA Vol 1 §10.2.4.1 leaves the choice to
    /// the channel adapter): not 0 or 1 (the special QPs), not below 16
    /// (rxe's reserved range), not 0xFFFFFF (the multicast QPN, §10.8.1),
    /// not live and not destroyed recently (a peer of the old QP may still
    /// send to it).
    fn fresh_qpn(&mut self) -> u32 {
        loop {
            let q = self.ids.u32() & 0xff_ffff;
            if q >= 16
                && q != 0xff_ffff
                && !self.qps.contains_key(&q)
                && !self.retired_qpns.contains(&q)
            {
                return q;
            }
        }
    }

    /// A random 24-bit PSN from the device's CSPRNG, for an application
    /// (or the CM) to start a connection with (IBTA Vol 1 §9.7.1).
    pub fn random_psn(&mut self) -> roce_wire::Psn {
        self.ids.psn()
    }

    /// A random 64-bit value from the device's CSPRNG, for the API layer
    /// (the virtual addresses of the regions it owns).
    pub fn random_u64(&mut self) -> u64 {
        self.ids.u64()
    }

    /// `ibv_destroy_qp`.
    pub fn destroy_qp(&mut self, qpn: Qpn) -> Result<(), VerbsError> {
        let mut qp = self.qps.remove(&qpn.value()).ok_or(VerbsError::NotFound)?;
        self.retired_qpns.retire(qpn.value());
        let mut ctx = ctx!(self, 0);
        keep_farewell(&mut self.farewell, &mut qp, &mut ctx);
        qp.return_srq_recv(&mut ctx);
        Ok(())
    }

    /// The QP (for its state, attributes and counters).
    pub fn qp(&self, qpn: Qpn) -> Option<&Qp> {
        self.qps.get(&qpn.value())
    }

    /// Counters of a QP.
    pub fn qp_counters(&self, qpn: Qpn) -> Option<QpCounters> {
        self.qp(qpn).map(|q| *q.counters())
    }

    /// Congestion control counters and rate of a QP.
    pub fn qp_cc_counters(&self, qpn: Qpn) -> Option<CcCounters> {
        self.qp(qpn).map(|q| q.cc_counters())
    }

    /// `ibv_modify_qp`.
    pub fn modify_qp(
        &mut self,
        qpn: Qpn,
        attr: &QpAttr,
        mask: QpAttrMask,
    ) -> Result<(), VerbsError> {
        let qp = self.qps.get_mut(&qpn.value()).ok_or(VerbsError::NotFound)?;
        let mut ctx = ctx!(self, 0);
        if mask.contains(QpAttrMask::STATE)
            && matches!(attr.qp_state, QpState::Reset | QpState::Err)
        {
            keep_farewell(&mut self.farewell, qp, &mut ctx);
        }
        let r = qp.modify(attr, mask, &mut ctx);
        qp.check_cq_lost(&mut ctx);
        r?;
        self.mark_ready(qpn.value());
        self.note_timer(qpn.value());
        Ok(())
    }

    /// `ibv_post_send`.
    pub fn post_send(&mut self, qpn: Qpn, wr: SendWr) -> Result<(), PostError> {
        let qp = self
            .qps
            .get_mut(&qpn.value())
            .ok_or(PostError::NoSuchObject)?;
        let mut ctx = ctx!(self, 0);
        let r = qp.post_send(wr, &mut ctx);
        qp.check_cq_lost(&mut ctx);
        r?;
        self.mark_ready(qpn.value());
        Ok(())
    }

    /// `ibv_post_recv`.
    pub fn post_recv(&mut self, qpn: Qpn, wr: RecvWr) -> Result<(), PostError> {
        let qp = self
            .qps
            .get_mut(&qpn.value())
            .ok_or(PostError::NoSuchObject)?;
        let mut ctx = ctx!(self, 0);
        let r = qp.post_recv(wr, &mut ctx);
        qp.check_cq_lost(&mut ctx);
        r
    }
}

/// Keeps a QP's deferred ACK to send as its last packet when the
/// application destroys the QP, resets it or moves it to the error state
/// (also through the CM): with deferral off it would have left before the
/// application could do any of these. Bounded: the oldest go first.
fn keep_farewell(
    queue: &mut VecDeque<(Vec<u8>, roce_wire::Transmit)>,
    qp: &mut Qp,
    ctx: &mut Ctx<'_>,
) {
    const MAX_FAREWELLS: usize = 1024;
    // An ACK is well under 512 bytes; allocated only when there is one.
    let mut buf = [0u8; 512];
    if let Some(t) = qp.take_deferred_ack(ctx, &mut buf) {
        if queue.len() >= MAX_FAREWELLS {
            queue.pop_front();
        }
        queue.push_back((buf[..t.size].to_vec(), t));
    }
}
