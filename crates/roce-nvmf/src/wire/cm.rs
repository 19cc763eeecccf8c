//! RDMA CM private data of the NVMe-oF RDMA transport binding
//! (NVMe-oF 1.1 §7.3.5.1 "RDMA_CM_REQUEST", §7.3.5.2 "RDMA_CM_ACCEPT",
//! §7.3.5.3 "RDMA_CM_REJECT"; Figures 54–57).

use super::{le16, put16, Error, Qid};

/// Size of the request record (bytes 8–31 reserved).
pub const REQUEST_LEN: usize = 32;
/// Size of the accept record (bytes 4–31 reserved).
pub const ACCEPT_LEN: usize = 32;
/// Size of the reject record.
pub const REJECT_LEN: usize = 4;
/// The only record format defined (RECFMT 0).
pub const RECFMT_1_0: u16 = 0;

/// The first `N` bytes of `b`, zero padded.
fn padded<const N: usize>(b: &[u8]) -> [u8; N] {
    let mut out = [0u8; N];
    let n = b.len().min(N);
    out[..n].copy_from_slice(&b[..n]);
    out
}

/// The host's RDMA_CM_REQUEST private data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CmRequest {
    /// Record format (0).
    pub recfmt: u16,
    /// Queue the connection is for (0 = admin).
    pub qid: Qid,
    /// Host receive queue size: how many response capsules the host can
    /// hold (Linux sends 32 for the admin queue, the queue size for I/O).
    pub hrqsize: u16,
    /// Host send queue size, 0's based (Linux sends 31 for the admin
    /// queue, the SQSIZE of the Connect for I/O queues).
    pub hsqsize: u16,
}

/// Why a request record is refused: the RDMA_CM_REJECT status values
/// (NVMe-oF 1.1 Figure 57).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RejectStatus {
    /// 01h: invalid private data length.
    InvalidLength,
    /// 02h: invalid record format.
    InvalidRecfmt,
    /// 03h: invalid queue ID.
    InvalidQid,
    /// 04h: invalid HSQSIZE.
    InvalidHsqsize,
    /// 05h: invalid HRQSIZE.
    InvalidHrqsize,
    /// 06h: no resources.
    NoResources,
    /// 07h: invalid IRD.
    InvalidIrd,
    /// 08h: invalid ORD.
    InvalidOrd,
}

impl RejectStatus {
    /// The status value.
    pub fn code(self) -> u16 {
        match self {
            RejectStatus::InvalidLength => 1,
            RejectStatus::InvalidRecfmt => 2,
            RejectStatus::InvalidQid => 3,
            RejectStatus::InvalidHsqsize => 4,
            RejectStatus::InvalidHrqsize => 5,
            RejectStatus::NoResources => 6,
            RejectStatus::InvalidIrd => 7,
            RejectStatus::InvalidOrd => 8,
        }
    }

    /// The status for a value, if defined.
    pub fn from_code(v: u16) -> Option<RejectStatus> {
        Some(match v {
            1 => RejectStatus::InvalidLength,
            2 => RejectStatus::InvalidRecfmt,
            3 => RejectStatus::InvalidQid,
            4 => RejectStatus::InvalidHsqsize,
            5 => RejectStatus::InvalidHrqsize,
            6 => RejectStatus::NoResources,
            7 => RejectStatus::InvalidIrd,
            8 => RejectStatus::InvalidOrd,
            _ => return None,
        })
    }
}

impl CmRequest {
    /// Parses the private data of a connection request; a format other
    /// than 0 is [`RejectStatus::InvalidRecfmt`].
    ///
    /// The private data of an IB CM REQ is a fixed-size field (IBA Vol 1
    /// §12.6.5; 56 bytes after rdma_cm's header) whose length is not on
    /// the wire, and this stack's CM hands it over without its trailing
    /// zeros: a shorter record is read as if padded with zeros.
    pub fn parse(b: &[u8]) -> Result<CmRequest, RejectStatus> {
        let b = padded::<REQUEST_LEN>(b);
        let r = |at| le16(&b, at).map_err(|_| RejectStatus::InvalidLength);
        let recfmt = r(0)?;
        if recfmt != RECFMT_1_0 {
            return Err(RejectStatus::InvalidRecfmt);
        }
        Ok(CmRequest {
            recfmt,
            qid: Qid(r(2)?),
            hrqsize: r(4)?,
            hsqsize: r(6)?,
        })
    }

