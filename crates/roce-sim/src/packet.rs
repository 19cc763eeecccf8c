//! Packets in flight: the real IP datagram roce-core emitted plus the
//! simulator's metadata, kept in a pool so that the hot path reuses buffers
//! instead of allocating one per packet.

use crate::time::{frame_len, wire_len};

/// Bytes of a datagram kept inside the pool slot itself: the headers of
/// a data packet (IPv4, UDP, BTH, RETH) and the ICRC fit.
const INLINE: usize = 64;
/// A run of zero bytes shorter than this is stored as it is.
const MIN_ELIDED: usize = 32;
/// The elided run never starts inside IPv4 (20) + UDP (8) + BTH (12), so
/// the header bytes the switches read and rewrite are always stored.
const MIN_PREFIX: usize = 40;

/// One datagram in the fabric.
///
/// The hosts register memory that reads as zeros, so nearly every data
/// packet is headers, a payload of zeros and the ICRC. The slot stores
/// the datagram without that zero run (losslessly: [`Packet::write_to`]
/// rebuilds every byte), which keeps tens of thousands of packets in
/// flight within the CPU's cache instead of one kilobyte each.
///
/// Layout: what the switches read (the metadata and the first bytes of
/// the datagram, with the IPv4 TOS and checksum they rewrite) shares the
/// slot's first cache line.
#[derive(Debug)]
#[repr(C, align(64))]
pub(crate) struct Packet {
    /// ECMP hash of (src ip, dst ip, udp src port), unsalted.
    pub(crate) hash: u64,
    /// Number of stored bytes.
    stored: u32,
    /// Offset of the elided zero run in the datagram.
    zeros_at: u32,
    /// Length of the elided zero run.
    zeros: u32,
    /// Destination host index.
    pub(crate) dst_host: u32,
    /// Source host index.
    pub(crate) src_host: u32,
    /// Ingress port at the current switch.
    pub(crate) in_port: u16,
    /// 802.1p priority (from the DSCP by the dscp→prio map).
    pub(crate) prio: u8,
    /// Stored bytes (prefix ++ suffix) when they fit.
    inline: [u8; INLINE],
    /// Stored bytes when they do not.
    spill: Vec<u8>,
}

impl Default for Packet {
    fn default() -> Packet {
        Packet {
            inline: [0; INLINE],
            spill: Vec::new(),
            stored: 0,
            zeros_at: 0,
            zeros: 0,
            prio: 0,
            in_port: 0,
            dst_host: 0,
            src_host: 0,
            hash: 0,
        }
    }
}

impl Packet {
    /// Stores `bytes`, eliding the zero run that ends four bytes (the
    /// ICRC) before the end when it is long enough to matter.
    fn set(&mut self, bytes: &[u8]) {
        let n = bytes.len();
        let body_end = n.saturating_sub(4);
        let mut at = body_end;
        if body_end > MIN_PREFIX {
            at = MIN_PREFIX + nonzero_len(&bytes[MIN_PREFIX..body_end]);
        }
        let zeros = body_end - at;
        let (zeros_at, zeros) = if zeros >= MIN_ELIDED {
            (at, zeros)
        } else {
            (n, 0)
        };
        let stored = n - zeros;
        let dst: &mut [u8] = if stored <= INLINE {
            &mut self.inline[..stored]
        } else {
            self.spill.clear();
            self.spill.resize(stored, 0);
            &mut self.spill[..]
        };
        dst[..zeros_at].copy_from_slice(&bytes[..zeros_at]);
        dst[zeros_at..].copy_from_slice(&bytes[zeros_at + zeros..]);
        self.stored = stored as u32;
        self.zeros_at = zeros_at as u32;
        self.zeros = zeros as u32;
    }

    fn stored(&self) -> &[u8] {
        let n = self.stored as usize;
        if n <= INLINE {
            &self.inline[..n]
        } else {
            &self.spill[..n]
        }
    }

    /// The datagram's leading bytes (at least IPv4 + UDP + BTH when the
    /// datagram has them): what the switches read.
    pub(crate) fn head(&self) -> &[u8] {
        &self.stored()[..self.zeros_at.min(self.stored) as usize]
    }

    /// The leading bytes, writable (ECN marking).
    pub(crate) fn head_mut(&mut self) -> &mut [u8] {
        let n = self.zeros_at.min(self.stored) as usize;
        if self.stored as usize <= INLINE {
            &mut self.inline[..n]
        } else {
            &mut self.spill[..n]
        }
    }

    /// Length of the datagram.
    pub(crate) fn len(&self) -> usize {
        (self.stored + self.zeros) as usize
    }

