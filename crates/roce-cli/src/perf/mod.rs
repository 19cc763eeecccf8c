//! `roce perf`: perftest-style bandwidth and latency tests between two
//! `roce` processes (or two contexts of one process with `--loopback`).
//!
//! Roles follow perftest: `roce perf write-bw` waits as the server,
//! `roce perf write-bw SERVER` connects as the client. The client decides
//! the parameters and sends them to the server over the TCP control
//! connection ([`control`]); both sides print the result table. Every run
//! verifies the transferred data unless `--no-verify`.
//!
//! One session driver ([`session`]) runs every test: per size, the
//! buffers made ready, a sync, perftest's traffic loop for the side's role
//! ([`traffic`], [`traffic_lat`]) and a report. It talks to the peer
//! through one trait, [`plane::ControlPlane`] (exchange the endpoints,
//! sync, report), with three implementations: roce perf's own exchange
//! ([`native`]), perftest's over TCP ([`perftest`]) and over rdma_cm
//! ([`perftest_cm`]), the two perftest ones one plane
//! ([`perftest_plane`]) over two channels.

mod args;
pub(crate) mod backend;
mod control;
mod error;
mod interrupts;
mod lane;
pub(crate) mod messages;
mod native;
mod native_report;
mod net;
mod perftest;
mod perftest_cm;
mod perftest_peer;
mod perftest_plan;
mod perftest_plane;
pub(crate) mod perftest_wire;
mod plane;
mod print;
mod progress;
mod report;
mod run;
mod session;
mod setup;
mod traffic;
mod traffic_lat;

pub(crate) use args::PerfArgs;
pub(crate) use run::run;

// A verbs call's error (the general one or a call's own) is a
// `PerfError::Verbs`; the shared helpers' (`crate::device`, and the
// rdma_cm accept loop of `crate::rping::first_to_connect`) a
// `PerfError::Device`.
wrap_errors!(
    error::PerfError:
    roce_verbs::Error => Verbs,
    roce_verbs::PostError => Verbs,
    roce_verbs::CreateError => Verbs,
    roce_verbs::ModifyQpError => Verbs,
    roce_verbs::RegMrError => Verbs,
    roce_verbs::CqError => Verbs,
    roce_verbs::RegionError => Verbs,
    crate::device::DeviceError => Device,
    crate::rping::RpingError => Device,
);

/// A failed verbs (or rdma_cm) call, said with what was being done
/// (`.map_err(during("post_send"))`).
pub(crate) fn during<E: std::error::Error + Send + Sync + 'static>(
    what: impl Into<String>,
) -> impl FnOnce(E) -> error::PerfError {
    move |e| error::PerfError::Call(what.into(), Box::new(e))
}
