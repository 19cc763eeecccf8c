//! The device's communication manager (see [`crate::cm`]): QP1 MADs in and
//! out, the per-connection state machine, retransmission timers, and the
//! QP transitions the CM makes on the application's behalf.
//!
//! This file holds the connection table, the timers and QP1's transmit;
//! `api` what the application calls (listen, connect, accept, reject,
//! disconnect, SIDR), `peer` what the peer's MADs do.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, VecDeque};
use std::net::IpAddr;

use roce_wire::cm::{self, msg_ref, rej_reason, CmMessage, CmaHeader, RejRepr, CMA_HEADER_LEN};
use roce_wire::mad::{self, MAD_LEN};
use roce_wire::{BthRepr, DethRepr, Ecn, ExtHeaders, Opcode, Owner, Psn, Qpn};

use super::share::{OwnerChange, OwnerQueue};
use super::{Device, VerbsError};
use crate::cm::{CmEvent, CmId, CmState, ConnParam, ListenId};
use crate::ids::{Ids, Quarantine};
use crate::qp::path::Path;
use crate::qp::state::{QpAttrMask, QpState, QpType};
use crate::qp::{AddressVector, QpAttr};
use crate::Nanos;

/// How long the peer may take to answer a REQ/REP/DREQ, as the exponent
/// we advertise (4.096 µs × 2^18 ≈ 1.07 s) and wait for before resending.
const CM_RESPONSE_TIMEOUT: u8 = 18;
/// Resends of a REQ/REP/DREQ before the connection is given up.
const MAX_CM_RETRIES: u8 = 15;
/// The local ACK timeout advertised in the REQ's path when the consumer
/// leaves it at 0.
const DEFAULT_PATH_ACK_TIMEOUT: u8 = 14;

fn timeout_ns(exp: u8) -> Nanos {
    4096u64 << exp.min(31)
}

/// Connections the CM holds at once (every state).
pub(crate) const MAX_CONNS: usize = 4096;
/// Requests received (REQ, SIDR_REQ) waiting for the application's
/// accept or reject, per listener: `rdma_listen`'s backlog when the
/// application gives none.
pub(crate) const DEFAULT_BACKLOG: usize = 128;
/// How long a received request waits for the application before it is
/// dropped: 4.096 µs × 2^20 ≈ 4.3 s (the peer resends its REQ meanwhile,
/// IBTA Vol 1 §12.7.27; a request answered by nobody must not stay).
const PENDING_TIMEOUT: u8 = 20;
/// A listener's backlog is shared fairly between the addresses that send
/// requests: one source address holds at most [`source_share`] of the
/// listener's requests that are not yet connected, counting both those
/// waiting for the application (REQ or SIDR_REQ received) and those it
/// accepted whose RTU has not come (REP sent: half-open). Past its share a
/// source's new requests are dropped at once and counted
/// (`dropped_source_share`); a real peer resends its REQ (IBTA Vol 1
/// §12.7.27). With the default backlog a source holds 8: a flood of forged
/// REQs from one address, never followed by an RTU, cannot take the slots
/// (or the application's attention) that another address's request needs
/// (docs/security.md, "A fair share per source").
pub(crate) const SHARES_PER_BACKLOG: usize = 16;
/// The share no source is refused below (unless the backlog is smaller):
/// a client connecting several QPs at once (perftest `-R -q 8` listens
/// with a backlog of 8) is not slowed.
pub(crate) const MIN_SOURCE_SHARE: usize = 8;

/// The requests not yet connected one source may hold at a listener with
/// `backlog` ([`SHARES_PER_BACKLOG`]): a sixteenth of the backlog, at
/// least [`MIN_SOURCE_SHARE`] or the whole backlog if smaller.
pub(crate) fn source_share(backlog: usize) -> usize {
    (backlog / SHARES_PER_BACKLOG).max(backlog.min(MIN_SOURCE_SHARE))
}
/// Connection events queued for the application at most; past it new
/// requests are dropped (their peers resend) and other events counted lost.
pub(crate) const MAX_EVENTS: usize = 1024;
/// MRAs honoured per connection, and the largest service timeout
/// exponent one may ask for (2^22 × 4.096 µs ≈ 17 s): a peer cannot keep
/// a connection waiting forever (IBTA Vol 1 §12.6.6 leaves the count to
/// the CM).
const MAX_MRAS: u8 = 4;
const MAX_MRA_TIMEOUT: u8 = 22;

