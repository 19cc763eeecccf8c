//! Fuzzes the parsers of `roce perf`'s own control connection
//! (crates/roce-cli/src/perf/messages.rs, included by path: the binary
//! crate cannot be linked, and that file uses only std and serde_json).
//! The input is what a peer sends on the TCP connection: its first bytes
//! go to the foreign-peer check, then it is read message by message (lines
//! of at most 64 KiB) until the first error, as the reader thread does.
//! Every message goes through each parser the tool applies to a peer's
//! message (the hello, endpoints, errors, types); whatever parses
//! re-encodes to a message that parses to the same value.
#![no_main]

use libfuzzer_sys::fuzz_target;
use serde_json::Value;

/// The error type the included file names (`super::error::PerfError`),
/// compiled in by path too.
#[allow(dead_code)]
#[path = "../../crates/roce-cli/src/perf/error.rs"]
mod error;

#[allow(dead_code)]
#[path = "../../crates/roce-cli/src/perf/messages.rs"]
mod messages;

use messages::{endpoints_from_json, layout, Endpoint, Params};

fn endpoint_round_trips(e: Endpoint) {
    assert_eq!(Endpoint::from_json(&e.to_json()).ok(), Some(e));
}

fn check(v: Value) {
    if let Ok(p) = Params::from_json(&v) {
        let back = Params::from_json(&p.to_json()).expect("a re-encoded hello parses");
        // The duration goes through a decimal text: equal up to rounding.
        let same = match (back.duration, p.duration) {
            (Some(a), Some(b)) => (a - b).abs() <= b * 1e-12,
            (a, b) => a == b,
        };
        assert!(same, "{:?} became {:?}", p.duration, back.duration);
        assert_eq!(
            Params {
                duration: None,
                ..back
            },
            Params {
                duration: None,
                ..p.clone()
            }
        );
        let (max_size, ring, slot) = layout(&p);
        assert!(max_size >= 8 && slot >= 2 * max_size && ring <= 512);
    }
    if let Ok(e) = Endpoint::from_json(&v) {
        endpoint_round_trips(e);
    }
    if let Ok((eps, mtu)) = endpoints_from_json(&v) {
        assert!(matches!(mtu, 256 | 512 | 1024 | 2048 | 4096));
        eps.into_iter().for_each(endpoint_round_trips);
    }
    let _ = messages::peer_error(&v);
    let _ = messages::type_of(&v);
    let _ = messages::expect_type(v, "hello");
}

fuzz_target!(|data: &[u8]| {
    let _ = messages::foreign_peer(data);
    let mut r = data;
    while let Ok(v) = messages::read_message(&mut r) {
        check(v);
    }
});
