//! The 64-byte Submission Queue Entry (NVMe base 1.4 §4.2, Figure 104–106)
//! and the command capsule that carries it (NVMe-oF 1.1 §2.4.1: SQE then
//! optional in-capsule data).

use super::sgl::SglDesc;
use super::{le32, le64, put, put16, put32, put64, Cid, Error, Nsid};

/// Size of a submission queue entry.
pub const SQE_LEN: usize = 64;

mod field {
    use core::ops::Range;
    pub(super) const OPC: usize = 0;
    pub(super) const FLAGS: usize = 1;
    pub(super) const CID: Range<usize> = 2..4;
    pub(super) const NSID: usize = 4;
    pub(super) const MPTR: usize = 16;
    pub(super) const DPTR: Range<usize> = 24..40;
    pub(super) const CDW10: usize = 40;
}

/// Admin command opcodes (NVMe base 1.4 Figure 139) used over fabrics.
pub mod admin_opc {
    /// Get Log Page.
    pub const GET_LOG_PAGE: u8 = 0x02;
    /// Identify.
    pub const IDENTIFY: u8 = 0x06;
    /// Abort.
    pub const ABORT: u8 = 0x08;
    /// Set Features.
    pub const SET_FEATURES: u8 = 0x09;
    /// Get Features.
    pub const GET_FEATURES: u8 = 0x0A;
    /// Asynchronous Event Request.
    pub const ASYNC_EVENT_REQUEST: u8 = 0x0C;
    /// Keep Alive.
    pub const KEEP_ALIVE: u8 = 0x18;
    /// Fabrics command (NVMe-oF 1.1 §3.1), on admin and I/O queues.
    pub const FABRICS: u8 = 0x7F;
}

/// NVM command set I/O opcodes (NVMe base 1.4 Figure 346).
pub mod io_opc {
    /// Flush.
    pub const FLUSH: u8 = 0x00;
    /// Write.
    pub const WRITE: u8 = 0x01;
    /// Read.
    pub const READ: u8 = 0x02;
    /// Write Zeroes.
    pub const WRITE_ZEROES: u8 = 0x08;
    /// Dataset Management.
    pub const DATASET_MANAGEMENT: u8 = 0x09;
}

/// PRP or SGL for Data Transfer (SQE byte 1 bits 7:6, NVMe base 1.4
/// Figure 104). NVMe-oF requires SGLs (NVMe-oF 1.1 §2.3: PSDT 01b or 10b).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Psdt {
    /// 00b: PRPs (not allowed over fabrics).
    Prp,
    /// 01b: SGL, metadata pointer to a contiguous buffer.
    SglMptrContig,
    /// 10b: SGL, metadata pointer to an SGL segment.
    SglMptrSgl,
    /// 11b: reserved.
    Reserved,
}

/// A checked view of a capsule's 64-byte SQE.
#[derive(Debug, Clone, Copy)]
pub struct Sqe<T: AsRef<[u8]>> {
    buf: T,
}

impl<T: AsRef<[u8]>> Sqe<T> {
    /// Checks that `buf` holds a whole SQE; no accessor can fail afterwards.
    pub fn new_checked(buf: T) -> Result<Sqe<T>, Error> {
        if buf.as_ref().len() < SQE_LEN {
            return Err(Error::Truncated);
        }
        Ok(Sqe { buf })
    }

    fn b(&self) -> &[u8] {
        &self.buf.as_ref()[..SQE_LEN]
    }

    fn dw(&self, at: usize) -> u32 {
        le32(self.b(), at).unwrap_or(0)
    }

    /// Opcode (byte 0).
    pub fn opcode(&self) -> u8 {
        self.b()[field::OPC]
    }

    /// Fused operation (byte 1 bits 1:0).
    pub fn fuse(&self) -> u8 {
        self.b()[field::FLAGS] & 3
    }

    /// PRP or SGL for Data Transfer (byte 1 bits 7:6).
    pub fn psdt(&self) -> Psdt {
        match self.b()[field::FLAGS] >> 6 {
            0 => Psdt::Prp,
            1 => Psdt::SglMptrContig,
            2 => Psdt::SglMptrSgl,
            _ => Psdt::Reserved,
        }
    }

    /// Command Identifier (bytes 2–3).
    pub fn cid(&self) -> Cid {
        let b = &self.b()[field::CID];
        Cid(u16::from_le_bytes([b[0], b[1]]))
    }

    /// Namespace Identifier (bytes 4–7). For a Fabrics command byte 4 is
    /// FCTYPE instead ([`Sqe::fctype`]).
    pub fn nsid(&self) -> Nsid {
        Nsid(self.dw(field::NSID))
    }

    /// Fabrics Command Type (byte 4 of a Fabrics command, NVMe-oF 1.1
    /// Figure 9).
    pub fn fctype(&self) -> u8 {
        self.b()[field::NSID]
    }