/// A 64-bit mix (splitmix64's finaliser), for the node GUID.
fn mix(mut x: u64) -> u64 {
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// What the REQ told the passive side (kept until accept).
#[derive(Clone, Debug)]
struct ReqInfo {
    remote_qpn: Qpn,
    starting_psn: Psn,
    path_mtu: u32,
    responder_resources: u8,
    initiator_depth: u8,
    retry_count: u8,
    rnr_retry_count: u8,
    ack_timeout: u8,
    traffic_class: u8,
    hop_limit: u8,
    flow_label: u32,
}

#[derive(Debug)]
struct Conn {
    state: CmState,
    remote_id: u32,
    tid: u64,
    peer: IpAddr,
    local: IpAddr,
    qpn: Option<Qpn>,
    remote_qpn: Qpn,
    /// The PSN this side expects first (our rq_psn), which the REQ/REP
    /// carries as its starting PSN.
    psn: Psn,
    param: ConnParam,
    req: Option<ReqInfo>,
    /// The last REQ/REP/DREQ, resent on timeout.
    last: Option<Box<[u8; MAD_LEN]>>,
    deadline: Option<Nanos>,
    interval: Nanos,
    retries_left: u8,
    /// The service a SIDR exchange or an active side's REQ is about.
    service_id: u64,
    /// An active side's REQ was first refused for want of a listener at
    /// this time, and is being resent ([`CONNECTED_RECENTLY`]).
    refused_since: Option<Nanos>,
    /// The listener a received request came to.
    listen: Option<ListenId>,
    /// MRAs honoured so far.
    mras: u8,
    /// A received request counted against its listener's backlog.
    pending: bool,
    /// A received request, waiting or half-open (REP sent), counted in
    /// its source's share of its listener ([`SHARES_PER_BACKLOG`]).
    share: bool,
    /// The program manages the QP (`cm_connect_manual`,
    /// `cm_accept_manual`): the CM never modifies it (`qpn` stays None)
    /// and tells the program its attributes (`cm_qp_attr`).
    manual: bool,
    /// The attributes of a program-managed QP, known once the REP came
    /// (active side).
    qp_attr: Option<QpAttr>,
}

/// One MAD waiting to be sent.
#[derive(Debug)]
struct OutMad {
    src: IpAddr,
    dst: IpAddr,
    mad: Box<[u8; MAD_LEN]>,
}

/// CM counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CmCounters {
    /// MADs sent (including resends).
    pub tx_mads: u64,
    /// MADs received and taken by this CM (not those a shared device
    /// handed back, [`RxOutcome::Foreign`](crate::RxOutcome::Foreign)).
    pub rx_mads: u64,
    /// MADs resent after a timeout.
    pub resent: u64,
    /// QP1 packets that were not CM MADs, or messages no state takes.
    pub dropped: u64,
    /// QP1 packets whose BTH P_Key matches no entry of the port's P_Key
    /// table (dropped before the MAD is parsed).
    pub dropped_pkey: u64,
    /// REQs refused with a REJ (no listener, bad transport).
    pub rejected_reqs: u64,
    /// Requests dropped because the listener's backlog, the connection
    /// table or the event queue was full.
    pub dropped_backlog: u64,
    /// Requests dropped because their source address already held its
    /// share of the listener's requests not yet connected (waiting for
    /// the application, or REP sent and no RTU yet): see
    /// docs/security.md, "A fair share per source".
    pub dropped_source_share: u64,
    /// Received requests the application did not answer in time.
    pub pending_timed_out: u64,
    /// Events not queued because the event queue was full.
    pub events_lost: u64,
    /// MRAs ignored (over `MAX_MRAS` per connection).
    pub mras_ignored: u64,
    /// REQs left unanswered (to be resent) because their port's listener
    /// went less than 2 s before: programs close a listener and open
    /// another on the same port, and a REQ may come in between.
    pub held_for_relisten: u64,
    /// Held REQs handled once their listener came (`cm_expect_listen`,
    /// or a listener back on its port).
    pub replayed_reqs: u64,
    /// REQs resent after a refusal for want of a listener (REJ reason 8):
    /// every 50 ms, for up to 2 s to a port this side had a connection
    /// accepted on in the last 5 s, else for up to 0.5 s, before the
    /// refusal is reported.
    pub resent_after_refusal: u64,
    /// Claims or releases of local communication IDs not queued for the
    /// driver because the queue was full
    /// ([`Device::poll_owner_change`]): a claim lost leaves the ID
    /// unknown to the other processes sharing the address, a release lost
    /// leaves it held in the host table until this process detaches.
    pub owner_changes_dropped: u64,
}

