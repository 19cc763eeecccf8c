//! DCB settings written as operators write them (iproute2 `dcb`, see
//! `docs/dcb.md` §5): `prio-pfc all:off 3:on`, `prio-tc 3:3 6:6
//! tc-tsa all:strict 0:ets 3:ets tc-bw 0:50 3:50`, `dscp-prio 26:3 48:6`.
//!
//! Each string describes the whole setting: what it does not name is off
//! (PFC), TC0 / strict / 0 % (ETS) or priority 0 (app). A leading `dcb pfc
//! set dev eth0` (or `ets` / `app add`) is accepted and
//! ignored, so a command line can be pasted as is.

use std::fmt;

use serde::Serialize;

/// Transmission selection algorithm of a traffic class (802.1Qaz).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Tsa {
    /// Strict priority: a higher TC number wins over lower ones and over
    /// every ETS class.
    Strict,
    /// Enhanced transmission selection: a bandwidth share (DWRR).
    Ets,
}

/// The DCB configuration of every port of the fabric.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Dcb {
    /// PFC enabled per priority (lossless priorities).
    pub pfc_enabled: [bool; 8],
    /// The `delay` argument of `dcb pfc` (cable length in bits), if given.
    pub pfc_delay: Option<u32>,
    /// Priority → traffic class.
    pub prio_tc: [u8; 8],
    /// Transmission selection per traffic class.
    pub tc_tsa: [Tsa; 8],
    /// Bandwidth share per traffic class in percent (ETS classes sum to 100).
    pub tc_bw: [u8; 8],
    /// DSCP → priority (`dscp-prio`); unmapped DSCPs use priority 0.
    #[serde(serialize_with = "ser_slice")]
    pub dscp_prio: [u8; 64],
}

impl Default for Dcb {
    /// The typical RoCE profile: PFC on priority 3; priority 3 → TC3 (ets
    /// 50 %), priority 6 → TC6 (strict, CNPs), the rest TC0 (ets 50 %);
    /// DSCP 26 → priority 3, DSCP 48 → priority 6.
    fn default() -> Dcb {
        let mut d = Dcb {
            pfc_enabled: [false; 8],
            pfc_delay: None,
            prio_tc: [0; 8],
            tc_tsa: [Tsa::Strict; 8],
            tc_bw: [0; 8],
            dscp_prio: [0; 64],
        };
        d.pfc_enabled[3] = true;
        d.prio_tc[3] = 3;
        d.prio_tc[6] = 6;
        d.tc_tsa[0] = Tsa::Ets;
        d.tc_tsa[3] = Tsa::Ets;
        d.tc_bw[0] = 50;
        d.tc_bw[3] = 50;
        d.dscp_prio[26] = 3;
        d.dscp_prio[48] = 6;
        d
    }
}

fn ser_slice<S: serde::Serializer>(v: &[u8; 64], s: S) -> Result<S::Ok, S::Error> {
    s.collect_seq(v.iter())
}

/// A DCB string that does not parse.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DcbError {
    /// Which setting (`pfc`, `ets`, `app`).
    pub setting: &'static str,
    /// What is wrong.
    pub msg: String,
}

impl fmt::Display for DcbError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.setting, self.msg)
    }
}

impl std::error::Error for DcbError {}

fn err(setting: &'static str, msg: impl Into<String>) -> DcbError {
    DcbError {
        setting,
        msg: msg.into(),
    }
}

