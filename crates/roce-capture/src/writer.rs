//! Classic pcap writer.

use std::io::{self, Write};

/// Magic number of nanosecond-resolution pcap files.
const MAGIC_NS: u32 = 0xa1b2_3c4d;
/// Snap length recorded in the file header; longer frames are cut to it.
pub const WRITER_SNAPLEN: u32 = 262_144;
const LINKTYPE_ETHERNET: u32 = 1;

/// Writes Ethernet frames to a classic pcap file: little-endian, nanosecond
/// timestamps (magic `0xa1b23c4d`), link type Ethernet, snap length 262144.
///
/// Each packet is two `write_all` calls; wrap files in a [`std::io::BufWriter`].
#[derive(Debug)]
pub struct PcapWriter<W: Write> {
    w: W,
}

impl<W: Write> PcapWriter<W> {
    /// Writes the 24-byte file header to `w`.
    pub fn new(mut w: W) -> io::Result<Self> {
        let mut hdr = [0u8; 24];
        hdr[0..4].copy_from_slice(&MAGIC_NS.to_le_bytes());
        hdr[4..6].copy_from_slice(&2u16.to_le_bytes()); // version 2.4
        hdr[6..8].copy_from_slice(&4u16.to_le_bytes());
        // thiszone (8..12) and sigfigs (12..16) stay 0
        hdr[16..20].copy_from_slice(&WRITER_SNAPLEN.to_le_bytes());
        hdr[20..24].copy_from_slice(&LINKTYPE_ETHERNET.to_le_bytes());
        w.write_all(&hdr)?;
        Ok(PcapWriter { w })
    }

    /// Appends one Ethernet frame captured at `ts_ns` nanoseconds since the epoch.
    ///
    /// Frames longer than [`WRITER_SNAPLEN`] are cut to it (the record keeps the full
    /// length as its original length). Fails with `InvalidInput`, writing nothing,
    /// if the timestamp is past 2106-02-07 (pcap seconds are 32-bit) or the frame is
    /// 4 GiB or longer.
    pub fn write_packet(&mut self, ts_ns: u64, frame: &[u8]) -> io::Result<()> {
        let secs = u32::try_from(ts_ns / 1_000_000_000).map_err(|_| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                "timestamp does not fit a pcap record",
            )
        })?;
        let nanos = (ts_ns % 1_000_000_000) as u32;
        let orig_len = u32::try_from(frame.len())
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "frame longer than 4 GiB"))?;
        let cap_len = orig_len.min(WRITER_SNAPLEN);
        let mut rec = [0u8; 16];
        rec[0..4].copy_from_slice(&secs.to_le_bytes());
        rec[4..8].copy_from_slice(&nanos.to_le_bytes());
        rec[8..12].copy_from_slice(&cap_len.to_le_bytes());
        rec[12..16].copy_from_slice(&orig_len.to_le_bytes());
        self.w.write_all(&rec)?;
        self.w.write_all(&frame[..cap_len as usize])
    }

    /// Flushes the underlying writer.
    pub fn flush(&mut self) -> io::Result<()> {
        self.w.flush()
    }

    /// A reference to the underlying writer.
    pub fn get_ref(&self) -> &W {
        &self.w
    }

    /// Flushes and returns the underlying writer.
    pub fn into_inner(mut self) -> io::Result<W> {
        self.w.flush()?;
        Ok(self.w)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_and_record_layout() {
        let mut w = PcapWriter::new(Vec::new()).unwrap();
        w.write_packet(1_500_000_000_123_456_789, &[0xaa; 3])
            .unwrap();
        let out = w.into_inner().unwrap();
        assert_eq!(&out[..4], &[0x4d, 0x3c, 0xb2, 0xa1]);
        assert_eq!(&out[16..24], &[0, 0, 4, 0, 1, 0, 0, 0]);
        assert_eq!(&out[24..28], &1_500_000_000u32.to_le_bytes());
        assert_eq!(&out[28..32], &123_456_789u32.to_le_bytes());
        assert_eq!(&out[32..40], &[3, 0, 0, 0, 3, 0, 0, 0]);
        assert_eq!(&out[40..], &[0xaa; 3]);
    }

    #[test]
    fn rejects_unrepresentable_timestamps() {
        let mut w = PcapWriter::new(Vec::new()).unwrap();
        let e = w.write_packet(u64::MAX, &[1]).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
        assert_eq!(w.get_ref().len(), 24);
    }

    #[test]
    fn cuts_at_snaplen() {
        let mut w = PcapWriter::new(Vec::new()).unwrap();
        w.write_packet(0, &vec![7u8; WRITER_SNAPLEN as usize + 10])
            .unwrap();
        let out = w.into_inner().unwrap();
        assert_eq!(out.len(), 24 + 16 + WRITER_SNAPLEN as usize);
        assert_eq!(&out[36..40], &(WRITER_SNAPLEN + 10).to_le_bytes());
    }
}
