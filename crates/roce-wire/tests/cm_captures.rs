//! The CM MADs of the rdma_cm captures (Linux rxe + librdmacm's `rping` and
//! `udaddy`, testdata/captures) parse into the values the tools used, and
//! re-emit byte-identical.

use std::net::{IpAddr, Ipv4Addr};
use std::path::Path;

use roce_capture::{CaptureReader, Payload};
use roce_wire::cm::{self, attr, CmMessage, CmaHeader};
use roce_wire::mad::{self, MadHeader};
use roce_wire::{Frame, Psn, Qpn};

/// (source IP, MAD bytes) of every QP1 packet of a capture.
fn mads(name: &str) -> Vec<(IpAddr, Vec<u8>)> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../testdata/captures")
        .join(name);
    let mut reader = CaptureReader::open(&path).unwrap();
    let mut out = Vec::new();
    while let Some(pkt) = reader.next_packet() {
        let pkt = pkt.unwrap();
        let Payload::Ethernet(frame) = pkt.payload().unwrap() else {
            panic!("Ethernet captures");
        };
        let Ok(Frame::Roce(p)) = Frame::parse_ethernet(frame) else {
            continue;
        };
        if p.bth.dest_qp != mad::GSI_QPN {
            continue;
        }
        let deth = p.ext.deth.expect("QP1 packets are UD");
        assert_eq!(deth.qkey, mad::GSI_QKEY);
        assert_eq!(deth.src_qp, mad::GSI_QPN);
        assert_eq!(p.payload.len(), mad::MAD_LEN);
        out.push((p.ip.src(), p.payload.to_vec()));
    }
    out
}

fn reemit(m: &CmMessage<'_>, h: &MadHeader, original: &[u8]) {
    let mut buf = [0xa5u8; mad::MAD_LEN];
    assert_eq!(m.emit_mad(h.tid, &mut buf).unwrap(), mad::MAD_LEN);
    assert_eq!(&buf[..], original, "{} re-emit differs", m.name());
}

const CLIENT: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 77, 0, 12));
const SERVER: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 77, 0, 11));

#[test]
fn rping_connect_and_disconnect() {
    let all = mads("rdmacm_rping.pcap");
    let names: Vec<_> = all
        .iter()
        .map(|(_, m)| CmMessage::parse_mad(m).unwrap().1.name())
        .collect();
    assert_eq!(names, ["REQ", "REP", "RTU", "DREQ", "DREP"]);
    let tid = 0x0000_0002_893e_450d;
    for (src, m) in &all {
        let (h, msg) = CmMessage::parse_mad(m).unwrap();
        // Linux keeps the REQ's transaction ID for the whole exchange.
        assert_eq!(h.tid, tid);
        assert_eq!((h.method, h.mgmt_class, h.class_version), (3, 7, 2));
        assert_eq!(h.attr_id, msg.attr_id());
        reemit(&msg, &h, m);
        match msg {
            CmMessage::Req(r) => {
                assert_eq!(*src, CLIENT);
                assert_eq!(r.local_comm_id, 0x0d45_3e89);
                // rping's default port 7174 in the TCP port space.
                assert_eq!(r.service_id, 0x0000_0000_0106_1c06);
                assert_eq!(
                    cm::ip_service_port(r.service_id),
                    Some((cm::port_space::TCP, 7174))
                );
                assert_eq!(r.local_ca_guid, 0x5054_00ff_fe77_0012);
                assert_eq!(r.local_qpn, Qpn::new(0x21));
                assert_eq!((r.responder_resources, r.initiator_depth), (1, 1));
                assert_eq!(r.remote_cm_response_timeout, 20);
                assert_eq!(r.local_cm_response_timeout, 20);
                assert_eq!((r.transport, r.end_to_end_flow_control), (0, false));
                assert_eq!(r.starting_psn, Psn::new(0x3913cf));
                assert_eq!((r.retry_count, r.rnr_retry_count), (7, 7));
                assert_eq!((r.pkey, r.path_mtu, r.max_cm_retries), (0xffff, 3, 15));
                assert!(!r.srq && !r.rdc_exists);
                let p = r.primary;
                assert_eq!((p.local_lid, p.remote_lid), (0xffff, 0xffff));
                assert_eq!(p.local_gid, cm::gid_of(CLIENT));
                assert_eq!(cm::ip_of_gid(p.remote_gid), SERVER);
                assert_eq!(p.flow_label, 0xa3c84);
                assert_eq!((p.traffic_class, p.hop_limit, p.sl), (0, 64, 0));
                assert_eq!(p.local_ack_timeout, 19);
                assert_eq!(r.alternate, None);
                let c = CmaHeader::parse(r.private_data).unwrap();
                assert_eq!(
                    c,
                    CmaHeader {
                        src_port: 0xd7c2,
                        src: CLIENT,
                        dst: SERVER
                    }
                );
                let mut again = [0u8; cm::CMA_HEADER_LEN];
                c.emit(&mut again).unwrap();
                assert_eq!(&again[..], &r.private_data[..cm::CMA_HEADER_LEN]);
            }
            CmMessage::Rep(r) => {
                assert_eq!(*src, SERVER);
                assert_eq!(
                    (r.local_comm_id, r.remote_comm_id),
                    (0xc438_770a, 0x0d45_3e89)
                );
                assert_eq!(r.local_qpn, Qpn::new(0x21));
                assert_eq!(r.starting_psn, Psn::new(0x5d9733));
                assert_eq!((r.responder_resources, r.initiator_depth), (1, 1));
                assert_eq!((r.target_ack_delay, r.rnr_retry_count), (15, 7));
                assert_eq!(r.local_ca_guid, 0x5054_00ff_fe77_0011);
                assert!(r.private_data.iter().all(|&b| b == 0));
            }
            CmMessage::Rtu(r) => {
                assert_eq!(
                    (r.local_comm_id, r.remote_comm_id),
                    (0x0d45_3e89, 0xc438_770a)
                );
            }
            CmMessage::Dreq(r) => {
                assert_eq!(*src, CLIENT);
                assert_eq!(
                    (r.local_comm_id, r.remote_comm_id),
                    (0x0d45_3e89, 0xc438_770a)
                );
                assert_eq!(r.remote_qpn, Qpn::new(0x21));
            }
            CmMessage::Drep(r) => {
                assert_eq!(*src, SERVER);
                assert_eq!(
                    (r.local_comm_id, r.remote_comm_id),
                    (0xc438_770a, 0x0d45_3e89)
                );
            }
            other => panic!("unexpected {other:?}"),
        }
    }
}

