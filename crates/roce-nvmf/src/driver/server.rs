//! The target core on RDMA CM connections: one RC queue pair and CQ per
//! NVMe queue, capsules received into owned buffers, the core's actions
//! posted as RDMA READ, RDMA WRITE and SEND (with Invalidate).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use roce_verbs::{
    CmAccepting, CmConnection, CmListener, CompletionQueue, ConnParam, ConnectOptions, Context,
    ProtectionDomain, QpCaps, QpInitAttr, QpType, QueuePair, RemoteAddr, Rkey, SendWr,
};

use super::DriverError;
use crate::target::{Action, ConnId, Target};
use crate::wire::sqe::SQE_LEN;
use crate::wire::Cid;

/// What a posted work request was for.
#[derive(Debug, Clone, Copy)]
enum Op {
    Recv(ConnId),
    Read(ConnId, Cid),
    Send(ConnId),
}

struct Conn {
    qp: QueuePair,
    cq: CompletionQueue,
    accepting: Option<CmAccepting>,
    cm: Option<CmConnection>,
}

/// A target served on a port: call [`TargetServer::poll`] in a loop (or
/// use [`serve`]).
pub struct TargetServer {
    listener: CmListener,
    pd: ProtectionDomain,
    target: Target,
    conns: BTreeMap<ConnId, Conn>,
    ops: BTreeMap<u64, Op>,
    next_wr: u64,
    start: Instant,
    recv_len: usize,
}

impl core::fmt::Debug for TargetServer {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("TargetServer")
            .field("connections", &self.conns.len())
            .finish()
    }
}

impl TargetServer {
    /// Listens on `port` (4420 is the NVMe-oF port) of `ctx`.
    pub fn new(ctx: &Context, port: u16, target: Target) -> Result<TargetServer, DriverError> {
        let listener = ctx.cm_listen(port)?;
        let recv_len = SQE_LEN + target.config().limits.in_capsule_data as usize;
        Ok(TargetServer {
            listener,
            pd: ctx.alloc_pd(),
            target,
            conns: BTreeMap::new(),
            ops: BTreeMap::new(),
            next_wr: 1,
            start: Instant::now(),
            recv_len,
        })
    }

    /// The target core.
    pub fn target(&self) -> &Target {
        &self.target
    }

    /// Gives the target core back.
    pub fn into_target(self) -> Target {
        self.target
    }

    fn wr(&mut self, op: Op) -> u64 {
        let id = self.next_wr;
        self.next_wr += 1;
        self.ops.insert(id, op);
        id
    }

    /// One round: new connection requests, established connections,
    /// completions, disconnects, deadlines, and the core's actions posted.
    /// Waits at most `wait` for a connection request. Returns whether
    /// anything happened.
    pub fn poll(&mut self, wait: Duration) -> Result<bool, DriverError> {
        let mut busy = false;
        if let Ok(req) = self.listener.get_request(wait) {
            busy = true;
            self.on_request(req)?;
        }
        let now = self.start.elapsed();
        let ids: Vec<ConnId> = self.conns.keys().copied().collect();
        let mut done = Vec::new();
        for id in ids {
            let Some(c) = self.conns.get_mut(&id) else {
                continue;
            };
            if let Some(a) = c.accepting.as_mut() {
                match a.wait(Duration::ZERO) {
                    Some(Ok(cm)) => {
                        c.cm = Some(cm);
                        c.accepting = None;
                    }
                    Some(Err(_)) => done.push(id),
                    None => {}
                }
            }
            if c.cm.as_ref().is_some_and(|cm| !cm.is_connected()) {
                done.push(id);
            }
            let mut wcs = Vec::new();
            c.cq.poll(&mut wcs, 64)?;
            for mut wc in wcs {
                busy = true;
                let Some(op) = self.ops.remove(&wc.wr_id()) else {
                    continue;
                };
                let buf = wc.take_buffer().unwrap_or_default();
                match op {
                    Op::Recv(conn) if wc.is_success() => {
                        let n = (wc.byte_len() as usize).min(buf.len());
                        self.target.on_capsule(conn, &buf[..n], now);
                        self.post_recv(conn, buf)?;
                    }
                    Op::Read(conn, cid) if wc.is_success() => {
                        self.target.on_host_data(conn, cid, &buf, now);
                    }
                    Op::Read(conn, cid) => self.target.on_transfer_error(conn, cid),
                    Op::Send(_) if wc.is_success() => {}
                    Op::Recv(conn) | Op::Send(conn) => done.push(conn),
                }
            }
        }
        for id in done {
            self.close(id);
        }
        if self.target.next_deadline().is_some_and(|d| d <= now) {
            self.target.on_timeout(now);
        }
        while let Some(a) = self.target.poll_action() {
            busy = true;
            self.perform(a)?;
        }
        Ok(busy)
    }

