//! Device enumeration and opening: what `ibv_get_device_list` and
//! `ibv_open_device` do for a kernel RDMA stack.
//!
//! A RoCE device of this stack is a network interface with IP addresses:
//! [`Device::list`] names one per interface (`roce_<ifname>`, loopback
//! included), its GID table holding the interface's addresses (IPv4
//! first, as `roce devinfo` prints them), its active MTU the largest IB
//! MTU the link carries. [`OpenOptions`] opens a [`Context`] on one GID
//! over the backend asked for (UDP sockets, AF_PACKET on the interface,
//! or an in-memory [`Fabric`]), with the errors a user can act on.

use std::fmt;
use std::io;
use std::net::IpAddr;

use roce_core::IcrcCheck;
use roce_core::{AckDelay, DeviceConfig};
use roce_io::{Backend, CpuTuning, Fabric, InterfaceInfo};

use crate::context::Context;
use crate::progress::ProgressConfig;

/// A network interface as a RoCE device.
#[derive(Clone, Debug)]
pub struct Device {
    info: InterfaceInfo,
}

impl Device {
    /// Every interface that has an IP address, in the kernel's order.
    pub fn list() -> Result<Vec<Device>, OpenError> {
        let all = roce_io::interfaces().map_err(OpenError::ListInterfaces)?;
        Ok(all
            .into_iter()
            .filter(|i| !i.addrs.is_empty())
            .map(|info| Device { info })
            .collect())
    }

    /// The device of interface `ifname` (`eth0`), or named `roce_eth0`.
    pub fn by_name(name: &str) -> Result<Device, OpenError> {
        let ifname = name.strip_prefix("roce_").unwrap_or(name);
        Device::list()?
            .into_iter()
            .find(|d| d.info.name == ifname)
            .ok_or_else(|| OpenError::NoSuchDevice(name.to_string()))
    }

    /// The device whose interface holds `addr`.
    pub fn for_address(addr: IpAddr) -> Result<Device, OpenError> {
        Device::list()?
            .into_iter()
            .find(|d| d.info.addrs.contains(&addr))
            .ok_or(OpenError::NotLocal(addr))
    }

    /// The device name: `roce_` and the interface's.
    pub fn name(&self) -> String {
        format!("roce_{}", self.info.name)
    }

    /// The interface.
    pub fn interface(&self) -> &InterfaceInfo {
        &self.info
    }

    /// The GID table: the interface's addresses, IPv4 first (index = GID
    /// index; RoCE v2 GIDs, an IPv4 one as `::ffff:a.b.c.d` on the wire).
    pub fn gids(&self) -> &[IpAddr] {
        &self.info.addrs
    }

    /// GID `index`, or an error naming the table's size.
    pub fn gid(&self, index: usize) -> Result<IpAddr, OpenError> {
        self.info
            .addrs
            .get(index)
            .copied()
            .ok_or_else(|| OpenError::NoSuchGid {
                device: self.name(),
                index,
                len: self.info.addrs.len(),
            })
    }

    /// The node GUID: [`node_guid`] of the interface's MAC (all zero
    /// without one).
    pub fn node_guid(&self) -> u64 {
        node_guid(self.info.mac.map(|m| m.0).unwrap_or_default())
    }

    /// The active MTU: the largest IB MTU whose packets (plus 80 bytes of
    /// headers, rxe's rule) fit the link's MTU; 4096 when it is unknown.
    pub fn active_mtu(&self) -> u32 {
        self.info.mtu.map_or(4096, roce_core::qp::path_mtu_for_link)
    }
}

/// The EUI-64 of a MAC address (universal/local bit flipped, `ff:fe` in
/// the middle): a RoCE device's node GUID, as Linux rxe derives it.
pub fn node_guid(mac: [u8; 6]) -> u64 {
    u64::from_be_bytes([
        mac[0] ^ 0x02,
        mac[1],
        mac[2],
        0xff,
        0xfe,
        mac[3],
        mac[4],
        mac[5],
    ])
}

/// Which packet I/O a context uses.
#[derive(Clone, Debug)]
pub enum BackendKind {
    /// UDP sockets on port 4791 (unprivileged).
    Udp,
    /// AF_PACKET on the interface (CAP_NET_RAW): whole Ethernet frames.
    Packet,
    /// An in-memory fabric shared by the contexts of one process.
    Fabric(Fabric),
}