#[test]
fn udaddy_service_id_resolution() {
    let all = mads("rdmacm_udaddy_sidr.pcap");
    assert_eq!(all.len(), 2);
    let (h, req) = CmMessage::parse_mad(&all[0].1).unwrap();
    reemit(&req, &h, &all[0].1);
    let CmMessage::SidrReq(r) = req else {
        panic!("first MAD is {}", req.name())
    };
    assert_eq!(h.attr_id, attr::SIDR_REQ);
    assert_eq!((r.request_id, r.pkey), (0x0f45_3e89, 0xffff));
    assert_eq!(
        cm::ip_service_port(r.service_id),
        Some((cm::port_space::UDP, 7174))
    );
    let c = CmaHeader::parse(r.private_data).unwrap();
    assert_eq!((c.src, c.dst, c.src_port), (CLIENT, SERVER, 0x8c82));

    let (h2, rep) = CmMessage::parse_mad(&all[1].1).unwrap();
    reemit(&rep, &h2, &all[1].1);
    assert_eq!(h2.tid, h.tid, "the reply carries the request's TID");
    let CmMessage::SidrRep(p) = rep else {
        panic!("second MAD is {}", rep.name())
    };
    assert_eq!((p.request_id, p.status), (0x0f45_3e89, 0));
    assert_eq!(p.qpn, Qpn::new(0x23));
    assert_eq!(p.service_id, r.service_id);
    // udaddy's Q_Key (RDMA_UDP_QKEY).
    assert_eq!(p.qkey, 0x0123_4567);
}

#[test]
fn malformed_mads_are_errors() {
    let all = mads("rdmacm_rping.pcap");
    let mut m = all[0].1.clone();
    assert!(CmMessage::parse_mad(&m[..200]).is_err());
    m[1] = 0x01; // subnet management, not CM
    assert_eq!(
        CmMessage::parse_mad(&m).unwrap_err(),
        roce_wire::Error::NotCmMad {
            class: 1,
            version: 2
        }
    );
    let mut m = all[0].1.clone();
    m[16..18].copy_from_slice(&0x0019u16.to_be_bytes()); // LAP
    assert_eq!(
        CmMessage::parse_mad(&m).unwrap_err(),
        roce_wire::Error::UnknownCmAttribute { attr_id: 0x19 }
    );
    // Private data longer than the message allows is refused on emit.
    let (_, msg) = CmMessage::parse_mad(&all[2].1).unwrap();
    let CmMessage::Rtu(mut r) = msg else { panic!() };
    let long = [1u8; 225];
    r.private_data = &long;
    let mut buf = [0u8; 256];
    assert!(CmMessage::Rtu(r).emit_mad(1, &mut buf).is_err());
}
