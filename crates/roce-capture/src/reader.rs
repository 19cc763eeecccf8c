//! Streaming reader for pcap and pcapng files, built on pcap-parser's readers.

use std::fs::File;
use std::io::{BufReader, Read};
use std::path::Path;

use pcap_parser::traits::{PcapNGPacketBlock, PcapReaderIterator};
use pcap_parser::{Block, LegacyPcapReader, PcapBlockOwned, PcapError, PcapNGReader};

use crate::error::{CaptureError, ErrorKind};
use crate::interface::Interface;
use crate::link::LinkType;
use crate::packet::Packet;
use crate::source::{read_up_to, IoErrorSlot, Source};
use crate::MAX_RECORD_LEN;

/// Initial size of the read buffer (64 KiB); it grows (by doubling) only for
/// larger records. Larger buffers measured no faster.
const INITIAL_BUFFER: usize = 1 << 16;
/// The buffer never grows past this; any record up to [`MAX_RECORD_LEN`] fits.
const MAX_BUFFER: usize = 2 * MAX_RECORD_LEN;

/// The container format of a capture file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Format {
    /// Classic libpcap format (either byte order, micro- or nanosecond timestamps,
    /// and the little-endian "modified" variant with magic `0xa1b2cd34`).
    Pcap,
    /// pcapng.
    PcapNg,
}

/// A streaming reader of pcap and pcapng files.
///
/// Packets are returned one at a time by [`next_packet`](Self::next_packet) and
/// borrow the reader's internal buffer (a lending iterator), so reading allocates
/// nothing per packet. Memory use is one buffer of 64 KiB, grown only as needed
/// for records larger than that.
pub struct CaptureReader<R: Read> {
    inner: Inner<R>,
    st: State,
}

enum Inner<R: Read> {
    Pcap(LegacyPcapReader<Source<R>>),
    Ng(PcapNGReader<Source<R>>),
}

impl<R: Read> Inner<R> {
    fn data(&self) -> &[u8] {
        match self {
            Inner::Pcap(r) => r.data(),
            Inner::Ng(r) => r.data(),
        }
    }
}

/// Everything but the pcap-parser reader, so that both can be borrowed at once.
struct State {
    format: Format,
    errors: IoErrorSlot,
    capacity: usize,
    /// Length of the block last returned as a packet, consumed on the next call.
    pending: usize,
    index: u64,
    done: bool,
    // classic pcap
    pcap_link: LinkType,
    pcap_big_endian: bool,
    /// Nanoseconds per unit of the record's fractional timestamp (1000 or 1).
    pcap_frac_ns: u64,
    /// Record header length: 16, or 24 for the "modified" (Kuznetzov) format.
    pcap_record_header: usize,
    // pcapng
    ng_big_endian: bool,
    interfaces: Vec<Interface>,
}

/// Where a packet's bytes are in the buffer, and its metadata.
struct Meta {
    offset: u64,
    start: usize,
    len: usize,
    ts_ns: u64,
    orig_len: u32,
    link: LinkType,
}

enum Step {
    Packet(Meta),
    Again,
    End,
    Fail(CaptureError),
}

/// The parse outcome, detached from the borrow of pcap-parser's buffer.
enum Outcome {
    Skip(usize),
    Packet(usize, Meta),
    Fail(ErrorKind),
    Eof,
    NeedMore,
    UnexpectedEof,
}

impl CaptureReader<BufReader<File>> {
    /// Opens the capture file at `path`.
    pub fn open(path: &Path) -> Result<Self, CaptureError> {
        let file = File::open(path).map_err(|e| CaptureError::new(0, ErrorKind::Io(e.kind())))?;
        Self::new(BufReader::new(file))
    }
}

impl<R: Read> std::fmt::Debug for CaptureReader<R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CaptureReader")
            .field("format", &self.st.format)
            .field("packets_read", &self.st.index)
            .field("done", &self.st.done)
            .finish_non_exhaustive()
    }
}

