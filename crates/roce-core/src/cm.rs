//! Connection management: the IB CM protocol (IBTA Vol 1 chapter 12) over
//! QP1, with rdma_cm's IP addressing on top (service IDs from TCP port
//! numbers, the IP header in the REQ's private data), so that a peer
//! running librdmacm (`rping`, `ib_write_bw -R`, ...) can connect to us and
//! we to it.
//!
//! The device does what the kernel's CM does for rdma_cm: it sends and
//! retransmits the MADs, and moves the connection's QP through
//! INIT → RTR → RTS with the peer's parameters (on the REP for the active
//! side, on accept for the passive side) and to ERR on disconnect. The
//! application sees [`CmEvent`]s from [`crate::Device::poll_cm_event`].
//!
//! Connection states (IBTA Vol 1 §12.9.6, reduced to what RC over rdma_cm uses):
//!
//! | state        | on                         | next          |
//! |--------------|----------------------------|---------------|
//! | (none)       | `cm_connect`: send REQ     | `ReqSent`     |
//! | (none)       | REQ for a listener         | `ReqRcvd`     |
//! | `ReqSent`    | REP: QP to RTS, send RTU   | `Established` |
//! | `ReqSent`    | REP, program-managed QP    | `RepRcvd`     |
//! | `RepRcvd`    | `cm_establish`: send RTU   | `Established` |
//! | `ReqSent`    | REJ / retries exhausted    | (gone)        |
//! | `ReqRcvd`    | `cm_accept`: QP to RTS, REP| `RepSent`     |
//! | `ReqRcvd`    | `cm_reject`: send REJ      | (gone)        |
//! | `RepSent`    | RTU                        | `Established` |
//! | `RepSent`    | REJ / retries exhausted    | (gone)        |
//! | `Established`| `cm_disconnect`: DREQ      | `DreqSent`    |
//! | `Established`| DREQ: QP to ERR, send DREP | (gone)        |
//! | `DreqSent`   | DREP / DREQ / retries out  | (gone)        |
//! | (none)       | `cm_resolve_ud`: SIDR_REQ  | `SidrSent`    |
//! | `SidrSent`   | SIDR_REP / retries out     | (gone)        |
//! | (none)       | SIDR_REQ for a UD listener | `SidrRcvd`    |
//! | `SidrRcvd`   | `cm_accept_ud` / `cm_reject_ud`: SIDR_REP | (gone) |

use std::net::IpAddr;

use roce_wire::Qpn;

/// A connection, named by its local communication ID.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CmId(pub u32);

impl CmId {
    /// The rdma_cm source port an active connection (or SIDR request)
    /// announces in its private-data header: derived from the ID, in
    /// the range the kernel's ephemeral ports use (0x8000 and up).
    pub fn source_port(self) -> u16 {
        0x8000 | (self.0 as u16 & 0x7fff)
    }
}

/// A listener: the service ID it serves (rdma_cm's TCP port space for
/// connections, UDP port space for UD service resolution).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ListenId(pub u64);

impl ListenId {
    /// The listener of `port` in rdma_cm's TCP port space (connections)
    /// or, with `udp`, its UDP port space (UD service resolution): what
    /// `Device::cm_listen` / `Device::cm_listen_ud` return for it.
    pub fn for_port(udp: bool, port: u16) -> ListenId {
        use roce_wire::cm::{ip_service_id, port_space};
        let space = if udp {
            port_space::UDP
        } else {
            port_space::TCP
        };
        ListenId(ip_service_id(space, port))
    }

    /// The rdma_cm port.
    pub fn port(&self) -> u16 {
        self.0 as u16
    }
}

/// A UD service resolution request (SIDR_REQ, rdma_cm's UDP port space)
/// waiting for `cm_accept_ud` or `cm_reject_ud`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UdRequest {
    /// The request.
    pub id: CmId,
    /// The listener it arrived on.
    pub listen: ListenId,
    /// The requester's address.
    pub peer: IpAddr,
    /// Our address it was sent to.
    pub local: IpAddr,
    /// The requester's rdma_cm source port.
    pub peer_port: u16,
    /// The consumer's private data (after rdma_cm's header).
    pub private_data: Vec<u8>,
}

/// The connection parameters of `rdma_connect` / `rdma_accept`
/// (`struct rdma_conn_param`) plus the QP timers the CM programs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConnParam {
    /// READ/atomic requests this side accepts at once (max_dest_rd_atomic).
    pub responder_resources: u8,
    /// READ/atomic requests this side issues at once (max_rd_atomic).
    pub initiator_depth: u8,
    /// Transport retries (7 = forever, as rxe treats it).
    pub retry_count: u8,
    /// RNR retries the peer should use towards us (7 = forever).
    pub rnr_retry_count: u8,
    /// RNR NAK timer code this side's responder advertises.
    pub min_rnr_timer: u8,
    /// Local ACK timeout exponent (4.096 µs × 2^n).
    pub ack_timeout: u8,
    /// The consumer's private data (REQ: at most 56 bytes after rdma_cm's
    /// 36-byte header; REP: 196; REJ: 148).
    pub private_data: Vec<u8>,
}

impl Default for ConnParam {
    fn default() -> ConnParam {
        ConnParam {
            responder_resources: 16,
            initiator_depth: 16,
            retry_count: 7,
            rnr_retry_count: 7,
            min_rnr_timer: 12,
            ack_timeout: 14,
            private_data: Vec::new(),
        }
    }
}

