//! `roce nvmf target --config FILE`: the JSON that Linux's nvmetcli saves
//! (`nvmetcli save`), the part that describes RDMA ports, subsystems,
//! allowed hosts and namespaces, read into a `TargetConfig`.
//!
//! Read: `ports[].addr.{trtype, adrfam, traddr, trsvcid}`, `ports[].portid`
//! (the first RDMA port is served); `subsystems[].nqn`,
//! `attr.allow_any_host` ("1"/"0"), `attr.serial`, `allowed_hosts[]`,
//! `namespaces[].{nsid, enable, device.{path, nguid, uuid}}`. A
//! namespace's `device.path` is a file or block device; this tool also
//! takes `device.mem_blocks` (a namespace in memory) and
//! `device.block_size` (default 512). Ignored: referrals, ANA groups,
//! passthru, discovery NQN settings, TCP/FC ports.

use std::path::{Path, PathBuf};

use roce_nvmf::target::*;
use roce_nvmf::wire::Nsid;
use serde_json::Value;

use super::config_error::ConfigError;

/// Parses a 16-byte identifier written as hex with optional dashes (a
/// UUID or an NGUID).
fn hex16(s: &str) -> Result<[u8; 16], ConfigError> {
    let h: String = s.chars().filter(|c| *c != '-').collect();
    if h.len() != 32 || !h.is_ascii() {
        return Err(ConfigError::NotHex16(s.to_string()));
    }
    let mut b = [0u8; 16];
    for (i, o) in b.iter_mut().enumerate() {
        *o = u8::from_str_radix(&h[2 * i..2 * i + 2], 16)
            .map_err(|_| ConfigError::NotHex(s.to_string()))?;
    }
    Ok(b)
}

fn text<'a>(v: &'a Value, what: &str) -> Result<&'a str, ConfigError> {
    v.as_str()
        .ok_or_else(|| ConfigError::NotString(what.to_string()))
}

/// Opens a namespace's storage as the configuration says.
fn storage(dev: &Value, nsid: u32) -> Result<Box<dyn Namespace>, ConfigError> {
    let bs = dev.get("block_size").and_then(Value::as_u64).unwrap_or(512);
    let bs = u32::try_from(bs)
        .ok()
        .filter(|b| b.is_power_of_two() && *b >= 512 && *b <= 65536);
    let bs = bs.ok_or(ConfigError::BlockSize { nsid })?;
    if let Some(n) = dev.get("mem_blocks").and_then(Value::as_u64) {
        if n == 0 || n.saturating_mul(bs as u64) > 1 << 36 {
            return Err(ConfigError::MemBlocks { nsid });
        }
        return Ok(Box::new(MemNamespace::new(n, bs)));
    }
    let path = text(
        dev.get("path").unwrap_or(&Value::Null),
        &format!("namespace {nsid} device.path"),
    )?;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .map_err(|error| ConfigError::OpenDevice {
            nsid,
            path: PathBuf::from(path),
            error,
        })?;
    let len = std::io::Seek::seek(&mut &f, std::io::SeekFrom::End(0)).map_err(|error| {
        ConfigError::Io {
            path: PathBuf::from(path),
            error,
        }
    })?;
    Ok(Box::new(FileNamespace::new(f, len, bs)))
}

