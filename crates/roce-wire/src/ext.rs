//! Extended transport headers other than the AETH (IBTA Vol 1 §9.3): RETH,
//! AtomicETH, AtomicAckETH, ImmDt, IETH, DETH, FETH, and the CNP's reserved
//! block; plus [`ExtHeaders`], the set an opcode carries.

use crate::aeth::AethRepr;
use crate::error::{Error, Layer, Result};
use crate::field::{set_u24, set_u32, set_u64, u24_at, u32_at, u64_at};
use crate::opcode::{Headers, Opcode};
use crate::types::{Qkey, Qpn, Rkey};
use crate::view::fixed_view;

fixed_view!(
    /// A view of the RDMA Extended Transport Header (16 bytes).
    RethHeader,
    16,
    Layer::ExtHeaders
);

impl<T: AsRef<[u8]>> RethHeader<T> {
    /// Remote virtual address.
    pub fn va(&self) -> u64 {
        u64_at(self.buffer.as_ref(), 0)
    }
    /// Remote key.
    pub fn rkey(&self) -> Rkey {
        Rkey::new(u32_at(self.buffer.as_ref(), 8))
    }
    /// DMA length of the whole message.
    pub fn dma_len(&self) -> u32 {
        u32_at(self.buffer.as_ref(), 12)
    }
}

/// An RETH.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RethRepr {
    /// Remote virtual address.
    pub va: u64,
    /// Remote key.
    pub rkey: Rkey,
    /// DMA length of the whole message.
    pub dma_len: u32,
}

fixed_view!(
    /// A view of the Atomic Extended Transport Header (28 bytes).
    AtomicEthHeader,
    28,
    Layer::ExtHeaders
);

impl<T: AsRef<[u8]>> AtomicEthHeader<T> {
    /// Remote virtual address (8-byte aligned for a valid request).
    pub fn va(&self) -> u64 {
        u64_at(self.buffer.as_ref(), 0)
    }
    /// Remote key.
    pub fn rkey(&self) -> Rkey {
        Rkey::new(u32_at(self.buffer.as_ref(), 8))
    }
    /// Swap (COMPARE_SWAP) or add (FETCH_ADD) operand.
    pub fn swap_add(&self) -> u64 {
        u64_at(self.buffer.as_ref(), 12)
    }
    /// Compare operand (COMPARE_SWAP only).
    pub fn compare(&self) -> u64 {
        u64_at(self.buffer.as_ref(), 20)
    }
}

/// An AtomicETH.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct AtomicEthRepr {
    /// Remote virtual address.
    pub va: u64,
    /// Remote key.
    pub rkey: Rkey,
    /// Swap or add operand.
    pub swap_add: u64,
    /// Compare operand.
    pub compare: u64,
}

/// Datagram Extended Transport Header (8 bytes).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct DethRepr {
    /// Queue key.
    pub qkey: Qkey,
    /// Source QP.
    pub src_qp: Qpn,
}

/// Flush Extended Transport Header (4 bytes; IBTA 1.5 §9.3.9).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct FethRepr {
    /// Placement type (bits 3:0).
    pub placement_type: u8,
    /// Selectivity level (bits 5:4).
    pub selectivity: u8,
}

/// The extended headers of one packet, each present exactly when the opcode
/// requires it ([`Opcode::headers`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct ExtHeaders {
    /// DETH (UD).
    pub deth: Option<DethRepr>,
    /// FETH (FLUSH).
    pub feth: Option<FethRepr>,
    /// RETH (WRITE FIRST/ONLY, READ request, FLUSH, ATOMIC_WRITE).
    pub reth: Option<RethRepr>,
    /// AtomicETH (COMPARE_SWAP, FETCH_ADD).
    pub atomic: Option<AtomicEthRepr>,
    /// AETH (ACK, READ response FIRST/LAST/ONLY, ATOMIC_ACK).
    pub aeth: Option<AethRepr>,
    /// AtomicAckETH: the original remote value.
    pub atomic_ack: Option<u64>,
    /// Immediate data, in host order (big-endian on the wire).
    pub imm: Option<u32>,
    /// IETH: the R_Key to invalidate.
    pub ieth: Option<Rkey>,
}

impl ExtHeaders {
    /// The set of headers present.
    pub fn present(&self) -> Headers {
        let mut h = Headers::NONE;
        let pairs = [
            (self.deth.is_some(), Headers::DETH),
            (self.feth.is_some(), Headers::FETH),
            (self.reth.is_some(), Headers::RETH),
            (self.atomic.is_some(), Headers::ATOMIC_ETH),
            (self.aeth.is_some(), Headers::AETH),
            (self.atomic_ack.is_some(), Headers::ATOMIC_ACK_ETH),
            (self.imm.is_some(), Headers::IMM),
            (self.ieth.is_some(), Headers::IETH),
        ];
        for (p, f) in pairs {
            if p {
                h = h.with(f);
            }
        }
        h
    }

