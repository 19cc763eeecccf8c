//! One side of a run: its context (see [`super::backend`]), the memory
//! layout, and the exchange that connects the QPs of both sides.

use std::net::IpAddr;

use roce_verbs::{
    Access, CompletionQueue, ConnectOptions, Context, MemoryRegion, ProtectionDomain, Psn, QpCaps,
    QpEndpoint, QpInitAttr, QpType, QueuePair, RemoteMr, Rkey,
};
use serde_json::{json, Value};

use super::args::{BackendKind, PerfArgs};
use super::backend::{link_path_mtu, open_moving, prime_neighbours};
use super::control::Endpoint;
use super::error::PerfError;
use super::lane::Lane;
use super::messages::layout;
use super::messages::Params;
use super::native::NativePlane;
use super::plane::{ControlPlane, Endpoints};

/// The peer's QPs are where this side sends: they must be at the peer's
/// own address (the one on the control connection), unless this side
/// uses GID addressing (-x), where the GIDs of both sides may be other
/// addresses of theirs; otherwise a hello could aim this side's traffic
/// at a third host. One exception: a peer reached on a loopback address
/// may put its QPs on another loopback address (of this host, then): a
/// side that chose its loopback address itself moves to a free one when
/// another stack holds it ([`crate::device::loopback_server_local`],
/// [`super::backend::open_moving`]).
fn check_addresses(
    gid_index: Option<u8>,
    remote: &[Endpoint],
    peer: Option<IpAddr>,
) -> Result<(), PerfError> {
    let remote = remote.iter().map(|r| (r.qpn, r.addr));
    crate::device::check_peer_qps(gid_index.is_some(), remote, peer, "-x").map_err(PerfError::from)
}

/// Both ends' GIDs in one IP family ([`crate::device::family_mismatch`]).
fn check_family(
    args: &PerfArgs,
    local: IpAddr,
    remote: &[Endpoint],
    is_client: bool,
) -> Result<(), PerfError> {
    for r in remote {
        let pair = crate::device::GidPair {
            me: if is_client {
                "the client"
            } else {
                "the server"
            },
            local,
            index: args.gid_index.map(usize::from),
            remote: r.addr,
            flag: "-x",
            dev: args.dev.as_deref(),
        };
        if let Some(e) = crate::device::family_mismatch(&pair) {
            return Err(PerfError::Failed(e));
        }
    }
    Ok(())
}

/// One side's resources for a test.
pub(crate) struct Session {
    pub(crate) params: Params,
    pub(crate) is_client: bool,
    pub(crate) ctx: Context,
    /// The CQ of every QP's sends and receives (perftest's QPs share
    /// theirs too): the loops poll it once a round.
    pub(crate) cq: CompletionQueue,
    pub(crate) qps: Vec<QueuePair>,
    pub(crate) mr: MemoryRegion,
    /// Bytes per QP in `mr`: [0, max) the area the peer accesses,
    /// [max, 2·max) this side's own source/destination, then the receive ring.
    pub(crate) slot: u64,
    pub(crate) max_size: u64,
    /// Receive buffers per QP (SEND tests).
    pub(crate) ring: u64,
    /// The peer's endpoints, one per QP.
    pub(crate) remote: Vec<Endpoint>,
    /// This side's endpoints, one per QP (what the peer was sent).
    pub(crate) local: Vec<Endpoint>,
    /// Mixed into the pattern expected from the peer: 0, except in the
    /// tests that prove a wrong payload fails the run (`--verify-salt`).
    peer_salt: u64,
    /// Progress lines while a size runs ([`super::progress::interval`]).
    pub(crate) progress_every: Option<std::time::Duration>,
    _pd: ProtectionDomain,
}

/// The fill pattern of side `seed` (the same function verifies it).
/// Seeds that differ in any bit give different patterns (the seed is
/// mixed before it meets the bits the bytes are taken from), so the two
/// sides, whose seeds differ in the lowest bit, never send the same data.
pub(crate) fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mixed = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    (0..len as u64)
        .map(|i| (i.wrapping_mul(0x9e37_79b1).wrapping_add(mixed) >> 13) as u8)
        .collect()
}

