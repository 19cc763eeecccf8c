//! Fuzzes the transport engine's receive path: each input is a sequence of
//! datagrams (2-byte length prefixes) delivered to a device whose RC, UC
//! and UD QPs are in RTS with receives posted. The first 40 bytes of every
//! datagram are rewritten into a valid IPv4/UDP header to this device, and
//! the ICRC check is skipped, and most datagrams are steered to a live QP's
//! (random) QPN, so the fuzzer reaches the transport logic. A datagram
//! whose first byte is odd goes in as a UDP socket's receiver hands it
//! over (`Device::handle_udp`: its UDP payload, and the header's facts
//! with the IPv4 ID unknown, which `IcrcCheck::Off` leaves unchecked);
//! the others whole (`Device::handle_datagram`).
#![no_main]

use libfuzzer_sys::fuzz_target;
use roce_core::*;

fn device() -> (Device, Vec<Qpn>) {
    let mut cfg = DeviceConfig::new("10.0.0.2".parse().unwrap());
    cfg.icrc_check = IcrcCheck::Off;
    let mut dev = Device::new(cfg);
    let pd = dev.alloc_pd();
    let cq = dev.create_cq(256);
    let access =
        Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ | Access::REMOTE_ATOMIC;
    let mr = dev
        .reg_mr(pd, 0x1000, Box::new(vec![0u8; 1 << 16]), access)
        .unwrap();
    let mut qps = Vec::new();
    for (i, t) in [QpType::Rc, QpType::Uc, QpType::Ud].into_iter().enumerate() {
        let init = QpInitAttr {
            qp_type: t,
            pd,
            send_cq: cq,
            recv_cq: cq,
            srq: None,
            cap: QpCaps::default(),
            sq_sig_all: false,
        };
        let qpn = dev.create_qp(init).unwrap();
        let mut a = QpAttr {
            qp_state: QpState::Init,
            qp_access_flags: access,
            qkey: Qkey::new(0x1111_1111),
            ..QpAttr::default()
        };
        let req = |from, to| QpAttrMask::required(t, from, to);
        dev.modify_qp(qpn, &a, req(QpState::Reset, QpState::Init))
            .unwrap();
        a.qp_state = QpState::Rtr;
        a.ah_attr = AddressVector {
            dest: "10.0.0.1".parse().unwrap(),
            ..AddressVector::default()
        };
        dev.modify_qp(qpn, &a, req(QpState::Init, QpState::Rtr))
            .unwrap();
        a.qp_state = QpState::Rts;
        dev.modify_qp(qpn, &a, req(QpState::Rtr, QpState::Rts))
            .unwrap();
        for k in 0..4u64 {
            let sge = Sge {
                addr: 0x1000 + 4096 * (i as u64 * 4 + k),
                length: 4096,
                lkey: mr.lkey,
            };
            let _ = dev.post_recv(
                qpn,
                RecvWr {
                    wr_id: k,
                    sgl: [sge].into_iter().collect(),
                },
            );
        }
        qps.push(qpn);
    }
    (dev, qps)
}

fuzz_target!(|data: &[u8]| {
    let (mut dev, qps) = device();
    let mut rest = data;
    let mut now = 0u64;
    let mut buf = vec![0u8; 4400];
    while rest.len() >= 2 {
        let n = (u16::from_be_bytes([rest[0], rest[1]]) as usize).min(rest.len() - 2);
        let mut d = rest[2..2 + n].to_vec();
        rest = &rest[2 + n..];
        let via_udp = d.first().is_some_and(|b| b & 1 == 1);
        let tos = d.get(1).copied().unwrap_or(0);
        let sport = d.get(20..22).map_or(0, |p| u16::from_be_bytes([p[0], p[1]]));
        if d.len() >= 28 {
            // A valid IPv4 + UDP header from the peer to this device.
            let total = d.len() as u16;
            d[..20].copy_from_slice(&[
                0x45, 0, 0, 0, 0, 0, 0x40, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2,
            ]);
            d[2..4].copy_from_slice(&total.to_be_bytes());
            let mut sum: u32 = d[..20]
                .chunks(2)
                .map(|c| u16::from_be_bytes([c[0], c[1]]) as u32)
                .sum();
            while sum > 0xffff {
                sum = (sum & 0xffff) + (sum >> 16);
            }
            d[10..12].copy_from_slice(&(!(sum as u16)).to_be_bytes());
            d[22..24].copy_from_slice(&4791u16.to_be_bytes());
            d[24..26].copy_from_slice(&(total - 20).to_be_bytes());
            d[26..28].fill(0);
        }
        if d.len() >= 40 {
            // QPNs are random: steer three of every four datagrams to one
            // of the live QPs (by the low bits of the fuzzed QPN), so the
            // transport logic is reached; the rest keep a random QPN.
            let k = (d[35] & 3) as usize;
            if let Some(q) = qps.get(k) {
                d[33..36].copy_from_slice(&q.value().to_be_bytes()[1..]);
            }
        }
        if via_udp && d.len() >= 28 {
            let src = std::net::SocketAddr::new("10.0.0.1".parse().unwrap(), sport);
            let h = RxHeader::new(src, "10.0.0.2".parse().unwrap(), tos);
            dev.handle_udp(now, h, &d[28..], RxMeta::default());
        } else {
            dev.handle_datagram(now, &d, RxMeta::inexact());
        }
        now += 1000;
        if dev.poll_timeout().is_some_and(|t| t <= now) {
            dev.handle_timeout(now);
        }
        while dev.poll_transmit(now, &mut buf) != Tx::Idle {}
    }
});
