//! The error type of the reader.

use std::fmt;

/// An error while reading a capture file, with the byte offset where it happened.
///
/// `offset` is the offset of the record (pcap) or block (pcapng) that could not be
/// read, so that `dd`/`xxd` or a hex editor lead straight to the bad bytes. Errors in
/// the file header are reported at offset 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CaptureError {
    /// Byte offset, from the start of the file, of the record or block at fault.
    pub offset: u64,
    /// What went wrong.
    pub kind: ErrorKind,
}

/// The kinds of [`CaptureError`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// The underlying reader failed (the [`std::io::ErrorKind`] of that failure).
    Io(std::io::ErrorKind),
    /// The file starts with neither a pcap magic number nor a pcapng Section Header
    /// Block (or the pcapng byte-order magic is invalid).
    BadMagic,
    /// The file ends in the middle of a file header, record header or record body.
    /// An empty file is reported as `Truncated` at offset 0.
    Truncated,
    /// The record is structurally invalid; the text says how.
    Malformed(&'static str),
}

impl CaptureError {
    /// Creates an error of `kind` at `offset`.
    pub fn new(offset: u64, kind: ErrorKind) -> Self {
        CaptureError { offset, kind }
    }
}

impl fmt::Display for CaptureError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let offset = self.offset;
        match self.kind {
            ErrorKind::Io(kind) => {
                write!(f, "I/O error ({kind}) reading record at offset {offset}")
            }
            ErrorKind::BadMagic => write!(
                f,
                "not a pcap or pcapng file: bad magic number at offset {offset}"
            ),
            ErrorKind::Truncated => write!(f, "truncated record at offset {offset}"),
            ErrorKind::Malformed(what) => {
                write!(f, "malformed record at offset {offset}: {what}")
            }
        }
    }
}

impl std::error::Error for CaptureError {}

impl From<CaptureError> for std::io::Error {
    /// Converts to an [`std::io::Error`]: I/O errors keep their kind, `Truncated`
    /// becomes `UnexpectedEof` and the others `InvalidData`; the message is kept.
    fn from(e: CaptureError) -> Self {
        let kind = match e.kind {
            ErrorKind::Io(kind) => kind,
            ErrorKind::Truncated => std::io::ErrorKind::UnexpectedEof,
            ErrorKind::BadMagic | ErrorKind::Malformed(_) => std::io::ErrorKind::InvalidData,
        };
        std::io::Error::new(kind, e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_names_the_offset() {
        let e = CaptureError::new(1234, ErrorKind::Truncated);
        assert_eq!(e.to_string(), "truncated record at offset 1234");
        let e = CaptureError::new(0, ErrorKind::BadMagic);
        assert!(e.to_string().contains("offset 0"));
        let e = CaptureError::new(7, ErrorKind::Malformed("x"));
        assert_eq!(e.to_string(), "malformed record at offset 7: x");
        let io: std::io::Error = CaptureError::new(3, ErrorKind::Truncated).into();
        assert_eq!(io.kind(), std::io::ErrorKind::UnexpectedEof);
    }
}
