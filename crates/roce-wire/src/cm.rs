//! Communication Manager messages (IBTA Vol 1 §12.6) carried in CM MADs
//! (class 0x07, version 2), and the IP header that rdma_cm puts at the
//! start of the private data (the "IP addressing annex", IBTA Annex A11).
//!
//! Byte offsets below are from the end of the 24-byte MAD header; every
//! message fills the 232 bytes after it, private data last and zero padded.
//! The layouts were checked field by field against Linux's CM in the
//! `rdmacm_rping` and `rdmacm_udaddy_sidr` captures (see the tests).

use core::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::error::{Error, Layer, Result};
use crate::field::{set_u16, set_u24, set_u32, set_u64, u16_at, u24_at, u32_at, u64_at};
use crate::mad::{self, MadHeader, DATA_LEN, HEADER_LEN, MAD_LEN};
use crate::types::{Psn, Qpn};

/// CM attribute IDs (§12.6: the `AttributeID` of each message).
pub mod attr {
    /// ConnectRequest.
    pub const REQ: u16 = 0x0010;
    /// MessageReceiptAcknowledgement.
    pub const MRA: u16 = 0x0011;
    /// ConnectReject.
    pub const REJ: u16 = 0x0012;
    /// ConnectReply.
    pub const REP: u16 = 0x0013;
    /// ReadyToUse.
    pub const RTU: u16 = 0x0014;
    /// DisconnectRequest.
    pub const DREQ: u16 = 0x0015;
    /// DisconnectReply.
    pub const DREP: u16 = 0x0016;
    /// ServiceIDResolutionRequest (UD).
    pub const SIDR_REQ: u16 = 0x0017;
    /// ServiceIDResolutionResponse (UD).
    pub const SIDR_REP: u16 = 0x0018;
}

/// REJ reason codes (§12.6.7.2) this stack sends or reacts to.
pub mod rej_reason {
    /// No QP available.
    pub const NO_QP: u16 = 1;
    /// Insufficient resources.
    pub const NO_RESOURCES: u16 = 3;
    /// The passive side never answered (sent by the active side).
    pub const TIMEOUT: u16 = 4;
    /// Invalid communication ID.
    pub const INVALID_COMM_ID: u16 = 6;
    /// No listener for the service ID: what rdma_cm reports as
    /// "connection refused".
    pub const INVALID_SERVICE_ID: u16 = 8;
    /// Transport service type not supported.
    pub const INVALID_TRANSPORT_TYPE: u16 = 9;
    /// Stale connection.
    pub const STALE_CONN: u16 = 10;
    /// Path MTU not supported.
    pub const INVALID_MTU: u16 = 26;
    /// The consumer rejected the request (`rdma_reject`).
    pub const CONSUMER_DEFINED: u16 = 28;
}

/// Which message a REJ or MRA refers to (§12.6.7, §12.6.6).
pub mod msg_ref {
    /// The REQ.
    pub const REQ: u8 = 0;
    /// The REP.
    pub const REP: u8 = 1;
    /// Anything else (LAP).
    pub const OTHER: u8 = 2;
}

/// rdma_cm port spaces (the high bits of an IP service ID).
pub mod port_space {
    /// `RDMA_PS_TCP`: connected (RC) service.
    pub const TCP: u16 = 0x0106;
    /// `RDMA_PS_UDP`: UD service (SIDR).
    pub const UDP: u16 = 0x0111;
    /// `RDMA_PS_IB`.
    pub const IB: u16 = 0x013f;
}

/// The service ID rdma_cm uses for `port` in `space` (Annex A11).
pub const fn ip_service_id(space: u16, port: u16) -> u64 {
    ((space as u64) << 16) | port as u64
}

/// The (port space, port) of an IP service ID, if it is one.
pub const fn ip_service_port(service_id: u64) -> Option<(u16, u16)> {
    if service_id >> 32 != 0 || (service_id >> 24) & 0xff != 0x01 {
        return None;
    }
    Some(((service_id >> 16) as u16, service_id as u16))
}

