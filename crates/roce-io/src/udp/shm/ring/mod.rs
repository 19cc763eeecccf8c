//! One direction of a same-host link: a ring of datagram records in
//! shared memory, written by one process and read by another
//! (docs/shm.md).
//!
//! The first page holds the control words, each on a cache line of its
//! own: `tail` (bytes ever written, the producer's), `head` (bytes ever
//! read, the consumer's), `need_wake` (the consumer is about to sleep)
//! and `doorbells` (wake-ups the producer sent). Records follow, 8-byte
//! aligned, never split across the end: a header and the UDP payload
//! (BTH ... ICRC). The writer's own datagrams (from the link's source
//! address, IPv4 identification 0, header exact) have an 8-byte header
//! (payload length, UDP source port, TOS, kind, flags), so that a small
//! message and its header share a cache line; a forwarded datagram,
//! whose source is the original sender's, not the writer's (docs/host.md),
//! has a 32-byte one that adds the address family, the IPv4
//! identification and the source address (docs/shm.md, "The ring"). A
//! datagram of the writer's own may also be built in place
//! ([`Producer::reserve`], [`Producer::commit`]): the short header, then
//! the whole IP datagram, of which the consumer takes the UDP payload. A
//! record that would not fit before the end is preceded by a skip record
//! covering the rest.
//!
//! The consumer trusts nothing it reads there: every index and header is
//! checked before use and a violation breaks the link ([`Broken`]), the
//! payload is copied out once before anything parses it, and the mapping
//! cannot shrink ([`SharedMem::open`]).

use std::io;
use std::net::{IpAddr, Ipv6Addr};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use super::mem::SharedMem;

/// Copies `len` bytes in pieces of at most `piece` (`None`: at once), as
/// [`crate::emu::copy_payload`] does for slices.
///
/// # Safety
///
/// `src` and `dst` must be valid for `len` bytes and not overlap.
unsafe fn copy_raw(src: *const u8, dst: *mut u8, len: usize, piece: Option<usize>) {
    let p = piece.filter(|p| *p > 0).unwrap_or(len.max(1));
    let mut at = 0;
    while at < len {
        let n = p.min(len - at);
        // SAFETY: inside both ranges, per the caller.
        unsafe { std::ptr::copy_nonoverlapping(src.add(at), dst.add(at), n) };
        at += n;
    }
}

/// Bytes before the records: the control page.
pub(crate) const CONTROL: usize = 4096;
/// Smallest and largest record area accepted from a peer.
pub(crate) const MIN_CAP: usize = 1 << 16;
pub(crate) const MAX_CAP: usize = 1 << 26;
/// Largest payload a record carries (its length field is 16 bits).
pub(crate) const MAX_PAYLOAD: usize = u16::MAX as usize;
/// Version 4: a record says whether its datagram comes without its ICRC
/// ([`FLAG_NO_ICRC`]), and may hold a whole datagram built in place
/// ([`KIND_OWN_WHOLE`]; version 3 had neither, version 2 no
/// [`FLAG_INTACT`], version 1 no source in the record header); a ring of
/// another version is refused.
const MAGIC: u64 = u64::from_le_bytes(*b"RoCEshm4");
const REC_HDR: usize = 32;
/// The header of a record of the writer's own.
const OWN_HDR: usize = 8;
/// Record flags: handed on by [`Backend::forward`](crate::Backend::forward);
/// its header is exact ([`crate::RxMeta::header_exact`]).
const FLAG_FORWARDED: u8 = 1;
const FLAG_EXACT: u8 = 2;
/// Record flag: the datagram's bytes are as the sending engine made them
/// ([`crate::PacketBatch::intact`]), its ICRC computed over them.
const FLAG_INTACT: u8 = 4;
/// Record flag: the sending engine left the ICRC out (its four bytes are
/// not the ICRC): the receiver computes it when anything needs it.
const FLAG_NO_ICRC: u8 = 8;
const KIND_DATAGRAM: u8 = 1;
const KIND_SKIP: u8 = 2;
const KIND_OWN: u8 = 3;
/// A datagram of the writer's own built in the ring ([`Producer::reserve`]):
/// the short header, then the whole IP datagram, whose UDP payload starts
/// after its IP and UDP headers ([`whole_skip`]).
const KIND_OWN_WHOLE: u8 = 4;

