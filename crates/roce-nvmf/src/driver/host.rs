//! A host (initiator) over roce-verbs: connects an admin queue and I/O
//! queues as Linux's nvme-rdma does (RDMA CM private data, Connect with
//! the data through a keyed buffer on the admin queue and in the capsule
//! on I/O queues), enables the controller and runs commands one at a time
//! per queue.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::time::{Duration, Instant};

use roce_verbs::{
    Access, CmConnection, CompletionQueue, ConnParam, ConnectOptions, Context, MemoryRegion,
    ProtectionDomain, QpInitAttr, QpType, QueuePair, SendWr, WcOpcode,
};

use super::DriverError;
use crate::initiator::{self as ini, CidAllocator, KeepAliveTimer};
use crate::target::{ADMIN_QUEUE_DEPTH, DISCOVERY_NQN};
use crate::wire::cm::{CmAccept, RECFMT_1_0};
use crate::wire::cqe::{CqeRepr, CQE_LEN};
use crate::wire::fabrics::prop;
use crate::wire::features::fid;
use crate::wire::identify::{cns, IdentifyController, IdentifyNamespace, IDENTIFY_LEN};
use crate::wire::sgl::SglDesc;
use crate::wire::sqe::SQE_LEN;
use crate::wire::status::Status;
use crate::wire::{Cid, Cntlid, Nsid, Qid, Rkey};

/// How to connect.
#[derive(Debug, Clone)]
pub struct HostOptions {
    /// Subsystem NQN to connect to.
    pub subnqn: String,
    /// This host's NQN.
    pub hostnqn: String,
    /// This host's identifier.
    pub hostid: [u8; 16],
    /// I/O queue depth (HSQSIZE + 1).
    pub queue_depth: u16,
    /// I/O queues to ask for (at least 1; the controller may grant fewer).
    pub io_queues: u16,
    /// Keep Alive Timeout in ms sent in the admin Connect.
    pub kato_ms: u32,
    /// How long to wait for the CM and for each response.
    pub timeout: Duration,
}

impl HostOptions {
    /// Options for `subnqn` with defaults: depth 32, KATO 5 s (Linux's
    /// default), 5 s timeouts.
    pub fn new(subnqn: &str, hostnqn: &str) -> HostOptions {
        HostOptions {
            subnqn: subnqn.into(),
            hostnqn: hostnqn.into(),
            hostid: [0x5A; 16],
            queue_depth: 32,
            io_queues: 1,
            kato_ms: 5000,
            timeout: Duration::from_secs(5),
        }
    }
}

/// A command in flight: what comes back to the caller, and the data
/// buffer the target reads or writes (registered until the response).
struct InFlight {
    tag: u64,
    mr: Option<MemoryRegion>,
    read_back: bool,
}

/// A finished command of [`Host::submit_read`] / [`Host::submit_write`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IoDone {
    /// The caller's tag.
    pub tag: u64,
    /// The completion status.
    pub status: Status,
    /// The data of a successful read.
    pub data: Option<Vec<u8>>,
}

/// Work request IDs of receives have this bit set; sends do not.
const RECV_BIT: u64 = 1 << 63;

struct Queue {
    qid: Qid,
    qp: QueuePair,
    cq: CompletionQueue,
    cm: Option<CmConnection>,
    cids: CidAllocator,
    next_wr: u64,
    in_capsule_max: usize,
    inflight: BTreeMap<u16, InFlight>,
    /// Responses to commands run with [`Queue::exec`] while others are
    /// in flight, and the reverse, kept until asked for.
    done: Vec<(InFlight, CqeRepr)>,
}

impl Queue {
    fn open(
        pd: &ProtectionDomain,
        peer: IpAddr,
        port: u16,
        qid: Qid,
        depth: u16,
        timeout: Duration,
    ) -> Result<Queue, DriverError> {
        let cq = pd.context().create_cq(depth as usize * 4 + 8, None)?;
        let qp = pd.create_qp(&QpInitAttr::new(QpType::Rc, &cq, &cq))?;
        // One receive per command that can be outstanding, posted before
        // the REQ (the QP in INIT), as Linux's host posts its response
        // ring.
        qp.to_init(&ConnectOptions::default())?;
        for i in 0..depth as u64 {
            qp.post_recv_owned(RECV_BIT | i, vec![0; CQE_LEN])?;
        }
        let param = ConnParam {
            private_data: ini::cm_request(qid, depth).to_vec(),
            ..ConnParam::default()
        };
        let cm = qp.cm_connect(peer, port, &param, timeout)?;
        let acc = CmAccept::parse(cm.private_data())
            .map_err(|_| DriverError::Protocol("accept record"))?;
        if acc.recfmt != RECFMT_1_0 || acc.crqsize == 0 {
            return Err(DriverError::Protocol("accept record"));
        }
        Ok(Queue {
            qid,
            qp,
            cq,
            cm: Some(cm),
            cids: CidAllocator::new(depth),
            next_wr: 1,
            in_capsule_max: 0,
            inflight: BTreeMap::new(),
            done: Vec::new(),
        })
    }

