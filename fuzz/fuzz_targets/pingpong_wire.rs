//! Fuzzes the `ibv_*_pingpong` out-of-band address message parser of
//! `roce pingpong` (crates/roce-cli/src/pingpong/wire.rs, included by path:
//! the binary crate cannot be linked, and this file uses only std). Any
//! bytes must parse or fail with an error; whatever parses re-encodes to a
//! message that parses to the same address. The exchange functions are
//! driven over an in-memory stream too.
#![no_main]

use libfuzzer_sys::fuzz_target;

/// The error type the included file names (`super::wire_error::WireError`),
/// compiled in by path too.
#[allow(dead_code)]
#[path = "../../crates/roce-cli/src/pingpong/wire_error.rs"]
mod wire_error;

#[allow(dead_code)]
#[path = "../../crates/roce-cli/src/pingpong/wire.rs"]
mod wire;

use wire::{Dest, MSG_LEN};

/// An in-memory stream: reads come from the input, writes are discarded.
struct Stream<'a>(&'a [u8]);

impl std::io::Read for Stream<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        std::io::Read::read(&mut self.0, buf)
    }
}

impl std::io::Write for Stream<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fuzz_target!(|data: &[u8]| {
    if let Ok(d) = Dest::from_wire(data) {
        let msg = d.to_wire();
        assert_eq!(msg.len(), MSG_LEN);
        let back = Dest::from_wire(&msg).expect("a re-encoded address parses");
        assert_eq!(back.lid, d.lid);
        assert_eq!(back.qpn, d.qpn & 0xff_ffff);
        assert_eq!(back.psn, d.psn & 0xff_ffff);
        assert_eq!(back.gid, d.gid);
        let _ = wire::addr_of(d.gid);
        let _ = wire::address_line(true, false, &d);
    }
    let mine = [Dest::ZERO];
    let slots = 1 + usize::from(data.first().copied().unwrap_or(0) & 3);
    let _ = wire::client_exchange(&mut Stream(data), &mine, slots);
    let _ = wire::server_read(&mut Stream(data), slots);
    let _ = wire::server_finish(&mut Stream(data), &mine, slots);
});
