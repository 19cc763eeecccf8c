//! [`FaultPlan::parse`]: the text of `roce exec --faults` and
//! `ROCE_FAULTS` (docs/debugging.md, "Faults").
//!
//! A plan is rules separated by `;`. A rule whose words are all
//! `KEY=VALUE` sets the seeded faults of `roce perf --faults` (`loss`,
//! `duplicate`/`dup`, `reorder`, `corrupt`, `ce`, `delay`, `jitter`,
//! `seed`); any other rule starts with its action (`drop`, `drop-acks`,
//! `freeze`, `link-down`, `rnr`) followed by filters (`qp=`, `op=`,
//! `nth=`, `at=`, `for=`, `dir=`), separated by spaces or commas.

use roce_wire::{MessageKind, Opcode, Operation};

use super::FaultConfig;
use crate::backend::Nanos;

/// What a targeted rule does to the datagrams it matches.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FaultAction {
    /// Drop them.
    Drop,
    /// Hold the datagrams this process sends until the window ends, then
    /// send them in order (a peer that stalls).
    Freeze,
    /// Drop everything both ways (the link is down).
    LinkDown,
    /// The receive side answers every request that needs a receive with an
    /// RNR NAK (an engine setting, `DeviceConfig::force_rnr`; the
    /// middleware does nothing for it).
    Rnr,
}

impl FaultAction {
    /// The name the plan gives it.
    pub fn name(self) -> &'static str {
        match self {
            FaultAction::Drop => "drop",
            FaultAction::Freeze => "freeze",
            FaultAction::LinkDown => "link-down",
            FaultAction::Rnr => "rnr",
        }
    }
}

/// Which QP a rule aims at, by the destination QPN the datagrams carry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum QpSelector {
    /// Every QP.
    Any,
    /// Datagrams whose BTH names this destination QPN (`qp=0x11`).
    Qpn(u32),
    /// The `n`th QP the process creates, from 1 (`qp=#2`): received
    /// datagrams addressed to it, sent ones addressed to its peer (once
    /// connected). Resolved through a [`QpIndex`](super::QpIndex).
    Created(u32),
}

/// One opcode filter of `op=`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum OpFilter {
    /// A class: `send`, `write`, `read` (requests), `read-response`,
    /// `ack` (ACK, NAK, RNR NAK), `atomic` (requests), `atomic-ack`,
    /// `cnp`, `flush`.
    Kind(MessageKind),
    /// One operation of any transport, by the spec's name (`SEND_ONLY`).
    Op(Operation),
    /// One opcode byte (`0x11`).
    Byte(u8),
}

impl OpFilter {
    /// Whether the opcode byte `b` passes.
    pub fn matches(self, b: u8) -> bool {
        let Ok(o) = Opcode::from_u8(b) else {
            return matches!(self, OpFilter::Byte(x) if x == b);
        };
        match self {
            OpFilter::Kind(MessageKind::CompareSwap) => matches!(
                o.kind(),
                MessageKind::CompareSwap | MessageKind::FetchAdd | MessageKind::AtomicWrite
            ),
            OpFilter::Kind(k) => o.kind() == k,
            OpFilter::Op(op) => o.operation() == op,
            OpFilter::Byte(x) => x == b,
        }
    }
}

/// A targeted fault.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FaultRule {
    /// What it does.
    pub action: FaultAction,
    /// Which QP.
    pub qp: QpSelector,
    /// Which opcodes (empty: all).
    pub ops: Vec<OpFilter>,
    /// Only the `n`th datagram (from 1) that passes the other filters.
    pub nth: Option<u64>,
    /// The window, from the plan's start: from `from` to before `until`
    /// (`None`: to the end).
    pub from: Nanos,
    /// End of the window.
    pub until: Option<Nanos>,
    /// On the datagrams this process sends.
    pub tx: bool,
    /// On the datagrams it receives.
    pub rx: bool,
}

impl FaultRule {
    /// The rule as the plan would write it (for logs).
    pub fn describe(&self) -> String {
        let mut s = self.action.name().to_string();
        match self.qp {
            QpSelector::Any => {}
            QpSelector::Qpn(q) => s += &format!(" qp={q:#x}"),
            QpSelector::Created(n) => s += &format!(" qp=#{n}"),
        }
        if !self.ops.is_empty() {
            let ops: Vec<String> = self
                .ops
                .iter()
                .map(|o| match o {
                    OpFilter::Kind(k) => format!("{k:?}").to_lowercase(),
                    OpFilter::Op(o) => o.name().to_string(),
                    OpFilter::Byte(b) => format!("{b:#04x}"),
                })
                .collect();
            s += &format!(" op={}", ops.join("+"));
        }
        if let Some(n) = self.nth {
            s += &format!(" nth={n}");
        }
        if self.from > 0 || self.until.is_some() {
            s += &format!(" at={}ms", self.from as f64 / 1e6);
        }
        if let Some(u) = self.until {
            s += &format!(" for={}ms", u.saturating_sub(self.from) as f64 / 1e6);
        }
        s += match (self.tx, self.rx) {
            (true, true) => " dir=both",
            (false, true) => " dir=rx",
            _ => "",
        };
        s
    }

