//! Identifiers an off-path attacker cannot guess (issue 18): QPNs, memory
//! keys and PSNs come from the device's seeded CSPRNG, avoid the reserved
//! values, and are not handed out again while an old holder may use them;
//! the same seed gives the same identifiers (the simulator and seeded
//! tests), another seed others.

use std::collections::HashSet;

use roce_core::*;

fn device(seed: Option<[u8; 32]>) -> (Device, PdId, CqId) {
    let mut cfg = DeviceConfig::new("10.0.0.1".parse().unwrap());
    cfg.seed = seed;
    let mut dev = Device::new(cfg);
    let pd = dev.alloc_pd();
    let cq = dev.create_cq(16);
    (dev, pd, cq)
}

fn qp(dev: &mut Device, pd: PdId, cq: CqId) -> Qpn {
    dev.create_qp(QpInitAttr {
        qp_type: QpType::Rc,
        pd,
        send_cq: cq,
        recv_cq: cq,
        srq: None,
        cap: QpCaps::default(),
        sq_sig_all: false,
    })
    .unwrap()
}

fn reg(dev: &mut Device, pd: PdId) -> MrKeys {
    dev.reg_mr(pd, 0x1000, Box::new(vec![0u8; 64]), Access::LOCAL_WRITE)
        .unwrap()
}

#[test]
fn qpns_are_random_valid_and_not_reused_soon() {
    let (mut dev, pd, cq) = device(Some([7; 32]));
    // The last 64 QPs stay alive, so a live QPN handed out again would
    // show; older ones are destroyed.
    let mut live = HashSet::new();
    let mut alive = std::collections::VecDeque::new();
    let mut recent = std::collections::VecDeque::new();
    for _ in 0..6000 {
        let q = qp(&mut dev, pd, cq);
        let v = q.value();
        assert!((16..0xff_ffff).contains(&v), "reserved QPN {v:#x}");
        assert!(live.insert(v), "live QPN {v:#x} handed out twice");
        // A QPN destroyed among the last 4096 does not come back.
        assert!(!recent.contains(&v), "recently destroyed QPN {v:#x} reused");
        alive.push_back(q);
        if alive.len() > 64 {
            let old = alive.pop_front().unwrap();
            dev.destroy_qp(old).unwrap();
            live.remove(&old.value());
            recent.push_back(old.value());
            if recent.len() > 4096 {
                recent.pop_front();
            }
        }
    }
    // Not the counter rxe (and this stack before) used: 17, 18, ...
    let (mut a, pd, cq) = device(Some([1; 32]));
    let first: Vec<u32> = (0..4).map(|_| qp(&mut a, pd, cq).value()).collect();
    assert_ne!(first, vec![17, 18, 19, 20]);
    assert!(first.windows(2).all(|w| w[1] != w[0] + 1));
}

#[test]
fn keys_have_32_unpredictable_bits_and_never_return() {
    let (mut dev, pd, _) = device(Some([9; 32]));
    let mut seen = HashSet::new();
    let mut high = 0u32;
    let mut low = 0u32;
    for _ in 0..5000 {
        let k = reg(&mut dev, pd);
        assert_eq!(k.lkey.value(), k.rkey.value());
        assert!(
            seen.insert(k.rkey.value()),
            "key {:#x} returned",
            k.rkey.value()
        );
        high |= k.rkey.value() >> 24;
        low |= k.rkey.value() & 0xff;
        // The old key finds nothing once the region is gone, even though
        // the next registration reuses its slot.
        let mem = dev.dereg_mr(k).unwrap();
        drop(mem);
        let mut b = [0u8; 1];
        assert_eq!(
            dev.mr_read(k, pd, 0x1000, &mut b),
            Err(VerbsError::Access(AccessError::BadKey))
        );
    }
    // Every bit varies (not `slot << 8 | tag`, whose high byte stays 0).
    assert_eq!((high, low), (0xff, 0xff));
}

#[test]
fn the_seed_decides_every_identifier() {
    let draw = |seed| {
        let (mut dev, pd, cq) = device(seed);
        let q = qp(&mut dev, pd, cq);
        let k = reg(&mut dev, pd);
        let psn = dev.random_psn();
        let sq_psn = dev.qp(q).unwrap().attr().sq_psn;
        (q, k.rkey, psn, sq_psn)
    };
    assert_eq!(draw(Some([3; 32])), draw(Some([3; 32])));
    let (a, b) = (draw(Some([3; 32])), draw(Some([4; 32])));
    assert_ne!(a.0, b.0);
    assert_ne!(a.1, b.1);
    assert_ne!(a.2, b.2);
    // Without a seed: fixed (tests), but not the old constants.
    let d = draw(None);
    assert_eq!(d, draw(None));
    assert_ne!(d.0.value(), 17);
    assert_ne!(d.1.value(), 0x101);
    // Two unseeded devices on other addresses draw differently.
    let mut other = DeviceConfig::new("10.0.0.2".parse().unwrap());
    other.seed = None;
    let mut dev2 = Device::new(other);
    let pd2 = dev2.alloc_pd();
    let cq2 = dev2.create_cq(4);
    assert_ne!(qp(&mut dev2, pd2, cq2), d.0);
}