impl BackendKind {
    /// `udp`, `packet` or `fabric`.
    pub fn name(&self) -> &'static str {
        match self {
            BackendKind::Udp => "udp",
            BackendKind::Packet => "packet",
            BackendKind::Fabric(_) => "fabric",
        }
    }
}

/// Middleware a caller stacks over the backend (a capture, a fault
/// injector), outermost last; may refuse with a message.
pub type Wrap = Box<dyn FnOnce(Box<dyn Backend + Send>) -> Result<Box<dyn Backend + Send>, String>>;

/// How to open a context: the backend, the GID (local address) and
/// interface, the RoCE port, and the engine's configuration.
pub struct OpenOptions {
    backend: BackendKind,
    local: IpAddr,
    ifname: Option<String>,
    roce_port: u16,
    remote_port: u16,
    vlan: Option<u16>,
    gids: Option<Vec<IpAddr>>,
    wrap: Option<Wrap>,
    progress: ProgressConfig,
    cpu: CpuTuning,
    shm: bool,
    /// The engine's configuration; `addrs` and `active_mtu` are filled in
    /// by [`OpenOptions::open`] (the GID; the link's MTU, capped by the
    /// `active_mtu` set here).
    pub config: DeviceConfig,
}

impl fmt::Debug for OpenOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OpenOptions")
            .field("backend", &self.backend.name())
            .field("local", &self.local)
            .field("ifname", &self.ifname)
            .field("roce_port", &self.roce_port)
            .finish_non_exhaustive()
    }
}

impl OpenOptions {
    /// A context on `local` over `backend`, port 4791, with the engine's
    /// defaults for a program that polls its own completions: ACKs
    /// deferred for the application's answer ([`AckDelay::INTERACTIVE`]).
    pub fn new(backend: BackendKind, local: IpAddr) -> OpenOptions {
        OpenOptions {
            backend,
            local,
            ifname: None,
            roce_port: roce_wire::ROCE_V2_PORT,
            remote_port: roce_wire::ROCE_V2_PORT,
            vlan: None,
            gids: None,
            wrap: None,
            cpu: CpuTuning::NATIVE,
            shm: false,
            progress: ProgressConfig::default(),
            config: DeviceConfig {
                ack_delay: AckDelay::INTERACTIVE,
                ..DeviceConfig::new(local)
            },
        }
    }

    /// The interface the address must be on (`--dev`): required for the
    /// packet backend when the address alone does not name one.
    pub fn interface(mut self, ifname: Option<&str>) -> OpenOptions {
        self.ifname = ifname.map(|n| n.strip_prefix("roce_").unwrap_or(n).to_string());
        self
    }

    /// The UDP port this side listens on and the peer's (4791 both by
    /// default; the UDP backend only).
    pub fn roce_port(mut self, local: u16, remote: u16) -> OpenOptions {
        self.roce_port = local;
        self.remote_port = remote;
        self
    }

    /// What the engine does with IPv4 datagrams received over UDP
    /// sockets, whose identification (covered by the ICRC) a socket never
    /// shows ([`IcrcCheck`]; the engine's default,
    /// [`IcrcCheck::Require`], unless set; the same as setting
    /// `config.icrc_check`).
    pub fn icrc_check(mut self, check: IcrcCheck) -> OpenOptions {
        self.config.icrc_check = check;
        self
    }

    /// An 802.1Q VLAN (the packet backend only).
    pub fn vlan(mut self, vlan: Option<u16>) -> OpenOptions {
        self.vlan = vlan;
        self
    }

    /// The GID table (default: the local address alone; the local
    /// address should be its first entry). The packet backend owns every
    /// address of it; the UDP backend binds the local address at once and
    /// each other one when a QP or address handle first uses its GID
    /// index (a GID whose UDP port another process holds then fails that
    /// call with `AddrUnavailable`, of [`CreateError`](crate::CreateError) or
    /// [`ModifyQpError`](crate::ModifyQpError)).
    pub fn gids(mut self, gids: Vec<IpAddr>) -> OpenOptions {
        self.gids = Some(gids);
        self
    }