/// The IP and UDP header in front of a [`KIND_OWN_WHOLE`] record's
/// payload, by the family byte: 28 bytes for IPv4 (no options), 48 for
/// IPv6.
fn whole_skip(family: u8) -> Option<usize> {
    match family {
        4 => Some(roce_wire::ipv4::HEADER_LEN + roce_wire::udp::HEADER_LEN),
        6 => Some(roce_wire::ipv6::HEADER_LEN + roce_wire::udp::HEADER_LEN),
        _ => None,
    }
}

/// A control word alone on its cache line.
#[repr(C, align(64))]
struct Line<T>(T);

/// The control page's layout.
#[repr(C)]
struct Control {
    magic: Line<AtomicU64>,
    cap: Line<AtomicU64>,
    tail: Line<AtomicU64>,
    head: Line<AtomicU64>,
    need_wake: Line<AtomicU32>,
    doorbells: Line<AtomicU64>,
}

const _: () = assert!(std::mem::size_of::<Control>() <= CONTROL);

/// Why a ring can no longer be used: the other side wrote something the
/// protocol does not allow.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Broken(pub(crate) &'static str);

fn control(mem: &SharedMem) -> &Control {
    // SAFETY: the mapping is page-aligned, at least CONTROL bytes long
    // (checked by both constructors) and lives as long as `mem`; every
    // field is an atomic, so the other process's concurrent accesses are
    // not data races.
    unsafe { mem.base().cast::<Control>().as_ref() }
}

const fn align8(n: usize) -> usize {
    (n + 7) & !7
}

/// Writing records.
pub(crate) struct Producer {
    mem: SharedMem,
    cap: u64,
    /// Bytes written (not all published yet).
    tail: u64,
    /// The consumer's head when last read.
    head: u64,
    /// The link's source address: records from it take the short header.
    own_src: Option<IpAddr>,
}

/// Room at the tail for a datagram built in place ([`Producer::reserve`]).
#[derive(Debug)]
pub(crate) struct Reserved {
    /// The tail the room is at (any other record written since voids it).
    tail: u64,
    /// The room's first byte (after the record's header) and its size.
    ptr: *mut u8,
    max: usize,
}

impl Reserved {
    /// The room, to build the datagram in.
    ///
    /// # Safety
    ///
    /// The producer that made it must be alive and must not write
    /// another record while the slice is used; the consumer does not
    /// read these bytes before they are published.
    pub(crate) unsafe fn room(&mut self) -> &mut [u8] {
        // SAFETY: `reserve` checked that `max` bytes from `ptr` lie in the
        // record area, before its end, in bytes no published record
        // covers; the caller keeps the mapping alive.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.max) }
    }
}

/// How a datagram of the writer's own was made ([`RecMeta::intact`],
/// [`RecMeta::no_icrc`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Made {
    pub(crate) intact: bool,
    pub(crate) no_icrc: bool,
}

/// What [`Producer::push`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Push {
    Written,
    /// No room: the consumer is behind (or gone).
    Full,
    /// Larger than a record can be.
    TooBig,
}