/// A connection request waiting for `cm_accept` or `cm_reject`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConnRequest {
    /// The new connection.
    pub id: CmId,
    /// The listener it arrived on.
    pub listen: ListenId,
    /// The active side's address.
    pub peer: IpAddr,
    /// Our address it was sent to.
    pub local: IpAddr,
    /// The active side's rdma_cm source port.
    pub peer_port: u16,
    /// The active side's QP.
    pub remote_qpn: Qpn,
    /// READ/atomics the active side accepts.
    pub responder_resources: u8,
    /// READ/atomics the active side issues.
    pub initiator_depth: u8,
    /// The consumer's private data (after rdma_cm's header).
    pub private_data: Vec<u8>,
}

/// What happened to a connection.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CmEvent {
    /// A REQ for one of our listeners (`RDMA_CM_EVENT_CONNECT_REQUEST`).
    ConnectRequest(ConnRequest),
    /// A SIDR_REQ for one of our UD listeners (`RDMA_CM_EVENT_CONNECT_REQUEST`
    /// on an RDMA_PS_UDP id).
    UdRequest(UdRequest),
    /// The UD service answered: send to `qpn` with `qkey`
    /// (`RDMA_CM_EVENT_ESTABLISHED` with `ud` parameters).
    UdResolved {
        /// The resolution.
        id: CmId,
        /// The service's UD QP.
        qpn: Qpn,
        /// Its Q_Key.
        qkey: u32,
    },
    /// The REP of a connection whose QP the program manages
    /// ([`crate::Device::cm_connect_manual`]) came
    /// (`RDMA_CM_EVENT_CONNECT_RESPONSE`): the program brings its QP to RTS
    /// with [`crate::Device::cm_qp_attr`], then calls
    /// [`crate::Device::cm_establish`].
    ConnectResponse {
        /// The connection.
        id: CmId,
        /// The consumer's private data of the REP.
        private_data: Vec<u8>,
    },
    /// The connection is up: its QP is in RTS (`RDMA_CM_EVENT_ESTABLISHED`).
    Established {
        /// The connection.
        id: CmId,
        /// The consumer's private data of the REP (active side) or empty.
        private_data: Vec<u8>,
    },
    /// The peer refused (`RDMA_CM_EVENT_REJECTED`); reason 8 means nobody
    /// listens on that port.
    Rejected {
        /// The connection.
        id: CmId,
        /// The REJ reason ([`roce_wire::cm::rej_reason`]).
        reason: u16,
        /// The REJ's private data.
        private_data: Vec<u8>,
    },
    /// No answer after every retry (`RDMA_CM_EVENT_UNREACHABLE`).
    Unreachable {
        /// The connection.
        id: CmId,
    },
    /// The connection is closed and its QP in ERR
    /// (`RDMA_CM_EVENT_DISCONNECTED`).
    Disconnected {
        /// The connection.
        id: CmId,
    },
}

impl CmEvent {
    /// The connection the event is about.
    pub fn id(&self) -> CmId {
        match self {
            CmEvent::ConnectRequest(r) => r.id,
            CmEvent::UdRequest(r) => r.id,
            CmEvent::UdResolved { id, .. }
            | CmEvent::ConnectResponse { id, .. }
            | CmEvent::Established { id, .. }
            | CmEvent::Rejected { id, .. }
            | CmEvent::Unreachable { id }
            | CmEvent::Disconnected { id } => *id,
        }
    }

    /// A request waiting for the application's answer (connect or UD).
    pub fn is_request(&self) -> bool {
        matches!(self, CmEvent::ConnectRequest(_) | CmEvent::UdRequest(_))
    }
}

/// Connection states (see the module table).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CmState {
    /// REQ sent, waiting for REP/REJ.
    ReqSent,
    /// REQ received, waiting for the application.
    ReqRcvd,
    /// REP sent, waiting for RTU.
    RepSent,
    /// REP received for a program-managed QP, waiting for the program's
    /// `cm_establish`.
    RepRcvd,
    /// Connected.
    Established,
    /// DREQ sent, waiting for DREP.
    DreqSent,
    /// SIDR_REQ sent, waiting for SIDR_REP.
    SidrSent,
    /// SIDR_REQ received, waiting for the application.
    SidrRcvd,
}

/// Which CM messages each state takes; anything else is a stray duplicate
/// and is dropped (and counted). REQ is looked up by the peer's ID instead
/// and DREQ is answered in any state (Linux answers DREQs it does not know
/// with a DREP too).
pub(crate) const fn accepts(state: CmState, attr_id: u16) -> bool {
    use roce_wire::cm::attr;
    matches!(
        (state, attr_id),
        (CmState::ReqSent, attr::REP | attr::REJ | attr::MRA)
            | (CmState::RepSent, attr::RTU | attr::REJ | attr::MRA)
            | (CmState::RepRcvd, attr::REP | attr::REJ | attr::DREQ)
            | (CmState::Established, attr::REP | attr::RTU | attr::DREQ)
            | (CmState::DreqSent, attr::DREP | attr::DREQ)
            | (CmState::ReqRcvd, attr::REJ)
            | (CmState::SidrSent, attr::SIDR_REP)
    )
}