    /// Whether `t` (from the plan's start) is inside the window.
    pub fn in_window(&self, t: Nanos) -> bool {
        t >= self.from && self.until.is_none_or(|u| t < u)
    }
}

/// A whole fault plan: seeded faults and targeted rules.
#[derive(Clone, Debug, PartialEq)]
pub struct FaultPlan {
    /// The seeded faults (`None` when the plan sets none), for a
    /// [`FaultInjector`](super::FaultInjector).
    pub seeded: Option<FaultConfig>,
    /// The targeted rules, in the plan's order.
    pub rules: Vec<FaultRule>,
}

/// The seed when the plan gives none: fixed, so that the same plan gives
/// the same faults.
pub const DEFAULT_SEED: u64 = 0x0fa1_7000;

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

/// A duration: `250ms`, `1.5s`, `20us`, `100ns` (a bare number is
/// nanoseconds), up to an hour.
pub fn parse_duration(v: &str) -> Result<Nanos, String> {
    let split = v.find(|c: char| c.is_ascii_alphabetic()).unwrap_or(v.len());
    let (num, unit) = v.split_at(split);
    let scale = match unit {
        "" | "ns" => 1.0,
        "us" => 1e3,
        "ms" => 1e6,
        "s" => 1e9,
        _ => return Err(format!("'{v}': the unit must be ns, us, ms or s")),
    };
    num.parse::<f64>()
        .ok()
        .filter(|n| *n >= 0.0 && *n * scale <= 3600e9)
        .map(|n| (n * scale) as Nanos)
        .ok_or(format!("'{v}' is not a duration up to an hour"))
}

fn number(v: &str) -> Result<u64, String> {
    let r = match v.strip_prefix("0x").or_else(|| v.strip_prefix("0X")) {
        Some(h) => u64::from_str_radix(h, 16),
        None => v.parse(),
    };
    r.map_err(|_| format!("'{v}' is not a number"))
}

fn op_filter(v: &str) -> Result<OpFilter, String> {
    let kind = match v.to_ascii_lowercase().as_str() {
        "send" => Some(MessageKind::Send),
        "write" => Some(MessageKind::Write),
        "read" => Some(MessageKind::ReadRequest),
        "read-response" => Some(MessageKind::ReadResponse),
        "ack" => Some(MessageKind::Ack),
        "atomic" => Some(MessageKind::CompareSwap),
        "atomic-ack" => Some(MessageKind::AtomicAck),
        "cnp" => Some(MessageKind::Cnp),
        "flush" => Some(MessageKind::Flush),
        _ => None,
    };
    if let Some(k) = kind {
        return Ok(OpFilter::Kind(k));
    }
    if v.starts_with(|c: char| c.is_ascii_digit()) {
        return u8::try_from(number(v)?)
            .map(OpFilter::Byte)
            .map_err(|_| format!("op={v}: an opcode is one byte"));
    }
    Operation::ALL
        .iter()
        .find(|o| o.name().eq_ignore_ascii_case(v))
        .map(|&o| OpFilter::Op(o))
        .ok_or(format!(
            "op={v}: give send, write, read, read-response, ack, atomic, atomic-ack, cnp, \
             flush, an operation name (SEND_ONLY) or an opcode byte (0x04)"
        ))
}

/// Applies seeded fault `k`=`v` to `c`; `in_plan`: the error for an
/// unknown key also names the targeted rules of a [`FaultPlan`].
fn seeded(
    c: FaultConfig,
    delay: &mut (Nanos, Nanos),
    k: &str,
    v: &str,
    in_plan: bool,
) -> Result<FaultConfig, String> {
    Ok(match k {
        "loss" => c.loss(prob(v)?),
        "duplicate" | "dup" => c.duplicate(prob(v)?),
        "reorder" => c.reorder(prob(v)?),
        "corrupt" => c.corrupt(prob(v)?),
        "ce" => c.ce_mark(prob(v)?),
        "seed" => c.seed(number(v).map_err(|_| format!("seed={v} is not a number"))?),
        "delay" => {
            delay.0 = parse_duration(v)?;
            c
        }
        "jitter" => {
            delay.1 = parse_duration(v)?;
            c
        }
        _ if in_plan => {
            return Err(format!(
                "unknown fault '{k}' (seeded: loss, duplicate, reorder, corrupt, ce, delay, \
                 jitter, seed; targeted rules start with drop, drop-acks, freeze, link-down or rnr)"
            ))
        }
        _ => {
            return Err(format!(
                "unknown fault '{k}' (loss, duplicate, reorder, corrupt, ce, delay, jitter, seed)"
            ))
        }
    })
}

