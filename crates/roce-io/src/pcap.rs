//! [`PcapTap`]: records the datagrams passing through any backend into a
//! pcap file that `roce inspect` and Wireshark read.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::net::IpAddr;
use std::path::Path;

use roce_capture::PcapWriter;
use roce_wire::crc32::Code;
use roce_wire::ethernet::{ethertype, EthernetFrame};
use roce_wire::{icrc, udp, RxHeader, UdpChecksum, UdpRepr, ROCE_V2_PORT};

use crate::backend::{Backend, Nanos, PacketBatch};
use crate::datagram;

mod shared;

pub use shared::SharedPcap;

/// EtherType written for datagrams that are neither IPv4 nor IPv6 (IEEE
/// 802 local experimental), so that they are recorded but not misread.
pub const ETHERTYPE_UNKNOWN: u16 = 0x88b5;

/// The synthetic MAC address the tap gives an IP address: `02:00:a:b:c:d`
/// for IPv4 `a.b.c.d`, `02` and the last five bytes for IPv6 (locally
/// administered, unicast).
pub fn mac_for(addr: IpAddr) -> [u8; 6] {
    match addr {
        IpAddr::V4(a) => {
            let [a, b, c, d] = a.octets();
            [0x02, 0x00, a, b, c, d]
        }
        IpAddr::V6(a) => {
            let o = a.octets();
            [0x02, o[11], o[12], o[13], o[14], o[15]]
        }
    }
}

/// What a [`PcapTap`] recorded.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct PcapStats {
    /// Datagrams written.
    pub written: u64,
    /// Datagrams not written because their timestamp does not fit a pcap
    /// record (after 2106).
    pub skipped: u64,
    /// Write errors. The first one stops the recording (a half-written
    /// record would corrupt the rest of the file) and is returned by
    /// [`PcapTap::flush`] and [`PcapTap::finish`].
    pub errors: u64,
}

/// The writer, flushed when dropped.
struct Recorder<W: Write> {
    writer: Option<PcapWriter<W>>,
    error: Option<io::Error>,
}

impl<W: Write> Drop for Recorder<W> {
    fn drop(&mut self) {
        if let Some(w) = self.writer.as_mut() {
            let _ = w.flush();
        }
    }
}

/// Middleware that records every datagram sent and received through the
/// backend it wraps into a classic pcap file (nanosecond timestamps,
/// Ethernet link type), timestamped with the `now` of the call.
///
/// Each IP datagram is wrapped in a synthetic Ethernet header: MAC addresses
/// derived from the IP addresses ([`mac_for`]) and the EtherType from the IP
/// version. Sent datagrams are recorded once the wrapped backend has taken
/// them, so a datagram offered again after backpressure is recorded once.
///
/// Recording errors never disturb traffic: they are counted, stop the
/// recording, and are reported by [`flush`](Self::flush) and
/// [`finish`](Self::finish). Dropping the tap flushes the file, ignoring
/// errors; call `finish` to see them.
///
/// ```no_run
/// use roce_io::{Fabric, PcapTap};
/// let fabric = Fabric::new();
/// let port = fabric.endpoint("10.0.0.1".parse().unwrap()).unwrap();
/// let mut tap = PcapTap::create(port, "test.pcap")?;
/// // ... send and receive through `tap` ...
/// let (_port, _file) = tap.finish()?;
/// # Ok::<(), std::io::Error>(())
/// ```
pub struct PcapTap<B, W: Write = BufWriter<File>> {
    inner: B,
    rec: Recorder<W>,
    frame: Vec<u8>,
    /// A received UDP payload with its header, for the capture.
    whole: Vec<u8>,
    ts_offset: Nanos,
    stats: PcapStats,
    /// Records go to this file, shared with other taps, instead.
    shared: Option<SharedPcap>,
    /// Finds the IPv4 identifications a UDP socket did not tell.
    rebaser: icrc::Rebaser,
}

impl<B: Backend> PcapTap<B, BufWriter<File>> {
    /// Creates (or truncates) the file at `path` and records into it.
    pub fn create(inner: B, path: impl AsRef<Path>) -> io::Result<Self> {
        PcapTap::new(inner, BufWriter::new(File::create(path)?))
    }

    /// Records into `file`, which other taps may record into too (the
    /// engines of one process, docs/debugging.md): one file, one header,
    /// whole records, timestamps never going back.
    pub fn shared(inner: B, file: &SharedPcap) -> Self {
        PcapTap {
            inner,
            rec: Recorder {
                writer: None,
                error: None,
            },
            frame: Vec::new(),
            whole: Vec::new(),
            ts_offset: 0,
            stats: PcapStats::default(),
            shared: Some(file.clone()),
            rebaser: icrc::Rebaser::default(),
        }
    }
}

