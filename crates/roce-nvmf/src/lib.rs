//! NVMe over Fabrics with the RDMA transport binding, sans-IO.
//!
//! * [`wire`]: checked views and plain reprs of the capsules and data
//!   structures (SQE, CQE, SGL descriptors, Fabrics commands, RDMA CM
//!   private data, Identify, log pages, features);
//! * [`target`]: a target core that turns received command capsules into
//!   [`target::Action`]s for a driver (RDMA READ/WRITE of host buffers,
//!   response capsules, disconnects) with keep-alive deadlines;
//! * [`initiator`]: builders for the commands a host sends and a parser
//!   for the responses;
//! * `driver` (feature `verbs`, on by default): the target core served
//!   and a host connected over `roce-verbs` RC queue pairs and RDMA CM.
//!
//! Outside `driver`, no function touches a socket, a queue pair or a clock: time comes
//! in as a [`core::time::Duration`] since any fixed origin, and the bytes
//! of capsules and host data come in and go out as slices and vectors.
//! Namespace storage is behind [`target::Namespace`] (memory and file
//! implementations are provided).
//!
//! Specifications cited: NVM Express Base Specification 1.4 ("NVMe base
//! 1.4") and NVM Express over Fabrics 1.1 ("NVMe-oF 1.1"). The
//! repository's `docs/nvmf.md` describes the design and what is missing.
#![forbid(unsafe_code)]

pub mod initiator;
pub mod target;
pub mod wire;

#[cfg(feature = "verbs")]
pub mod driver;
