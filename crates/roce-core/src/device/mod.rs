//! [`Device`]: the sans-IO engine that owns every verbs object of one
//! RoCE v2 device and runs their transport.
//!
//! Call order (as quinn-proto's `Connection`): feed received datagrams to
//! [`Device::handle_udp`] (a UDP payload with what the receiver knows of
//! its header) or [`Device::handle_datagram`] (a whole IP datagram);
//! drain packets to send with [`Device::poll_transmit`] until it returns
//! [`Tx::Idle`], sending what was gathered at each [`Tx::EndOfBatch`]; ask
//! [`Device::poll_timeout`] when to call [`Device::handle_timeout`]; read
//! completions with [`Device::poll_cq`] and events with
//! [`Device::poll_event`]. Time is always passed in; the device has no
//! clock, socket or thread.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, VecDeque};
use std::net::IpAddr;

use roce_wire::Ecn;

use crate::cc::CcConfig;
use crate::counters::DeviceCounters;
use crate::cq::Cq;
use crate::ids::{Ids, Quarantine};
use crate::mr::{AccessError, MrTable};
use crate::qp::state::ModifyError;
use crate::qp::Qp;
use crate::srq::Srq;
use crate::{AsyncEvent, Nanos};

mod cm;
mod config;
mod share;
pub use cm::CmCounters;
use config::default_seed;
pub use config::{DeviceConfig, IcrcCheck};
pub use share::{OwnerChange, RxOutcome};
pub use tx::Tx;

/// Destroyed QPNs kept out of use (a peer may still address them).
const RETIRED_QPNS: usize = 4096;

/// The engine of one device.
#[derive(Debug)]
pub struct Device {
    config: DeviceConfig,
    next_pd: u32,
    mrs: MrTable,
    cqs: Vec<Option<Cq>>,
    srqs: Vec<Option<Srq>>,
    qps: BTreeMap<u32, Qp>,
    /// Unpredictable identifiers (QPNs, PSNs, CM IDs).
    ids: Ids,
    /// QPNs destroyed recently, not handed out again yet.
    retired_qpns: Quarantine<u32>,
    events: VecDeque<AsyncEvent>,
    /// QPs that may have something to send, in service order.
    ready: VecDeque<u32>,
    /// Packets the QP at the front of `ready` has sent in a row.
    burst: u32,
    /// Deferred ACKs of QPs destroyed or reset, to send first.
    farewell: VecDeque<(Vec<u8>, roce_wire::Transmit)>,
    /// The last datagram was an answer that released a held ACK: the next
    /// [`Device::poll_transmit`] is [`Tx::EndOfBatch`] (see there).
    boundary: bool,
    /// Timer deadlines as (time, QPN), earliest first. Entries go stale when
    /// a QP's deadline moves; a stale entry (not the QP's `armed` time) is
    /// dropped when it reaches the top.
    timers: BinaryHeap<Reverse<(Nanos, u32)>>,
    counters: DeviceCounters,
    /// Cached shifts for recovering the IPv4 identification of datagrams
    /// received without it (the receive side's ICRC policy, `rx.rs`).
    rebaser: roce_wire::icrc::Rebaser,
    /// The communication manager (QP1).
    cm: cm::CmTable,
}

/// Errors of object management calls.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VerbsError {
    /// No such object.
    NotFound,
    /// Memory registration refused.
    Access(AccessError),
    /// A modify was refused.
    Modify(ModifyError),
    /// The object is still in use, or what it needs is all taken: the
    /// CM's connection table is full, or every QPN
    /// [`Device::create_qp_with`] drew was refused (resource exhaustion).
    Busy,
    /// An argument is out of range.
    InvalidArgument(&'static str),
}

impl std::fmt::Display for VerbsError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            VerbsError::NotFound => f.write_str("no such object"),
            VerbsError::Access(e) => write!(f, "memory access refused: {e:?}"),
            VerbsError::Modify(e) => write!(f, "{e}"),
            VerbsError::Busy => f.write_str("object in use or resource exhausted"),
            VerbsError::InvalidArgument(w) => write!(f, "invalid argument: {w}"),
        }
    }
}

impl std::error::Error for VerbsError {}

impl From<ModifyError> for VerbsError {
    fn from(e: ModifyError) -> VerbsError {
        VerbsError::Modify(e)
    }
}

macro_rules! ctx {
    ($s:ident, $now:expr) => {
        Ctx {
            now: $now,
            mrs: &mut $s.mrs,
            cqs: &mut $s.cqs,
            srqs: &mut $s.srqs,
            events: &mut $s.events,
            local_addrs: &$s.config.addrs,
            ecn: $s.config.ecn,
            max_unacked: $s.config.max_unacked_psns,
            ack_delay: $s.config.ack_delay,
            boundary: false,
            icrc_code: Some($s.config.icrc_code),
            cq_lost: false,
            force_rnr: $s
                .config
                .force_rnr
                .is_some_and(|(from, to)| $now >= from && $now < to),
        }
    };
}

// The rest of `impl Device`, by concern (declared after `ctx!`, which
// they use): the verbs objects and posts, the receive side, the timers,
// the transmit side. The CM (QP1) is `cm`.
mod objects;
mod rx;
mod timers;
mod tx;

impl Device {
    /// A device with the given configuration.
    pub fn new(mut config: DeviceConfig) -> Device {
        if !matches!(config.active_mtu, 256 | 512 | 1024 | 2048 | 4096) {
            config.active_mtu = 1024;
        }
        let mut ids = Ids::new(config.seed.unwrap_or_else(|| default_seed(&config.addrs)));
        let mut mr_seed = [0u8; 32];
        for c in mr_seed.chunks_mut(8) {
            c.copy_from_slice(&ids.u64().to_le_bytes());
        }
        let mrs = MrTable::new(mr_seed);
        let mut cm = cm::CmTable::new(&mut ids);
        cm.owners = share::OwnerQueue::new(config.shared);
        Device {
            config,
            next_pd: 1,
            mrs,
            cqs: Vec::new(),
            srqs: Vec::new(),
            qps: BTreeMap::new(),
            ids,
            retired_qpns: Quarantine::new(RETIRED_QPNS),
            events: VecDeque::new(),
            ready: VecDeque::new(),
            burst: 0,
            farewell: VecDeque::new(),
            boundary: false,
            timers: BinaryHeap::new(),
            counters: DeviceCounters::default(),
            rebaser: roce_wire::icrc::Rebaser::default(),
            cm,
        }
    }

    /// Local addresses (GID table).
    pub fn addrs(&self) -> &[IpAddr] {
        &self.config.addrs
    }

    /// Sets the ECN codepoint of outgoing data packets.
    pub fn set_ecn(&mut self, ecn: Ecn) {
        self.config.ecn = ecn;
    }

    /// Sets the congestion control of QPs created from now on.
    pub fn set_cc(&mut self, cc: CcConfig) {
        self.config.cc = cc;
    }

    /// Sets the port's line rate (b/s) for QPs created from now on.
    pub fn set_link_bps(&mut self, bps: u64) {
        self.config.link_bps = bps.max(1);
    }

    /// The device's congestion control settings.
    pub fn cc_config(&self) -> &CcConfig {
        &self.config.cc
    }

    /// Device counters.
    pub fn counters(&self) -> &DeviceCounters {
        &self.counters
    }

    /// The next asynchronous event (`ibv_get_async_event`).
    pub fn poll_event(&mut self) -> Option<AsyncEvent> {
        self.events.pop_front()
    }
}