impl Session {
    /// Creates the resources, exchanges endpoints and connects the QPs.
    pub(crate) fn open(
        args: &PerfArgs,
        params: &Params,
        local: IpAddr,
        fabric: Option<&roce_io::Fabric>,
        plane: &mut NativePlane<'_>,
        is_client: bool,
    ) -> Result<Session, PerfError> {
        // perftest's rule: a path MTU above what the link carries is
        // lowered to the largest that fits; both sides use the smaller.
        let mtu = params.mtu.min(link_path_mtu(args, local)?);
        // A side that chose its loopback address itself (no --bind, no
        // -x, or a client that moved off its server's with ROCE_SHM=0)
        // moves on if a stack that does not share it holds it; its
        // endpoints say where it is.
        let moves = args.local_moves
            || (args.bind.is_none_or(|b| b.is_unspecified()) && args.gid_index.is_none());
        let avoid: Vec<IpAddr> = plane.ctl.peer_ip().into_iter().collect();
        let (ctx, local) = open_moving(args, local, mtu, fabric, moves, &avoid, args.json)?;
        let pd = ctx.alloc_pd();
        let nq = params.qps as u64;
        let (max_size, ring, slot) = layout(params);
        let depth = params.tx_depth as usize * 2 + ring as usize + 64;
        // Room for twice what can be outstanding, within the device's
        // largest CQ (-q 256 -t 4096 asks for more than it has).
        // One CQ for every QP, as perftest's: a BW loop polls it once a
        // round and routes completions by QP number (`lane::CqSet`).
        let cq = ctx.create_cq((depth * nq as usize * 2).min(4 << 20), None)?;
        // The area peers access holds this side's pattern (READ sources).
        let mut mem = vec![0u8; (slot * nq) as usize];
        let own = pattern(params.seed ^ is_client as u64, max_size as usize);
        for q in 0..nq as usize {
            let at = q * slot as usize;
            mem[at..at + max_size as usize].copy_from_slice(&own);
            mem[at + max_size as usize..at + 2 * max_size as usize].copy_from_slice(&own);
        }
        if params.test.is_atomic() {
            for q in 0..nq as usize {
                mem[q * slot as usize..q * slot as usize + 8].fill(0);
            }
        }
        let access = Access::LOCAL_WRITE
            | Access::REMOTE_WRITE
            | Access::REMOTE_READ
            | Access::REMOTE_ATOMIC;
        let mr = pd
            .reg_mr(mem, access)
            .map_err(super::during("cannot register memory"))?;
        let cap = QpCaps {
            max_send_wr: params.tx_depth + 16,
            max_recv_wr: ring as u32 + 16,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 256,
        };
        let mut qps = Vec::new();
        for _ in 0..nq {
            let attr = QpInitAttr::new(QpType::Rc, &cq, &cq).cap(cap);
            qps.push(
                pd.create_qp(&attr)
                    .map_err(super::during("cannot create a QP"))?,
            );
        }
        // Starting PSNs from the operating system's randomness, not from
        // the seed (which the hello carries in clear).
        let mine: Vec<Endpoint> = qps
            .iter()
            .map(|qp| {
                let psn = roce_verbs::random_psn()?;
                Ok::<_, PerfError>((qp, psn.value()))
            })
            .collect::<Result<Vec<_>, PerfError>>()?
            .into_iter()
            .enumerate()
            .map(|(i, (qp, psn))| Endpoint {
                qpn: qp.qpn().value(),
                psn,
                addr: local,
                rkey: mr.rkey().value(),
                vaddr: mr.addr() + i as u64 * slot,
                len: slot,
            })
            .collect();
        // The client checks the server's endpoints before it answers, so
        // that a mismatch is said once, by the side that sees it first.
        let peer = plane.ctl.peer_ip();
        let check = |remote: &[Endpoint]| {
            check_family(args, local, remote, is_client)?;
            check_addresses(args.gid_index, remote, peer)
        };
        let mine = Endpoints { qps: mine, mtu };
        let theirs = plane.exchange(&mine, &check)?;
        let (mine, remote, theirs_mtu) = (mine.qps, theirs.qps, theirs.mtu);
        if remote.len() != qps.len() {
            return Err(PerfError::Failed(format!(
                "the peer has {} QPs, this side {}",
                remote.len(),
                qps.len()
            )));
        }
        if args.backend == BackendKind::Packet {
            prime_neighbours(local, &remote);
        }
        let mtu = mtu.min(theirs_mtu);
        if mtu < params.mtu && is_client && !args.json {
            eprintln!(
                "roce perf: requested MTU {} is above what the path carries; using {mtu}",
                params.mtu
            );
        }
        let mut params = params.clone();
        params.mtu = mtu;
        let opts = ConnectOptions {
            path_mtu: Some(mtu),
            // Finite retries, so a dead peer ends the run with RETRY_EXC_ERR
            // (retry_cnt 7 would retry forever, as in rxe): 7 × 268 ms.
            retry_cnt: 6,
            timeout: 16,
            ..ConnectOptions::default()
        };
        for (qp, (m, r)) in qps.iter().zip(mine.iter().zip(&remote)) {
            let ep = QpEndpoint {
                qpn: roce_verbs::Qpn::new(r.qpn),
                psn: Psn::new(r.psn),
                addr: r.addr,
                mr: Some(RemoteMr {
                    addr: r.vaddr,
                    rkey: Rkey::new(r.rkey),
                    len: r.len,
                }),
            };
            qp.connect(Psn::new(m.psn), &ep, &opts)
                .map_err(super::during(format!("cannot connect QP {}", m.qpn)))?;
        }
        plane.ctl.barrier("connected")?;
        plane.int.set_up();
        Ok(Session {
            params,
            is_client,
            ctx,
            cq,
            qps,
            mr,
            slot,
            max_size,
            ring,
            remote,
            local: mine,
            peer_salt: args.verify_salt,
            progress_every: super::progress::interval(args),
            _pd: pd,
        })
    }

