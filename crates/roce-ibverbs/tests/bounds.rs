//! `tests/c/bounds.c`, built against rdma-core's headers and libraries
//! as any program is (`common::c_checks`), then run on the drop-in
//! libraries: counts a program
//! gets wrong (`num_sge` beyond the queue's limit, WR lists that loop or
//! outrun the queue) are errors, never a crash or a hang, and the
//! library writes to, reads from and closes only the descriptors it
//! owns (a completion channel's fd or `async_fd` the program closed and
//! reused for a file of its own).

mod common;

use std::time::Duration;

/// The checks `bounds.c` prints "ok" for when every case passes (each
/// case has its own alarm(), 10 s at most).
const CHECKS: usize = 29;

#[test]
fn bad_counts_and_closed_descriptors_from_c() {
    common::c_checks(
        "bounds",
        "infiniband/verbs.h",
        CHECKS,
        Duration::from_secs(120),
    );
}
