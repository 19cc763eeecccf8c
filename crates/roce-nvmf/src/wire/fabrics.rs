//! Fabrics commands (NVMe-oF 1.1 §3): Connect with its 1024-byte data,
//! Property Get and Property Set, and the controller properties they
//! address (NVMe base 1.4 §3.1, Figure 78).

use super::sgl::SglDesc;
use super::sqe::{admin_opc, put_raw, Sqe, SqeRepr};
use super::{
    get_nul_str, le16, le32, le64, put, put16, put32, put64, put_nul_padded, Cid, Cntlid, Error,
    Nsid, Qid,
};

/// Fabrics command types (NVMe-oF 1.1 Figure 9, SQE byte 4).
pub mod fctype {
    /// Property Set.
    pub const PROPERTY_SET: u8 = 0x00;
    /// Connect.
    pub const CONNECT: u8 = 0x01;
    /// Property Get.
    pub const PROPERTY_GET: u8 = 0x04;
    /// Authentication Send (not implemented).
    pub const AUTH_SEND: u8 = 0x05;
    /// Authentication Receive (not implemented).
    pub const AUTH_RECEIVE: u8 = 0x06;
}

/// Controller property offsets (NVMe base 1.4 Figure 78; NVMe-oF 1.1
/// §3.4.1 "Property Definitions").
pub mod prop {
    /// Controller Capabilities (8 bytes).
    pub const CAP: u32 = 0x00;
    /// Version (4 bytes).
    pub const VS: u32 = 0x08;
    /// Controller Configuration (4 bytes).
    pub const CC: u32 = 0x14;
    /// Controller Status (4 bytes).
    pub const CSTS: u32 = 0x1C;
    /// NVM Subsystem Reset (4 bytes).
    pub const NSSR: u32 = 0x20;
}

/// Size of the Connect command's data (NVMe-oF 1.1 Figure 20).
pub const CONNECT_DATA_LEN: usize = 1024;

/// Offsets inside the Connect data, as the Connect Invalid Parameters
/// response reports them in IPO (NVMe-oF 1.1 Figure 20 and Figure 21).
pub mod connect_data_off {
    /// Host Identifier (16 bytes).
    pub const HOSTID: u16 = 0;
    /// Controller ID (2 bytes).
    pub const CNTLID: u16 = 16;
    /// NVM Subsystem NQN (256 bytes).
    pub const SUBNQN: u16 = 256;
    /// Host NQN (256 bytes).
    pub const HOSTNQN: u16 = 512;
}

/// Offsets inside the Connect SQE for IPO (NVMe-oF 1.1 Figure 19).
pub mod connect_cmd_off {
    /// Record Format.
    pub const RECFMT: u16 = 40;
    /// Queue ID.
    pub const QID: u16 = 42;
    /// Submission Queue Size.
    pub const SQSIZE: u16 = 44;
    /// Connect Attributes.
    pub const CATTR: u16 = 46;
    /// Keep Alive Timeout.
    pub const KATO: u16 = 48;
}

/// DW0 of a Connect Invalid Parameters response: IATTR (bit 16: 1 = the
/// parameter is in the Connect data, 0 = in the SQE) and IPO (bits 15:0,
/// byte offset of the parameter) (NVMe-oF 1.1 Figure 23).
pub fn invalid_param_dw0(in_data: bool, offset: u16) -> u32 {
    ((in_data as u32) << 16) | offset as u32
}

/// The fields of a Connect command (NVMe-oF 1.1 Figure 19).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectCmd {
    /// Command Identifier.
    pub cid: Cid,
    /// Where the Connect data is.
    pub sgl1: SglDesc,
    /// Record format (0).
    pub recfmt: u16,
    /// Queue to connect.
    pub qid: Qid,
    /// Submission queue size, 0's based.
    pub sqsize: u16,
    /// Connect attributes (bit 2: SQ flow control disable).
    pub cattr: u8,
    /// Keep Alive Timeout in milliseconds (admin queue only).
    pub kato: u32,
}