    /// This side's counters for `--json`: the engine's device counters,
    /// the backend's (named as `roce_io` names them) and each QP's.
    pub(crate) fn counters_json(&self) -> Value {
        let d = self.ctx.counters();
        let backend: serde_json::Map<String, Value> = self
            .ctx
            .backend_counters()
            .into_iter()
            .map(|(k, v)| (k.to_string(), json!(v)))
            .collect();
        let qps: Vec<Value> = self
            .qps
            .iter()
            .map(|q| {
                let c = q.counters();
                json!({"qpn": q.qpn().value(), "tx_packets": c.tx_packets, "rx_packets": c.rx_packets,
                       "retransmitted": c.retransmitted, "timeouts": c.timeouts,
                       "seq_naks_sent": c.seq_naks_sent, "seq_naks_received": c.seq_naks_received,
                       "rnr_naks_sent": c.rnr_naks_sent, "rnr_naks_received": c.rnr_naks_received,
                       "acks_sent": c.acks_sent, "acks_after_answer": c.acks_after_answer,
                       "ack_deadlines": c.ack_deadlines, "duplicates": c.duplicates})
            })
            .collect();
        // Every received ICRC is the engine's to check (docs/protocol.md
        // §4): verified (over the whole header, or, for IPv4 from a UDP
        // socket, which never shows the IP ID the ICRC covers, assuming
        // the ID 0 or a GSO segment's: a part of `verified`), failed
        // (dropped), taken unverified, or taken on trust as an engine's
        // untouched datagram off the same-host ring (`host_trusted`, not a
        // part of `verified`). `same_host` says how many came through the
        // same-host path (docs/shm.md).
        let b = |k: &str| backend.get(k).and_then(Value::as_u64).unwrap_or(0);
        let same_host = b("udp_shm_rx_datagrams");
        let verified = d.rx_datagrams.saturating_sub(
            d.rx_malformed + d.rx_icrc_unverified + d.rx_bad_icrc + d.rx_icrc_host_trusted,
        );
        let icrc = json!({
            "verified": verified,
            "verified_assuming_ip_id": d.rx_icrc_assumed_ipv4_id,
            "failed": d.rx_bad_icrc,
            "same_host": same_host,
            "host_trusted": d.rx_icrc_host_trusted,
            "not_verified": d.rx_icrc_unverified,
        });
        json!({
            "icrc": icrc,
            "device": {"rx_datagrams": d.rx_datagrams, "rx_malformed": d.rx_malformed,
                       "rx_bad_icrc": d.rx_bad_icrc, "rx_icrc_unverified": d.rx_icrc_unverified,
                       "rx_icrc_assumed_ipv4_id": d.rx_icrc_assumed_ipv4_id,
                       "rx_icrc_host_trusted": d.rx_icrc_host_trusted,
                       "rx_unknown_qp": d.rx_unknown_qp, "rx_cnp": d.rx_cnp,
                       "tx_datagrams": d.tx_datagrams,
                       "tx_icrc_deferred": d.tx_icrc_deferred},
            "backend": backend,
            "qps": qps,
        })
    }

