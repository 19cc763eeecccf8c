//! The 16-byte Completion Queue Entry, the whole of a response capsule
//! over RDMA (NVMe base 1.4 §4.6, Figure 121; NVMe-oF 1.1 §2.4.2 and
//! §7.3.1: the RDMA transport sends no data in response capsules, and
//! Linux's host posts 16-byte receive buffers for them).

use super::status::Status;
use super::{le16, le32, put16, put32, Cid, Error};

/// Size of a completion queue entry.
pub const CQE_LEN: usize = 16;

/// A parsed completion queue entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CqeRepr {
    /// Dword 0: command specific.
    pub dw0: u32,
    /// Dword 1: command specific.
    pub dw1: u32,
    /// SQ Head Pointer.
    pub sqhd: u16,
    /// SQ Identifier.
    pub sqid: u16,
    /// Command Identifier.
    pub cid: Cid,
    /// Phase tag (bit 0 of the status field; unused over fabrics, sent 0).
    pub phase: bool,
    /// Status.
    pub status: Status,
}

impl CqeRepr {
    /// A completion with `status` and zero dwords.
    pub fn new(cid: Cid, status: Status) -> CqeRepr {
        CqeRepr {
            dw0: 0,
            dw1: 0,
            sqhd: 0,
            sqid: 0,
            cid,
            phase: false,
            status,
        }
    }

    /// Parses 16 bytes.
    pub fn parse(b: &[u8]) -> Result<CqeRepr, Error> {
        if b.len() < CQE_LEN {
            return Err(Error::Truncated);
        }
        let sf = le16(b, 14)?;
        Ok(CqeRepr {
            dw0: le32(b, 0)?,
            dw1: le32(b, 4)?,
            sqhd: le16(b, 8)?,
            sqid: le16(b, 10)?,
            cid: Cid(le16(b, 12)?),
            phase: sf & 1 != 0,
            status: Status::from_field(sf),
        })
    }

    /// The 16 bytes.
    pub fn to_bytes(&self) -> [u8; CQE_LEN] {
        let mut b = [0u8; CQE_LEN];
        put32(&mut b, 0, self.dw0);
        put32(&mut b, 4, self.dw1);
        put16(&mut b, 8, self.sqhd);
        put16(&mut b, 10, self.sqid);
        put16(&mut b, 12, self.cid.0);
        put16(&mut b, 14, self.status.to_field(self.phase));
        b
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout() {
        let c = CqeRepr {
            dw0: 0x0403_0201,
            dw1: 0x0807_0605,
            sqhd: 0x0A09,
            sqid: 0x0C0B,
            cid: Cid(0x0E0D),
            phase: true,
            status: Status::SUCCESS,
        };
        let b = c.to_bytes();
        assert_eq!(b, [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 1, 0]);
        assert_eq!(CqeRepr::parse(&b), Ok(c));
        assert_eq!(CqeRepr::parse(&b[..15]), Err(Error::Truncated));
    }
}