    /// The code choices for the CPU this runs on (the ICRC's CRC-32 code,
    /// payload copies in pieces): [`CpuTuning::NATIVE`] unless set; a
    /// program passes [`CpuTuning::detect`] to run well under an emulated
    /// CPU. Nothing in the libraries chooses it behind the caller's back.
    pub fn cpu(mut self, cpu: CpuTuning) -> OpenOptions {
        self.cpu = cpu;
        self
    }

    /// Peers in other processes on this host, same user, go through
    /// shared memory instead of the kernel's UDP stack (the UDP backend
    /// only; off unless set): `roce_io::UdpConfig::shm`, docs/shm.md.
    pub fn shm(mut self, yes: bool) -> OpenOptions {
        self.shm = yes;
        self
    }

    /// Middleware over the backend.
    pub fn wrap(mut self, wrap: Wrap) -> OpenOptions {
        self.wrap = Some(wrap);
        self
    }

    /// The progress engine's tuning.
    pub fn progress(mut self, progress: ProgressConfig) -> OpenOptions {
        self.progress = progress;
        self
    }

    /// The local address (GID) this context uses.
    pub fn local(&self) -> IpAddr {
        self.local
    }

    /// The device the local address belongs to: the named interface
    /// (which must hold it), or the interface that holds it. `None` for
    /// the fabric, and for an address no interface lists (a loopback
    /// address other than 127.0.0.1 is routed to `lo`).
    pub fn device(&self) -> Result<Option<Device>, OpenError> {
        if matches!(self.backend, BackendKind::Fabric(_)) {
            return Ok(None);
        }
        match &self.ifname {
            Some(name) => {
                let d = Device::by_name(name)?;
                // Every address of 127.0.0.0/8 reaches the loopback
                // interface, listed or not (Linux routes the whole block
                // to `lo`).
                let on_lo = d.info.loopback && self.local.is_loopback();
                if self.local.is_unspecified() || on_lo || d.info.addrs.contains(&self.local) {
                    Ok(Some(d))
                } else {
                    Err(OpenError::NotOnInterface {
                        addr: self.local,
                        ifname: d.info.name,
                    })
                }
            }
            None => match Device::for_address(self.local) {
                Ok(d) => Ok(Some(d)),
                Err(OpenError::NotLocal(_)) => Ok(None),
                Err(e) => Err(e),
            },
        }
    }

    /// The path MTU the link carries (4096 for the fabric and for an
    /// address no interface lists).
    pub fn link_mtu(&self) -> Result<u32, OpenError> {
        Ok(self.device()?.map_or(4096, |d| d.active_mtu()))
    }

