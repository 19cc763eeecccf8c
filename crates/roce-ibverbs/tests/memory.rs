//! `tests/c/memory.c` and `tests/c/memstress.c`, compiled against
//! rdma-core's header and run on the library (issue 33): registered
//! memory that the program frees, unmaps, shrinks or protects under the
//! engine gives the peer an access error and the program an error
//! completion, never a signal; registration refuses pages the kernel's
//! pinning would refuse; the program's own SIGSEGV handler still gets its
//! faults; and a stress run of posting, polling and re-registering threads
//! with a peer writing into the buffers ends with every completion
//! accounted for.

mod common;

use std::time::Duration;

#[test]
fn memory_taken_away_under_the_engine_from_c() {
    common::c_checks("memory", "infiniband/verbs.h", 20, Duration::from_secs(90));
}

#[test]
fn posting_polling_and_reregistering_under_peer_writes_from_c() {
    common::c_checks(
        "memstress",
        "infiniband/verbs.h",
        4,
        Duration::from_secs(60),
    );
}