    fn on_request(&mut self, req: roce_verbs::CmRequest) -> Result<(), DriverError> {
        let pd_bytes = req.info().private_data.clone();
        let (conn, accept) = match self.target.on_cm_request(&pd_bytes) {
            Ok(x) => x,
            Err(reject) => return Ok(req.reject(&reject)?),
        };
        let depth = u16::from_le_bytes([accept[2], accept[3]]) as u32;
        let cq = self.pd.context().create_cq(depth as usize * 4 + 8, None)?;
        let caps = QpCaps {
            max_send_wr: depth * 3 + 4,
            max_recv_wr: depth + 1,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        };
        let qp = self
            .pd
            .create_qp(&QpInitAttr::new(QpType::Rc, &cq, &cq).cap(caps))?;
        // Receives are posted before the REP goes out (the QP in INIT), so
        // a capsule the host sends right after the RTU finds one.
        qp.to_init(&ConnectOptions::default())?;
        self.conns.insert(
            conn,
            Conn {
                qp: qp.clone(),
                cq,
                accepting: None,
                cm: None,
            },
        );
        for _ in 0..depth {
            self.post_recv(conn, vec![0; self.recv_len])?;
        }
        let param = ConnParam {
            private_data: accept.to_vec(),
            ..ConnParam::default()
        };
        match req.accept_nowait(&qp, &param) {
            Ok(a) => {
                if let Some(c) = self.conns.get_mut(&conn) {
                    c.accepting = Some(a);
                }
            }
            Err(_) => self.close(conn),
        }
        Ok(())
    }

    fn post_recv(&mut self, conn: ConnId, mut buf: Vec<u8>) -> Result<(), DriverError> {
        buf.resize(self.recv_len, 0);
        let id = self.wr(Op::Recv(conn));
        let Some(c) = self.conns.get(&conn) else {
            return Ok(());
        };
        c.qp.post_recv_owned(id, buf)?;
        Ok(())
    }

    fn perform(&mut self, a: Action) -> Result<(), DriverError> {
        let (conn, op, wr, buf) = match a {
            Action::ReadHost {
                conn,
                cid,
                addr,
                key,
                len,
            } => {
                let wr = SendWr::read(0, [], RemoteAddr::new(addr, Rkey::new(key.0)));
                (conn, Op::Read(conn, cid), wr, vec![0; len as usize])
            }
            Action::WriteHost {
                conn,
                addr,
                key,
                data,
                ..
            } => {
                let wr = SendWr::write(0, [], RemoteAddr::new(addr, Rkey::new(key.0)));
                (conn, Op::Send(conn), wr, data)
            }
            Action::Respond {
                conn,
                cqe,
                invalidate,
            } => {
                let wr = match invalidate {
                    Some(k) => SendWr::send_with_inv(0, [], Rkey::new(k.0)),
                    None => SendWr::send(0, []),
                };
                (conn, Op::Send(conn), wr, cqe.to_vec())
            }
            Action::Disconnect { conn } => {
                self.close(conn);
                return Ok(());
            }
        };
        if !self.conns.contains_key(&conn) {
            return Ok(());
        }
        let mut wr = wr;
        wr.wr_id = self.wr(op);
        let posted = self.conns.get(&conn).map(|c| c.qp.post_send_owned(wr, buf));
        if let Some(Err(_)) = posted {
            self.close(conn);
        }
        Ok(())
    }

    /// Drops a connection (disconnecting it) and tells the core.
    fn close(&mut self, conn: ConnId) {
        if self.conns.remove(&conn).is_some() {
            self.ops.retain(
                |_, op| !matches!(*op, Op::Recv(c) | Op::Send(c) | Op::Read(c, _) if c == conn),
            );
        }
        self.target.on_disconnect(conn);
    }
}

/// Serves `target` on `port` of `ctx` until `stop` is set; returns the
/// target core (with its namespaces) when stopped.
pub fn serve(
    ctx: &Context,
    port: u16,
    target: Target,
    stop: &AtomicBool,
) -> Result<Target, DriverError> {
    let mut s = TargetServer::new(ctx, port, target)?;
    let mut busy = false;
    while !stop.load(Ordering::Relaxed) {
        // Waits for a connection request only when the last round had
        // nothing to do.
        let wait = if busy {
            Duration::ZERO
        } else {
            Duration::from_millis(1)
        };
        busy = s.poll(wait)?;
    }
    Ok(s.into_target())
}