    /// Sends a command capsule (its CID replaced by a free one) with
    /// `f` to remember; the response comes from [`Queue::poll`].
    fn submit(&mut self, mut capsule: Vec<u8>, f: InFlight) -> Result<Cid, DriverError> {
        let cid = self
            .cids
            .alloc()
            .ok_or(DriverError::Protocol("queue full"))?;
        capsule[2..4].copy_from_slice(&cid.0.to_le_bytes());
        let id = self.next_wr;
        self.next_wr = (self.next_wr + 1) & !RECV_BIT;
        if let Err(e) = self.qp.post_send_owned(SendWr::send(id, []), capsule) {
            self.cids.free(cid);
            return Err(e.into());
        }
        self.inflight.insert(cid.0, f);
        Ok(cid)
    }

    /// Collects responses for up to `wait`; each arrives with what
    /// [`Queue::submit`] was given.
    fn poll(&mut self, wait: Duration) -> Result<(), DriverError> {
        for mut wc in self.cq.poll_until(1, wait)? {
            if !wc.is_success() {
                return Err(DriverError::Protocol("work completion in error"));
            }
            if wc.wr_id() & RECV_BIT == 0 || wc.opcode() != WcOpcode::Recv {
                continue;
            }
            let mut b = wc.take_buffer().unwrap_or_default();
            let n = (wc.byte_len() as usize).min(b.len());
            let c = CqeRepr::parse(&b[..n]).map_err(|_| DriverError::Protocol("short response"))?;
            b.fill(0);
            self.qp.post_recv_owned(wc.wr_id(), b)?;
            if c.sqid != self.qid.0 {
                return Err(DriverError::Protocol("response for another queue"));
            }
            let f = self
                .inflight
                .remove(&c.cid.0)
                .ok_or(DriverError::Protocol("response for a command not sent"))?;
            self.cids.free(c.cid);
            self.done.push((f, c));
        }
        Ok(())
    }

    /// Sends one command and waits for its response.
    fn exec(&mut self, capsule: Vec<u8>, timeout: Duration) -> Result<CqeRepr, DriverError> {
        let tag = u64::MAX;
        let cid = self.submit(
            capsule,
            InFlight {
                tag,
                mr: None,
                read_back: false,
            },
        )?;
        let end = Instant::now() + timeout;
        loop {
            if let Some(i) = self
                .done
                .iter()
                .position(|(f, c)| f.tag == tag && c.cid == cid)
            {
                return Ok(self.done.swap_remove(i).1);
            }
            let left = end
                .checked_duration_since(Instant::now())
                .ok_or(DriverError::TimedOut)?;
            self.poll(left.min(Duration::from_millis(50)))?;
        }
    }
}

fn ok(c: CqeRepr) -> Result<CqeRepr, DriverError> {
    if c.status.is_success() {
        Ok(c)
    } else {
        Err(DriverError::Nvme(c.status))
    }
}

/// A connected controller: its admin queue and its I/O queues (none for
/// a discovery controller).
pub struct Host {
    pd: ProtectionDomain,
    admin: Queue,
    io: Vec<Queue>,
    cntlid: Cntlid,
    timeout: Duration,
    ident: IdentifyController,
    epoch: Instant,
    ka: KeepAliveTimer,
}

impl core::fmt::Debug for Host {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Host")
            .field("cntlid", &self.cntlid)
            .finish()
    }
}

