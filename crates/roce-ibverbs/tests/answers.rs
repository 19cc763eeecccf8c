//! `tests/c/answers.c`, built against rdma-core's headers and libraries
//! as any program is and run on the drop-in libraries: the answers
//! rdma-core, the kernel and rxe give where this library once answered
//! otherwise (issue 33) — `comp_vector` and port checks, read/atomic
//! depths, `ibv_reg_mr` of NULL, the GID queries' return conventions,
//! `IBV_QP_INIT_ATTR_CREATE_FLAGS` without a flag, a receive into a
//! region of another PD, `rdma_set_option` lengths, `cmd_fd`, ODP, and
//! scatter/gather entries outside their region completing in error.
//!
//! Needs a C compiler and `librdmacm-dev` (`.ci/run` installs it and sets
//! `ROCE_REQUIRE_C_HEADERS`; elsewhere a missing header is a skip).

mod common;

use std::time::Duration;

#[test]
fn answers_as_rdma_core_gives_them() {
    common::c_checks("answers", "rdma/rdma_cma.h", 17, Duration::from_secs(90));
}