impl ConnectCmd {
    /// Reads the Connect fields of a Fabrics SQE.
    pub fn parse<T: AsRef<[u8]>>(s: &Sqe<T>) -> ConnectCmd {
        let r = s.raw();
        ConnectCmd {
            cid: s.cid(),
            sgl1: s.sgl1(),
            recfmt: le16(r, 40).unwrap_or(0),
            qid: Qid(le16(r, 42).unwrap_or(0)),
            sqsize: le16(r, 44).unwrap_or(0),
            cattr: r[46],
            kato: le32(r, 48).unwrap_or(0),
        }
    }

    /// The 64-byte SQE.
    pub fn to_bytes(&self) -> [u8; 64] {
        let mut b = SqeRepr {
            opcode: admin_opc::FABRICS,
            cid: self.cid,
            nsid: Nsid(super::fabrics::fctype::CONNECT as u32),
            sgl1: self.sgl1,
            cdw: [0; 6],
        }
        .to_bytes();
        put16(&mut b, 40, self.recfmt);
        put16(&mut b, 42, self.qid.0);
        put16(&mut b, 44, self.sqsize);
        put_raw(&mut b, 46, &[self.cattr]);
        put32(&mut b, 48, self.kato);
        b
    }
}

/// The 1024-byte Connect data (NVMe-oF 1.1 Figure 20).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectData {
    /// Host Identifier.
    pub hostid: [u8; 16],
    /// Controller ID: 0xFFFF for "any" on the admin queue, the ID the admin
    /// Connect returned on I/O queues.
    pub cntlid: Cntlid,
    /// NVM Subsystem NQN.
    pub subnqn: String,
    /// Host NQN.
    pub hostnqn: String,
}

impl ConnectData {
    /// Parses the Connect data. An NQN that is not UTF-8 is
    /// [`Error::Malformed`] with no indication which; callers that need
    /// IPO use [`ConnectData::parse_fields`].
    pub fn parse(b: &[u8]) -> Result<ConnectData, Error> {
        Self::parse_fields(b).map_err(|(e, _)| e)
    }

    /// Parses the Connect data; on failure also says at which offset
    /// (for the IPO of Connect Invalid Parameters).
    pub fn parse_fields(b: &[u8]) -> Result<ConnectData, (Error, u16)> {
        if b.len() < CONNECT_DATA_LEN {
            return Err((Error::Truncated, 0));
        }
        let mut hostid = [0u8; 16];
        hostid.copy_from_slice(&b[..16]);
        let subnqn = get_nul_str(b, 256, 256).map_err(|e| (e, connect_data_off::SUBNQN))?;
        let hostnqn = get_nul_str(b, 512, 256).map_err(|e| (e, connect_data_off::HOSTNQN))?;
        Ok(ConnectData {
            hostid,
            cntlid: Cntlid(le16(b, 16).map_err(|e| (e, 16))?),
            subnqn,
            hostnqn,
        })
    }

    /// The 1024 bytes.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut b = vec![0u8; CONNECT_DATA_LEN];
        put(&mut b, 0, &self.hostid);
        put16(&mut b, 16, self.cntlid.0);
        put_nul_padded(&mut b, 256, 256, &self.subnqn);
        put_nul_padded(&mut b, 512, 256, &self.hostnqn);
        b
    }
}

/// Property access size (ATTRIB bits 2:0: 0 = 4 bytes, 1 = 8 bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PropSize {
    /// 4 bytes.
    Four,
    /// 8 bytes.
    Eight,
}

/// Property Get or Set (NVMe-oF 1.1 Figures 26 and 29).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PropertyCmd {
    /// Command Identifier.
    pub cid: Cid,
    /// Access size.
    pub size: PropSize,
    /// Property offset.
    pub offset: u32,
    /// Value to set (Property Set only).
    pub value: u64,
}

