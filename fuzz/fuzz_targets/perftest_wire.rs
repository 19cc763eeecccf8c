//! Fuzzes the parsers of perftest 4.5's exchange as `roce perf
//! --perftest` speaks it (crates/roce-cli/src/perf/perftest_wire.rs,
//! included by path: the binary crate cannot be linked, and that file uses
//! only std). Every parser gets the whole input; then the input is read
//! as the peer's side of the TCP exchange (version, two sizes, MTU, then
//! key strings and report values) and as the messages of the rdma_cm
//! channel (each in a 56-byte receive). No panic; whatever parses
//! re-encodes to a message that parses to the same keys.
#![no_main]

use libfuzzer_sys::fuzz_target;

/// The error type the included file names (`super::error::PerfError`),
/// compiled in by path too.
#[allow(dead_code)]
#[path = "../../crates/roce-cli/src/perf/error.rs"]
mod error;

#[allow(dead_code)]
#[path = "../../crates/roce-cli/src/perf/perftest_wire.rs"]
mod wire;

use wire::{Dest, CM_MSG_LEN, KEY_LEN};

fn key_string(b: &[u8]) {
    if let Ok(d) = Dest::parse(b) {
        let text = d.format();
        assert_eq!(text.len(), KEY_LEN);
        assert_eq!(Dest::parse(&text).ok(), Some(d));
        assert_eq!(wire::gid_of(d.addr()), d.gid);
    }
}

fn binary_key(b: &[u8]) {
    if let Ok(d) = wire::parse_dest(b) {
        assert_eq!(wire::parse_dest(&wire::dest_bytes(&d, 0)).ok(), Some(d));
        assert_eq!(wire::gid_of(d.addr()), d.gid);
    }
}

fn mtu(b: &[u8]) {
    for mine in [256, 1024, 4096] {
        let m = wire::agreed_mtu(b, mine);
        assert!(matches!(m, 256 | 512 | 1024 | 2048 | 4096) && m <= mine);
    }
}

/// The next `n` bytes of `s` (fewer at its end).
fn take<'a>(s: &mut &'a [u8], n: usize) -> &'a [u8] {
    let (head, rest) = s.split_at(n.min(s.len()));
    *s = rest;
    head
}

fuzz_target!(|data: &[u8]| {
    key_string(data);
    binary_key(data);
    mtu(data);
    let _ = wire::check_version(data);
    let _ = wire::report_value(data);

    // The TCP exchange: what the peer writes, in the order it is read.
    let mut s = data;
    let _ = wire::check_version(take(&mut s, 16));
    let _ = wire::report_value(take(&mut s, 4));
    let _ = wire::report_value(take(&mut s, 4));
    mtu(take(&mut s, 2));
    while !s.is_empty() {
        key_string(take(&mut s, KEY_LEN));
        for _ in 0..5 {
            let _ = wire::report_value(take(&mut s, 8));
        }
    }

    // The rdma_cm channel: each message read from a 56-byte receive.
    for m in data.chunks(CM_MSG_LEN) {
        let _ = wire::version_text(&m[..m.len().min(16)]);
        mtu(&m[..m.len().min(2)]);
        binary_key(m);
        let _ = wire::report_value(&m[..m.len().min(8)]);
    }
});
