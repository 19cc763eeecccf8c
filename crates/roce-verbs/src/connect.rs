//! Bringing QPs up: RESET → INIT → RTR → RTS with the attribute masks
//! `ibv_modify_qp` requires, from a small description of the peer
//! ([`QpEndpoint`]) exchanged out of band.

use std::net::IpAddr;

use roce_core::{Access, AddressVector, Psn, Qkey, QpAttr, QpAttrMask, QpState, QpType, Qpn};

use crate::error::ModifyQpError;
use crate::mr::RemoteMr;
use crate::qp::QueuePair;

/// What a peer needs to connect to a QP (and, optionally, to access one of
/// its regions): the fields an application exchanges out of band.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QpEndpoint {
    /// QP number.
    pub qpn: Qpn,
    /// First PSN the QP sends (the peer's expected receive PSN).
    pub psn: Psn,
    /// The QP's address (GID).
    pub addr: IpAddr,
    /// A region the peer may access remotely.
    pub mr: Option<RemoteMr>,
}

/// Connection parameters (the usual perftest choices by default).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnectOptions {
    /// Path MTU in bytes; `None` keeps the device's active MTU.
    pub path_mtu: Option<u32>,
    /// Remote access rights granted to the peer's requests.
    pub access: Access,
    /// Local ACK timeout exponent (4.096 µs × 2^timeout; 0 = infinite).
    pub timeout: u8,
    /// Transport retries (0..=7).
    pub retry_cnt: u8,
    /// RNR retries (0..=7, 7 = infinite).
    pub rnr_retry: u8,
    /// RNR NAK timer code advertised to the peer.
    pub min_rnr_timer: u8,
    /// Outstanding READs/atomics, as requester and as responder.
    pub max_rd_atomic: u8,
    /// Q_Key of a UD QP.
    pub qkey: Qkey,
    /// Local GID index to send from.
    pub sgid_index: u8,
    /// IPv4 TTL / IPv6 hop limit.
    pub hop_limit: u8,
    /// Traffic class (DSCP in the upper six bits).
    pub traffic_class: u8,
}

impl Default for ConnectOptions {
    fn default() -> ConnectOptions {
        ConnectOptions {
            path_mtu: None,
            access: Access::LOCAL_WRITE
                | Access::REMOTE_WRITE
                | Access::REMOTE_READ
                | Access::REMOTE_ATOMIC,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            min_rnr_timer: 1,
            max_rd_atomic: 16,
            qkey: Qkey::new(0x1111_1111),
            sgid_index: 0,
            hop_limit: 64,
            traffic_class: 0,
        }
    }
}

impl QueuePair {
    /// This QP's side of an out-of-band exchange, sending from `psn`.
    pub fn endpoint(&self, psn: Psn) -> QpEndpoint {
        let addr = self
            .pd()
            .context()
            .addrs()
            .first()
            .copied()
            .unwrap_or(IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED));
        QpEndpoint {
            qpn: self.qpn(),
            psn,
            addr,
            mr: None,
        }
    }

    /// Brings a QP in RESET to RTS ([`to_init`](Self::to_init), then
    /// [`to_rts`](Self::to_rts)). RC and UC QPs connect to `remote` (whose
    /// `psn` is the one it sends from); UD QPs ignore `remote` and take
    /// `opts.qkey` (see [`QueuePair::ready_ud`]). `local_psn` is the first
    /// PSN this QP sends (what the peer got in its [`QpEndpoint`]).
    pub fn connect(
        &self,
        local_psn: Psn,
        remote: &QpEndpoint,
        opts: &ConnectOptions,
    ) -> Result<(), ModifyQpError> {
        self.to_init(opts)?;
        self.to_rts(local_psn, remote, opts)
    }

    /// RESET → INIT with `opts.access` (UD: `opts.qkey`), P_Key index 0 and
    /// port 1. Receives may be posted from here on.
    pub fn to_init(&self, opts: &ConnectOptions) -> Result<(), ModifyQpError> {
        let a = QpAttr {
            qp_state: QpState::Init,
            pkey_index: 0,
            port_num: 1,
            qp_access_flags: opts.access,
            qkey: opts.qkey,
            ..QpAttr::default()
        };
        let m = QpAttrMask::required(self.qp_type(), QpState::Reset, QpState::Init);
        self.modify(&a, m)
    }

    /// INIT → RTR → RTS against `remote` with the masks the transition
    /// table requires for the QP's type ([`QpAttrMask::required`]).
    pub fn to_rts(
        &self,
        local_psn: Psn,
        remote: &QpEndpoint,
        opts: &ConnectOptions,
    ) -> Result<(), ModifyQpError> {
        let t = self.qp_type();
        let mut a = QpAttr {
            qp_state: QpState::Rtr,
            ..QpAttr::default()
        };
        a.ah_attr = AddressVector {
            dest: remote.addr,
            sgid_index: opts.sgid_index,
            hop_limit: opts.hop_limit,
            traffic_class: opts.traffic_class,
            flow_label: 0,
        };
        a.path_mtu = match opts.path_mtu {
            Some(m) => m,
            None => self.query().map_err(|_| ModifyQpError::NoSuchQp)?.path_mtu,
        };
        a.dest_qp_num = remote.qpn;
        a.rq_psn = remote.psn;
        a.max_dest_rd_atomic = opts.max_rd_atomic;
        a.min_rnr_timer = opts.min_rnr_timer;
        self.modify(&a, QpAttrMask::required(t, QpState::Init, QpState::Rtr))?;

        a.qp_state = QpState::Rts;
        a.sq_psn = local_psn;
        a.timeout = opts.timeout;
        a.retry_cnt = opts.retry_cnt;
        a.rnr_retry = opts.rnr_retry;
        a.max_rd_atomic = opts.max_rd_atomic;
        self.modify(&a, QpAttrMask::required(t, QpState::Rtr, QpState::Rts))
    }

    /// Brings a UD QP from RESET to RTS with `opts.qkey`.
    pub fn ready_ud(&self, psn: Psn, opts: &ConnectOptions) -> Result<(), ModifyQpError> {
        if self.qp_type() != QpType::Ud {
            return Err(ModifyQpError::InvalidArgument("ready_ud on a connected QP"));
        }
        let me = self.endpoint(psn);
        self.connect(psn, &me, opts)
    }
}