    /// Parses the headers `opcode` requires from the start of `buf`.
    /// Returns them and their total length.
    pub fn parse(opcode: Opcode, buf: &[u8]) -> Result<(ExtHeaders, usize)> {
        let set = opcode.headers();
        let len = set.len();
        if buf.len() < len {
            return Err(Error::Truncated {
                layer: Layer::ExtHeaders,
            });
        }
        let at = |h: Headers| set.offset_of(h);
        let mut e = ExtHeaders::default();
        if let Some(o) = at(Headers::DETH) {
            e.deth = Some(DethRepr {
                qkey: Qkey::new(u32_at(buf, o)),
                src_qp: Qpn::new(u24_at(buf, o + 5)),
            });
        }
        if let Some(o) = at(Headers::FETH) {
            let b = buf[o + 3];
            e.feth = Some(FethRepr {
                placement_type: b & 0x0f,
                selectivity: (b >> 4) & 3,
            });
        }
        if let Some(o) = at(Headers::RETH) {
            let v = RethHeader::new_unchecked(&buf[o..o + 16]);
            e.reth = Some(RethRepr {
                va: v.va(),
                rkey: v.rkey(),
                dma_len: v.dma_len(),
            });
        }
        if let Some(o) = at(Headers::ATOMIC_ETH) {
            let v = AtomicEthHeader::new_unchecked(&buf[o..o + 28]);
            e.atomic = Some(AtomicEthRepr {
                va: v.va(),
                rkey: v.rkey(),
                swap_add: v.swap_add(),
                compare: v.compare(),
            });
        }
        if let Some(o) = at(Headers::AETH) {
            e.aeth = Some(AethRepr::parse(&buf[o..o + 4])?);
        }
        if let Some(o) = at(Headers::ATOMIC_ACK_ETH) {
            e.atomic_ack = Some(u64_at(buf, o));
        }
        if let Some(o) = at(Headers::IMM) {
            e.imm = Some(u32_at(buf, o));
        }
        if let Some(o) = at(Headers::IETH) {
            e.ieth = Some(Rkey::new(u32_at(buf, o)));
        }
        Ok((e, len))
    }

    /// Writes the headers into the start of `buf`. The headers present must
    /// be exactly the opcode's set.
    pub fn emit(&self, opcode: Opcode, buf: &mut [u8]) -> Result<usize> {
        let set = opcode.headers();
        // The CNP's reserved block has no repr field: it is implied.
        if self.present() != set.without_cnp_reserved() {
            return Err(Error::InvalidField(
                "extended headers do not match the opcode",
            ));
        }
        let len = set.len();
        if buf.len() < len {
            return Err(Error::BufferTooSmall { needed: len });
        }
        let buf = &mut buf[..len];
        let at = |h: Headers| set.offset_of(h).unwrap_or(0);
        if let Some(d) = self.deth {
            let o = at(Headers::DETH);
            set_u32(buf, o, d.qkey.value());
            buf[o + 4] = 0;
            set_u24(buf, o + 5, d.src_qp.value());
        }
        if let Some(f) = self.feth {
            if f.placement_type > 0x0f || f.selectivity > 3 {
                return Err(Error::InvalidField("FETH field out of range"));
            }
            let o = at(Headers::FETH);
            buf[o..o + 3].fill(0);
            buf[o + 3] = (f.selectivity << 4) | f.placement_type;
        }
        if let Some(r) = self.reth {
            let o = at(Headers::RETH);
            set_u64(buf, o, r.va);
            set_u32(buf, o + 8, r.rkey.value());
            set_u32(buf, o + 12, r.dma_len);
        }
        if let Some(a) = self.atomic {
            let o = at(Headers::ATOMIC_ETH);
            set_u64(buf, o, a.va);
            set_u32(buf, o + 8, a.rkey.value());
            set_u64(buf, o + 12, a.swap_add);
            set_u64(buf, o + 20, a.compare);
        }
        if let Some(a) = self.aeth {
            let o = at(Headers::AETH);
            a.emit(&mut buf[o..o + 4]);
        }
        if let Some(v) = self.atomic_ack {
            set_u64(buf, at(Headers::ATOMIC_ACK_ETH), v);
        }
        if let Some(v) = self.imm {
            set_u32(buf, at(Headers::IMM), v);
        }
        if let Some(k) = self.ieth {
            set_u32(buf, at(Headers::IETH), k.value());
        }
        if let Some(o) = set.offset_of(Headers::CNP_RESERVED) {
            buf[o..o + 16].fill(0);
        }
        Ok(len)
    }
}