/// Reads an nvmetcli-style JSON document.
pub(super) fn parse(
    doc: &str,
    default_ids: impl Fn(&str, u32) -> ([u8; 16], [u8; 16]),
) -> Result<TargetConfig, ConfigError> {
    let v: Value = serde_json::from_str(doc).map_err(ConfigError::NotJson)?;
    let limits = Limits::default();
    let mut port = PortInfo::default();
    let mut served: Option<Vec<String>> = None;
    for p in v
        .get("ports")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let a = &p["addr"];
        if a["trtype"].as_str() != Some("rdma") {
            continue;
        }
        port.traddr = text(&a["traddr"], "ports[].addr.traddr")?.to_owned();
        port.trsvcid = a["trsvcid"].as_str().unwrap_or("4420").to_owned();
        port.adrfam = if a["adrfam"].as_str() == Some("ipv6") {
            2
        } else {
            1
        };
        port.portid = p["portid"]
            .as_u64()
            .and_then(|n| u16::try_from(n).ok())
            .unwrap_or(1);
        served = p["subsystems"].as_array().map(|l| {
            l.iter()
                .filter_map(Value::as_str)
                .map(String::from)
                .collect()
        });
        break;
    }
    let mut subsystems = Vec::new();
    for s in v
        .get("subsystems")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let nqn = text(&s["nqn"], "subsystems[].nqn")?;
        if nqn.is_empty() || nqn.len() > 223 {
            return Err(ConfigError::BadNqn(nqn.to_string()));
        }
        if served.as_ref().is_some_and(|l| !l.iter().any(|n| n == nqn)) {
            continue;
        }
        let mut sub = Subsystem::new(nqn);
        if let Some(serial) = s["attr"]["serial"].as_str() {
            sub.serial = serial.to_owned();
        }
        let any = s["attr"]["allow_any_host"]
            .as_str()
            .is_none_or(|a| a == "1");
        if !any {
            let hosts = s["allowed_hosts"].as_array().into_iter().flatten();
            sub.allowed_hosts = Some(hosts.filter_map(Value::as_str).map(String::from).collect());
        }
        for n in s["namespaces"].as_array().into_iter().flatten() {
            if n["enable"].as_u64() == Some(0) {
                continue;
            }
            let nsid = n["nsid"]
                .as_u64()
                .and_then(|x| u32::try_from(x).ok())
                .filter(|x| *x != 0 && *x != u32::MAX);
            let nsid = nsid.ok_or_else(|| ConfigError::NoNsid(nqn.to_string()))?;
            if sub.namespaces.len() >= limits.max_namespaces {
                return Err(ConfigError::TooManyNamespaces {
                    nqn: nqn.to_string(),
                    max: limits.max_namespaces,
                });
            }
            if sub.namespaces.iter().any(|e| e.nsid == Nsid(nsid)) {
                return Err(ConfigError::NsidTwice {
                    nqn: nqn.to_string(),
                    nsid,
                });
            }
            let dev = &n["device"];
            let (mut nguid, mut uuid) = default_ids(nqn, nsid);
            if let Some(g) = dev["nguid"].as_str().filter(|g| !g.is_empty()) {
                nguid = hex16(g)?;
            }
            if let Some(u) = dev["uuid"].as_str().filter(|u| !u.is_empty()) {
                uuid = hex16(u)?;
            }
            let storage = storage(dev, nsid)?;
            sub.namespaces.push(NamespaceEntry {
                nsid: Nsid(nsid),
                nguid,
                uuid,
                storage,
            });
        }
        subsystems.push(sub);
    }
    if subsystems.is_empty() {
        return Err(ConfigError::NoSubsystem);
    }
    Ok(TargetConfig {
        subsystems,
        port,
        limits,
    })
}

/// Reads the file at `path`.
pub(super) fn load(
    path: &Path,
    default_ids: impl Fn(&str, u32) -> ([u8; 16], [u8; 16]),
) -> Result<TargetConfig, ConfigError> {
    let io = |error| ConfigError::Io {
        path: path.to_path_buf(),
        error,
    };
    let meta = std::fs::metadata(path).map_err(io)?;
    if meta.len() > 1 << 20 {
        return Err(ConfigError::TooLarge(path.to_path_buf()));
    }
    let doc = std::fs::read_to_string(path).map_err(io)?;
    parse(&doc, default_ids)
}

#[cfg(test)]
mod tests {
    use super::*;