    /// The whole datagram, rebuilt into `out` (which must hold
    /// [`Packet::len`] bytes). Returns its length.
    pub(crate) fn write_to(&self, out: &mut [u8]) -> usize {
        let s = self.stored();
        let (at, z) = (self.zeros_at as usize, self.zeros as usize);
        out[..at].copy_from_slice(&s[..at]);
        out[at..at + z].fill(0);
        out[at + z..s.len() + z].copy_from_slice(&s[at..]);
        s.len() + z
    }

    /// Bytes in a switch buffer.
    pub(crate) fn frame_len(&self) -> u32 {
        frame_len(self.len() as u32)
    }
    /// Bytes of line time.
    pub(crate) fn wire_len(&self) -> u32 {
        wire_len(self.len() as u32)
    }
}

/// Length of `b` without its trailing zero bytes (eight at a time).
fn nonzero_len(b: &[u8]) -> usize {
    let mut end = b.len();
    while let Some(w) = end.checked_sub(8).map(|s| &b[s..end]) {
        if w != [0u8; 8] {
            break;
        }
        end -= 8;
    }
    b[..end].iter().rposition(|&x| x != 0).map_or(0, |i| i + 1)
}

/// A free-list pool of packets indexed by `u32`.
#[derive(Default)]
pub(crate) struct Pool {
    pkts: Vec<Packet>,
    free: Vec<u32>,
}

impl Pool {
    /// A packet slot holding a copy of `bytes`.
    pub(crate) fn alloc(&mut self, bytes: &[u8]) -> u32 {
        let id = match self.free.pop() {
            Some(id) => id,
            None => {
                self.pkts.push(Packet::default());
                self.pkts.len() as u32 - 1
            }
        };
        self.pkts[id as usize].set(bytes);
        id
    }

    /// Moves a packet out of the pool (to the other half of the fabric),
    /// freeing its slot.
    pub(crate) fn take(&mut self, id: u32) -> Packet {
        self.free.push(id);
        std::mem::take(&mut self.pkts[id as usize])
    }

    /// Moves a packet from the other half into a slot.
    pub(crate) fn put(&mut self, p: Packet) -> u32 {
        match self.free.pop() {
            Some(id) => {
                self.pkts[id as usize] = p;
                id
            }
            None => {
                self.pkts.push(p);
                self.pkts.len() as u32 - 1
            }
        }
    }

    /// Returns a slot to the pool.
    pub(crate) fn free(&mut self, id: u32) {
        self.free.push(id);
    }

    pub(crate) fn get(&self, id: u32) -> &Packet {
        &self.pkts[id as usize]
    }

    pub(crate) fn get_mut(&mut self, id: u32) -> &mut Packet {
        &mut self.pkts[id as usize]
    }

    /// Slots ever created (the high-water mark of packets in flight).
    pub(crate) fn capacity(&self) -> usize {
        self.pkts.len()
    }
}

/// IPv4 header fields the fabric reads, by offset (RFC 791).
pub(crate) mod ipv4 {
    const TOS: usize = 1;
    const CHECKSUM: usize = 10;

    /// DSCP of an IPv4 datagram (0 when too short).
    pub(crate) fn dscp(d: &[u8]) -> u8 {
        d.get(TOS).map_or(0, |t| t >> 2)
    }

    /// ECN bits.
    pub(crate) fn ecn(d: &[u8]) -> u8 {
        d.get(TOS).map_or(0, |t| t & 3)
    }

    /// Source and destination addresses as integers.
    pub(crate) fn addrs(d: &[u8]) -> Option<(u32, u32)> {
        let s = d.get(12..16)?;
        let t = d.get(16..20)?;
        Some((
            u32::from_be_bytes([s[0], s[1], s[2], s[3]]),
            u32::from_be_bytes([t[0], t[1], t[2], t[3]]),
        ))
    }

    /// UDP source port (IPv4 without options).
    pub(crate) fn udp_sport(d: &[u8]) -> u16 {
        d.get(20..22)
            .map_or(0, |p| u16::from_be_bytes([p[0], p[1]]))
    }