impl<B: Backend, W: Write> PcapTap<B, W> {
    /// Writes the pcap file header to `writer` and wraps `inner`. Wrap a
    /// file in a [`BufWriter`]: each datagram is two small writes.
    pub fn new(inner: B, writer: W) -> io::Result<Self> {
        Ok(PcapTap {
            inner,
            rec: Recorder {
                writer: Some(PcapWriter::new(writer)?),
                error: None,
            },
            frame: Vec::new(),
            whole: Vec::new(),
            ts_offset: 0,
            stats: PcapStats::default(),
            shared: None,
            rebaser: icrc::Rebaser::default(),
        })
    }

    /// Adds `offset` nanoseconds to every timestamp, for example to place
    /// virtual time 0 at a wall-clock instant (by default a record's
    /// timestamp is `now`, i.e. virtual time 0 is 1970-01-01).
    pub fn with_time_offset(mut self, offset: Nanos) -> Self {
        self.ts_offset = offset;
        self
    }

    /// What was recorded.
    pub fn stats(&self) -> PcapStats {
        self.stats
    }

    /// The wrapped backend.
    pub fn get_ref(&self) -> &B {
        &self.inner
    }

    /// The wrapped backend, mutably.
    pub fn get_mut(&mut self) -> &mut B {
        &mut self.inner
    }

    /// Flushes the file; returns the first recording error, if any.
    pub fn flush(&mut self) -> io::Result<()> {
        if let Some(e) = self.rec.error.take() {
            return Err(e);
        }
        match self.rec.writer.as_mut() {
            Some(w) => w.flush(),
            None => Ok(()),
        }
    }

    /// Flushes the file and returns the wrapped backend and the writer, or
    /// the first recording error.
    pub fn finish(mut self) -> io::Result<(B, W)> {
        if let Some(e) = self.rec.error.take() {
            return Err(e);
        }
        let writer = self
            .rec
            .writer
            .take()
            .ok_or_else(|| io::Error::other("pcap writer already closed"))?;
        let w = writer.into_inner()?;
        let PcapTap { inner, .. } = self;
        Ok((inner, w))
    }

    /// Records a UDP payload received without its header (a UDP
    /// socket's): a capture needs one, so it gets the header its
    /// [`RxHeader`] tells (roce-wire's emitters; the IPv4 identification,
    /// when unknown, the one from 0 to 127 that the ICRC matches, as a UDP
    /// GSO send numbers its segments, else 0: a peer numbering its own,
    /// as rxe does, shows a failed ICRC in the capture). `fill_icrc`: the datagram is as its sending
    /// engine made it, which may have left its ICRC out for a same-host
    /// ring (docs/shm.md): the capture gets it computed.
    fn record_payload(&mut self, now: Nanos, h: &RxHeader, payload: &[u8], fill_icrc: bool) {
        if self.rec.error.is_some() || (self.rec.writer.is_none() && self.shared.is_none()) {
            return;
        }
        let Some(mut ip) = h.ip_repr() else {
            self.stats.skipped += 1;
            return;
        };
        let udp_len = udp::HEADER_LEN + payload.len();
        ip.set_payload_len(udp_len);
        let udp = UdpRepr {
            src_port: h.src.port(),
            dst_port: ROCE_V2_PORT,
            checksum: UdpChecksum::Zero,
        };
        let at = ip.header_len();
        let mut head = [0u8; 48];
        if ip.emit(&mut head[..at]).is_err() || udp.emit(&mut head[at..], udp_len).is_err() {
            self.stats.skipped += 1;
            return;
        }
        let mut whole = std::mem::take(&mut self.whole);
        whole.clear();
        whole.extend_from_slice(&head[..at + udp::HEADER_LEN]);
        whole.extend_from_slice(payload);
        if fill_icrc {
            // The engine's own bytes: the ICRC it computes, or would have.
            let _ = roce_wire::icrc::fill(Code::Fast, &mut whole);
        } else if h.ipv4_id.is_none() {
            // A UDP GSO sender's segments carry identifications 1, 2, ...
            // that the socket did not tell: the one the ICRC says.
            if let (Some(id), roce_wire::IpRepr::V4(v4)) = (self.solve_ipv4_id(&whole), &mut ip) {
                v4.ident = id;
                if ip.emit(&mut whole[..at]).is_err() {
                    self.stats.skipped += 1;
                    self.whole = whole;
                    return;
                }
            }
        }
        self.record(now, &whole);
        self.whole = whole;
    }

    /// The IPv4 identification, 1 to 127, with which IPv4 datagram
    /// `whole` (written with identification 0) has the ICRC it carries:
    /// `None` when 0 is right, or no such number exists (a damaged
    /// datagram stays damaged in the capture).
    fn solve_ipv4_id(&mut self, whole: &[u8]) -> Option<u16> {
        let end = whole.len().checked_sub(icrc::LEN)?;
        if whole.first()? >> 4 != 4 {
            return None;
        }
        let id0 = icrc::compute_with(Code::Fast, &whole[..end], &[]).ok()?;
        let found = icrc::read(whole[end..].try_into().ok()?);
        self.rebaser
            .solve_ipv4_id(id0, found, end, icrc::MAX_GSO_IPV4_ID)
    }

