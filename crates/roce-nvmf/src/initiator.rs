//! The host side: builders for the capsules an NVMe-oF/RDMA host sends,
//! a parser for the responses, a bounded command identifier allocator and
//! a keep-alive timer (NVMe base 1.4 §7.12; NVMe-oF 1.1 §3.3, §7.3).
//!
//! Builders return the 64-byte SQE; [`with_in_capsule_data`] appends data
//! for an I/O queue command capsule (NVMe-oF 1.1 §2.4.1, ICDOFF 0).

use std::time::Duration;

use crate::wire::cm::{CmAccept, CmReject, CmRequest, RECFMT_1_0};
use crate::wire::cqe::CqeRepr;
use crate::wire::fabrics::{ConnectCmd, ConnectData, PropSize, PropertyCmd};
use crate::wire::log::GetLogPage;
use crate::wire::sgl::SglDesc;
use crate::wire::sqe::{admin_opc, io_opc, SqeRepr, SQE_LEN};
use crate::wire::{Cid, Cntlid, Error, Nsid, Qid};

/// The RDMA CM request private data for queue `qid` of `depth` entries
/// (HRQSIZE = depth, HSQSIZE = depth - 1, as Linux's host sends).
pub fn cm_request(qid: Qid, depth: u16) -> [u8; 32] {
    CmRequest {
        recfmt: RECFMT_1_0,
        qid,
        hrqsize: depth,
        hsqsize: depth.saturating_sub(1),
    }
    .to_bytes()
}

/// Parses accept private data.
pub fn parse_cm_accept(b: &[u8]) -> Result<CmAccept, Error> {
    CmAccept::parse(b)
}

/// Parses reject private data.
pub fn parse_cm_reject(b: &[u8]) -> Result<CmReject, Error> {
    CmReject::parse(b)
}

/// A Connect SQE (NVMe-oF 1.1 §3.3) whose data is described by `sgl`.
pub fn connect(cid: Cid, qid: Qid, sqsize: u16, kato_ms: u32, sgl: SglDesc) -> [u8; SQE_LEN] {
    ConnectCmd {
        cid,
        sgl1: sgl,
        recfmt: 0,
        qid,
        sqsize,
        cattr: 0,
        kato: kato_ms,
    }
    .to_bytes()
}

/// The 1024-byte Connect data.
pub fn connect_data(hostid: [u8; 16], cntlid: Cntlid, subnqn: &str, hostnqn: &str) -> Vec<u8> {
    ConnectData {
        hostid,
        cntlid,
        subnqn: subnqn.into(),
        hostnqn: hostnqn.into(),
    }
    .to_bytes()
}

/// Property Get of `offset` (8 bytes for CAP, 4 otherwise).
pub fn property_get(cid: Cid, offset: u32, eight: bool) -> [u8; SQE_LEN] {
    let size = if eight {
        PropSize::Eight
    } else {
        PropSize::Four
    };
    PropertyCmd {
        cid,
        size,
        offset,
        value: 0,
    }
    .to_bytes(false)
}

/// Property Set of a 4-byte property.
pub fn property_set(cid: Cid, offset: u32, value: u32) -> [u8; SQE_LEN] {
    PropertyCmd {
        cid,
        size: PropSize::Four,
        offset,
        value: value as u64,
    }
    .to_bytes(true)
}

/// Identify with `cns` for `nsid`, data to `sgl`.
pub fn identify(cid: Cid, cns: u8, nsid: Nsid, sgl: SglDesc) -> [u8; SQE_LEN] {
    let mut r = SqeRepr::new(admin_opc::IDENTIFY, cid, nsid);
    r.sgl1 = sgl;
    r.cdw[0] = cns as u32;
    r.to_bytes()
}

/// Get Log Page of `len` bytes (a multiple of 4) at `offset`.
pub fn get_log_page(
    cid: Cid,
    lid: u8,
    nsid: Nsid,
    len: u32,
    offset: u64,
    rae: bool,
    sgl: SglDesc,
) -> [u8; SQE_LEN] {
    let g = GetLogPage {
        lid,
        lsp: 0,
        rae,
        numd: (len / 4).saturating_sub(1),
        lpo: offset,
    };
    let mut r = SqeRepr::new(admin_opc::GET_LOG_PAGE, cid, nsid);
    r.sgl1 = sgl;
    r.cdw[..4].copy_from_slice(&g.to_cdw());
    r.to_bytes()
}

