//! A deterministic discrete-event simulator of a lossless Ethernet fabric
//! whose hosts run the real roce-core engine.
//!
//! * **Time** is integer picoseconds ([`Ps`]); events sit in radix heaps
//!   keyed by (time, sequence number), so a run is a pure function of the
//!   scenario and its seed.
//! * **Two halves**: the hosts and the switches each have their own event
//!   queue and exchange messages between windows as long as the smallest
//!   host-link delay (conservative synchronisation, `run.rs`), on one
//!   thread or two; the results are identical either way.
//! * **Packets** are the IP datagrams `roce_core::Device::poll_transmit`
//!   emits, carried with metadata (priority from the DSCP by the
//!   `dscp-prio` map, ingress port, destination). Receivers run
//!   `handle_datagram` on the bytes, so the engine parses them and checks
//!   the ICRC; switches mark ECN CE in the IPv4 TOS byte and fix the header
//!   checksum (the ICRC masks TOS). Line time is datagram + 14 (Ethernet)
//!   + 4 (VLAN) + 4 (FCS) + 20 (preamble, IFG) bytes.
//! * **Links** are full duplex with a rate and a propagation delay; a frame
//!   arrives `serialization + delay` after it starts (store and forward).
//! * **Switches** ([`switch`]) have a shared buffer charged
//!   per ingress (port, priority), 802.1Qbb PFC with static or dynamic XOFF
//!   thresholds, XON hysteresis, headroom and pause refresh; per-priority
//!   egress queues scheduled by ETS (strict TCs, then DWRR over `tc-bw`);
//!   RED/ECN marking per TC on dequeue; ECMP; a PFC watchdog.
//! * **Hosts** pull packets from their engine only when the link is idle,
//!   honour per-priority pause timers, and run the engine's timers.
//!   Flows are RDMA WRITEs on lazily connected RC QPs; FCT is measured at
//!   the send completion.
//!
//! Use [`Scenario::from_toml`] and [`run`], or build a [`Simulation`]
//! directly from a [`Topology`], configs and [`FlowSpec`]s.
//!
//! Where it sits: beside `roce-verbs`, on top of `roce-core` (the hosts'
//! engines) and `roce-wire`; `roce sim` runs scenario files with it. What it
//! models and the experiments it reproduces are described in the
//! repository's `docs/dcb.md`, and the shipped scenarios in `scenarios/`.
//!
//! # Example
//!
//! A 2:1 incast of 200 KB WRITEs at 40 G with PFC and no congestion control:
//!
//! ```
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let scenario = roce_sim::Scenario::from_toml(r#"
//!     name = "incast-2to1"
//!     seed = 1
//!     duration = "1ms"
//!     [topology]
//!     kind = "star"
//!     hosts = 3
//!     rate = "40G"
//!     delay = "1us"
//!     [dcb]
//!     pfc = "prio-pfc all:off 3:on"
//!     app = "dscp-prio 26:3 48:6"
//!     [[workload]]
//!     kind = "incast"
//!     count = 2
//!     receiver = 0
//!     size = "200KB"
//! "#)?;
//! let results = roce_sim::run(&scenario, |_| {});
//! assert_eq!(results.flows_completed, 2);
//! assert_eq!(results.drops.total(), 0); // lossless
//! # Ok(()) }
//! ```
#![forbid(unsafe_code)]

pub mod config;
pub mod dcb;
mod event;
mod halves;
mod host;
pub mod metrics;
mod packet;
mod port;
mod run;
pub mod scenario;
mod sim;
pub mod switch;
pub mod time;
pub mod topology;
pub mod workload;

pub use config::{
    BufferConfig, EcnTc, FabricConfig, Headroom, HostConfig, MetricsConfig, WatchdogConfig, Xoff,
};
pub use dcb::{Dcb, DcbError, Tsa};
pub use event::Node;
pub use metrics::{
    jain_index, BucketStats, DeadlockReport, EngineTotals, Fairness, FlowRecord, PauseTimeline,
    PortReport, QpCcReport, QueueSample, QueueStats, Results, ThroughputSeries,
};
pub use roce_core::{CcAlgorithm, CcConfig, DcqcnParams, Mlx5Params};
pub use scenario::{parse_time, run, run_on, Error, Scenario, Workload};
pub use sim::{ideal_fct, Simulation};
pub use switch::{DropCounters, WatchdogEvent};
pub use time::Ps;
pub use topology::{gbps, LinkSpec, StaticRoute, Topology};
pub use workload::{Cdf, FlowSpec};