/// What a record says about its datagram beside the payload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct RecMeta {
    /// The datagram's source address and UDP port: the writer's own, or
    /// the original sender's for a forwarded datagram.
    pub(crate) src: IpAddr,
    pub(crate) sport: u16,
    pub(crate) tos: u8,
    /// The IPv4 identification of the datagram's header (0 as the engine
    /// writes it), when `exact`.
    pub(crate) ipv4_id: u16,
    /// Handed on by another process.
    pub(crate) forwarded: bool,
    /// The header the record tells holds every covered field as sent
    /// (the IPv4 identification known: not so for a forwarded datagram
    /// its first receiver had from a UDP socket).
    pub(crate) exact: bool,
    /// The bytes are as the sending engine made them (never so for a
    /// forwarded datagram, which came off a wire).
    pub(crate) intact: bool,
    /// The sending engine did not compute the ICRC (its four bytes mean
    /// nothing).
    pub(crate) no_icrc: bool,
}

impl RecMeta {
    /// The first 8 bytes of a record header: all a record of the
    /// writer's own has ([`KIND_OWN`]).
    fn encode_short(&self, len: u16, kind: u8) -> [u8; OWN_HDR] {
        let l = len.to_le_bytes();
        let p = self.sport.to_le_bytes();
        let flags = if self.forwarded { FLAG_FORWARDED } else { 0 }
            | if self.exact { FLAG_EXACT } else { 0 }
            | if self.intact { FLAG_INTACT } else { 0 }
            | if self.no_icrc { FLAG_NO_ICRC } else { 0 };
        let fam = if self.src.is_ipv4() { 4 } else { 6 };
        [l[0], l[1], p[0], p[1], self.tos, kind, flags, fam]
    }

    fn encode(&self, len: u16, kind: u8) -> [u8; REC_HDR] {
        let mut h = [0u8; REC_HDR];
        h[..OWN_HDR].copy_from_slice(&self.encode_short(len, kind));
        let ip = match self.src {
            IpAddr::V4(a) => a.to_ipv6_mapped().octets(),
            IpAddr::V6(a) => a.octets(),
        };
        h[8..10].copy_from_slice(&self.ipv4_id.to_le_bytes());
        h[16..32].copy_from_slice(&ip);
        h
    }

    /// Reads the short header of a record of the writer's own, from
    /// `src`.
    fn decode_own(h: &[u8; OWN_HDR], src: IpAddr) -> RecMeta {
        RecMeta {
            src,
            sport: u16::from_le_bytes([h[2], h[3]]),
            tos: h[4],
            ipv4_id: 0,
            forwarded: false,
            exact: true,
            intact: h[6] & FLAG_INTACT != 0,
            no_icrc: h[6] & FLAG_NO_ICRC != 0,
        }
    }

    /// Reads a datagram record's header (written by another process:
    /// an unknown family, or an IPv4 one that is not v4-mapped, is
    /// refused).
    fn decode(h: &[u8; REC_HDR]) -> Option<RecMeta> {
        let ip = Ipv6Addr::from(<[u8; 16]>::try_from(&h[16..32]).ok()?);
        let src = match h[7] {
            4 => IpAddr::V4(ip.to_ipv4_mapped()?),
            6 => IpAddr::V6(ip),
            _ => return None,
        };
        Some(RecMeta {
            src,
            sport: u16::from_le_bytes([h[2], h[3]]),
            tos: h[4],
            ipv4_id: u16::from_le_bytes([h[8], h[9]]),
            forwarded: h[6] & FLAG_FORWARDED != 0,
            exact: h[6] & FLAG_EXACT != 0,
            intact: h[6] & FLAG_INTACT != 0,
            no_icrc: h[6] & FLAG_NO_ICRC != 0,
        })
    }
}

