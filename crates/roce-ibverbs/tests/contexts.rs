//! `tests/c/contexts.c`, built against rdma-core's headers and libraries
//! as any program is (`common::c_checks`), then run on the drop-in
//! libraries: two contexts of one device
//! in one process share a GID table and reach each other through GID 0,
//! with objects and events of their own (issue 32, item 1).

mod common;

use std::time::Duration;

#[test]
fn two_contexts_of_one_device_from_c() {
    common::c_checks(
        "contexts",
        "infiniband/verbs.h",
        12,
        Duration::from_secs(60),
    );
}
