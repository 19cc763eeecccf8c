//! The scenario file as TOML gives it (serde structures, unknown keys
//! refused), and the `[cc]` table turned into the engine's settings.

use std::collections::BTreeMap;

use roce_core::{CcAlgorithm, CcConfig, DcqcnParams, Mlx5Params};
use serde::Deserialize;

use crate::time::NS;

use super::units::{bytes, rate, time, Q};
use super::{dscp, invalid, Error};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Raw {
    pub(super) name: Option<String>,
    pub(super) seed: Option<u64>,
    pub(super) duration: Q,
    pub(super) topology: RawTopo,
    pub(super) dcb: Option<RawDcb>,
    pub(super) buffer: Option<RawBuffer>,
    pub(super) ecn: Option<BTreeMap<String, RawEcn>>,
    pub(super) watchdog: Option<RawWatchdog>,
    pub(super) host: Option<RawHost>,
    pub(super) cc: Option<RawCc>,
    pub(super) metrics: Option<RawMetrics>,
    #[serde(default)]
    pub(super) workload: Vec<RawWorkload>,
}

#[derive(Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case", deny_unknown_fields)]
pub(super) enum RawTopo {
    Star {
        hosts: u32,
        rate: Q,
        delay: Q,
    },
    Dumbbell {
        left: u32,
        right: u32,
        host_rate: Q,
        core_rate: Q,
        delay: Q,
    },
    LeafSpine {
        leaves: u32,
        spines: u32,
        hosts_per_leaf: u32,
        host_rate: Q,
        fabric_rate: Q,
        delay: Q,
    },
    FatTree {
        k: u32,
        host_rate: Q,
        fabric_rate: Q,
        delay: Q,
    },
    Hpcc {},
    Ring {
        switches: u32,
        hosts_per_switch: u32,
        rate: Q,
        delay: Q,
        #[serde(default)]
        clockwise: bool,
    },
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawDcb {
    pub(super) pfc: Option<String>,
    pub(super) ets: Option<String>,
    pub(super) app: Option<String>,
    pub(super) pfc_quanta: Option<u16>,
    pub(super) pfc_refresh: Option<f64>,
    pub(super) dwrr_quantum_per_pct: Option<u32>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawBuffer {
    pub(super) size: Option<Q>,
    pub(super) xoff: Option<String>,
    pub(super) alpha: Option<f64>,
    pub(super) xoff_bytes: Option<Q>,
    pub(super) resume_offset: Option<Q>,
    pub(super) headroom: Option<Q>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawEcn {
    pub(super) kmin: Q,
    pub(super) kmax: Q,
    pub(super) pmax: f64,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawWatchdog {
    #[serde(default = "yes")]
    pub(super) enabled: bool,
    pub(super) poll: Option<Q>,
    pub(super) detect: Option<u32>,
    pub(super) restore: Option<Q>,
}

fn yes() -> bool {
    true
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawHost {
    pub(super) mtu: Option<u32>,
    pub(super) ecn: Option<String>,
    pub(super) qp_timeout: Option<u8>,
    pub(super) dscp: Option<u8>,
}

/// `[cc]`: the algorithm, the paper's parameters (`g`, `k`, `t_inc`, `b`,
/// `f`, `r_ai`, `r_hai`, `r_min`, `initial_alpha`), NVIDIA's `roce_rp`
/// names (integers in their sysfs units) and the `roce_np` settings.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawCc {
    algorithm: String,
    // Notification point.
    min_time_between_cnps: Option<Q>,
    cnp_dscp: Option<u8>,
    np_enabled: Option<bool>,
    // Paper.
    g: Option<f64>,
    k: Option<Q>,
    t_inc: Option<Q>,
    b: Option<Q>,
    f: Option<u32>,
    r_ai: Option<Q>,
    r_hai: Option<Q>,
    r_min: Option<Q>,
    initial_alpha: Option<f64>,
    // mlx5.
    rpg_time_reset: Option<u32>,
    rpg_byte_reset: Option<u32>,
    rpg_threshold: Option<u32>,
    rpg_ai_rate: Option<u32>,
    rpg_hai_rate: Option<u32>,
    rpg_gd: Option<u32>,
    rpg_min_dec_fac: Option<u32>,
    rpg_min_rate: Option<u32>,
    rate_to_set_on_first_cnp: Option<u32>,
    dce_tcp_g: Option<u32>,
    dce_tcp_rtt: Option<u32>,
    rate_reduce_monitor_period: Option<u32>,
    initial_alpha_value: Option<u32>,
    clamp_tgt_rate: Option<bool>,
    clamp_tgt_rate_after_time_inc: Option<bool>,
}

pub(super) fn cc_config(c: &RawCc) -> Result<CcConfig, Error> {
    let k = |f: &str| format!("cc.{f}");
    let paper_keys = [
        ("g", c.g.is_some()),
        ("k", c.k.is_some()),
        ("t_inc", c.t_inc.is_some()),
        ("b", c.b.is_some()),
        ("f", c.f.is_some()),
        ("r_ai", c.r_ai.is_some()),
        ("r_hai", c.r_hai.is_some()),
        ("r_min", c.r_min.is_some()),
        ("initial_alpha", c.initial_alpha.is_some()),
    ];
    let mlx5_keys = [
        ("rpg_time_reset", c.rpg_time_reset.is_some()),
        ("rpg_byte_reset", c.rpg_byte_reset.is_some()),
        ("rpg_threshold", c.rpg_threshold.is_some()),
        ("rpg_ai_rate", c.rpg_ai_rate.is_some()),
        ("rpg_hai_rate", c.rpg_hai_rate.is_some()),
        ("rpg_gd", c.rpg_gd.is_some()),
        ("rpg_min_dec_fac", c.rpg_min_dec_fac.is_some()),
        ("rpg_min_rate", c.rpg_min_rate.is_some()),
        (
            "rate_to_set_on_first_cnp",
            c.rate_to_set_on_first_cnp.is_some(),
        ),
        ("dce_tcp_g", c.dce_tcp_g.is_some()),
        ("dce_tcp_rtt", c.dce_tcp_rtt.is_some()),
        (
            "rate_reduce_monitor_period",
            c.rate_reduce_monitor_period.is_some(),
        ),
        ("initial_alpha_value", c.initial_alpha_value.is_some()),
        ("clamp_tgt_rate", c.clamp_tgt_rate.is_some()),
        (
            "clamp_tgt_rate_after_time_inc",
            c.clamp_tgt_rate_after_time_inc.is_some(),
        ),
    ];
    let refuse = |keys: &[(&str, bool)], alg: &str| -> Result<(), Error> {
        match keys.iter().find(|(_, set)| *set) {
            Some((name, _)) => Err(invalid(
                k(name),
                format!("not a parameter of algorithm \"{alg}\""),
            )),
            None => Ok(()),
        }
    };
    let mut cfg = match c.algorithm.as_str() {
        "none" => {
            refuse(&paper_keys, "none")?;
            refuse(&mlx5_keys, "none")?;
            CcConfig::default()
        }
        "dcqcn" => {
            refuse(&mlx5_keys, "dcqcn")?;
            let d = DcqcnParams::default();
            let ns = |f: &str, q: &Option<Q>, dflt: u64| -> Result<u64, Error> {
                Ok(q.as_ref()
                    .map(|q| time(&k(f), q))
                    .transpose()?
                    .map_or(dflt, |t| t / NS))
            };
            let bps = |f: &str, q: &Option<Q>, dflt: u64| -> Result<u64, Error> {
                q.as_ref().map_or(Ok(dflt), |q| rate(&k(f), q))
            };
            let p = DcqcnParams {
                g: c.g.unwrap_or(d.g),
                k: ns("k", &c.k, d.k)?,
                t_inc: ns("t_inc", &c.t_inc, d.t_inc)?,
                b: c.b.as_ref().map_or(Ok(d.b), |q| bytes(&k("b"), q))?,
                f: c.f.unwrap_or(d.f),
                r_ai: bps("r_ai", &c.r_ai, d.r_ai)?,
                r_hai: bps("r_hai", &c.r_hai, d.r_hai)?,
                r_min: bps("r_min", &c.r_min, d.r_min)?,
                initial_alpha: c.initial_alpha.unwrap_or(d.initial_alpha),
            };
            if !(p.g > 0.0 && p.g < 1.0) {
                return Err(invalid(k("g"), "must be in (0, 1)"));
            }
            if !(0.0..=1.0).contains(&p.initial_alpha) {
                return Err(invalid(k("initial_alpha"), "must be in [0, 1]"));
            }
            if p.t_inc == 0 {
                return Err(invalid(k("t_inc"), "must be positive"));
            }
            CcConfig {
                algorithm: CcAlgorithm::Dcqcn(p),
                ..CcConfig::dcqcn()
            }
        }
        "dcqcn-mlx5" => {
            refuse(&paper_keys, "dcqcn-mlx5")?;
            let d = Mlx5Params::default();
            let p = Mlx5Params {
                rpg_time_reset: c.rpg_time_reset.unwrap_or(d.rpg_time_reset),
                rpg_byte_reset: c.rpg_byte_reset.unwrap_or(d.rpg_byte_reset),
                rpg_threshold: c.rpg_threshold.unwrap_or(d.rpg_threshold),
                rpg_ai_rate: c.rpg_ai_rate.unwrap_or(d.rpg_ai_rate),
                rpg_hai_rate: c.rpg_hai_rate.unwrap_or(d.rpg_hai_rate),
                rpg_gd: c.rpg_gd.unwrap_or(d.rpg_gd),
                rpg_min_dec_fac: c.rpg_min_dec_fac.unwrap_or(d.rpg_min_dec_fac),
                rpg_min_rate: c.rpg_min_rate.unwrap_or(d.rpg_min_rate),
                rate_to_set_on_first_cnp: c
                    .rate_to_set_on_first_cnp
                    .unwrap_or(d.rate_to_set_on_first_cnp),
                dce_tcp_g: c.dce_tcp_g.unwrap_or(d.dce_tcp_g),
                dce_tcp_rtt: c.dce_tcp_rtt.unwrap_or(d.dce_tcp_rtt),
                rate_reduce_monitor_period: c
                    .rate_reduce_monitor_period
                    .unwrap_or(d.rate_reduce_monitor_period),
                initial_alpha_value: c.initial_alpha_value.unwrap_or(d.initial_alpha_value),
                clamp_tgt_rate: c.clamp_tgt_rate.unwrap_or(d.clamp_tgt_rate),
                clamp_tgt_rate_after_time_inc: c
                    .clamp_tgt_rate_after_time_inc
                    .unwrap_or(d.clamp_tgt_rate_after_time_inc),
            };
            if p.rpg_time_reset == 0 {
                return Err(invalid(k("rpg_time_reset"), "must be positive"));
            }
            if p.dce_tcp_g > 1024 {
                return Err(invalid(k("dce_tcp_g"), "at most 1024"));
            }
            if p.initial_alpha_value > 1023 {
                return Err(invalid(k("initial_alpha_value"), "at most 1023"));
            }
            if !(1..=100).contains(&p.rpg_min_dec_fac) {
                return Err(invalid(k("rpg_min_dec_fac"), "a percentage, 1..=100"));
            }
            CcConfig::dcqcn_mlx5_with(p)
        }
        o => {
            return Err(invalid(
                k("algorithm"),
                format!("`{o}`: expected \"dcqcn\", \"dcqcn-mlx5\" or \"none\""),
            ))
        }
    };
    if let Some(q) = &c.min_time_between_cnps {
        cfg.min_time_between_cnps = match q {
            // A bare number is µs, as in /sys/class/net/*/ecn/roce_np/.
            Q::Int(us) => us * 1_000,
            q => time(&k("min_time_between_cnps"), q)? / NS,
        };
    }
    if let Some(d) = c.cnp_dscp {
        cfg.cnp_dscp = dscp(&k("cnp_dscp"), d)?;
    }
    if let Some(e) = c.np_enabled {
        cfg.np_enabled = e;
    }
    Ok(cfg)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawMetrics {
    pub(super) sample_interval: Option<Q>,
    pub(super) max_queue_samples: Option<usize>,
    pub(super) throughput_bin: Option<Q>,
    pub(super) deadlock_check: Option<Q>,
    pub(super) deadlock_after: Option<Q>,
    pub(super) size_buckets: Option<Vec<Q>>,
    pub(super) convergence: Option<Q>,
}

#[derive(Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case", deny_unknown_fields)]
pub(super) enum RawWorkload {
    Poisson {
        cdf: String,
        load: f64,
        start: Option<Q>,
        stop: Option<Q>,
        dscp: Option<u8>,
        hosts: Option<u32>,
    },
    Incast {
        senders: Option<Vec<u32>>,
        count: Option<u32>,
        receiver: u32,
        size: Q,
        time: Option<Q>,
        dscp: Option<u8>,
    },
    Flow {
        src: u32,
        dst: u32,
        size: Q,
        start: Option<Q>,
        dscp: Option<u8>,
    },
}
