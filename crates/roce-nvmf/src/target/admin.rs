//! Admin commands (NVMe base 1.4 §5) and the Property Get/Set Fabrics
//! commands (NVMe-oF 1.1 §3.4, §3.5) on a live admin queue.

use std::time::Duration;

use super::capsule::{Completion, Dir, Outcome};
use super::controller::{Controller, SubsysRef};
use super::queue::{ConnId, QueueEvent, QueueState};
use super::{Action, Target, ADMIN_QUEUE_DEPTH, DISCOVERY_NQN};
use crate::wire::fabrics::{fctype, PropSize, PropertyCmd};
use crate::wire::features::{self, fid};
use crate::wire::identify::{self, cns, IdentifyController, IdentifyNamespace, CTRATT_TBKAS};
use crate::wire::log::{self, lid, DiscoveryEntry, GetLogPage, SmartLog, ERROR_ENTRY_LEN};
use crate::wire::sgl::SglDesc;
use crate::wire::sqe::{admin_opc, Sqe};
use crate::wire::status::Status;
use crate::wire::{Cid, Cntlid, Nsid};

impl Target {
    /// Runs an admin command for controller `cntlid`.
    pub(crate) fn admin<T: AsRef<[u8]>>(
        &mut self,
        conn: ConnId,
        cntlid: Cntlid,
        sqe: &Sqe<T>,
        _data: &[u8],
        now: Duration,
    ) -> Outcome {
        let Some(ctrl) = self.ctrls.get(&cntlid) else {
            return Outcome::Done(Completion::status(Status::INTERNAL_ERROR));
        };
        let discovery = ctrl.subsys == SubsysRef::Discovery;
        let c = match sqe.opcode() {
            admin_opc::FABRICS => self.property(cntlid, sqe),
            admin_opc::IDENTIFY => self.identify(cntlid, sqe),
            admin_opc::GET_LOG_PAGE => self.get_log_page(cntlid, sqe),
            admin_opc::SET_FEATURES => self.set_features(cntlid, sqe, now),
            admin_opc::GET_FEATURES => self.get_features(cntlid, sqe),
            admin_opc::ASYNC_EVENT_REQUEST => return self.aer(cntlid, sqe.cid()),
            admin_opc::KEEP_ALIVE => {
                if let Some(c) = self.ctrls.get_mut(&cntlid) {
                    c.restart_keep_alive(now);
                }
                Completion::ok()
            }
            // Abort: DW0 bit 0 set = command not aborted (§5.1).
            admin_opc::ABORT if !discovery => Completion::dw0(1),
            _ => Completion::status(Status::INVALID_OPCODE),
        };
        let _ = conn;
        Outcome::Done(c)
    }

    fn property<T: AsRef<[u8]>>(&mut self, cntlid: Cntlid, sqe: &Sqe<T>) -> Completion {
        let Ok(p) = PropertyCmd::parse(sqe) else {
            return Completion::status(Status::INVALID_FIELD);
        };
        let eight = p.size == PropSize::Eight;
        let max_depth = self.cfg.limits.max_queue_depth;
        let Some(c) = self.ctrls.get_mut(&cntlid) else {
            return Completion::status(Status::INTERNAL_ERROR);
        };
        match sqe.fctype() {
            fctype::PROPERTY_GET => match c.property_get(p.offset, eight, max_depth) {
                Some(v) => Completion {
                    dw1: (v >> 32) as u32,
                    ..Completion::dw0(v as u32)
                },
                None => Completion::status(Status::INVALID_FIELD),
            },
            _ => match c.property_set(p.offset, eight, p.value) {
                Some(true) => {
                    self.controller_disabled(cntlid);
                    Completion::ok()
                }
                Some(false) => Completion::ok(),
                None => Completion::status(Status::INVALID_FIELD),
            },
        }
    }

    /// CC.EN went 1 -> 0: the controller resets (NVMe base 1.4 §7.3.2):
    /// its I/O queues are deleted and held AERs aborted.
    fn controller_disabled(&mut self, cntlid: Cntlid) {
        let Some(c) = self.ctrls.get_mut(&cntlid) else {
            return;
        };
        let io: Vec<_> = core::mem::take(&mut c.io_conns).into_values().collect();
        let aers: Vec<Cid> = c.aers.drain(..).collect();
        c.io_queues_set = false;
        c.io_queues = 0;
        let admin = c.admin_conn;
        for conn in io {
            if let Some(q) = self.conns.get_mut(&conn) {
                q.state = q
                    .state
                    .transition(QueueEvent::Disconnect)
                    .unwrap_or(QueueState::Closed);
                q.outstanding.clear();
                let pending: u64 = q.waiting.values().map(|w| w.len as u64).sum();
                self.pending_host_data = self.pending_host_data.saturating_sub(pending);
                q.waiting.clear();
                self.actions.push_back(Action::Disconnect { conn });
            }
        }
        for cid in aers {
            let out = Outcome::Done(Completion::status(Status::ABORTED_SQ_DELETION));
            self.finish::<&[u8]>(
                admin,
                cid,
                SglDesc::InCapsule { offset: 0, len: 0 },
                Dir::None,
                out,
                None,
            );
        }
    }

