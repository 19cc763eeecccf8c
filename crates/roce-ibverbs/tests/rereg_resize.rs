//! `tests/c/rereg_resize.c`, built against rdma-core's header and run on
//! the library: `ibv_rereg_mr` (data written by a peer through a
//! re-registered region arrives in its new memory under the old rkey;
//! new rights and PDs apply; every error as rdma-core returns it) and
//! `ibv_resize_cq` (a grown CQ holds more completions; shrinking below
//! those waiting is `EINVAL`).

mod common;

use std::process::Command;
use std::time::Duration;

use roce_testkit::{text_of, Guard};

#[test]
fn rereg_mr_and_resize_cq_from_c() {
    let Some(exe) = common::c_program("rereg_resize", "infiniband/verbs.h") else {
        return;
    };
    let mut c = Command::new(&exe);
    c.env("LD_LIBRARY_PATH", common::dropin("rereg-resize-dropin"))
        .env("ROCE_DEVICES", "lo");
    let o = Guard::spawn(c).wait(Duration::from_secs(60));
    let text = text_of(&o);
    assert!(o.status.success(), "status {:?}\n{text}", o.status);
    let oks = text.lines().filter(|l| l.starts_with("ok ")).count();
    assert_eq!(oks, 21, "{text}");
}
