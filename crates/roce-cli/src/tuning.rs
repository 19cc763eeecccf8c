//! The code choices for this machine's CPU ([`roce_io::CpuTuning`]),
//! detected for every device the tool opens and passed to the libraries as
//! options (they keep no process-wide switch): under QEMU's emulated CPU
//! the table-driven ICRC and payload copies in pieces, as the lab's VMs
//! need; elsewhere the defaults. `roce devinfo` shows the choice.

use std::net::IpAddr;

use roce_io::{Backend, CpuTuning};
use roce_verbs::{Context, DeviceConfig, ProgressConfig};

/// [`DeviceConfig::new`] with the ICRC code for this CPU.
pub(crate) fn device_config(local: IpAddr) -> DeviceConfig {
    let mut cfg = DeviceConfig::new(local);
    cfg.icrc_code = CpuTuning::detect().icrc_code;
    cfg
}

/// [`roce_io::UdpConfig::new`] tuned for this CPU.
pub(crate) fn udp_config(local: IpAddr) -> roce_io::UdpConfig {
    roce_io::UdpConfig::new(local).cpu(CpuTuning::detect())
}

/// [`Context::open`] with payload copies sized for this CPU.
pub(crate) fn open(
    backend: impl Backend + Send + 'static,
    cfg: DeviceConfig,
) -> Result<Context, roce_verbs::Error> {
    let progress = ProgressConfig {
        copy_piece: CpuTuning::detect().copy_piece,
        ..ProgressConfig::default()
    };
    Context::open_with(backend, cfg, progress)
}
