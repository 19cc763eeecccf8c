//! Fuzzes the capture reader: any bytes, as a pcap or pcapng file, must
//! open or fail with an error value, and every record must read until the
//! end or an error (no panic, no endless loop: each record consumes bytes).
//! Each packet's link header is stripped and what follows decoded as
//! `roce inspect` does.
#![no_main]

use libfuzzer_sys::fuzz_target;
use roce_capture::{CaptureReader, Payload};
use roce_wire::{Frame, RocePacket};

fuzz_target!(|data: &[u8]| {
    let Ok(mut reader) = CaptureReader::new(data) else {
        return;
    };
    let _ = reader.format();
    let mut records = 0usize;
    while let Some(packet) = reader.next_packet() {
        let Ok(packet) = packet else { break };
        records += 1;
        // A record header is at least 12 bytes (pcapng SPB), so a reader
        // that returns more records than bytes loops without consuming.
        assert!(
            records <= data.len() / 12 + 1,
            "more records than the input can hold"
        );
        assert!(packet.file_offset <= data.len() as u64);
        assert!(packet.data.len() <= data.len());
        match packet.payload() {
            Ok(Payload::Ethernet(f)) => {
                if let Ok(Frame::Roce(p)) = Frame::parse_ethernet(f) {
                    let _ = p.check_icrc();
                }
            }
            Ok(Payload::Ip(d)) => {
                if let Ok(p) = RocePacket::parse_ip(d) {
                    let _ = p.check_icrc();
                }
            }
            Ok(Payload::Cooked { protocol, data }) => {
                let _ = Frame::parse_with_ethertype(protocol, data);
            }
            Ok(Payload::Unsupported(_)) | Err(_) => {}
        }
    }
    // After the end (or an error) the reader stays finished or keeps
    // returning values: it must not panic.
    let _ = reader.next_packet().map(|r| r.is_ok());
});
