//! The RoCE v2 wire format (InfiniBand Architecture Specification Vol 1
//! chapter 9 and Annex A17 "RoCEv2").
//!
//! Each header has a checked view over a byte buffer (`new_checked` verifies
//! the length once, after which no accessor can panic) and a plain `Repr`
//! with `parse` and `emit`, in the manner of smoltcp. On top of them:
//!
//! * [`RocePacket`] parses a whole Ethernet frame or IP datagram and
//!   validates every layer, returning a precise [`Error`] for each way a
//!   packet can be malformed; [`RocePacket::check_icrc`] verifies the ICRC;
//! * [`FrameRepr::emit`] builds a complete frame into a caller's buffer
//!   without allocating (IP checksum, UDP length, pad, ICRC);
//! * [`Frame`] classifies captured frames (RoCE, PAUSE/PFC, other);
//! * [`opcode`] is the opcode table: per opcode its transport, headers in
//!   wire order and payload rule;
//! * [`icrc`] computes the invariant CRC for IPv4 and IPv6;
//! * [`pfc`] parses and emits 802.3x PAUSE and 802.1Qbb PFC frames;
//! * [`mad`] and [`cm`] are the QP1 management datagrams and the
//!   communication manager's messages (REQ/REP/RTU/REJ/MRA/DREQ/DREP/SIDR)
//!   with rdma_cm's IP private-data header.
//!
//! The crate is `no_std`, forbids `unsafe_code`, and never allocates. Enable the
//! default `std` feature for run-time CPU detection in the CRC.
//!
//! Where it sits: at the bottom of the stack. The transport engine
//! (`roce-core`) builds and parses every packet with it, `roce inspect`
//! decodes captures with it, and the I/O layer uses it only to check and
//! fix ICRCs. The facts it encodes are summarised in the repository's
//! `docs/protocol.md` (§1–§5, §8).
//!
//! # Example
//!
//! Build an RC SEND_ONLY datagram, parse it back and verify its ICRC; one
//! flipped payload bit makes the check fail:
//!
//! ```
//! use roce_wire::{
//!     BthRepr, Ecn, ExtHeaders, FrameRepr, IpRepr, Ipv4Repr, Opcode, Psn, Qpn, RocePacket,
//!     UdpChecksum, UdpRepr, ROCE_V2_PORT,
//! };
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let repr = FrameRepr {
//!     eth: None, // an IP datagram; Some(EthernetRepr { .. }) for a whole frame
//!     ip: IpRepr::V4(Ipv4Repr {
//!         src: "10.0.0.1".parse()?,
//!         dst: "10.0.0.2".parse()?,
//!         dscp: 26,
//!         ecn: Ecn::Ect0,
//!         ident: 0,
//!         dont_frag: true,
//!         ttl: 64,
//!         payload_len: 0, // filled in by emit
//!     }),
//!     udp: UdpRepr { src_port: 0xc000, dst_port: ROCE_V2_PORT, checksum: UdpChecksum::Zero },
//!     bth: BthRepr::new(Opcode::RC_SEND_ONLY, Qpn::new(0x11), Psn::new(7)),
//!     ext: ExtHeaders::default(),
//!     payload: b"hello",
//! };
//! let mut buf = [0u8; 128];
//! let n = repr.emit(&mut buf)?; // IP checksum, lengths, pad and ICRC
//! let packet = RocePacket::parse_ip(&buf[..n])?;
//! assert_eq!(packet.bth.opcode, Opcode::RC_SEND_ONLY);
//! assert_eq!(packet.payload, b"hello");
//! packet.check_icrc()?;
//!
//! buf[n - 8] ^= 1; // a bit of the payload
//! assert!(RocePacket::parse_ip(&buf[..n])?.check_icrc().is_err());
//! # Ok(()) }
//! ```
#![cfg_attr(not(test), no_std)]
#![forbid(unsafe_code)]

mod field;
mod view;

pub mod aeth;
pub mod bth;
pub mod cm;
pub mod crc32;
mod emit;
pub mod error;
pub mod ethernet;
pub mod ext;
mod frame;
pub mod icrc;
pub mod ip;
pub mod ipv4;
pub mod ipv6;
pub mod mad;
mod meta;
pub mod opcode;
mod packet;
pub mod pfc;
pub mod types;
pub mod udp;

pub use aeth::{AethRepr, NakCode, Syndrome};
pub use bth::BthRepr;
pub use emit::FrameRepr;
pub use error::{Error, Layer, Result};
pub use ethernet::{EthernetRepr, MacAddr, VlanTag};
pub use ext::{AtomicEthRepr, DethRepr, ExtHeaders, FethRepr, RethRepr};
pub use frame::Frame;
pub use ip::{Ecn, IpRepr};
pub use ipv4::Ipv4Repr;
pub use ipv6::Ipv6Repr;
pub use meta::{Owner, RxHeader, RxMeta, Transmit};
pub use opcode::{Headers, MessageKind, Opcode, Operation, PayloadRule, Position, Transport};
pub use packet::RocePacket;
pub use pfc::MacControl;
pub use types::{Lkey, Msn, Pkey, Psn, Qkey, Qpn, Rkey};
pub use udp::{UdpChecksum, UdpRepr, ROCE_V2_PORT};
