//! What a target serves: subsystems with their namespaces and allowed
//! hosts, the port it listens on, and the limits of every table.

use super::namespace::Namespace;
use crate::wire::Nsid;

/// The well-known discovery subsystem NQN (NVMe-oF 1.1 §5.1; NVMe base
/// 1.4 §7.9).
pub const DISCOVERY_NQN: &str = "nqn.2014-08.org.nvmexpress.discovery";

/// The admin queue depth a Linux host asks for and the minimum the
/// specification requires a controller to support (NVMe-oF 1.1 §5.2:
/// ASQSZ; Linux's NVME_AQ_DEPTH).
pub const ADMIN_QUEUE_DEPTH: u16 = 32;

/// A namespace of a subsystem.
pub struct NamespaceEntry {
    /// Its NSID (1 ..= 0xFFFF_FFFE).
    pub nsid: Nsid,
    /// Namespace Globally Unique Identifier (Identify Namespace, and the
    /// NGUID descriptor).
    pub nguid: [u8; 16],
    /// UUID for the namespace identification descriptor list.
    pub uuid: [u8; 16],
    /// The storage.
    pub storage: Box<dyn Namespace>,
}

impl core::fmt::Debug for NamespaceEntry {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("NamespaceEntry")
            .field("nsid", &self.nsid)
            .field("blocks", &self.storage.blocks())
            .field("block_size", &self.storage.block_size())
            .finish()
    }
}

/// An NVM subsystem.
#[derive(Debug)]
pub struct Subsystem {
    /// NVM Subsystem NQN.
    pub nqn: String,
    /// Host NQNs allowed to connect; `None` allows any host.
    pub allowed_hosts: Option<Vec<String>>,
    /// Serial number reported in Identify Controller.
    pub serial: String,
    /// Model number reported in Identify Controller.
    pub model: String,
    /// Namespaces, at most [`Limits::max_namespaces`].
    pub namespaces: Vec<NamespaceEntry>,
}

impl Subsystem {
    /// A subsystem with no namespaces that any host may use.
    pub fn new(nqn: &str) -> Subsystem {
        Subsystem {
            nqn: nqn.to_owned(),
            allowed_hosts: None,
            serial: "roce-nvmf".to_owned(),
            model: "roce-nvmf target".to_owned(),
            namespaces: Vec::new(),
        }
    }

    /// Whether `hostnqn` may connect.
    pub fn host_allowed(&self, hostnqn: &str) -> bool {
        self.allowed_hosts
            .as_ref()
            .is_none_or(|l| l.iter().any(|h| h == hostnqn))
    }
}

/// The transport address the discovery log reports (NVMe-oF 1.1 Figure
/// 41: TRADDR, TRSVCID, PORTID).
#[derive(Debug, Clone)]
pub struct PortInfo {
    /// IP address as text.
    pub traddr: String,
    /// Port number as text (4420 is the NVMe-oF RDMA port).
    pub trsvcid: String,
    /// Port ID.
    pub portid: u16,
    /// Address family (1 = IPv4, 2 = IPv6).
    pub adrfam: u8,
}

impl Default for PortInfo {
    fn default() -> PortInfo {
        PortInfo {
            traddr: "0.0.0.0".into(),
            trsvcid: "4420".into(),
            portid: 1,
            adrfam: 1,
        }
    }
}

/// Bounds on every table the target keeps and on what a host may ask for.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Largest I/O queue depth (CAP.MQES + 1); Linux's host uses at most
    /// 128 over RDMA.
    pub max_queue_depth: u16,
    /// Largest number of I/O queues per controller.
    pub max_io_queues: u16,
    /// Largest number of controllers at once.
    pub max_controllers: usize,
    /// Largest number of connections (queues) at once.
    pub max_connections: usize,
    /// Largest number of namespaces per subsystem.
    pub max_namespaces: usize,
    /// In-capsule data bytes accepted on I/O queues (IOCCSZ = 4 +
    /// this / 16); a multiple of 16.
    pub in_capsule_data: u32,
    /// MDTS: largest transfer is 2^mdts * 4 KiB (1..=8 here).
    pub mdts: u8,
    /// Outstanding Asynchronous Event Requests per controller (AERL + 1).
    pub aer_limit: u8,
    /// Error log entries kept per controller (ELPE + 1).
    pub error_log_entries: u8,
    /// Bytes of host data all queues together may have asked the driver
    /// to RDMA READ and not yet delivered; a write beyond it is answered
    /// Command Interrupted, which the host retries (Connect data is not
    /// counted).
    pub max_pending_host_data: u64,
    /// Answer a command whose keyed SGL descriptor has the invalidate
    /// subtype (Fh) with a SEND with Invalidate of its key (NVMe-oF 1.1
    /// §7.3.2: the target may); off, every response is a plain SEND and
    /// the host invalidates its key itself, as Linux's host does when a
    /// response does not (docs/nvmf.md, "What Linux's host does").
    pub remote_invalidate: bool,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_queue_depth: 128,
            max_io_queues: 8,
            max_controllers: 64,
            max_connections: 512,
            max_namespaces: 64,
            in_capsule_data: 8192,
            mdts: 5,
            aer_limit: 4,
            error_log_entries: 16,
            max_pending_host_data: 256 << 20,
            remote_invalidate: true,
        }
    }
}

impl Limits {
    /// Largest data transfer of one command in bytes.
    pub fn max_transfer(&self) -> u32 {
        4096u32 << self.mdts.clamp(1, 8)
    }

    /// IOCCSZ in 16-byte units.
    pub fn ioccsz(&self) -> u32 {
        4 + self.in_capsule_data / 16
    }
}

/// A target's configuration.
#[derive(Debug)]
pub struct TargetConfig {
    /// NVM subsystems served (the discovery subsystem is implicit).
    pub subsystems: Vec<Subsystem>,
    /// The port reported in discovery log entries.
    pub port: PortInfo,
    /// Table bounds.
    pub limits: Limits,
}
