//! `tests/c/abuse.c`, built against rdma-core's headers and libraries
//! as any program is (`common::c_checks`), then run on the drop-in
//! libraries: every bad input gets the
//! error rdma-core gives, unmapped registered memory does not fault the
//! engine, and the program ends although it frees nothing.

mod common;

use std::time::Duration;

#[test]
fn bad_input_and_hostile_use_from_c() {
    common::c_checks("abuse", "infiniband/verbs.h", 16, Duration::from_secs(60));
}