/// How long after a listener goes a REQ for its port is left unanswered
/// (its sender resends it after about a second) instead of refused:
/// programs close a listener and open another on the same port (perftest
/// does, between its exchange and its test connections), and their peer's
/// REQ may come in between. Past it, such a REQ is refused (REJ, no
/// listener), as ever.
pub(crate) const RELISTEN_GRACE: Nanos = 2_000_000_000;

/// Ports whose listener went recently, at most this many remembered.
const MAX_RELISTEN: usize = 16;

/// The active side's half of [`RELISTEN_GRACE`], for peers that refuse at
/// once (Linux's CM answers a REQ for a port without a listener with REJ
/// reason 8): a REQ refused so, to a port this side had a connection
/// accepted on less than this long before, is resent every
/// [`REFUSED_RESEND`] for up to [`RELISTEN_GRACE`] before the refusal is
/// reported. perftest's `-R` server closes its exchange listener and
/// listens again for the test connection, which its client asks for at
/// once: against rxe in an emulated VM the client always came first.
/// A port this side has not just connected to is resent for
/// [`LISTEN_RACE`] only.
pub(crate) const CONNECTED_RECENTLY: Nanos = 5_000_000_000;

/// How often a REQ refused for want of a listener is resent (see
/// [`CONNECTED_RECENTLY`] and [`LISTEN_RACE`]).
pub(crate) const REFUSED_RESEND: Nanos = 50_000_000;

/// How long any REQ refused for want of a listener (REJ reason 8) is
/// resent, every [`REFUSED_RESEND`], before the refusal is reported, for
/// a port this side has not just connected to: a server may tell its
/// peer the port it bound before it listens on it (qperf 0.4.11's
/// `cm_open_server` sends the port, then calls `rdma_listen`), and the
/// peer's REQ can come first. Against the kernel's CM the window is
/// microseconds wide; against a server that opens its devices at listen,
/// or one descheduled on a loaded host, it is not. A port that nobody
/// listens on is reported refused after this long, not at once.
pub(crate) const LISTEN_RACE: Nanos = 500_000_000;

/// (Peer, service) pairs whose REP came recently, at most this many
/// remembered.
const MAX_RECENT: usize = 16;

/// Local communication IDs of ended connections that are not handed out
/// again: the last this many (as the device's last 4096 destroyed QPNs).
/// A peer of an old connection may still send its DREQ, DREP, REP or
/// REJ, naming our old ID; with the ID in quarantine it finds no
/// connection and is dropped, where a new connection given the same ID
/// would take it (IBTA Vol 1 §12.6.3 asks only that a live ID be unique).
pub(crate) const RETIRED_CM_IDS: usize = 4096;

