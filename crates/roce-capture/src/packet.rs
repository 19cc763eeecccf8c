//! One packet record as returned by the reader.

use crate::error::{CaptureError, ErrorKind};
use crate::link::{decapsulate, LinkType, Payload};

/// One captured packet, borrowing the reader's buffer until the next call to
/// [`CaptureReader::next_packet`](crate::CaptureReader::next_packet).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Packet<'a> {
    /// 1-based frame number, counted as Wireshark does: every packet record (pcap
    /// record, pcapng EPB or SPB) counts, whatever its link type.
    pub index: u64,
    /// Capture timestamp in nanoseconds since the Unix epoch (UTC). Simple Packet
    /// Blocks carry no timestamp and report 0; times before 1970 are clamped to 0.
    pub ts_ns: u64,
    /// Length of the packet on the wire (may exceed `data.len()` if the capture was
    /// cut at a snap length).
    pub orig_len: u32,
    /// Link-layer header type of `data`.
    pub link: LinkType,
    /// The captured bytes, starting with the link-layer header (without padding).
    pub data: &'a [u8],
    /// Byte offset of this record (pcap record header or pcapng block) in the file.
    pub file_offset: u64,
}

impl<'a> Packet<'a> {
    /// Removes the link-layer header of the capture and returns what follows it.
    ///
    /// Errors with [`ErrorKind::Malformed`] at this packet's `file_offset` when the
    /// captured bytes are shorter than a Linux SLL/SLL2 header.
    pub fn payload(&self) -> Result<Payload<'a>, CaptureError> {
        decapsulate(self.link, self.data)
            .map_err(|what| CaptureError::new(self.file_offset, ErrorKind::Malformed(what)))
    }
}
