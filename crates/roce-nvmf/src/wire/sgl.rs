//! SGL descriptors (NVMe base 1.4 §4.4, Figures 114–120) as the NVMe-oF
//! RDMA transport uses them (NVMe-oF 1.1 §7.3.2: a capsule's SGL1 is a
//! keyed data block for host memory or a data block with the offset
//! subtype for in-capsule data).

use super::{le32, le64, put, put32, put64, Error, Rkey};

/// Size of one SGL descriptor.
pub const SGL_DESC_LEN: usize = 16;

/// SGL descriptor type "Data Block" (0h).
pub const TYPE_DATA_BLOCK: u8 = 0x0;
/// SGL descriptor type "Last Segment" (3h). Linux's nvme-rdma host maps
/// every request to one descriptor and never sends segments.
pub const TYPE_LAST_SEGMENT: u8 = 0x3;
/// SGL descriptor type "Keyed SGL Data Block" (4h).
pub const TYPE_KEYED_DATA_BLOCK: u8 = 0x4;
/// Subtype "Address" (0h).
pub const SUBTYPE_ADDRESS: u8 = 0x0;
/// Subtype "Offset" (1h): the address is an offset into the in-capsule
/// data (NVMe-oF 1.1 §2.5 and §7.3.2).
pub const SUBTYPE_OFFSET: u8 = 0x1;
/// Transport specific subtype "Invalidate Key" (Fh) for keyed data blocks
/// (NVMe-oF 1.1 §7.3.2, Figure 51): the target may answer with SEND with
/// Invalidate of this key.
pub const SUBTYPE_INVALIDATE: u8 = 0xF;
/// Largest length a keyed descriptor can carry (24 bits).
pub const KEYED_MAX_LEN: u32 = 0x00FF_FFFF;

/// One SGL descriptor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SglDesc {
    /// Keyed SGL Data Block: host memory the target reads or writes with
    /// RDMA (NVMe base 1.4 Figure 119). `invalidate` is the Fh subtype.
    Keyed {
        /// Remote address.
        addr: u64,
        /// Length in bytes (24 bits).
        len: u32,
        /// Remote key.
        key: Rkey,
        /// The host asked for remote invalidation of `key`.
        invalidate: bool,
    },
    /// Data Block with the Offset subtype: in-capsule data at `offset`
    /// bytes after the start of the in-capsule data area.
    InCapsule {
        /// Offset into the in-capsule data.
        offset: u64,
        /// Length in bytes.
        len: u32,
    },
    /// Any other type/subtype, kept so the caller can answer with
    /// SGL Descriptor Type Invalid.
    Other {
        /// Descriptor type (bits 7:4 of byte 15).
        sgl_type: u8,
        /// Descriptor subtype (bits 3:0 of byte 15).
        subtype: u8,
    },
}

impl SglDesc {
    /// Parses a 16-byte descriptor.
    pub fn parse(b: &[u8]) -> Result<SglDesc, Error> {
        let b = b.get(..SGL_DESC_LEN).ok_or(Error::Truncated)?;
        let id = b[15];
        let (t, st) = (id >> 4, id & 0xF);
        let addr = le64(b, 0)?;
        Ok(match (t, st) {
            (TYPE_KEYED_DATA_BLOCK, SUBTYPE_ADDRESS | SUBTYPE_INVALIDATE) => SglDesc::Keyed {
                addr,
                len: u32::from_le_bytes([b[8], b[9], b[10], 0]),
                key: Rkey(le32(b, 11)?),
                invalidate: st == SUBTYPE_INVALIDATE,
            },
            (TYPE_DATA_BLOCK, SUBTYPE_OFFSET) => SglDesc::InCapsule {
                offset: addr,
                len: le32(b, 8)?,
            },
            (sgl_type, subtype) => SglDesc::Other { sgl_type, subtype },
        })
    }

    /// Writes the descriptor into `b[..16]`.
    pub fn emit(&self, b: &mut [u8]) {
        match *self {
            SglDesc::Keyed {
                addr,
                len,
                key,
                invalidate,
            } => {
                put64(b, 0, addr);
                let l = len.min(KEYED_MAX_LEN).to_le_bytes();
                put(b, 8, &l[..3]);
                put32(b, 11, key.0);
                let st = if invalidate {
                    SUBTYPE_INVALIDATE
                } else {
                    SUBTYPE_ADDRESS
                };
                put(b, 15, &[TYPE_KEYED_DATA_BLOCK << 4 | st]);
            }
            SglDesc::InCapsule { offset, len } => {
                put64(b, 0, offset);
                put32(b, 8, len);
                put(b, 12, &[0, 0, 0, TYPE_DATA_BLOCK << 4 | SUBTYPE_OFFSET]);
            }
            SglDesc::Other { sgl_type, subtype } => {
                put(b, 0, &[0; 15]);
                put(b, 15, &[sgl_type << 4 | (subtype & 0xF)]);
            }
        }
    }

    /// Length of data the descriptor describes (0 for `Other`).
    pub fn len(&self) -> u32 {
        match *self {
            SglDesc::Keyed { len, .. } | SglDesc::InCapsule { len, .. } => len,
            SglDesc::Other { .. } => 0,
        }
    }

    /// Whether the descriptor describes no data.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keyed_invalidate_layout() {
        let d = SglDesc::Keyed {
            addr: 0x1122_3344_5566_7788,
            len: 0x00AB_CDEF,
            key: Rkey(0xDEAD_BEEF),
            invalidate: true,
        };
        let mut b = [0u8; 16];
        d.emit(&mut b);
        assert_eq!(
            b,
            [
                0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11, // address
                0xEF, 0xCD, 0xAB, // 24-bit length
                0xEF, 0xBE, 0xAD, 0xDE, // key
                0x4F, // type 4, subtype F
            ]
        );
        assert_eq!(SglDesc::parse(&b), Ok(d));
    }

    #[test]
    fn offset_layout_and_other() {
        let mut b = [0u8; 16];
        SglDesc::InCapsule {
            offset: 0,
            len: 4096,
        }
        .emit(&mut b);
        assert_eq!(&b[8..12], &[0, 0x10, 0, 0]);
        assert_eq!(b[15], 0x01);
        b[15] = 0x30;
        assert_eq!(
            SglDesc::parse(&b),
            Ok(SglDesc::Other {
                sgl_type: 3,
                subtype: 0
            })
        );
        assert_eq!(SglDesc::parse(&b[..15]), Err(Error::Truncated));
    }
}
