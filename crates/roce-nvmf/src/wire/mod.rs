//! NVMe and NVMe over Fabrics wire formats: checked views and plain reprs.
//!
//! Every parser takes a byte slice of any length and returns a value or an
//! [`Error`]; none panics. Emitters write into a caller's buffer of the
//! documented size. All multi-byte fields are little endian (NVMe base
//! specification 1.4 §1.5 "Conventions").

pub mod cm;
pub mod cqe;
pub mod describe;
pub mod fabrics;
pub mod features;
pub mod identify;
pub mod log;
pub mod sgl;
pub mod sqe;
pub mod status;

/// Why bytes could not be parsed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Error {
    /// The buffer is shorter than the structure.
    Truncated,
    /// A field holds a value the format does not allow.
    Malformed,
}

impl core::fmt::Display for Error {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Error::Truncated => f.write_str("buffer shorter than the structure"),
            Error::Malformed => f.write_str("field value not allowed by the format"),
        }
    }
}

impl std::error::Error for Error {}

/// Command Identifier (NVMe base 1.4 §4.2, SQE bytes 2–3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Cid(pub u16);

/// Namespace Identifier (NVMe base 1.4 §6.1). 0 is "no namespace",
/// `0xFFFF_FFFF` is the broadcast value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Nsid(pub u32);

impl Nsid {
    /// The broadcast NSID (NVMe base 1.4 §6.1.5).
    pub const BROADCAST: Nsid = Nsid(0xFFFF_FFFF);
}

/// Controller ID (NVMe base 1.4 §7.10; NVMe-oF 1.1 §3.3 "Connect").
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Cntlid(pub u16);

impl Cntlid {
    /// In a Connect for the admin queue: "allocate any controller" under the
    /// dynamic controller model (NVMe-oF 1.1 §3.3, Figure 20).
    pub const DYNAMIC: Cntlid = Cntlid(0xFFFF);
}

/// Queue Identifier: 0 is the admin queue (NVMe-oF 1.1 §3.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Qid(pub u16);

impl Qid {
    /// The admin queue.
    pub const ADMIN: Qid = Qid(0);
}

/// An RDMA remote key carried in a keyed SGL data block descriptor
/// (NVMe base 1.4 §4.4, Figure 119).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Rkey(pub u32);

pub(crate) fn le16(b: &[u8], at: usize) -> Result<u16, Error> {
    let s = b.get(at..at + 2).ok_or(Error::Truncated)?;
    Ok(u16::from_le_bytes([s[0], s[1]]))
}

pub(crate) fn le32(b: &[u8], at: usize) -> Result<u32, Error> {
    let s = b.get(at..at + 4).ok_or(Error::Truncated)?;
    Ok(u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
}

pub(crate) fn le64(b: &[u8], at: usize) -> Result<u64, Error> {
    let lo = le32(b, at)? as u64;
    let hi = le32(b, at + 4)? as u64;
    Ok(lo | (hi << 32))
}

/// Writers for emitters whose buffers were sized by the caller: a short
/// buffer is a programming error caught by the `put` length check, which
/// writes nothing rather than panic.
pub(crate) fn put(b: &mut [u8], at: usize, v: &[u8]) {
    if let Some(d) = b.get_mut(at..at + v.len()) {
        d.copy_from_slice(v);
    }
}

pub(crate) fn put16(b: &mut [u8], at: usize, v: u16) {
    put(b, at, &v.to_le_bytes());
}

pub(crate) fn put32(b: &mut [u8], at: usize, v: u32) {
    put(b, at, &v.to_le_bytes());
}

pub(crate) fn put64(b: &mut [u8], at: usize, v: u64) {
    put(b, at, &v.to_le_bytes());
}

/// Writes an ASCII string field padded with spaces (NVMe base 1.4 §1.5:
/// SN, MN and FR are space padded).
pub(crate) fn put_ascii_padded(b: &mut [u8], at: usize, len: usize, s: &str) {
    let mut field = vec![b' '; len];
    for (d, c) in field.iter_mut().zip(s.bytes()) {
        *d = if c.is_ascii_graphic() || c == b' ' {
            c
        } else {
            b'?'
        };
    }
    put(b, at, &field);
}

/// Writes a NUL-padded string field (NQNs, NVMe-oF 1.1 §7.1: UTF-8, NUL
/// terminated, in a 256-byte field).
pub(crate) fn put_nul_padded(b: &mut [u8], at: usize, len: usize, s: &str) {
    let mut field = vec![0u8; len];
    let n = s.len().min(len.saturating_sub(1));
    field[..n].copy_from_slice(&s.as_bytes()[..n]);
    put(b, at, &field);
}

/// Reads a NUL-terminated (or field-filling) string; bytes that are not
/// UTF-8 make the field [`Error::Malformed`].
pub(crate) fn get_nul_str(b: &[u8], at: usize, len: usize) -> Result<String, Error> {
    let f = b.get(at..at + len).ok_or(Error::Truncated)?;
    let end = f.iter().position(|&c| c == 0).unwrap_or(f.len());
    core::str::from_utf8(&f[..end])
        .map(str::to_owned)
        .map_err(|_| Error::Malformed)
}

/// Reads a space- or NUL-padded ASCII field, trimmed.
pub(crate) fn get_ascii_trim(b: &[u8], at: usize, len: usize) -> Result<String, Error> {
    let f = b.get(at..at + len).ok_or(Error::Truncated)?;
    Ok(String::from_utf8_lossy(f)
        .trim_end_matches([' ', '\0'])
        .to_owned())
}
