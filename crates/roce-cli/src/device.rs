//! What every command shares to open its device: the `--faults` and
//! `--pcap` middleware over the backend that roce-verbs opens
//! ([`roce_verbs::OpenOptions`]).

use std::path::Path;

/// The middleware the flags ask for: `--faults` outermost, so that a
/// `--pcap` tap under it records what goes on the wire (as `tc netem`
/// before tcpdump would). `None` when neither is asked for.
pub(crate) fn middleware(
    pcap: Option<&Path>,
    faults: Option<&str>,
) -> Result<Option<roce_verbs::Wrap>, String> {
    if pcap.is_none() && faults.is_none() {
        return Ok(None);
    }
    let faults = faults.map(parse_faults).transpose()?;
    let pcap = pcap.map(Path::to_path_buf);
    Ok(Some(Box::new(
        move |mut b: Box<dyn roce_io::Backend + Send>| {
            if let Some(path) = &pcap {
                // Datagrams are recorded with synthetic Ethernet headers (the
                // backend's view: what it sent and what it received).
                let tap = roce_io::PcapTap::create(b, path)
                    .map_err(|e| format!("cannot create {}: {e}", path.display()))?
                    .with_time_offset(unix_nanos());
                b = Box::new(tap);
            }
            if let Some(f) = faults {
                b = Box::new(roce_io::FaultInjector::new(b, f));
            }
            Ok(b)
        },
    )))
}

/// Wall-clock nanoseconds, for pcap timestamps.
fn unix_nanos() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// Checks a `--faults` specification (kept as text: the flags stay small).
pub(crate) fn check_faults(spec: &str) -> Result<String, String> {
    parse_faults(spec).map(|_| spec.to_string())
}

/// Parses a `--faults` specification.
fn parse_faults(spec: &str) -> Result<roce_io::FaultConfig, String> {
    fn prob(v: &str) -> Result<f64, String> {
        let (num, scale) = match v.strip_suffix('%') {
            Some(n) => (n, 0.01),
            None => (v, 1.0),
        };
        let p = num
            .parse::<f64>()
            .map_err(|_| format!("'{v}' is not a probability"))?
            * scale;
        if (0.0..=1.0).contains(&p) {
            Ok(p)
        } else {
            Err(format!("'{v}' is not between 0 and 1 (0% and 100%)"))
        }
    }
    fn nanos(v: &str) -> Result<u64, String> {
        let split = v.find(|c: char| c.is_ascii_alphabetic()).unwrap_or(v.len());
        let (num, unit) = v.split_at(split);
        let scale = match unit {
            "" | "ns" => 1.0,
            "us" => 1e3,
            "ms" => 1e6,
            "s" => 1e9,
            _ => return Err(format!("'{v}': the unit must be ns, us, ms or s")),
        };
        let n = num
            .parse::<f64>()
            .ok()
            .filter(|n| *n >= 0.0 && *n * scale <= 60e9)
            .ok_or(format!("'{v}' is not a duration up to 60 s"))?;
        Ok((n * scale) as u64)
    }
    let mut c = roce_io::FaultConfig::new(0x0fa1_7000 ^ u64::from(std::process::id()));
    let (mut delay, mut jitter) = (0, 0);
    for item in spec.split(',').filter(|i| !i.is_empty()) {
        let (k, v) = item
            .split_once('=')
            .ok_or(format!("'{item}' is not KEY=VALUE"))?;
        c = match k {
            "loss" => c.loss(prob(v)?),
            "duplicate" | "dup" => c.duplicate(prob(v)?),
            "reorder" => c.reorder(prob(v)?),
            "corrupt" => c.corrupt(prob(v)?),
            "ce" => c.ce_mark(prob(v)?),
            "seed" => c.seed(v.parse().map_err(|_| format!("'{v}' is not a seed"))?),
            "delay" => {
                delay = nanos(v)?;
                c
            }
            "jitter" => {
                jitter = nanos(v)?;
                c
            }
            _ => return Err(format!("unknown fault '{k}'")),
        };
    }
    Ok(c.delay(delay, jitter))
}