/// Drops a pasted `dcb <obj> set|add dev <ifname>` prefix.
fn strip_prefix<'a>(toks: &'a [&'a str]) -> &'a [&'a str] {
    if toks.first() == Some(&"dcb") {
        if let Some(i) = toks.iter().position(|t| *t == "dev") {
            return toks.get(i + 2..).unwrap_or(&[]);
        }
        return &toks[toks.len().min(3)..];
    }
    toks
}

/// Parses `KEY:VALUE` where KEY is `all` or a number below `keys`; calls
/// `set(key, value)` for each key it covers.
fn pairs(
    setting: &'static str,
    tok: &str,
    keys: u32,
    mut set: impl FnMut(usize, &str) -> Result<(), DcbError>,
) -> Result<(), DcbError> {
    let (k, v) = tok
        .split_once(':')
        .ok_or_else(|| err(setting, format!("expected KEY:VALUE, found `{tok}`")))?;
    if k == "all" {
        for i in 0..keys as usize {
            set(i, v)?;
        }
        return Ok(());
    }
    let i: u32 = k
        .parse()
        .map_err(|_| err(setting, format!("bad key `{k}` in `{tok}`")))?;
    if i >= keys {
        return Err(err(
            setting,
            format!("key {i} in `{tok}` out of range 0..{}", keys - 1),
        ));
    }
    set(i as usize, v)
}

fn num(setting: &'static str, v: &str, max: u32) -> Result<u8, DcbError> {
    match v.parse::<u32>() {
        Ok(n) if n <= max => Ok(n as u8),
        _ => Err(err(setting, format!("bad value `{v}` (0..={max})"))),
    }
}

impl Dcb {
    /// Sets PFC from `prio-pfc all:off 3:on [delay N]`; priorities not
    /// named are off.
    pub fn set_pfc(&mut self, s: &str) -> Result<(), DcbError> {
        const W: &str = "pfc";
        self.pfc_enabled = [false; 8];
        let toks: Vec<&str> = s.split_whitespace().collect();
        let mut it = strip_prefix(&toks).iter();
        let mut seen = false;
        while let Some(&t) = it.next() {
            match t {
                "prio-pfc" => {
                    seen = true;
                    let rest: Vec<&str> = it
                        .clone()
                        .take_while(|x| x.contains(':'))
                        .copied()
                        .collect();
                    for p in &rest {
                        it.next();
                        pairs(W, p, 8, |i, v| {
                            self.pfc_enabled[i] = match v {
                                "on" => true,
                                "off" => false,
                                _ => return Err(err(W, format!("expected on/off, found `{v}`"))),
                            };
                            Ok(())
                        })?;
                    }
                }
                "delay" => {
                    let v = it.next().ok_or_else(|| err(W, "`delay` needs a value"))?;
                    self.pfc_delay =
                        Some(v.parse().map_err(|_| err(W, format!("bad delay `{v}`")))?);
                }
                other => return Err(err(W, format!("unknown parameter `{other}`"))),
            }
        }
        if !seen {
            return Err(err(W, "expected `prio-pfc PRIO:on|off ...`"));
        }
        Ok(())
    }

    /// Sets ETS from `prio-tc P:T ... tc-tsa T:strict|ets ... tc-bw
    /// T:PCT ...`; what is not named is TC0 / strict / 0 %.
    pub fn set_ets(&mut self, s: &str) -> Result<(), DcbError> {
        const W: &str = "ets";
        self.prio_tc = [0; 8];
        self.tc_tsa = [Tsa::Strict; 8];
        self.tc_bw = [0; 8];
        let toks: Vec<&str> = s.split_whitespace().collect();
        let toks = strip_prefix(&toks);
        let mut i = 0;
        while i < toks.len() {
            let section = toks[i];
            i += 1;
            let start = i;
            while i < toks.len() && toks[i].contains(':') {
                i += 1;
            }
            let args = &toks[start..i];
            if args.is_empty() {
                return Err(err(W, format!("`{section}` needs KEY:VALUE arguments")));
            }
            for a in args {
                match section {
                    "prio-tc" => pairs(W, a, 8, |p, v| {
                        self.prio_tc[p] = num(W, v, 7)?;
                        Ok(())
                    })?,
                    "tc-tsa" => pairs(W, a, 8, |t, v| {
                        self.tc_tsa[t] = match v {
                            "strict" => Tsa::Strict,
                            "ets" => Tsa::Ets,
                            _ => {
                                return Err(err(
                                    W,
                                    format!("unsupported tsa `{v}` (strict or ets)"),
                                ))
                            }
                        };
                        Ok(())
                    })?,
                    "tc-bw" => pairs(W, a, 8, |t, v| {
                        self.tc_bw[t] = num(W, v, 100)?;
                        Ok(())
                    })?,
                    other => return Err(err(W, format!("unknown parameter `{other}`"))),
                }
            }
        }
        self.validate_ets()
    }

    /// Checks that ETS shares sum to 100 and strict classes have none.
    pub fn validate_ets(&self) -> Result<(), DcbError> {
        let mut sum = 0u32;
        let mut any = false;
        for tc in 0..8 {
            match self.tc_tsa[tc] {
                Tsa::Ets => {
                    any = true;
                    sum += self.tc_bw[tc] as u32;
                }
                Tsa::Strict if self.tc_bw[tc] != 0 => {
                    return Err(err(
                        "ets",
                        format!("tc {tc} is strict but has tc-bw {}", self.tc_bw[tc]),
                    ))
                }
                Tsa::Strict => {}
            }
        }
        if any && sum != 100 {
            return Err(err(
                "ets",
                format!("tc-bw of the ets classes sums to {sum}, not 100"),
            ));
        }
        Ok(())
    }

    /// Applies `dscp-prio D:P ...` (the whole table is replaced: DSCPs not
    /// named map to priority 0).
    pub fn set_app(&mut self, s: &str) -> Result<(), DcbError> {
        const W: &str = "app";
        let toks: Vec<&str> = s.split_whitespace().collect();
        let toks = strip_prefix(&toks);
        if toks.first() != Some(&"dscp-prio") || toks.len() < 2 {
            return Err(err(W, "expected `dscp-prio DSCP:PRIO ...`"));
        }
        let mut map = [0u8; 64];
        for a in &toks[1..] {
            pairs(W, a, 64, |d, v| {
                map[d] = num(W, v, 7)?;
                Ok(())
            })?;
        }
        self.dscp_prio = map;
        Ok(())
    }

    /// Traffic class of a priority.
    pub fn tc_of(&self, prio: u8) -> u8 {
        self.prio_tc[prio as usize & 7]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operator_syntax() {
        let mut d = Dcb::default();
        d.set_pfc("prio-pfc all:off 3:on 4:on delay 4096").unwrap();
        assert_eq!(
            d.pfc_enabled,
            [false, false, false, true, true, false, false, false]
        );
        assert_eq!(d.pfc_delay, Some(4096));
        d.set_pfc("dcb pfc set dev eth0 prio-pfc all:on").unwrap();
        assert_eq!(d.pfc_enabled, [true; 8]);
        d.set_ets("prio-tc 3:3 6:6 tc-tsa all:strict 0:ets 3:ets tc-bw 0:70 3:30")
            .unwrap();
        assert_eq!(d.prio_tc, [0, 0, 0, 3, 0, 0, 6, 0]);
        assert_eq!(d.tc_tsa[0], Tsa::Ets);
        assert_eq!(d.tc_tsa[6], Tsa::Strict);
        assert_eq!(d.tc_bw[0], 70);
        d.set_app("dcb app add dev eth0 dscp-prio 26:3 48:6 10:1")
            .unwrap();
        assert_eq!(d.dscp_prio[26], 3);
        assert_eq!(d.dscp_prio[48], 6);
        assert_eq!(d.dscp_prio[10], 1);
        assert_eq!(d.dscp_prio[0], 0);
    }

    #[test]
    fn bad_input_is_an_error_that_says_why() {
        let mut d = Dcb::default();
        let e = d.set_pfc("prio-pfc 3:maybe").unwrap_err();
        assert!(e.msg.contains("on/off"), "{e}");
        let e = d.set_pfc("prio-pfc 9:on").unwrap_err();
        assert!(e.msg.contains("out of range"), "{e}");
        let e = d.set_pfc("prio-flow 3:on").unwrap_err();
        assert!(e.msg.contains("prio-flow"), "{e}");
        let e = d
            .set_ets("tc-tsa all:strict 0:ets 3:ets tc-bw 0:50 3:40")
            .unwrap_err();
        assert!(e.msg.contains("sums to 90"), "{e}");
        let e = d.set_ets("tc-tsa 0:wrr").unwrap_err();
        assert!(e.msg.contains("wrr"), "{e}");
        let e = d.set_ets("prio-tc 3").unwrap_err();
        assert!(e.msg.contains("KEY:VALUE"), "{e}");
        let e = d.set_app("dscp-prio 64:3").unwrap_err();
        assert!(e.msg.contains("out of range"), "{e}");
        let e = d.set_app("dscp-prio 26:8").unwrap_err();
        assert!(e.msg.contains("bad value"), "{e}");
        assert_eq!(e.to_string(), "app: bad value `8` (0..=7)");
    }
}
