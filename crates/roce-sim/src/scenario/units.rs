//! Quantities with units in scenario files: sizes (B/KB/MB/GB, KiB/MiB/GiB),
//! rates (bps/K/M/G/T) and times (ps/ns/us/ms/s).

use serde::Deserialize;

use crate::time::{Ps, MS, NS, SEC, US};

use super::{invalid, Error};

/// A number or a string with a unit.
#[derive(Clone, Debug, Deserialize)]
#[serde(untagged)]
pub(super) enum Q {
    Int(u64),
    Float(f64),
    Str(String),
}

fn split_unit(s: &str) -> (f64, String) {
    let s = s.trim();
    let i = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '_'))
        .unwrap_or(s.len());
    let num = s[..i].replace('_', "").parse().unwrap_or(f64::NAN);
    (num, s[i..].trim().to_string())
}

pub(super) fn bytes(key: &str, q: &Q) -> Result<u64, Error> {
    let (n, unit) = match q {
        Q::Int(n) => return Ok(*n),
        Q::Float(f) => (*f, String::new()),
        Q::Str(s) => split_unit(s),
    };
    let m = match unit.as_str() {
        "" | "B" => 1.0,
        "KB" | "kB" => 1e3,
        "MB" => 1e6,
        "GB" => 1e9,
        "KiB" => 1024.0,
        "MiB" => 1048576.0,
        "GiB" => 1073741824.0,
        u => {
            return Err(invalid(
                key,
                format!("unknown size unit `{u}` (B, KB, MB, GB, KiB, MiB, GiB)"),
            ))
        }
    };
    if !n.is_finite() || n < 0.0 {
        return Err(invalid(key, "expected a size like `100KB`"));
    }
    Ok((n * m).round() as u64)
}

pub(super) fn rate(key: &str, q: &Q) -> Result<u64, Error> {
    let (n, unit) = match q {
        Q::Int(n) => (*n as f64, String::new()),
        Q::Float(f) => (*f, String::new()),
        Q::Str(s) => split_unit(s),
    };
    let u = unit.trim_end_matches("bps").trim_end_matches("b/s");
    let m = match u {
        "" => 1.0,
        "K" | "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        _ => {
            return Err(invalid(
                key,
                format!("unknown rate unit `{unit}` (e.g. `40G`, `100Gbps`)"),
            ))
        }
    };
    let r = (n * m).round();
    if !r.is_finite() || r < 1.0 {
        return Err(invalid(key, "expected a rate like `100G`"));
    }
    Ok(r as u64)
}

pub(super) fn time(key: &str, q: &Q) -> Result<Ps, Error> {
    let (n, unit) = match q {
        Q::Int(0) => return Ok(0),
        Q::Str(s) => split_unit(s),
        _ => return Err(invalid(key, "a time needs a unit, e.g. `10us`")),
    };
    let m = match unit.as_str() {
        "ps" => 1.0,
        "ns" => NS as f64,
        "us" | "µs" => US as f64,
        "ms" => MS as f64,
        "s" => SEC as f64,
        "" if n == 0.0 => 0.0,
        u => {
            return Err(invalid(
                key,
                format!("unknown time unit `{u}` (ps, ns, us, ms, s)"),
            ))
        }
    };
    if !n.is_finite() || n < 0.0 {
        return Err(invalid(key, "expected a time like `10us`"));
    }
    // Up to an hour: sums of times (a departure plus a link's delay) then
    // stay far from the picosecond clock's limit (213 days).
    if n * m > 3600.0 * SEC as f64 {
        return Err(invalid(key, "a time of at most 1 hour"));
    }
    Ok((n * m).round() as Ps)
}