    /// Marks Congestion Experienced on an ECN-capable datagram and fixes
    /// the header checksum (RFC 1624 incremental update). Returns false
    /// (and changes nothing) for Not-ECT or an already marked datagram.
    pub(crate) fn mark_ce(d: &mut [u8]) -> bool {
        if d.len() < 20 {
            return false;
        }
        let old = d[TOS];
        if old & 3 == 0 || old & 3 == 3 {
            return false;
        }
        let new = old | 3;
        d[TOS] = new;
        // HC' = ~(~HC + ~m + m') over the 16-bit word holding TOS.
        let hc = u16::from_be_bytes([d[CHECKSUM], d[CHECKSUM + 1]]);
        let m = u16::from_be_bytes([d[0], old]);
        let m2 = u16::from_be_bytes([d[0], new]);
        let mut sum = (!hc) as u32 + (!m) as u32 + m2 as u32;
        while sum > 0xffff {
            sum = (sum & 0xffff) + (sum >> 16);
        }
        d[CHECKSUM..CHECKSUM + 2].copy_from_slice(&(!(sum as u16)).to_be_bytes());
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pool_reuses_slots() {
        let mut p = Pool::default();
        let a = p.alloc(&[1, 2, 3]);
        let b = p.alloc(&[4]);
        p.free(a);
        let c = p.alloc(&[5, 6]);
        assert_eq!(c, a);
        let mut out = [0u8; 8];
        let n = p.get(c).write_to(&mut out);
        assert_eq!(out[..n], [5, 6]);
        let n = p.get(b).write_to(&mut out);
        assert_eq!(out[..n], [4]);
        assert_eq!(p.capacity(), 2);
    }

    /// Datagrams of every shape come back byte for byte, and a data
    /// packet with a zero payload is stored as its headers and ICRC.
    #[test]
    fn stored_datagrams_rebuild_exactly() {
        let mut shapes: Vec<Vec<u8>> = Vec::new();
        for len in [0usize, 1, 3, 4, 5, 39, 40, 44, 60, 61, 100, 1084, 4200] {
            // Headers of 0xa5, zeros, a 4-byte trailer.
            let mut d = vec![0u8; len];
            for (i, b) in d.iter_mut().enumerate().take(len.min(56)) {
                *b = 0xa5 ^ i as u8;
            }
            if len >= 4 {
                d[len - 4..].copy_from_slice(&[1, 2, 3, 4]);
            }
            shapes.push(d.clone());
            // Non-zero bytes scattered through the payload too.
            for i in (0..len).step_by(97) {
                d[i] = 0x5a;
            }
            shapes.push(d);
        }
        // No zeros at all; zeros up to the very end (no trailer).
        shapes.push((0..2000u32).map(|i| (i % 251) as u8 + 1).collect());
        shapes.push([vec![9u8; 40], vec![0u8; 500]].concat());
        let mut pool = Pool::default();
        let mut out = vec![0u8; 8192];
        for d in &shapes {
            let id = pool.alloc(d);
            let p = pool.get(id);
            assert_eq!(p.len(), d.len());
            let n = p.write_to(&mut out);
            assert_eq!(&out[..n], &d[..], "len {}", d.len());
            assert_eq!(p.head(), &d[..p.head().len()]);
            assert!(p.head().len() >= d.len().min(40));
            pool.free(id);
        }
        // A 1024-byte WRITE payload of zeros: 56 header bytes + ICRC kept.
        let mut w = vec![0u8; 56 + 1024 + 4];
        w[..56].fill(0x11);
        w[56 + 1024..].fill(0x22);
        let id = pool.alloc(&w);
        assert_eq!(pool.get(id).stored(), [&w[..56], &w[1080..]].concat());
        assert_eq!(pool.get(id).head(), &w[..56]);
        pool.get_mut(id).head_mut()[1] = 0x77;
        let n = pool.get(id).write_to(&mut out);
        assert_eq!(out[1], 0x77);
        assert_eq!(&out[2..n], &w[2..]);
    }

    #[test]
    fn ce_marking_keeps_the_checksum_valid() {
        let repr = roce_wire::Ipv4Repr {
            src: "10.0.0.1".parse().unwrap(),
            dst: "10.0.0.2".parse().unwrap(),
            dscp: 26,
            ecn: roce_wire::Ecn::Ect0,
            ident: 0,
            dont_frag: true,
            ttl: 64,
            payload_len: 8,
        };
        let mut d = [0u8; 28];
        repr.emit(&mut d).unwrap();
        assert_eq!(ipv4::dscp(&d), 26);
        assert!(ipv4::mark_ce(&mut d));
        assert!(!ipv4::mark_ce(&mut d), "already CE");
        let p = roce_wire::ipv4::Ipv4Packet::new_checked(&d[..]).unwrap();
        assert!(p.verify_checksum());
        assert_eq!(p.ecn(), roce_wire::Ecn::Ce);
        assert_eq!(p.dscp(), 26);
        let mut r2 = repr;
        r2.ecn = roce_wire::Ecn::NotEct;
        r2.emit(&mut d).unwrap();
        assert!(!ipv4::mark_ce(&mut d), "Not-ECT is never marked");
    }
}
