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

use std::process::Command;
use std::time::Duration;

use roce_testkit::{text_of, Guard};

/// Runs C program `name` on the library; asserts exit 0 and `oks` lines
/// starting with "ok ".
fn run(name: &'static str, oks: usize, limit: Duration) {
    let Some(exe) = common::c_program(name, "infiniband/verbs.h") else {
        return;
    };
    let mut c = Command::new(&exe);
    c.env("LD_LIBRARY_PATH", common::dropin(&format!("{name}-dropin")))
        .env("ROCE_DEVICES", "lo");
    let o = Guard::spawn(c).wait(limit);
    let text = text_of(&o);
    assert!(o.status.success(), "status {:?}\n{text}", o.status);
    let n = text.lines().filter(|l| l.starts_with("ok ")).count();
    assert_eq!(n, oks, "{text}");
}

#[test]
fn memory_taken_away_under_the_engine_from_c() {
    run("memory", 20, Duration::from_secs(90));
}

#[test]
fn posting_polling_and_reregistering_under_peer_writes_from_c() {
    run("memstress", 4, Duration::from_secs(60));
}