/// Largest private data of each message (§12.6, one per message format).
pub mod private_len {
    /// REQ.
    pub const REQ: usize = 92;
    /// REP.
    pub const REP: usize = 196;
    /// RTU.
    pub const RTU: usize = 224;
    /// REJ.
    pub const REJ: usize = 148;
    /// MRA.
    pub const MRA: usize = 222;
    /// DREQ.
    pub const DREQ: usize = 220;
    /// DREP.
    pub const DREP: usize = 224;
    /// SIDR_REQ.
    pub const SIDR_REQ: usize = 216;
    /// SIDR_REP.
    pub const SIDR_REP: usize = 136;
}

/// One path of a REQ (§12.6.5, "primary/alternate path information").
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PathRepr {
    /// Local port LID (0xFFFF, "permissive", on RoCE).
    pub local_lid: u16,
    /// Remote port LID.
    pub remote_lid: u16,
    /// Local port GID (IPv4-mapped or IPv6 address on RoCE v2).
    pub local_gid: [u8; 16],
    /// Remote port GID.
    pub remote_gid: [u8; 16],
    /// Flow label (20 bits).
    pub flow_label: u32,
    /// Packet rate code (6 bits).
    pub packet_rate: u8,
    /// Traffic class.
    pub traffic_class: u8,
    /// Hop limit.
    pub hop_limit: u8,
    /// Service level (4 bits).
    pub sl: u8,
    /// Subnet local.
    pub subnet_local: bool,
    /// Local ACK timeout exponent (5 bits).
    pub local_ack_timeout: u8,
}

impl PathRepr {
    /// The 44 bytes at `b[0..44]`.
    fn parse(b: &[u8]) -> PathRepr {
        let mut local_gid = [0u8; 16];
        let mut remote_gid = [0u8; 16];
        local_gid.copy_from_slice(&b[4..20]);
        remote_gid.copy_from_slice(&b[20..36]);
        PathRepr {
            local_lid: u16_at(b, 0),
            remote_lid: u16_at(b, 2),
            local_gid,
            remote_gid,
            flow_label: u32_at(b, 36) >> 12,
            packet_rate: b[39] & 0x3f,
            traffic_class: b[40],
            hop_limit: b[41],
            sl: b[42] >> 4,
            subnet_local: b[42] & 0x08 != 0,
            local_ack_timeout: b[43] >> 3,
        }
    }

    fn emit(&self, b: &mut [u8]) {
        set_u16(b, 0, self.local_lid);
        set_u16(b, 2, self.remote_lid);
        b[4..20].copy_from_slice(&self.local_gid);
        b[20..36].copy_from_slice(&self.remote_gid);
        set_u32(
            b,
            36,
            (self.flow_label & 0xf_ffff) << 12 | (self.packet_rate & 0x3f) as u32,
        );
        b[40] = self.traffic_class;
        b[41] = self.hop_limit;
        b[42] = (self.sl & 0xf) << 4 | (self.subnet_local as u8) << 3;
        b[43] = (self.local_ack_timeout & 0x1f) << 3;
    }

    /// True when every field is zero (an absent alternate path).
    fn is_empty(&self) -> bool {
        *self == PathRepr::default()
    }
}

/// ConnectRequest (§12.6.5).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReqRepr<'a> {
    /// The sender's communication ID for this connection.
    pub local_comm_id: u32,
    /// The service the active side wants.
    pub service_id: u64,
    /// The sender's CA GUID.
    pub local_ca_guid: u64,
    /// Q_Key (RD only; 0 for RC/UC).
    pub local_qkey: u32,
    /// The active side's QP.
    pub local_qpn: Qpn,
    /// READ/atomic requests the active side accepts (its max_dest_rd_atomic).
    pub responder_resources: u8,
    /// READ/atomic requests the active side issues (its max_rd_atomic).
    pub initiator_depth: u8,
    /// How long the passive side may take to answer (4.096 µs × 2^n).
    pub remote_cm_response_timeout: u8,
    /// Transport service type: 0 RC, 1 UC, 3 XRC.
    pub transport: u8,
    /// End-to-end flow control.
    pub end_to_end_flow_control: bool,
    /// The active side's first PSN (the passive side's expected PSN).
    pub starting_psn: Psn,
    /// How long the active side may take to answer (4.096 µs × 2^n).
    pub local_cm_response_timeout: u8,
    /// Transport retry count.
    pub retry_count: u8,
    /// P_Key.
    pub pkey: u16,
    /// Path MTU code (1 = 256 ... 5 = 4096).
    pub path_mtu: u8,
    /// RDC exists.
    pub rdc_exists: bool,
    /// RNR retry count.
    pub rnr_retry_count: u8,
    /// Times the CM resends this REQ before giving up.
    pub max_cm_retries: u8,
    /// The active QP uses an SRQ.
    pub srq: bool,
    /// Extended transport type.
    pub extended_transport: u8,
    /// The primary path.
    pub primary: PathRepr,
    /// The alternate path (absent: all zero on the wire).
    pub alternate: Option<PathRepr>,
    /// Private data (up to [`private_len::REQ`] bytes).
    pub private_data: &'a [u8],
}