    fn identify<T: AsRef<[u8]>>(&self, cntlid: Cntlid, sqe: &Sqe<T>) -> Completion {
        let Some(c) = self.ctrls.get(&cntlid) else {
            return Completion::status(Status::INTERNAL_ERROR);
        };
        let cns = sqe.cdw(10) as u8;
        let nsid = sqe.nsid();
        let si = match c.subsys {
            SubsysRef::Discovery if cns == cns::CONTROLLER => {
                return Completion::data(self.identify_controller(c).to_bytes())
            }
            SubsysRef::Discovery => return Completion::status(Status::INVALID_FIELD),
            SubsysRef::Nvm(i) => i,
        };
        match cns {
            cns::CONTROLLER => Completion::data(self.identify_controller(c).to_bytes()),
            cns::NAMESPACE => match self.namespace(si, nsid) {
                Some(ns) => {
                    let blocks = ns.storage.blocks();
                    let lbads = ns.storage.block_size().trailing_zeros() as u8;
                    Completion::data(
                        IdentifyNamespace {
                            nsze: blocks,
                            ncap: blocks,
                            nuse: blocks,
                            nsfeat: 0,
                            nlbaf: 0,
                            flbas: 0,
                            nguid: ns.nguid,
                            lbaf0_lbads: lbads,
                        }
                        .to_bytes(),
                    )
                }
                None => Completion::status(Status::INVALID_NAMESPACE),
            },
            cns::ACTIVE_NS_LIST => {
                // NSIDs FFFFFFFEh and FFFFFFFFh are invalid here (§5.15.2).
                if nsid.0 >= 0xFFFF_FFFE {
                    return Completion::status(Status::INVALID_NAMESPACE);
                }
                let ids = self.cfg.subsystems[si].namespaces.iter().map(|n| n.nsid);
                Completion::data(identify::active_ns_list(ids, nsid))
            }
            cns::NS_DESC_LIST => match self.namespace(si, nsid) {
                Some(ns) => Completion::data(identify::ns_desc_list(ns.nguid, ns.uuid)),
                None => Completion::status(Status::INVALID_NAMESPACE),
            },
            // CSI (CDW11 bits 31:24) 0, the NVM command set: VSL, WZSL,
            // WUSL, DMRL, DMRSL, DMSL all 0, "no limit beyond MDTS".
            cns::CS_CONTROLLER if sqe.cdw(11) >> 24 == 0 => {
                Completion::data(vec![0; identify::IDENTIFY_LEN])
            }
            _ => Completion::status(Status::INVALID_FIELD),
        }
    }

    pub(crate) fn identify_controller(&self, c: &Controller) -> IdentifyController {
        let lim = self.cfg.limits;
        let (sn, mn, nqn, nn, ty, maxcmd) = match c.subsys {
            SubsysRef::Discovery => (
                "roce-nvmf-discovery".to_owned(),
                "roce-nvmf discovery".to_owned(),
                DISCOVERY_NQN.to_owned(),
                0,
                identify::cntrltype::DISCOVERY,
                ADMIN_QUEUE_DEPTH,
            ),
            SubsysRef::Nvm(i) => {
                let s = &self.cfg.subsystems[i];
                let top = s.namespaces.last().map_or(0, |n| n.nsid.0);
                (
                    s.serial.clone(),
                    s.model.clone(),
                    s.nqn.clone(),
                    top.max(lim.max_namespaces as u32),
                    identify::cntrltype::IO,
                    lim.max_queue_depth,
                )
            }
        };
        let mut sgls = identify::SGLS_SUPPORTED | identify::SGLS_KEYED;
        if lim.in_capsule_data > 0 {
            sgls |= identify::SGLS_OFFSET;
        }
        let io = c.subsys != SubsysRef::Discovery;
        IdentifyController {
            vid: 0,
            sn,
            mn,
            fr: env!("CARGO_PKG_VERSION").to_owned(),
            mdts: lim.mdts.clamp(1, 8),
            cntlid: c.cntlid.0,
            ver: super::controller::VERSION_1_4,
            oaes: if io { 1 << 8 } else { 0 },
            // TBKAS (bit 6): any command restarts the keep alive timer.
            ctratt: CTRATT_TBKAS,
            cntrltype: ty,
            oacs: 0,
            acl: 3,
            aerl: lim.aer_limit.max(1) - 1,
            lpa: 1 << 2,
            elpe: lim.error_log_entries.max(1) - 1,
            kas: 1,
            sqes: if io { 0x66 } else { 0 },
            cqes: if io { 0x44 } else { 0 },
            maxcmd,
            nn,
            oncs: if io { 1 << 2 | 1 << 3 } else { 0 },
            vwc: io as u8,
            sgls,
            subnqn: nqn,
            ioccsz: lim.ioccsz(),
            iorcsz: 1,
            icdoff: 0,
            fcatt: 0,
            msdbd: 1,
        }
    }