    /// Records datagram `d`, which came without its ICRC: with it.
    fn record_filling_icrc(&mut self, now: Nanos, d: &[u8]) {
        if self.rec.error.is_some() || (self.rec.writer.is_none() && self.shared.is_none()) {
            return;
        }
        let mut whole = std::mem::take(&mut self.whole);
        whole.clear();
        whole.extend_from_slice(d);
        let _ = roce_wire::icrc::fill(Code::Fast, &mut whole);
        self.record(now, &whole);
        self.whole = whole;
    }

    fn record(&mut self, now: Nanos, d: &[u8]) {
        if self.rec.error.is_some() || (self.rec.writer.is_none() && self.shared.is_none()) {
            return;
        }
        let (src, dst) = datagram::addrs(d)
            .map(|(s, t)| (mac_for(s), mac_for(t)))
            .unwrap_or(([2, 0, 0, 0, 0, 0], [2, 0, 0, 0, 0, 0]));
        let ethertype = match d.first().map(|b| b >> 4) {
            Some(4) => ethertype::IPV4,
            Some(6) => ethertype::IPV6,
            _ => ETHERTYPE_UNKNOWN,
        };
        self.frame.clear();
        self.frame.extend_from_slice(&dst);
        self.frame.extend_from_slice(&src);
        self.frame.extend_from_slice(&ethertype.to_be_bytes());
        debug_assert_eq!(self.frame.len(), EthernetFrame::<&[u8]>::HEADER_LEN);
        self.frame.extend_from_slice(d);
        let ts = now.saturating_add(self.ts_offset);
        let written = match (&self.shared, self.rec.writer.as_mut()) {
            (Some(s), _) => s.write_packet(ts, &self.frame),
            (None, Some(w)) => w.write_packet(ts, &self.frame),
            (None, None) => return,
        };
        match written {
            Ok(()) => self.stats.written += 1,
            // Nothing was written: the file is still consistent.
            Err(e) if e.kind() == io::ErrorKind::InvalidInput => self.stats.skipped += 1,
            Err(e) => {
                self.stats.errors += 1;
                self.rec.error = Some(e);
            }
        }
    }
}

impl<B: Backend, W: Write> Backend for PcapTap<B, W> {
    fn local_addrs(&self) -> &[IpAddr] {
        self.inner.local_addrs()
    }

    fn send(&mut self, now: Nanos, batch: &PacketBatch) -> io::Result<usize> {
        let taken = self.inner.send(now, batch)?;
        for i in 0..taken.min(batch.len()) {
            if batch.icrc_present(i) {
                self.record(now, batch.get(i));
            } else {
                self.record_filling_icrc(now, batch.get(i));
            }
        }
        Ok(taken)
    }

    fn recv(&mut self, now: Nanos, batch: &mut PacketBatch) -> io::Result<usize> {
        let n = self.inner.recv(now, batch)?;
        for i in 0..batch.len() {
            match batch.header(i) {
                Some(h) => {
                    let intact = batch.meta(i).host_intact;
                    self.record_payload(now, &h, batch.get(i), intact)
                }
                None => self.record(now, batch.get(i)),
            }
        }
        Ok(n)
    }

    fn poll_at(&self) -> Option<Nanos> {
        self.inner.poll_at()
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        let mut v = vec![
            ("pcap_written", self.stats.written),
            ("pcap_skipped", self.stats.skipped),
            ("pcap_errors", self.stats.errors),
        ];
        v.extend(self.inner.counters());
        v
    }

    #[cfg(unix)]
    fn wait_fd(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        self.inner.wait_fd()
    }

    fn prepare_wait(&mut self, now: Nanos) -> bool {
        self.inner.prepare_wait(now)
    }

    fn add_local_addr(&mut self, addr: std::net::IpAddr) -> std::io::Result<()> {
        self.inner.add_local_addr(addr)
    }

    fn claim(&mut self, local: std::net::IpAddr, owner: roce_wire::Owner) -> std::io::Result<bool> {
        self.inner.claim(local, owner)
    }

    fn release(&mut self, local: std::net::IpAddr, owner: roce_wire::Owner) {
        self.inner.release(local, owner)
    }

    /// Passed on untouched (forwarding moves a datagram that was
    /// received already, between processes of this host).
    fn forward(
        &mut self,
        now: Nanos,
        header: roce_wire::RxHeader,
        payload: &[u8],
        meta: crate::RxMeta,
        owner: roce_wire::Owner,
    ) -> crate::Forwarded {
        self.inner.forward(now, header, payload, meta, owner)
    }
    fn leave(&mut self) -> bool {
        self.inner.leave()
    }
}

impl<B: std::fmt::Debug, W: Write> std::fmt::Debug for PcapTap<B, W> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PcapTap")
            .field("inner", &self.inner)
            .field("stats", &self.stats)
            .field("ts_offset", &self.ts_offset)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests;
