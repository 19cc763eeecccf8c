//! Identify data structures (NVMe base 1.4 §5.15.2): the controller
//! (CNS 01h, Figure 247), a namespace (CNS 00h, Figure 245), the active
//! namespace ID list (CNS 02h) and the namespace identification
//! descriptor list (CNS 03h, Figure 249).

use super::{
    get_ascii_trim, get_nul_str, le16, le32, le64, put, put16, put32, put64, put_ascii_padded,
    put_nul_padded, Error, Nsid,
};

/// Size of every Identify data structure.
pub const IDENTIFY_LEN: usize = 4096;

/// Controller or Namespace Structure values (CDW10 bits 7:0).
pub mod cns {
    /// Identify Namespace.
    pub const NAMESPACE: u8 = 0x00;
    /// Identify Controller.
    pub const CONTROLLER: u8 = 0x01;
    /// Active Namespace ID list.
    pub const ACTIVE_NS_LIST: u8 = 0x02;
    /// Namespace Identification Descriptor list.
    pub const NS_DESC_LIST: u8 = 0x03;
    /// I/O Command Set specific Identify Controller (NVMe base 2.0; the
    /// NVM Command Set 1.0 §4.1.5.2 structure). Linux's host asks for it
    /// (CSI 0) on every I/O controller that reports version 1.1 or later.
    pub const CS_CONTROLLER: u8 = 0x06;
}

/// Controller type (CNTRLTYPE, byte 111).
pub mod cntrltype {
    /// I/O controller.
    pub const IO: u8 = 1;
    /// Discovery controller.
    pub const DISCOVERY: u8 = 2;
}

/// CTRATT bit 6, Traffic Based Keep Alive Support: the controller
/// restarts its keep alive timer on any command it processes (NVMe base
/// 1.4 §7.12.1, Identify Controller's CTRATT).
pub const CTRATT_TBKAS: u32 = 1 << 6;

/// The Identify Controller fields a Linux host reads (NVMe base 1.4
/// Figure 247; bytes 1792–2047 are the NVMe-oF attributes, NVMe-oF 1.1
/// Figure 11). Fields not named are emitted as zero.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdentifyController {
    /// PCI Vendor ID (bytes 0–1).
    pub vid: u16,
    /// Serial Number (bytes 4–23, ASCII, space padded).
    pub sn: String,
    /// Model Number (bytes 24–63).
    pub mn: String,
    /// Firmware Revision (bytes 64–71).
    pub fr: String,
    /// Maximum Data Transfer Size, a power of two in units of the minimum
    /// memory page size (4 KiB here); 0 = no limit (byte 77).
    pub mdts: u8,
    /// Controller ID (bytes 78–79).
    pub cntlid: u16,
    /// Version (bytes 80–83).
    pub ver: u32,
    /// Optional Asynchronous Events Supported (bytes 92–95; bit 8:
    /// namespace attribute notices).
    pub oaes: u32,
    /// Controller Attributes (bytes 96–99; [`CTRATT_TBKAS`]).
    pub ctratt: u32,
    /// Controller type (byte 111).
    pub cntrltype: u8,
    /// Optional Admin Command Support (bytes 256–257).
    pub oacs: u16,
    /// Abort Command Limit, 0's based (byte 258).
    pub acl: u8,
    /// Asynchronous Event Request Limit, 0's based (byte 259).
    pub aerl: u8,
    /// Log Page Attributes (byte 261; bit 2: extended data for Get Log
    /// Page).
    pub lpa: u8,
    /// Error Log Page Entries, 0's based (byte 262).
    pub elpe: u8,
    /// Keep Alive Support granularity in 100 ms units (bytes 320–321).
    pub kas: u16,
    /// SQ entry size: bits 3:0 required, 7:4 maximum, log2 (byte 512).
    pub sqes: u8,
    /// CQ entry size (byte 513).
    pub cqes: u8,
    /// Maximum outstanding commands (bytes 514–515).
    pub maxcmd: u16,
    /// Number of Namespaces: the largest valid NSID (bytes 516–519).
    pub nn: u32,
    /// Optional NVM Command Support (bytes 520–521; bit 2 DSM, bit 3
    /// Write Zeroes).
    pub oncs: u16,
    /// Volatile Write Cache (byte 525; bit 0 present).
    pub vwc: u8,
    /// SGL Support (bytes 536–539; bit 0 SGLs supported, bit 2 keyed data
    /// block, bit 20 offset addresses for data blocks).
    pub sgls: u32,
    /// NVM Subsystem NQN (bytes 768–1023).
    pub subnqn: String,
    /// I/O Queue Command Capsule Supported Size in 16-byte units
    /// (bytes 1792–1795): 4 = no in-capsule data.
    pub ioccsz: u32,
    /// I/O Queue Response Capsule Supported Size in 16-byte units
    /// (bytes 1796–1799): 1 for the RDMA transport.
    pub iorcsz: u32,
    /// In Capsule Data Offset in 16-byte units (bytes 1800–1801); Linux's
    /// host refuses any value but 0.
    pub icdoff: u16,
    /// Fabrics Controller Attributes (byte 1802; bit 0: static model).
    pub fcatt: u8,
    /// Maximum SGL Data Block Descriptors (byte 1803).
    pub msdbd: u8,
}

