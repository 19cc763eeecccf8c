//! Per-controller state: properties (NVMe base 1.4 §3.1), keep alive
//! (§7.12), asynchronous events (§5.2), the error log (§5.14.1.1) and the
//! features this target supports (§5.21.1).

use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

use super::queue::ConnId;
use crate::wire::fabrics::prop;
use crate::wire::log::ErrorEntry;
use crate::wire::{Cid, Cntlid, Qid};

/// Which subsystem a controller belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SubsysRef {
    /// The discovery subsystem.
    Discovery,
    /// `TargetConfig::subsystems[i]`.
    Nvm(usize),
}

/// CC.EN (bit 0), CSTS.RDY (bit 0), CSTS.CFS (bit 1), CSTS.SHST (3:2),
/// CC.SHN (15:14): NVMe base 1.4 Figures 79 and 80.
pub(crate) const CC_EN: u32 = 1;
pub(crate) const CSTS_RDY: u32 = 1;
pub(crate) const CSTS_CFS: u32 = 1 << 1;
pub(crate) const CSTS_SHST_COMPLETE: u32 = 2 << 2;

/// The NVMe version reported in VS and Identify (1.4.0).
pub(crate) const VERSION_1_4: u32 = 0x0001_0400;

#[derive(Debug)]
pub(crate) struct Controller {
    pub(crate) cntlid: Cntlid,
    pub(crate) subsys: SubsysRef,
    pub(crate) hostnqn: String,
    pub(crate) hostid: [u8; 16],
    pub(crate) cc: u32,
    pub(crate) csts: u32,
    /// Keep Alive Timeout in ms, 0 = disabled.
    pub(crate) kato_ms: u32,
    pub(crate) ka_deadline: Option<Duration>,
    /// A command arrived since the keep alive timer was last (re)started
    /// (traffic-based keep alive: [`Controller::note_traffic`]).
    pub(crate) ka_traffic: bool,
    pub(crate) aec: u32,
    pub(crate) vwc_enabled: bool,
    /// Granted I/O queues, 0 until Set Features Number of Queues.
    pub(crate) io_queues: u16,
    pub(crate) io_queues_set: bool,
    pub(crate) admin_conn: ConnId,
    pub(crate) io_conns: BTreeMap<Qid, ConnId>,
    /// Held Asynchronous Event Requests.
    pub(crate) aers: VecDeque<Cid>,
    /// Events waiting for an AER (DW0 values), bounded.
    pub(crate) events: VecDeque<u32>,
    /// A namespace notice was reported and not yet cleared by reading
    /// the Changed Namespace List (NVMe base 1.4 §5.2.1: events of a type
    /// are masked until the log page is read).
    pub(crate) ns_notice_masked: bool,
    pub(crate) changed_ns: Vec<u32>,
    pub(crate) errors: VecDeque<ErrorEntry>,
    pub(crate) error_count: u64,
    pub(crate) host_reads: u64,
    pub(crate) host_writes: u64,
    pub(crate) units_read: u64,
    pub(crate) units_written: u64,
}

/// Events kept at most per controller while no AER is outstanding.
const MAX_EVENTS: usize = 16;
/// Changed namespaces kept at most (the log page holds 1024).
const MAX_CHANGED_NS: usize = 1025;

impl Controller {
    pub(crate) fn new(
        cntlid: Cntlid,
        subsys: SubsysRef,
        hostnqn: String,
        hostid: [u8; 16],
        admin_conn: ConnId,
        kato_ms: u32,
        now: Duration,
    ) -> Controller {
        let mut c = Controller {
            cntlid,
            subsys,
            hostnqn,
            hostid,
            cc: 0,
            csts: 0,
            kato_ms,
            ka_deadline: None,
            ka_traffic: false,
            aec: 0,
            vwc_enabled: true,
            io_queues: 0,
            io_queues_set: false,
            admin_conn,
            io_conns: BTreeMap::new(),
            aers: VecDeque::new(),
            events: VecDeque::new(),
            ns_notice_masked: false,
            changed_ns: Vec::new(),
            errors: VecDeque::new(),
            error_count: 0,
            host_reads: 0,
            host_writes: 0,
            units_read: 0,
            units_written: 0,
        };
        c.restart_keep_alive(now);
        c
    }

    /// Restarts the keep alive timer (NVMe base 1.4 §7.12.1: on a Keep
    /// Alive command; a KATO of 0 disables it).
    pub(crate) fn restart_keep_alive(&mut self, now: Duration) {
        self.ka_traffic = false;
        self.ka_deadline = match self.kato_ms {
            0 => None,
            ms => Some(now + Duration::from_millis(ms as u64)),
        };
    }

    /// Traffic-based keep alive (CTRATT.TBKAS, NVMe base 1.4 §7.12.1):
    /// a command on any of the controller's queues counts as a Keep
    /// Alive. As Linux's nvmet does, the timer is not moved per command:
    /// when it runs out after traffic it starts one more period
    /// ([`Controller::keep_alive_expired`]), so a host is given up only
    /// after a whole KATO with no command at all, and at most two.
    pub(crate) fn note_traffic(&mut self) {
        self.ka_traffic = true;
    }