impl<R: Read> CaptureReader<R> {
    /// Reads the file header from `r` and detects the format from its magic number.
    ///
    /// Errors: [`ErrorKind::BadMagic`] at offset 0 if the file is neither pcap nor
    /// pcapng; [`ErrorKind::Truncated`] at offset 0 if it ends within the file
    /// header (this includes an empty file).
    pub fn new(mut r: R) -> Result<Self, CaptureError> {
        let at0 = |kind| CaptureError::new(0, kind);
        let io0 = |e: std::io::Error| at0(ErrorKind::Io(e.kind()));
        let mut head = Vec::with_capacity(64);
        read_up_to(&mut r, &mut head, 12).map_err(io0)?;
        let Some(magic) = head.get(..4).map(|m| [m[0], m[1], m[2], m[3]]) else {
            return Err(at0(ErrorKind::Truncated));
        };
        let format = match u32::from_le_bytes(magic) {
            0xa1b2_c3d4 | 0xa1b2_3c4d | 0xd4c3_b2a1 | 0x4d3c_b2a1 | 0xa1b2_cd34 => Format::Pcap,
            0x0a0d_0d0a => Format::PcapNg,
            _ => return Err(at0(ErrorKind::BadMagic)),
        };
        let head_len = match format {
            Format::Pcap => 24,
            Format::PcapNg => {
                let Some(&[l0, l1, l2, l3, b0, b1, b2, b3]) = head.get(4..12) else {
                    return Err(at0(ErrorKind::Truncated));
                };
                let len = match [b0, b1, b2, b3] {
                    [0x4d, 0x3c, 0x2b, 0x1a] => u32::from_le_bytes([l0, l1, l2, l3]),
                    [0x1a, 0x2b, 0x3c, 0x4d] => u32::from_be_bytes([l0, l1, l2, l3]),
                    _ => return Err(at0(ErrorKind::BadMagic)),
                };
                let len = check_block_len(len).map_err(at0)?;
                if len < 28 {
                    return Err(at0(ErrorKind::Malformed("section header block too short")));
                }
                len
            }
        };
        // The whole file header / first SHB is read now, so that pcap-parser (which
        // parses it from a single read) sees it complete.
        read_up_to(&mut r, &mut head, head_len).map_err(io0)?;
        if head.len() < head_len {
            return Err(at0(ErrorKind::Truncated));
        }
        let capacity = INITIAL_BUFFER.max(head_len.next_power_of_two());
        let errors = IoErrorSlot::default();
        let src = Source::new(head, r, errors.clone());
        let ctor_err = |e: PcapError<&'static [u8]>| {
            at0(match e {
                PcapError::ReadError => ErrorKind::Io(errors.kind()),
                PcapError::HeaderNotRecognized => ErrorKind::BadMagic,
                PcapError::Eof | PcapError::UnexpectedEof | PcapError::Incomplete(_) => {
                    ErrorKind::Truncated
                }
                _ => ErrorKind::Malformed("invalid file header"),
            })
        };
        let mut st = State {
            format,
            errors: errors.clone(),
            capacity,
            pending: 0,
            index: 0,
            done: false,
            pcap_link: LinkType::Ethernet,
            pcap_big_endian: false,
            pcap_frac_ns: 1000,
            pcap_record_header: 16,
            ng_big_endian: false,
            interfaces: Vec::new(),
        };
        let inner = match format {
            Format::Pcap => {
                let mut r = LegacyPcapReader::new(capacity, src).map_err(ctor_err)?;
                if let Ok((_, PcapBlockOwned::LegacyHeader(h))) = r.next() {
                    // The upper 16 bits hold FCS information, not the link type.
                    st.pcap_link = LinkType::from_raw(h.network.0 as u32 & 0xffff);
                    st.pcap_big_endian = h.is_bigendian();
                    st.pcap_frac_ns = if h.is_nanosecond_precision() { 1 } else { 1000 };
                    st.pcap_record_header = if h.is_modified_format() { 24 } else { 16 };
                }
                r.consume(24);
                Inner::Pcap(r)
            }
            Format::PcapNg => Inner::Ng(PcapNGReader::new(capacity, src).map_err(ctor_err)?),
        };
        Ok(CaptureReader { inner, st })
    }

    /// The container format detected by [`new`](Self::new).
    pub fn format(&self) -> Format {
        self.st.format
    }

    /// Returns the next packet, `None` at a clean end of file, or an error.
    ///
    /// pcapng blocks other than EPB and SPB (NRB, ISB, DSB, custom, ...) are
    /// skipped; a new Section Header Block starts a new set of interfaces. After an
    /// error, every further call returns `None`.
    pub fn next_packet(&mut self) -> Option<Result<Packet<'_>, CaptureError>> {
        if self.st.done {
            return None;
        }
        let step = loop {
            let step = match &mut self.inner {
                Inner::Pcap(r) => advance(r, &mut self.st),
                Inner::Ng(r) => advance(r, &mut self.st),
            };
            if !matches!(step, Step::Again) {
                break step;
            }
        };
        match step {
            Step::Packet(m) => {
                let Some(data) = self.inner.data().get(m.start..m.start + m.len) else {
                    self.st.done = true;
                    let kind = ErrorKind::Malformed("packet data outside its block");
                    return Some(Err(CaptureError::new(m.offset, kind)));
                };
                self.st.index += 1;
                Some(Ok(Packet {
                    index: self.st.index,
                    ts_ns: m.ts_ns,
                    orig_len: m.orig_len,
                    link: m.link,
                    data,
                    file_offset: m.offset,
                }))
            }
            Step::Fail(e) => {
                self.st.done = true;
                Some(Err(e))
            }
            Step::End | Step::Again => {
                self.st.done = true;
                None
            }
        }
    }
}