/// SGLS bit 0: SGLs supported (byte-aligned, NVMe base 1.4 Figure 247).
pub const SGLS_SUPPORTED: u32 = 1 << 0;
/// SGLS bit 2: Keyed SGL Data Block descriptor supported.
pub const SGLS_KEYED: u32 = 1 << 2;
/// SGLS bit 20: Offset addresses for data blocks (in-capsule data).
pub const SGLS_OFFSET: u32 = 1 << 20;

impl IdentifyController {
    /// Writes the 4096-byte structure into `b` (which must be at least
    /// that long; a shorter buffer is left partly written).
    pub fn emit(&self, b: &mut [u8]) {
        let end = b.len().min(IDENTIFY_LEN);
        b[..end].fill(0);
        put16(b, 0, self.vid);
        put16(b, 2, self.vid);
        put_ascii_padded(b, 4, 20, &self.sn);
        put_ascii_padded(b, 24, 40, &self.mn);
        put_ascii_padded(b, 64, 8, &self.fr);
        put(b, 77, &[self.mdts]);
        put16(b, 78, self.cntlid);
        put32(b, 80, self.ver);
        put32(b, 92, self.oaes);
        put32(b, 96, self.ctratt);
        put(b, 111, &[self.cntrltype]);
        put16(b, 256, self.oacs);
        put(b, 258, &[self.acl, self.aerl, 0, self.lpa, self.elpe]);
        put16(b, 320, self.kas);
        put(b, 512, &[self.sqes, self.cqes]);
        put16(b, 514, self.maxcmd);
        put32(b, 516, self.nn);
        put16(b, 520, self.oncs);
        put(b, 525, &[self.vwc]);
        put32(b, 536, self.sgls);
        put_nul_padded(b, 768, 256, &self.subnqn);
        put32(b, 1792, self.ioccsz);
        put32(b, 1796, self.iorcsz);
        put16(b, 1800, self.icdoff);
        put(b, 1802, &[self.fcatt, self.msdbd]);
    }

    /// The structure as a 4096-byte vector.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut b = vec![0u8; IDENTIFY_LEN];
        self.emit(&mut b);
        b
    }

    /// Parses the named fields.
    pub fn parse(b: &[u8]) -> Result<IdentifyController, Error> {
        if b.len() < IDENTIFY_LEN {
            return Err(Error::Truncated);
        }
        Ok(IdentifyController {
            vid: le16(b, 0)?,
            sn: get_ascii_trim(b, 4, 20)?,
            mn: get_ascii_trim(b, 24, 40)?,
            fr: get_ascii_trim(b, 64, 8)?,
            mdts: b[77],
            cntlid: le16(b, 78)?,
            ver: le32(b, 80)?,
            oaes: le32(b, 92)?,
            ctratt: le32(b, 96)?,
            cntrltype: b[111],
            oacs: le16(b, 256)?,
            acl: b[258],
            aerl: b[259],
            lpa: b[261],
            elpe: b[262],
            kas: le16(b, 320)?,
            sqes: b[512],
            cqes: b[513],
            maxcmd: le16(b, 514)?,
            nn: le32(b, 516)?,
            oncs: le16(b, 520)?,
            vwc: b[525],
            sgls: le32(b, 536)?,
            subnqn: get_nul_str(b, 768, 256)?,
            ioccsz: le32(b, 1792)?,
            iorcsz: le32(b, 1796)?,
            icdoff: le16(b, 1800)?,
            fcatt: b[1802],
            msdbd: b[1803],
        })
    }
}