    /// Opens the context.
    pub fn open(mut self) -> Result<Context, OpenError> {
        let local = self.local;
        self.config.addrs = self.gids.take().unwrap_or_else(|| vec![local]);
        // The interfaces are listed once (link_mtu would list them again).
        let device = self.device()?;
        let mtu = device.as_ref().map_or(4096, Device::active_mtu);
        self.config.active_mtu = self.config.active_mtu.min(mtu);
        self.config.icrc_code = self.cpu.icrc_code;
        self.progress.copy_piece = self.cpu.copy_piece;
        let backend: Box<dyn Backend + Send> = match &self.backend {
            BackendKind::Fabric(fabric) => {
                if self.wrap.is_some() {
                    return Err(OpenError::Unsupported(
                        "middleware (a capture, faults) needs the udp or packet backend",
                    ));
                }
                return Context::open_fabric_tuned(fabric, self.config, self.progress, |ep| ep)
                    .map_err(|e| OpenError::Open(e.to_string()));
            }
            BackendKind::Udp => {
                let ucfg = roce_io::UdpConfig::new(local)
                    .port(self.roce_port)
                    .remote_port(self.remote_port)
                    .cpu(self.cpu)
                    .shm(self.shm)
                    // What the engine takes from a ring unchecked may
                    // come without its ICRC (docs/shm.md).
                    .shm_icrc_trusted(self.config.icrc_trust_host)
                    // With the same-host path, processes of this user
                    // share the address (docs/host.md).
                    .share(self.shm);
                self.config.shared = self.shm;
                let port = self.roce_port;
                let refused = |e: io::Error| match e.kind() {
                    io::ErrorKind::AddrInUse => OpenError::PortInUse { addr: local, port },
                    io::ErrorKind::AddrNotAvailable => OpenError::NotLocal(local),
                    _ => OpenError::Io(format!("cannot open UDP {local}:{port}"), e),
                };
                // More than one GID: a backend that binds the others when
                // a QP or AH first sends from them (Shared::use_gid).
                if self.config.addrs.len() > 1 {
                    Box::new(roce_io::UdpSet::bind(ucfg).map_err(refused)?)
                } else {
                    Box::new(roce_io::UdpBackend::bind(ucfg).map_err(refused)?)
                }
            }
            BackendKind::Packet => {
                if self.roce_port != roce_wire::ROCE_V2_PORT {
                    return Err(OpenError::Unsupported(
                        "the packet backend carries UDP port 4791 only",
                    ));
                }
                let dev = device.ok_or(OpenError::NotLocal(local))?;
                if dev.info.loopback {
                    return Err(OpenError::LoopbackPacket(dev.info.name));
                }
                let pcfg = roce_io::PacketConfig::new(dev.info.name.clone())
                    .vlan(self.vlan)
                    .local_addrs(self.config.addrs.clone());
                Box::new(
                    roce_io::PacketBackend::open(pcfg).map_err(|e| match e.kind() {
                        io::ErrorKind::PermissionDenied => OpenError::NeedsRaw(e),
                        _ => {
                            OpenError::Io(format!("cannot open AF_PACKET on {}", dev.info.name), e)
                        }
                    })?,
                )
            }
        };
        let backend = match self.wrap.take() {
            Some(w) => w(backend).map_err(OpenError::Middleware)?,
            None => backend,
        };
        Context::start(backend, self.config, self.progress, None)
            .map_err(|e| OpenError::Open(e.to_string()))
    }
}

/// Why a device could not be listed or opened.
#[derive(Debug)]
pub enum OpenError {
    /// The interfaces could not be read.
    ListInterfaces(io::Error),
    /// No interface of that name.
    NoSuchDevice(String),
    /// The address is not one of this host's.
    NotLocal(IpAddr),
    /// The address is not on the interface named.
    NotOnInterface {
        /// The address.
        addr: IpAddr,
        /// The interface.
        ifname: String,
    },
    /// A GID index beyond the device's table.
    NoSuchGid {
        /// The device.
        device: String,
        /// The index asked for.
        index: usize,
        /// Entries in its table.
        len: usize,
    },
    /// The UDP port is taken on that address.
    PortInUse {
        /// The address.
        addr: IpAddr,
        /// The port.
        port: u16,
    },
    /// The packet backend was asked for on a loopback interface.
    LoopbackPacket(String),
    /// AF_PACKET needs CAP_NET_RAW.
    NeedsRaw(io::Error),
    /// A combination this backend does not support.
    Unsupported(&'static str),
    /// The middleware refused.
    Middleware(String),
    /// The engine refused the configuration.
    Open(String),
    /// Another system error, with what was being done.
    Io(String, io::Error),
}

impl fmt::Display for OpenError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OpenError::ListInterfaces(e) => write!(f, "cannot list interfaces: {e}"),
            OpenError::NoSuchDevice(n) => {
                write!(f, "no device {n} (roce devinfo -l lists them)")
            }
            OpenError::NotLocal(a) => write!(f, "{a} is not an address of this host"),
            OpenError::NotOnInterface { addr, ifname } => write!(
                f,
                "{addr} is not an address of {ifname} (use --bind with one of its addresses)"
            ),
            OpenError::NoSuchGid { device, index, len } => write!(
                f,
                "GID index {index} is not in the GID table of {device} ({len} entries; see roce devinfo -d {device})"
            ),
            OpenError::PortInUse { addr, port } if addr.is_loopback() => write!(
                f,
                "UDP port {port} on {addr} is held by a socket that does not share it (a process run with ROCE_SHM=0, another user's, or a kernel rxe device): give this end another address, e.g. --bind 127.0.0.2, or drop its GID index so that it takes a free one"
            ),
            OpenError::PortInUse { addr, port } => write!(
                f,
                "UDP port {port} on {addr} is in use (another RoCE stack, or a kernel rxe device?)"
            ),
            OpenError::LoopbackPacket(n) => write!(
                f,
                "the packet backend needs an Ethernet interface, not {n} (use the udp backend on loopback)"
            ),
            OpenError::NeedsRaw(e) => write!(
                f,
                "the packet backend needs CAP_NET_RAW (run as root, or setcap cap_net_raw+ep on roce): {e}"
            ),
            OpenError::Unsupported(w) => f.write_str(w),
            OpenError::Middleware(m) => f.write_str(m),
            OpenError::Open(m) => write!(f, "cannot open the device: {m}"),
            OpenError::Io(what, e) => write!(f, "{what}: {e}"),
        }
    }
}