/// Parses one block or record; on a packet, leaves it unconsumed (see `pending`).
fn advance<I: PcapReaderIterator>(it: &mut I, st: &mut State) -> Step {
    if st.pending > 0 {
        it.consume(st.pending);
        st.pending = 0;
    }
    let offset = it.consumed() as u64;
    // pcap-parser subtracts the 12 bytes of a block's framing from its
    // declared length before checking it against 12 for the block types
    // with a shorter fixed header (a Process Information Block, 4 bytes):
    // a length of 4 to 11 overflows (a panic with overflow checks on).
    // Check every block length here first (found by fuzz/capture).
    if matches!(st.format, Format::PcapNg) {
        if let Some(Err(kind)) = st.ng_block_len(it.data()) {
            return Step::Fail(CaptureError::new(offset, kind));
        }
    }
    let outcome = match it.next() {
        Ok((len, block)) => st.classify(len, block, offset),
        Err(PcapError::Eof) => Outcome::Eof,
        Err(PcapError::Incomplete(_) | PcapError::BufferTooSmall) => Outcome::NeedMore,
        Err(PcapError::UnexpectedEof) => Outcome::UnexpectedEof,
        Err(PcapError::ReadError) => Outcome::Fail(ErrorKind::Io(st.errors.kind())),
        Err(PcapError::HeaderNotRecognized) => Outcome::Fail(ErrorKind::Malformed(
            "bad byte-order magic in section header",
        )),
        Err(PcapError::NomError(..) | PcapError::OwnedNomError(..)) => {
            Outcome::Fail(ErrorKind::Malformed(match st.format {
                Format::Pcap => "invalid record",
                Format::PcapNg => "invalid block (bad length or contents)",
            }))
        }
    };
    let fail = |kind| Step::Fail(CaptureError::new(offset, kind));
    match outcome {
        Outcome::Skip(len) => {
            it.consume(len);
            Step::Again
        }
        Outcome::Packet(len, meta) => {
            st.pending = len;
            Step::Packet(meta)
        }
        Outcome::Fail(kind) => fail(kind),
        Outcome::Eof => Step::End,
        Outcome::UnexpectedEof => fail(
            st.check_declared_len(it.data())
                .unwrap_or(ErrorKind::Truncated),
        ),
        Outcome::NeedMore => {
            if let Some(kind) = st.check_declared_len(it.data()) {
                return fail(kind);
            }
            if it.data().len() >= st.capacity {
                if st.capacity >= MAX_BUFFER {
                    return fail(ErrorKind::Malformed("record too large"));
                }
                st.capacity = (st.capacity * 2).min(MAX_BUFFER);
                it.grow(st.capacity);
            }
            match it.refill() {
                Ok(()) => Step::Again,
                Err(_) => fail(ErrorKind::Io(st.errors.kind())),
            }
        }
    }
}