/// The Identify Namespace fields this target fills in (NVMe base 1.4
/// Figure 245), with one LBA format.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdentifyNamespace {
    /// Namespace Size in logical blocks (bytes 0–7).
    pub nsze: u64,
    /// Namespace Capacity (bytes 8–15).
    pub ncap: u64,
    /// Namespace Utilization (bytes 16–23).
    pub nuse: u64,
    /// Namespace Features (byte 24).
    pub nsfeat: u8,
    /// Number of LBA Formats, 0's based (byte 25).
    pub nlbaf: u8,
    /// Formatted LBA Size (byte 26; bits 3:0 the format in use).
    pub flbas: u8,
    /// Namespace Globally Unique Identifier (bytes 104–119).
    pub nguid: [u8; 16],
    /// LBA Data Size of LBA format 0 as log2 of bytes (byte 130).
    pub lbaf0_lbads: u8,
}

impl IdentifyNamespace {
    /// The 4096 bytes.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut b = vec![0u8; IDENTIFY_LEN];
        put64(&mut b, 0, self.nsze);
        put64(&mut b, 8, self.ncap);
        put64(&mut b, 16, self.nuse);
        put(&mut b, 24, &[self.nsfeat, self.nlbaf, self.flbas]);
        put(&mut b, 104, &self.nguid);
        // LBAF0 (bytes 128–131): MS 15:0 = 0, LBADS 23:16, RP 25:24 = 0.
        put32(&mut b, 128, (self.lbaf0_lbads as u32) << 16);
        b
    }

    /// Parses the named fields.
    pub fn parse(b: &[u8]) -> Result<IdentifyNamespace, Error> {
        if b.len() < IDENTIFY_LEN {
            return Err(Error::Truncated);
        }
        let mut nguid = [0u8; 16];
        nguid.copy_from_slice(&b[104..120]);
        Ok(IdentifyNamespace {
            nsze: le64(b, 0)?,
            ncap: le64(b, 8)?,
            nuse: le64(b, 16)?,
            nsfeat: b[24],
            nlbaf: b[25],
            flbas: b[26],
            nguid,
            lbaf0_lbads: (le32(b, 128)? >> 16) as u8,
        })
    }
}

/// The active namespace ID list (CNS 02h): up to 1024 NSIDs greater than
/// `after`, ascending, zero filled.
pub fn active_ns_list(nsids: impl IntoIterator<Item = Nsid>, after: Nsid) -> Vec<u8> {
    let mut ids: Vec<u32> = nsids
        .into_iter()
        .map(|n| n.0)
        .filter(|&n| n > after.0)
        .collect();
    ids.sort_unstable();
    ids.dedup();
    let mut b = vec![0u8; IDENTIFY_LEN];
    for (i, id) in ids.iter().take(IDENTIFY_LEN / 4).enumerate() {
        put32(&mut b, i * 4, *id);
    }
    b
}

/// Namespace Identifier Type NGUID (NVMe base 1.4 Figure 250).
pub const NIDT_NGUID: u8 = 2;
/// Namespace Identifier Type UUID.
pub const NIDT_UUID: u8 = 3;