impl PropertyCmd {
    /// Reads a Property Get/Set SQE; reserved ATTRIB sizes are
    /// [`Error::Malformed`].
    pub fn parse<T: AsRef<[u8]>>(s: &Sqe<T>) -> Result<PropertyCmd, Error> {
        let r = s.raw();
        let size = match r[40] & 7 {
            0 => PropSize::Four,
            1 => PropSize::Eight,
            _ => return Err(Error::Malformed),
        };
        Ok(PropertyCmd {
            cid: s.cid(),
            size,
            offset: le32(r, 44)?,
            value: le64(r, 48)?,
        })
    }

    /// The SQE for a Property Get (`set == false`) or Set.
    pub fn to_bytes(&self, set: bool) -> [u8; 64] {
        let fct = if set {
            fctype::PROPERTY_SET
        } else {
            fctype::PROPERTY_GET
        };
        let mut b = SqeRepr::new(admin_opc::FABRICS, self.cid, Nsid(fct as u32)).to_bytes();
        put_raw(&mut b, 40, &[matches!(self.size, PropSize::Eight) as u8]);
        put32(&mut b, 44, self.offset);
        if set {
            put64(&mut b, 48, self.value);
        }
        b
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::Rkey;

    #[test]
    fn connect_layout() {
        let c = ConnectCmd {
            cid: Cid(5),
            sgl1: SglDesc::InCapsule {
                offset: 0,
                len: 1024,
            },
            recfmt: 0,
            qid: Qid(3),
            sqsize: 127,
            cattr: 0,
            kato: 5000,
        };
        let b = c.to_bytes();
        assert_eq!(b[0], 0x7F);
        assert_eq!(b[4], 0x01);
        assert_eq!(&b[42..44], &[3, 0]);
        assert_eq!(&b[44..46], &[127, 0]);
        assert_eq!(&b[48..52], &5000u32.to_le_bytes());
        assert_eq!(ConnectCmd::parse(&Sqe::new_checked(&b[..]).unwrap()), c);
    }

    #[test]
    fn connect_data_layout() {
        let d = ConnectData {
            hostid: [7; 16],
            cntlid: Cntlid::DYNAMIC,
            subnqn: "nqn.2014-08.org.nvmexpress.discovery".into(),
            hostnqn: "nqn.host".into(),
        };
        let b = d.to_bytes();
        assert_eq!(&b[16..18], &[0xFF, 0xFF]);
        assert_eq!(&b[256..260], b"nqn.");
        assert_eq!(&b[512..520], b"nqn.host");
        assert_eq!(b[520], 0);
        assert_eq!(ConnectData::parse(&b), Ok(d));
        assert_eq!(ConnectData::parse(&b[..1023]), Err(Error::Truncated));
        let mut bad = b.clone();
        bad[512] = 0xFF;
        assert_eq!(
            ConnectData::parse_fields(&bad),
            Err((Error::Malformed, connect_data_off::HOSTNQN))
        );
    }

    #[test]
    fn property_layout() {
        let p = PropertyCmd {
            cid: Cid(1),
            size: PropSize::Four,
            offset: prop::CC,
            value: 0x46_0001,
        };
        let b = p.to_bytes(true);
        assert_eq!(b[4], 0x00);
        assert_eq!(b[40], 0);
        assert_eq!(&b[44..48], &[0x14, 0, 0, 0]);
        assert_eq!(&b[48..52], &[1, 0, 0x46, 0]);
        assert_eq!(
            PropertyCmd::parse(&Sqe::new_checked(&b[..]).unwrap()),
            Ok(p)
        );
        let g = PropertyCmd {
            cid: Cid(2),
            size: PropSize::Eight,
            offset: 0,
            value: 0,
        }
        .to_bytes(false);
        assert_eq!((g[4], g[40]), (0x04, 1));
        let _ = Rkey(0);
    }
}