/// ConnectReply (§12.6.8).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RepRepr<'a> {
    /// The sender's (passive side's) communication ID.
    pub local_comm_id: u32,
    /// The REQ's communication ID.
    pub remote_comm_id: u32,
    /// Q_Key (RD only).
    pub local_qkey: u32,
    /// The passive side's QP.
    pub local_qpn: Qpn,
    /// The passive side's first PSN.
    pub starting_psn: Psn,
    /// READ/atomic requests the passive side accepts.
    pub responder_resources: u8,
    /// READ/atomic requests the passive side issues.
    pub initiator_depth: u8,
    /// Target ACK delay (5 bits).
    pub target_ack_delay: u8,
    /// Failover accepted (2 bits).
    pub failover_accepted: u8,
    /// End-to-end flow control.
    pub end_to_end_flow_control: bool,
    /// RNR retry count the active side should use.
    pub rnr_retry_count: u8,
    /// The passive QP uses an SRQ.
    pub srq: bool,
    /// The sender's CA GUID.
    pub local_ca_guid: u64,
    /// Private data (up to [`private_len::REP`] bytes).
    pub private_data: &'a [u8],
}

/// ConnectReject (§12.6.7).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RejRepr<'a> {
    /// The sender's communication ID (0 if it never assigned one).
    pub local_comm_id: u32,
    /// The rejected side's communication ID.
    pub remote_comm_id: u32,
    /// Which message is rejected ([`msg_ref`]).
    pub message_rejected: u8,
    /// Why ([`rej_reason`]).
    pub reason: u16,
    /// Additional rejection information (up to 72 bytes).
    pub ari: &'a [u8],
    /// Private data (up to [`private_len::REJ`] bytes).
    pub private_data: &'a [u8],
}

/// MessageReceiptAcknowledgement (§12.6.6): "wait, I am working on it".
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MraRepr<'a> {
    /// The sender's communication ID.
    pub local_comm_id: u32,
    /// The other side's communication ID.
    pub remote_comm_id: u32,
    /// Which message is acknowledged ([`msg_ref`]).
    pub message_mraed: u8,
    /// How long the sender needs (4.096 µs × 2^n).
    pub service_timeout: u8,
    /// Private data.
    pub private_data: &'a [u8],
}

/// ReadyToUse, DisconnectReply: the two communication IDs and private data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IdsRepr<'a> {
    /// The sender's communication ID.
    pub local_comm_id: u32,
    /// The other side's communication ID.
    pub remote_comm_id: u32,
    /// Private data.
    pub private_data: &'a [u8],
}

/// DisconnectRequest (§12.6.10).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DreqRepr<'a> {
    /// The sender's communication ID.
    pub local_comm_id: u32,
    /// The other side's communication ID.
    pub remote_comm_id: u32,
    /// The receiver's QP being disconnected.
    pub remote_qpn: Qpn,
    /// Private data.
    pub private_data: &'a [u8],
}

/// ServiceIDResolutionRequest (§12.11.1): where is the UD QP of a service?
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SidrReqRepr<'a> {
    /// Request ID (echoed in the reply).
    pub request_id: u32,
    /// P_Key.
    pub pkey: u16,
    /// The service.
    pub service_id: u64,
    /// Private data.
    pub private_data: &'a [u8],
}