/// Set Features `fid` to `value` (CDW11).
pub fn set_features(cid: Cid, fid: u8, value: u32) -> [u8; SQE_LEN] {
    let mut r = SqeRepr::new(admin_opc::SET_FEATURES, cid, Nsid(0));
    r.cdw[0] = fid as u32;
    r.cdw[1] = value;
    r.to_bytes()
}

/// Get Features `fid` (current value).
pub fn get_features(cid: Cid, fid: u8) -> [u8; SQE_LEN] {
    let mut r = SqeRepr::new(admin_opc::GET_FEATURES, cid, Nsid(0));
    r.cdw[0] = fid as u32;
    r.to_bytes()
}

/// Keep Alive.
pub fn keep_alive(cid: Cid) -> [u8; SQE_LEN] {
    SqeRepr::new(admin_opc::KEEP_ALIVE, cid, Nsid(0)).to_bytes()
}

/// Asynchronous Event Request.
pub fn async_event_request(cid: Cid) -> [u8; SQE_LEN] {
    SqeRepr::new(admin_opc::ASYNC_EVENT_REQUEST, cid, Nsid(0)).to_bytes()
}

fn rw(
    opc: u8,
    cid: Cid,
    nsid: Nsid,
    slba: u64,
    nlb: u16,
    fua: bool,
    sgl: SglDesc,
) -> [u8; SQE_LEN] {
    let mut r = SqeRepr::new(opc, cid, nsid);
    r.sgl1 = sgl;
    r.cdw[0] = slba as u32;
    r.cdw[1] = (slba >> 32) as u32;
    // NLB is 0's based; FUA is CDW12 bit 30.
    r.cdw[2] = nlb.saturating_sub(1) as u32 | (fua as u32) << 30;
    r.to_bytes()
}

/// Read `nlb` (1 ..= 65536 as 1's based, given here as 1..=65535) blocks.
pub fn read(cid: Cid, nsid: Nsid, slba: u64, nlb: u16, sgl: SglDesc) -> [u8; SQE_LEN] {
    rw(io_opc::READ, cid, nsid, slba, nlb, false, sgl)
}

/// Write `nlb` blocks from `sgl`.
pub fn write(cid: Cid, nsid: Nsid, slba: u64, nlb: u16, fua: bool, sgl: SglDesc) -> [u8; SQE_LEN] {
    rw(io_opc::WRITE, cid, nsid, slba, nlb, fua, sgl)
}

/// Write Zeroes of `nlb` blocks.
pub fn write_zeroes(cid: Cid, nsid: Nsid, slba: u64, nlb: u16) -> [u8; SQE_LEN] {
    rw(
        io_opc::WRITE_ZEROES,
        cid,
        nsid,
        slba,
        nlb,
        false,
        SqeRepr::new(0, cid, nsid).sgl1,
    )
}

/// Flush.
pub fn flush(cid: Cid, nsid: Nsid) -> [u8; SQE_LEN] {
    SqeRepr::new(io_opc::FLUSH, cid, nsid).to_bytes()
}

/// A command capsule with in-capsule data: SGL1 becomes a data block with
/// the offset subtype at offset 0 and the data follows the SQE.
pub fn with_in_capsule_data(sqe: [u8; SQE_LEN], data: &[u8]) -> Vec<u8> {
    let mut b = Vec::with_capacity(SQE_LEN + data.len());
    b.extend_from_slice(&sqe);
    SglDesc::InCapsule {
        offset: 0,
        len: data.len() as u32,
    }
    .emit(&mut b[24..40]);
    b.extend_from_slice(data);
    b
}

/// Parses a response capsule.
pub fn parse_response(b: &[u8]) -> Result<CqeRepr, Error> {
    CqeRepr::parse(b)
}

/// Hands out command identifiers for a queue of `depth` entries; at most
/// `depth` are in use at once.
#[derive(Debug, Clone)]
pub struct CidAllocator {
    used: Vec<bool>,
    next: usize,
}

impl CidAllocator {
    /// An allocator for `depth` (at least 1) outstanding commands.
    pub fn new(depth: u16) -> CidAllocator {
        CidAllocator {
            used: vec![false; depth.max(1) as usize],
            next: 0,
        }
    }