/// The CM's part of a device.
#[derive(Debug)]
pub(crate) struct CmTable {
    /// Listeners by service ID, with their backlog.
    listeners: BTreeMap<u64, (ListenId, usize)>,
    conns: BTreeMap<u32, Conn>,
    /// Received requests by (peer, the peer's ID): a resent REQ or
    /// SIDR_REQ is found in O(log n), not by a scan of every connection.
    /// (An ordered map, not a hash table: the keys are the peer's, and a
    /// tree has no worst case to aim at.)
    by_remote: BTreeMap<(IpAddr, u32), u32>,
    /// Requests waiting for the application, per listener.
    pending: BTreeMap<u64, usize>,
    /// Requests not yet connected (waiting, or REP sent) per listener and
    /// source address: see [`SHARES_PER_BACKLOG`]. An entry exists only
    /// while its count is not zero, so the map holds at most one entry
    /// per connection.
    shares: BTreeMap<(u64, IpAddr), usize>,
    /// Services whose listener went, and since when (set by the first
    /// REQ that finds it gone): see [`RELISTEN_GRACE`].
    pub(crate) relisten: VecDeque<(u64, Option<Nanos>)>,
    /// REQs left unanswered for a listener expected soon, to handle
    /// once it is there (`held.rs`), and whether that is due.
    held: VecDeque<held::HeldReq>,
    replay: bool,
    /// Peers and services that accepted this side's REQ, and when (see
    /// [`CONNECTED_RECENTLY`]).
    recent: VecDeque<(IpAddr, u64, Nanos)>,
    out: VecDeque<OutMad>,
    events: VecDeque<CmEvent>,
    /// CM IDs, transaction IDs and starting PSNs.
    ids: Ids,
    /// Local IDs of ended connections, not reused while in it.
    retired: Quarantine<u32>,
    gsi_psn: u32,
    /// Resend deadlines as (time, connection), earliest first; an entry
    /// whose connection is gone or has another deadline is stale and
    /// skipped when it comes up (as the device's QP timer heap does).
    timers: BinaryHeap<Reverse<(Nanos, u32)>>,
    /// Claims and releases of local IDs for the driver (shared devices).
    pub(crate) owners: OwnerQueue,
    pub(crate) counters: CmCounters,
}

impl CmTable {
    pub(crate) fn new(ids: &mut Ids) -> CmTable {
        let mut seed = [0u8; 32];
        for c in seed.chunks_mut(8) {
            c.copy_from_slice(&ids.u64().to_le_bytes());
        }
        CmTable {
            listeners: BTreeMap::new(),
            conns: BTreeMap::new(),
            by_remote: BTreeMap::new(),
            pending: BTreeMap::new(),
            shares: BTreeMap::new(),
            relisten: VecDeque::new(),
            held: VecDeque::new(),
            replay: false,
            recent: VecDeque::new(),
            out: VecDeque::new(),
            events: VecDeque::new(),
            ids: Ids::new(seed),
            retired: Quarantine::new(RETIRED_CM_IDS),
            gsi_psn: 0,
            timers: BinaryHeap::new(),
            owners: OwnerQueue::default(),
            counters: CmCounters::default(),
        }
    }

    /// Remembers that `service`'s listener went (see [`RELISTEN_GRACE`]).
    pub(crate) fn listener_gone(&mut self, service: u64) {
        self.relisten.retain(|(s, _)| *s != service);
        if self.relisten.len() >= MAX_RELISTEN {
            self.relisten.pop_front();
        }
        self.relisten.push_back((service, None));
    }

    /// Whether a REQ for `service`, which has no listener, should go
    /// unanswered now: its listener went less than [`RELISTEN_GRACE`]
    /// ago (counted from the first REQ that found it gone).
    pub(crate) fn hold_for_relisten(&mut self, service: u64, now: Nanos) -> bool {
        let Some(k) = self.relisten.iter().position(|(s, _)| *s == service) else {
            return false;
        };
        let since = *self.relisten[k].1.get_or_insert(now);
        if now.saturating_sub(since) < RELISTEN_GRACE {
            self.counters.held_for_relisten += 1;
            return true;
        }
        self.relisten.remove(k);
        false
    }

