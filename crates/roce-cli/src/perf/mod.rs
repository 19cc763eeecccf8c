//! `roce perf`: perftest-style bandwidth and latency tests between two
//! `roce` processes (or two contexts of one process with `--loopback`).
//!
//! Roles follow perftest: `roce perf write-bw` waits as the server,
//! `roce perf write-bw SERVER` connects as the client. The client decides
//! the parameters and sends them to the server over the TCP control
//! connection ([`control`]); both sides print the result table. Every run
//! verifies the transferred data unless `--no-verify`.

mod args;
pub(crate) mod backend;
mod bw;
mod control;
mod error;
mod interrupts;
mod lat;
pub(crate) mod messages;
mod net;
mod perftest;
mod perftest_cm;
mod perftest_peer;
mod perftest_plan;
mod perftest_session;
mod perftest_traffic;
pub(crate) mod perftest_wire;
mod print;
mod progress;
mod report;
mod run;
mod setup;

pub(crate) use args::PerfArgs;
pub(crate) use run::run;

impl From<roce_verbs::Error> for error::PerfError {
    fn from(e: roce_verbs::Error) -> error::PerfError {
        error::PerfError::Verbs(Box::new(e))
    }
}