impl FaultConfig {
    /// The seeded faults of `roce perf --faults`: `KEY=VALUE` words
    /// separated by commas (loss, duplicate, reorder, corrupt, ce as
    /// probabilities, `0.02` or `2%`; delay and jitter as durations; seed),
    /// with `seed` when the words give none. The seeded part of a
    /// [`FaultPlan`], alone.
    ///
    /// ```
    /// use roce_io::FaultConfig;
    /// let c = FaultConfig::parse("loss=2%,delay=1ms", 9).unwrap();
    /// assert_eq!((c.loss, c.delay_ns, c.seed), (0.02, 1_000_000, 9));
    /// assert!(FaultConfig::parse("loss=2", 9).is_err());
    /// ```
    pub fn parse(spec: &str, seed: u64) -> Result<FaultConfig, String> {
        let mut c = FaultConfig::new(seed);
        let mut delay = (0, 0);
        for item in spec.split(',').filter(|i| !i.is_empty()) {
            let (k, v) = item
                .split_once('=')
                .ok_or(format!("'{item}' is not KEY=VALUE"))?;
            c = seeded(c, &mut delay, k, v, false)?;
        }
        Ok(c.delay(delay.0, delay.1))
    }
}

fn rule(action: &str, words: &[&str]) -> Result<FaultRule, String> {
    let (action, ack_only) = match action {
        "drop" => (FaultAction::Drop, false),
        "drop-acks" => (FaultAction::Drop, true),
        "freeze" => (FaultAction::Freeze, false),
        "link-down" => (FaultAction::LinkDown, false),
        "rnr" => (FaultAction::Rnr, false),
        a => {
            return Err(format!(
                "unknown action '{a}': use drop, drop-acks, freeze, link-down or rnr"
            ))
        }
    };
    let mut r = FaultRule {
        action,
        qp: QpSelector::Any,
        ops: Vec::new(),
        nth: None,
        from: 0,
        until: None,
        tx: action != FaultAction::Drop || !ack_only,
        rx: action == FaultAction::LinkDown,
    };
    if ack_only {
        // ACKs this process receives: its own requests are not answered.
        r.ops.push(OpFilter::Kind(MessageKind::Ack));
        (r.tx, r.rx) = (false, true);
    }
    let mut length = None;
    for w in words {
        let (k, v) = w
            .split_once('=')
            .ok_or(format!("{}: '{w}' is not KEY=VALUE", action.name()))?;
        match k {
            "qp" => {
                r.qp = match v.strip_prefix('#') {
                    Some(n) => QpSelector::Created(
                        u32::try_from(number(n)?)
                            .ok()
                            .filter(|&n| n > 0)
                            .ok_or(format!("qp=#{n}: count QPs from 1"))?,
                    ),
                    None => QpSelector::Qpn(
                        u32::try_from(number(v)?)
                            .ok()
                            .filter(|&q| q < 1 << 24)
                            .ok_or(format!("qp={v}: a QPN has 24 bits"))?,
                    ),
                }
            }
            "op" => {
                for o in v.split('+') {
                    r.ops.push(op_filter(o)?);
                }
            }
            "nth" => {
                r.nth = Some(
                    number(v)
                        .ok()
                        .filter(|&n| n > 0)
                        .ok_or(format!("nth={v}: count datagrams from 1"))?,
                )
            }
            "at" => r.from = parse_duration(v)?,
            "for" => length = Some(parse_duration(v)?),
            "dir" => {
                (r.tx, r.rx) = match v {
                    "tx" => (true, false),
                    "rx" => (false, true),
                    "both" => (true, true),
                    _ => return Err(format!("dir={v}: use tx, rx or both")),
                }
            }
            _ => {
                return Err(format!(
                    "{}: unknown filter '{k}' (qp, op, nth, at, for, dir)",
                    action.name()
                ))
            }
        }
    }
    r.until = length.map(|l| r.from.saturating_add(l));
    match action {
        FaultAction::Freeze | FaultAction::Rnr if r.until.is_none() => {
            return Err(format!("{}: say how long with for=DURATION", action.name()))
        }
        FaultAction::Freeze if r.rx => {
            return Err("freeze holds what this process sends: no dir=rx".into())
        }
        FaultAction::Rnr if r.qp != QpSelector::Any || !r.ops.is_empty() || r.nth.is_some() => {
            return Err("rnr takes only at= and for= (it is the whole device's)".into())
        }
        _ => {}
    }
    Ok(r)
}