/// The namespace identification descriptor list (CNS 03h) with an NGUID
/// and a UUID descriptor: each is NIDT, NIDL, two reserved bytes, NID.
pub fn ns_desc_list(nguid: [u8; 16], uuid: [u8; 16]) -> Vec<u8> {
    let mut b = vec![0u8; IDENTIFY_LEN];
    put(&mut b, 0, &[NIDT_NGUID, 16, 0, 0]);
    put(&mut b, 4, &nguid);
    put(&mut b, 20, &[NIDT_UUID, 16, 0, 0]);
    put(&mut b, 24, &uuid);
    b
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ctrl() -> IdentifyController {
        IdentifyController {
            vid: 0x1B36,
            sn: "SN1".into(),
            mn: "roce-nvmf".into(),
            fr: "0.2.0".into(),
            mdts: 5,
            cntlid: 7,
            ver: 0x0001_0400,
            oaes: 1 << 8,
            ctratt: 0,
            cntrltype: cntrltype::IO,
            oacs: 0,
            acl: 3,
            aerl: 3,
            lpa: 1 << 2,
            elpe: 63,
            kas: 1,
            sqes: 0x66,
            cqes: 0x44,
            maxcmd: 128,
            nn: 4,
            oncs: 0x0C,
            vwc: 1,
            sgls: SGLS_SUPPORTED | SGLS_KEYED | SGLS_OFFSET,
            subnqn: "nqn.x".into(),
            ioccsz: 260,
            iorcsz: 1,
            icdoff: 0,
            fcatt: 0,
            msdbd: 1,
        }
    }

    #[test]
    fn controller_offsets() {
        let b = ctrl().to_bytes();
        assert_eq!(b.len(), 4096);
        assert_eq!(&b[0..2], &[0x36, 0x1B]);
        assert_eq!(&b[4..8], b"SN1 ");
        assert_eq!(b[23], b' ');
        assert_eq!(b[77], 5);
        assert_eq!(&b[78..80], &[7, 0]);
        assert_eq!(&b[80..84], &[0, 4, 1, 0]);
        assert_eq!(b[111], 1);
        assert_eq!(b[259], 3);
        assert_eq!(b[261], 4);
        assert_eq!(b[262], 63);
        assert_eq!(&b[320..322], &[1, 0]);
        assert_eq!((b[512], b[513]), (0x66, 0x44));
        assert_eq!(&b[514..516], &[128, 0]);
        assert_eq!(&b[516..520], &[4, 0, 0, 0]);
        assert_eq!(&b[520..522], &[0x0C, 0]);
        assert_eq!(b[525], 1);
        assert_eq!(&b[536..540], &[0x05, 0x00, 0x10, 0x00]);
        assert_eq!(&b[768..773], b"nqn.x");
        assert_eq!(&b[1792..1796], &[4, 1, 0, 0]);
        assert_eq!(&b[1796..1800], &[1, 0, 0, 0]);
        assert_eq!(b[1803], 1);
        assert_eq!(IdentifyController::parse(&b), Ok(ctrl()));
        assert_eq!(IdentifyController::parse(&b[..4095]), Err(Error::Truncated));
    }

    #[test]
    fn namespace_offsets() {
        let n = IdentifyNamespace {
            nsze: 2048,
            ncap: 2048,
            nuse: 2048,
            nsfeat: 0,
            nlbaf: 0,
            flbas: 0,
            nguid: [9; 16],
            lbaf0_lbads: 9,
        };
        let b = n.to_bytes();
        assert_eq!(&b[0..8], &[0, 8, 0, 0, 0, 0, 0, 0]);
        assert_eq!(&b[128..132], &[0, 0, 9, 0]);
        assert_eq!(b[104], 9);
        assert_eq!(IdentifyNamespace::parse(&b), Ok(n));
    }

    #[test]
    fn lists() {
        let b = active_ns_list([Nsid(3), Nsid(1), Nsid(2)], Nsid(1));
        assert_eq!(&b[..12], &[2, 0, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0]);
        let d = ns_desc_list([1; 16], [2; 16]);
        assert_eq!(&d[..5], &[2, 16, 0, 0, 1]);
        assert_eq!(&d[20..25], &[3, 16, 0, 0, 2]);
        assert_eq!(d[40], 0);
    }
}
