//! `tests/c/gids.c` on the library: the GID table of a loopback context
//! (its address, then ::1), an RDMA WRITE between QPs whose sgid_index
//! is 1, indexes beyond the table refused, and
//! `ibv_resolve_eth_l2_from_gid`. The context gets an address and a UDP
//! port of its own (`ROCE_ADDR`, `ROCE_PORT`), so that ::1 is free for
//! it whatever runs beside.

mod common;

use std::process::Command;
use std::time::Duration;

use roce_testkit::{text_of, Guard};

#[test]
fn gid_table_second_gid_traffic_and_l2_from_c() {
    let Some(exe) = common::c_program("gids", "infiniband/verbs.h") else {
        return;
    };
    let lo = roce_verbs::Device::by_name("lo").unwrap();
    if lo.gids().len() < 2 {
        eprintln!("skipped: the loopback interface has one address");
        return;
    }
    let port = roce_testkit::free_port();
    let mut c = Command::new(&exe);
    c.env("LD_LIBRARY_PATH", common::dropin("gids-dropin"))
        .env("ROCE_DEVICES", "lo")
        .env("ROCE_ADDR", "127.0.63.1")
        .env("ROCE_PORT", port.to_string());
    let o = Guard::spawn(c).wait(Duration::from_secs(60));
    let text = text_of(&o);
    assert!(o.status.success(), "status {:?}\n{text}", o.status);
    let oks = text.lines().filter(|l| l.starts_with("ok ")).count();
    assert_eq!(oks, 14, "{text}");
}