    /// Remembers that `peer` accepted a REQ for `service` (a REP came).
    pub(crate) fn connected(&mut self, peer: IpAddr, service: u64, now: Nanos) {
        self.recent.retain(|&(p, s, _)| (p, s) != (peer, service));
        if self.recent.len() >= MAX_RECENT {
            self.recent.pop_front();
        }
        self.recent.push_back((peer, service, now));
    }

    /// Whether connection `id`, an active side's REQ just refused for want
    /// of a listener, should be resent instead of refused (see
    /// [`CONNECTED_RECENTLY`] and [`LISTEN_RACE`]); if so, schedules the
    /// resend.
    pub(crate) fn resend_refused(&mut self, id: u32, now: Nanos) -> bool {
        let Some(c) = self.conns.get_mut(&id) else {
            return false;
        };
        let key = (c.peer, c.service_id);
        let recent = self
            .recent
            .iter()
            .any(|&(p, s, t)| (p, s) == key && now.saturating_sub(t) < CONNECTED_RECENTLY);
        let since = *c.refused_since.get_or_insert(now);
        let grace = if recent { RELISTEN_GRACE } else { LISTEN_RACE };
        if c.state != CmState::ReqSent || now.saturating_sub(since) >= grace {
            return false;
        }
        // The timer's resend takes one of the REQ's retries: give it back,
        // so that a port that stays closed ends in the refusal, not in
        // a timeout.
        c.retries_left = c.retries_left.saturating_add(1);
        self.counters.resent_after_refusal += 1;
        self.schedule(id, now + REFUSED_RESEND);
        true
    }

    /// A fresh local communication ID: random (IBTA Vol 1 §12.6.3 only
    /// asks that it be unique; a guessable one lets a blind attacker answer
    /// for the peer), non-zero, not in use, and not one of the last
    /// [`RETIRED_CM_IDS`] that ended.
    fn new_id(&mut self) -> u32 {
        loop {
            let id = self.ids.u32();
            if id != 0 && !self.conns.contains_key(&id) && !self.retired.contains(&id) {
                return id;
            }
        }
    }

    /// A fresh transaction ID (IBTA Vol 1 §13.4.6.4): random.
    fn new_tid(&mut self) -> u64 {
        self.ids.u64()
    }

    /// A connection's starting PSN (IBTA Vol 1 §12.7.23): random.
    fn new_psn(&mut self) -> Psn {
        self.ids.psn()
    }

    /// Whether a new connection fits the table.
    fn has_room(&self) -> bool {
        self.conns.len() < MAX_CONNS
    }

    /// Adds a connection; a received request is indexed by its peer's ID
    /// and counted against its listener's backlog. Its ID is claimed in
    /// the host table if the peer may name it ([`Device::poll_owner_change`]).
    fn insert(&mut self, id: u32, mut c: Conn) {
        self.owner_change(&c, OwnerChange::Claim(Owner::CommId(id)));
        if matches!(c.state, CmState::ReqRcvd | CmState::SidrRcvd) {
            self.by_remote.insert((c.peer, c.remote_id), id);
            if let Some(l) = c.listen {
                *self.pending.entry(l.0).or_default() += 1;
                c.pending = true;
                *self.shares.entry((l.0, c.peer)).or_default() += 1;
                c.share = true;
            }
        }
        self.conns.insert(id, c);
    }

    /// A received request stops waiting for the application (accepted,
    /// rejected, gone): its backlog slot is freed.
    fn unpend(&mut self, id: u32) {
        let Some(c) = self.conns.get_mut(&id) else {
            return;
        };
        if !std::mem::take(&mut c.pending) {
            return;
        }
        if let Some(l) = c.listen {
            if let Some(n) = self.pending.get_mut(&l.0) {
                *n = n.saturating_sub(1);
                if *n == 0 {
                    self.pending.remove(&l.0);
                }
            }
        }
    }

