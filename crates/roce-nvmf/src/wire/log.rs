//! Log pages (NVMe base 1.4 §5.14.1): Error Information (01h, Figure 193),
//! SMART / Health Information (02h, Figure 194), Changed Namespace List
//! (04h, Figure 197) and the Discovery log page (70h, NVMe-oF 1.1 §5.3,
//! Figures 40–41).

use super::{get_ascii_trim, get_nul_str, le16, le32, le64, put, put16, put32, put64, Error};

/// Log page identifiers.
pub mod lid {
    /// Error Information.
    pub const ERROR: u8 = 0x01;
    /// SMART / Health Information.
    pub const SMART: u8 = 0x02;
    /// Firmware Slot Information.
    pub const FW_SLOT: u8 = 0x03;
    /// Changed Namespace List.
    pub const CHANGED_NS: u8 = 0x04;
    /// Discovery (NVMe-oF).
    pub const DISCOVERY: u8 = 0x70;
}

/// The fields of Get Log Page (NVMe base 1.4 Figure 189–191).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GetLogPage {
    /// Log Page Identifier (CDW10 bits 7:0).
    pub lid: u8,
    /// Log Specific Field (CDW10 bits 12:8).
    pub lsp: u8,
    /// Retain Asynchronous Event (CDW10 bit 15).
    pub rae: bool,
    /// Number of dwords to return, 0's based (NUMDU:NUMDL).
    pub numd: u32,
    /// Log Page Offset in bytes (CDW13:CDW12).
    pub lpo: u64,
}

impl GetLogPage {
    /// Reads the fields from CDW10–13.
    pub fn from_cdw(cdw10: u32, cdw11: u32, cdw12: u32, cdw13: u32) -> GetLogPage {
        GetLogPage {
            lid: cdw10 as u8,
            lsp: ((cdw10 >> 8) & 0x1F) as u8,
            rae: cdw10 & (1 << 15) != 0,
            numd: (cdw10 >> 16) | ((cdw11 & 0xFFFF) << 16),
            lpo: cdw12 as u64 | (cdw13 as u64) << 32,
        }
    }

    /// CDW10–13 for these fields.
    pub fn to_cdw(&self) -> [u32; 4] {
        [
            self.lid as u32
                | ((self.lsp as u32 & 0x1F) << 8)
                | ((self.rae as u32) << 15)
                | (self.numd & 0xFFFF) << 16,
            self.numd >> 16,
            self.lpo as u32,
            (self.lpo >> 32) as u32,
        ]
    }

    /// Bytes requested: (NUMD + 1) * 4.
    pub fn len_bytes(&self) -> u64 {
        (self.numd as u64 + 1) * 4
    }
}

/// Size of the discovery log header and of each entry.
pub const DISCOVERY_RECORD_LEN: usize = 1024;

/// Transport type RDMA (TRTYPE, NVMe-oF 1.1 Figure 41).
pub const TRTYPE_RDMA: u8 = 1;
/// Address family IPv4 (ADRFAM).
pub const ADRFAM_IPV4: u8 = 1;
/// Address family IPv6.
pub const ADRFAM_IPV6: u8 = 2;
/// Subsystem type: referral to another discovery service.
pub const SUBTYPE_DISCOVERY: u8 = 1;
/// Subsystem type: NVM subsystem.
pub const SUBTYPE_NVM: u8 = 2;
/// TREQ: secure channel not specified (bits 1:0 = 00b).
pub const TREQ_NOT_SPECIFIED: u8 = 0;
/// RDMA QP service type reliable connected (TSAS byte 0).
pub const RDMA_QPTYPE_RC: u8 = 1;
/// RDMA provider type RoCE v2 (TSAS byte 1).
pub const RDMA_PRTYPE_ROCEV2: u8 = 4;
/// RDMA connection management service RDMA_CM (TSAS byte 2).
pub const RDMA_CMS_RDMA_CM: u8 = 1;

/// One Discovery Log Page Entry (NVMe-oF 1.1 Figure 41).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DiscoveryEntry {
    /// Transport Type.
    pub trtype: u8,
    /// Address Family.
    pub adrfam: u8,
    /// Subsystem Type.
    pub subtype: u8,
    /// Transport Requirements.
    pub treq: u8,
    /// Port ID.
    pub portid: u16,
    /// Controller ID (0xFFFF: dynamic model).
    pub cntlid: u16,
    /// Admin Max SQ Size.
    pub asqsz: u16,
    /// Transport Service Identifier (the port, as ASCII).
    pub trsvcid: String,
    /// NVM Subsystem NQN.
    pub subnqn: String,
    /// Transport Address (the IP address, as ASCII).
    pub traddr: String,
    /// RDMA TSAS: QP type, provider type, CM service.
    pub rdma_qptype: u8,
    /// RDMA provider type.
    pub rdma_prtype: u8,
    /// RDMA connection management service.
    pub rdma_cms: u8,
}