impl std::error::Error for OpenError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_is_listed_with_its_addresses() {
        let lo = Device::list()
            .unwrap()
            .into_iter()
            .find(|d| d.interface().loopback)
            .expect("a loopback device");
        assert_eq!(lo.name(), format!("roce_{}", lo.interface().name));
        let v4: IpAddr = "127.0.0.1".parse().unwrap();
        assert_eq!(lo.gid(0).unwrap(), v4);
        assert_eq!(Device::for_address(v4).unwrap().name(), lo.name());
        assert_eq!(Device::by_name(&lo.name()).unwrap().gids(), lo.gids());
        let len = lo.gids().len();
        let e = lo.gid(len).unwrap_err().to_string();
        assert!(e.contains(&format!("GID index {len}")), "{e}");
    }

    #[test]
    fn errors_name_the_cause() {
        let e = Device::by_name("roce_nosuchif0").unwrap_err().to_string();
        assert_eq!(e, "no device roce_nosuchif0 (roce devinfo -l lists them)");
        let a: IpAddr = "127.0.0.1".parse().unwrap();
        let o = OpenOptions::new(BackendKind::Packet, a);
        let e = o.open().unwrap_err();
        assert!(matches!(e, OpenError::LoopbackPacket(_)), "{e}");
        let o =
            OpenOptions::new(BackendKind::Udp, "192.0.2.1".parse().unwrap()).interface(Some("lo"));
        let e = o.open().unwrap_err().to_string();
        assert!(e.starts_with("192.0.2.1 is not an address of lo"), "{e}");
        // Any 127/8 address is on lo, listed or not (perftest's `-d
        // roce_lo` on a side that moved to 127.0.0.2).
        let o =
            OpenOptions::new(BackendKind::Udp, "127.0.77.9".parse().unwrap()).interface(Some("lo"));
        let dev = o.device().unwrap().expect("lo");
        assert!(dev.interface().loopback);
    }

    #[test]
    fn a_busy_port_is_named_and_the_fabric_opens() {
        let a: IpAddr = "127.0.33.1".parse().unwrap();
        let port = roce_testkit::free_port();
        let first = OpenOptions::new(BackendKind::Udp, a)
            .roce_port(port, port)
            .open()
            .unwrap();
        let e = OpenOptions::new(BackendKind::Udp, a)
            .roce_port(port, port)
            .open()
            .unwrap_err();
        assert!(
            matches!(e, OpenError::PortInUse { addr, port: p } if addr == a && p == port),
            "{e}"
        );
        drop(first);
        let f = Fabric::new();
        let ctx = OpenOptions::new(BackendKind::Fabric(f), "10.9.0.1".parse().unwrap())
            .open()
            .unwrap();
        assert_eq!(ctx.addrs(), &["10.9.0.1".parse::<IpAddr>().unwrap()]);
    }
}

#[cfg(test)]
mod port_in_use_tests {
    use super::OpenError;

    /// On loopback the holder is a stack that does not share (processes
    /// of one user share it by default): the message names the likely
    /// ones and how to give this end another address.
    #[test]
    fn a_taken_loopback_port_names_the_fix() {
        let lo = OpenError::PortInUse {
            addr: "127.0.0.1".parse().unwrap(),
            port: 4791,
        }
        .to_string();
        assert!(lo.contains("--bind 127.0.0.2"), "{lo}");
        assert!(lo.contains("ROCE_SHM=0"), "{lo}");
        let other = OpenError::PortInUse {
            addr: "192.0.2.1".parse().unwrap(),
            port: 4791,
        }
        .to_string();
        assert!(other.contains("kernel rxe device"), "{other}");
        assert!(!other.contains("--bind"), "{other}");
    }
}