    fn get_log_page<T: AsRef<[u8]>>(&mut self, cntlid: Cntlid, sqe: &Sqe<T>) -> Completion {
        let g = GetLogPage::from_cdw(sqe.cdw(10), sqe.cdw(11), sqe.cdw(12), sqe.cdw(13));
        // The offset is dword aligned (NVMe base 1.4 Figure 191).
        if !g.lpo.is_multiple_of(4) {
            return Completion::status(Status::INVALID_FIELD);
        }
        let Some(c) = self.ctrls.get(&cntlid) else {
            return Completion::status(Status::INTERNAL_ERROR);
        };
        let discovery = c.subsys == SubsysRef::Discovery;
        let page = match g.lid {
            lid::DISCOVERY if discovery => self.discovery_page(&c.hostnqn),
            lid::ERROR => {
                let n = self.cfg.limits.error_log_entries.max(1) as usize;
                let mut b = vec![0u8; n * ERROR_ENTRY_LEN];
                for (i, e) in c.errors.iter().rev().enumerate().take(n) {
                    e.emit(&mut b[i * ERROR_ENTRY_LEN..(i + 1) * ERROR_ENTRY_LEN]);
                }
                b
            }
            lid::SMART if !discovery => {
                if sqe.nsid().0 != 0 && sqe.nsid() != Nsid::BROADCAST {
                    return Completion::status(Status::INVALID_FIELD);
                }
                let units = |bytes: u64| bytes.div_ceil(512 * 1000);
                SmartLog {
                    temperature_k: 300,
                    avail_spare: 100,
                    data_units_read: units(c.units_read),
                    data_units_written: units(c.units_written),
                    host_reads: c.host_reads,
                    host_writes: c.host_writes,
                    err_log_entries: c.error_count,
                }
                .to_bytes()
            }
            lid::CHANGED_NS if !discovery => log::changed_ns_list(&c.changed_ns),
            _ => return Completion::status(Status::INVALID_LOG_PAGE),
        };
        if g.lpo > page.len() as u64 {
            return Completion::status(Status::INVALID_FIELD);
        }
        if g.lid == lid::CHANGED_NS && !g.rae {
            if let Some(c) = self.ctrls.get_mut(&cntlid) {
                c.changed_ns.clear();
                c.ns_notice_masked = false;
            }
        }
        let mut out = page[g.lpo as usize..].to_vec();
        out.resize(g.len_bytes() as usize, 0);
        Completion::data(out)
    }

    /// The discovery log page for `hostnqn`: one entry per subsystem the
    /// host may connect to (NVMe-oF 1.1 §5.3).
    fn discovery_page(&self, hostnqn: &str) -> Vec<u8> {
        let p = &self.cfg.port;
        let entries: Vec<DiscoveryEntry> = self
            .cfg
            .subsystems
            .iter()
            .filter(|s| s.host_allowed(hostnqn))
            .map(|s| DiscoveryEntry {
                trtype: log::TRTYPE_RDMA,
                adrfam: p.adrfam,
                subtype: log::SUBTYPE_NVM,
                treq: log::TREQ_NOT_SPECIFIED,
                portid: p.portid,
                cntlid: 0xFFFF,
                asqsz: ADMIN_QUEUE_DEPTH,
                trsvcid: p.trsvcid.clone(),
                subnqn: s.nqn.clone(),
                traddr: p.traddr.clone(),
                rdma_qptype: log::RDMA_QPTYPE_RC,
                rdma_prtype: log::RDMA_PRTYPE_ROCEV2,
                rdma_cms: log::RDMA_CMS_RDMA_CM,
            })
            .collect();
        log::discovery_log(self.genctr, &entries)
    }