impl Producer {
    /// A ring with `cap` bytes of records (a power of two between
    /// [`MIN_CAP`] and [`MAX_CAP`]) in a new sealed `memfd`.
    pub(crate) fn create(cap: usize) -> io::Result<Producer> {
        if !cap.is_power_of_two() || !(MIN_CAP..=MAX_CAP).contains(&cap) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("ring capacity {cap} is not a power of two in {MIN_CAP}..={MAX_CAP}"),
            ));
        }
        let mem = SharedMem::create(CONTROL + cap)?;
        let c = control(&mem);
        c.cap.0.store(cap as u64, Ordering::Relaxed);
        c.magic.0.store(MAGIC, Ordering::Release);
        Ok(Producer {
            mem,
            cap: cap as u64,
            tail: 0,
            head: 0,
            own_src: None,
        })
    }

    /// Writes the records of `src` (the link's source, which the
    /// consumer knows from the hello) with the short header.
    pub(crate) fn with_own_source(mut self, src: IpAddr) -> Producer {
        self.own_src = Some(src);
        self
    }

    /// The memory to hand to the consumer.
    pub(crate) fn mem(&self) -> &SharedMem {
        &self.mem
    }

    /// Room for `need` more bytes, rereading the consumer's head when the
    /// last one seen leaves too little. A head that is not between the
    /// published tail's lap and the tail is the consumer's fault.
    fn room(&mut self, need: u64) -> Result<bool, Broken> {
        if self.cap - (self.tail - self.head) >= need {
            return Ok(true);
        }
        let head = control(&self.mem).head.0.load(Ordering::Acquire);
        if head < self.head || head > self.tail {
            return Err(Broken("the consumer's head moved outside the ring"));
        }
        self.head = head;
        Ok(self.cap - (self.tail - self.head) >= need)
    }

    /// Writes one record (not visible until [`publish`](Self::publish)).
    /// `piece` as [`crate::CpuTuning::copy_piece`].
    pub(crate) fn push(
        &mut self,
        meta: &RecMeta,
        payload: &[u8],
        piece: Option<usize>,
    ) -> Result<Push, Broken> {
        if payload.len() > MAX_PAYLOAD {
            return Ok(Push::TooBig);
        }
        let own =
            Some(meta.src) == self.own_src && !meta.forwarded && meta.exact && meta.ipv4_id == 0;
        if own {
            let made = Made {
                intact: meta.intact,
                no_icrc: meta.no_icrc,
            };
            return self.push_own(meta.sport, meta.tos, made, payload, piece);
        }
        let h = meta.encode(payload.len() as u16, KIND_DATAGRAM);
        self.write_record(&h, payload, piece)
    }

    /// [`push`](Self::push) of a datagram of the writer's own, sent from
    /// `sport` with `tos` (exact, not forwarded), as a short record: for
    /// a producer made [`with_own_source`](Self::with_own_source) (any
    /// other is broken by it); `made` as [`RecMeta::intact`] and
    /// [`RecMeta::no_icrc`].
    pub(crate) fn push_own(
        &mut self,
        sport: u16,
        tos: u8,
        made: Made,
        payload: &[u8],
        piece: Option<usize>,
    ) -> Result<Push, Broken> {
        if payload.len() > MAX_PAYLOAD {
            return Ok(Push::TooBig);
        }
        let meta = self.own_meta(sport, tos, made)?;
        self.write_record(
            &meta.encode_short(payload.len() as u16, KIND_OWN),
            payload,
            piece,
        )
    }

    /// Room at the tail for a record of the writer's own of up to `max`
    /// bytes of datagram (at most [`MAX_PAYLOAD`]), to build it in place
    /// ([`Reserved::room`]) and then [`commit`](Self::commit) it; `None`
    /// when the ring has no such room now. A skip record may be written
    /// first (harmless if nothing is committed).
    pub(crate) fn reserve(&mut self, max: usize) -> Result<Option<Reserved>, Broken> {
        if max > MAX_PAYLOAD || self.own_src.is_none() {
            return Ok(None);
        }
        let total = align8(OWN_HDR + max) as u64;
        let Some(pos) = self.room_before_end(total)? else {
            return Ok(None);
        };
        // SAFETY: `pos + total <= cap`: the room lies inside the record
        // area, past the tail, where the consumer does not read.
        let ptr = unsafe { self.data_ptr().add(pos as usize + OWN_HDR) };
        Ok(Some(Reserved {
            tail: self.tail,
            ptr,
            max,
        }))
    }

    /// Writes the header of the record reserved by `r`, whose first `len`
    /// bytes now hold an IP datagram of the writer's own (its family's IP
    /// and UDP header, then the UDP payload), sent from `sport` with
    /// `tos`, and moves the tail past it (visible at
    /// [`publish`](Self::publish)). `TooBig` when `len` exceeds the room
    /// or is shorter than the headers; `Full` when another record was
    /// written since the reservation (nothing is written then).
    pub(crate) fn commit(
        &mut self,
        r: Reserved,
        sport: u16,
        tos: u8,
        made: Made,
        len: usize,
    ) -> Result<Push, Broken> {
        let meta = self.own_meta(sport, tos, made)?;
        let h = meta.encode_short(len as u16, KIND_OWN_WHOLE);
        let skip = whole_skip(h[7]).unwrap_or(usize::MAX);
        if len > r.max || len < skip {
            return Ok(Push::TooBig);
        }
        if r.tail != self.tail {
            return Ok(Push::Full);
        }
        self.write_header(self.tail % self.cap, &h);
        self.tail += align8(OWN_HDR + len) as u64;
        Ok(Push::Written)
    }

    /// Writes a record of header `h` (of fixed size, so that its copy is
    /// plain stores) and `payload` (at most [`MAX_PAYLOAD`] bytes).
    fn write_record<const N: usize>(
        &mut self,
        h: &[u8; N],
        payload: &[u8],
        piece: Option<usize>,
    ) -> Result<Push, Broken> {
        let total = align8(N + payload.len()) as u64;
        let Some(pos) = self.room_before_end(total)? else {
            return Ok(Push::Full);
        };
        self.write_header(pos, h);
        // SAFETY: `pos + total <= cap` (records never cross the end), so
        // the payload lands inside the record area, in bytes the consumer
        // does not read before the tail covers them.
        unsafe {
            let dst = self.data_ptr().add(pos as usize + N);
            copy_raw(payload.as_ptr(), dst, payload.len(), piece);
        }
        self.tail += total;
        Ok(Push::Written)
    }

    /// The header of a record of the writer's own datagram.
    fn own_meta(&self, sport: u16, tos: u8, made: Made) -> Result<RecMeta, Broken> {
        let src = self
            .own_src
            .ok_or(Broken("a short record on a link without a source"))?;
        Ok(RecMeta {
            src,
            sport,
            tos,
            ipv4_id: 0,
            forwarded: false,
            exact: true,
            intact: made.intact,
            no_icrc: made.no_icrc,
        })
    }

    /// Room at the tail for a record of `total` bytes that does not cross
    /// the end of the area (records never do): a skip record over the
    /// rest of the area first when it would; the record's position, or
    /// `None` when the consumer has not freed that much.
    fn room_before_end(&mut self, total: u64) -> Result<Option<u64>, Broken> {
        let pos = self.tail % self.cap;
        let to_end = self.cap - pos;
        let skip = if total > to_end { to_end } else { 0 };
        if !self.room(skip + total)? {
            return Ok(None);
        }
        if skip > 0 {
            // A skip record needs its kind alone; the rest of the area
            // may be shorter than a record header.
            self.write_header(pos, &[0, 0, 0, 0, 0, KIND_SKIP, 0, 0]);
            self.tail += skip;
        }
        Ok(Some(self.tail % self.cap))
    }

    fn data_ptr(&self) -> *mut u8 {
        // SAFETY: CONTROL is inside the mapping (its length is CONTROL +
        // cap).
        unsafe { self.mem.base().as_ptr().add(CONTROL) }
    }

    /// Writes header `h` at `pos`: 8 bytes (a skip record's, a short
    /// one) or [`REC_HDR`] (only where the record that follows fits
    /// before the end, so the header does too).
    fn write_header<const N: usize>(&mut self, pos: u64, h: &[u8; N]) {
        debug_assert!(pos + N as u64 <= self.cap);
        // SAFETY: `pos` is 8-aligned and below cap, so 8 bytes from it are
        // inside the record area, and a longer header is written only
        // where its whole record fits before the end.
        unsafe {
            std::ptr::copy_nonoverlapping(h.as_ptr(), self.data_ptr().add(pos as usize), N);
        }
    }

    /// Makes every record written so far visible to the consumer; true
    /// when the consumer asked to be woken (then the caller rings its
    /// doorbell, once).
    pub(crate) fn publish(&mut self) -> bool {
        let c = control(&self.mem);
        // SeqCst on both sides: either the consumer's re-check after
        // setting `need_wake` sees this tail, or this load sees its flag.
        c.tail.0.store(self.tail, Ordering::SeqCst);
        if c.need_wake.0.load(Ordering::SeqCst) != 0 && c.need_wake.0.swap(0, Ordering::SeqCst) != 0
        {
            c.doorbells.0.fetch_add(1, Ordering::SeqCst);
            return true;
        }
        false
    }
}