impl FaultPlan {
    /// Parses a plan; the error says what is wrong, in words.
    ///
    /// ```
    /// use roce_io::{FaultAction, FaultPlan};
    /// let p = FaultPlan::parse("seed=7,loss=1%; drop-acks at=100ms for=50ms; rnr for=200ms")
    ///     .unwrap();
    /// assert_eq!(p.seeded.unwrap().seed, 7);
    /// assert_eq!(p.rules[1].action, FaultAction::Rnr);
    /// assert!(FaultPlan::parse("drop qp=#0").is_err());
    /// ```
    pub fn parse(spec: &str) -> Result<FaultPlan, String> {
        let mut plan = FaultPlan {
            seeded: None,
            rules: Vec::new(),
        };
        for part in spec.split(';') {
            let words: Vec<&str> = part
                .split(|c: char| c == ',' || c.is_whitespace())
                .filter(|w| !w.is_empty())
                .collect();
            let Some(first) = words.first() else { continue };
            if first.contains('=') {
                let mut c = plan.seeded.unwrap_or(FaultConfig::new(DEFAULT_SEED));
                let mut delay = (c.delay_ns, c.jitter_ns);
                for w in &words {
                    let (k, v) = w.split_once('=').ok_or(format!(
                        "'{w}' is not KEY=VALUE (a targeted rule goes after a ';')"
                    ))?;
                    c = seeded(c, &mut delay, k, v, true)?;
                }
                plan.seeded = Some(c.delay(delay.0, delay.1));
            } else {
                plan.rules.push(rule(first, &words[1..])?);
            }
        }
        if plan.seeded.is_none() && plan.rules.is_empty() {
            return Err("the fault plan is empty".into());
        }
        Ok(plan)
    }

    /// The RNR windows, from the plan's start.
    pub fn rnr_windows(&self) -> impl Iterator<Item = (Nanos, Nanos)> + '_ {
        self.rules
            .iter()
            .filter(|r| r.action == FaultAction::Rnr)
            .filter_map(|r| Some((r.from, r.until?)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_kind_of_rule() {
        let p = FaultPlan::parse(
            "seed=3,loss=2%,delay=1ms; drop qp=#2 op=send+ACKNOWLEDGE nth=4; \
             drop qp=0x12,op=0x11,dir=both; freeze at=1s for=300ms; link-down at=2s for=200ms; \
             drop-acks for=50ms; rnr at=10ms for=20ms",
        )
        .unwrap();
        let s = p.seeded.unwrap();
        assert_eq!((s.seed, s.loss, s.delay_ns), (3, 0.02, 1_000_000));
        let r = &p.rules;
        assert_eq!(r[0].qp, QpSelector::Created(2));
        assert_eq!(r[0].nth, Some(4));
        assert!(
            r[0].ops[1].matches(0x11) && r[0].ops[0].matches(0x04) && !r[0].ops[0].matches(0x0a)
        );
        assert_eq!(
            (r[1].qp, r[1].tx, r[1].rx),
            (QpSelector::Qpn(0x12), true, true)
        );
        assert_eq!(
            (r[2].from, r[2].until),
            (1_000_000_000, Some(1_300_000_000))
        );
        assert!(r[3].tx && r[3].rx);
        assert!(!r[4].tx && r[4].rx && r[4].ops[0].matches(0x11));
        assert_eq!(
            p.rnr_windows().collect::<Vec<_>>(),
            vec![(10_000_000, 30_000_000)]
        );
    }

    #[test]
    fn says_what_is_wrong() {
        for (spec, says) in [
            ("", "empty"),
            ("loss=2", "between 0 and 1"),
            ("bogus=1", "unknown fault"),
            ("explode", "unknown action"),
            ("drop op=nope", "op=nope"),
            ("drop qp=#0", "from 1"),
            ("drop qp=0x1000000", "24 bits"),
            ("freeze at=1s", "for=DURATION"),
            ("rnr qp=3 for=1s", "whole device"),
            ("drop at=5parsecs", "unit"),
            ("drop nth", "KEY=VALUE"),
            ("drop dir=up", "tx, rx or both"),
        ] {
            let e = FaultPlan::parse(spec).unwrap_err();
            assert!(e.contains(says), "{spec}: {e}");
        }
    }
}
