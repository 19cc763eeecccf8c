//! `tests/c/ud_sl.c` on the library: a UD receive over RoCE v2 reports
//! its network header type in `sl` (2 IPv4, 1 IPv6: what UCX's UD
//! transport reads) through `ibv_poll_cq` and `ibv_wc_read_sl`, and its
//! GRH area holds the IP header where the kernel puts it; over GID 0
//! (IPv4) and GID 1 (`::1`). The context gets an address and a UDP port
//! of its own (`ROCE_ADDR`, `ROCE_PORT`), so that ::1 is free for it
//! whatever runs beside. The `ibv_wr_*` builder's UD sends, with and
//! without `ibv_wr_set_ud_addr`.

mod common;

use std::process::Command;
use std::time::Duration;

use roce_testkit::{text_of, Guard};

#[test]
fn ud_receives_report_the_network_header_type_in_sl() {
    let Some(exe) = common::c_program("ud_sl", "infiniband/verbs.h") else {
        return;
    };
    let lo = roce_verbs::Device::by_name("lo").unwrap();
    let v6 = lo.gids().len() >= 2;
    let port = roce_testkit::free_port();
    let mut c = Command::new(&exe);
    c.env("LD_LIBRARY_PATH", common::dropin("ud-sl-dropin"))
        .env("ROCE_DEVICES", "lo")
        .env("ROCE_ADDR", "127.0.62.1")
        .env("ROCE_PORT", port.to_string());
    let o = Guard::spawn(c).wait(Duration::from_secs(60));
    let text = text_of(&o);
    assert!(o.status.success(), "status {:?}\n{text}", o.status);
    let oks = text.lines().filter(|l| l.starts_with("ok ")).count();
    assert_eq!(oks, if v6 { 10 } else { 6 }, "{text}");
}