    /// QP `q` as a traffic loop uses it: the peer's area, this side's
    /// source after it, then the receive ring (the layout of
    /// [`layout`]).
    pub(crate) fn lane(&self, q: usize) -> Lane<'_> {
        let base = self.slot_off(q);
        Lane {
            mr: &self.mr,
            cq: &self.cq,
            qp: &self.qps[q],
            target: base,
            source: base + self.max_size,
            ring: base + 2 * self.max_size,
            ring_bytes: self.ring * self.max_size,
            slots: self.ring,
        }
    }

    /// Offset in `mr` of QP `q`'s slot.
    pub(crate) fn slot_off(&self, q: usize) -> u64 {
        q as u64 * self.slot
    }

    /// The peer's pattern (what its accessible area holds).
    pub(crate) fn peer_pattern(&self, len: usize) -> Vec<u8> {
        pattern(
            self.params.seed ^ !self.is_client as u64 ^ self.peer_salt,
            len,
        )
    }

    /// This side's pattern.
    pub(crate) fn own_pattern(&self, len: usize) -> Vec<u8> {
        pattern(self.params.seed ^ self.is_client as u64, len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(addr: &str) -> Vec<Endpoint> {
        vec![Endpoint {
            qpn: 17,
            psn: 1,
            addr: addr.parse().unwrap(),
            rkey: 1,
            vaddr: 4096,
            len: 8192,
        }]
    }

    /// The peer's QPs must be at its control address; either side
    /// accepts a peer's QPs on another loopback address when it reached
    /// the peer on one (a side that moved off a taken address), never a
    /// loopback peer's elsewhere, nor a remote peer's on loopback.
    #[test]
    fn the_peers_qps_are_at_its_address() {
        let lo: IpAddr = "127.0.0.1".parse().unwrap();
        assert!(check_addresses(None, &at("127.0.0.1"), Some(lo)).is_ok());
        assert!(check_addresses(None, &at("127.0.0.3"), Some(lo)).is_ok());
        assert!(check_addresses(None, &at("::1"), Some(lo)).is_ok());
        let e = check_addresses(None, &at("192.0.2.9"), Some(lo)).unwrap_err();
        assert!(
            e.to_string()
                .contains("not at the peer's address 127.0.0.1"),
            "{e}"
        );
        let far: IpAddr = "192.0.2.1".parse().unwrap();
        assert!(check_addresses(None, &at("127.0.0.1"), Some(far)).is_err());
        // GID addressing (-x): the addresses may differ.
        assert!(check_addresses(Some(0), &at("192.0.2.9"), Some(lo)).is_ok());
    }
}