impl DiscoveryEntry {
    /// Writes the 1024-byte entry.
    pub fn emit(&self, b: &mut [u8]) {
        put(b, 0, &[self.trtype, self.adrfam, self.subtype, self.treq]);
        put16(b, 4, self.portid);
        put16(b, 6, self.cntlid);
        put16(b, 8, self.asqsz);
        // TRSVCID and TRADDR are ASCII, space padded (NVMe-oF 1.1 Fig. 41).
        super::put_ascii_padded(b, 32, 32, &self.trsvcid);
        super::put_nul_padded(b, 256, 256, &self.subnqn);
        super::put_ascii_padded(b, 512, 256, &self.traddr);
        put(b, 768, &[self.rdma_qptype, self.rdma_prtype, self.rdma_cms]);
    }

    /// Parses a 1024-byte entry.
    pub fn parse(b: &[u8]) -> Result<DiscoveryEntry, Error> {
        if b.len() < DISCOVERY_RECORD_LEN {
            return Err(Error::Truncated);
        }
        Ok(DiscoveryEntry {
            trtype: b[0],
            adrfam: b[1],
            subtype: b[2],
            treq: b[3],
            portid: le16(b, 4)?,
            cntlid: le16(b, 6)?,
            asqsz: le16(b, 8)?,
            trsvcid: get_ascii_trim(b, 32, 32)?,
            subnqn: get_nul_str(b, 256, 256)?,
            traddr: get_ascii_trim(b, 512, 256)?,
            rdma_qptype: b[768],
            rdma_prtype: b[769],
            rdma_cms: b[770],
        })
    }
}

/// The whole discovery log page: header (GENCTR, NUMREC, RECFMT) and the
/// entries.
pub fn discovery_log(genctr: u64, entries: &[DiscoveryEntry]) -> Vec<u8> {
    let mut b = vec![0u8; DISCOVERY_RECORD_LEN * (1 + entries.len())];
    put64(&mut b, 0, genctr);
    put64(&mut b, 8, entries.len() as u64);
    put16(&mut b, 16, 0);
    for (i, e) in entries.iter().enumerate() {
        let at = DISCOVERY_RECORD_LEN * (i + 1);
        e.emit(&mut b[at..at + DISCOVERY_RECORD_LEN]);
    }
    b
}

/// Parses a discovery log page header: (GENCTR, NUMREC).
pub fn parse_discovery_header(b: &[u8]) -> Result<(u64, u64), Error> {
    Ok((le64(b, 0)?, le64(b, 8)?))
}

/// Size of an Error Information log entry.
pub const ERROR_ENTRY_LEN: usize = 64;

/// One Error Information entry (NVMe base 1.4 Figure 193).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ErrorEntry {
    /// Error Count: unique, incrementing, nonzero.
    pub error_count: u64,
    /// Submission Queue ID.
    pub sqid: u16,
    /// Command ID.
    pub cid: u16,
    /// Status field (as in the CQE, phase bit 0).
    pub status: u16,
    /// Parameter Error Location (byte offset in the SQE, bits 7:0; bit
    /// position 10:8), 0xFFFF if not applicable.
    pub param_loc: u16,
    /// LBA.
    pub lba: u64,
    /// Namespace.
    pub nsid: u32,
    /// Transport type (byte 29).
    pub trtype: u8,
}

impl ErrorEntry {
    /// Writes the 64-byte entry.
    pub fn emit(&self, b: &mut [u8]) {
        put64(b, 0, self.error_count);
        put16(b, 8, self.sqid);
        put16(b, 10, self.cid);
        put16(b, 12, self.status);
        put16(b, 14, self.param_loc);
        put64(b, 16, self.lba);
        put32(b, 24, self.nsid);
        put(b, 29, &[self.trtype]);
    }

    /// Parses a 64-byte entry.
    pub fn parse(b: &[u8]) -> Result<ErrorEntry, Error> {
        if b.len() < ERROR_ENTRY_LEN {
            return Err(Error::Truncated);
        }
        Ok(ErrorEntry {
            error_count: le64(b, 0)?,
            sqid: le16(b, 8)?,
            cid: le16(b, 10)?,
            status: le16(b, 12)?,
            param_loc: le16(b, 14)?,
            lba: le64(b, 16)?,
            nsid: le32(b, 24)?,
            trtype: b[29],
        })
    }
}

/// Size of the SMART / Health Information log.
pub const SMART_LEN: usize = 512;

