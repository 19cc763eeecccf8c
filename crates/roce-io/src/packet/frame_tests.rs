//! The packet backend's receive path on hand-made frames: only the
//! device's VLAN gets through, and no frame makes it panic.

use super::*;
use crate::testutil;
use roce_wire::Ecn;

/// A backend that is never bound: `handle_frame` alone is exercised.
fn fake(vlan: Option<u16>) -> PacketBackend {
    PacketBackend {
        cfg: PacketConfig::new("x").vlan(vlan),
        ifindex: 1,
        mac: MacAddr([2, 0, 0, 0, 0, 1]),
        local: vec![],
        sock: Socket::new(Domain::IPV4, Type::DGRAM, None).unwrap(),
        neigh: HashMap::new(),
        headers: vec![],
        rx_arena: vec![].into_boxed_slice(),
        rx_info: vec![],
        mmsg: sys::MmsgScratch::new(),
        ring: None,
        mac_ctl: VecDeque::new(),
        stats: PacketStats::default(),
    }
}

fn info() -> RxInfo {
    RxInfo {
        len: 0,
        peer: None,
        pkttype: Some(0),
        vlan_tci: None,
        tos: None,
        gro_size: None,
        truncated: false,
    }
}

/// A RoCE frame tagged with `vid` (PCP 3).
fn tagged(vid: u16) -> Vec<u8> {
    let v4 = testutil::v4_frame("10.0.0.1", "10.0.0.2", 1, 16, Ecn::Ect0);
    let tci = (3u16 << 13) | vid;
    let mut f = vec![2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2, 0x81, 0x00];
    f.extend_from_slice(&tci.to_be_bytes());
    f.extend_from_slice(&[0x08, 0x00]);
    f.extend_from_slice(&v4);
    f
}

/// The same frame with its tag moved into the metadata, as the kernel does
/// when the NIC strips it.
fn stripped(vid: u16) -> (Vec<u8>, RxInfo) {
    let f = tagged(vid);
    let mut untagged = f[..12].to_vec();
    untagged.extend_from_slice(&f[16..]);
    let mut i = info();
    i.vlan_tci = Some((3 << 13) | vid);
    (untagged, i)
}

#[test]
fn only_the_devices_vlan_gets_through() {
    let mut b = fake(Some(100));
    let mut batch = PacketBatch::new(8, 9000);
    for vid in [200, 300] {
        b.handle_frame(&tagged(vid), &info(), &mut batch);
        let (f, i) = stripped(vid);
        b.handle_frame(&f, &i, &mut batch);
    }
    assert_eq!(batch.len(), 0, "frames of VLANs 200 and 300");
    assert_eq!(b.stats.rx_other_vlan, 4);
    b.handle_frame(&tagged(100), &info(), &mut batch);
    let (f, i) = stripped(100);
    b.handle_frame(&f, &i, &mut batch);
    assert_eq!(batch.len(), 2);
    // Without a VLAN: untagged and priority-tagged (VID 0) frames only.
    let mut b = fake(None);
    let mut batch = PacketBatch::new(8, 9000);
    b.handle_frame(&tagged(100), &info(), &mut batch);
    assert_eq!(batch.len(), 0);
    b.handle_frame(&tagged(0), &info(), &mut batch);
    let v4 = testutil::v4_frame("10.0.0.1", "10.0.0.2", 1, 16, Ecn::Ect0);
    let mut plain = vec![2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2, 0x08, 0x00];
    plain.extend_from_slice(&v4);
    b.handle_frame(&plain, &info(), &mut batch);
    assert_eq!(batch.len(), 2);
}

#[test]
fn hostile_frames_do_not_panic() {
    let v4 = testutil::v4_frame("10.0.0.1", "10.0.0.2", 1, 16, Ecn::Ect0);
    let v6 = testutil::v6_frame("fd00::1", "fd00::2", 1, 16);
    let mut b = fake(Some(5));
    let mut batch = PacketBatch::new(1, 9000);
    let mut x: u64 = 0x1234_5678;
    let mut rnd = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let mut delivered = 0;
    for round in 0..200_000 {
        let base: &[u8] = if round % 2 == 0 { &v4 } else { &v6 };
        let mut f = vec![2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2];
        if round % 3 == 0 {
            f.extend_from_slice(&[0x81, 0, 0, 5]);
        }
        f.extend_from_slice(if base[0] >> 4 == 4 {
            &[8, 0]
        } else {
            &[0x86, 0xdd]
        });
        f.extend_from_slice(base);
        let cut = (rnd() as usize) % (f.len() + 1);
        f.truncate(cut);
        for _ in 0..(rnd() % 4) {
            if f.is_empty() {
                break;
            }
            let k = (rnd() as usize) % f.len();
            f[k] = rnd() as u8;
        }
        batch.clear();
        b.handle_frame(&f, &info(), &mut batch);
        delivered += batch.len();
    }
    // Whole, tagged, unmodified frames do get through now and then.
    assert!(delivered > 0);
}