impl State {
    fn classify(&mut self, len: usize, block: PcapBlockOwned<'_>, offset: u64) -> Outcome {
        match block {
            PcapBlockOwned::Legacy(b) => Outcome::Packet(
                len,
                Meta {
                    offset,
                    start: self.pcap_record_header,
                    len: b.data.len(),
                    ts_ns: u64::from(b.ts_sec) * 1_000_000_000
                        + u64::from(b.ts_usec) * self.pcap_frac_ns,
                    orig_len: b.origlen,
                    link: self.pcap_link,
                },
            ),
            PcapBlockOwned::NG(Block::SectionHeader(shb)) => {
                self.ng_big_endian = shb.big_endian();
                self.interfaces.clear();
                Outcome::Skip(len)
            }
            PcapBlockOwned::NG(Block::InterfaceDescription(idb)) => {
                self.interfaces
                    .push(Interface::from_idb(&idb, self.ng_big_endian));
                Outcome::Skip(len)
            }
            PcapBlockOwned::NG(Block::EnhancedPacket(epb)) => {
                let Some(iface) = self.interfaces.get(epb.if_id as usize) else {
                    return Outcome::Fail(ErrorKind::Malformed(
                        "packet of an undeclared interface",
                    ));
                };
                Outcome::Packet(
                    len,
                    Meta {
                        offset,
                        start: 28,
                        len: epb.packet_data().len(),
                        ts_ns: iface.ts_ns(epb.ts_high, epb.ts_low),
                        orig_len: epb.origlen,
                        link: iface.link,
                    },
                )
            }
            PcapBlockOwned::NG(Block::SimplePacket(spb)) => {
                let Some(iface) = self.interfaces.first() else {
                    return Outcome::Fail(ErrorKind::Malformed(
                        "packet of an undeclared interface",
                    ));
                };
                // Captured length is min(original length, snaplen of interface 0).
                let mut caplen = spb.packet_data().len();
                if iface.snaplen != 0 {
                    caplen = caplen.min(iface.snaplen as usize);
                }
                Outcome::Packet(
                    len,
                    Meta {
                        offset,
                        start: 12,
                        len: caplen,
                        ts_ns: 0,
                        orig_len: spb.origlen,
                        link: iface.link,
                    },
                )
            }
            // The file header (already consumed in `new`), NRB, ISB, DSB, ...
            PcapBlockOwned::LegacyHeader(_) | PcapBlockOwned::NG(_) => Outcome::Skip(len),
        }
    }

    /// When the parser wants more data, decides from the length the record declares
    /// whether that is a real need (`None`) or a malformed record: one whose declared
    /// length is absurd, or that is already complete in `buf` and still unparsable.
    fn check_declared_len(&self, buf: &[u8]) -> Option<ErrorKind> {
        let declared = match self.format {
            Format::Pcap => {
                let caplen: [u8; 4] = buf.get(8..12)?.try_into().ok()?;
                let caplen = if self.pcap_big_endian {
                    u32::from_be_bytes(caplen)
                } else {
                    u32::from_le_bytes(caplen)
                };
                if caplen as usize > MAX_RECORD_LEN {
                    return Some(ErrorKind::Malformed("record length over the 64 MiB limit"));
                }
                self.pcap_record_header + caplen as usize
            }
            Format::PcapNg => match self.ng_block_len(buf)? {
                Ok(len) => len,
                Err(kind) => return Some(kind),
            },
        };
        (buf.len() >= declared).then_some(ErrorKind::Malformed("block contents overrun its length"))
    }

    /// The declared total length of the pcapng block at the start of
    /// `buf`, validated (`None` until enough of its header is in).
    fn ng_block_len(&self, buf: &[u8]) -> Option<Result<usize, ErrorKind>> {
        let raw: [u8; 4] = buf.get(4..8)?.try_into().ok()?;
        let big_endian = if buf.get(..4)? == [0x0a, 0x0d, 0x0d, 0x0a] {
            // A new section: its own byte-order magic decides.
            match buf.get(8..12)? {
                [0x1a, 0x2b, 0x3c, 0x4d] => true,
                [0x4d, 0x3c, 0x2b, 0x1a] => false,
                _ => {
                    return Some(Err(ErrorKind::Malformed(
                        "bad byte-order magic in section header",
                    )))
                }
            }
        } else {
            self.ng_big_endian
        };
        let len = if big_endian {
            u32::from_be_bytes(raw)
        } else {
            u32::from_le_bytes(raw)
        };
        Some(check_block_len(len))
    }
}

/// Validates a pcapng block total length.
fn check_block_len(len: u32) -> Result<usize, ErrorKind> {
    if len < 12 || !len.is_multiple_of(4) {
        Err(ErrorKind::Malformed("invalid block length"))
    } else if len as usize > MAX_RECORD_LEN {
        Err(ErrorKind::Malformed("block length over the 64 MiB limit"))
    } else {
        Ok(len as usize)
    }
}