    fn set_features<T: AsRef<[u8]>>(
        &mut self,
        cntlid: Cntlid,
        sqe: &Sqe<T>,
        now: Duration,
    ) -> Completion {
        let (cdw10, cdw11) = (sqe.cdw(10), sqe.cdw(11));
        if features::cdw10_save(cdw10) {
            return Completion::status(Status::FEATURE_NOT_SAVEABLE);
        }
        let max_io = self.cfg.limits.max_io_queues.max(1);
        let Some(c) = self.ctrls.get_mut(&cntlid) else {
            return Completion::status(Status::INTERNAL_ERROR);
        };
        let discovery = c.subsys == SubsysRef::Discovery;
        match features::cdw10_fid(cdw10) {
            fid::NUMBER_OF_QUEUES if !discovery => {
                let (nsq, ncq) = features::split_number_of_queues(cdw11);
                if nsq == 0xFFFF || ncq == 0xFFFF {
                    return Completion::status(Status::INVALID_FIELD);
                }
                if !c.io_conns.is_empty() {
                    return Completion::status(Status::COMMAND_SEQUENCE_ERROR);
                }
                let granted = (nsq.min(ncq) + 1).min(max_io);
                c.io_queues = granted;
                c.io_queues_set = true;
                Completion::dw0(features::number_of_queues(granted - 1, granted - 1))
            }
            fid::KEEP_ALIVE_TIMER => {
                c.kato_ms = cdw11;
                c.restart_keep_alive(now);
                Completion::ok()
            }
            fid::ASYNC_EVENT_CONFIG => {
                c.aec = cdw11 & (0xFF | features::AEC_NS_ATTR_NOTICES);
                Completion::ok()
            }
            fid::VOLATILE_WRITE_CACHE if !discovery => {
                c.vwc_enabled = cdw11 & 1 != 0;
                Completion::ok()
            }
            _ => Completion::status(Status::INVALID_FIELD),
        }
    }

    fn get_features<T: AsRef<[u8]>>(&self, cntlid: Cntlid, sqe: &Sqe<T>) -> Completion {
        let cdw10 = sqe.cdw(10);
        let sel = (cdw10 >> 8) & 7;
        let max_io = self.cfg.limits.max_io_queues.max(1);
        let Some(c) = self.ctrls.get(&cntlid) else {
            return Completion::status(Status::INTERNAL_ERROR);
        };
        let discovery = c.subsys == SubsysRef::Discovery;
        let fid = features::cdw10_fid(cdw10);
        let known = match fid {
            fid::KEEP_ALIVE_TIMER | fid::ASYNC_EVENT_CONFIG => true,
            fid::NUMBER_OF_QUEUES | fid::VOLATILE_WRITE_CACHE => !discovery,
            _ => false,
        };
        if !known {
            return Completion::status(Status::INVALID_FIELD);
        }
        // SEL 3: supported capabilities; bit 2 = changeable (Figure 270).
        if sel == 3 {
            return Completion::dw0(1 << 2);
        }
        Completion::dw0(match fid {
            fid::KEEP_ALIVE_TIMER => c.kato_ms,
            fid::ASYNC_EVENT_CONFIG => c.aec,
            fid::VOLATILE_WRITE_CACHE => c.vwc_enabled as u32,
            _ => {
                let n = if c.io_queues_set { c.io_queues } else { max_io };
                features::number_of_queues(n - 1, n - 1)
            }
        })
    }

    /// Asynchronous Event Request (§5.2): answered at once if an event is
    /// waiting, else held until one occurs.
    fn aer(&mut self, cntlid: Cntlid, cid: Cid) -> Outcome {
        let limit = self.cfg.limits.aer_limit.max(1) as usize;
        let Some(c) = self.ctrls.get_mut(&cntlid) else {
            return Outcome::Done(Completion::status(Status::INTERNAL_ERROR));
        };
        if c.aers.len() >= limit {
            return Outcome::Done(Completion::status(Status::AER_LIMIT_EXCEEDED));
        }
        if let Some(dw0) = c.events.pop_front() {
            return Outcome::Done(Completion::dw0(dw0));
        }
        c.aers.push_back(cid);
        Outcome::Held
    }

    /// A namespace of subsystem `si` changed: record it for every
    /// controller of the subsystem and report a Namespace Attribute
    /// Changed notice where enabled and not masked.
    pub(crate) fn namespace_changed(&mut self, si: usize, nsid: u32) {
        let mut answers = Vec::new();
        for c in self
            .ctrls
            .values_mut()
            .filter(|c| c.subsys == SubsysRef::Nvm(si))
        {
            c.note_changed_ns(nsid);
            if c.aec & features::AEC_NS_ATTR_NOTICES == 0 || c.ns_notice_masked {
                continue;
            }
            c.ns_notice_masked = true;
            let dw0 = features::aer_dw0(
                features::AER_TYPE_NOTICE,
                features::AER_NOTICE_NS_CHANGED,
                lid::CHANGED_NS,
            );
            if let Some((cid, dw0)) = c.push_event(dw0) {
                answers.push((c.admin_conn, cid, dw0));
            }
        }
        for (conn, cid, dw0) in answers {
            let out = Outcome::Done(Completion::dw0(dw0));
            self.finish::<&[u8]>(
                conn,
                cid,
                SglDesc::InCapsule { offset: 0, len: 0 },
                Dir::None,
                out,
                None,
            );
        }
    }
}
