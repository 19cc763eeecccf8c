//! `roce devinfo`: the RoCE v2 devices this stack can open, in the manner
//! of `ibv_devinfo -v`.
//!
//! A device is a network interface (this stack has no kernel device: the
//! UDP backend opens any local address, the packet backend any Ethernet
//! interface). For each: its index, MAC and the node GUID derived from it,
//! state, netdev MTU and active path MTU, the GID table, and (with `-v`)
//! the limits of the engine (`roce-core`) and the verbs layer.

mod error;

use std::net::{IpAddr, Ipv6Addr};

use roce_core::qp::path_mtu_for_link;
use roce_io::InterfaceInfo;
use serde_json::{json, Value};

use error::DevinfoError;

/// Options of `roce devinfo`.
#[derive(clap::Args, Debug, Clone)]
pub(crate) struct DevinfoArgs {
    /// Show this interface only (down interfaces included); by default
    /// every interface that is up, loopback included (as the drop-in
    /// libibverbs lists it: `roce_lo`).
    #[arg(short = 'd', long = "ib-dev", alias = "dev", value_name = "IFACE")]
    dev: Option<String>,
    /// List the device names only (as `ibv_devinfo -l`), loopback and
    /// down interfaces included.
    #[arg(short = 'l', long = "list", conflicts_with_all = ["dev", "verbose", "json"])]
    list: bool,
    /// Also print the device capabilities (as `ibv_devinfo -v`).
    #[arg(short = 'v', long)]
    verbose: bool,
    /// Print JSON (always with the capabilities).
    #[arg(long)]
    json: bool,
    /// The port to query (as `ibv_devinfo -i`): every device has one
    /// port, number 1.
    #[arg(short = 'i', long = "ib-port", value_name = "PORT")]
    port: Option<u32>,
}

/// The largest path MTU of the IB enumeration (`IBV_MTU_4096`).
const MAX_MTU: u32 = 4096;

/// A capability: its `ibv_devinfo` name and value (a number or a word).
struct Cap {
    name: &'static str,
    value: Value,
    text: String,
}

fn num(name: &'static str, v: u64) -> Cap {
    Cap {
        name,
        value: json!(v),
        text: v.to_string(),
    }
}

fn hex(name: &'static str, v: u64) -> Cap {
    Cap {
        name,
        value: json!(v),
        text: format!("{v:#x}"),
    }
}

fn word(name: &'static str, json: Value, text: &str) -> Cap {
    Cap {
        name,
        value: json,
        text: text.to_string(),
    }
}

/// The code the tool chooses for this CPU ([`roce_io::CpuTuning::detect`],
/// passed to every device it opens through `OpenOptions::cpu`): on QEMU's emulated
/// CPU a table-driven ICRC and payload copies in pieces.
fn cpu_cap() -> Cap {
    let emulated = roce_io::emulated();
    let tuning = roce_io::CpuTuning::detect();
    let table = tuning.icrc_code == roce_wire::crc32::Code::Table;
    let piece = tuning.copy_piece;
    let icrc = if table { "table" } else { "crc32fast" };
    let crc = if table {
        "table-driven ICRC"
    } else {
        "ICRC by crc32fast (carry-less multiply where the CPU has it)"
    };
    let copies = piece.map_or("whole copies".to_string(), |p| {
        format!("payload copies in {p}-byte pieces")
    });
    let kind = if emulated {
        "emulated (QEMU TCG)"
    } else {
        "real"
    };
    let text = format!("{kind}: {crc}, {copies}");
    word(
        "cpu",
        json!({"emulated": emulated, "icrc": icrc, "copy_piece": piece}),
        &text,
    )
}

/// What the stack supports: `roce_verbs::LIMITS` (the drop-in
/// libibverbs answers `ibv_query_device` with the same), and the
/// transports, MTUs and backends.
fn capabilities() -> Vec<Cap> {
    let l = roce_verbs::LIMITS;
    vec![
        hex("max_mr_size", l.max_mr_size),
        hex("max_msg_sz", l.max_msg_sz.into()),
        num("max_qp", l.max_qp.into()),
        num("max_qp_wr", l.max_qp_wr.into()),
        num("max_sge", l.max_sge.into()),
        num("max_sge_rd", l.max_sge.into()),
        num("max_cq", l.max_cq.into()),
        num("max_cqe", l.max_cqe.into()),
        num("max_mr", l.max_mr.into()),
        num("max_pd", l.max_pd.into()),
        num("max_ah", l.max_ah.into()),
        num("max_qp_rd_atom", l.max_qp_rd_atom.into()),
        num("max_qp_init_rd_atom", l.max_qp_init_rd_atom.into()),
        word("atomic_cap", json!("ATOMIC_HCA"), "ATOMIC_HCA (1)"),
        num("max_srq_wr", l.max_srq_wr.into()),
        num("max_srq_sge", l.max_srq_sge.into()),
        num("max_inline_data", l.max_inline_data.into()),
        word("transports", json!(["RC", "UC", "UD"]), "RC UC UD"),
        word("srq", json!(true), "yes"),
        word(
            "path_mtus",
            json!([256, 512, 1024, 2048, 4096]),
            "256 512 1024 2048 4096",
        ),
        word(
            "udp_sport_range",
            json!([0xc000, 0xffff]),
            "0xc000-0xffff (per QP, from the QPN)",
        ),
        word(
            "backends",
            json!(["udp", "packet"]),
            "udp packet (AF_PACKET)",
        ),
        cpu_cap(),
    ]
}

