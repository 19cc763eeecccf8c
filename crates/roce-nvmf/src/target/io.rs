//! NVM command set I/O commands (NVMe base 1.4 §6): Read, Write, Flush,
//! Write Zeroes and Dataset Management, each range checked against the
//! namespace before the storage is touched.

use super::capsule::Completion;
use super::config::NamespaceEntry;
use super::controller::SubsysRef;
use super::Target;
use crate::wire::sqe::{io_opc, Sqe};
use crate::wire::status::Status;
use crate::wire::{le32, le64, Cntlid, Nsid};

/// The byte range of `nlb` blocks at `slba`, or LBA Out of Range if any
/// block is past the end of the namespace (§6.15, §6.9: "LBA Out of
/// Range").
fn byte_range(ns: &NamespaceEntry, slba: u64, nlb: u64) -> Result<(u64, u64), Status> {
    let blocks = ns.storage.blocks();
    let end = slba.checked_add(nlb).ok_or(Status::LBA_OUT_OF_RANGE)?;
    if end > blocks {
        return Err(Status::LBA_OUT_OF_RANGE);
    }
    let bs = ns.storage.block_size() as u64;
    let off = slba.checked_mul(bs).ok_or(Status::LBA_OUT_OF_RANGE)?;
    let len = nlb.checked_mul(bs).ok_or(Status::LBA_OUT_OF_RANGE)?;
    Ok((off, len))
}

impl Target {
    pub(crate) fn namespace(&self, si: usize, nsid: Nsid) -> Option<&NamespaceEntry> {
        let s = self.cfg.subsystems.get(si)?;
        s.namespaces
            .binary_search_by_key(&nsid, |n| n.nsid)
            .ok()
            .map(|i| &s.namespaces[i])
    }

    fn namespace_mut(&mut self, si: usize, nsid: Nsid) -> Option<&mut NamespaceEntry> {
        let s = self.cfg.subsystems.get_mut(si)?;
        let i = s.namespaces.binary_search_by_key(&nsid, |n| n.nsid).ok()?;
        s.namespaces.get_mut(i)
    }

    /// Runs an I/O command; `data` holds the host's data for Write and
    /// Dataset Management, of the length the plan asked for.
    pub(crate) fn io<T: AsRef<[u8]>>(
        &mut self,
        cntlid: Cntlid,
        sqe: &Sqe<T>,
        data: &[u8],
    ) -> Completion {
        match self.io_inner(cntlid, sqe, data) {
            Ok(c) => c,
            Err(st) => Completion::status(st),
        }
    }

    fn io_inner<T: AsRef<[u8]>>(
        &mut self,
        cntlid: Cntlid,
        sqe: &Sqe<T>,
        data: &[u8],
    ) -> Result<Completion, Status> {
        let Some(SubsysRef::Nvm(si)) = self.ctrls.get(&cntlid).map(|c| c.subsys) else {
            return Err(Status::INVALID_OPCODE);
        };
        let opc = sqe.opcode();
        let slba = sqe.cdw(10) as u64 | (sqe.cdw(11) as u64) << 32;
        let nlb = (sqe.cdw(12) & 0xFFFF) as u64 + 1;
        // With the volatile write cache disabled (Set Features 06h) every
        // write is durable before it completes (NVMe base 1.4 §5.21.1.6).
        let vwc = self.ctrls.get(&cntlid).is_none_or(|c| c.vwc_enabled);
        let fua = sqe.cdw(12) & (1 << 30) != 0 || !vwc;
        let ns = self
            .namespace_mut(si, sqe.nsid())
            .ok_or(Status::INVALID_NAMESPACE)?;
        let (mut reads, mut writes, mut rbytes, mut wbytes) = (0u64, 0u64, 0u64, 0u64);
        let result = match opc {
            io_opc::READ => {
                let (off, len) = byte_range(ns, slba, nlb)?;
                let mut buf = vec![0u8; len as usize];
                ns.storage
                    .read(off, &mut buf)
                    .map_err(|_| Status::INTERNAL_ERROR)?;
                reads = 1;
                rbytes = len;
                Completion::data(buf)
            }
            io_opc::WRITE => {
                let (off, len) = byte_range(ns, slba, nlb)?;
                let data = data
                    .get(..len as usize)
                    .ok_or(Status::DATA_SGL_LENGTH_INVALID)?;
                ns.storage
                    .write(off, data, fua)
                    .map_err(|_| Status::INTERNAL_ERROR)?;
                writes = 1;
                wbytes = len;
                Completion::ok()
            }
            io_opc::FLUSH => {
                ns.storage.flush().map_err(|_| Status::INTERNAL_ERROR)?;
                Completion::ok()
            }
            io_opc::WRITE_ZEROES => {
                let (off, len) = byte_range(ns, slba, nlb)?;
                ns.storage
                    .write_zeroes(off, len)
                    .map_err(|_| Status::INTERNAL_ERROR)?;
                if fua {
                    ns.storage.flush().map_err(|_| Status::INTERNAL_ERROR)?;
                }
                Completion::ok()
            }
            io_opc::DATASET_MANAGEMENT => {
                // CDW10 NR (7:0, 0's based); CDW11 AD (bit 2). Ranges are
                // 16 bytes: context attributes, length in blocks, SLBA
                // (§6.7, Figure 364). All are checked before any is used.
                let nr = (sqe.cdw(10) & 0xFF) as usize + 1;
                let deallocate = sqe.cdw(11) & (1 << 2) != 0;
                let mut ranges = Vec::with_capacity(nr);
                for i in 0..nr {
                    let r = data
                        .get(i * 16..i * 16 + 16)
                        .ok_or(Status::DATA_SGL_LENGTH_INVALID)?;
                    let len = le32(r, 4).map_err(|_| Status::INVALID_FIELD)? as u64;
                    let lba = le64(r, 8).map_err(|_| Status::INVALID_FIELD)?;
                    ranges.push(byte_range(ns, lba, len)?);
                }
                if deallocate {
                    for (off, len) in ranges {
                        ns.storage
                            .deallocate(off, len)
                            .map_err(|_| Status::INTERNAL_ERROR)?;
                    }
                }
                Completion::ok()
            }
            _ => return Err(Status::INVALID_OPCODE),
        };
        if let Some(c) = self.ctrls.get_mut(&cntlid) {
            c.host_reads += reads;
            c.host_writes += writes;
            c.units_read += rbytes;
            c.units_written += wbytes;
        }
        Ok(result)
    }
}
