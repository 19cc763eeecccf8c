//! A QP's part in congestion control (DCQCN, IBTA Annex A17.9): the CNP
//! its notification point owes the sender, and its counters. The
//! algorithms themselves are in [`crate::cc`], which knows nothing of QPs.

use roce_wire::{BthRepr, Ecn, ExtHeaders, Opcode, Psn};

use super::state::{QpState, QpType};
use super::{Ctx, QpCommon};

impl QpCommon {
    /// Emits the due CNP, if any (before any other packet of the QP).
    pub(crate) fn poll_cnp(
        &mut self,
        ctx: &mut Ctx<'_>,
        buf: &mut [u8],
    ) -> Option<roce_wire::Transmit> {
        if !self.cc.cnp_due() {
            return None;
        }
        let connected = matches!(self.init.qp_type, QpType::Rc | QpType::Uc)
            && matches!(
                self.state,
                QpState::Rtr | QpState::Rts | QpState::Sqd | QpState::Sqe
            );
        let dscp = self.cc.take_cnp();
        if !connected {
            return None;
        }
        let mut path = self.path(None, ctx)?;
        path.dscp = dscp;
        path.ecn = Ecn::NotEct;
        let mut bth = BthRepr::new(Opcode::CNP, self.attr.dest_qp_num, Psn::new(0));
        bth.becn = true;
        let n = path.emit(bth, ExtHeaders::default(), 0, buf, |_| {})?;
        self.cc.cnp_sent();
        Some(n)
    }
}
