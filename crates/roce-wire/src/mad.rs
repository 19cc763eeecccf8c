//! Management datagrams (IBTA Vol 1 §13.4): the 256-byte MADs that the
//! General Services Interface (QP1) carries as UD SEND_ONLY payloads. Over
//! RoCE v2 they travel like any UD packet: BTH to QP 1, DETH with the GSI
//! Q_Key [`GSI_QKEY`] and source QP 1, no GRH (the IP header stands in).
//!
//! This module has the common MAD header (§13.4.2, 24 bytes); [`crate::cm`]
//! has the communication manager's messages that follow it.

use crate::error::{Error, Layer, Result};
use crate::field::{set_u16, set_u32, set_u64, u16_at, u32_at, u64_at};
use crate::types::{Qkey, Qpn};

/// Every MAD is exactly this long (§13.4.1).
pub const MAD_LEN: usize = 256;
/// The common MAD header.
pub const HEADER_LEN: usize = 24;
/// Bytes after the header.
pub const DATA_LEN: usize = MAD_LEN - HEADER_LEN;

/// The General Services Interface QP.
pub const GSI_QPN: Qpn = Qpn::new(1);
/// The well-known Q_Key of QP1 (§13.5.1).
pub const GSI_QKEY: Qkey = Qkey::new(0x8001_0000);

/// `BaseVersion` of every MAD in use.
pub const BASE_VERSION: u8 = 1;
/// Management class of the communication manager (§13.4.4, the table of
/// management class values).
pub const CLASS_CM: u8 = 0x07;
/// Class version of the CM messages in IBTA 1.2 and later.
pub const CM_CLASS_VERSION: u8 = 2;

/// MAD methods (§13.4.5, table 110) used by the CM.
pub mod method {
    /// `Get()`.
    pub const GET: u8 = 0x01;
    /// `Set()`.
    pub const SET: u8 = 0x02;
    /// `Send()`: every CM message is sent with it.
    pub const SEND: u8 = 0x03;
    /// The response bit (`GetResp()` = `GET | RESPONSE`).
    pub const RESPONSE: u8 = 0x80;
}

/// The common MAD header (§13.4.2, figure 145).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MadHeader {
    /// `BaseVersion` (1).
    pub base_version: u8,
    /// `MgmtClass`.
    pub mgmt_class: u8,
    /// `ClassVersion`.
    pub class_version: u8,
    /// `R` bit and `Method`.
    pub method: u8,
    /// `Status`.
    pub status: u16,
    /// `ClassSpecific`.
    pub class_specific: u16,
    /// `TransactionID`: a reply carries its request's.
    pub tid: u64,
    /// `AttributeID`: which message follows.
    pub attr_id: u16,
    /// `AttributeModifier`.
    pub attr_mod: u32,
}

impl MadHeader {
    /// A CM `Send()` header for attribute `attr_id`.
    pub const fn cm_send(tid: u64, attr_id: u16) -> MadHeader {
        MadHeader {
            base_version: BASE_VERSION,
            mgmt_class: CLASS_CM,
            class_version: CM_CLASS_VERSION,
            method: method::SEND,
            status: 0,
            class_specific: 0,
            tid,
            attr_id,
            attr_mod: 0,
        }
    }

    /// Parses the header at the start of `mad` (which must hold a whole
    /// MAD: shorter payloads are truncated MADs).
    pub fn parse(mad: &[u8]) -> Result<MadHeader> {
        if mad.len() < MAD_LEN {
            return Err(Error::Truncated { layer: Layer::Mad });
        }
        Ok(MadHeader {
            base_version: mad[0],
            mgmt_class: mad[1],
            class_version: mad[2],
            method: mad[3],
            status: u16_at(mad, 4),
            class_specific: u16_at(mad, 6),
            tid: u64_at(mad, 8),
            attr_id: u16_at(mad, 16),
            attr_mod: u32_at(mad, 20),
        })
    }

    /// Writes the header into the first 24 bytes of `buf`.
    pub fn emit(&self, buf: &mut [u8]) -> Result<()> {
        if buf.len() < HEADER_LEN {
            return Err(Error::BufferTooSmall { needed: HEADER_LEN });
        }
        buf[0] = self.base_version;
        buf[1] = self.mgmt_class;
        buf[2] = self.class_version;
        buf[3] = self.method;
        set_u16(buf, 4, self.status);
        set_u16(buf, 6, self.class_specific);
        set_u64(buf, 8, self.tid);
        set_u16(buf, 16, self.attr_id);
        set_u16(buf, 18, 0);
        set_u32(buf, 20, self.attr_mod);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_round_trip() {
        let h = MadHeader::cm_send(0x0000_0002_893e_450d, 0x0010);
        let mut b = [0u8; MAD_LEN];
        h.emit(&mut b).unwrap();
        assert_eq!(
            &b[..24],
            &[
                1, 7, 2, 3, 0, 0, 0, 0, 0, 0, 0, 2, 0x89, 0x3e, 0x45, 0x0d, 0, 0x10, 0, 0, 0, 0, 0,
                0
            ]
        );
        assert_eq!(MadHeader::parse(&b).unwrap(), h);
        assert_eq!(
            MadHeader::parse(&b[..255]),
            Err(Error::Truncated { layer: Layer::Mad })
        );
    }
}