    const DOC: &str = r#"{
      "hosts": [{"nqn": "nqn.2014-08.org.nvmexpress:uuid:host-a"}],
      "ports": [
        {"addr": {"adrfam": "ipv4", "traddr": "10.0.0.1", "treq": "not specified",
                  "trsvcid": "4421", "trtype": "rdma"},
         "portid": 3, "referrals": [], "subsystems": ["nqn.2026-01.test:a"]}
      ],
      "subsystems": [
        {"allowed_hosts": ["nqn.2014-08.org.nvmexpress:uuid:host-a"],
         "attr": {"allow_any_host": "0", "serial": "abc123", "version": "1.3"},
         "namespaces": [
           {"device": {"mem_blocks": 128, "block_size": 4096,
                       "nguid": "00112233-4455-6677-8899-aabbccddeeff", "uuid": ""},
            "enable": 1, "nsid": 2},
           {"device": {"mem_blocks": 8}, "enable": 0, "nsid": 3}
         ],
         "nqn": "nqn.2026-01.test:a"},
        {"attr": {"allow_any_host": "1"}, "namespaces": [], "nqn": "nqn.2026-01.test:not-on-the-port"}
      ]
    }"#;

    fn ids(_: &str, n: u32) -> ([u8; 16], [u8; 16]) {
        ([n as u8; 16], [0xEE; 16])
    }

    #[test]
    fn nvmetcli_document() {
        let c = parse(DOC, ids).unwrap();
        assert_eq!(
            (
                c.port.traddr.as_str(),
                c.port.trsvcid.as_str(),
                c.port.portid,
                c.port.adrfam
            ),
            ("10.0.0.1", "4421", 3, 1)
        );
        assert_eq!(c.subsystems.len(), 1);
        let s = &c.subsystems[0];
        assert_eq!(
            (s.nqn.as_str(), s.serial.as_str()),
            ("nqn.2026-01.test:a", "abc123")
        );
        assert!(s.host_allowed("nqn.2014-08.org.nvmexpress:uuid:host-a"));
        assert!(!s.host_allowed("nqn.other"));
        assert_eq!(s.namespaces.len(), 1);
        let n = &s.namespaces[0];
        assert_eq!(
            (n.nsid, n.storage.blocks(), n.storage.block_size()),
            (Nsid(2), 128, 4096)
        );
        assert_eq!(n.nguid[0..2], [0x00, 0x11]);
        assert_eq!(n.nguid[15], 0xFF);
        assert_eq!(n.uuid, [0xEE; 16]);
    }

    #[test]
    fn bad_documents() {
        let e = parse("[", ids).unwrap_err();
        assert!(matches!(e, ConfigError::NotJson(_)), "{e:?}");
        assert!(e.to_string().starts_with("not JSON: "), "{e}");
        let e = parse("{}", ids).unwrap_err();
        assert!(matches!(e, ConfigError::NoSubsystem), "{e:?}");
        assert_eq!(e.to_string(), "no subsystem to serve");
        let bad_bs = DOC.replace("\"block_size\": 4096", "\"block_size\": 1000");
        let e = parse(&bad_bs, ids).unwrap_err();
        assert!(matches!(e, ConfigError::BlockSize { nsid: 2 }), "{e:?}");
        assert_eq!(
            e.to_string(),
            "namespace 2: block_size must be a power of two from 512 to 65536"
        );
        let bad_guid = DOC.replace("00112233-4455", "zz112233-4455");
        let e = parse(&bad_guid, ids).unwrap_err();
        assert!(matches!(e, ConfigError::NotHex(_)), "{e:?}");
        assert_eq!(
            e.to_string(),
            "'zz112233-4455-6677-8899-aabbccddeeff' is not hex"
        );
        let twice = DOC
            .replace("\"nsid\": 3", "\"nsid\": 2")
            .replace("\"enable\": 0", "\"enable\": 1");
        let e = parse(&twice, ids).unwrap_err();
        assert!(matches!(e, ConfigError::NsidTwice { nsid: 2, .. }), "{e:?}");
        assert_eq!(e.to_string(), "nqn.2026-01.test:a: namespace 2 twice");
        let nofile = DOC.replace("\"mem_blocks\": 128,", "\"path\": \"/nonexistent/x\",");
        let e = parse(&nofile, ids).unwrap_err();
        assert!(
            matches!(e, ConfigError::OpenDevice { nsid: 2, .. }),
            "{e:?}"
        );
        assert!(
            e.to_string().starts_with("namespace 2: /nonexistent/x: "),
            "{e}"
        );
    }
}