    /// A received request is connected (RTU) or gone: it no longer counts
    /// in its source's share ([`SHARES_PER_BACKLOG`]).
    fn unshare(&mut self, id: u32) {
        let Some(c) = self.conns.get_mut(&id) else {
            return;
        };
        if !std::mem::take(&mut c.share) {
            return;
        }
        if let Some(l) = c.listen {
            let key = (l.0, c.peer);
            if let Some(n) = self.shares.get_mut(&key) {
                *n = n.saturating_sub(1);
                if *n == 0 {
                    self.shares.remove(&key);
                }
            }
        }
    }

    /// Removes a connection (and what indexes it); its ID goes into
    /// quarantine.
    fn remove(&mut self, id: u32) -> Option<Conn> {
        self.unpend(id);
        self.unshare(id);
        let c = self.conns.remove(&id)?;
        self.retired.retire(id);
        self.owner_change(&c, OwnerChange::Release(Owner::CommId(id)));
        if self.by_remote.get(&(c.peer, c.remote_id)) == Some(&id) {
            self.by_remote.remove(&(c.peer, c.remote_id));
        }
        Some(c)
    }

    /// Queues a claim or release of connection `c`'s local ID, unless its
    /// peer never names it: a received SIDR_REQ's (the SIDR_REP carries
    /// the peer's request ID, IBTA Vol 1 §12.11, and ends the exchange).
    fn owner_change(&mut self, c: &Conn, change: OwnerChange) {
        if c.state != CmState::SidrRcvd && !self.owners.push(change) {
            self.counters.owner_changes_dropped += 1;
        }
    }

    /// Whether `listen` can take one more waiting request.
    fn backlog_room(&self, listen: u64) -> bool {
        let cap = self.listeners.get(&listen).map_or(0, |l| l.1);
        self.pending.get(&listen).copied().unwrap_or(0) < cap
    }

    /// Whether `peer` may have one more request of `listen`'s not yet
    /// connected: it holds less than its share ([`SHARES_PER_BACKLOG`]).
    fn source_room(&self, listen: u64, peer: IpAddr) -> bool {
        let backlog = self.listeners.get(&listen).map_or(0, |l| l.1);
        let share = source_share(backlog);
        self.shares.get(&(listen, peer)).copied().unwrap_or(0) < share
    }

    /// Queues an event for the application, unless the queue is full.
    fn push_event(&mut self, ev: CmEvent) {
        if self.events.len() >= MAX_EVENTS {
            self.counters.events_lost += 1;
            return;
        }
        self.events.push_back(ev);
    }

    fn send(&mut self, src: IpAddr, dst: IpAddr, tid: u64, m: &CmMessage<'_>) -> Box<[u8; 256]> {
        let mut mad = Box::new([0u8; MAD_LEN]);
        // Lengths are checked by the callers' constructions.
        if m.emit_mad(tid, &mut mad[..]).is_ok() {
            self.out.push_back(OutMad {
                src,
                dst,
                mad: mad.clone(),
            });
        }
        mad
    }

    /// Earliest time a resend may be due: O(1), possibly a stale entry
    /// (the timeout handler then does nothing).
    /// CM datagrams wait to be sent.
    pub(crate) fn has_output(&self) -> bool {
        !self.out.is_empty()
    }

    pub(crate) fn next_deadline(&self) -> Option<Nanos> {
        if self.replay {
            // Held REQs whose listener came: at once.
            return Some(0);
        }
        self.timers.peek().map(|Reverse((t, _))| *t)
    }

    /// Whether a listener holds `service`.
    pub(crate) fn listens_on(&self, service: u64) -> bool {
        self.listeners.contains_key(&service)
    }

    /// Sets connection `id`'s resend deadline.
    fn schedule(&mut self, id: u32, t: Nanos) {
        if let Some(c) = self.conns.get_mut(&id) {
            c.deadline = Some(t);
            self.timers.push(Reverse((t, id)));
        }
    }
}