/// A record found by [`Consumer::next`].
#[derive(Clone, Copy, Debug)]
pub(crate) struct Record {
    pub(crate) meta: RecMeta,
    pub(crate) len: usize,
    at: usize,
    total: u64,
}

/// Reading records.
pub(crate) struct Consumer {
    mem: SharedMem,
    cap: u64,
    /// Bytes read (published at [`release`](Self::release)).
    head: u64,
    /// The link's source address (from the hello): the source of the
    /// records with the short header.
    own_src: Option<IpAddr>,
}

impl Consumer {
    /// Takes a ring another process made: `mem` must be a whole ring
    /// (control page, then a record area of a valid capacity) with the
    /// magic word and that capacity in its control page.
    pub(crate) fn open(mem: SharedMem) -> Result<Consumer, Broken> {
        let cap = mem
            .len()
            .checked_sub(CONTROL)
            .filter(|c| c.is_power_of_two() && (MIN_CAP..=MAX_CAP).contains(c))
            .ok_or(Broken("the ring's size is not a valid capacity"))?;
        let c = control(&mem);
        if c.magic.0.load(Ordering::Acquire) != MAGIC {
            return Err(Broken("the ring's magic word is wrong"));
        }
        if c.cap.0.load(Ordering::Relaxed) != cap as u64 {
            return Err(Broken("the ring's capacity word disagrees with its size"));
        }
        let head = c.head.0.load(Ordering::Relaxed);
        Ok(Consumer {
            mem,
            cap: cap as u64,
            head,
            own_src: None,
        })
    }