/// Connects to `subnqn` at `peer`:`port`: admin queue, Connect, CC.EN,
/// Identify Controller, and (for an NVM subsystem) Set Features Number of
/// Queues and one I/O queue.
pub fn connect(
    ctx: &Context,
    peer: IpAddr,
    port: u16,
    o: &HostOptions,
) -> Result<Host, DriverError> {
    let pd = ctx.alloc_pd();
    let mut admin = Queue::open(&pd, peer, port, Qid::ADMIN, ADMIN_QUEUE_DEPTH, o.timeout)?;
    // Admin Connect: data through a keyed buffer (the admin queue has no
    // in-capsule data).
    let data = ini::connect_data(o.hostid, Cntlid::DYNAMIC, &o.subnqn, &o.hostnqn);
    let (mr, sgl) = register(&pd, data)?;
    let c = admin.exec(
        ini::connect(Cid(0), Qid::ADMIN, ADMIN_QUEUE_DEPTH - 1, o.kato_ms, sgl).to_vec(),
        o.timeout,
    );
    drop(mr);
    let cntlid = Cntlid(ok(c?)?.dw0 as u16);
    ok(admin.exec(
        ini::property_set(Cid(0), prop::CC, 0x0046_0001).to_vec(),
        o.timeout,
    )?)?;
    let start = Instant::now();
    loop {
        let csts = ok(admin.exec(
            ini::property_get(Cid(0), prop::CSTS, false).to_vec(),
            o.timeout,
        )?)?;
        if csts.dw0 & 1 == 1 {
            break;
        }
        if csts.dw0 & 2 != 0 || start.elapsed() > o.timeout {
            return Err(DriverError::Protocol("controller did not become ready"));
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    let mut host = Host {
        pd,
        admin,
        io: Vec::new(),
        cntlid,
        timeout: o.timeout,
        ident: IdentifyController::parse(&[0; IDENTIFY_LEN])
            .map_err(|_| DriverError::Protocol("identify"))?,
        epoch: start,
        ka: KeepAliveTimer::new(o.kato_ms, start.elapsed()),
    };
    let b = host.admin_data(
        ini::identify(Cid(0), cns::CONTROLLER, Nsid(0), null_sgl()),
        IDENTIFY_LEN,
    )?;
    host.ident = IdentifyController::parse(&b).map_err(|_| DriverError::Protocol("identify"))?;
    if o.subnqn == DISCOVERY_NQN {
        return Ok(host);
    }
    // The same checks as Linux's host (drivers/nvme/host/rdma.c).
    if host.ident.icdoff != 0 || host.ident.sgls & (1 << 2) == 0 {
        return Err(DriverError::Protocol(
            "controller without ICDOFF 0 and keyed SGLs",
        ));
    }
    // Number of Queues, 0's based both ways; the grant is the smaller
    // half of DW0 (as Linux reads it).
    let want = o.io_queues.clamp(1, 0xFFFE) - 1;
    let r = ok(host.admin.exec(
        ini::set_features(
            Cid(0),
            fid::NUMBER_OF_QUEUES,
            (want as u32) << 16 | want as u32,
        )
        .to_vec(),
        o.timeout,
    )?)?;
    let granted = ((r.dw0 & 0xFFFF).min(r.dw0 >> 16) as u16).min(want) + 1;
    let depth = o.queue_depth.clamp(2, host.ident.maxcmd.max(2));
    for qid in 1..=granted {
        let mut io = Queue::open(&host.pd, peer, port, Qid(qid), depth, o.timeout)?;
        let data = ini::connect_data(o.hostid, cntlid, &o.subnqn, &o.hostnqn);
        let sqe = ini::connect(Cid(0), Qid(qid), depth - 1, 0, null_sgl());
        ok(io.exec(ini::with_in_capsule_data(sqe, &data), o.timeout)?)?;
        io.in_capsule_max = (host.ident.ioccsz as usize * 16).saturating_sub(SQE_LEN);
        if host.ident.sgls & (1 << 20) == 0 {
            io.in_capsule_max = 0;
        }
        host.io.push(io);
    }
    Ok(host)
}

fn null_sgl() -> SglDesc {
    SglDesc::Keyed {
        addr: 0,
        len: 0,
        key: Rkey(0),
        invalidate: false,
    }
}

fn register(pd: &ProtectionDomain, data: Vec<u8>) -> Result<(MemoryRegion, SglDesc), DriverError> {
    let access = Access::LOCAL_WRITE
        .with(Access::REMOTE_READ)
        .with(Access::REMOTE_WRITE);
    let len = data.len() as u32;
    let mr = pd.reg_mr(data, access)?;
    let sgl = SglDesc::Keyed {
        addr: mr.addr(),
        len,
        key: Rkey(mr.rkey().value()),
        invalidate: false,
    };
    Ok((mr, sgl))
}

impl Host {
    /// The controller ID.
    pub fn cntlid(&self) -> Cntlid {
        self.cntlid
    }

    /// The largest data transfer of one command (MDTS, in units of the
    /// 4 KiB minimum page size; `None` when the controller sets no limit).
    pub fn max_transfer(&self) -> Option<usize> {
        match self.ident.mdts {
            0 => None,
            m => Some(4096usize << m.min(20)),
        }
    }

    /// The Identify Controller data read at connect time.
    pub fn identify(&self) -> &IdentifyController {
        &self.ident
    }

    /// Sends Keep Alive if half the KATO has passed since the last one
    /// (the driver has no thread of its own: every command calls this
    /// first, and a caller idle for longer calls it itself). Returns
    /// whether one was sent.
    pub fn keep_alive_if_due(&mut self) -> Result<bool, DriverError> {
        if !self.ka.on_timeout(self.epoch.elapsed()) {
            return Ok(false);
        }
        ok(self
            .admin
            .exec(ini::keep_alive(Cid(0)).to_vec(), self.timeout)?)?;
        Ok(true)
    }

    /// Runs an admin command whose `len` bytes of data come back through a
    /// keyed buffer.
    pub fn admin_data(&mut self, sqe: [u8; SQE_LEN], len: usize) -> Result<Vec<u8>, DriverError> {
        self.keep_alive_if_due()?;
        let (mr, sgl) = register(&self.pd, vec![0; len])?;
        let mut sqe = sqe;
        sgl.emit(&mut sqe[24..40]);
        ok(self.admin.exec(sqe.to_vec(), self.timeout)?)?;
        Ok(mr.to_vec()?)
    }

    /// Identify Namespace `nsid`.
    pub fn identify_namespace(&mut self, nsid: Nsid) -> Result<IdentifyNamespace, DriverError> {
        let b = self.admin_data(
            ini::identify(Cid(0), cns::NAMESPACE, nsid, null_sgl()),
            IDENTIFY_LEN,
        )?;
        IdentifyNamespace::parse(&b).map_err(|_| DriverError::Protocol("identify namespace"))
    }

    /// Keep Alive.
    pub fn keep_alive(&mut self) -> Result<(), DriverError> {
        ok(self
            .admin
            .exec(ini::keep_alive(Cid(0)).to_vec(), self.timeout)?)
        .map(|_| ())
    }

    fn io(&mut self) -> Result<&mut Queue, DriverError> {
        self.io_for(0)
    }

    /// The I/O queue of commands tagged `tag` (tag modulo the queues).
    fn io_for(&mut self, tag: u64) -> Result<&mut Queue, DriverError> {
        let n = self.io.len() as u64;
        if n == 0 {
            return Err(DriverError::Protocol("no I/O queue"));
        }
        Ok(&mut self.io[(tag % n) as usize])
    }

    /// How many I/O queues are connected.
    pub fn io_queues(&self) -> usize {
        self.io.len()
    }

    /// Reads `nlb` blocks of `block_size` bytes at `slba` into a keyed
    /// buffer (RDMA WRITE by the target).
    pub fn read(
        &mut self,
        nsid: Nsid,
        slba: u64,
        nlb: u16,
        block_size: u32,
    ) -> Result<Vec<u8>, DriverError> {
        self.keep_alive_if_due()?;
        let (mr, sgl) = register(&self.pd, vec![0; nlb as usize * block_size as usize])?;
        let t = self.timeout;
        ok(self
            .io()?
            .exec(ini::read(Cid(0), nsid, slba, nlb, sgl).to_vec(), t)?)?;
        Ok(mr.to_vec()?)
    }

    /// Writes `data` (whole blocks of `block_size`) at `slba`: in the
    /// capsule when it fits and `in_capsule` is set, else from a keyed
    /// buffer (RDMA READ by the target).
    pub fn write(
        &mut self,
        nsid: Nsid,
        slba: u64,
        data: &[u8],
        block_size: u32,
        in_capsule: bool,
    ) -> Result<(), DriverError> {
        self.keep_alive_if_due()?;
        let nlb = u16::try_from(data.len() / block_size.max(1) as usize)
            .map_err(|_| DriverError::Protocol("too many blocks"))?;
        let t = self.timeout;
        let q = self.io()?;
        if in_capsule && data.len() <= q.in_capsule_max {
            let sqe = ini::write(Cid(0), nsid, slba, nlb, false, null_sgl());
            return ok(q.exec(ini::with_in_capsule_data(sqe, data), t)?).map(|_| ());
        }
        let (_mr, sgl) = register(&self.pd, data.to_vec())?;
        let q = self.io()?;
        ok(q.exec(ini::write(Cid(0), nsid, slba, nlb, false, sgl).to_vec(), t)?).map(|_| ())
    }

    /// Starts a read of `nlb` blocks at `slba` without waiting; its
    /// [`IoDone`] (with the data) comes from [`Host::poll_io`]. `tag` is
    /// the caller's (any value but `u64::MAX`) and picks the I/O queue
    /// (tag modulo their number). Fails with a protocol error when that
    /// queue is full.
    pub fn submit_read(
        &mut self,
        nsid: Nsid,
        slba: u64,
        nlb: u16,
        block_size: u32,
        tag: u64,
    ) -> Result<(), DriverError> {
        self.keep_alive_if_due()?;
        let (mr, sgl) = register(&self.pd, vec![0; nlb as usize * block_size as usize])?;
        let f = InFlight {
            tag,
            mr: Some(mr),
            read_back: true,
        };
        self.io_for(tag)?
            .submit(ini::read(Cid(0), nsid, slba, nlb, sgl).to_vec(), f)
            .map(|_| ())
    }

    /// Starts a write of `data` at `slba` without waiting (in the capsule
    /// when it fits and `in_capsule` is set, else from a registered
    /// buffer kept until the response).
    pub fn submit_write(
        &mut self,
        nsid: Nsid,
        slba: u64,
        data: &[u8],
        block_size: u32,
        in_capsule: bool,
        tag: u64,
    ) -> Result<(), DriverError> {
        self.keep_alive_if_due()?;
        let nlb = u16::try_from(data.len() / block_size.max(1) as usize)
            .map_err(|_| DriverError::Protocol("too many blocks"))?;
        let fits = self
            .io
            .first()
            .is_some_and(|q| data.len() <= q.in_capsule_max);
        if in_capsule && fits {
            let sqe = ini::write(Cid(0), nsid, slba, nlb, false, null_sgl());
            let f = InFlight {
                tag,
                mr: None,
                read_back: false,
            };
            return self
                .io_for(tag)?
                .submit(ini::with_in_capsule_data(sqe, data), f)
                .map(|_| ());
        }
        let (mr, sgl) = register(&self.pd, data.to_vec())?;
        let f = InFlight {
            tag,
            mr: Some(mr),
            read_back: false,
        };
        self.io_for(tag)?
            .submit(ini::write(Cid(0), nsid, slba, nlb, false, sgl).to_vec(), f)
            .map(|_| ())
    }

    /// Commands started with `submit_*` and not yet returned by
    /// [`Host::poll_io`].
    pub fn io_in_flight(&self) -> usize {
        self.io
            .iter()
            .map(|q| q.inflight.len() + q.done.iter().filter(|(f, _)| f.tag != u64::MAX).count())
            .sum()
    }

    /// Commands that may be in flight at once, all I/O queues together.
    pub fn io_depth(&self) -> usize {
        self.io.iter().map(|q| q.cids.capacity()).sum()
    }

    /// Waits up to `wait` for responses and appends the finished
    /// commands to `out`; returns how many.
    pub fn poll_io(&mut self, out: &mut Vec<IoDone>, wait: Duration) -> Result<usize, DriverError> {
        if self.io.is_empty() {
            return Err(DriverError::Protocol("no I/O queue"));
        }
        let per = wait / self.io.len() as u32;
        let mut n = 0;
        for q in &mut self.io {
            if q.done.iter().all(|(f, _)| f.tag == u64::MAX) {
                q.poll(per)?;
            }
            let done = core::mem::take(&mut q.done);
            for (f, c) in done {
                if f.tag == u64::MAX {
                    q.done.push((f, c));
                    continue;
                }
                let data = match (&f.mr, f.read_back && c.status.is_success()) {
                    (Some(mr), true) => Some(mr.to_vec()?),
                    _ => None,
                };
                out.push(IoDone {
                    tag: f.tag,
                    status: c.status,
                    data,
                });
                n += 1;
            }
        }
        Ok(n)
    }

    /// Flush.
    pub fn flush(&mut self, nsid: Nsid) -> Result<(), DriverError> {
        self.keep_alive_if_due()?;
        let t = self.timeout;
        ok(self.io()?.exec(ini::flush(Cid(0), nsid).to_vec(), t)?).map(|_| ())
    }

    /// Disconnects the I/O queues, then the admin queue (after CC.SHN, as a
    /// host shutting down does).
    pub fn disconnect(mut self) -> Result<(), DriverError> {
        let t = self.timeout;
        for mut q in self.io.drain(..) {
            if let Some(cm) = q.cm.take() {
                let _ = cm.disconnect(t);
            }
        }
        let _ = self
            .admin
            .exec(ini::property_set(Cid(0), prop::CC, 0x0046_4001).to_vec(), t);
        if let Some(cm) = self.admin.cm.take() {
            let _ = cm.disconnect(t);
        }
        Ok(())
    }
}

/// The status of a failed command, for callers that match on it.
pub fn nvme_status(e: &DriverError) -> Option<Status> {
    match e {
        DriverError::Nvme(s) => Some(*s),
        _ => None,
    }
}
