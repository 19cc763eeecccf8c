//! Packets in flight: the real IP datagram roce-core emitted plus the
//! simulator's metadata, kept in a pool so that the hot path reuses buffers
//! instead of allocating one per packet.

use crate::time::{frame_len, wire_len};

/// One datagram in the fabric.
#[derive(Debug, Default)]
pub(crate) struct Packet {
    /// The IP datagram (IPv4, as the engine built it; switches may set CE).
    pub(crate) data: Vec<u8>,
    /// 802.1p priority (from the DSCP by the dscp→prio map).
    pub(crate) prio: u8,
    /// Ingress port at the current switch.
    pub(crate) in_port: u16,
    /// Destination host index.
    pub(crate) dst_host: u32,
    /// Source host index.
    pub(crate) src_host: u32,
    /// ECMP hash of (src ip, dst ip, udp src port), unsalted.
    pub(crate) hash: u64,
}

impl Packet {
    /// Bytes in a switch buffer.
    pub(crate) fn frame_len(&self) -> u32 {
        frame_len(self.data.len() as u32)
    }
    /// Bytes of line time.
    pub(crate) fn wire_len(&self) -> u32 {
        wire_len(self.data.len() as u32)
    }
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
        let p = &mut self.pkts[id as usize];
        p.data.clear();
        p.data.extend_from_slice(bytes);
        id
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
        assert_eq!(p.get(c).data, [5, 6]);
        assert_eq!(p.get(b).data, [4]);
        assert_eq!(p.capacity(), 2);
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