/// The GID table of an interface: each IPv4 address as its IPv4-mapped
/// IPv6 address, each IPv6 address as itself, in the interface's order
/// (IPv4 first). Index = GID index; all RoCE v2.
pub(crate) fn gid_table(i: &InterfaceInfo) -> Vec<Ipv6Addr> {
    i.addrs
        .iter()
        .map(|a| match a {
            IpAddr::V4(v4) => v4.to_ipv6_mapped(),
            IpAddr::V6(v6) => *v6,
        })
        .collect()
}

/// The active path MTU of an interface: the largest IB MTU that fits
/// `netdev MTU - 80` (rxe's rule), 4096 at most.
pub(crate) fn active_mtu(i: &InterfaceInfo) -> u32 {
    i.mtu.map_or(1024, path_mtu_for_link).min(MAX_MTU)
}

/// The node GUID of a MAC ([`roce_verbs::node_guid`]), written as four
/// groups of 16 bits as `ibv_devinfo` does.
fn node_guid(mac: [u8; 6]) -> String {
    let g = roce_verbs::node_guid(mac).to_be_bytes();
    g.chunks(2)
        .map(|c| format!("{:02x}{:02x}", c[0], c[1]))
        .collect::<Vec<_>>()
        .join(":")
}

/// The link speed of an interface in Mb/s, as the kernel reports it
/// (`/sys/class/net/IFACE/speed`; none for lo, veth, or a link that is down).
fn link_speed_mbps(i: &InterfaceInfo) -> Option<u64> {
    std::fs::read_to_string(format!("/sys/class/net/{}/speed", i.name))
        .ok()
        .and_then(|s| s.trim().parse::<i64>().ok())
        .filter(|&s| s > 0)
        .map(|s| s as u64)
}

/// `active_speed` as ibv_devinfo words it, from the netdev speed (a
/// RoCE port is one lane of the link's rate: width 1X, as rxe reports).
fn speed_text(mbps: Option<u64>) -> String {
    match mbps {
        Some(m) => format!("{:.1} Gbps (netdev {m} Mb/s)", m as f64 / 1000.0),
        None => "unknown (the interface reports no link speed)".to_string(),
    }
}

/// `IBV_MTU_*` of a path MTU in bytes.
fn mtu_enum(mtu: u32) -> u32 {
    roce_core::qp::mtu_to_enum(mtu).into()
}

fn port_state(i: &InterfaceInfo) -> (&'static str, u32) {
    if i.up && i.running {
        ("PORT_ACTIVE", 4)
    } else {
        ("PORT_DOWN", 1)
    }
}

fn device_json(i: &InterfaceInfo) -> Value {
    let mac = i.mac.map(|m| m.0).unwrap_or_default();
    let (state, _) = port_state(i);
    let gids: Vec<Value> = gid_table(i)
        .iter()
        .enumerate()
        .map(|(k, g)| json!({"index": k, "gid": g.to_string(), "type": "RoCE v2"}))
        .collect();
    let caps: serde_json::Map<String, Value> = capabilities()
        .into_iter()
        .map(|c| (c.name.to_string(), c.value))
        .collect();
    json!({
        "name": i.name,
        "ifindex": i.index,
        "mac": i.mac.map(|m| m.to_string()),
        "node_guid": node_guid(mac),
        "state": state,
        "admin_up": i.up,
        "loopback": i.loopback,
        "link_layer": "Ethernet",
        "mtu": i.mtu,
        "active_mtu": active_mtu(i),
        "max_mtu": MAX_MTU,
        "addrs": i.addrs.iter().map(|a| a.to_string()).collect::<Vec<_>>(),
        "link_speed_mbps": link_speed_mbps(i),
        "active_width": "1X",
        "gid_tbl_len": gids.len(),
        "gids": gids,
        "caps": caps,
    })
}

