//! Base Transport Header (IBTA Vol 1 §9.2, 12 bytes).

use crate::error::{Error, Layer, Result};
use crate::field::{set_u16, set_u24, u16_at, u24_at};
use crate::opcode::Opcode;
use crate::types::{Pkey, Psn, Qpn};
use crate::view::fixed_view;

/// BTH length.
pub const HEADER_LEN: usize = 12;

mod field {
    pub(super) const OPCODE: usize = 0;
    pub(super) const FLAGS: usize = 1; // SE | M | PadCnt(2) | TVer(4)
    pub(super) const PKEY: usize = 2;
    pub(super) const FECN_BECN: usize = 4; // FECN | BECN | reserved(6)
    pub(super) const DEST_QP: usize = 5;
    pub(super) const ACK_REQ: usize = 8; // AckReq | reserved(7)
    pub(super) const PSN: usize = 9;
}

fixed_view!(
    /// A view of the Base Transport Header.
    BthHeader,
    HEADER_LEN,
    Layer::Bth
);

impl<T: AsRef<[u8]>> BthHeader<T> {
    fn b(&self) -> &[u8] {
        self.buffer.as_ref()
    }
    /// Raw opcode byte.
    pub fn opcode_raw(&self) -> u8 {
        self.b()[field::OPCODE]
    }
    /// Solicited event.
    pub fn solicited(&self) -> bool {
        self.b()[field::FLAGS] & 0x80 != 0
    }
    /// MigReq.
    pub fn mig_req(&self) -> bool {
        self.b()[field::FLAGS] & 0x40 != 0
    }
    /// Pad count (0..=3).
    pub fn pad_count(&self) -> u8 {
        (self.b()[field::FLAGS] >> 4) & 3
    }
    /// Transport header version (must be 0).
    pub fn tver(&self) -> u8 {
        self.b()[field::FLAGS] & 0x0f
    }
    /// Partition key.
    pub fn pkey(&self) -> Pkey {
        Pkey(u16_at(self.b(), field::PKEY))
    }
    /// Forward ECN (InfiniBand; unused by RoCE v2, masked by the ICRC).
    pub fn fecn(&self) -> bool {
        self.b()[field::FECN_BECN] & 0x80 != 0
    }
    /// Backward ECN (set in CNPs).
    pub fn becn(&self) -> bool {
        self.b()[field::FECN_BECN] & 0x40 != 0
    }
    /// Destination QP.
    pub fn dest_qp(&self) -> Qpn {
        Qpn::new(u24_at(self.b(), field::DEST_QP))
    }
    /// Acknowledge request.
    pub fn ack_req(&self) -> bool {
        self.b()[field::ACK_REQ] & 0x80 != 0
    }
    /// Packet sequence number.
    pub fn psn(&self) -> Psn {
        Psn::new(u24_at(self.b(), field::PSN))
    }
}

/// A Base Transport Header.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct BthRepr {
    /// Opcode.
    pub opcode: Opcode,
    /// Solicited event.
    pub solicited: bool,
    /// MigReq (rxe sets it; the path-migration state).
    pub mig_req: bool,
    /// Pad count. [`crate::FrameRepr::emit`] derives it from the payload
    /// length and ignores this value.
    pub pad_count: u8,
    /// Partition key.
    pub pkey: Pkey,
    /// FECN.
    pub fecn: bool,
    /// BECN.
    pub becn: bool,
    /// Destination QP.
    pub dest_qp: Qpn,
    /// AckReq.
    pub ack_req: bool,
    /// PSN.
    pub psn: Psn,
}

impl BthRepr {
    /// A header with default flags (P_Key 0xFFFF, everything else clear).
    pub fn new(opcode: Opcode, dest_qp: Qpn, psn: Psn) -> BthRepr {
        BthRepr {
            opcode,
            solicited: false,
            mig_req: false,
            pad_count: 0,
            pkey: Pkey::DEFAULT,
            fecn: false,
            becn: false,
            dest_qp,
            ack_req: false,
            psn,
        }
    }

    /// Parses a BTH: TVer must be 0 and the opcode one of the table.
    pub fn parse(buf: &[u8]) -> Result<BthRepr> {
        let h = BthHeader::new_checked(buf)?;
        if h.tver() != 0 {
            return Err(Error::BadTver { tver: h.tver() });
        }
        Ok(BthRepr {
            opcode: Opcode::from_u8(h.opcode_raw())?,
            solicited: h.solicited(),
            mig_req: h.mig_req(),
            pad_count: h.pad_count(),
            pkey: h.pkey(),
            fecn: h.fecn(),
            becn: h.becn(),
            dest_qp: h.dest_qp(),
            ack_req: h.ack_req(),
            psn: h.psn(),
        })
    }

    /// Writes the header into the start of `buf`, with this `pad_count`.
    pub fn emit(&self, buf: &mut [u8]) -> Result<()> {
        if buf.len() < HEADER_LEN {
            return Err(Error::BufferTooSmall { needed: HEADER_LEN });
        }
        if self.pad_count > 3 {
            return Err(Error::InvalidField("BTH PadCnt above 3"));
        }
        buf[field::OPCODE] = self.opcode.value();
        buf[field::FLAGS] =
            ((self.solicited as u8) << 7) | ((self.mig_req as u8) << 6) | (self.pad_count << 4);
        set_u16(buf, field::PKEY, self.pkey.0);
        buf[field::FECN_BECN] = ((self.fecn as u8) << 7) | ((self.becn as u8) << 6);
        set_u24(buf, field::DEST_QP, self.dest_qp.value());
        buf[field::ACK_REQ] = (self.ack_req as u8) << 7;
        set_u24(buf, field::PSN, self.psn.value());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scapy_vector_bth() {
        // From testdata/icrc.md: UC SEND_ONLY, MigReq, PadCnt 2, QP 0xd3, PSN 0xcf1710.
        let b = [
            0x24, 0x60, 0xff, 0xff, 0x00, 0x00, 0x00, 0xd3, 0x00, 0xcf, 0x17, 0x10,
        ];
        let r = BthRepr::parse(&b).unwrap();
        assert_eq!(r.opcode.value(), 0x24);
        assert!(r.mig_req && !r.solicited && !r.ack_req);
        assert_eq!(r.pad_count, 2);
        assert_eq!(r.dest_qp, Qpn::new(0xd3));
        assert_eq!(r.psn, Psn::new(0xcf1710));
        let mut out = [0u8; 12];
        r.emit(&mut out).unwrap();
        assert_eq!(out, b);
    }

    #[test]
    fn tver_and_opcode_checked() {
        let mut b = [0u8; 12];
        b[1] = 1;
        assert_eq!(BthRepr::parse(&b), Err(Error::BadTver { tver: 1 }));
        b[1] = 0;
        b[0] = 0x40;
        assert_eq!(
            BthRepr::parse(&b),
            Err(Error::UnknownOpcode { opcode: 0x40 })
        );
        assert_eq!(
            BthRepr::parse(&b[..11]),
            Err(Error::Truncated { layer: Layer::Bth })
        );
    }
}
