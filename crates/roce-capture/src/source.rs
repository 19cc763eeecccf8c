//! The byte source handed to pcap-parser: the already-read file header, then the
//! caller's reader; it remembers the kind of the first I/O error.

use std::io::{self, Read};
use std::sync::{Arc, OnceLock};

/// Shared record of the first I/O error's kind. pcap-parser turns every read
/// failure into `PcapError::ReadError`, so the kind is kept here on the side.
#[derive(Debug, Clone, Default)]
pub(crate) struct IoErrorSlot(Arc<OnceLock<io::ErrorKind>>);

impl IoErrorSlot {
    fn record(&self, kind: io::ErrorKind) {
        // Only the first error is kept: reading stops at it.
        let _ = self.0.set(kind);
    }

    /// The recorded kind, or `Other` if none was recorded.
    pub(crate) fn kind(&self) -> io::ErrorKind {
        self.0.get().copied().unwrap_or(io::ErrorKind::Other)
    }
}

/// `head` (bytes read while detecting the format), followed by `inner`.
pub(crate) struct Source<R> {
    head: Vec<u8>,
    pos: usize,
    inner: R,
    errors: IoErrorSlot,
}

impl<R: Read> Source<R> {
    pub(crate) fn new(head: Vec<u8>, inner: R, errors: IoErrorSlot) -> Self {
        Source {
            head,
            pos: 0,
            inner,
            errors,
        }
    }
}

impl<R: Read> Read for Source<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if let Some(rest) = self.head.get(self.pos..).filter(|r| !r.is_empty()) {
            // pcap-parser parses the file header from its first read, so the whole
            // head is handed out at once (the buffer is sized to hold it).
            let n = rest.len().min(buf.len());
            buf[..n].copy_from_slice(&rest[..n]);
            self.pos += n;
            if self.pos == self.head.len() {
                self.head = Vec::new();
                self.pos = 0;
            }
            return Ok(n);
        }
        loop {
            match self.inner.read(buf) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    self.errors.record(e.kind());
                    return Err(e);
                }
                Ok(n) => return Ok(n),
            }
        }
    }
}

/// Reads from `r` into `buf` until it holds `want` bytes or `r` is at end of file.
pub(crate) fn read_up_to<R: Read>(r: &mut R, buf: &mut Vec<u8>, want: usize) -> io::Result<()> {
    let missing = want.saturating_sub(buf.len());
    if missing > 0 {
        r.take(missing as u64).read_to_end(buf)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn head_then_inner() {
        let slot = IoErrorSlot::default();
        let mut s = Source::new(vec![1, 2, 3], &[4u8, 5][..], slot.clone());
        let mut out = Vec::new();
        s.read_to_end(&mut out).unwrap();
        assert_eq!(out, [1, 2, 3, 4, 5]);
        assert_eq!(slot.kind(), io::ErrorKind::Other);
    }
}