/// ServiceIDResolutionResponse (§12.11.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SidrRepRepr<'a> {
    /// The request's ID.
    pub request_id: u32,
    /// 0 = the QP is valid; 1 = no such service, 2 = rejected, ...
    pub status: u8,
    /// The service's UD QP.
    pub qpn: Qpn,
    /// The service.
    pub service_id: u64,
    /// The service QP's Q_Key.
    pub qkey: u32,
    /// Private data.
    pub private_data: &'a [u8],
}

/// A CM message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CmMessage<'a> {
    /// REQ.
    Req(ReqRepr<'a>),
    /// MRA.
    Mra(MraRepr<'a>),
    /// REJ.
    Rej(RejRepr<'a>),
    /// REP.
    Rep(RepRepr<'a>),
    /// RTU.
    Rtu(IdsRepr<'a>),
    /// DREQ.
    Dreq(DreqRepr<'a>),
    /// DREP.
    Drep(IdsRepr<'a>),
    /// SIDR_REQ.
    SidrReq(SidrReqRepr<'a>),
    /// SIDR_REP.
    SidrRep(SidrRepRepr<'a>),
}

impl<'a> CmMessage<'a> {
    /// The attribute ID the message travels under.
    pub const fn attr_id(&self) -> u16 {
        match self {
            CmMessage::Req(_) => attr::REQ,
            CmMessage::Mra(_) => attr::MRA,
            CmMessage::Rej(_) => attr::REJ,
            CmMessage::Rep(_) => attr::REP,
            CmMessage::Rtu(_) => attr::RTU,
            CmMessage::Dreq(_) => attr::DREQ,
            CmMessage::Drep(_) => attr::DREP,
            CmMessage::SidrReq(_) => attr::SIDR_REQ,
            CmMessage::SidrRep(_) => attr::SIDR_REP,
        }
    }

    /// Short name, as rdma-core and Wireshark spell them.
    pub const fn name(&self) -> &'static str {
        attr_name(self.attr_id())
    }

    /// Parses a whole MAD (256 bytes): its header must name the CM class,
    /// version 2, and one of the attributes above.
    pub fn parse_mad(mad: &'a [u8]) -> Result<(MadHeader, CmMessage<'a>)> {
        let h = MadHeader::parse(mad)?;
        if h.mgmt_class != mad::CLASS_CM || h.class_version != mad::CM_CLASS_VERSION {
            return Err(Error::NotCmMad {
                class: h.mgmt_class,
                version: h.class_version,
            });
        }
        let d = &mad[HEADER_LEN..MAD_LEN];
        Ok((h, CmMessage::parse(h.attr_id, d)?))
    }

    /// Parses the 232 data bytes of a message with attribute `attr_id`.
    pub fn parse(attr_id: u16, d: &'a [u8]) -> Result<CmMessage<'a>> {
        if d.len() < DATA_LEN {
            return Err(Error::Truncated { layer: Layer::Mad });
        }
        let ids = (u32_at(d, 0), u32_at(d, 4));
        Ok(match attr_id {
            attr::REQ => CmMessage::Req(parse_req(d)),
            attr::REP => CmMessage::Rep(RepRepr {
                local_comm_id: ids.0,
                remote_comm_id: ids.1,
                local_qkey: u32_at(d, 8),
                local_qpn: Qpn::new(u24_at(d, 12)),
                starting_psn: Psn::new(u24_at(d, 20)),
                responder_resources: d[24],
                initiator_depth: d[25],
                target_ack_delay: d[26] >> 3,
                failover_accepted: (d[26] >> 1) & 3,
                end_to_end_flow_control: d[26] & 1 != 0,
                rnr_retry_count: d[27] >> 5,
                srq: d[27] & 0x10 != 0,
                local_ca_guid: u64_at(d, 28),
                private_data: &d[36..36 + private_len::REP],
            }),
            attr::RTU => CmMessage::Rtu(IdsRepr {
                local_comm_id: ids.0,
                remote_comm_id: ids.1,
                private_data: &d[8..8 + private_len::RTU],
            }),
            attr::REJ => {
                let ari_len = ((d[9] >> 1) as usize).min(72);
                CmMessage::Rej(RejRepr {
                    local_comm_id: ids.0,
                    remote_comm_id: ids.1,
                    message_rejected: d[8] >> 6,
                    reason: u16_at(d, 10),
                    ari: &d[12..12 + ari_len],
                    private_data: &d[84..84 + private_len::REJ],
                })
            }
            attr::MRA => CmMessage::Mra(MraRepr {
                local_comm_id: ids.0,
                remote_comm_id: ids.1,
                message_mraed: d[8] >> 6,
                service_timeout: d[9] >> 3,
                private_data: &d[10..10 + private_len::MRA],
            }),
            attr::DREQ => CmMessage::Dreq(DreqRepr {
                local_comm_id: ids.0,
                remote_comm_id: ids.1,
                remote_qpn: Qpn::new(u24_at(d, 8)),
                private_data: &d[12..12 + private_len::DREQ],
            }),
            attr::DREP => CmMessage::Drep(IdsRepr {
                local_comm_id: ids.0,
                remote_comm_id: ids.1,
                private_data: &d[8..8 + private_len::DREP],
            }),
            attr::SIDR_REQ => CmMessage::SidrReq(SidrReqRepr {
                request_id: ids.0,
                pkey: u16_at(d, 4),
                service_id: u64_at(d, 8),
                private_data: &d[16..16 + private_len::SIDR_REQ],
            }),
            attr::SIDR_REP => CmMessage::SidrRep(SidrRepRepr {
                request_id: ids.0,
                status: d[4],
                qpn: Qpn::new(u24_at(d, 8)),
                service_id: u64_at(d, 12),
                qkey: u32_at(d, 20),
                private_data: &d[96..96 + private_len::SIDR_REP],
            }),
            attr_id => return Err(Error::UnknownCmAttribute { attr_id }),
        })
    }

    /// Writes the whole MAD (a CM `Send()` with transaction ID `tid`) into
    /// `buf[..256]`; returns 256.
    pub fn emit_mad(&self, tid: u64, buf: &mut [u8]) -> Result<usize> {
        if buf.len() < MAD_LEN {
            return Err(Error::BufferTooSmall { needed: MAD_LEN });
        }
        MadHeader::cm_send(tid, self.attr_id()).emit(buf)?;
        self.emit(&mut buf[HEADER_LEN..MAD_LEN])?;
        Ok(MAD_LEN)
    }

    /// Writes the 232 data bytes (zeroing what the message leaves unused).
    pub fn emit(&self, d: &mut [u8]) -> Result<()> {
        if d.len() < DATA_LEN {
            return Err(Error::BufferTooSmall { needed: DATA_LEN });
        }
        let d = &mut d[..DATA_LEN];
        d.fill(0);
        let ids = |d: &mut [u8], l: u32, r: u32| {
            set_u32(d, 0, l);
            set_u32(d, 4, r);
        };
        match self {
            CmMessage::Req(r) => emit_req(r, d)?,
            CmMessage::Rep(r) => {
                ids(d, r.local_comm_id, r.remote_comm_id);
                set_u32(d, 8, r.local_qkey);
                set_u24(d, 12, r.local_qpn.value());
                set_u24(d, 20, r.starting_psn.value());
                d[24] = r.responder_resources;
                d[25] = r.initiator_depth;
                d[26] = (r.target_ack_delay & 0x1f) << 3
                    | (r.failover_accepted & 3) << 1
                    | r.end_to_end_flow_control as u8;
                d[27] = (r.rnr_retry_count & 7) << 5 | (r.srq as u8) << 4;
                set_u64(d, 28, r.local_ca_guid);
                put(d, 36, private_len::REP, r.private_data)?;
            }
            CmMessage::Rtu(r) | CmMessage::Drep(r) => {
                ids(d, r.local_comm_id, r.remote_comm_id);
                put(d, 8, private_len::RTU, r.private_data)?;
            }
            CmMessage::Rej(r) => {
                ids(d, r.local_comm_id, r.remote_comm_id);
                if r.ari.len() > 72 {
                    return Err(Error::InvalidField("REJ ARI longer than 72 bytes"));
                }
                d[8] = (r.message_rejected & 3) << 6;
                d[9] = (r.ari.len() as u8) << 1;
                set_u16(d, 10, r.reason);
                d[12..12 + r.ari.len()].copy_from_slice(r.ari);
                put(d, 84, private_len::REJ, r.private_data)?;
            }
            CmMessage::Mra(r) => {
                ids(d, r.local_comm_id, r.remote_comm_id);
                d[8] = (r.message_mraed & 3) << 6;
                d[9] = (r.service_timeout & 0x1f) << 3;
                put(d, 10, private_len::MRA, r.private_data)?;
            }
            CmMessage::Dreq(r) => {
                ids(d, r.local_comm_id, r.remote_comm_id);
                set_u24(d, 8, r.remote_qpn.value());
                put(d, 12, private_len::DREQ, r.private_data)?;
            }
            CmMessage::SidrReq(r) => {
                set_u32(d, 0, r.request_id);
                set_u16(d, 4, r.pkey);
                set_u64(d, 8, r.service_id);
                put(d, 16, private_len::SIDR_REQ, r.private_data)?;
            }
            CmMessage::SidrRep(r) => {
                set_u32(d, 0, r.request_id);
                d[4] = r.status;
                set_u24(d, 8, r.qpn.value());
                set_u64(d, 12, r.service_id);
                set_u32(d, 20, r.qkey);
                put(d, 96, private_len::SIDR_REP, r.private_data)?;
            }
        }
        Ok(())
    }
}

/// Short message name for an attribute ID ("REQ", "REP", ...; "CM?" for
/// others).
pub const fn attr_name(attr_id: u16) -> &'static str {
    match attr_id {
        attr::REQ => "REQ",
        attr::MRA => "MRA",
        attr::REJ => "REJ",
        attr::REP => "REP",
        attr::RTU => "RTU",
        attr::DREQ => "DREQ",
        attr::DREP => "DREP",
        attr::SIDR_REQ => "SIDR_REQ",
        attr::SIDR_REP => "SIDR_REP",
        _ => "CM?",
    }
}

fn put(d: &mut [u8], at: usize, max: usize, data: &[u8]) -> Result<()> {
    if data.len() > max {
        return Err(Error::InvalidField("CM private data too long"));
    }
    d[at..at + data.len()].copy_from_slice(data);
    Ok(())
}

fn parse_req(d: &[u8]) -> ReqRepr<'_> {
    let alternate = PathRepr::parse(&d[96..140]);
    ReqRepr {
        local_comm_id: u32_at(d, 0),
        service_id: u64_at(d, 8),
        local_ca_guid: u64_at(d, 16),
        local_qkey: u32_at(d, 28),
        local_qpn: Qpn::new(u24_at(d, 32)),
        responder_resources: d[35],
        initiator_depth: d[39],
        remote_cm_response_timeout: d[43] >> 3,
        transport: (d[43] >> 1) & 3,
        end_to_end_flow_control: d[43] & 1 != 0,
        starting_psn: Psn::new(u24_at(d, 44)),
        local_cm_response_timeout: d[47] >> 3,
        retry_count: d[47] & 7,
        pkey: u16_at(d, 48),
        path_mtu: d[50] >> 4,
        rdc_exists: d[50] & 0x08 != 0,
        rnr_retry_count: d[50] & 7,
        max_cm_retries: d[51] >> 4,
        srq: d[51] & 0x08 != 0,
        extended_transport: d[51] & 7,
        primary: PathRepr::parse(&d[52..96]),
        alternate: (!alternate.is_empty()).then_some(alternate),
        private_data: &d[140..140 + private_len::REQ],
    }
}

fn emit_req(r: &ReqRepr<'_>, d: &mut [u8]) -> Result<()> {
    set_u32(d, 0, r.local_comm_id);
    set_u64(d, 8, r.service_id);
    set_u64(d, 16, r.local_ca_guid);
    set_u32(d, 28, r.local_qkey);
    set_u24(d, 32, r.local_qpn.value());
    d[35] = r.responder_resources;
    d[39] = r.initiator_depth;
    d[43] = (r.remote_cm_response_timeout & 0x1f) << 3
        | (r.transport & 3) << 1
        | r.end_to_end_flow_control as u8;
    set_u24(d, 44, r.starting_psn.value());
    d[47] = (r.local_cm_response_timeout & 0x1f) << 3 | (r.retry_count & 7);
    set_u16(d, 48, r.pkey);
    d[50] = (r.path_mtu & 0xf) << 4 | (r.rdc_exists as u8) << 3 | (r.rnr_retry_count & 7);
    d[51] = (r.max_cm_retries & 0xf) << 4 | (r.srq as u8) << 3 | (r.extended_transport & 7);
    r.primary.emit(&mut d[52..96]);
    if let Some(a) = &r.alternate {
        a.emit(&mut d[96..140]);
    }
    put(d, 140, private_len::REQ, r.private_data)
}

/// Length of the rdma_cm IP header at the start of REQ / SIDR_REQ private
/// data.
pub const CMA_HEADER_LEN: usize = 36;

/// The header rdma_cm prepends to the consumer's private data in REQ and
/// SIDR_REQ (Annex A11 "IP CM private data"): version 0, IP version in the
/// high nibble, the active side's source port, both addresses (IPv4 in the
/// last four bytes of each 16-byte field).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CmaHeader {
    /// The active side's (source) port.
    pub src_port: u16,
    /// The active side's address.
    pub src: IpAddr,
    /// The address the active side connected to.
    pub dst: IpAddr,
}

impl CmaHeader {
    /// Parses the first 36 bytes of private data.
    pub fn parse(b: &[u8]) -> Result<CmaHeader> {
        if b.len() < CMA_HEADER_LEN {
            return Err(Error::Truncated { layer: Layer::Mad });
        }
        if b[0] != 0 {
            return Err(Error::InvalidField("rdma_cm header version"));
        }
        let addr = |at: usize| -> Result<IpAddr> {
            let mut a = [0u8; 16];
            a.copy_from_slice(&b[at..at + 16]);
            match b[1] >> 4 {
                4 => Ok(IpAddr::V4(Ipv4Addr::new(a[12], a[13], a[14], a[15]))),
                6 => Ok(IpAddr::V6(Ipv6Addr::from(a))),
                _ => Err(Error::InvalidField("rdma_cm header IP version")),
            }
        };
        Ok(CmaHeader {
            src_port: u16_at(b, 2),
            src: addr(4)?,
            dst: addr(20)?,
        })
    }

    /// Writes the header into `b[..36]`.
    pub fn emit(&self, b: &mut [u8]) -> Result<()> {
        if b.len() < CMA_HEADER_LEN {
            return Err(Error::BufferTooSmall {
                needed: CMA_HEADER_LEN,
            });
        }
        b[..CMA_HEADER_LEN].fill(0);
        let ver = match (self.src, self.dst) {
            (IpAddr::V4(_), IpAddr::V4(_)) => 4,
            (IpAddr::V6(_), IpAddr::V6(_)) => 6,
            _ => return Err(Error::InvalidField("rdma_cm header mixes IPv4 and IPv6")),
        };
        b[1] = ver << 4;
        set_u16(b, 2, self.src_port);
        for (at, a) in [(4, self.src), (20, self.dst)] {
            match a {
                IpAddr::V4(v4) => b[at + 12..at + 16].copy_from_slice(&v4.octets()),
                IpAddr::V6(v6) => b[at..at + 16].copy_from_slice(&v6.octets()),
            }
        }
        Ok(())
    }
}

/// The RoCE v2 GID of an IP address (IPv4-mapped for IPv4).
pub fn gid_of(ip: IpAddr) -> [u8; 16] {
    match ip {
        IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
        IpAddr::V6(v6) => v6.octets(),
    }
}

/// The IP address of a RoCE v2 GID.
pub fn ip_of_gid(gid: [u8; 16]) -> IpAddr {
    let v6 = Ipv6Addr::from(gid);
    match v6.to_ipv4_mapped() {
        Some(v4) => IpAddr::V4(v4),
        None => IpAddr::V6(v6),
    }
}