impl Conn {
    fn new(state: CmState, remote_id: u32, tid: u64, peer: IpAddr, local: IpAddr) -> Conn {
        Conn {
            state,
            remote_id,
            tid,
            peer,
            local,
            qpn: None,
            remote_qpn: Qpn::new(0),
            psn: Psn::new(0),
            param: ConnParam::default(),
            req: None,
            last: None,
            deadline: None,
            interval: 0,
            retries_left: 0,
            service_id: 0,
            refused_since: None,
            listen: None,
            mras: 0,
            pending: false,
            share: false,
            manual: false,
            qp_attr: None,
        }
    }

    /// Keeps `mad` for resending and resets the retry budget; the caller
    /// schedules the first resend at `now + interval`.
    fn arm(&mut self, mad: Box<[u8; MAD_LEN]>) {
        self.last = Some(mad);
        self.interval = timeout_ns(CM_RESPONSE_TIMEOUT);
        self.retries_left = MAX_CM_RETRIES;
    }
}

mod api;
mod held;
mod peer;

/// Helpers of the application's calls and of the peer's MADs: the node
/// GUID, address vectors, bringing a QP up or to ERR, sending a REJ.
impl Device {
    /// A stable GUID for the device, from its first address.
    fn node_guid(&self) -> u64 {
        let a = self
            .config
            .addrs
            .first()
            .map_or([0u8; 16], |a| cm::gid_of(*a));
        0x0200_00ff_fe00_0000 ^ mix(u128::from_be_bytes(a) as u64) & 0x00ff_ffff
    }

    fn av_to(&self, peer: IpAddr, local: IpAddr, req: &ReqInfo) -> AddressVector {
        let sgid = self
            .config
            .addrs
            .iter()
            .position(|a| *a == local)
            .unwrap_or(0) as u8;
        AddressVector {
            dest: peer,
            sgid_index: sgid,
            hop_limit: req.hop_limit.max(1),
            traffic_class: req.traffic_class,
            flow_label: req.flow_label,
        }
    }

    /// INIT → RTR → RTS with `a` (RC masks from the transition table).
    fn bring_up(&mut self, qpn: Qpn, mut a: QpAttr) -> Result<(), VerbsError> {
        a.qp_state = QpState::Rtr;
        self.modify_qp(
            qpn,
            &a,
            QpAttrMask::required(QpType::Rc, QpState::Init, QpState::Rtr),
        )?;
        a.qp_state = QpState::Rts;
        self.modify_qp(
            qpn,
            &a,
            QpAttrMask::required(QpType::Rc, QpState::Rtr, QpState::Rts),
        )
    }

    fn qp_to_err(&mut self, qpn: Qpn) {
        let a = QpAttr {
            qp_state: QpState::Err,
            ..QpAttr::default()
        };
        // A QP already in ERR (or destroyed) needs nothing.
        let _ = self.modify_qp(qpn, &a, QpAttrMask::STATE);
    }

    #[allow(clippy::too_many_arguments)]
    fn send_rej(
        &mut self,
        src: IpAddr,
        dst: IpAddr,
        tid: u64,
        local_id: u32,
        remote_id: u32,
        which: u8,
        reason: u16,
        private_data: &[u8],
    ) {
        let rej = RejRepr {
            local_comm_id: local_id,
            remote_comm_id: remote_id,
            message_rejected: which,
            reason,
            ari: &[],
            private_data,
        };
        self.cm.send(src, dst, tid, &CmMessage::Rej(rej));
    }
}