/// The SMART / Health counters this target keeps (NVMe base 1.4
/// Figure 194; 128-bit counters are emitted from 64-bit values).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SmartLog {
    /// Composite Temperature in kelvins (bytes 1–2).
    pub temperature_k: u16,
    /// Available Spare percent (byte 3).
    pub avail_spare: u8,
    /// Data Units Read, thousands of 512-byte units (bytes 32–47).
    pub data_units_read: u64,
    /// Data Units Written (bytes 48–63).
    pub data_units_written: u64,
    /// Host Read Commands (bytes 64–79).
    pub host_reads: u64,
    /// Host Write Commands (bytes 80–95).
    pub host_writes: u64,
    /// Number of Error Information Log Entries (bytes 176–191).
    pub err_log_entries: u64,
}

impl SmartLog {
    /// The 512 bytes.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut b = vec![0u8; SMART_LEN];
        put16(&mut b, 1, self.temperature_k);
        put(&mut b, 3, &[self.avail_spare, 10]);
        put64(&mut b, 32, self.data_units_read);
        put64(&mut b, 48, self.data_units_written);
        put64(&mut b, 64, self.host_reads);
        put64(&mut b, 80, self.host_writes);
        put64(&mut b, 176, self.err_log_entries);
        b
    }
}

/// Size of the Changed Namespace List log.
pub const CHANGED_NS_LEN: usize = 4096;

/// The Changed Namespace List: up to 1024 NSIDs; more than that is
/// reported as a single 0xFFFFFFFF (NVMe base 1.4 §5.14.1.4).
pub fn changed_ns_list(nsids: &[u32]) -> Vec<u8> {
    let mut b = vec![0u8; CHANGED_NS_LEN];
    if nsids.len() > CHANGED_NS_LEN / 4 {
        put32(&mut b, 0, 0xFFFF_FFFF);
    } else {
        for (i, n) in nsids.iter().enumerate() {
            put32(&mut b, i * 4, *n);
        }
    }
    b
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn get_log_page_fields() {
        let g = GetLogPage {
            lid: 0x70,
            lsp: 0,
            rae: true,
            numd: 0x1_02FF,
            lpo: 1 << 33,
        };
        let c = g.to_cdw();
        assert_eq!(c[0], 0x70 | 1 << 15 | 0x02FF << 16);
        assert_eq!(c[1], 1);
        assert_eq!(GetLogPage::from_cdw(c[0], c[1], c[2], c[3]), g);
        assert_eq!(GetLogPage::from_cdw(0x00FF_0002, 0, 0, 0).len_bytes(), 1024);
    }

    #[test]
    fn discovery_layout() {
        let e = DiscoveryEntry {
            trtype: TRTYPE_RDMA,
            adrfam: ADRFAM_IPV4,
            subtype: SUBTYPE_NVM,
            treq: 0,
            portid: 1,
            cntlid: 0xFFFF,
            asqsz: 32,
            trsvcid: "4420".into(),
            subnqn: "nqn.a".into(),
            traddr: "10.0.0.1".into(),
            rdma_qptype: RDMA_QPTYPE_RC,
            rdma_prtype: RDMA_PRTYPE_ROCEV2,
            rdma_cms: RDMA_CMS_RDMA_CM,
        };
        let b = discovery_log(3, core::slice::from_ref(&e));
        assert_eq!(b.len(), 2048);
        assert_eq!(parse_discovery_header(&b), Ok((3, 1)));
        let r = &b[1024..];
        assert_eq!(&r[..4], &[1, 1, 2, 0]);
        assert_eq!(&r[6..10], &[0xFF, 0xFF, 32, 0]);
        assert_eq!(&r[32..37], b"4420 ");
        assert_eq!(&r[512..521], b"10.0.0.1 ");
        assert_eq!(&r[768..771], &[1, 4, 1]);
        assert_eq!(DiscoveryEntry::parse(r), Ok(e));
    }

    #[test]
    fn error_smart_changed() {
        let e = ErrorEntry {
            error_count: 1,
            sqid: 2,
            cid: 3,
            status: 0x8100,
            param_loc: 0xFFFF,
            lba: 9,
            nsid: 1,
            trtype: 1,
        };
        let mut b = [0u8; 64];
        e.emit(&mut b);
        assert_eq!(&b[8..16], &[2, 0, 3, 0, 0, 0x81, 0xFF, 0xFF]);
        assert_eq!(ErrorEntry::parse(&b), Ok(e));
        let s = SmartLog {
            host_writes: 5,
            ..Default::default()
        }
        .to_bytes();
        assert_eq!(s[80], 5);
        let c = changed_ns_list(&[1, 2]);
        assert_eq!(&c[..8], &[1, 0, 0, 0, 2, 0, 0, 0]);
        let many: Vec<u32> = (1..=1025).collect();
        assert_eq!(
            &changed_ns_list(&many)[..8],
            &[0xFF, 0xFF, 0xFF, 0xFF, 0, 0, 0, 0]
        );
    }
}