    /// The source of the records with the short header: the link's.
    pub(crate) fn with_own_source(mut self, src: IpAddr) -> Consumer {
        self.own_src = Some(src);
        self
    }

    fn data_ptr(&self) -> *const u8 {
        // SAFETY: CONTROL is inside the mapping.
        unsafe { self.mem.base().as_ptr().add(CONTROL) }
    }

    /// The next record, if one is published. Skip records are passed over.
    #[inline]
    pub(crate) fn next(&mut self) -> Result<Option<Record>, Broken> {
        let tail = control(&self.mem).tail.0.load(Ordering::Acquire);
        loop {
            if tail < self.head || tail - self.head > self.cap || !tail.is_multiple_of(8) {
                return Err(Broken("the producer's tail moved outside the ring"));
            }
            let avail = tail - self.head;
            if avail == 0 {
                return Ok(None);
            }
            let pos = self.head % self.cap;
            let to_end = self.cap - pos;
            let mut h = [0u8; OWN_HDR];
            // SAFETY: `pos` is 8-aligned (head and cap are multiples of
            // 8) and below cap, so 8 bytes from it are inside the record
            // area; they are copied out once and only the copy is looked
            // at.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    self.data_ptr().add(pos as usize),
                    h.as_mut_ptr(),
                    OWN_HDR,
                );
            }
            match h[5] {
                KIND_SKIP => {
                    if to_end > avail {
                        return Err(Broken("a skip record goes past the tail"));
                    }
                    self.head += to_end;
                }
                kind @ (KIND_DATAGRAM | KIND_OWN | KIND_OWN_WHOLE) => {
                    let hdr = if kind == KIND_DATAGRAM {
                        REC_HDR
                    } else {
                        OWN_HDR
                    };
                    let len = usize::from(u16::from_le_bytes([h[0], h[1]]));
                    let total = align8(hdr + len) as u64;
                    if total > to_end || total > avail {
                        return Err(Broken("a record goes past the tail or the ring's end"));
                    }
                    // A whole datagram: its payload after its IP and UDP
                    // header, which must fit in it.
                    let skip = if kind == KIND_OWN_WHOLE {
                        whole_skip(h[7])
                            .filter(|s| *s <= len)
                            .ok_or(Broken("a whole datagram shorter than its headers"))?
                    } else {
                        0
                    };
                    let meta = if kind != KIND_DATAGRAM {
                        let src = self
                            .own_src
                            .ok_or(Broken("a short record on a link without a source"))?;
                        RecMeta::decode_own(&h, src)
                    } else {
                        let mut full = [0u8; REC_HDR];
                        // SAFETY: the record, its whole header included,
                        // lies before the area's end (`total <= to_end`,
                        // checked above).
                        unsafe {
                            std::ptr::copy_nonoverlapping(
                                self.data_ptr().add(pos as usize),
                                full.as_mut_ptr(),
                                REC_HDR,
                            );
                        }
                        RecMeta::decode(&full)
                            .ok_or(Broken("a record names a source of no known family"))?
                    };
                    return Ok(Some(Record {
                        meta,
                        len: len - skip,
                        at: pos as usize + hdr + skip,
                        total,
                    }));
                }
                _ => return Err(Broken("a record of an unknown kind")),
            }
        }
    }

    /// Copies the payload of `r` (from [`next`](Self::next)) into `out`,
    /// which must be `r.len` bytes long, and consumes the record.
    /// `piece` as [`crate::CpuTuning::copy_piece`].
    #[inline]
    pub(crate) fn take(&mut self, r: &Record, out: &mut [u8], piece: Option<usize>) {
        assert_eq!(out.len(), r.len, "the record's length");
        // SAFETY: `next` checked that the record lies inside the record
        // area. The producer does not write it until the head passes it;
        // one that does anyway only changes the bytes copied here.
        unsafe {
            copy_raw(self.data_ptr().add(r.at), out.as_mut_ptr(), r.len, piece);
        }
        self.head += r.total;
    }

    /// Passes over `r` without reading it.
    pub(crate) fn skip(&mut self, r: &Record) {
        self.head += r.total;
    }

    /// Tells the producer how far this side has read.
    pub(crate) fn release(&self) {
        control(&self.mem)
            .head
            .0
            .store(self.head, Ordering::Release);
    }

    /// Asks the producer to ring the doorbell at its next publish, then
    /// looks again: true when a record came in the meantime (the caller
    /// must not sleep then).
    pub(crate) fn arm(&self) -> bool {
        let c = control(&self.mem);
        if c.need_wake.0.load(Ordering::Relaxed) == 0 {
            c.need_wake.0.store(1, Ordering::SeqCst);
        }
        c.tail.0.load(Ordering::SeqCst) != self.head
    }

    /// Doorbells the producer has rung (a counter in the control page,
    /// for tests and diagnostics).
    #[cfg(test)]
    pub(crate) fn doorbells(&self) -> u64 {
        control(&self.mem).doorbells.0.load(Ordering::Acquire)
    }
}

#[cfg(test)]
mod tests;