impl Device {
    /// Resends or gives up the connections whose timers expired.
    pub(super) fn cm_handle_timeout(&mut self, now: Nanos) {
        self.replay_held(now);
        while let Some(&Reverse((t, id))) = self.cm.timers.peek() {
            if t > now {
                break;
            }
            self.cm.timers.pop();
            let Some(c) = self.cm.conns.get_mut(&id) else {
                continue;
            };
            if c.deadline != Some(t) {
                continue;
            }
            if matches!(c.state, CmState::ReqRcvd | CmState::SidrRcvd) {
                // Nobody answered the request in time: forget it (its
                // ConnectRequest event, if still queued, names a gone ID).
                self.cm.remove(id);
                self.cm.counters.pending_timed_out += 1;
                continue;
            }
            if c.retries_left > 0 {
                c.retries_left -= 1;
                let next = now + c.interval;
                if let Some(m) = c.last.clone() {
                    let (src, dst) = (c.local, c.peer);
                    self.cm.out.push_back(OutMad { src, dst, mad: m });
                    self.cm.counters.resent += 1;
                }
                self.cm.schedule(id, next);
                continue;
            }
            let Some(c) = self.cm.remove(id) else {
                continue;
            };
            if let Some(q) = c.qpn {
                if c.state != CmState::ReqSent {
                    self.qp_to_err(q);
                }
            }
            let ev = match c.state {
                CmState::DreqSent => CmEvent::Disconnected { id: CmId(id) },
                _ => {
                    if c.state == CmState::ReqSent {
                        self.send_rej(
                            c.local,
                            c.peer,
                            c.tid,
                            id,
                            0,
                            msg_ref::REQ,
                            rej_reason::TIMEOUT,
                            &[],
                        );
                    }
                    CmEvent::Unreachable { id: CmId(id) }
                }
            };
            self.cm.push_event(ev);
        }
    }

    /// Writes the next QP1 datagram into `buf`.
    pub(super) fn cm_poll_transmit(&mut self, buf: &mut [u8]) -> Option<roce_wire::Transmit> {
        while let Some(o) = self.cm.out.pop_front() {
            let path = Path {
                src: o.src,
                dst: o.dst,
                sport: crate::qp::path::udp_sport(1),
                dscp: 0,
                ecn: Ecn::NotEct,
                ttl: 64,
                flow_label: 0,
                icrc_code: Some(self.config.icrc_code),
            };
            let psn = Psn::new(self.cm.gsi_psn);
            self.cm.gsi_psn = (self.cm.gsi_psn + 1) & 0xff_ffff;
            let mut bth = BthRepr::new(Opcode::UD_SEND_ONLY, mad::GSI_QPN, psn);
            bth.ack_req = true;
            let ext = ExtHeaders {
                deth: Some(DethRepr {
                    qkey: mad::GSI_QKEY,
                    src_qp: mad::GSI_QPN,
                }),
                ..ExtHeaders::default()
            };
            if let Some(mut t) =
                path.emit(bth, ext, MAD_LEN, buf, |d| d.copy_from_slice(&o.mad[..]))
            {
                self.cm.counters.tx_mads += 1;
                // Whose it is at the destination, for a backend shared by
                // processes there (docs/host.md).
                t.mad_owner = CmMessage::parse_mad(&o.mad[..])
                    .ok()
                    .and_then(|(_, m)| peer::named_owner(&m));
                return Some(t);
            }
            self.cm.counters.dropped += 1;
        }
        None
    }
}

/// rdma_cm's private data of a REQ or SIDR_REQ: its IP header (the source
/// port derived from the connection's ID) and then the consumer's bytes
/// (whose length the callers checked against `pd`).
fn cma_private(
    pd: &mut [u8],
    id: u32,
    local: IpAddr,
    dst: IpAddr,
    user: &[u8],
) -> Result<(), VerbsError> {
    let cma = CmaHeader {
        src_port: CmId(id).source_port(),
        src: local,
        dst,
    };
    cma.emit(pd)
        .map_err(|_| VerbsError::InvalidArgument("address"))?;
    pd[CMA_HEADER_LEN..CMA_HEADER_LEN + user.len()].copy_from_slice(user);
    Ok(())
}

fn mtu_code(mtu: u32) -> u8 {
    match mtu {
        256 => 1,
        512 => 2,
        1024 => 3,
        2048 => 4,
        _ => 5,
    }
}

/// Private data without its zero padding (the wire does not carry a
/// length; consumers that need exact lengths put them in their data).
fn trim_zeros(d: &[u8]) -> &[u8] {
    let end = d.iter().rposition(|&b| b != 0).map_or(0, |i| i + 1);
    &d[..end]
}

#[cfg(test)]
mod tests;