    /// Metadata Pointer (bytes 16–23).
    pub fn mptr(&self) -> u64 {
        le64(self.b(), field::MPTR).unwrap_or(0)
    }

    /// SGL1 of the Data Pointer (bytes 24–39).
    pub fn sgl1(&self) -> SglDesc {
        SglDesc::parse(&self.b()[field::DPTR]).unwrap_or(SglDesc::Other {
            sgl_type: 0xF,
            subtype: 0xF,
        })
    }

    /// Command Dword `n` (10..=15); any other `n` reads 0.
    pub fn cdw(&self, n: usize) -> u32 {
        if (10..=15).contains(&n) {
            self.dw(field::CDW10 + (n - 10) * 4)
        } else {
            0
        }
    }

    /// Bytes of the capsule after the SQE (in-capsule data).
    pub fn in_capsule_data(&self) -> &[u8] {
        &self.buf.as_ref()[SQE_LEN..]
    }

    /// Raw SQE bytes (for fields of specific commands).
    pub fn raw(&self) -> &[u8] {
        self.b()
    }
}

/// A plain SQE for building commands (initiator) and tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SqeRepr {
    /// Opcode.
    pub opcode: u8,
    /// Command Identifier.
    pub cid: Cid,
    /// Namespace Identifier, or FCTYPE in the low byte for Fabrics commands.
    pub nsid: Nsid,
    /// Data pointer (SGL1). PSDT is always emitted as 01b.
    pub sgl1: SglDesc,
    /// Command Dwords 10 to 15.
    pub cdw: [u32; 6],
}

impl SqeRepr {
    /// A command with no data (the SGL is a zero-length keyed data block,
    /// as Linux's nvme-rdma sends for commands without data).
    pub fn new(opcode: u8, cid: Cid, nsid: Nsid) -> SqeRepr {
        SqeRepr {
            opcode,
            cid,
            nsid,
            sgl1: SglDesc::Keyed {
                addr: 0,
                len: 0,
                key: super::Rkey(0),
                invalidate: false,
            },
            cdw: [0; 6],
        }
    }

    /// Writes the 64-byte SQE into `b[..64]`.
    pub fn emit(&self, b: &mut [u8]) {
        if b.len() < SQE_LEN {
            return;
        }
        b[..SQE_LEN].fill(0);
        b[field::OPC] = self.opcode;
        b[field::FLAGS] = 1 << 6;
        put16(b, field::CID.start, self.cid.0);
        put32(b, field::NSID, self.nsid.0);
        put64(b, field::MPTR, 0);
        self.sgl1.emit(&mut b[field::DPTR]);
        for (i, d) in self.cdw.iter().enumerate() {
            put32(b, field::CDW10 + 4 * i, *d);
        }
    }

    /// The SQE as bytes.
    pub fn to_bytes(&self) -> [u8; SQE_LEN] {
        let mut b = [0u8; SQE_LEN];
        self.emit(&mut b);
        b
    }

    /// Parses the fields of an SQE view.
    pub fn parse<T: AsRef<[u8]>>(v: &Sqe<T>) -> SqeRepr {
        let mut cdw = [0u32; 6];
        for (i, d) in cdw.iter_mut().enumerate() {
            *d = v.cdw(10 + i);
        }
        SqeRepr {
            opcode: v.opcode(),
            cid: v.cid(),
            nsid: v.nsid(),
            sgl1: v.sgl1(),
            cdw,
        }
    }
}

/// Puts raw bytes into an SQE (for command-specific fields the repr does
/// not name, such as the Fabrics fields).
pub(crate) fn put_raw(b: &mut [u8], at: usize, v: &[u8]) {
    put(b, at, v);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::Rkey;

    #[test]
    fn layout() {
        let mut r = SqeRepr::new(io_opc::READ, Cid(0x1234), Nsid(1));
        r.sgl1 = SglDesc::Keyed {
            addr: 0x1000,
            len: 512,
            key: Rkey(7),
            invalidate: true,
        };
        r.cdw = [10, 0, 3, 0, 0, 0];
        let b = r.to_bytes();
        assert_eq!(b[0], 0x02);
        assert_eq!(b[1], 0x40);
        assert_eq!(&b[2..4], &[0x34, 0x12]);
        assert_eq!(&b[4..8], &[1, 0, 0, 0]);
        assert_eq!(&b[24..32], &[0, 0x10, 0, 0, 0, 0, 0, 0]);
        assert_eq!(b[39], 0x4F);
        assert_eq!(&b[40..44], &[10, 0, 0, 0]);
        assert_eq!(&b[48..52], &[3, 0, 0, 0]);
        let v = Sqe::new_checked(&b[..]).unwrap();
        assert_eq!(v.psdt(), Psdt::SglMptrContig);
        assert_eq!(SqeRepr::parse(&v), r);
        assert!(Sqe::new_checked(&b[..63]).is_err());
    }
}