    /// A free CID, or `None` when `depth` are in use.
    pub fn alloc(&mut self) -> Option<Cid> {
        let n = self.used.len();
        for k in 0..n {
            let i = (self.next + k) % n;
            if !self.used[i] {
                self.used[i] = true;
                self.next = (i + 1) % n;
                return Some(Cid(i as u16));
            }
        }
        None
    }

    /// Returns a CID; false if it was not in use (a response for a
    /// command never sent).
    pub fn free(&mut self, cid: Cid) -> bool {
        match self.used.get_mut(cid.0 as usize) {
            Some(u) if *u => {
                *u = false;
                true
            }
            _ => false,
        }
    }

    /// How many CIDs it hands out at most.
    pub fn capacity(&self) -> usize {
        self.used.len()
    }

    /// CIDs in use.
    pub fn in_use(&self) -> usize {
        self.used.iter().filter(|&&u| u).count()
    }
}

/// When to send Keep Alive: every half KATO, as Linux's host does
/// (NVMe base 1.4 §7.12.1 leaves the interval to the host).
#[derive(Debug, Clone, Copy)]
pub struct KeepAliveTimer {
    interval: Option<Duration>,
    due: Option<Duration>,
}

impl KeepAliveTimer {
    /// A timer for `kato_ms` (0 = none), started at `now`.
    pub fn new(kato_ms: u32, now: Duration) -> KeepAliveTimer {
        let interval = (kato_ms > 0).then(|| Duration::from_millis(kato_ms as u64) / 2);
        KeepAliveTimer {
            interval,
            due: interval.map(|i| now + i),
        }
    }

    /// When the next Keep Alive is due.
    pub fn next_deadline(&self) -> Option<Duration> {
        self.due
    }

    /// True if a Keep Alive should be sent at `now`; the next one is then
    /// scheduled.
    pub fn on_timeout(&mut self, now: Duration) -> bool {
        match (self.due, self.interval) {
            (Some(d), Some(i)) if d <= now => {
                self.due = Some(now + i);
                true
            }
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::sqe::Sqe;

    #[test]
    fn builders() {
        let r = read(
            Cid(1),
            Nsid(1),
            0x1_0000_0002,
            8,
            SqeRepr::new(0, Cid(0), Nsid(0)).sgl1,
        );
        let v = Sqe::new_checked(&r[..]).unwrap();
        assert_eq!((v.cdw(10), v.cdw(11), v.cdw(12)), (2, 1, 7));
        let w = write(
            Cid(2),
            Nsid(1),
            0,
            1,
            true,
            SqeRepr::new(0, Cid(0), Nsid(0)).sgl1,
        );
        assert_eq!(Sqe::new_checked(&w[..]).unwrap().cdw(12), 1 << 30);
        let c = with_in_capsule_data(w, &[5; 512]);
        assert_eq!(c.len(), 576);
        assert_eq!(c[39], 0x01);
        assert_eq!(cm_request(Qid(0), 32)[4..8], [32, 0, 31, 0]);
        let g = get_log_page(
            Cid(3),
            0x70,
            Nsid(0),
            1024,
            0,
            false,
            SqeRepr::new(0, Cid(0), Nsid(0)).sgl1,
        );
        assert_eq!(Sqe::new_checked(&g[..]).unwrap().cdw(10), 0x70 | 255 << 16);
    }

    #[test]
    fn cids_bounded() {
        let mut a = CidAllocator::new(2);
        let x = a.alloc().unwrap();
        let _y = a.alloc().unwrap();
        assert_eq!(a.alloc(), None);
        assert!(a.free(x));
        assert!(!a.free(x));
        assert_eq!(a.alloc(), Some(x));
        assert_eq!(a.in_use(), 2);
    }

    #[test]
    fn keep_alive_half_kato() {
        let mut t = KeepAliveTimer::new(1000, Duration::ZERO);
        assert_eq!(t.next_deadline(), Some(Duration::from_millis(500)));
        assert!(!t.on_timeout(Duration::from_millis(499)));
        assert!(t.on_timeout(Duration::from_millis(500)));
        assert_eq!(t.next_deadline(), Some(Duration::from_millis(1000)));
        assert_eq!(KeepAliveTimer::new(0, Duration::ZERO).next_deadline(), None);
    }
}