    /// The keep alive timer ran out at `now`: true when the controller
    /// is to be torn down, false when traffic since its start bought
    /// another period.
    pub(crate) fn keep_alive_expired(&mut self, now: Duration) -> bool {
        if !self.ka_traffic {
            return true;
        }
        self.restart_keep_alive(now);
        false
    }

    pub(crate) fn ready(&self) -> bool {
        self.csts & CSTS_RDY != 0
    }

    /// CAP (NVMe base 1.4 Figure 79): MQES 15:0 (0's based), CQR bit 16,
    /// TO 31:24 in 500 ms units, CSS bit 37 (NVM command set), MPSMIN and
    /// MPSMAX 0 (4 KiB).
    pub(crate) fn cap(max_depth: u16) -> u64 {
        let mqes = max_depth.saturating_sub(1) as u64;
        mqes | 1 << 16 | 15 << 24 | 1 << 37
    }

    /// Reads a property; `None` for an offset or size that is not defined.
    pub(crate) fn property_get(&self, offset: u32, eight: bool, max_depth: u16) -> Option<u64> {
        match (offset, eight) {
            (prop::CAP, true) => Some(Self::cap(max_depth)),
            (prop::VS, false) => Some(VERSION_1_4 as u64),
            (prop::CC, false) => Some(self.cc as u64),
            (prop::CSTS, false) => Some(self.csts as u64),
            _ => None,
        }
    }

    /// Writes CC (the only writable property here besides NSSR, which is
    /// not supported). Returns whether the controller was disabled (its I/O
    /// queues must go), or `None` for an undefined property.
    pub(crate) fn property_set(&mut self, offset: u32, eight: bool, value: u64) -> Option<bool> {
        if offset != prop::CC || eight {
            return None;
        }
        let new = value as u32;
        let old = self.cc;
        self.cc = new;
        let mut disabled = false;
        if new & CC_EN != 0 && old & CC_EN == 0 {
            // CC.EN 0 -> 1: check IOSQES (19:16) = 6, IOCQES (23:20) = 4,
            // MPS (10:7) = 0, CSS (6:4) = 0; a bad value is a controller
            // fatal status (§3.1.5).
            let iosqes = (new >> 16) & 0xF;
            let iocqes = (new >> 20) & 0xF;
            let mps = (new >> 7) & 0xF;
            let css = (new >> 4) & 7;
            let io_ok = self.subsys == SubsysRef::Discovery || (iosqes == 6 && iocqes == 4);
            if io_ok && mps == 0 && css == 0 {
                self.csts |= CSTS_RDY;
            } else {
                self.csts |= CSTS_CFS;
            }
        } else if new & CC_EN == 0 && old & CC_EN != 0 {
            self.csts &= !(CSTS_RDY | CSTS_CFS);
            disabled = true;
        }
        if (new >> 14) & 3 != 0 {
            self.csts = (self.csts & !(3 << 2)) | CSTS_SHST_COMPLETE;
        } else {
            self.csts &= !(3 << 2);
        }
        Some(disabled)
    }

    /// Records an error (Error Information log, bounded: oldest dropped).
    pub(crate) fn log_error(&mut self, mut e: ErrorEntry, max: usize) {
        self.error_count += 1;
        e.error_count = self.error_count;
        if self.errors.len() >= max.max(1) {
            self.errors.pop_front();
        }
        self.errors.push_back(e);
    }

    /// Queues an event for the next AER; returns the CID of a held AER to
    /// complete now, if any.
    pub(crate) fn push_event(&mut self, dw0: u32) -> Option<(Cid, u32)> {
        if let Some(cid) = self.aers.pop_front() {
            return Some((cid, dw0));
        }
        if self.events.len() < MAX_EVENTS {
            self.events.push_back(dw0);
        }
        None
    }

    /// Records a changed namespace (bounded; beyond 1024 the log page
    /// reports the overflow value).
    pub(crate) fn note_changed_ns(&mut self, nsid: u32) {
        if !self.changed_ns.contains(&nsid) && self.changed_ns.len() < MAX_CHANGED_NS {
            self.changed_ns.push(nsid);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ctrl() -> Controller {
        Controller::new(
            Cntlid(1),
            SubsysRef::Nvm(0),
            "h".into(),
            [0; 16],
            ConnId(0),
            1000,
            Duration::ZERO,
        )
    }

    #[test]
    fn cap_fields() {
        let cap = Controller::cap(128);
        assert_eq!(cap & 0xFFFF, 127);
        assert_eq!((cap >> 37) & 1, 1);
        assert_eq!((cap >> 24) & 0xFF, 15);
    }

    #[test]
    fn enable_disable_shutdown() {
        let mut c = ctrl();
        assert_eq!(c.ka_deadline, Some(Duration::from_secs(1)));
        // IOCQES 4, IOSQES 6, EN.
        assert_eq!(c.property_set(prop::CC, false, 0x0046_0001), Some(false));
        assert!(c.ready());
        assert_eq!(c.property_set(prop::CC, false, 0x0046_4000), Some(true));
        assert!(!c.ready());
        assert_eq!(c.csts, CSTS_SHST_COMPLETE);
        let mut bad = ctrl();
        bad.property_set(prop::CC, false, 1);
        assert_eq!(bad.csts & CSTS_CFS, CSTS_CFS);
        assert_eq!(bad.property_set(prop::CAP, false, 0), None);
    }
}