fn device_text(i: &InterfaceInfo, verbose: bool) -> String {
    use std::fmt::Write;
    let mac = i.mac.map(|m| m.0).unwrap_or_default();
    let guid = node_guid(mac);
    let mut s = String::new();
    // The device's name, as `-l`, the other tools and ibv_devinfo on
    // the drop-in library call it.
    let _ = writeln!(s, "hca_id:\troce_{}", i.name);
    let _ = writeln!(s, "\ttransport:\t\t\tRoCE v2 (userspace)");
    let _ = writeln!(s, "\tnode_guid:\t\t\t{guid}");
    let _ = writeln!(s, "\tsys_image_guid:\t\t\t{guid}");
    let _ = writeln!(s, "\tif_index:\t\t\t{}", i.index);
    let _ = writeln!(
        s,
        "\tmac:\t\t\t\t{}",
        i.mac.map_or("-".to_string(), |m| m.to_string())
    );
    let _ = writeln!(s, "\tphys_port_cnt:\t\t\t1");
    if verbose {
        for c in capabilities() {
            let tabs = match c.name.len() {
                0..=6 => "\t\t\t\t",
                7..=14 => "\t\t\t",
                15..=22 => "\t\t",
                _ => "\t",
            };
            let _ = writeln!(s, "\t{}:{tabs}{}", c.name, c.text);
        }
    }
    let (state, n) = port_state(i);
    let active = active_mtu(i);
    let _ = writeln!(s, "\t\tport:\t1");
    let _ = writeln!(s, "\t\t\tstate:\t\t\t{state} ({n})");
    let _ = writeln!(s, "\t\t\tmax_mtu:\t\t{MAX_MTU} ({})", mtu_enum(MAX_MTU));
    let _ = writeln!(s, "\t\t\tactive_mtu:\t\t{active} ({})", mtu_enum(active));
    let _ = writeln!(
        s,
        "\t\t\tnetdev_mtu:\t\t{}",
        i.mtu.map_or("-".to_string(), |m| m.to_string())
    );
    let _ = writeln!(s, "\t\t\tactive_width:\t\t1X (1)");
    let _ = writeln!(
        s,
        "\t\t\tactive_speed:\t\t{}",
        speed_text(link_speed_mbps(i))
    );
    let _ = writeln!(s, "\t\t\tgid_tbl_len:\t\t{}", i.addrs.len());
    let _ = writeln!(s, "\t\t\tlink_layer:\t\tEthernet");
    for (k, g) in gid_table(i).iter().enumerate() {
        let _ = writeln!(s, "\t\t\tGID[{k:>3}]:\t\t{g}, RoCE v2");
    }
    s
}

/// The interfaces to show: the named one, or every one that is up.
fn select(all: Vec<InterfaceInfo>, dev: Option<&str>) -> Result<Vec<InterfaceInfo>, DevinfoError> {
    match dev {
        Some(name) => all
            .into_iter()
            // The interface's name, or the device's (`roce_eth0`, as
            // roce-verbs and the other tools name it).
            .find(|i| i.name == name.strip_prefix("roce_").unwrap_or(name))
            .map(|i| vec![i])
            .ok_or_else(|| DevinfoError::NoInterface(name.to_string())),
        None => Ok(all.into_iter().filter(|i| i.up && i.running).collect()),
    }
}

/// Runs `roce devinfo`; returns the exit status.
pub(crate) fn run(args: &DevinfoArgs) -> i32 {
    if let Some(p) = args.port.filter(|p| *p != 1) {
        return crate::fail(
            "devinfo",
            args.json,
            &format!("no port {p}: a device of this stack has one port, number 1"),
            1,
        );
    }
    if args.list {
        return match roce_verbs::Device::list() {
            Ok(l) => {
                println!("{} HCAs found:", l.len());
                for d in l {
                    println!("\t{}", d.name());
                }
                0
            }
            Err(e) => crate::fail("devinfo", false, &e.to_string(), 1),
        };
    }
    // The devices roce-verbs opens: interfaces with an address.
    let devs = match roce_verbs::Device::list()
        .map(|l| l.into_iter().map(|d| d.interface().clone()).collect())
        .map_err(DevinfoError::List)
        .and_then(|all| select(all, args.dev.as_deref()))
    {
        Ok(d) => d,
        Err(e) => return crate::fail("devinfo", args.json, &e.to_string(), 1),
    };
    if args.json {
        let v: Vec<Value> = devs.iter().map(device_json).collect();
        println!("{}", json!({ "devices": v }));
        return 0;
    }
    if devs.is_empty() {
        eprintln!("roce devinfo: no device (every interface is down; name one with -d)");
        return 1;
    }
    let text: Vec<String> = devs.iter().map(|i| device_text(i, args.verbose)).collect();
    print!("{}", text.join("\n"));
    0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guid_is_the_eui64_of_the_mac() {
        assert_eq!(
            node_guid([0x52, 0x54, 0x00, 0x12, 0x34, 0x56]),
            "5054:00ff:fe12:3456"
        );
        assert_eq!(node_guid([0; 6]), "0200:00ff:fe00:0000");
    }

    #[test]
    fn mtu_enumeration() {
        let e: Vec<u32> = [256, 512, 1024, 2048, 4096].map(mtu_enum).to_vec();
        assert_eq!(e, [1, 2, 3, 4, 5]);
    }
}
