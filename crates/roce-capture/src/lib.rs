//! Reading and writing packet capture files for the RoCE v2 tools.
//!
//! [`CaptureReader`] reads classic pcap (either byte order, microsecond or
//! nanosecond timestamps) and pcapng (either byte order per section, several
//! sections, per-interface link type, `if_tsresol`/`if_tsoffset`, Enhanced and
//! Simple Packet Blocks; other blocks are skipped). It streams through a single
//! buffer and hands out packets that borrow it, so nothing is allocated per
//! packet. [`Packet::payload`] strips the capture's link header (Ethernet, raw IP,
//! Linux SLL/SLL2). [`PcapWriter`] writes nanosecond pcap files of Ethernet frames.
//!
//! Where it sits: below the tools. `roce inspect` reads captures with it,
//! and `roce-io`'s pcap tap writes them; it knows nothing of RoCE (the
//! frames are handed to `roce-wire` for decoding).
//!
//! Write two frames to an in-memory pcap and read them back
//! (`CaptureReader::open(path)` reads a file):
//!
//! ```
//! use roce_capture::{CaptureReader, Payload, PcapWriter};
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let mut writer = PcapWriter::new(Vec::new())?;
//! writer.write_packet(1_000, &[0xaa; 60])?; // time in ns, a whole Ethernet frame
//! writer.write_packet(2_500, &[0xbb; 64])?;
//! let file = writer.into_inner()?;
//!
//! let mut reader = CaptureReader::new(&file[..])?;
//! let mut seen = Vec::new();
//! while let Some(packet) = reader.next_packet() {
//!     let packet = packet?;
//!     if let Payload::Ethernet(frame) = packet.payload()? {
//!         seen.push((packet.index, packet.ts_ns, frame.len()));
//!     }
//! }
//! assert_eq!(seen.len(), 2);
//! assert_eq!((seen[1].1, seen[1].2), (2_500, 64));
//! # Ok(()) }
//! ```
//!
//! # Errors
//!
//! Every error carries the byte offset of the record or block at fault. A file
//! that ends inside a record header or body yields [`ErrorKind::Truncated`] at the
//! offset of that record; a file that is neither pcap nor pcapng yields
//! [`ErrorKind::BadMagic`] at offset 0. An empty (or shorter than 4 bytes) file is
//! [`ErrorKind::Truncated`] at offset 0: it is most often a capture whose writer
//! was killed before flushing, and "bad magic" would point the wrong way.
//! Records longer than [`MAX_RECORD_LEN`] are rejected as malformed, so a
//! corrupt length field cannot make the reader buffer gigabytes. After an error
//! the reader returns `None`.
//!
//! # Choice of parser crate
//!
//! The reader is built on `pcap-parser` 0.17 (rusticata) rather than `pcap-file`.
//! pcap-parser's `LegacyPcapReader`/`PcapNGReader` are streaming, zero-copy
//! readers over one circular buffer: blocks borrow the buffer, the caller decides
//! when to consume, refill or grow it, and `consumed()` is the exact file offset
//! of the block being parsed, which gives precise error offsets for free. It
//! needs Rust 1.65, its own code is safe Rust apart from one bounds-checked
//! slice-to-array cast, and it parses every pcapng block type in both byte
//! orders. Built on it, reading is I/O bound (`tests/perf.rs`; figures in
//! the repository's `docs/performance.md`). `pcap-file`
//! 2.0 reports no offsets at all, treats EPB timestamp ticks as nanoseconds
//! whatever the interface's `if_tsresol`, always allocates an 8 MB buffer and
//! fails on records larger than it, and relies on a lifetime transmute (unchecked code)
//! in its buffer; its 3.0 line is still a release candidate and needs Rust 1.93
//! (above this workspace's MSRV, 1.88). Three pcap-parser 0.17 quirks are handled
//! here: it decodes `if_tsoffset` as little-endian in big-endian sections and
//! rejects every power-of-two `if_tsresol`, so the IDB options are decoded in
//! this crate; and a block whose contents overrun its own length surfaces as
//! "incomplete" rather than as an error, which the reader detects from the
//! declared block length.
#![forbid(unsafe_code)]

mod error;
mod interface;
mod link;
mod packet;
mod reader;
mod source;
mod writer;

pub use error::{CaptureError, ErrorKind};
pub use link::{LinkType, Payload, SLL2_HEADER_LEN, SLL_HEADER_LEN};
pub use packet::Packet;
pub use reader::{CaptureReader, Format};
pub use writer::{PcapWriter, WRITER_SNAPLEN};

/// The largest record (pcap record body or whole pcapng block) the reader
/// accepts: 64 MiB, far above any real snap length (262144 for libpcap and
/// Wireshark).
pub const MAX_RECORD_LEN: usize = 64 << 20;