    /// The 32-byte record.
    pub fn to_bytes(&self) -> [u8; REQUEST_LEN] {
        let mut b = [0u8; REQUEST_LEN];
        put16(&mut b, 0, self.recfmt);
        put16(&mut b, 2, self.qid.0);
        put16(&mut b, 4, self.hrqsize);
        put16(&mut b, 6, self.hsqsize);
        b
    }
}

/// The target's RDMA_CM_ACCEPT private data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CmAccept {
    /// Record format (0).
    pub recfmt: u16,
    /// Controller receive queue size: how many command capsules the
    /// target can hold for this queue.
    pub crqsize: u16,
}

impl CmAccept {
    /// Parses an accept record (zero padded, as [`CmRequest::parse`]).
    pub fn parse(b: &[u8]) -> Result<CmAccept, Error> {
        let b = padded::<ACCEPT_LEN>(b);
        Ok(CmAccept {
            recfmt: le16(&b, 0)?,
            crqsize: le16(&b, 2)?,
        })
    }

    /// The 32-byte record.
    pub fn to_bytes(&self) -> [u8; ACCEPT_LEN] {
        let mut b = [0u8; ACCEPT_LEN];
        put16(&mut b, 0, self.recfmt);
        put16(&mut b, 2, self.crqsize);
        b
    }
}

/// The target's RDMA_CM_REJECT private data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CmReject {
    /// Record format (0).
    pub recfmt: u16,
    /// Status value (see [`RejectStatus`]).
    pub status: u16,
}

impl CmReject {
    /// A reject record for `status`.
    pub fn new(status: RejectStatus) -> CmReject {
        CmReject {
            recfmt: RECFMT_1_0,
            status: status.code(),
        }
    }

    /// Parses a reject record (zero padded, as [`CmRequest::parse`]).
    pub fn parse(b: &[u8]) -> Result<CmReject, Error> {
        let b = padded::<REJECT_LEN>(b);
        Ok(CmReject {
            recfmt: le16(&b, 0)?,
            status: le16(&b, 2)?,
        })
    }

    /// The 4-byte record.
    pub fn to_bytes(&self) -> [u8; REJECT_LEN] {
        let mut b = [0u8; REJECT_LEN];
        put16(&mut b, 0, self.recfmt);
        put16(&mut b, 2, self.status);
        b
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn linux_admin_request() {
        // What nvme-rdma sends for the admin queue: recfmt 0, qid 0,
        // hrqsize 32, hsqsize 31, then zeros.
        let mut b = [0u8; 32];
        b[4] = 32;
        b[6] = 31;
        let r = CmRequest::parse(&b).unwrap();
        assert_eq!(
            r,
            CmRequest {
                recfmt: 0,
                qid: Qid(0),
                hrqsize: 32,
                hsqsize: 31
            }
        );
        assert_eq!(r.to_bytes(), b);
        // Trailing zeros may be missing (a fixed-size CM field).
        assert_eq!(CmRequest::parse(&b[..7]), Ok(r));
        b[0] = 1;
        assert_eq!(CmRequest::parse(&b), Err(RejectStatus::InvalidRecfmt));
    }

    #[test]
    fn accept_reject_layout() {
        let a = CmAccept {
            recfmt: 0,
            crqsize: 128,
        }
        .to_bytes();
        assert_eq!(&a[..4], &[0, 0, 128, 0]);
        let r = CmReject::new(RejectStatus::InvalidHsqsize).to_bytes();
        assert_eq!(r, [0, 0, 4, 0]);
        assert_eq!(RejectStatus::from_code(6), Some(RejectStatus::NoResources));
        assert_eq!(
            CmAccept::parse(&[0, 0, 128]),
            Ok(CmAccept {
                recfmt: 0,
                crqsize: 128
            })
        );
        assert_eq!(CmReject::parse(&[0, 0, 1]).unwrap().status, 1);
    }
}
