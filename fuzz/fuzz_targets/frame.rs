//! Fuzzes the frame parser: any bytes, as an Ethernet frame, an IP datagram
//! or a MAC control payload, must parse or fail with an error value, and
//! whatever parses must re-emit into a frame that parses to the same reprs.
#![no_main]

use libfuzzer_sys::fuzz_target;
use roce_wire::{Frame, RocePacket};

fuzz_target!(|data: &[u8]| {
    if let Ok(Frame::Roce(p)) = Frame::parse_ethernet(data) {
        let _ = p.check_icrc();
        reemit(&p);
    }
    if let Ok(p) = RocePacket::parse_ip(data) {
        let _ = p.check_icrc();
        reemit(&p);
    }
    let _ = Frame::parse_with_ethertype(0x8808, data);
});

fn reemit(p: &RocePacket<'_>) {
    let repr = p.to_repr();
    let mut buf = vec![0u8; repr.len()];
    let n = repr.emit(&mut buf).expect("a parsed packet re-emits");
    let q = match repr.eth {
        Some(_) => RocePacket::parse_ethernet(&buf[..n]),
        None => RocePacket::parse_ip(&buf[..n]),
    }
    .expect("a re-emitted packet parses");
    assert_eq!(q.bth, p.bth);
    assert_eq!(q.ext, p.ext);
    assert_eq!(q.payload, p.payload);
    q.check_icrc().expect("emit writes a valid ICRC");
}
